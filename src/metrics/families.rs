//! The registry's families: every metric's name and help, registered once per registry (one
//! for the app's run).

use super::{Histograms, ModelLabel, PriorityLabel, ReasonLabel, StateLabel};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

#[derive(Default)]
pub(super) struct Families {
    pub(super) waiting: Gauge,
    pub(super) running: Gauge,
    pub(super) parked: Gauge,
    pub(super) kv_cells_used: Gauge,
    pub(super) kv_cells_total: Gauge,
    pub(super) cache_entries: Gauge,
    pub(super) cache_bytes: Gauge,
    pub(super) checkpoint_bytes: Gauge,
    pub(super) engine_up: Gauge,
    pub(super) preemptions: Counter,
    pub(super) give_ways: Family<ReasonLabel, Counter>,
    pub(super) resumes: Counter,
    pub(super) checkpoint_restores: Counter,
    pub(super) checkpoint_tokens_saved: Counter,
    pub(super) prefix_losses: Counter,
    pub(super) cancellations: Family<StateLabel, Counter>,
    pub(super) engine_restarts: Counter,
    pub(super) kv_pool_mismatches: Counter,
    pub(super) finished: Family<ReasonLabel, Counter>,
    pub(super) failed: Counter,
    pub(super) refused: Counter,
    pub(super) prompt_tokens_read: Counter,
    pub(super) prompt_tokens_cached: Counter,
    pub(super) generation_tokens: Counter,
    pub(super) cache_hits: Counter,
    pub(super) cache_misses: Counter,
    pub(super) grammars_built: Counter,
    pub(super) output_cap_cuts: Counter,
    pub(super) grammar_cache_hits: Counter,
    pub(super) vllm_waiting: Family<ModelLabel, Gauge>,
    pub(super) vllm_running: Family<ModelLabel, Gauge>,
    pub(super) vllm_preemptions: Family<ModelLabel, Counter>,
}

/// The per-request histograms by priority class: time to first token, queue time, time
/// parked and pauses, in that order.
pub(super) fn register_histograms(r: &mut Registry, h: [&Histograms<PriorityLabel>; 4]) {
    let [ttft, queue_time, parked_time, pauses] = h;
    let histograms = [
        (
            "strata_time_to_first_token_seconds",
            "Arrival to the first token sent, by priority class",
            ttft,
        ),
        (
            "strata_request_queue_time_seconds",
            "Arrival to the first slot, by priority class",
            queue_time,
        ),
        (
            "strata_request_parked_seconds",
            "Time one request spent parked (paused, gave way, pool full) in all, by priority class",
            parked_time,
        ),
        (
            "strata_request_pauses",
            "Times one request's decode was paused for a higher priority, by priority class",
            pauses,
        ),
    ];
    for (name, help, family) in histograms {
        r.register(name, help, family.clone());
    }
}

/// The levels: queue sizes, the KV pool, the conversation cache, the engine.
pub(super) fn register_levels(r: &mut Registry, f: &Families) {
    let gauges = [
        (
            "strata_num_requests_waiting",
            "Requests waiting for a slot",
            &f.waiting,
        ),
        (
            "strata_num_requests_running",
            "Requests holding a slot (reading or decoding)",
            &f.running,
        ),
        (
            "strata_num_requests_parked",
            "Requests parked (paused decodes and reads that gave way)",
            &f.parked,
        ),
        (
            "strata_kv_cells_used",
            "KV cells the scheduler counts as used",
            &f.kv_cells_used,
        ),
        (
            "strata_kv_cells_capacity",
            "KV cells of the engine's unified pool",
            &f.kv_cells_total,
        ),
        (
            "strata_conversation_cache_entries",
            "Conversations in the host-RAM cache",
            &f.cache_entries,
        ),
        (
            "strata_conversation_cache_bytes",
            "Bytes of the host-RAM conversation cache",
            &f.cache_bytes,
        ),
        (
            "strata_checkpoint_bytes",
            "Bytes of the context checkpoints the engine keeps in host RAM",
            &f.checkpoint_bytes,
        ),
        (
            "strata_engine_up",
            "1 while the engine is ready",
            &f.engine_up,
        ),
    ];
    for (name, help, gauge) in gauges {
        r.register(name, help, gauge.clone());
    }
}

