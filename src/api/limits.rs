//! Bounds on the work a request causes before it reaches the scheduler's queue (hardening,
//! DEPLOYMENT.md §5): request preparation (body parsing, tool schemas, grammars, tokenizing)
//! runs on blocking threads, at most `prepare_concurrency` at once with at most
//! `prepare_waiting_max` waiting; a body must arrive within `body_read_timeout_secs`; the event
//! stream takes at most `event_subscribers_max` clients.

use super::ApiError;
use crate::config::AppSettings;
use axum::body::Body;
use axum::extract::Request;
use axum::middleware::Next;
use axum::response::Response;
use futures_util::StreamExt;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::sync::Semaphore;

/// The places for preparing requests, and the count of those waiting for one.
#[derive(Debug, Clone)]
pub struct Limits {
    places: Arc<Semaphore>,
    places_total: usize,
    waiting: Arc<AtomicUsize>,
    waiting_max: usize,
    subscribers: Arc<AtomicUsize>,
    subscribers_max: usize,
}

impl Limits {
    pub fn new(app: &AppSettings) -> Self {
        let places_total = app.prepare_places();
        Self {
            places: Arc::new(Semaphore::new(places_total)),
            places_total,
            waiting: Arc::default(),
            waiting_max: app.prepare_waiting_max as usize,
            subscribers: Arc::default(),
            subscribers_max: app.event_subscribers_max as usize,
        }
    }

    /// Runs `work` on a blocking thread once a place is free; a 429 `server_busy` when
    /// `prepare_waiting_max` requests already wait. The place is held until `work` returns,
    /// even when the client goes away meanwhile (the thread cannot be stopped).
    pub async fn prepare<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, ApiError> + Send + 'static,
    ) -> Result<T, ApiError> {
        let permit = match self.places.clone().try_acquire_owned() {
            Ok(permit) => permit,
            Err(_) => {
                let waiting =
                    Waiting::enter(&self.waiting, self.waiting_max).ok_or(ApiError::Busy {
                        what: "request preparation",
                        key: "prepare_waiting_max",
                        limit: u32::try_from(self.waiting_max).unwrap_or(u32::MAX),
                        retry_after_secs: 1,
                    })?;
                let permit = self.places.clone().acquire_owned().await;
                drop(waiting);
                permit.map_err(|e| ApiError::Internal(e.to_string()))?
            }
        };
        tokio::task::spawn_blocking(move || {
            let _place = permit;
            work()
        })
        .await
        .map_err(|e| ApiError::Internal(e.to_string()))?
    }

    /// Requests being prepared and waiting to be (for tests and the log).
    pub fn preparing(&self) -> (usize, usize) {
        (
            self.places_total - self.places.available_permits(),
            self.waiting.load(Ordering::SeqCst),
        )
    }

    /// A place among the event stream's clients, held while the stream lives; a 429
    /// `server_busy` when all `event_subscribers_max` are taken.
    pub fn subscribe(&self) -> Result<Subscriber, ApiError> {
        Waiting::enter(&self.subscribers, self.subscribers_max)
            .map(|place| Subscriber { _place: place })
            .ok_or(ApiError::Busy {
                what: "scheduler event stream clients",
                key: "event_subscribers_max",
                limit: u32::try_from(self.subscribers_max).unwrap_or(u32::MAX),
                retry_after_secs: 5,
            })
    }
}

/// One counted place, given back on drop.
#[derive(Debug)]
struct Waiting(Arc<AtomicUsize>);

impl Waiting {
    fn enter(count: &Arc<AtomicUsize>, max: usize) -> Option<Self> {
        count
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| {
                (n < max).then_some(n + 1)
            })
            .ok()
            .map(|_| Self(count.clone()))
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// An event-stream client's place.
#[derive(Debug)]
pub struct Subscriber {
    _place: Waiting,
}

/// The error a request body yields when its deadline passes (found again by [`timed_out`]).
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct BodyDeadline;

/// Middleware: the request's body must arrive within `secs` in all (a client sending one byte
/// at a time cannot hold a connection and a handler longer than that).
pub async fn body_deadline(secs: u32, request: Request, next: Next) -> Response {
    let (parts, body) = request.into_parts();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(u64::from(secs));
    let frames = body.into_data_stream();
    let timed = futures_util::stream::unfold(Some(frames), move |frames| async move {
        let mut frames = frames?;
        match tokio::time::timeout_at(deadline, frames.next()).await {
            Ok(Some(frame)) => Some((frame, Some(frames))),
            Ok(None) => None,
            Err(_) => Some((Err(axum::Error::new(BodyDeadline)), None)),
        }
    });
    next.run(Request::from_parts(parts, Body::from_stream(timed)))
        .await
}

/// Whether a body read failed because its deadline passed.
pub fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.is::<BodyDeadline>() {
            return true;
        }
        next = e.source();
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(places: u32, waiting: u32) -> Limits {
        Limits::new(&AppSettings {
            prepare_concurrency: places,
            prepare_waiting_max: waiting,
            event_subscribers_max: 2,
            ..AppSettings::default()
        })
    }

    #[tokio::test]
    async fn preparation_beyond_its_places_and_waiting_room_is_refused_with_a_429() {
        let limits = limits(1, 1);
        let (release, hold) = std::sync::mpsc::channel::<()>();
        let busy = {
            let limits = limits.clone();
            tokio::spawn(async move {
                limits
                    .prepare(move || {
                        hold.recv().ok();
                        Ok(1)
                    })
                    .await
            })
        };
        while limits.preparing().0 < 1 {
            tokio::task::yield_now().await;
        }
        let waiter = {
            let limits = limits.clone();
            tokio::spawn(async move { limits.prepare(|| Ok(2)).await })
        };
        while limits.preparing().1 < 1 {
            tokio::task::yield_now().await;
        }
        let refused = limits.prepare(|| Ok(3)).await.unwrap_err();
        assert!(
            matches!(
                refused,
                ApiError::Busy {
                    key: "prepare_waiting_max",
                    ..
                }
            ),
            "{refused:?}"
        );
        assert_eq!(refused.status(), axum::http::StatusCode::TOO_MANY_REQUESTS);
        release.send(()).unwrap();
        assert_eq!(busy.await.unwrap().unwrap(), 1);
        assert_eq!(waiter.await.unwrap().unwrap(), 2);
        assert_eq!(limits.preparing(), (0, 0));
        assert_eq!(limits.prepare(|| Ok(4)).await.unwrap(), 4);
    }

    #[test]
    fn event_stream_clients_beyond_the_cap_are_refused_until_one_leaves() {
        let limits = limits(1, 1);
        let first = limits.subscribe().unwrap();
        let _second = limits.subscribe().unwrap();
        let refused = limits.subscribe().unwrap_err();
        assert!(
            matches!(
                refused,
                ApiError::Busy {
                    key: "event_subscribers_max",
                    limit: 2,
                    ..
                }
            ),
            "{refused:?}"
        );
        drop(first);
        assert!(limits.subscribe().is_ok());
    }
}
