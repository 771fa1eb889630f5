//! The worker's options: what the host passes to `strata-desk engine-worker` as one JSON
//! object (`--options-json`), so a new engine setting is a field here and nowhere else on the
//! way; the same options as flags for a person starting a worker by hand.

use std::path::PathBuf;

/// llama.cpp's flash attention.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum FlashAttn {
    #[default]
    Auto,
    On,
    Off,
}

/// The KV cache's element type (q8_0 needs flash attention).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::ValueEnum))]
pub enum KvType {
    #[default]
    #[serde(rename = "f16")]
    F16,
    #[cfg_attr(feature = "cli", value(name = "q8_0"))]
    #[serde(rename = "q8_0")]
    Q8_0,
}

/// A grammar's work for one token at most, by default: well within the host's step deadline
/// (10 s and up), and far above what a grammar costs (docs/BENCHMARKS.md, "Grammars").
pub const DEFAULT_GRAMMAR_MS_PER_TOKEN: u64 = 2_000;

/// The floor of a fitted context, by default: what Qwen Code, Codex CLI and OpenCode need to
/// work and compact (docs/DEPLOYMENT.md, "Context windows"; Claude Code needs about 100K).
pub const DEFAULT_CTX_MIN_TOKENS: u32 = 32_768;

fn default_ctx_min_tokens() -> u32 {
    DEFAULT_CTX_MIN_TOKENS
}

fn default_grammar_ms_per_token() -> u64 {
    DEFAULT_GRAMMAR_MS_PER_TOKEN
}

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct WorkerOptions {
    /// The GGUF model file (not needed with --fake or --options-json).
    #[cfg_attr(
        feature = "cli",
        arg(long, required_unless_present_any = ["fake", "options_json"])
    )]
    pub model: Option<PathBuf>,
    /// Context size in tokens (the unified KV pool); 0: the largest that fits in memory (GPU,
    /// else RAM) up to the model's trained context, by llama.cpp's fitting, and not below
    /// `ctx_min_tokens`.
    #[cfg_attr(feature = "cli", arg(long = "ctx", default_value_t = 0))]
    pub ctx_tokens: u32,
    /// The floor of a fitted context (`ctx` 0): the fitting takes layers off the GPU before it
    /// goes below it; the model's trained context when that is smaller.
    #[cfg_attr(feature = "cli", arg(long = "ctx-min", default_value_t = DEFAULT_CTX_MIN_TOKENS))]
    #[serde(default = "default_ctx_min_tokens")]
    pub ctx_min_tokens: u32,
    /// Slots: requests that read or decode together in one step.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1))]
    pub slots: u32,
    /// Sequences over the one KV pool (every live request and kept conversation has its
    /// own); 0 takes max(16, slots + 1). At most 256.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub kv_sequences: u32,
    /// CPU threads for llama.cpp; 0 takes the physical cores (at most the CPUs this process
    /// may use).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 0))]
    pub threads: u32,
    /// Layers offloaded to the GPU: `auto` (as many as fit in free memory; 0 without a GPU)
    /// or a count.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = crate::GpuLayers::Auto))]
    pub gpu_layers: crate::GpuLayers,
    /// The most GPU memory the engine may take, in MiB (or with a unit: `6GiB`); 0: none.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = crate::GpuMemoryLimit::default()))]
    #[serde(default)]
    pub gpu_memory_limit: crate::GpuMemoryLimit,
    /// The device: `auto` (the GPU with the most free memory), `cpu`, or a name from
    /// llama.cpp's device list (`Vulkan0`, or its description); empty: auto.
    #[cfg_attr(feature = "cli", arg(long, default_value = "auto"))]
    #[serde(default)]
    pub device: String,
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = FlashAttn::Auto))]
    pub flash_attn: FlashAttn,
    #[cfg_attr(feature = "cli", arg(long, value_enum, default_value_t = KvType::F16))]
    pub kv_type: KvType,
    /// A sliding-window model's (Gemma 3, gpt-oss) window layers keep the whole context, not
    /// only their window: a conversation may then continue from any token it shares, not only
    /// when the prompt extends all of it, at a cost in memory and speed (Gemma 3 270M at 28K
    /// tokens: decode 0.94-0.96x, prompt read 0.89-0.92x). Off is llama.cpp's servers' default.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = false))]
    #[serde(default)]
    pub swa_full: bool,
    /// Most tokens a single llama.cpp decode call takes.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 2048))]
    pub n_batch: u32,
    /// Bound of the host-RAM conversation cache, in MiB.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 1024))]
    pub conversation_cache_mib: u64,
    /// Most milliseconds a request's grammar may spend choosing one token: past it that
    /// request fails alone (the step and the other requests go on).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = DEFAULT_GRAMMAR_MS_PER_TOKEN))]
    #[serde(default = "default_grammar_ms_per_token")]
    pub grammar_ms_per_token: u64,
    /// llama.cpp's CPU code (a build with its CPU variants as modules): `auto` (or empty) takes
    /// the best this CPU runs, a variant's name (`zen4`, `haswell`) that one.
    #[cfg_attr(feature = "cli", arg(long, default_value = "auto"))]
    #[serde(default)]
    pub cpu_code: String,
    /// CPU variants passed over, with why (the host's record of variants that crashed on this
    /// CPU): the handshake says them back (`DeviceFacts::cpu_variants_skipped`).
    #[cfg_attr(feature = "cli", arg(skip))]
    #[serde(default)]
    pub cpu_code_skipped: Vec<crate::gpu::SkippedCpuCode>,
    /// Run the simulated engine instead of llama.cpp (tests and `--engine sim`).
    #[cfg_attr(feature = "cli", command(flatten))]
    pub fake: FakeOptions,
}

