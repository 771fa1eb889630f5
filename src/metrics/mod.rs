//! Prometheus metrics through `prometheus-client` (OpenMetrics text): the `strata_` family and
//! the vLLM names dashboards already read. Every metric is fed through one input,
//! [`Metrics::record`], by the service's observation stream: each [`Fact`] is an event of it
//! (an admission, a first token, an end, a grammar, a pool mismatch) or the totals and levels
//! published after every change; `/metrics` encodes the registry. The control plane makes one
//! registry for the app's run and hands it to every engine it starts, so an apply resets no
//! counter.
//!
//! Priority labels are bounded: the class `low` (< 0), `normal` (0) or `high` (> 0) of the
//! clamped priority, never a raw client integer. prometheus-client appends `_total` to
//! counters, so they are registered without it.

use crate::scheduler::{Counters, FinishReason};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;
use std::sync::Mutex;

mod families;

use families::Families;

/// The content type of [`Metrics::encode`]'s output.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Latency buckets in seconds (vLLM's, so dashboards' quantiles line up).
const LATENCY_BUCKETS_SECS: [f64; 22] = [
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PriorityLabel {
    priority: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ReasonLabel {
    reason: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct StateLabel {
    state: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelLabel {
    model_name: String,
}

/// The bounded label for a (clamped) priority.
pub fn priority_class(priority: i32) -> &'static str {
    match priority {
        p if p < 0 => "low",
        0 => "normal",
        _ => "high",
    }
}

/// Queue sizes and engine figures copied in at every change.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Levels {
    pub waiting: usize,
    pub running: usize,
    pub parked: usize,
    pub kv_cells_used: u64,
    pub kv_cells_total: u64,
    pub conversation_cache_entries: usize,
    pub conversation_cache_bytes: u64,
    /// Bytes of the checkpoints the engine keeps.
    pub checkpoint_bytes: u64,
    pub engine_up: bool,
    pub model: String,
}

/// A histogram family with the latency buckets.
type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

/// What the metrics are fed: each an event of the service's observation stream, or the
/// scheduler's totals and the levels published after a change (the totals are the scheduler's
/// own counts, which several of its counters have no event for, so they come whole and the
/// counters move by the difference).
#[derive(Debug, Clone, Copy)]
pub enum Fact<'a> {
    /// A request got its first slot, `prompt_tokens_held` of its prompt already held.
    Admitted { prompt_tokens_held: u32 },
    /// A request's first token went out.
    FirstToken { priority: i32, ttft_secs: f64 },
    /// A request ended (`finish_reason` `None`: it failed), with its figures.
    Ended {
        priority: i32,
        finish_reason: Option<FinishReason>,
        prompt_tokens_read: u32,
        prompt_tokens_held: u32,
        output_tokens: u32,
        queue_wait_secs: Option<f64>,
        parked_secs: f64,
        pauses: u32,
    },
    /// A request's output grammar was taken from the cache (`cached`) or built.
    Grammar { cached: bool },
    /// The engine's KV pool held other cells than the scheduler counted after a step.
    PoolMismatch,
    /// The scheduler's totals for the app's run and the levels now.
    Totals {
        counters: &'a Counters,
        levels: &'a Levels,
    },
}

/// Every metric, and the scheduler totals last copied in (counters move by the difference).
pub struct Metrics {
    registry: Registry,
    f: Families,
    ttft: Histograms<PriorityLabel>,
    queue_time: Histograms<PriorityLabel>,
    parked_time: Histograms<PriorityLabel>,
    pauses: Histograms<PriorityLabel>,
    vllm_ttft: Histograms<ModelLabel>,
    last: Mutex<(Counters, String)>,
}

impl std::fmt::Debug for Metrics {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Metrics")
    }
}

fn histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS_SECS)
}

