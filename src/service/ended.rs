//! The ended requests' history for the app's run, kept across engines (an apply keeps the old
//! engine's requests): their figures (`finished[]`, the `cost` sums), the first-token samples
//! (`ttft`) and the conversation cache's hits and misses.

use super::cost::{self, CostView, FinishedRequest};
use super::shared::{Bounded, Shared};
use super::snapshot::TtftSample;
use std::collections::VecDeque;
use std::time::Instant;

/// First-token samples kept for the snapshot's `ttft`.
const TTFT_SAMPLES_MAX: usize = 256;
/// Ended requests kept for the cost sums, and the latest of them the snapshot lists.
const FINISHED_KEPT_MAX: usize = 1000;
const FINISHED_SHOWN_MAX: usize = 50;

pub(super) struct Ended {
    epoch: Instant,
    /// The most recent first tokens, oldest first.
    ttft: Bounded<TtftSample>,
    /// Admitted requests that reused a held or cached prefix, and those that read it all.
    cache_hits: u64,
    cache_misses: u64,
    /// Ended requests' figures, oldest first; the latest of them as published.
    finished: VecDeque<FinishedRequest>,
    finished_shown: Shared<FinishedRequest>,
    /// The last `cost` sums and when they were made (seconds on the epoch's clock); `None`
    /// after a request ended.
    cost: Option<(f64, CostView)>,
}

impl Ended {
    pub fn new(epoch: Instant) -> Self {
        Self {
            epoch,
            ttft: Bounded::new(TTFT_SAMPLES_MAX),
            cache_hits: 0,
            cache_misses: 0,
            finished: VecDeque::new(),
            finished_shown: Shared::default(),
            cost: None,
        }
    }

    /// A request got its first slot with `prompt_tokens_held` of its prompt already held.
    pub fn admitted(&mut self, prompt_tokens_held: u32) {
        if prompt_tokens_held > 0 {
            self.cache_hits += 1;
        } else {
            self.cache_misses += 1;
        }
    }

    pub fn first_token(&mut self, sample: TtftSample) {
        self.ttft.push(sample);
    }

    /// An ended request's figures, kept for `finished[]` and the `cost` sums.
    pub fn keep(&mut self, record: FinishedRequest) {
        if self.finished.len() == FINISHED_KEPT_MAX {
            self.finished.pop_front();
        }
        self.finished.push_back(record);
        let skip = self.finished.len().saturating_sub(FINISHED_SHOWN_MAX);
        self.finished_shown = self.finished.iter().skip(skip).cloned().collect();
        self.cost = None;
    }

    /// The latest ended requests, oldest first (shared: made anew when one ends).
    pub fn finished(&self) -> Shared<FinishedRequest> {
        self.finished_shown.clone()
    }

    /// The cost sums of the requests that ended in the last [`cost::COST_WINDOW_SECS`]:
    /// summed again when a request ends, or a second after the last sum (requests leave the
    /// window with the clock), not per token.
    pub fn cost(&mut self, now: Instant) -> CostView {
        let now_secs = now.duration_since(self.epoch).as_secs_f64();
        match &self.cost {
            Some((at_secs, view)) if now_secs - at_secs < 1.0 => view.clone(),
            _ => {
                let view = cost::cost_view(
                    self.finished.make_contiguous(),
                    now_secs,
                    cost::COST_WINDOW_SECS,
                );
                self.cost = Some((now_secs, view.clone()));
                view
            }
        }
    }

    pub fn ttft(&self) -> Shared<TtftSample> {
        self.ttft.shared()
    }

    pub fn cache_hits(&self) -> (u64, u64) {
        (self.cache_hits, self.cache_misses)
    }
}
