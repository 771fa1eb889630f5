//! What dashboards and scripts read: `GET /v1/settings` (every key in force, with its default
//! and what it takes), `GET /v1/scheduler` (the service snapshot as JSON),
//! `GET /v1/scheduler/events` (the same as Server-Sent Events, one per change, at most
//! [`EVENTS_PER_SEC_MAX`] a second) and `GET /metrics` (Prometheus / OpenMetrics text).

use super::{ApiError, ApiState};
use crate::metrics;
use crate::service::ServiceSnapshot;
use axum::Json;
use axum::extract::State;
use axum::http::header;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::Stream;
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
    Json(crate::config::schema::describe(&state.app, &live))
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
    let stream = futures_util::stream::unfold(
        (units, rx, true, place),
        move |(mut units, mut rx, first, place): (_, watch::Receiver<ServiceSnapshot>, bool, _)| async move {
            if !first {
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
                }
            }
            let snapshot = rx.borrow_and_update().clone();
            let event = Event::default()
                .event("snapshot")
                .json_data(&snapshot)
                .unwrap_or_else(|e| Event::default().event("error").data(e.to_string()));
            Some((Ok(event), (units, rx, false, place)))
        },
    );
    Ok(Sse::new(stream).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

pub async fn metrics(State(state): State<ApiState>) -> Response {
    (
        [(header::CONTENT_TYPE, metrics::CONTENT_TYPE)],
        state.service().metrics().encode(),
    )
        .into_response()
}
