//! What dashboards and scripts read: `GET /v1/settings` (every key in force, with its default
//! and what it takes), `GET /v1/scheduler` (the service snapshot as JSON),
//! `GET /v1/scheduler/events` (the same as Server-Sent Events: a `snapshot` event per change,
//! at most [`EVENTS_PER_SEC_MAX`] a second, each after an `observed` event for every log entry
//! new since the last: the service's observation stream, typed, in `seq` order) and
//! `GET /metrics` (Prometheus / OpenMetrics text).

use super::{ApiError, ApiState};
use crate::metrics;
use crate::service::ServiceSnapshot;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::{Stream, StreamExt};
use std::convert::Infallible;
use std::time::Duration;
use tokio::sync::watch;

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
    let gap = Duration::from_secs(1) / EVENTS_PER_SEC_MAX;
    // the client's place, held by the stream until the client goes
    let place = state.limits.subscribe()?;
    // The first event is the current snapshot; each later one follows a change, of this
    // engine's service or of a new one in its place (an apply): the stream stays open.
    let units = state.control.watch_units();
    let rx = state.service().watch();
    // `next_seq`: the first log entry not sent yet (`None` before the first snapshot, whose
    // `log[]` holds the history: the entries after it are sent as they come)
    let stream = futures_util::stream::unfold(
        (units, rx, None, place),
        move |(mut units, mut rx, next_seq, place): (
            _,
            watch::Receiver<ServiceSnapshot>,
            Option<u64>,
            _,
        )| async move {
            let mut next_seq = next_seq;
            if next_seq.is_some() {
                tokio::time::sleep(gap).await;
                let follow = tokio::select! {
                    changed = rx.changed() => match changed {
                        Ok(()) => false,
                        // the service stopped: wait for the one that takes its place
                        Err(_) => {
                            units.changed().await.ok()?;
                            true
                        }
                    },
                    unit = units.changed() => {
                        unit.ok()?;
                        true
                    }
                };
                if follow {
                    rx = units.borrow_and_update().service.watch();
                    // a new service numbers its entries from 0
                    next_seq = Some(0);
                }
            }
            let snapshot = rx.borrow_and_update().clone();
            let mut events = Vec::new();
            let last_seq = snapshot.log.last().map(|e| e.seq);
            if let Some(from) = next_seq {
                for entry in snapshot.log.iter().filter(|e| e.seq >= from) {
                    events.push(json_event("observed", entry));
                }
            }
            events.push(json_event("snapshot", &snapshot));
            let next_seq = Some(last_seq.map_or(next_seq.unwrap_or(0), |s| s + 1));
            Some((events, (units, rx, next_seq, place)))
        },
    )
    .flat_map(|events| futures_util::stream::iter(events.into_iter().map(Ok::<_, Infallible>)));
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
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
