//! Scheduler settings (every parameter of SCHEDULING.md), their bounds, and the priority helper
//! the API edge calls.

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// How a reader compares itself with an equal-priority waiting request (R3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum GiveWay {
    /// `2 × W.left ≤ R.left`, by tokens left to read (#1288). The default.
    Left,
    /// `2 × W.prompt ≤ R.prompt`, by whole prompt lengths (#656).
    Whole,
    /// Never give way (for comparisons).
    Off,
}

/// Which end of the integer priority scale goes first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PriorityOrder {
    /// Higher integers first (SGLang, #2109). The default.
    HigherFirst,
    /// Lower integers first (vLLM); turned into higher-first at the edge.
    LowerFirst,
}

/// What to do with a `max_tokens` larger than the room the context leaves (R11).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensOverContext {
    /// Clamp it; the request ends with `length`. The default.
    Clamp,
    /// Refuse the request (the strict 400).
    Reject,
}

/// The clamping range of priorities, inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PriorityRange {
    pub min: i32,
    pub max: i32,
}

impl Default for PriorityRange {
    fn default() -> Self {
        Self {
            min: -100,
            max: 100,
        }
    }
}

/// Every scheduling parameter, with SCHEDULING.md's defaults. Missing keys take their default.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct SchedulerSettings {
    /// Opt-in solo preemption (R7); refused together with `parallel` ≥ 2.
    pub solo_priority: bool,
    /// Prompt tokens per read chunk; `None` takes the engine's measured figure. Bounds 64-8192.
    pub chunk_tokens: Option<u32>,
    /// How many times one read may give way (R3).
    pub yields_max: u32,
    /// A decoding request runs at least this long before R7 pauses it.
    pub min_run_quantum_secs: f64,
    /// +1 effective priority per this many seconds waiting or parked; 0 turns aging off.
    pub aging_interval_secs: f64,
    /// With `solo_priority`, a request left to read at most this (and no priority given) gets +1.
    pub small_request_tokens: u32,
    /// Waiting requests beyond this are refused (429).
    pub queue_max: u32,
    /// Priorities are clamped to this range.
    pub priority_range: PriorityRange,
    /// Which end of the priority scale goes first (applied by `resolve_priority`).
    pub priority_order: PriorityOrder,
    /// The equal-priority give-way comparison (R3).
    pub give_way: GiveWay,
    /// Clamp or refuse a `max_tokens` over the room left (R11).
    pub max_tokens_over_context: MaxTokensOverContext,
    /// The output limit of a request that names none; `None`: the rest of the context.
    pub max_output_tokens_default: Option<u32>,
    /// The most output tokens any request gets, whatever it asks (clamped, ending with
    /// `length`, as R11 clamps); `None`: no cap.
    pub max_output_tokens_cap: Option<u32>,
    /// Output cells reserved at admission (and added each time a decode outgrows its reservation).
    pub output_reserve_tokens: u32,
    /// Conversations kept in the host-RAM conversation cache (least recently used out).
    pub host_cache_conversations_max: u32,
    /// Failed engine starts in a row before waiting requests fail with 503 and the engine
    /// stays failed until a user restart (R10).
    pub restart_attempts_max: u32,
    /// Backoff before the second start attempt; doubles for each further one.
    pub restart_backoff_secs: f64,
    /// `Retry-After` given with a 429 when the queue is full.
    pub retry_after_secs: u32,
}

impl Default for SchedulerSettings {
    fn default() -> Self {
        Self {
            solo_priority: false,
            chunk_tokens: None,
            yields_max: 2,
            min_run_quantum_secs: 5.0,
            aging_interval_secs: 30.0,
            small_request_tokens: 2048,
            queue_max: 1024,
            priority_range: PriorityRange::default(),
            priority_order: PriorityOrder::HigherFirst,
            give_way: GiveWay::Left,
            max_tokens_over_context: MaxTokensOverContext::Clamp,
            max_output_tokens_default: None,
            max_output_tokens_cap: None,
            output_reserve_tokens: 512,
            host_cache_conversations_max: 16,
            restart_attempts_max: 3,
            restart_backoff_secs: 1.0,
            retry_after_secs: 5,
        }
    }
}

/// A configuration error: names the key(s), the bound and the value.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum ConfigError {
    #[error("`{key}` must be {bound}, got {value}")]
    OutOfBounds {
        key: &'static str,
        bound: &'static str,
        value: String,
    },
    #[error(
        "`solo_priority: true` cannot be combined with `parallel: {parallel}`: solo_priority needs `parallel: 1`"
    )]
    SoloPriorityWithParallel { parallel: u32 },
}

/// Chunk size bounds (SCHEDULING.md: measured at load, bounded 64-8192).
pub const CHUNK_TOKENS_MIN: u32 = 64;
pub const CHUNK_TOKENS_MAX: u32 = 8192;

