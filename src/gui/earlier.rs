//! What the window keeps of the engines an apply replaced, so that an Apply-and-restart does
//! not wipe what the user was reading: the window's clock runs on across engines (each new
//! service's own clock starts at 0), the first-token samples and counters of the replaced
//! engines stay, and each replacement is marked where the time shows (the log, the timeline,
//! the TTFT plot).

use crate::service::{ServiceSnapshot, TtftSample};
use std::borrow::Cow;

/// How many of the replaced engines' first-token samples are kept (the newest).
pub const EARLIER_TTFT_MAX: usize = 1000;

#[derive(Debug, Clone, Default)]
pub struct Earlier {
    /// The replaced engines' time, summed: the window's clock is this plus the live service's
    /// uptime.
    pub offset_secs: f64,
    /// When each replacement happened, on the window's clock.
    pub restarts_at_secs: Vec<f64>,
    /// The replaced engines' first-token samples, `at_secs` on the window's clock.
    pub ttft: Vec<TtftSample>,
    /// The replaced engines' counters, summed, by the counter's name.
    pub counters: Vec<(&'static str, u64)>,
}

impl Earlier {
    /// The window's clock at the live service's `uptime_secs`.
    pub fn now_secs(&self, s: &ServiceSnapshot) -> f64 {
        self.offset_secs + s.uptime_secs
    }

    /// `old`, the last snapshot of a service an apply replaced: keep its samples and counters
    /// and mark the replacement.
    pub fn replaced(&mut self, old: &ServiceSnapshot) {
        let at_secs = self.now_secs(old);
        self.ttft.extend(old.ttft.iter().map(|t| TtftSample {
            at_secs: t.at_secs + self.offset_secs,
            ..t.clone()
        }));
        let over = self.ttft.len().saturating_sub(EARLIER_TTFT_MAX);
        self.ttft.drain(..over);
        for (name, value, _) in super::panels::counter_rows(old) {
            match self.counters.iter_mut().find(|(n, _)| *n == name) {
                Some((_, sum)) => *sum += value,
                None => self.counters.push((name, value)),
            }
        }
        self.restarts_at_secs.push(at_secs);
        self.offset_secs = at_secs;
    }

    /// The replaced engines' count of a counter (0 before any replacement).
    pub fn counter(&self, name: &str) -> u64 {
        self.counters
            .iter()
            .find(|(n, _)| *n == name)
            .map_or(0, |(_, v)| *v)
    }

    /// Every first-token sample to show: the replaced engines' and the live service's, on the
    /// window's clock, oldest first. Borrowed until an apply replaced an engine (this runs
    /// every frame).
    pub fn ttft_with<'s>(&self, s: &'s ServiceSnapshot) -> Cow<'s, [TtftSample]> {
        if self.restarts_at_secs.is_empty() {
            return Cow::Borrowed(&s.ttft);
        }
        let live = s.ttft.iter().map(|t| TtftSample {
            at_secs: t.at_secs + self.offset_secs,
            ..t.clone()
        });
        Cow::Owned(self.ttft.iter().cloned().chain(live).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ids::RequestId;
    use crate::service::SchedulerSettings;

    fn snapshot(uptime_secs: f64, pauses: u64, ttft_at: &[f64]) -> ServiceSnapshot {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, true);
        s.uptime_secs = uptime_secs;
        s.counters.pauses = pauses;
        s.ttft = ttft_at
            .iter()
            .enumerate()
            .map(|(i, at)| TtftSample {
                request_id: RequestId(i as u64 + 1),
                client_id: format!("chatcmpl-{}", i + 1),
                client: String::new(),
                priority: 0,
                ttft_secs: 0.5,
                at_secs: *at,
            })
            .collect();
        s
    }

    #[test]
    fn the_windows_clock_samples_and_counters_run_on_across_two_replacements() {
        let mut earlier = Earlier::default();
        earlier.replaced(&snapshot(10.0, 2, &[3.0]));
        earlier.replaced(&snapshot(5.0, 1, &[4.0]));
        let live = snapshot(2.0, 4, &[1.0]);
        assert_eq!(earlier.restarts_at_secs, [10.0, 15.0]);
        assert_eq!(earlier.now_secs(&live), 17.0);
        let at: Vec<f64> = earlier.ttft_with(&live).iter().map(|t| t.at_secs).collect();
        assert_eq!(at, [3.0, 14.0, 16.0]);
        assert_eq!(earlier.counter("pauses"), 3);
        assert_eq!(earlier.counter("resumes"), 0);
    }
}
