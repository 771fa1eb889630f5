//! What preemption cost and saved: each request's ledger (time parked, how often, whom it
//! paused and an estimate of what that saved it), the record kept once it ends (`finished[]`
//! in `/v1/scheduler`, a line in the window), and the sums over the last minutes by
//! priority (`cost`). The sums are pure, so they are tested on made-up records.

use super::handle::Route;
use crate::ids::RequestId;
use crate::scheduler::FinishReason;
use serde::Serialize;
use std::time::{Duration, Instant};

/// The window of the `cost` sums, in seconds.
pub const COST_WINDOW_SECS: f64 = 600.0;

/// One live request's costs so far (kept on its stream, across every park).
#[derive(Debug, Clone, Default)]
pub(super) struct Ledger {
    parked_since: Option<Instant>,
    parked: Duration,
    pub parks: u32,
    /// Requests it paused, and the estimated seconds each pause saved it (where the paused
    /// one had a limit and a measured rate).
    pub paused_others: u32,
    pub gained_secs_estimate: Option<f64>,
}

impl Ledger {
    /// It left the active set at `now` (paused, gave way, or the pool was full); false when
    /// it was parked already (a parked request moved to host RAM is parked once).
    pub fn parked(&mut self, now: Instant) -> bool {
        if self.parked_since.is_some() {
            return false;
        }
        self.parked_since = Some(now);
        self.parks += 1;
        true
    }

    /// It is back in a slot at `now`.
    pub fn resumed(&mut self, now: Instant) {
        if let Some(since) = self.parked_since.take() {
            self.parked += now.saturating_duration_since(since);
        }
    }

    /// Time parked in all up to `now`, the present park included.
    pub fn parked_secs(&self, now: Instant) -> f64 {
        let open = self
            .parked_since
            .map_or(Duration::ZERO, |since| now.saturating_duration_since(since));
        (self.parked + open).as_secs_f64()
    }

    /// It paused another request; `estimate` is how long it would have waited for that one
    /// to finish (its tokens left at its measured rate), when both are known.
    pub fn paused_other(&mut self, estimate: Option<f64>) {
        self.paused_others += 1;
        if let Some(secs) = estimate {
            *self.gained_secs_estimate.get_or_insert(0.0) += secs;
        }
    }
}

/// The seconds a request that pauses a stream would have waited for it without the pause:
/// the stream's tokens left (its limit less what it sent) at its measured rate. `None`
/// without a limit or a rate.
pub(super) fn wait_estimate_secs(
    max_tokens: Option<u32>,
    sent_tokens: u64,
    tokens_per_sec: Option<f64>,
) -> Option<f64> {
    let left = u64::from(max_tokens?).saturating_sub(sent_tokens);
    let rate = tokens_per_sec.filter(|r| *r > 0.0)?;
    Some(left as f64 / rate)
}

/// An ended request's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FinishedRequest {
    pub request_id: RequestId,
    /// The id its client saw.
    pub client_id: String,
    pub client: String,
    pub route: Route,
    pub priority: i32,
    /// `stop`, `length`, `cancelled` or `failed`.
    pub outcome: &'static str,
    pub prompt_tokens: u32,
    /// Of those, what the engine already held when it got a slot (a kept conversation's
    /// prefix), and what it read.
    pub prompt_tokens_held: u32,
    pub prompt_tokens_read: u32,
    pub output_tokens: u32,
    /// Arrival to its first slot (`null`: it never got one).
    pub queue_wait_secs: Option<f64>,
    /// Arrival to its first token (`null`: none went out).
    pub ttft_secs: Option<f64>,
    /// Times it was parked (paused, gave way, or the KV pool was full), and for how long in all.
    pub parks: u32,
    pub parked_secs: f64,
    /// Of those, pauses of its decode (R7) and give-ways of its prompt read (R4).
    pub pauses: u32,
    pub give_ways: u32,
    /// Arrival to its end.
    pub end_to_end_secs: f64,
    /// Requests it paused.
    pub paused_others: u32,
    /// An estimate, not a measurement: how long it would have waited for the requests it
    /// paused to finish (their tokens left at their measured rate).
    pub gained_secs_estimate: Option<f64>,
    /// When it ended, on the clock of `uptime_secs`.
    pub ended_at_secs: f64,
}

/// An ended request's `outcome`: its finish reason, `failed` without one.
pub(super) fn outcome(reason: Option<FinishReason>) -> &'static str {
    match reason {
        Some(FinishReason::Stop) => "stop",
        Some(FinishReason::Length) => "length",
        Some(FinishReason::Cancelled) => "cancelled",
        None => "failed",
    }
}

impl FinishedRequest {
    /// The finish reason its `outcome` names (`None`: it failed).
    pub(super) fn finish_reason(&self) -> Option<FinishReason> {
        [
            FinishReason::Stop,
            FinishReason::Length,
            FinishReason::Cancelled,
        ]
        .into_iter()
        .find(|r| outcome(Some(*r)) == self.outcome)
    }

