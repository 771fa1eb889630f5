//! The service: one async actor that owns the scheduler, the engine worker and every live
//! request's response channel, UTF-8 decoder and stop-string matcher (they live above every
//! pause, park and give-way, so a pause is invisible to a client). A cloneable
//! [`ServiceHandle`] submits, cancels, reads snapshots and sends commands; a snapshot is
//! published after every change.
//!
//! - `handle`: the handle, the submission and stream types;
//! - `actor`: the task: its loop, commands and scheduler events;
//! - `execute`: the scheduler's actions carried out, in order;
//! - `engine_link`: the engine worker of the current generation, its open requests and step;
//! - `streams` and `live`: the clients' streams (decoder, stop matcher) and what delivering
//!   measures;
//! - `observed` and `event_log`: the one observation stream (typed events with client ids,
//!   emitted once by `history`) and the log of it that the snapshot carries;
//! - `observation` and `ended`: what goes on across engines, made once by the control plane
//!   (the clock, ids, the stream's `seq` and log, the ended requests, the metrics, which the
//!   stream alone feeds);
//! - `cost`: what parks cost each request and what pauses saved, per request and summed;
//! - `upstream_watch`: the upstream engine's own figures, read once a second (`engine:
//!   upstream`);
//! - `publish` and `snapshot`: what the API and the GUI see (stable field names, no prompt
//!   text), and the Prometheus levels; `shared`: the lists a snapshot shares with the last.

mod actor;
mod cost;
mod ended;
mod engine_link;
mod event_log;
mod execute;
mod failure_words;
mod handle;
mod history;
mod live;
mod observation;
mod observed;
mod publish;
mod requests;
mod shared;
mod snapshot;
mod streams;
mod upstream_watch;

pub use actor::{RequestIds, ServiceOptions, spawn};
pub use handle::{
    ControlError, Failure, Finished, RequestOrigin, RequestState, RequestStream, RestartReport,
    Route, ServiceHandle, SettingsChange, StreamEvent, Submission, SubmitError, Usage,
    user_agent_product,
};
pub use observation::Observation;
// The value types the service's callers name in what they send and receive: the scheduler's
// and the protocol's, re-exported so that `api` and `gui` depend on the service alone (the
// layer rule `src/layer_rules.rs` checks).
pub use crate::protocol::{DeviceFacts, Grammar, Sampling};
pub use crate::scheduler::{
    ConfigError as SettingsError, ConversationView, FinishReason, GiveWay, KeptIn, ParkCause,
    ParkKind, ParkedIn, ParkedView, PriorityOrder, RequestStatus, SchedulerSettings, SlotStatus,
    SlotView as SchedulerSlotView, WaitingView, resolve_priority,
};
pub use cost::{COST_WINDOW_SECS, CostClass, CostView, FinishedRequest, cost_view};
pub use event_log::{LOG_ENTRIES_MAX, LengthRefusal, LogEntry, LogKind, SharedLog};
pub use failure_words::{failure_headline, what_to_try};
pub use observed::{GaveWayRule, Observed, ParkReason, Winner};
pub use requests::{LiveFacts, RequestRow, effective_priority_words, priority_words, request_rows};
pub use shared::Shared;
pub use snapshot::{
    ConversationCacheView, CountersView, EngineStatus, EngineView, ServiceSnapshot, SlotView,
    TtftSample, chosen_by_words, context_words, cpu_code_words, mode_for,
};
pub use upstream_watch::{UPSTREAM_POLL, UpstreamView, upstream_words};
// the upstream's readings the snapshot carries, named from here as the protocol's are
pub use crate::upstream::{SlotState as UpstreamSlot, UpstreamKind, UpstreamLoad};

#[cfg(test)]
mod observation_tests;
