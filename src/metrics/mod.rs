//! Prometheus metrics through `prometheus-client` (OpenMetrics text): the `strata_` family and
//! the vLLM names dashboards already read. The service actor records events (time to first
//! token, queue time, tokens) as they happen and copies the scheduler's totals and the queue
//! sizes in after every change ([`Metrics::sync`]); `/metrics` encodes the registry.
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
    pub engine_up: bool,
    pub model: String,
}

/// A histogram family with the latency buckets.
type Histograms<S> = Family<S, Histogram, fn() -> Histogram>;

#[derive(Default)]
struct Families {
    waiting: Gauge,
    running: Gauge,
    parked: Gauge,
    kv_cells_used: Gauge,
    kv_cells_total: Gauge,
    cache_entries: Gauge,
    cache_bytes: Gauge,
    engine_up: Gauge,
    preemptions: Counter,
    give_ways: Family<ReasonLabel, Counter>,
    resumes: Counter,
    prefix_losses: Counter,
    cancellations: Family<StateLabel, Counter>,
    engine_restarts: Counter,
    kv_pool_mismatches: Counter,
    finished: Family<ReasonLabel, Counter>,
    failed: Counter,
    refused: Counter,
    prompt_tokens_read: Counter,
    prompt_tokens_cached: Counter,
    generation_tokens: Counter,
    cache_hits: Counter,
    cache_misses: Counter,
    grammars_built: Counter,
    output_cap_cuts: Counter,
    grammar_cache_hits: Counter,
    vllm_waiting: Family<ModelLabel, Gauge>,
    vllm_running: Family<ModelLabel, Gauge>,
    vllm_preemptions: Family<ModelLabel, Counter>,
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
    pub fn new() -> Self {
        let f = Families::default();
        let ttft: Histograms<PriorityLabel> = Family::new_with_constructor(histogram);
        let queue_time: Histograms<PriorityLabel> = Family::new_with_constructor(histogram);
        let parked_time: Histograms<PriorityLabel> = Family::new_with_constructor(histogram);
        let pauses: Histograms<PriorityLabel> = Family::new_with_constructor(pause_histogram);
        let vllm_ttft: Histograms<ModelLabel> = Family::new_with_constructor(histogram);
        let mut r = Registry::default();
        r.register(
            "strata_time_to_first_token_seconds",
            "Arrival to the first token sent, by priority class",
            ttft.clone(),
        );
        r.register(
            "strata_request_queue_time_seconds",
            "Arrival to the first slot, by priority class",
            queue_time.clone(),
        );
        r.register(
            "strata_request_parked_seconds",
            "Time one request spent parked (paused, gave way, pool full) in all, by priority class",
            parked_time.clone(),
        );
        r.register(
            "strata_request_pauses",
            "Times one request's decode was paused for a higher priority, by priority class",
            pauses.clone(),
        );
        r.register(
            "strata_num_requests_waiting",
            "Requests waiting for a slot",
            f.waiting.clone(),
        );
        r.register(
            "strata_num_requests_running",
            "Requests holding a slot (reading or decoding)",
            f.running.clone(),
        );
        r.register(
            "strata_num_requests_parked",
            "Requests parked (paused decodes and reads that gave way)",
            f.parked.clone(),
        );
        r.register(
            "strata_kv_cells_used",
            "KV cells the scheduler counts as used",
            f.kv_cells_used.clone(),
        );
        r.register(
            "strata_kv_cells_capacity",
            "KV cells of the engine's unified pool",
            f.kv_cells_total.clone(),
        );
        r.register(
            "strata_conversation_cache_entries",
            "Conversations in the host-RAM cache",
            f.cache_entries.clone(),
        );
        r.register(
            "strata_conversation_cache_bytes",
            "Bytes of the host-RAM conversation cache",
            f.cache_bytes.clone(),
        );
        r.register(
            "strata_engine_up",
            "1 while the engine is ready",
            f.engine_up.clone(),
        );
        r.register(
            "strata_preemptions",
            "Decoding requests paused for a higher priority (R7)",
            f.preemptions.clone(),
        );
        r.register(
            "strata_give_ways",
            "Prompt reads that gave way at a chunk boundary, by reason",
            f.give_ways.clone(),
        );
        r.register(
            "strata_resumes",
            "Paused decodes resumed",
            f.resumes.clone(),
        );
        r.register(
            "strata_processed_prefix_losses",
            "Prompt tokens read a second time (0 when healthy)",
            f.prefix_losses.clone(),
        );
        r.register(
            "strata_cancellations",
            "Requests cancelled, by the state they were in",
            f.cancellations.clone(),
        );
        r.register(
            "strata_engine_restarts",
            "Times an engine came up again after a death or a restart",
            f.engine_restarts.clone(),
        );
        r.register(
            "strata_kv_pool_mismatches",
            "Steps after which the engine's KV pool held other cells than the scheduler counted \
             (0 when healthy; logged, never an engine restart)",
            f.kv_pool_mismatches.clone(),
        );
        r.register(
            "strata_requests_finished",
            "Requests that ended normally, by finish reason",
            f.finished.clone(),
        );
        r.register(
            "strata_requests_failed",
            "Admitted requests that failed (engine death, restart)",
            f.failed.clone(),
        );
        r.register(
            "strata_requests_refused",
            "Requests refused at arrival (queue full, too long)",
            f.refused.clone(),
        );
        r.register(
            "strata_prompt_tokens",
            "Prompt tokens read by the engine",
            f.prompt_tokens_read.clone(),
        );
        r.register(
            "strata_prompt_tokens_cached",
            "Prompt tokens served from held or cached conversations",
            f.prompt_tokens_cached.clone(),
        );
        r.register(
            "strata_generation_tokens",
            "Output tokens sent",
            f.generation_tokens.clone(),
        );
        r.register(
            "strata_conversation_cache_hits",
            "Requests that reused a held or cached conversation prefix",
            f.cache_hits.clone(),
        );
        r.register(
            "strata_conversation_cache_misses",
            "Requests that read their whole prompt",
            f.cache_misses.clone(),
        );
        r.register(
            "strata_output_cap_cuts",
            "Requests that ended at a limit max_output_tokens_cap had lowered",
            f.output_cap_cuts.clone(),
        );
        r.register(
            "strata_grammars_built",
            "Output grammars built from a request's tools or schema",
            f.grammars_built.clone(),
        );
        r.register(
            "strata_grammar_cache_hits",
            "Output grammars taken from the cache (the same tools as an earlier request)",
            f.grammar_cache_hits.clone(),
        );
        r.register(
            "vllm:num_requests_waiting",
            "Requests waiting (vLLM name)",
            f.vllm_waiting.clone(),
        );
        r.register(
            "vllm:num_requests_running",
            "Requests running (vLLM name)",
            f.vllm_running.clone(),
        );
        r.register(
            "vllm:time_to_first_token_seconds",
            "Time to first token (vLLM name)",
            vllm_ttft.clone(),
        );
        r.register(
            "vllm:num_preemptions",
            "Preemptions (vLLM name)",
            f.vllm_preemptions.clone(),
        );
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

    fn model(&self) -> ModelLabel {
        let last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        ModelLabel {
            model_name: last.1.clone(),
        }
    }

    /// The engine's pool differed from the scheduler's after a step.
    pub fn note_pool_mismatch(&self) {
        self.f.kv_pool_mismatches.inc();
    }

    /// A request's output grammar was taken from the cache (`cached`) or built.
    pub fn note_grammar(&self, cached: bool) {
        if cached {
            self.f.grammar_cache_hits.inc();
        } else {
            self.f.grammars_built.inc();
        }
    }

    pub fn observe_ttft(&self, priority: i32, secs: f64) {
        let label = PriorityLabel {
            priority: priority_class(priority),
        };
        self.ttft.get_or_create(&label).observe(secs);
        self.vllm_ttft.get_or_create(&self.model()).observe(secs);
    }

    pub fn observe_queue_time(&self, priority: i32, secs: f64) {
        let label = PriorityLabel {
            priority: priority_class(priority),
        };
        self.queue_time.get_or_create(&label).observe(secs);
    }

    /// An ended request's time parked in all and its pauses.
    pub fn observe_request_cost(&self, priority: i32, parked_secs: f64, pauses: u32) {
        let label = PriorityLabel {
            priority: priority_class(priority),
        };
        self.parked_time.get_or_create(&label).observe(parked_secs);
        self.pauses.get_or_create(&label).observe(f64::from(pauses));
    }

    /// A request ended: its tokens and how it ended.
    pub fn request_ended(
        &self,
        reason: Option<FinishReason>,
        prompt_read: u32,
        prompt_cached: u32,
        output: u32,
    ) {
        self.f.prompt_tokens_read.inc_by(u64::from(prompt_read));
        self.f.prompt_tokens_cached.inc_by(u64::from(prompt_cached));
        self.f.generation_tokens.inc_by(u64::from(output));
        if let Some(reason) = reason {
            let reason = match reason {
                FinishReason::Stop => "stop",
                FinishReason::Length => "length",
                FinishReason::Cancelled => "cancelled",
            };
            self.f.finished.get_or_create(&ReasonLabel { reason }).inc();
        }
    }

    /// A request got its first slot, reusing `kept_tokens` of a held conversation.
    pub fn admitted(&self, kept_tokens: u32) {
        if kept_tokens > 0 {
            self.f.cache_hits.inc();
        } else {
            self.f.cache_misses.inc();
        }
    }

    /// Copies the scheduler's totals (by difference) and the current levels in.
    pub fn sync(&self, counters: &Counters, levels: &Levels) {
        let mut last = self.last.lock().unwrap_or_else(|e| e.into_inner());
        if last.1 != levels.model {
            self.f.vllm_waiting.clear();
            self.f.vllm_running.clear();
            last.1 = levels.model.clone();
        }
        let model = ModelLabel {
            model_name: levels.model.clone(),
        };
        let old = &last.0;
        let up = |counter: &Counter, new: u64, old: u64| {
            counter.inc_by(new.saturating_sub(old));
        };
        up(&self.f.preemptions, counters.pauses, old.pauses);
        // The vLLM names carry the model: none before the first handshake.
        let named = !levels.model.is_empty();
        if named {
            up(
                &self.f.vllm_preemptions.get_or_create(&model),
                counters.pauses,
                old.pauses,
            );
        }
        up(&self.f.resumes, counters.resumes, old.resumes);
        up(
            &self.f.prefix_losses,
            counters.processed_prefix_losses,
            old.processed_prefix_losses,
        );
        up(
            &self.f.engine_restarts,
            counters.engine_restarts,
            old.engine_restarts,
        );
        up(&self.f.failed, counters.failed, old.failed);
        up(&self.f.refused, counters.refusals, old.refusals);
        up(
            &self.f.output_cap_cuts,
            counters.output_cap_cuts,
            old.output_cap_cuts,
        );
        let give_ways = [
            (
                "higher_priority",
                counters.give_ways_higher_priority,
                old.give_ways_higher_priority,
            ),
            (
                "shorter_left",
                counters.give_ways_shorter_left,
                old.give_ways_shorter_left,
            ),
        ];
        for (reason, new, old) in give_ways {
            up(
                &self.f.give_ways.get_or_create(&ReasonLabel { reason }),
                new,
                old,
            );
        }
        let (c, o) = (&counters.cancellations, &old.cancellations);
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
        let gauge = |g: &Gauge, v: u64| {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        };
        gauge(&self.f.waiting, levels.waiting as u64);
        gauge(&self.f.running, levels.running as u64);
        gauge(&self.f.parked, levels.parked as u64);
        gauge(&self.f.kv_cells_used, levels.kv_cells_used);
        gauge(&self.f.kv_cells_total, levels.kv_cells_total);
        gauge(
            &self.f.cache_entries,
            levels.conversation_cache_entries as u64,
        );
        gauge(&self.f.cache_bytes, levels.conversation_cache_bytes);
        gauge(&self.f.engine_up, u64::from(levels.engine_up));
        if named {
            gauge(
                &self.f.vllm_waiting.get_or_create(&model),
                levels.waiting as u64,
            );
            gauge(
                &self.f.vllm_running.get_or_create(&model),
                levels.running as u64,
            );
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
        m.sync(&c, &levels);
        c.pauses = 5;
        c.cancellations.parked = 1;
        m.sync(&c, &levels);
        m.observe_ttft(-40, 0.3);
        m.observe_ttft(7, 0.1);
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
}
