//! The clients' side: every live request's stream (its decoder, stop matcher and channel), what
//! goes out on it, and the figures that come from delivering (time to first token, an ending
//! request's figures), which go to the observation kept for the app's run.

use super::cost::{self, FinishedRequest};
use super::handle::{Failure, Finished, StreamEvent, Submission, Usage};
use super::live::Live;
use super::observation::Observation;
use super::snapshot::TtftSample;
use crate::ids::RequestId;
use crate::metrics::Fact;
use crate::scheduler::{FailKind, FinishReason, RequestStats, StepOutput};
use std::collections::HashMap;
use std::time::Instant;
use tokio::sync::mpsc;

pub(super) struct Streams {
    live: HashMap<RequestId, Live>,
    epoch: Instant,
    observation: Observation,
}

impl Streams {
    pub fn new(observation: Observation) -> Self {
        Self {
            live: HashMap::new(),
            epoch: observation.epoch(),
            observation,
        }
    }

    pub fn contains(&self, id: RequestId) -> bool {
        self.live.contains_key(&id)
    }

    pub fn get(&self, id: RequestId) -> Option<&Live> {
        self.live.get(&id)
    }

    /// Live request ids, in order.
    pub fn ids(&self) -> Vec<RequestId> {
        let mut ids: Vec<RequestId> = self.live.keys().copied().collect();
        ids.sort();
        ids
    }

    /// A new stream for an admitted request; its receiving end goes to the client.
    pub fn open(
        &mut self,
        id: RequestId,
        submission: Submission,
    ) -> mpsc::UnboundedReceiver<StreamEvent> {
        let (events, rx) = mpsc::unbounded_channel();
        self.live.insert(id, Live::new(submission, events));
        rx
    }

    /// A new priority: later TTFT and queue-time samples count under it.
    pub fn set_priority(&mut self, id: RequestId, priority: i32) {
        if let Some(live) = self.live.get_mut(&id) {
            live.submission.priority = priority;
        }
    }

    /// A step's sampled tokens, decoded and matched against the stop strings, as the
    /// scheduler's step outputs (a token that ends the output says so).
    pub fn sampled(&mut self, sampled: Vec<crate::protocol::Sampled>) -> Vec<StepOutput> {
        let mut outputs = Vec::with_capacity(sampled.len());
        for token in sampled {
            let Some(live) = self.live.get_mut(&token.request) else {
                continue;
            };
            let stopped = live.sampled(&token.bytes);
            let eog = token.eog && !live.submission.ignore_eos;
            outputs.push(StepOutput {
                request: token.request,
                token: Some(token.token),
                finished: (eog || stopped).then_some(FinishReason::Stop),
            });
        }
        outputs
    }

    /// The scheduler delivered a token: its text goes out. True when the client is gone
    /// (its stream closed without a cancel: a backstop for R9).
    pub fn deliver(&mut self, id: RequestId) -> bool {
        let Some(live) = self.live.get_mut(&id) else {
            return false;
        };
        live.deliver();
        let now = Instant::now();
        if let Some(ttft) = live.note_delivery(now) {
            let priority = live.submission.priority;
            let ttft_secs = ttft.as_secs_f64();
            self.observation.record(&Fact::FirstToken {
                priority,
                ttft_secs,
            });
            let origin = &live.submission.origin;
            self.observation.lock().ended.first_token(TtftSample {
                request_id: id,
                client_id: origin.route.client_id(id),
                client: origin.client.clone(),
                priority,
                ttft_secs,
                at_secs: now.duration_since(self.epoch).as_secs_f64(),
            });
        }
        live.events.is_closed()
    }

    /// The request ended normally: what the decoder still holds goes out (not after a
    /// cancel), then `Done` with the usage.
    pub fn finish(
        &mut self,
        id: RequestId,
        reason: FinishReason,
        output_tokens: u32,
        stats: &RequestStats,
    ) {
        let Some(mut live) = self.live.remove(&id) else {
            return;
        };
        if reason != FinishReason::Cancelled {
            live.flush();
        }
        let usage = Usage {
            prompt_tokens: live.submission.prompt.len() as u32,
            completion_tokens: output_tokens,
            cached_tokens: stats.prompt_tokens_held,
        };
        let stop_sequence = live.matched_stop();
        let _ = live.events.send(StreamEvent::Done(Finished {
            reason,
            usage,
            stop_sequence,
        }));
    }

