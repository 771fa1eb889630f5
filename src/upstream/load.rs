//! How busy an upstream is, from its `/metrics` (and llama-server's `/slots`), whether it has
//! room for one more request, and our priority in its direction.

use super::UpstreamKind;
use super::prometheus_text::{PrometheusSample, parse_prometheus_text};
use serde::Serialize;
use serde_json::Value;

/// What an upstream's `/metrics` says of its load; `None` where its kind does not say it.
/// Counts are summed over its series (a vLLM with several engines, an SGLang with several
/// ranks), the KV use is the fullest one's.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct UpstreamLoad {
    /// Requests it holds but does not run yet.
    pub requests_waiting: Option<u64>,
    pub requests_running: Option<u64>,
    /// Of its KV cache in use, 0 to 1.
    pub kv_used_ratio: Option<f64>,
    /// Prompt tokens its prefix cache served, since it started.
    pub prefix_cache_hit_tokens: Option<u64>,
    /// Requests it preempted (vLLM) or retracted (SGLang), since it started.
    pub preemptions: Option<u64>,
}

/// The metric names each kind's load is read from, with the version they were read in.
struct MetricNames {
    waiting: &'static str,
    running: &'static str,
    kv_used: &'static [&'static str],
    prefix_hits: Option<&'static str>,
    preemptions: Option<&'static str>,
}

/// vLLM 0.20.2 (`vllm/v1/metrics/loggers.py`); `vllm:gpu_cache_usage_perc` is the KV use's
/// name before 0.9.2 (removed by 0.12.0).
const VLLM: MetricNames = MetricNames {
    waiting: "vllm:num_requests_waiting",
    running: "vllm:num_requests_running",
    kv_used: &["vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"],
    prefix_hits: Some("vllm:prefix_cache_hits_total"),
    preemptions: Some("vllm:num_preemptions_total"),
};

/// SGLang 0.5.23 (`sglang/srt/observability/metrics_collector.py`; `--enable-metrics`).
const SGLANG: MetricNames = MetricNames {
    waiting: "sglang:num_queue_reqs",
    running: "sglang:num_running_reqs",
    kv_used: &["sglang:token_usage"],
    prefix_hits: Some("sglang:cached_tokens_total"),
    preemptions: Some("sglang:num_retracted_requests_total"),
};

/// llama-server b11434 (`--metrics`): no KV use (its `/slots` has each slot's length), no
/// preemption.
const LLAMA_SERVER: MetricNames = MetricNames {
    waiting: "llamacpp:requests_deferred",
    running: "llamacpp:requests_processing",
    kv_used: &[],
    prefix_hits: Some("llamacpp:prompt_tokens_cached_total"),
    preemptions: None,
};

impl UpstreamLoad {
    /// The load `metrics_text` (a `/metrics` answer) shows for an upstream of `kind`; an
    /// undetected kind (`auto`) shows nothing.
    pub fn from_metrics(kind: UpstreamKind, metrics_text: &str) -> Self {
        let names = match kind {
            UpstreamKind::Vllm => VLLM,
            UpstreamKind::Sglang => SGLANG,
            UpstreamKind::LlamaServer => LLAMA_SERVER,
            UpstreamKind::Auto => return Self::default(),
        };
        let samples = parse_prometheus_text(metrics_text);
        let sum = |name: &str| -> Option<f64> {
            let mut of = samples.iter().filter(|s| s.name == name).peekable();
            of.peek()?;
            Some(of.map(|s| s.value).sum())
        };
        let count = |name: &str| sum(name).map(|v| v.max(0.0).round() as u64);
        let max = |name: &str| -> Option<f64> {
            samples
                .iter()
                .filter(|s| s.name == name)
                .map(|s: &PrometheusSample| s.value)
                .reduce(f64::max)
        };
        Self {
            requests_waiting: count(names.waiting),
            requests_running: count(names.running),
            kv_used_ratio: names.kv_used.iter().find_map(|n| max(n)),
            prefix_cache_hit_tokens: names.prefix_hits.and_then(count),
            preemptions: names.preemptions.and_then(count),
        }
    }
}