/// The scheduler's counters (prometheus-client appends `_total`): what interrupted, was read
/// again or restarted, and the cancellations by state.
pub(super) fn register_scheduler_counters(r: &mut Registry, f: &Families) {
    let plain = [
        (
            "strata_preemptions",
            "Decoding requests paused for a higher priority (R7)",
            &f.preemptions,
        ),
        ("strata_resumes", "Paused decodes resumed", &f.resumes),
        (
            "strata_checkpoint_restores",
            "Conversations continued from a context checkpoint (a cut the cache could not make)",
            &f.checkpoint_restores,
        ),
        (
            "strata_checkpoint_tokens_saved",
            "Prompt tokens a context checkpoint kept from being read again",
            &f.checkpoint_tokens_saved,
        ),
        (
            "strata_processed_prefix_losses",
            "Prompt tokens read a second time (0 when healthy)",
            &f.prefix_losses,
        ),
        (
            "strata_engine_restarts",
            "Times an engine came up again after a death or a restart",
            &f.engine_restarts,
        ),
        (
            "strata_kv_pool_mismatches",
            "Steps after which the engine's KV pool held other cells than the scheduler counted \
             (0 when healthy; logged, never an engine restart)",
            &f.kv_pool_mismatches,
        ),
    ];
    for (name, help, counter) in plain {
        r.register(name, help, counter.clone());
    }
    r.register(
        "strata_give_ways",
        "Prompt reads that gave way at a chunk boundary, by reason",
        f.give_ways.clone(),
    );
    r.register(
        "strata_cancellations",
        "Requests cancelled, by the state they were in",
        f.cancellations.clone(),
    );
}

/// The requests' counters: how they ended, their tokens, the cache and their grammars.
pub(super) fn register_request_counters(r: &mut Registry, f: &Families) {
    let plain = [
        (
            "strata_requests_failed",
            "Admitted requests that failed (engine death, restart)",
            &f.failed,
        ),
        (
            "strata_requests_refused",
            "Requests refused at arrival (queue full, too long)",
            &f.refused,
        ),
        (
            "strata_prompt_tokens",
            "Prompt tokens read by the engine",
            &f.prompt_tokens_read,
        ),
        (
            "strata_prompt_tokens_cached",
            "Prompt tokens served from held or cached conversations",
            &f.prompt_tokens_cached,
        ),
        (
            "strata_generation_tokens",
            "Output tokens sent",
            &f.generation_tokens,
        ),
        (
            "strata_conversation_cache_hits",
            "Requests that reused a held or cached conversation prefix",
            &f.cache_hits,
        ),
        (
            "strata_conversation_cache_misses",
            "Requests that read their whole prompt",
            &f.cache_misses,
        ),
        (
            "strata_output_cap_cuts",
            "Requests that ended at a limit max_output_tokens_cap had lowered",
            &f.output_cap_cuts,
        ),
        (
            "strata_grammars_built",
            "Output grammars built from a request's tools or schema",
            &f.grammars_built,
        ),
        (
            "strata_grammar_cache_hits",
            "Output grammars taken from the cache (the same tools as an earlier request)",
            &f.grammar_cache_hits,
        ),
    ];
    for (name, help, counter) in plain {
        r.register(name, help, counter.clone());
    }
    r.register(
        "strata_requests_finished",
        "Requests that ended normally, by finish reason",
        f.finished.clone(),
    );
}

/// The vLLM names dashboards already read, labelled by the model.
pub(super) fn register_vllm(r: &mut Registry, f: &Families, ttft: &Histograms<ModelLabel>) {
    let gauges = [
        (
            "vllm:num_requests_waiting",
            "Requests waiting (vLLM name)",
            &f.vllm_waiting,
        ),
        (
            "vllm:num_requests_running",
            "Requests running (vLLM name)",
            &f.vllm_running,
        ),
    ];
    for (name, help, family) in gauges {
        r.register(name, help, family.clone());
    }
    r.register(
        "vllm:time_to_first_token_seconds",
        "Time to first token (vLLM name)",
        ttft.clone(),
    );
    r.register(
        "vllm:num_preemptions",
        "Preemptions (vLLM name)",
        f.vllm_preemptions.clone(),
    );
}
