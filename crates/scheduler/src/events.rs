//! One handler per request event: arrival (R11), cancel (R9), step done (R8: every accepted
//! token is delivered), a request the engine failed, re-prioritise, settings (R12). The
//! engine's own events (R10) are in engine_events.rs.

use crate::ids::{RequestId, SeqId, TokenId};
use std::collections::HashMap;
use std::sync::Arc;

use super::lifecycle::{Phase, Request, SeqState};
use super::prefix::TokenSeq;
use super::settings::MaxTokensOverContext;
use super::types::{
    Action, Checkpoint, Chunk, Event, FailKind, FinishReason, NewRequest, Now, ParkPlace, Refusal,
    Step, StepOutput,
};
use super::{EngineState, Scheduler, SchedulerSettings};

impl Scheduler {
    pub(crate) fn dispatch(&mut self, event: Event, now: Now) {
        match event {
            Event::Cancelled(id) => self.on_cancelled(id, now),
            Event::StepDone(outputs) => self.on_step_done(outputs, now),
            Event::EngineDied => self.on_engine_lost(FailKind::EngineDied),
            Event::RestartRequested => self.on_engine_lost(FailKind::EngineRestarted),
            Event::EngineStartFailed { stderr_tail } => self.on_start_failed(stderr_tail),
            Event::EngineReady(facts) => self.on_ready(facts),
            Event::SettingsChanged(s) => self.on_settings(*s),
            Event::Reprioritised { request, priority } => self.on_reprioritised(request, priority),
            Event::RequestFailed {
                request,
                message,
                lost_tokens,
            } => self.on_request_failed(request, message, lost_tokens, now),
            Event::ConversationsEvicted(keys) => {
                self.host_cache.retain(|(cid, _)| !keys.contains(cid));
            }
            Event::CheckpointsChanged(reports) => {
                for (seq, checkpoints) in reports {
                    self.on_checkpoints(seq, checkpoints);
                }
            }
            Event::Tick => {}
        }
    }

    /// R11's arrival checks, then the queue. `Err` when the request is not admitted; the
    /// refusal is counted and nothing of the request is kept.
    pub(crate) fn on_arrived(&mut self, nr: NewRequest, now: Now) -> Result<(), Refusal> {
        let refusal = self.arrive(nr, now).err();
        match refusal {
            Some(Refusal::DuplicateId) | None => {}
            Some(_) => self.counters.refusals += 1,
        }
        refusal.map_or(Ok(()), Err)
    }

    fn arrive(&mut self, nr: NewRequest, now: Now) -> Result<(), Refusal> {
        let id = nr.id;
        if self.requests.contains_key(&id) {
            // the caller generates ids: a duplicate is its bug. The live request is untouched.
            self.diag(format!(
                "{id} arrived twice; the second arrival is refused and the live {id} is untouched"
            ));
            return Err(Refusal::DuplicateId);
        }
        if let Some(refusal) = self.refusal_without_engine() {
            return Err(refusal);
        }
        let room = self.room_for_output(&nr.prompt)?;
        let (max_tokens, cut_by_cap) = self.output_limit(nr.max_tokens, room)?;
        if self.waiting.len() >= self.settings.queue_max as usize {
            return Err(Refusal::QueueFull {
                retry_after_secs: self.settings.retry_after_secs,
            });
        }
        let priority_given = nr.priority_given;
        let req = self.waiting_request(nr, max_tokens, cut_by_cap, now);
        self.requests.insert(id, req);
        self.waiting.push(id);
        // the small-request boost is decided at arrival, by what is left to read then
        let left = self.left_to_read(id);
        let small = !priority_given && left <= self.settings.small_request_tokens;
        if let Some(r) = self.requests.get_mut(&id) {
            r.boost_eligible = small;
        }
        // a death with nothing waiting left it down: this arrival is work for a new engine
        // (a failed engine never gets here: it refused the arrival above)
        if self.engine == EngineState::Down {
            self.start_again();
        }
        Ok(())
    }