    /// The line the window shows: "parked 2 times, 6.7 s in all (2 pauses); 12.4 s end to end".
    pub fn summary(&self) -> String {
        let mut parts = Vec::new();
        if self.parks > 0 {
            let mut causes = Vec::new();
            if self.pauses > 0 {
                causes.push(plural(self.pauses, "pause", "pauses"));
            }
            if self.give_ways > 0 {
                causes.push(plural(self.give_ways, "give-way", "give-ways"));
            }
            let causes = if causes.is_empty() {
                String::new()
            } else {
                format!(" ({})", causes.join(", "))
            };
            parts.push(format!(
                "parked {}, {:.1} s in all{causes}",
                plural(self.parks, "time", "times"),
                self.parked_secs
            ));
        } else {
            parts.push("never parked".to_owned());
        }
        if let Some(wait) = self.queue_wait_secs.filter(|w| *w >= 0.05) {
            parts.push(format!("waited {wait:.1} s for a slot"));
        }
        if self.paused_others > 0 {
            let gained = self
                .gained_secs_estimate
                .map(|g| format!(", saving it about {g:.1} s (estimate)"))
                .unwrap_or_default();
            parts.push(format!(
                "paused {}{gained}",
                plural(self.paused_others, "other request", "other requests")
            ));
        }
        parts.push(format!("{:.1} s end to end", self.end_to_end_secs));
        parts.join("; ")
    }
}

fn plural(n: u32, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

/// The sums for one priority over the window.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CostClass {
    pub priority: i32,
    /// Requests of this priority that ended in the window.
    pub finished: u32,
    /// Of those, the ones parked at least once, and what they paid: time parked in all,
    /// pauses, give-ways and their mean end-to-end time.
    pub interrupted: u32,
    pub parked_secs: f64,
    pub pauses: u32,
    pub give_ways: u32,
    pub interrupted_end_to_end_secs_mean: Option<f64>,
    /// The mean end-to-end time of those never parked.
    pub uninterrupted_end_to_end_secs_mean: Option<f64>,
    /// Requests of this priority that paused another, their mean time to first token, and
    /// the estimated seconds the pauses saved them in all (see `gained_secs_estimate`).
    pub interrupting: u32,
    pub interrupting_ttft_secs_mean: Option<f64>,
    /// `null` when none of the streams they paused had a `max_tokens` to estimate from.
    pub gained_secs_estimate: Option<f64>,
}

/// The `cost` of `/v1/scheduler`: what was paid and gained in the last `window_secs`.
#[derive(Debug, Clone, PartialEq, Serialize, Default)]
pub struct CostView {
    pub window_secs: f64,
    /// Highest priority first.
    pub by_priority: Vec<CostClass>,
}

fn mean(values: impl Iterator<Item = f64>) -> Option<f64> {
    let (sum, n) = values.fold((0.0, 0u32), |(s, n), v| (s + v, n + 1));
    (n > 0).then(|| sum / f64::from(n))
}

/// Sums the requests that ended within `window_secs` before `now_secs`, by priority.
pub fn cost_view(finished: &[FinishedRequest], now_secs: f64, window_secs: f64) -> CostView {
    let recent: Vec<&FinishedRequest> = finished
        .iter()
        .filter(|f| now_secs - f.ended_at_secs <= window_secs)
        .collect();
    let mut priorities: Vec<i32> = recent.iter().map(|f| f.priority).collect();
    priorities.sort_unstable_by(|a, b| b.cmp(a));
    priorities.dedup();
    let by_priority = priorities
        .into_iter()
        .map(|priority| {
            let of: Vec<&&FinishedRequest> =
                recent.iter().filter(|f| f.priority == priority).collect();
            let hit: Vec<&&&FinishedRequest> = of.iter().filter(|f| f.parks > 0).collect();
            let interrupting: Vec<&&&FinishedRequest> =
                of.iter().filter(|f| f.paused_others > 0).collect();
            CostClass {
                priority,
                finished: of.len() as u32,
                interrupted: hit.len() as u32,
                // from 0.0: an empty f64 sum is -0.0, which reads "-0.0 s"
                parked_secs: hit.iter().fold(0.0, |sum, f| sum + f.parked_secs),
                pauses: hit.iter().map(|f| f.pauses).sum(),
                give_ways: hit.iter().map(|f| f.give_ways).sum(),
                interrupted_end_to_end_secs_mean: mean(hit.iter().map(|f| f.end_to_end_secs)),
                uninterrupted_end_to_end_secs_mean: mean(
                    of.iter()
                        .filter(|f| f.parks == 0)
                        .map(|f| f.end_to_end_secs),
                ),
                interrupting: interrupting.len() as u32,
                interrupting_ttft_secs_mean: mean(interrupting.iter().filter_map(|f| f.ttft_secs)),
                gained_secs_estimate: interrupting
                    .iter()
                    .filter_map(|f| f.gained_secs_estimate)
                    .fold(None, |sum, g| Some(sum.unwrap_or(0.0) + g)),
            }
        })
        .collect();
    CostView {
        window_secs,
        by_priority,
    }
}

#[cfg(test)]
#[path = "cost_tests.rs"]
mod tests;