/// The simulated engine's settings.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct FakeOptions {
    /// Simulate the engine: a byte-level vocabulary, scripted outputs, timed like a real one.
    #[cfg_attr(
        feature = "cli",
        arg(id = "fake", long = "fake", default_value_t = false)
    )]
    pub enabled: bool,
    /// KV cells of the simulated pool.
    #[cfg_attr(feature = "cli", arg(long = "fake-kv-cells", default_value_t = 16_384))]
    pub kv_cells: u32,
    /// Simulated prompt-read speed, tokens per second (0: no delay).
    #[cfg_attr(
        feature = "cli",
        arg(long = "fake-prompt-tps", default_value_t = 2_000.0)
    )]
    pub prompt_tokens_per_sec: f64,
    /// Simulated decode speed, steps per second (0: no delay).
    #[cfg_attr(feature = "cli", arg(long = "fake-decode-tps", default_value_t = 50.0))]
    pub decode_steps_per_sec: f64,
    /// A JSON script of outputs: `{"rules":[{"prompt_contains":"...","output":"..."}]}`
    /// (the prompt's fill-in-the-middle tokens read `<<FIM_PRE>>`, `<<FIM_SUF>>`,
    /// `<<FIM_MID>>`, `<<FIM_REP>>`, `<<FIM_SEP>>`).
    #[cfg_attr(feature = "cli", arg(long = "fake-script"))]
    pub script: Option<PathBuf>,
    /// Inject a fault: `die:STEP`, `hang:STEP`, `malformed:STEP`, `drop-chunk:STEP` or
    /// `slow:STEP:MILLIS` (steps counted); `die-at-message:N`, `hang-at-message:N`,
    /// `malformed-at-message:N` or `error-at-message:N` (every command line counted);
    /// `ignore-stdin-eof` keeps the worker alive after stdin closes (what a platform's
    /// kill-with-parent must then do: tests of the job object and `PR_SET_PDEATHSIG`).
    #[cfg_attr(feature = "cli", arg(long = "fake-fault"))]
    pub faults: Vec<String>,
    /// Simulated model loading time before the handshake, in seconds.
    #[cfg_attr(feature = "cli", arg(long = "fake-load-secs", default_value_t = 0.0))]
    pub load_secs: f64,
    /// Simulate a recurrent model: its cache cannot be cut inside (a partial trim is refused).
    #[cfg_attr(
        feature = "cli",
        arg(long = "fake-non-trimmable", default_value_t = false)
    )]
    pub non_trimmable: bool,
    /// Which engine generation this worker is (the host says; 1 for the first): faults
    /// counted by message fire in the first only, so a restarted engine serves.
    #[cfg_attr(feature = "cli", arg(long = "fake-generation", default_value_t = 1))]
    pub generation: u64,
}