    /// The context's room for output after `prompt`; refused when the prompt is empty or
    /// leaves none.
    fn room_for_output(&self, prompt: &[TokenId]) -> Result<u32, Refusal> {
        if prompt.is_empty() {
            return Err(Refusal::EmptyPrompt);
        }
        let ctx = self.context_tokens();
        let len = u32::try_from(prompt.len()).unwrap_or(u32::MAX);
        if len >= ctx {
            // a prompt as long as the context leaves no room for output: the longest prompt
            // accepted is context - 1, and that is the maximum reported
            return Err(Refusal::PromptTooLong {
                prompt_tokens: len,
                max_context_tokens: ctx - 1,
            });
        }
        Ok(ctx - len)
    }

    /// The request's output limit within `room`, and whether the server's cap cut it; refused
    /// when it asks past the room and the settings say so.
    fn output_limit(&self, asked: Option<u32>, room: u32) -> Result<(u32, bool), Refusal> {
        // the server's default for a request that names no limit, then its cap for every
        // request; both clamp silently (a capped request ends with `length`)
        let asked = asked.or(self.settings.max_output_tokens_default);
        let capped = match (asked, self.settings.max_output_tokens_cap) {
            (Some(a), Some(cap)) => Some(a.min(cap)),
            (None, Some(cap)) => Some(cap),
            (a, None) => a,
        };
        let cut_by_cap = self
            .settings
            .max_output_tokens_cap
            .is_some_and(|cap| cap < asked.unwrap_or(room).min(room));
        let mut max_tokens = capped.unwrap_or(room).max(1);
        if max_tokens > room {
            if self.settings.max_tokens_over_context == MaxTokensOverContext::Reject {
                return Err(Refusal::MaxTokensOverContext {
                    max_tokens,
                    room_tokens: room,
                });
            }
            max_tokens = room;
        }
        Ok((max_tokens, cut_by_cap))
    }

    /// An admitted arrival as a request in line, with its ticket.
    fn waiting_request(
        &mut self,
        nr: NewRequest,
        max_tokens: u32,
        cut_by_cap: bool,
        now: Now,
    ) -> Request {
        // `resolve_priority` clamped in user units; clamp to the same range as resolved (the
        // mirror image when lower-first) so a flipped value is never clamped a second time
        let (lo, hi) = super::settings::resolved_range(&self.settings);
        let ticket = self.take_ticket();
        Request {
            id: nr.id,
            priority: nr.priority.clamp(lo, hi),
            boost_eligible: false,
            prompt: Arc::new(TokenSeq::new(nr.prompt)),
            max_tokens,
            ticket,
            arrived_at: now,
            idle_since: Some(now),
            run_since: now,
            phase: Phase::Waiting,
            output: Vec::new(),
            yields: 0,
            pauses: 0,
            paused_for: None,
            parked_because: None,
            tokens_since_resume: 0,
            reserved_cells: 0,
            chunk_tokens: self.chunk_tokens(),
            cancel_pending: false,
            failed_pending: None,
            last_token_fed: false,
            prefix_memo: HashMap::new(),
            held_at_admission: 0,
            cut_by_cap,
            admitted_at: None,
            prompt_tokens_read: 0,
            read_high: 0,
            checkpoints: Vec::new(),
        }
    }