fn bound<T: PartialOrd + std::fmt::Display>(
    key: &'static str,
    value: T,
    ok: bool,
    bound: &'static str,
) -> Result<(), ConfigError> {
    if ok {
        Ok(())
    } else {
        Err(ConfigError::OutOfBounds {
            key,
            bound,
            value: value.to_string(),
        })
    }
}

impl SchedulerSettings {
    /// Checks every bound; the error names the key, the bound and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.validate_scheduling()?;
        self.validate_limits()
    }

    /// The bounds of how requests are read, run, aged and queued.
    fn validate_scheduling(&self) -> Result<(), ConfigError> {
        if let Some(c) = self.chunk_tokens {
            bound(
                "chunk_tokens",
                c,
                (CHUNK_TOKENS_MIN..=CHUNK_TOKENS_MAX).contains(&c),
                "between 64 and 8192",
            )?;
        }
        bound(
            "yields_max",
            self.yields_max,
            self.yields_max <= 16,
            "at most 16",
        )?;
        let q = self.min_run_quantum_secs;
        bound(
            "min_run_quantum_secs",
            q,
            q.is_finite() && (0.0..=3600.0).contains(&q),
            "between 0 and 3600",
        )?;
        let a = self.aging_interval_secs;
        bound(
            "aging_interval_secs",
            a,
            a.is_finite() && (a == 0.0 || (0.001..=86400.0).contains(&a)),
            "0 (off) or between 0.001 and 86400",
        )?;
        bound(
            "small_request_tokens",
            self.small_request_tokens,
            self.small_request_tokens <= 1_000_000,
            "at most 1000000",
        )?;
        bound(
            "queue_max",
            self.queue_max,
            (1..=1_000_000).contains(&self.queue_max),
            "between 1 and 1000000",
        )?;
        let r = self.priority_range;
        bound(
            "priority_range",
            format!("{}..{}", r.min, r.max),
            r.min <= r.max && r.min >= -1_000_000 && r.max <= 1_000_000,
            "min <= max, both within -1000000..1000000",
        )?;
        Ok(())
    }

    /// The bounds of output lengths, the host cache and restarts.
    fn validate_limits(&self) -> Result<(), ConfigError> {
        for (key, value) in [
            ("max_output_tokens_default", self.max_output_tokens_default),
            ("max_output_tokens_cap", self.max_output_tokens_cap),
        ] {
            if let Some(v) = value {
                bound(
                    key,
                    v,
                    (1..=10_000_000).contains(&v),
                    "between 1 and 10000000",
                )?;
            }
        }
        bound(
            "output_reserve_tokens",
            self.output_reserve_tokens,
            (1..=1_000_000).contains(&self.output_reserve_tokens),
            "between 1 and 1000000",
        )?;
        bound(
            "host_cache_conversations_max",
            self.host_cache_conversations_max,
            self.host_cache_conversations_max <= 4096,
            "at most 4096",
        )?;
        bound(
            "restart_attempts_max",
            self.restart_attempts_max,
            (1..=100).contains(&self.restart_attempts_max),
            "between 1 and 100",
        )?;
        let b = self.restart_backoff_secs;
        bound(
            "restart_backoff_secs",
            b,
            b.is_finite() && (0.0..=600.0).contains(&b),
            "between 0 and 600",
        )?;
        bound(
            "retry_after_secs",
            self.retry_after_secs,
            self.retry_after_secs <= 3600,
            "at most 3600",
        )?;
        Ok(())
    }

    /// `validate()` plus the mode check against the engine's `parallel`.
    pub fn validate_for(&self, parallel: u32) -> Result<(), ConfigError> {
        self.validate()?;
        if self.solo_priority && parallel >= 2 {
            return Err(ConfigError::SoloPriorityWithParallel { parallel });
        }
        Ok(())
    }
}

/// Turns the raw priority (body, header or key default; `None` when absent or not an integer,
/// which counts as 0) into the scheduler's higher-first integer. It is clamped to
/// `priority_range` once, in the user's units, before a lower-first value is turned around.
pub fn resolve_priority(raw: Option<i64>, settings: &SchedulerSettings) -> i32 {
    let r = settings.priority_range;
    let v = raw.unwrap_or(0);
    let clamped = v.clamp(i64::from(r.min), i64::from(r.max));
    let v = i32::try_from(clamped).unwrap_or(0);
    match settings.priority_order {
        PriorityOrder::HigherFirst => v,
        PriorityOrder::LowerFirst => v.saturating_neg(),
    }
}

/// The range of resolved (higher-first) priorities: `priority_range` itself, or its mirror image
/// when lower integers go first (`0..10` lower-first resolves into `-10..0`).
pub(crate) fn resolved_range(settings: &SchedulerSettings) -> (i32, i32) {
    let r = settings.priority_range;
    match settings.priority_order {
        PriorityOrder::HigherFirst => (r.min, r.max),
        PriorityOrder::LowerFirst => (r.max.saturating_neg(), r.min.saturating_neg()),
    }
}
