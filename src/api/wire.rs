//! One streamed answer, written in any of the three wire formats. Each front end implements
//! [`WireWriter`] (how its format begins, writes a parsed piece, finishes, fails and keeps a
//! quiet stream alive); [`stream`] and [`collect`] are the one SSE state machine and the one
//! non-streamed assembly over any writer. The output parser sits above them (in [`Started`]),
//! so pauses and parks never show here.

use super::ApiError;
use super::generation::{KEEP_ALIVE, Next, Started};
use crate::chat::{Ending, Piece};
use crate::service::{Finished, StreamEvent};
use axum::response::sse::{Event, KeepAlive, Sse};
use serde_json::Value;
use std::convert::Infallible;

/// A wire format's writer for one answer. Every method returns the events to send, in order.
pub trait WireWriter: Send + 'static {
    /// Before anything is generated.
    fn begin(&mut self) -> Vec<Event>;
    /// A piece of parsed output: content, reasoning, or part of a tool call.
    fn piece(&mut self, piece: Piece) -> Vec<Event>;
    /// The request ended: the last events, and the whole answer (the non-streamed body).
    fn finish(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value);
    /// The request failed mid-stream: the events that say so (the stream ends after them).
    fn fail(&mut self, error: &ApiError) -> Vec<Event>;
    /// Nothing happened for [`KEEP_ALIVE`] (R13): events besides the SSE comment, if any.
    fn keep_alive(&mut self) -> Vec<Event>;
}

/// Why a stream ended without its last event.
fn gone() -> ApiError {
    ApiError::Internal("the request ended without an answer".into())
}

/// The answer as Server-Sent Events.
pub fn stream<W: WireWriter>(
    started: Started,
    writer: W,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    enum Stage {
        Begin,
        Streaming,
        Ended,
    }
    let batches = futures_util::stream::unfold(
        (started, writer, Stage::Begin),
        |(mut started, mut writer, stage)| async move {
            let last = match stage {
                Stage::Ended => return None,
                Stage::Begin => {
                    let events = writer.begin();
                    return Some((events, (started, writer, Stage::Streaming)));
                }
                Stage::Streaming => match started.next_or_idle().await {
                    Next::Idle => {
                        let events = writer.keep_alive();
                        return Some((events, (started, writer, Stage::Streaming)));
                    }
                    Next::Event(StreamEvent::Text(text)) => {
                        let pieces = started.parser.push(&text);
                        let events = pieces.into_iter().flat_map(|p| writer.piece(p)).collect();
                        return Some((events, (started, writer, Stage::Streaming)));
                    }
                    Next::Event(StreamEvent::Done(done)) => {
                        let (rest, ending) = started.parser.finish();
                        let mut events: Vec<Event> =
                            rest.into_iter().flat_map(|p| writer.piece(p)).collect();
                        events.extend(writer.finish(&done, &ending).0);
                        events
                    }
                    Next::Event(StreamEvent::Failed(failure)) => {
                        writer.fail(&ApiError::from(failure))
                    }
                    Next::Gone => writer.fail(&gone()),
                },
            };
            Some((last, (started, writer, Stage::Ended)))
        },
    );
    let events = futures_util::StreamExt::flat_map(batches, |batch| {
        futures_util::stream::iter(batch.into_iter().map(Ok))
    });
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

/// The whole answer, once the request ends (the non-streamed response's body).
pub async fn collect<W: WireWriter>(
    mut started: Started,
    mut writer: W,
) -> Result<Value, ApiError> {
    loop {
        match started.next_or_idle().await {
            Next::Idle => {}
            Next::Gone => return Err(gone()),
            Next::Event(StreamEvent::Text(text)) => {
                for piece in started.parser.push(&text) {
                    writer.piece(piece);
                }
            }
            Next::Event(StreamEvent::Done(done)) => {
                let (rest, ending) = started.parser.finish();
                for piece in rest {
                    writer.piece(piece);
                }
                return Ok(writer.finish(&done, &ending).1);
            }
            Next::Event(StreamEvent::Failed(failure)) => return Err(ApiError::from(failure)),
        }
    }
}

/// The HTTP response: streamed or whole, with the request's id in `x-request-id` (the id that
/// `DELETE /v1/requests/{id}` and `/v1/scheduler` use).
pub async fn respond<W: WireWriter>(
    started: Started,
    writer: W,
    streamed: bool,
) -> Result<axum::response::Response, ApiError> {
    use axum::response::IntoResponse;
    let id = started.id;
    let mut response = if streamed {
        stream(started, writer).into_response()
    } else {
        axum::Json(collect(started, writer).await?).into_response()
    };
    response.headers_mut().insert(
        super::REQUEST_ID_HEADER,
        axum::http::HeaderValue::from(id.0),
    );
    Ok(response)
}