    fn on_cancelled(&mut self, id: RequestId, now: Now) {
        let Some(r) = self.requests.get(&id) else {
            // a cancel racing the request's end (or its refusal): nothing to do
            return;
        };
        let generated = r.generated();
        match r.phase.clone() {
            Phase::Waiting => {
                self.counters.cancellations.waiting += 1;
                self.out.actions.push(Action::Finish {
                    request: id,
                    reason: FinishReason::Cancelled,
                    output_tokens: generated,
                    stats: self.stats(id),
                });
                self.end(id);
            }
            Phase::Parked {
                place: ParkPlace::Pool(_),
                ..
            } => {
                // its tokens stay in its sequence as a conversation, like a running request's
                self.counters.cancellations.parked += 1;
                self.finish_in_seq(id, FinishReason::Cancelled, now);
            }
            Phase::Parked { place, .. } => {
                self.counters.cancellations.parked += 1;
                self.out
                    .actions
                    .push(Action::DropParked { request: id, place });
                self.out.actions.push(Action::Finish {
                    request: id,
                    reason: FinishReason::Cancelled,
                    output_tokens: generated,
                    stats: self.stats(id),
                });
                self.end(id);
            }
            Phase::Reading { .. } | Phase::Decoding { .. } => {
                if matches!(r.phase, Phase::Reading { .. }) {
                    self.counters.cancellations.reading += 1;
                } else {
                    self.counters.cancellations.decoding += 1;
                }
                if let Some(r) = self.requests.get_mut(&id) {
                    r.cancel_pending = true;
                }
                if self.outstanding.is_none() {
                    self.finish_in_seq(id, FinishReason::Cancelled, now);
                }
            }
            Phase::Ended => {}
        }
    }

    /// Ends a request that owns a sequence (running, or parked in it): its tokens stay there
    /// as a conversation, and its slot (if it held one) is free.
    pub(crate) fn finish_in_seq(&mut self, id: RequestId, reason: FinishReason, now: Now) {
        let Some(r) = self.requests.get(&id) else {
            return;
        };
        let Some(seq) = r.phase.own_seq() else {
            self.illegal(format!("{id} finished in a sequence it does not own"));
            return;
        };
        let output_tokens = r.generated();
        let held = r.held_tokens();
        let keep = held.len() > 0;
        self.out.actions.push(Action::Release {
            request: id,
            seq,
            keep_as_conversation: keep,
        });
        // the cells past what it held (a pledge never used) are not the conversation's
        self.pool.trim(seq, held.len());
        let to = if keep {
            SeqState::Kept(self.new_conversation(held))
        } else {
            SeqState::Free
        };
        self.free_slot_of(id, now);
        self.set_seq(seq, to, now);
        let stats = self.stats(id);
        self.out.actions.push(Action::Finish {
            request: id,
            reason,
            output_tokens,
            stats,
        });
        if reason != FinishReason::Cancelled {
            self.counters.finished += 1;
        }
        self.end(id);
    }

    pub(crate) fn fail(&mut self, id: RequestId, error: FailKind) {
        self.counters.failed += 1;
        let stats = self.stats(id);
        self.out.actions.push(Action::Fail {
            request: id,
            error,
            stats,
        });
        self.end(id);
    }

    /// Accepts one sampled token: deliver it, then end the request if it is done.
    fn accept(&mut self, id: RequestId, token: TokenId, finished: Option<FinishReason>, now: Now) {
        let Some(r) = self.requests.get_mut(&id) else {
            return;
        };
        r.output.push(token);
        r.tokens_since_resume += 1;
        let index = r.generated() - 1;
        let at_max = r.generated() >= r.max_tokens;
        let cut_by_cap = r.cut_by_cap;
        self.out.actions.push(Action::Deliver {
            request: id,
            token,
            index,
        });
        if let Some(reason) = finished {
            self.finish_in_seq(id, reason, now);
        } else if at_max {
            if cut_by_cap {
                self.counters.output_cap_cuts += 1;
            }
            self.finish_in_seq(id, FinishReason::Length, now);
        }
    }

