//! The scheduler: SCHEDULING.md's rules (precedence, R1-R13) as a pure, synchronous state
//! machine. No tokio, no channels, no clock reads, no I/O: the service passes every event with
//! the time (`now`, a `Duration` since its epoch) and executes the actions it gets back.
//!
//! # Submodules
//!
//! - `settings`: [`SchedulerSettings`] (every parameter, serde, defaults, `validate()`),
//!   [`ConfigError`], [`resolve_priority`].
//! - `types`: the contract: [`EngineFacts`], [`Event`], [`Action`], [`Step`], [`Outcome`].
//! - `lifecycle`: the request lifecycle (`Phase`) and slot lifecycle (`SlotState`) enums and
//!   their transition tables; `Scheduler::set_phase` / `set_slot` are the only writers.
//! - `prefix`: token lists with chained block hashes (common prefix in O(log n + 64)), and the
//!   held-for-sure cut for engines that keep checkpoints only at the turn token.
//! - `kv`: the KV cell budget: reservations, growth, eviction of idle conversations to the
//!   host-RAM conversation cache, parking places.
//! - `room`: cells in use and pledged, what the engine holds after a step, and the transient
//!   room of a conversation loaded whole before it is cut.
//! - `decide`: the precedence list at each step boundary (pause, read lane, compose).
//! - `admission`: filling free slots (R1): how a request gets its sequence, parked ones back.
//! - `events`: one handler per request event (arrival, cancel, step done, settings).
//! - `engine_events`: the engine's events (ready, death, user restart, failed start; R10).
//! - `snapshot`: [`Snapshot`], the plain read-only view for the API and the GUI.
//!
//! # Contract
//!
//! - Call [`Scheduler::handle`] for every event; execute [`Outcome::actions`] in order and log
//!   [`Outcome::diagnostics`] (illegal transitions and protocol faults; empty when healthy).
//! - At most one [`Action::Step`] is outstanding. After running it, send
//!   [`Event::StepDone`] with one [`StepOutput`] per request that sampled a token: every
//!   decoding request of the step and the chunk's request when `is_last`. The chunk counts as
//!   read when the step is done. When a sampled token ends the request (EOG or a stop string,
//!   which the service detects), set `finished: Some(FinishReason::Stop)`; the scheduler ends
//!   requests at `max_tokens` itself (`Length`).
//! - Send the client exactly the tokens of [`Action::Deliver`] (indices count from 0 per
//!   request, across pauses). A cancelled request's later tokens are never delivered.
//! - Every admitted request ends exactly once with [`Action::Finish`] or [`Action::Fail`]; a
//!   refused one (`admit` returned `Err(Refused)`) gets no action at all.
//! - If the engine dies, send [`Event::EngineDied`] (the outstanding step is void); execute
//!   [`Action::RestartEngine`] after its delay and answer with [`Event::EngineReady`] or
//!   [`Event::EngineStartFailed`]. After `restart_attempts_max` failed starts in a row the
//!   engine stays failed ([`Scheduler::engine_failed`]) until [`Event::RestartRequested`]
//!   (the user's retry); arrivals meanwhile are refused with the reason.
//! - Keep-alives (R13) and liveness deadlines (R10) are the service's timers.
//!
//! - Every `Finish` / `Fail` carries [`RequestStats`] (queue wait, prompt tokens held and
//!   read, output tokens, give-ways, pauses) for the metrics; TTFT is the first `Deliver`.
//!
//! # Choices the rules leave open
//!
//! - Time: `now` is a [`Now`] (`Duration` since the service's epoch); the scheduler only
//!   subtracts and compares. Decisions are taken at step boundaries (an event with no step
//!   outstanding); an arrival during a step is admitted at the next boundary.
//! - Parks are moves: the slot is cleared and the sequence lives at the [`ParkPlace`] until
//!   [`Action::Restore`] or [`Action::DropParked`]. A spare engine sequence is used when one is
//!   free and its cells do not keep the newcomer out; else host RAM.
//! - In batch mode nothing is ever paused (R6), except when the KV pool cannot give a decoding
//!   request one more cell even after every idle conversation left: then the lowest-ranked
//!   decoding request is parked to host RAM (counted as `kv_parks`) and resumes first.
//! - R1's "free slot holding the longest prefix" ignores prefixes shorter than one hashed
//!   block (64 tokens, a shared BOS or template start) while an empty slot exists, so such a
//!   match does not overwrite a conversation.
//! - With `solo_priority` off (R12 rollback), paused decodes resume before anything else, in
//!   arrival order; with it on, a paused request goes ahead of fresh ones of equal effective
//!   priority (R7).
//! - Cells: a request reserves its prompt plus `output_reserve_tokens` at admission and
//!   grows by that much when its output outgrows it; idle conversations move to the host-RAM
//!   conversation cache (`host_cache_conversations_max`, least recently used out) before a
//!   request waits for cells. Requests wait for cells in strict R1 order; none is refused for
//!   lack of cells (a prompt is refused only when it alone exceeds the context, R11).
//! - An engine reset (death, user restart, new handshake) rebuilds the slot table wholesale;
//!   every other slot change goes through `set_slot`.
//! - `processed_prefix_losses` is counted, not assumed: each request keeps the furthest prompt
//!   position it ever read, and a chunk starting below it adds the difference. It stays 0 when
//!   healthy, since a read keeps `read_to` across parks and give-ways and continues on the same
//!   absolute chunk boundaries (the test engine counts re-read positions independently).