impl WorkerOptions {
    /// Options for a real model with every other setting at its default.
    pub fn for_model(model: PathBuf) -> Self {
        Self {
            model: Some(model),
            ctx_tokens: 0,
            ctx_min_tokens: DEFAULT_CTX_MIN_TOKENS,
            slots: 1,
            kv_sequences: 0,
            threads: 0,
            gpu_layers: crate::GpuLayers::Auto,
            gpu_memory_limit: crate::GpuMemoryLimit::default(),
            device: String::new(),
            flash_attn: FlashAttn::Auto,
            kv_type: KvType::F16,
            swa_full: false,
            n_batch: 2048,
            conversation_cache_mib: 1024,
            grammar_ms_per_token: DEFAULT_GRAMMAR_MS_PER_TOKEN,
            cpu_code: String::new(),
            cpu_code_skipped: Vec::new(),
            fake: FakeOptions::default(),
        }
    }

    /// Options for the simulated engine.
    pub fn simulated(fake: FakeOptions) -> Self {
        Self {
            model: None,
            fake: FakeOptions {
                enabled: true,
                ..fake
            },
            ..Self::for_model(PathBuf::new())
        }
    }

    /// Threads to run llama.cpp with: the option, else the physical cores, at most the CPUs
    /// this process may use (llama.cpp's own default; docs/BENCHMARKS.md, "Engine defaults",
    /// has the figures: on two cores, two threads read and decode faster than one at every
    /// depth measured, with the server's own threads beside them).
    pub fn effective_threads(&self) -> u32 {
        if self.threads > 0 {
            return self.threads;
        }
        default_threads(
            num_cpus::get_physical(),
            std::thread::available_parallelism().map_or(1, |n| n.get()),
        )
    }
}

impl WorkerOptions {
    /// The sequences to open: the option, else max(16, slots + 1); at least slots + 1, at
    /// most 256 (llama.cpp's limit).
    pub fn effective_sequences(&self) -> u32 {
        let slots = self.slots.max(1);
        let asked = if self.kv_sequences > 0 {
            self.kv_sequences
        } else {
            16.max(slots + 1)
        };
        asked.clamp(slots + 1, MAX_SEQUENCES)
    }
}

/// llama.cpp's most sequences in one context.
pub const MAX_SEQUENCES: u32 = 256;

impl FakeOptions {
    /// Fast settings for tests: a simulated engine with no delays.
    pub fn instant() -> Self {
        Self {
            enabled: true,
            kv_cells: 16_384,
            prompt_tokens_per_sec: 0.0,
            decode_steps_per_sec: 0.0,
            script: None,
            faults: Vec::new(),
            load_secs: 0.0,
            non_trimmable: false,
            generation: 1,
        }
    }
}

/// The default engine threads from the physical cores and the CPUs the process may use
/// (a container's quota or an affinity mask can allow fewer than the cores).
pub fn default_threads(physical_cores: usize, usable_cpus: usize) -> u32 {
    physical_cores.min(usable_cpus).max(1) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_threads_are_the_physical_cores_within_the_cpus_this_process_may_use() {
        assert_eq!(default_threads(2, 2), 2); // this 2-core machine
        assert_eq!(default_threads(8, 16), 8); // SMT: one thread per core, as llama.cpp
        assert_eq!(default_threads(8, 4), 4); // a container allowed 4 CPUs
        assert_eq!(default_threads(0, 0), 1);
    }

    #[test]
    fn a_threads_option_wins_over_the_default() {
        let options = WorkerOptions {
            threads: 3,
            ..WorkerOptions::for_model(PathBuf::new())
        };
        assert_eq!(options.effective_threads(), 3);
    }
}