    /// R8's drift check: the engine could not serve one request. It fails alone, with its
    /// sequence cleared (what the engine holds there is not what was counted); the prompt
    /// tokens it lost are processed-prefix losses.
    fn on_request_failed(&mut self, id: RequestId, message: String, lost: u32, now: Now) {
        match self.requests.get(&id) {
            // it ended (or was cancelled) before the engine's word arrived: nothing is lost
            None => return,
            // it failed already: the first refusal is the cause, and what the engine refused
            // after it (its open, its chunk) follows from it and loses nothing more
            Some(r) if r.failed_pending.is_some() => return,
            Some(_) => {}
        }
        self.counters.processed_prefix_losses += u64::from(lost);
        let in_step = self.outstanding.as_ref().is_some_and(|s| {
            s.chunk.as_ref().is_some_and(|c| c.request == id)
                || s.decode.iter().any(|(r, _)| *r == id)
        });
        match self.requests.get_mut(&id) {
            Some(r) if in_step => r.failed_pending = Some(message),
            Some(_) => self.fail_in_engine(id, message, now),
            None => {}
        }
    }

    /// Fails a request the engine could not serve: its sequence (or parked state) is dropped.
    fn fail_in_engine(&mut self, id: RequestId, message: String, now: Now) {
        let Some(r) = self.requests.get(&id) else {
            return;
        };
        match r.phase.clone() {
            Phase::Parked {
                place: ParkPlace::HostRam,
                ..
            } => self.out.actions.push(Action::DropParked {
                request: id,
                place: ParkPlace::HostRam,
            }),
            phase => {
                if let Some(seq) = phase.own_seq() {
                    self.release_emptied(id, seq, now);
                }
            }
        }
        if self.lane == Some(id) {
            self.lane = None;
        }
        self.fail(id, FailKind::RequestFailed { message });
    }

    fn on_step_done(&mut self, outputs: Vec<StepOutput>, now: Now) {
        let Some(step) = self.outstanding.take() else {
            self.diag("step done with no step outstanding".to_string());
            return;
        };
        let (step, failed_ids) = self.fail_engine_failed(step, now);
        let mut by: HashMap<RequestId, StepOutput> = outputs
            .into_iter()
            .filter(|o| !failed_ids.contains(&o.request))
            .map(|o| (o.request, o))
            .collect();
        let mut sampled: Vec<RequestId> = Vec::new();
        // the cells the step took: the chunk's tokens, and one fed token per decode
        if let Some(ch) = &step.chunk {
            self.pool.append(ch.seq, ch.tokens.end - ch.tokens.start);
        }
        for (_, seq) in &step.decode {
            self.pool.append(*seq, 1);
        }
        if let Some(ch) = &step.chunk {
            sampled.extend(self.chunk_read(ch));
        }
        sampled.extend(step.decode.iter().map(|(id, _)| *id));
        for id in sampled {
            self.take_sample(id, &mut by, now);
        }
        for (id, _) in by {
            self.diag(format!("step output for {id}, which was not in the step"));
        }
    }

    /// The requests the engine failed in this step (none of their part ran) fail; the step
    /// without them, and their ids.
    fn fail_engine_failed(&mut self, step: Step, now: Now) -> (Step, Vec<RequestId>) {
        let failed: Vec<(RequestId, String)> = step
            .chunk
            .iter()
            .map(|c| c.request)
            .chain(step.decode.iter().map(|(id, _)| *id))
            .filter_map(|id| Some((id, self.requests.get(&id)?.failed_pending.clone()?)))
            .collect();
        let step = Step {
            chunk: step
                .chunk
                .filter(|c| !failed.iter().any(|(id, _)| *id == c.request)),
            decode: step
                .decode
                .into_iter()
                .filter(|(d, _)| !failed.iter().any(|(id, _)| id == d))
                .collect(),
        };
        let failed_ids: Vec<RequestId> = failed.iter().map(|(id, _)| *id).collect();
        for (id, message) in failed {
            self.fail_in_engine(id, message, now);
        }
        (step, failed_ids)
    }