mod admission;
mod decide;
mod engine_events;
mod events;
mod kv;
mod lifecycle;
mod outlook;
mod prefix;
mod room;
mod settings;
mod snapshot;
mod types;

#[cfg(test)]
mod tests;

pub use engine_events::{DIED_WHILE_FAILED, ENGINE_STARTING_RETRY_SECS, RESTART_DURING_START};
pub use outlook::{PauseOutlookView, PauseVerdict};
pub use settings::{
    ConfigError, GiveWay, MaxTokensOverContext, PriorityOrder, PriorityRange, SchedulerSettings,
    resolve_priority,
};
pub use snapshot::{
    Cancellations, ConversationView, Counters, EngineCondition, KeptIn, Mode, ParkCause, ParkKind,
    ParkedIn, ParkedView, RequestStatus, SlotStatus, SlotView, Snapshot, WaitingView,
};
pub use types::{
    Action, Checkpoint, Chunk, ConversationId, EngineFacts, Event, FailKind, FinishReason,
    NewRequest, Now, Outcome, ParkPlace, Refusal, Refused, RequestStats, Step, StepOutput,
};

/// The id types are the protocol's: the only thing this crate imports of the app.
pub use strata_protocol::ids;

use ids::{RequestId, SeqId};
use lifecycle::{Conversation, Phase, Request, Seq, SeqState, Slot, SlotState};
use std::collections::{BTreeMap, VecDeque};
use strata_protocol::pool::CellPool;

/// The engine as the scheduler sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum EngineState {
    Ready,
    /// A start is under way; `attempt` counts failed starts in a row plus one.
    Starting {
        attempt: u32,
    },
    /// No engine and no work: it died after it was ready. The next arrival starts it.
    Down,
    /// `restart_attempts_max` starts failed in a row; `reason` is the last one's. Only a user
    /// restart starts it again: an arrival would start an engine that fails the same way, so
    /// it is refused with the reason (R10).
    Failed {
        reason: String,
    },
}

/// The scheduler. Cheap to clone (prompts are shared).
#[derive(Debug, Clone)]
pub struct Scheduler {
    settings: SchedulerSettings,
    facts: EngineFacts,
    engine: EngineState,
    requests: BTreeMap<RequestId, Request>,
    /// Waiting for a slot, in arrival order.
    waiting: Vec<RequestId>,
    /// Parked, in parking order.
    parked: Vec<RequestId>,
    /// The lanes: at most `parallel` requests read or decode in one step.
    slots: Vec<Slot>,
    /// Every engine sequence: free, an idle conversation, or a live request's.
    seqs: Vec<Seq>,
    /// The cells each sequence holds, prefix copies shared.
    pool: CellPool,
    host_cache: VecDeque<(ConversationId, Conversation)>,
    lane: Option<RequestId>,
    outstanding: Option<Step>,
    /// R7's outlook as of the last event (`outlook.rs`), for the snapshot.
    outlook: Option<outlook::Outlook>,
    next_ticket: u64,
    next_conv_key: u64,
    counters: Counters,
    out: Outcome,
    /// An engine has come up at least once (until then `facts` are placeholders and
    /// arrivals are refused).
    ever_ready: bool,
}