/// Pauses one request suffered: 0, 1, 2, 3, 5, 10, more.
fn pause_histogram() -> Histogram {
    Histogram::new([0.0, 1.0, 2.0, 3.0, 5.0, 10.0])
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// One registry with every metric at zero.
    pub fn new() -> Self {
        let f = Families::default();
        let ttft: Histograms<PriorityLabel> = Family::new_with_constructor(histogram);
        let queue_time: Histograms<PriorityLabel> = Family::new_with_constructor(histogram);
        let parked_time: Histograms<PriorityLabel> = Family::new_with_constructor(histogram);
        let pauses: Histograms<PriorityLabel> = Family::new_with_constructor(pause_histogram);
        let vllm_ttft: Histograms<ModelLabel> = Family::new_with_constructor(histogram);
        let mut r = Registry::default();
        families::register_histograms(&mut r, [&ttft, &queue_time, &parked_time, &pauses]);
        families::register_levels(&mut r, &f);
        families::register_scheduler_counters(&mut r, &f);
        families::register_request_counters(&mut r, &f);
        families::register_vllm(&mut r, &f, &vllm_ttft);
        Self {
            registry: r,
            f,
            ttft,
            queue_time,
            parked_time,
            pauses,
            vllm_ttft,
            last: Mutex::new((Counters::default(), String::new())),
        }
    }

    /// The one input: a fact of the observation stream.
    pub fn record(&self, fact: &Fact<'_>) {
        match *fact {
            Fact::Admitted { prompt_tokens_held } => self.admitted(prompt_tokens_held),
            Fact::FirstToken {
                priority,
                ttft_secs,
            } => self.first_token(priority, ttft_secs),
            Fact::Ended { .. } => self.ended(fact),
            Fact::Grammar { cached: true } => {
                self.f.grammar_cache_hits.inc();
            }
            Fact::Grammar { cached: false } => {
                self.f.grammars_built.inc();
            }
            Fact::PoolMismatch => {
                self.f.kv_pool_mismatches.inc();
            }
            Fact::Totals { counters, levels } => {
                let named = self.name_model(levels);
                self.move_counters(counters, named.as_ref());
                self.set_levels(levels, named.as_ref());
            }
        }
    }

    fn model(&self) -> ModelLabel {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        ModelLabel {
            model_name: last.1.clone(),
        }
    }

    fn first_token(&self, priority: i32, secs: f64) {
        let label = PriorityLabel {
            priority: priority_class(priority),
        };
        self.ttft.get_or_create(&label).observe(secs);
        self.vllm_ttft.get_or_create(&self.model()).observe(secs);
    }

    /// A request ended: its tokens, how it ended, its queue time, time parked and pauses.
    fn ended(&self, fact: &Fact<'_>) {
        let Fact::Ended {
            priority,
            finish_reason,
            prompt_tokens_read,
            prompt_tokens_held,
            output_tokens,
            queue_wait_secs,
            parked_secs,
            pauses,
        } = *fact
        else {
            return;
        };
        self.f
            .prompt_tokens_read
            .inc_by(u64::from(prompt_tokens_read));
        self.f
            .prompt_tokens_cached
            .inc_by(u64::from(prompt_tokens_held));
        self.f.generation_tokens.inc_by(u64::from(output_tokens));
        if let Some(reason) = finish_reason {
            let reason = match reason {
                FinishReason::Stop => "stop",
                FinishReason::Length => "length",
                FinishReason::Cancelled => "cancelled",
            };
            self.f.finished.get_or_create(&ReasonLabel { reason }).inc();
        }
        let label = PriorityLabel {
            priority: priority_class(priority),
        };
        if let Some(wait) = queue_wait_secs {
            self.queue_time.get_or_create(&label).observe(wait);
        }
        self.parked_time.get_or_create(&label).observe(parked_secs);
        self.pauses.get_or_create(&label).observe(f64::from(pauses));
    }

    fn admitted(&self, kept_tokens: u32) {
        if kept_tokens > 0 {
            self.f.cache_hits.inc();
        } else {
            self.f.cache_misses.inc();
        }
    }

    /// The vLLM names' label for the levels' model (none before the first handshake): a new
    /// model clears the old one's gauges.
    fn name_model(&self, levels: &Levels) -> Option<ModelLabel> {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.1 != levels.model {
            self.f.vllm_waiting.clear();
            self.f.vllm_running.clear();
            last.1 = levels.model.clone();
        }
        (!levels.model.is_empty()).then(|| ModelLabel {
            model_name: levels.model.clone(),
        })
    }

    /// Moves every counter by the difference between the scheduler's totals and the last ones.
    fn move_counters(&self, counters: &Counters, model: Option<&ModelLabel>) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        let old = &last.0;
        let up = |counter: &Counter, new: u64, old: u64| {
            counter.inc_by(new.saturating_sub(old));
        };
        if let Some(model) = model {
            let vllm = self.f.vllm_preemptions.get_or_create(model);
            up(&vllm, counters.pauses, old.pauses);
        }
        let (c, o) = (counters, old);
        let plain = [
            (&self.f.preemptions, c.pauses, o.pauses),
            (&self.f.resumes, c.resumes, o.resumes),
            (
                &self.f.checkpoint_restores,
                c.checkpoint_restores,
                o.checkpoint_restores,
            ),
            (
                &self.f.checkpoint_tokens_saved,
                c.checkpoint_tokens_saved,
                o.checkpoint_tokens_saved,
            ),
            (
                &self.f.prefix_losses,
                c.processed_prefix_losses,
                o.processed_prefix_losses,
            ),
            (
                &self.f.engine_restarts,
                c.engine_restarts,
                o.engine_restarts,
            ),
            (&self.f.failed, c.failed, o.failed),
            (&self.f.refused, c.refusals, o.refusals),
            (
                &self.f.output_cap_cuts,
                c.output_cap_cuts,
                o.output_cap_cuts,
            ),
        ];
        for (counter, new, old) in plain {
            up(counter, new, old);
        }
        let give_ways = [
            (
                "higher_priority",
                c.give_ways_higher_priority,
                o.give_ways_higher_priority,
            ),
            (
                "shorter_left",
                c.give_ways_shorter_left,
                o.give_ways_shorter_left,
            ),
        ];
        for (reason, new, old) in give_ways {
            up(
                &self.f.give_ways.get_or_create(&ReasonLabel { reason }),
                new,
                old,
            );
        }
        let (c, o) = (&c.cancellations, &o.cancellations);
        let cancellations = [
            ("waiting", c.waiting, o.waiting),
            ("reading", c.reading, o.reading),
            ("decoding", c.decoding, o.decoding),
            ("parked", c.parked, o.parked),
        ];
        for (state, new, old) in cancellations {
            up(
                &self.f.cancellations.get_or_create(&StateLabel { state }),
                new,
                old,
            );
        }
        last.0 = counters.clone();
    }

    /// Sets the gauges to the levels now.
    fn set_levels(&self, levels: &Levels, model: Option<&ModelLabel>) {
        let gauge = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        let f = &self.f;
        gauge(&f.waiting, levels.waiting as u64);
        gauge(&f.running, levels.running as u64);
        gauge(&f.parked, levels.parked as u64);
        gauge(&f.kv_cells_used, levels.kv_cells_used);
        gauge(&f.kv_cells_total, levels.kv_cells_total);
        gauge(&f.cache_entries, levels.conversation_cache_entries as u64);
        gauge(&f.cache_bytes, levels.conversation_cache_bytes);
        gauge(&f.checkpoint_bytes, levels.checkpoint_bytes);
        gauge(&f.engine_up, u64::from(levels.engine_up));
        if let Some(model) = model {
            gauge(&f.vllm_waiting.get_or_create(model), levels.waiting as u64);
            gauge(&f.vllm_running.get_or_create(model), levels.running as u64);
        }
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        // Writing to a String cannot fail.
        let _ = prometheus_client::encoding::text::encode(&mut text, &self.registry);
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_move_by_the_difference_and_labels_are_priority_classes() {
        let m = Metrics::new();
        let mut c = Counters {
            pauses: 2,
            ..Counters::default()
        };
        let levels = Levels {
            model: "m".into(),
            ..Levels::default()
        };
        m.record(&Fact::Totals {
            counters: &c,
            levels: &levels,
        });
        c.pauses = 5;
        c.cancellations.parked = 1;
        m.record(&Fact::Totals {
            counters: &c,
            levels: &levels,
        });
        for (priority, ttft_secs) in [(-40, 0.3), (7, 0.1)] {
            m.record(&Fact::FirstToken {
                priority,
                ttft_secs,
            });
        }
        let text = m.encode();
        assert!(text.contains("strata_preemptions_total 5\n"), "{text}");
        assert!(text.contains("strata_cancellations_total{state=\"parked\"} 1\n"));
        assert!(text.contains("strata_time_to_first_token_seconds_count{priority=\"low\"} 1\n"));
        assert!(text.contains("strata_time_to_first_token_seconds_count{priority=\"high\"} 1\n"));
        assert!(text.contains("vllm:num_preemptions_total{model_name=\"m\"} 5\n"));
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn priority_classes_are_low_normal_and_high() {
        assert_eq!(priority_class(-1), "low");
        assert_eq!(priority_class(0), "normal");
        assert_eq!(priority_class(100), "high");
    }

    #[test]
    fn each_fact_of_the_stream_moves_its_metrics() {
        let m = Metrics::new();
        m.record(&Fact::Admitted {
            prompt_tokens_held: 12,
        });
        m.record(&Fact::Admitted {
            prompt_tokens_held: 0,
        });
        m.record(&Fact::Grammar { cached: false });
        m.record(&Fact::Grammar { cached: true });
        m.record(&Fact::PoolMismatch);
        m.record(&Fact::Ended {
            priority: 0,
            finish_reason: Some(FinishReason::Length),
            prompt_tokens_read: 30,
            prompt_tokens_held: 12,
            output_tokens: 7,
            queue_wait_secs: Some(0.5),
            parked_secs: 1.0,
            pauses: 1,
        });
        let text = m.encode();
        for line in [
            "strata_conversation_cache_hits_total 1\n",
            "strata_conversation_cache_misses_total 1\n",
            "strata_grammars_built_total 1\n",
            "strata_grammar_cache_hits_total 1\n",
            "strata_kv_pool_mismatches_total 1\n",
            "strata_prompt_tokens_total 30\n",
            "strata_prompt_tokens_cached_total 12\n",
            "strata_generation_tokens_total 7\n",
            "strata_requests_finished_total{reason=\"length\"} 1\n",
            "strata_request_queue_time_seconds_count{priority=\"normal\"} 1\n",
            "strata_request_pauses_sum{priority=\"normal\"} 1.0\n",
        ] {
            assert!(text.contains(line), "{line} is not in {text}");
        }
    }

    #[test]
    fn every_metric_is_registered_once_under_its_name() {
        // a family shows once it has a label set: one fact of each kind
        let m = Metrics::new();
        let levels = Levels {
            model: "m".into(),
            ..Levels::default()
        };
        let counters = Counters::default();
        m.record(&Fact::Totals {
            counters: &counters,
            levels: &levels,
        });
        m.record(&Fact::FirstToken {
            priority: 0,
            ttft_secs: 0.1,
        });
        m.record(&Fact::Ended {
            priority: 0,
            finish_reason: Some(FinishReason::Stop),
            prompt_tokens_read: 1,
            prompt_tokens_held: 0,
            output_tokens: 1,
            queue_wait_secs: Some(0.1),
            parked_secs: 0.0,
            pauses: 0,
        });
        let text = m.encode();
        let names = [
            "strata_time_to_first_token_seconds",
            "strata_request_queue_time_seconds",
            "strata_request_parked_seconds",
            "strata_request_pauses",
            "strata_num_requests_waiting",
            "strata_num_requests_running",
            "strata_num_requests_parked",
            "strata_kv_cells_used",
            "strata_kv_cells_capacity",
            "strata_conversation_cache_entries",
            "strata_conversation_cache_bytes",
            "strata_checkpoint_bytes",
            "strata_engine_up",
            "strata_preemptions",
            "strata_give_ways",
            "strata_resumes",
            "strata_checkpoint_restores",
            "strata_checkpoint_tokens_saved",
            "strata_processed_prefix_losses",
            "strata_cancellations",
            "strata_engine_restarts",
            "strata_kv_pool_mismatches",
            "strata_requests_finished",
            "strata_requests_failed",
            "strata_requests_refused",
            "strata_prompt_tokens",
            "strata_prompt_tokens_cached",
            "strata_generation_tokens",
            "strata_conversation_cache_hits",
            "strata_conversation_cache_misses",
            "strata_output_cap_cuts",
            "strata_grammars_built",
            "strata_grammar_cache_hits",
            "vllm:num_requests_waiting",
            "vllm:num_requests_running",
            "vllm:time_to_first_token_seconds",
            "vllm:num_preemptions",
        ];
        let typed: Vec<&str> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .collect();
        assert_eq!(typed.len(), names.len(), "{typed:?}");
        for name in names {
            assert!(typed.contains(&name), "{name} is not registered: {typed:?}");
        }
    }
}