    /// A chunk read: its request's progress, and the request when the chunk was its prompt's
    /// last (it sampled its first token).
    fn chunk_read(&mut self, ch: &Chunk) -> Option<RequestId> {
        let id = ch.request;
        let r = self.requests.get_mut(&id)?;
        r.prompt_tokens_read += ch.tokens.end - ch.tokens.start;
        let again = super::lifecycle::reread_tokens(r.read_high, &ch.tokens);
        r.read_high = r.read_high.max(ch.tokens.end);
        self.counters.processed_prefix_losses += u64::from(again);
        self.set_phase(
            id,
            Phase::Reading {
                seq: ch.seq,
                read_to: ch.tokens.end,
            },
        );
        if !ch.is_last {
            return None;
        }
        if self.lane == Some(id) {
            self.lane = None;
        }
        self.set_phase(id, Phase::Decoding { seq: ch.seq });
        if let Some(r) = self.requests.get_mut(&id) {
            r.idle_since = None;
        }
        Some(id)
    }

    /// The token `id` sampled in the step, accepted (unless a cancel is pending); a sample
    /// owed and missing is the engine's protocol error, and fails the request.
    fn take_sample(&mut self, id: RequestId, by: &mut HashMap<RequestId, StepOutput>, now: Now) {
        let Some(r) = self.requests.get_mut(&id) else {
            return;
        };
        if r.cancel_pending {
            // the step fed its last token; the new sample is not accepted
            r.last_token_fed = !r.output.is_empty();
            by.remove(&id);
            return;
        }
        match by.remove(&id) {
            Some(StepOutput {
                token: Some(t),
                finished,
                ..
            }) => self.accept(id, t, finished, now),
            _ => {
                self.diag(format!("step done without the token {id} was owed"));
                if let Some(seq) = self.requests.get(&id).and_then(|r| r.phase.seq()) {
                    self.release_emptied(id, seq, now);
                }
                self.fail(id, FailKind::EngineProtocol);
            }
        }
    }

    /// A user's new priority: the request keeps its place among equals (its ticket) and is
    /// ranked by the new value from the next decision on.
    /// A request's sequence released and emptied (not kept as a conversation): its slot
    /// and the sequence free, its cells cleared.
    fn release_emptied(&mut self, id: RequestId, seq: SeqId, now: Now) {
        self.out.actions.push(Action::Release {
            request: id,
            seq,
            keep_as_conversation: false,
        });
        self.free_slot_of(id, now);
        self.pool.clear(seq);
        self.set_seq(seq, SeqState::Free, now);
    }

    /// A sequence's checkpoints as the engine reports them: its request's, or its kept
    /// conversation's (then a new conversation of the same tokens, since what one is worth to
    /// a prompt is memoized per conversation; its state and place in the LRU order stay).
    fn on_checkpoints(&mut self, seq: SeqId, checkpoints: Vec<Checkpoint>) {
        let state = self.seqs.get(seq.0 as usize).map(|s| s.state.clone());
        match state {
            Some(SeqState::Owned(id)) => {
                if let Some(r) = self.requests.get_mut(&id) {
                    r.checkpoints = checkpoints;
                }
            }
            Some(SeqState::Kept(c)) => {
                let tokens = (*c.tokens).clone().with_checkpoints(checkpoints);
                let conversation = self.new_conversation(tokens);
                self.seqs[seq.0 as usize].state = SeqState::Kept(conversation);
            }
            Some(SeqState::Free) | None => self.diag(format!(
                "checkpoints reported for {seq}, which holds nothing the scheduler knows"
            )),
        }
    }

    fn on_reprioritised(&mut self, id: RequestId, priority: i32) {
        // clamped like an arrival's (the dashboard's +1/-1 send the next integer as it is)
        let (lo, hi) = super::settings::resolved_range(&self.settings);
        match self.requests.get_mut(&id) {
            Some(r) if r.phase != Phase::Ended => {
                r.priority = priority.clamp(lo, hi);
                r.boost_eligible = false;
            }
            _ => self.diag(format!("re-prioritise of unknown request {id}")),
        }
    }

    /// R12: settings apply at once; a new chunk size applies to reads that start later.
    fn on_settings(&mut self, s: SchedulerSettings) {
        match s.validate_for(self.facts.parallel) {
            Ok(()) => self.settings = s,
            Err(e) => self.diag(format!("settings refused: {e}")),
        }
    }
}
