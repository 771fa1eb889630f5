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
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
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
    /// `prepare_waiting_max` requests already wait. The place is held until `work` returns;
    /// when the client goes away meanwhile, [`client_gone`] turns true inside `work`, which
    /// stops where it can (between grammar conversions; a running one cannot be stopped).
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
        let gone = Arc::new(AtomicBool::new(false));
        // dropped with this future: when the client leaves, axum drops it
        let _leaving = SetOnDrop(gone.clone());
        tokio::task::spawn_blocking(move || {
            let _place = permit;
            GONE.with(|flag| *flag.borrow_mut() = Some(gone));
            super::omitted::clear();
            let result = work();
            super::omitted::report();
            GONE.with(|flag| *flag.borrow_mut() = None);
            result
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

thread_local! {
    /// Set by [`Limits::prepare`] on the thread that runs a request's preparation: true once
    /// its client has left.
    static GONE: std::cell::RefCell<Option<Arc<AtomicBool>>> = const { std::cell::RefCell::new(None) };
}

/// Whether the client of the request prepared on this thread has left (false outside
/// [`Limits::prepare`]).
pub fn client_gone() -> bool {
    GONE.with(|flag| {
        flag.borrow()
            .as_ref()
            .is_some_and(|gone| gone.load(Ordering::SeqCst))
    })
}

/// Sets its flag when dropped.
struct SetOnDrop(Arc<AtomicBool>);

impl Drop for SetOnDrop {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
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

    #[tokio::test]
    async fn preparation_sees_its_client_leave_and_its_place_comes_back() {
        let limits = limits(1, 1);
        let (started, seen_start) = std::sync::mpsc::channel::<()>();
        let (saw, seen_gone) = std::sync::mpsc::channel::<bool>();
        let request = {
            let limits = limits.clone();
            tokio::spawn(async move {
                limits
                    .prepare(move || {
                        assert!(!client_gone());
                        started.send(()).ok();
                        let t = std::time::Instant::now();
                        while !client_gone() && t.elapsed() < Duration::from_secs(10) {
                            std::thread::sleep(Duration::from_millis(5));
                        }
                        saw.send(client_gone()).ok();
                        Err::<(), _>(ApiError::ClientGone)
                    })
                    .await
            })
        };
        tokio::task::spawn_blocking(move || seen_start.recv().unwrap())
            .await
            .unwrap();
        // the client leaves: axum drops the handler's future
        request.abort();
        let gone = tokio::task::spawn_blocking(move || seen_gone.recv().unwrap())
            .await
            .unwrap();
        assert!(gone, "the work never saw its client leave");
        while limits.preparing().0 > 0 {
            tokio::task::yield_now().await;
        }
        assert!(!client_gone(), "outside a preparation nobody has left");
        assert_eq!(limits.prepare(|| Ok(5)).await.unwrap(), 5);
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
