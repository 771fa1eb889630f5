//! What observation keeps for the app's run, above the engine unit: the control plane makes one
//! [`Observation`] (in `Control::start`) and hands it to every service it starts (an apply, a
//! fallback), so a new engine continues it and an apply resets nothing:
//!
//! - the clock (`uptime_secs`, every `at_secs`) and the request ids;
//! - the event stream: each event's `seq`, the log, and a broadcast of each entry as it is
//!   logged (what `/v1/scheduler/events` sends);
//! - the ended requests' history (`finished[]`, the `cost` sums, the first-token samples, the
//!   cache's hits) and the scheduler totals of the engines before this one;
//! - the Prometheus registry, fed by the stream alone ([`Observation::emit`] and
//!   [`Observation::record`] are its inputs).
//!
//! One service runs at a time (an apply stops the old one before it starts the new one), so
//! the lock is never contended; it lets the API subscribe to the stream and read the log at
//! one instant.

use super::actor::RequestIds;
use super::ended::Ended;
use super::event_log::{EventLog, LogEntry, SharedLog};
use super::observed::Observed;
use crate::metrics::{Fact, Metrics};
use crate::scheduler::{Cancellations, Counters};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;
use tokio::sync::broadcast;

/// Log entries a subscriber may fall behind by before it misses some (it then reads them
/// from the log).
const EVENTS_BEHIND_MAX: usize = 1024;

/// Observation for the app's run; cheap to clone (the clones share it).
#[derive(Clone)]
pub struct Observation(Arc<Inner>);

struct Inner {
    epoch: Instant,
    ids: RequestIds,
    metrics: Metrics,
    events: broadcast::Sender<LogEntry>,
    kept: Mutex<Kept>,
}

/// What is kept across services, behind the lock.
pub(super) struct Kept {
    pub log: EventLog,
    pub ended: Ended,
    /// The scheduler totals of the services that ran before the one running now.
    pub totals_before: Counters,
}

impl std::fmt::Debug for Observation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Observation")
    }
}

impl Default for Observation {
    fn default() -> Self {
        let epoch = Instant::now();
        let (events, _) = broadcast::channel(EVENTS_BEHIND_MAX);
        Self(Arc::new(Inner {
            epoch,
            ids: RequestIds::default(),
            metrics: Metrics::new(),
            events,
            kept: Mutex::new(Kept {
                log: EventLog::default(),
                ended: Ended::new(epoch),
                totals_before: Counters::default(),
            }),
        }))
    }
}

impl Observation {
    /// When the app's run started: the clock of `uptime_secs` and every `at_secs`.
    pub fn epoch(&self) -> Instant {
        self.0.epoch
    }

    pub(super) fn ids(&self) -> &RequestIds {
        &self.0.ids
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        self.0.metrics.encode()
    }

    /// A request's output grammar was taken from the cache (`cached`) or built (the API
    /// builds grammars, above the service).
    pub fn note_grammar(&self, cached: bool) {
        self.record(&Fact::Grammar { cached });
    }

    /// The log as it is now and every entry logged after it, in `seq` order (a receiver that
    /// falls behind by more than [`EVENTS_BEHIND_MAX`] is told it lagged).
    pub fn subscribe(&self) -> (SharedLog, broadcast::Receiver<LogEntry>) {
        let kept = self.lock();
        (kept.log.entries(), self.0.events.subscribe())
    }

    /// A fact that is not a line of the log (a first token, the totals after a change).
    pub(super) fn record(&self, fact: &Fact<'_>) {
        self.0.metrics.record(fact);
    }

    /// Logs an event (its `seq` is given here), takes the views from it (an ended request's
    /// record, a first slot's cache hit or miss), feeds the metrics what it says, and sends it
    /// to the stream's subscribers.
    pub(super) fn emit(&self, entry: LogEntry) {
        if let Some(fact) = fact_of(&entry.event) {
            self.record(&fact);
        }
        let mut kept = self.lock();
        match &entry.event {
            Observed::Ended { figures, .. } => kept.ended.keep(figures.clone()),
            Observed::Admitted { prompt_tokens_held } => kept.ended.admitted(*prompt_tokens_held),
            _ => {}
        }
        let entry = kept.log.push(entry);
        // none subscribed is no error
        let _ = self.0.events.send(entry);
    }

    pub(super) fn lock(&self) -> MutexGuard<'_, Kept> {
        self.0.kept.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What an event of the stream says to the metrics.
fn fact_of(event: &Observed) -> Option<Fact<'static>> {
    match event {
        Observed::Admitted { prompt_tokens_held } => Some(Fact::Admitted {
            prompt_tokens_held: *prompt_tokens_held,
        }),
        Observed::Ended { figures, .. } => Some(Fact::Ended {
            priority: figures.priority,
            finish_reason: figures.finish_reason(),
            prompt_tokens_read: figures.prompt_tokens_read,
            prompt_tokens_held: figures.prompt_tokens_held,
            output_tokens: figures.output_tokens,
            queue_wait_secs: figures.queue_wait_secs,
            parked_secs: figures.parked_secs,
            pauses: figures.pauses,
        }),
        _ => None,
    }
}

/// Two runs' scheduler totals added, field by field (every field named, so a new counter of
/// the scheduler does not compile until it is added here too).
pub(super) fn add(a: &Counters, b: &Counters) -> Counters {
    let (ca, cb) = (&a.cancellations, &b.cancellations);
    Counters {
        give_ways_higher_priority: a.give_ways_higher_priority + b.give_ways_higher_priority,
        give_ways_shorter_left: a.give_ways_shorter_left + b.give_ways_shorter_left,
        pauses: a.pauses + b.pauses,
        resumes: a.resumes + b.resumes,
        read_parks: a.read_parks + b.read_parks,
        parks_in_pool: a.parks_in_pool + b.parks_in_pool,
        parks_to_host: a.parks_to_host + b.parks_to_host,
        read_restores: a.read_restores + b.read_restores,
        kv_parks: a.kv_parks + b.kv_parks,
        processed_prefix_losses: a.processed_prefix_losses + b.processed_prefix_losses,
        cancellations: Cancellations {
            waiting: ca.waiting + cb.waiting,
            reading: ca.reading + cb.reading,
            decoding: ca.decoding + cb.decoding,
            parked: ca.parked + cb.parked,
        },
        engine_restarts: a.engine_restarts + b.engine_restarts,
        refusals: a.refusals + b.refusals,
        finished: a.finished + b.finished,
        failed: a.failed + b.failed,
        checkpoint_restores: a.checkpoint_restores + b.checkpoint_restores,
        checkpoint_tokens_saved: a.checkpoint_tokens_saved + b.checkpoint_tokens_saved,
        output_cap_cuts: a.output_cap_cuts + b.output_cap_cuts,
    }
}