/// One of llama-server's slots, from `GET /slots` (b11434: on by default).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SlotState {
    pub id: u32,
    /// Busy with a request (`is_processing`).
    pub busy: bool,
    /// Its context, in tokens (`n_ctx`).
    pub ctx_tokens: u32,
}

/// The slots a `/slots` answer lists; `None` if it is not that route's shape.
pub fn parse_slots(body: &Value) -> Option<Vec<SlotState>> {
    body.as_array()?
        .iter()
        .map(|slot| {
            Some(SlotState {
                id: u32::try_from(slot.get("id")?.as_u64()?).ok()?,
                busy: slot.get("is_processing")?.as_bool()?,
                ctx_tokens: u32::try_from(slot.get("n_ctx")?.as_u64()?).unwrap_or(u32::MAX),
            })
        })
        .collect()
}

/// When an upstream without slots (vLLM, SGLang) takes one more request: its own queue at
/// most `max_waiting` requests and its KV use below `max_kv_used_ratio` (the gateways' rule:
/// dispatch while the engine's queue and memory are low, so that the order is ours).
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub struct DispatchLimits {
    pub max_waiting: u64,
    pub max_kv_used_ratio: f64,
}

impl Default for DispatchLimits {
    /// Nothing waiting there (our queue orders every request it would hold) and a KV cache
    /// under 90 % full.
    fn default() -> Self {
        Self {
            max_waiting: 0,
            max_kv_used_ratio: 0.9,
        }
    }
}

/// Whether an upstream has room for one more request: llama-server an idle slot; vLLM and
/// SGLang their queue and KV use within `limits`, where their metrics say them (a figure
/// they do not give does not hold a request back).
pub fn has_room(
    kind: UpstreamKind,
    load: &UpstreamLoad,
    slots: Option<&[SlotState]>,
    limits: DispatchLimits,
) -> bool {
    match kind {
        UpstreamKind::LlamaServer => slots.is_some_and(|s| s.iter().any(|slot| !slot.busy)),
        UpstreamKind::Vllm | UpstreamKind::Sglang => {
            load.requests_waiting
                .is_none_or(|w| w <= limits.max_waiting)
                && load
                    .kv_used_ratio
                    .is_none_or(|k| k < limits.max_kv_used_ratio)
        }
        UpstreamKind::Auto => false,
    }
}