impl Scheduler {
    /// A scheduler for an engine that has just finished its handshake.
    pub fn new(settings: SchedulerSettings, facts: EngineFacts) -> Result<Self, ConfigError> {
        validate_facts(&facts)?;
        let mut s = Self::starting(settings, facts.parallel)?;
        s.on_ready(facts);
        std::mem::take(&mut s.out);
        Ok(s)
    }

    /// A scheduler whose first engine (with `parallel` slots) is starting now: the caller
    /// starts it (attempt 1) and answers with [`Event::EngineReady`] or
    /// [`Event::EngineStartFailed`]; from then on every start and retry is R10's.
    pub fn starting(settings: SchedulerSettings, parallel: u32) -> Result<Self, ConfigError> {
        settings.validate_for(parallel)?;
        // Placeholders until the handshake: nothing is admitted before it.
        let facts = EngineFacts {
            parallel,
            sequences: parallel + 1,
            kv_cells_total: 2,
            context_tokens: 2,
            chunk_tokens: 1,
            trims_at_any_token: true,
            rewindable_tokens: u32::MAX,
        };
        Ok(Self {
            settings,
            facts,
            engine: EngineState::Starting { attempt: 1 },
            requests: BTreeMap::new(),
            waiting: Vec::new(),
            parked: Vec::new(),
            slots: Vec::new(),
            seqs: Vec::new(),
            pool: CellPool::default(),
            host_cache: VecDeque::new(),
            lane: None,
            outstanding: None,
            outlook: None,
            next_ticket: 0,
            next_conv_key: 0,
            counters: Counters::default(),
            out: Outcome::default(),
            ever_ready: false,
        })
    }

    /// An arrival (R11's checks, then the queue): the actions to execute, or why it was
    /// refused (with the decision pass's actions all the same; a refusal itself starts
    /// nothing).
    pub fn admit(&mut self, request: NewRequest, now: Now) -> Result<Outcome, Refused> {
        let admitted = self.on_arrived(request, now);
        let outcome = self.decided(now);
        admitted
            .map(|()| outcome.clone())
            .map_err(|refusal| Refused { refusal, outcome })
    }

    /// Handles one event at time `now`; returns the actions to execute, in order.
    pub fn handle(&mut self, event: Event, now: Now) -> Outcome {
        // reported checkpoints change what a later decision sees, never what to do now: no
        // decision pass between them and the step's `StepDone`, whose cells are not yet counted
        let decides = !matches!(event, Event::CheckpointsChanged(_));
        self.dispatch(event, now);
        if decides {
            self.decided(now)
        } else {
            std::mem::take(&mut self.out)
        }
    }

    /// The decision pass after an arrival or an event, R7's outlook as it leaves things
    /// (an arrival changes who is first in line too), and the actions.
    fn decided(&mut self, now: Now) -> Outcome {
        self.decide(now);
        self.outlook = self.pause_outlook(now);
        std::mem::take(&mut self.out)
    }

    /// Validates and applies new settings (the same as `Event::SettingsChanged`, but with the
    /// error returned).
    pub fn set_settings(
        &mut self,
        settings: SchedulerSettings,
        now: Now,
    ) -> Result<Outcome, ConfigError> {
        settings.validate_for(self.facts.parallel)?;
        Ok(self.handle(Event::SettingsChanged(Box::new(settings)), now))
    }

    /// The small-request boost a live request has now (0 or 1; `solo_priority` only).
    pub fn boost_of(&self, id: RequestId) -> i64 {
        self.requests.get(&id).map_or(0, |r| self.boost(r))
    }

    /// A new priority as the scheduler keeps it: clamped to `priority_range` (as resolved,
    /// the mirror image when lower-first), like an arrival's and a re-prioritised request's.
    pub fn clamp_priority(&self, priority: i32) -> i32 {
        let (lo, hi) = settings::resolved_range(&self.settings);
        priority.clamp(lo, hi)
    }

