//! What dashboards and scripts read: `GET /v1/settings` (every key in force, with its default
//! and what it takes), `GET /v1/scheduler` (the service snapshot as JSON),
//! `GET /v1/scheduler/events` (the same as Server-Sent Events: a `snapshot` event per change,
//! at most [`EVENTS_PER_SEC_MAX`] a second, each after an `observed` event for every log entry
//! new since the last: the observation stream of the app's run, typed, in `seq` order, read
//! as it is broadcast and continued across an apply) and
//! `GET /metrics` (Prometheus / OpenMetrics text).

use super::{ApiError, ApiState};
use crate::control::Unit;
use crate::metrics;
use crate::service::{LogEntry, ServiceSnapshot};
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{broadcast, watch};

/// The most snapshot events a second on `/v1/scheduler/events`.
pub const EVENTS_PER_SEC_MAX: u32 = 10;
const KEEP_ALIVE: Duration = Duration::from_secs(10);

/// `GET /v1/settings`: every setting in force (the live switches as the service holds them
/// now), its default, when a change takes effect and what values it takes.
pub async fn settings(State(state): State<ApiState>) -> Json<serde_json::Value> {
    let live = state.service().snapshot().settings;
    // the app's part as the control plane holds it (a new engine's keys change with an apply)
    Json(crate::config::schema::describe(
        &state.control.config().app,
        &live,
    ))
}

pub async fn scheduler(State(state): State<ApiState>) -> Json<ServiceSnapshot> {
    Json(state.service().snapshot())
}

pub async fn scheduler_events(
    State(state): State<ApiState>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, ApiError> {
    // the client's place, held by the stream until the client goes
    let place = state.limits.subscribe()?;
    // The first event is the current snapshot; each later one follows a change, of this
    // engine's service or of a new one in its place (an apply): the stream stays open. The
    // log's entries come from the stream of the app's run (subscribed before the first
    // snapshot is read), which an apply continues.
    let (_, entries) = state.service().events();
    let follow = Follow {
        units: state.control.watch_units(),
        rx: state.service().watch(),
        entries,
        pending: VecDeque::new(),
        next_seq: None,
    };
    let stream = futures_util::stream::unfold((follow, place), |(mut follow, place)| async move {
        let events = follow.next().await?;
        Some((events, (follow, place)))
    })
    .flat_map(|events| futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// One client's place in the event stream.
struct Follow {
    units: watch::Receiver<Arc<Unit>>,
    rx: watch::Receiver<ServiceSnapshot>,
    entries: broadcast::Receiver<LogEntry>,
    /// Entries received that no snapshot shows yet, in `seq` order.
    pending: VecDeque<LogEntry>,
    /// The first entry not sent yet (`None` before the first snapshot, whose `log[]` holds
    /// the history: the entries after it are sent as they come).
    next_seq: Option<u64>,
}

impl Follow {
    /// The next events: each entry new since the last snapshot, then the snapshot; `None`
    /// when the app stops.
    async fn next(&mut self) -> Option<Vec<Event>> {
        if self.next_seq.is_some() {
            tokio::time::sleep(Duration::from_secs(1) / EVENTS_PER_SEC_MAX).await;
            let follow = tokio::select! {
                changed = self.rx.changed() => match changed {
                    Ok(()) => false,
                    // the service stopped: wait for the one that takes its place
                    Err(_) => {
                        self.units.changed().await.ok()?;
                        true
                    }
                },
                unit = self.units.changed() => {
                    unit.ok()?;
                    true
                }
            };
            if follow {
                self.rx = self.units.borrow_and_update().service.watch();
            }
        }
        let snapshot = self.rx.borrow_and_update().clone();
        // the newest entry this snapshot shows: those up to it are sent before it
        let shown = snapshot.log.last().map(|e| e.seq);
        let mut events = Vec::new();
        if let (Some(from), Some(shown)) = (self.next_seq, shown) {
            for entry in self.entries_up_to(from, shown, &snapshot.log) {
                events.push(json_event("observed", &entry));
            }
        }
        events.push(json_event("snapshot", &snapshot));
        self.next_seq = Some(shown.map_or(self.next_seq.unwrap_or(0), |s| s + 1));
        Some(events)
    }

    /// The entries `from..=shown`: those the stream brought since, and the log's for any it
    /// did not.
    fn entries_up_to(&mut self, from: u64, shown: u64, log: &[LogEntry]) -> Vec<LogEntry> {
        loop {
            match self.entries.try_recv() {
                Ok(entry) => self.pending.push_back(entry),
                // some were missed: the log fills the gap
                Err(broadcast::error::TryRecvError::Lagged(_)) => {}
                Err(_) => break,
            }
        }
        entries_between(&mut self.pending, from, shown, log)
    }
}

/// The entries `from..=shown`, in order, taken from `pending` (what the stream sent, in
/// order); an entry it lacks (the client fell behind, or it was logged just before the client
/// came) is taken from the snapshot's log. Entries after `shown` stay pending.
fn entries_between(
    pending: &mut VecDeque<LogEntry>,
    from: u64,
    shown: u64,
    log: &[LogEntry],
) -> Vec<LogEntry> {
    let from_log = |from: u64, to: u64| {
        log.iter()
            .filter(move |e| e.seq >= from && e.seq < to)
            .cloned()
    };
    let mut out = Vec::new();
    let mut next = from;
    while let Some(entry) = pending.pop_front() {
        if entry.seq > shown {
            pending.push_front(entry);
            break;
        }
        if entry.seq < next {
            continue; // sent already, or in the first snapshot's log
        }
        out.extend(from_log(next, entry.seq));
        next = entry.seq + 1;
        out.push(entry);
    }
    out.extend(from_log(next, shown + 1));
    out
}

fn json_event(name: &str, data: &impl serde::Serialize) -> Event {
    Event::default()
        .event(name)
        .json_data(data)
        .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()))
}

pub async fn metrics(State(state): State<ApiState>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.service().metrics().encode(),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::{LogKind, Observed};

    fn entry(seq: u64) -> LogEntry {
        LogEntry {
            at_secs: seq as f64,
            kind: LogKind::Resumed,
            request_id: None,
            client_id: None,
            text: String::new(),
            seq,
            event: Observed::Resumed,
        }
    }

    fn seqs(entries: &[LogEntry]) -> Vec<u64> {
        entries.iter().map(|e| e.seq).collect()
    }

    #[test]
    fn the_stream_s_entries_go_out_once_in_order_up_to_the_snapshot_and_a_gap_comes_from_the_log() {
        let log: Vec<LogEntry> = (0..=6).map(entry).collect();
        // 2 was in the first snapshot; 4 was missed (the client fell behind); 7 is not shown yet
        let mut pending: VecDeque<LogEntry> = [2, 3, 5, 6, 7].into_iter().map(entry).collect();
        let sent = entries_between(&mut pending, 3, 6, &log);
        assert_eq!(seqs(&sent), [3, 4, 5, 6]);
        assert_eq!(
            seqs(pending.make_contiguous()),
            [7],
            "kept for its snapshot"
        );
        // nothing came on the stream: the snapshot's log says what is new
        let mut none = VecDeque::new();
        assert_eq!(seqs(&entries_between(&mut none, 5, 6, &log)), [5, 6]);
    }
}
