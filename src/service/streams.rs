//! The clients' side: every live request's stream (its decoder, stop matcher and channel), what
//! goes out on it, and the figures that come from delivering (time to first token, cache hits,
//! per-request metrics).

use super::handle::{Failure, Finished, StreamEvent, Submission, Usage};
use super::live::Live;
use super::snapshot::TtftSample;
use crate::ids::RequestId;
use crate::metrics::Metrics;
use crate::scheduler::{FailKind, FinishReason, RequestStats, StepOutput};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::Instant;
use tokio::sync::mpsc;

/// First-token samples kept for the snapshot's `ttft`.
const TTFT_SAMPLES_MAX: usize = 256;

pub(super) struct Streams {
    live: HashMap<RequestId, Live>,
    epoch: Instant,
    metrics: Arc<Metrics>,
    /// The most recent first tokens, oldest first.
    ttft: VecDeque<TtftSample>,
    /// Admitted requests that reused a held or cached prefix, and those that read it all.
    cache_hits: u64,
    cache_misses: u64,
}

impl Streams {
    pub fn new(epoch: Instant, metrics: Arc<Metrics>) -> Self {
        Self {
            live: HashMap::new(),
            epoch,
            metrics,
            ttft: VecDeque::new(),
            cache_hits: 0,
            cache_misses: 0,
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
            self.metrics.observe_ttft(priority, ttft.as_secs_f64());
            if self.ttft.len() == TTFT_SAMPLES_MAX {
                self.ttft.pop_front();
            }
            self.ttft.push_back(TtftSample {
                request_id: id,
                priority,
                ttft_secs: ttft.as_secs_f64(),
                at_secs: now.duration_since(self.epoch).as_secs_f64(),
            });
        }
        live.events.is_closed()
    }

    /// The engine opened the request for the first time, keeping `kept_tokens` of its prompt.
    pub fn admitted(&mut self, id: RequestId, kept_tokens: u32) {
        if let Some(live) = self.live.get_mut(&id)
            && !live.admitted
        {
            live.admitted = true;
            self.metrics.admitted(kept_tokens);
            if kept_tokens > 0 {
                self.cache_hits += 1;
            } else {
                self.cache_misses += 1;
            }
        }
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
        self.ended(id, Some(reason), stats);
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
    pub fn fail(&mut self, id: RequestId, error: &FailKind, stats: &RequestStats) {
        self.ended(id, None, stats);
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

    /// A request ended: its metrics.
    fn ended(&self, id: RequestId, reason: Option<FinishReason>, stats: &RequestStats) {
        let Some(live) = self.live.get(&id) else {
            return;
        };
        if let Some(wait) = stats.queue_wait_secs {
            self.metrics
                .observe_queue_time(live.submission.priority, wait);
        }
        self.metrics.request_ended(
            reason,
            stats.prompt_tokens_read,
            stats.prompt_tokens_held,
            stats.output_tokens,
        );
    }

    pub fn tokens_per_sec(&self, id: RequestId, now: Instant) -> Option<f64> {
        self.live.get(&id).and_then(|l| l.tokens_per_sec(now))
    }

    pub fn ttft(&self) -> Vec<TtftSample> {
        self.ttft.iter().cloned().collect()
    }

    pub fn cache_hits(&self) -> (u64, u64) {
        (self.cache_hits, self.cache_misses)
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