    /// The settings in force.
    pub fn settings(&self) -> &SchedulerSettings {
        &self.settings
    }

    /// The engine facts in force.
    pub fn engine_facts(&self) -> &EngineFacts {
        &self.facts
    }

    /// Whether a step is outstanding (the service waits for its `StepDone`).
    pub fn step_outstanding(&self) -> bool {
        self.outstanding.is_some()
    }

    /// The state of a request that has not ended.
    pub fn request_state(&self, id: RequestId) -> Option<RequestStatus> {
        self.requests.get(&id).and_then(|r| match r.phase {
            Phase::Waiting => Some(RequestStatus::Waiting),
            Phase::Reading { .. } => Some(RequestStatus::Reading),
            Phase::Decoding { .. } => Some(RequestStatus::Decoding),
            Phase::Parked { .. } => Some(RequestStatus::Parked),
            Phase::Ended => None,
        })
    }

    /// Whether no engine runs and no start is under way (R10): it died with nothing waiting
    /// (the next arrival or a user restart starts it), or its starts failed (see
    /// [`Scheduler::engine_failed`]: only a user restart starts it).
    pub fn engine_down(&self) -> bool {
        matches!(self.engine, EngineState::Down | EngineState::Failed { .. })
    }

    /// Why the engine is failed, while it is (R10: `restart_attempts_max` starts failed in a
    /// row and no user restart since): the last start's failure, which arrivals are refused
    /// with. `None` while it is ready, starting, or down after a death.
    pub fn engine_failed(&self) -> Option<&str> {
        match &self.engine {
            EngineState::Failed { reason } => Some(reason),
            _ => None,
        }
    }

    /// Whether an engine has finished a handshake at least once.
    pub fn ever_ready(&self) -> bool {
        self.ever_ready
    }

    /// Whether any request is waiting, parked or running.
    pub fn has_work(&self) -> bool {
        !self.requests.is_empty()
    }

    /// A new engine: every slot and sequence empty.
    fn rebuild_slots(&mut self) {
        self.slots = (0..self.facts.parallel)
            .map(|_| Slot {
                state: SlotState::Empty,
            })
            .collect();
        self.seqs = (0..self.facts.sequences)
            .map(|i| Seq {
                id: SeqId(i),
                state: SeqState::Free,
                last_used: Now::ZERO,
            })
            .collect();
        self.pool = CellPool::new(self.facts.sequences);
    }

    /// The read chunk size for reads that start now.
    pub(crate) fn chunk_tokens(&self) -> u32 {
        self.settings
            .chunk_tokens
            .unwrap_or(self.facts.chunk_tokens)
            .clamp(settings::CHUNK_TOKENS_MIN, settings::CHUNK_TOKENS_MAX)
    }

    /// The most tokens one request may hold.
    pub(crate) fn context_tokens(&self) -> u32 {
        self.facts.context_tokens.min(self.facts.kv_cells_total)
    }

    fn diag(&mut self, msg: String) {
        self.out.diagnostics.push(msg);
    }

    fn illegal(&mut self, msg: String) {
        if cfg!(debug_assertions) {
            panic!("{msg}");
        }
        self.diag(msg);
    }

    /// The one checked request transition.
    pub(crate) fn set_phase(&mut self, id: RequestId, to: Phase) -> bool {
        let Some(r) = self.requests.get_mut(&id) else {
            self.illegal(format!(
                "transition of unknown request {id} to {}",
                to.name()
            ));
            return false;
        };
        if !lifecycle::phase_transition_ok(&r.phase, &to) {
            let msg = format!("illegal transition of {id}: {:?} -> {:?}", r.phase, to);
            self.illegal(msg);
            return false;
        }
        r.phase = to;
        true
    }

    /// The one checked slot transition.
    pub(crate) fn set_slot(&mut self, idx: usize, to: SlotState, _now: Now) -> bool {
        let slot = &mut self.slots[idx];
        if !lifecycle::slot_transition_ok(&slot.state, &to) {
            let msg = format!(
                "illegal transition of slot {idx}: {} -> {}",
                slot.state.name(),
                to.name()
            );
            self.illegal(msg);
            return false;
        }
        slot.state = to;
        true
    }