    /// The request failed: a structured error ends its stream.
    pub fn fail(&mut self, id: RequestId, error: &FailKind) {
        if let Some(live) = self.live.remove(&id) {
            let _ = live.events.send(StreamEvent::Failed(failure(error)));
        }
    }

    /// Every stream ends with the shutdown error.
    pub fn shut_down(&mut self) {
        for (_, live) in self.live.drain() {
            let _ = live.events.send(StreamEvent::Failed(Failure::ShuttingDown));
        }
    }

    /// An ending request's figures (`reason` `None`: it failed), as it ends; `None` when it
    /// has no stream.
    pub fn figures(
        &self,
        id: RequestId,
        reason: Option<FinishReason>,
        stats: &RequestStats,
    ) -> Option<FinishedRequest> {
        let live = self.live.get(&id)?;
        let now = Instant::now();
        let origin = &live.submission.origin;
        Some(FinishedRequest {
            request_id: id,
            client_id: origin.route.client_id(id),
            client: origin.client.clone(),
            route: origin.route,
            priority: live.submission.priority,
            outcome: cost::outcome(reason),
            prompt_tokens: stats.prompt_tokens,
            prompt_tokens_held: stats.prompt_tokens_held,
            prompt_tokens_read: stats.prompt_tokens_read,
            output_tokens: stats.output_tokens,
            queue_wait_secs: stats.queue_wait_secs,
            ttft_secs: live.ttft_secs(),
            parks: live.cost.parks,
            parked_secs: live.cost.parked_secs(now),
            pauses: stats.pauses,
            give_ways: stats.give_ways,
            end_to_end_secs: now.duration_since(live.arrived).as_secs_f64(),
            paused_others: live.cost.paused_others,
            gained_secs_estimate: live.cost.gained_secs_estimate,
            ended_at_secs: now.duration_since(self.epoch).as_secs_f64(),
        })
    }

    /// `id` left the active set (paused, gave way, or the pool was full); `paused_for` is
    /// the request it was paused for, which is credited with the wait it avoided. False when
    /// it was parked already (a parked request moved to host RAM): nothing is counted again.
    pub fn parked(&mut self, id: RequestId, paused_for: Option<RequestId>) -> bool {
        let now = Instant::now();
        let Some(live) = self.live.get_mut(&id) else {
            return false;
        };
        if !live.cost.parked(now) {
            return false;
        }
        // taken as the pause is decided: the tokens this outcome still delivers are not
        // counted as sent, and a rate over a window that spans an earlier park is low (both
        // make the estimate a little high; it is labelled an estimate)
        let estimate = cost::wait_estimate_secs(
            live.submission.max_tokens,
            live.tokens_sent(),
            live.tokens_per_sec(now),
        );
        if let Some(winner) = paused_for.and_then(|w| self.live.get_mut(&w)) {
            winner.cost.paused_other(estimate);
        }
        true
    }

    /// `id` is back in a slot.
    pub fn resumed(&mut self, id: RequestId) {
        if let Some(live) = self.live.get_mut(&id) {
            live.cost.resumed(Instant::now());
        }
    }

    pub fn tokens_per_sec(&self, id: RequestId, now: Instant) -> Option<f64> {
        self.live.get(&id).and_then(|l| l.tokens_per_sec(now))
    }
}

pub(super) fn failure(error: &FailKind) -> Failure {
    match error {
        FailKind::EngineDied => {
            Failure::Engine("the engine worker died while serving this request".into())
        }
        FailKind::EngineRestarted => Failure::Engine("engine restarted".into()),
        FailKind::EngineUnavailable { stderr_tail } => {
            Failure::Engine(format!("the engine could not be started: {stderr_tail}"))
        }
        FailKind::EngineProtocol => Failure::Engine("the engine broke the protocol".into()),
        FailKind::RequestFailed { message } => Failure::Request(message.clone()),
        FailKind::PromptTooLong {
            prompt_tokens,
            max_context_tokens,
        } => Failure::PromptTooLong {
            prompt_tokens: *prompt_tokens,
            max_context_tokens: *max_context_tokens,
        },
    }
}