/// Our effective priority (higher first) as the upstream's `priority` field: vLLM runs lower
/// values first, SGLang higher by default (`low_values_first` when it was started with
/// `--schedule-low-priority-values-first`); llama-server has no priority (`None`).
pub fn upstream_priority(kind: UpstreamKind, ours: i32, low_values_first: bool) -> Option<i64> {
    let ours = i64::from(ours);
    match kind {
        UpstreamKind::Vllm => Some(-ours),
        UpstreamKind::Sglang if low_values_first => Some(-ours),
        UpstreamKind::Sglang => Some(ours),
        UpstreamKind::LlamaServer | UpstreamKind::Auto => None,
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A file of `tests/fixtures/upstream/`.
    pub(crate) fn fixture(path: &str) -> String {
        let full = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/upstream")
            .join(path);
        std::fs::read_to_string(&full).unwrap_or_else(|e| panic!("{}: {e}", full.display()))
    }

    #[test]
    fn each_kind_s_metrics_give_its_queue_running_kv_use_prefix_hits_and_preemptions() {
        let vllm =
            UpstreamLoad::from_metrics(UpstreamKind::Vllm, &fixture("vllm-0.20.2/metrics.txt"));
        assert_eq!(
            vllm,
            UpstreamLoad {
                requests_waiting: Some(5),
                requests_running: Some(12),
                kv_used_ratio: Some(0.8734),
                prefix_cache_hit_tokens: Some(1_201_152),
                preemptions: Some(3),
            }
        );
        let sglang =
            UpstreamLoad::from_metrics(UpstreamKind::Sglang, &fixture("sglang-0.5.23/metrics.txt"));
        assert_eq!(
            sglang,
            UpstreamLoad {
                requests_waiting: Some(5),
                requests_running: Some(12),
                kv_used_ratio: Some(0.8734),
                prefix_cache_hit_tokens: Some(418_432),
                // 0.5.23's fixture has only the retracted gauge, not the counter
                preemptions: None,
            }
        );
        // captured while slot 0 streamed an answer
        let llama = UpstreamLoad::from_metrics(
            UpstreamKind::LlamaServer,
            &fixture("llama-server-b11434/metrics-busy.txt"),
        );
        assert_eq!(
            llama,
            UpstreamLoad {
                requests_waiting: Some(0),
                requests_running: Some(1),
                kv_used_ratio: None,
                prefix_cache_hit_tokens: Some(0),
                preemptions: None,
            }
        );
        // another kind's names are not read
        let wrong =
            UpstreamLoad::from_metrics(UpstreamKind::Vllm, &fixture("sglang-0.5.23/metrics.txt"));
        assert_eq!(wrong, UpstreamLoad::default());
    }

    #[test]
    fn several_engines_counts_add_up_and_the_fullest_kv_cache_counts() {
        let text = "vllm:num_requests_waiting{engine=\"0\"} 2\n\
            vllm:num_requests_waiting{engine=\"1\"} 3\n\
            vllm:gpu_cache_usage_perc{engine=\"0\"} 0.5\n\
            vllm:gpu_cache_usage_perc{engine=\"1\"} 0.75\n";
        let load = UpstreamLoad::from_metrics(UpstreamKind::Vllm, text);
        assert_eq!(load.requests_waiting, Some(5));
        assert_eq!(load.kv_used_ratio, Some(0.75), "the older name is read too");
    }

    #[test]
    fn llama_server_slots_say_which_are_busy() {
        let busy: Value =
            serde_json::from_str(&fixture("llama-server-b11434/slots-busy.json")).unwrap();
        let slots = parse_slots(&busy).expect("the /slots shape");
        assert_eq!(
            slots,
            [
                SlotState {
                    id: 0,
                    busy: true,
                    ctx_tokens: 2048
                },
                SlotState {
                    id: 1,
                    busy: false,
                    ctx_tokens: 2048
                },
            ]
        );
        assert_eq!(parse_slots(&serde_json::json!({"error": "no"})), None);
    }

    #[test]
    fn room_is_an_idle_slot_or_a_short_queue_and_a_kv_cache_not_full() {
        let limits = DispatchLimits::default();
        let slot = |busy| SlotState {
            id: 0,
            busy,
            ctx_tokens: 2048,
        };
        let none = UpstreamLoad::default();
        assert!(has_room(
            UpstreamKind::LlamaServer,
            &none,
            Some(&[slot(true), slot(false)]),
            limits
        ));
        assert!(!has_room(
            UpstreamKind::LlamaServer,
            &none,
            Some(&[slot(true)]),
            limits
        ));
        assert!(!has_room(UpstreamKind::LlamaServer, &none, None, limits));
        let load = |waiting, kv| UpstreamLoad {
            requests_waiting: Some(waiting),
            kv_used_ratio: Some(kv),
            ..UpstreamLoad::default()
        };
        assert!(has_room(UpstreamKind::Vllm, &load(0, 0.5), None, limits));
        assert!(!has_room(UpstreamKind::Vllm, &load(1, 0.5), None, limits));
        assert!(!has_room(
            UpstreamKind::Sglang,
            &load(0, 0.95),
            None,
            limits
        ));
        assert!(
            has_room(UpstreamKind::Sglang, &none, None, limits),
            "figures it does not give hold nothing back"
        );
        assert!(!has_room(UpstreamKind::Auto, &none, None, limits));
    }

    #[test]
    fn our_priority_goes_in_each_upstream_s_direction() {
        assert_eq!(upstream_priority(UpstreamKind::Vllm, 5, false), Some(-5));
        assert_eq!(upstream_priority(UpstreamKind::Sglang, 5, false), Some(5));
        assert_eq!(upstream_priority(UpstreamKind::Sglang, 5, true), Some(-5));
        assert_eq!(upstream_priority(UpstreamKind::LlamaServer, 5, false), None);
    }
}