    /// Frees the slot `id` holds, if it holds one.
    pub(crate) fn free_slot_of(&mut self, id: RequestId, now: Now) {
        if let Some(idx) = self
            .slots
            .iter()
            .position(|s| s.state == SlotState::Busy { request: id })
        {
            self.set_slot(idx, SlotState::Empty, now);
        }
    }

    /// The one checked sequence transition.
    pub(crate) fn set_seq(&mut self, seq: SeqId, to: SeqState, now: Now) -> bool {
        let Some(s) = self.seqs.get_mut(seq.0 as usize) else {
            self.illegal(format!("transition of unknown {seq}"));
            return false;
        };
        if !lifecycle::seq_transition_ok(&s.state, &to) {
            let msg = format!(
                "illegal transition of {seq}: {} -> {}",
                s.state.name(),
                to.name()
            );
            self.illegal(msg);
            return false;
        }
        s.state = to;
        s.last_used = now;
        true
    }

    /// Effective priority: priority + small-request boost (solo_priority) + aging.
    pub(crate) fn effective(&self, r: &Request, now: Now) -> i64 {
        i64::from(r.priority) + self.boost(r) + self.aging(r, now)
    }

    /// A request's class: priority + boost, aging left out (R7: aging alone never lets a
    /// request pause one of its own class).
    pub(crate) fn class(&self, r: &Request) -> i64 {
        i64::from(r.priority) + self.boost(r)
    }

    /// The small-request boost (R7 with `solo_priority`): 1 or 0.
    pub(crate) fn boost(&self, r: &Request) -> i64 {
        i64::from(self.settings.solo_priority && r.boost_eligible)
    }

    /// Aging: +1 per `aging_interval_secs` spent waiting, parked or without the lane.
    pub(crate) fn aging(&self, r: &Request, now: Now) -> i64 {
        let iv = self.settings.aging_interval_secs;
        match r.idle_since {
            Some(t) if iv > 0.0 => (now.saturating_sub(t).as_secs_f64() / iv).floor() as i64,
            _ => 0,
        }
    }

    /// Ends a request (after its Finish/Fail action): checked transition, then removal.
    pub(crate) fn end(&mut self, id: RequestId) {
        self.set_phase(id, Phase::Ended);
        self.waiting.retain(|x| *x != id);
        self.parked.retain(|x| *x != id);
        if self.lane == Some(id) {
            self.lane = None;
        }
        self.requests.remove(&id);
    }

    /// The figures given with a request's end.
    pub(crate) fn stats(&self, id: RequestId) -> RequestStats {
        self.requests
            .get(&id)
            .map_or_else(RequestStats::default, |r| RequestStats {
                queue_wait_secs: r
                    .admitted_at
                    .map(|t| t.saturating_sub(r.arrived_at).as_secs_f64()),
                prompt_tokens: r.prompt_len(),
                prompt_tokens_held: r.held_at_admission,
                prompt_tokens_read: r.prompt_tokens_read,
                output_tokens: r.generated(),
                give_ways: r.yields,
                pauses: r.pauses,
            })
    }

    fn take_ticket(&mut self) -> u64 {
        self.next_ticket += 1;
        self.next_ticket
    }
}

fn validate_facts(f: &EngineFacts) -> Result<(), ConfigError> {
    let bad = |key: &'static str, bound: &'static str, value: u32| {
        Err(ConfigError::OutOfBounds {
            key,
            bound,
            value: value.to_string(),
        })
    };
    if !(1..=256).contains(&f.parallel) {
        return bad("parallel", "between 1 and 256", f.parallel);
    }
    if f.sequences <= f.parallel || f.sequences > 256 {
        return bad(
            "kv_sequences",
            "more than parallel and at most 256",
            f.sequences,
        );
    }
    if f.kv_cells_total < 2 {
        return bad("kv_cells_total", "at least 2", f.kv_cells_total);
    }
    if f.context_tokens < 2 {
        return bad("context_tokens", "at least 2", f.context_tokens);
    }
    if f.chunk_tokens == 0 {
        return bad("chunk_tokens", "at least 1", f.chunk_tokens);
    }
    Ok(())
}
