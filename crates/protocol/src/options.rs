//! The worker's options: what the host passes to `strata-desk engine-worker` as one JSON
//! object (`--options-json`): the engine's settings ([`EngineSettings`], the config file's keys)
//! and the worker's own; the same options as flags for a person starting a worker by hand.

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

pub use crate::settings::{DEFAULT_CTX_MIN_TOKENS, DEFAULT_GRAMMAR_MS_PER_TOKEN, EngineSettings};

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
pub struct WorkerOptions {
    /// The engine's settings (the config file's keys and the app's flags of the same names).
    #[cfg_attr(feature = "cli", command(flatten))]
    #[serde(flatten)]
    pub engine: EngineSettings,
    /// Most tokens a single llama.cpp decode call takes.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = 2048))]
    pub n_batch: u32,
    /// CPU variants passed over, with why (the host's record of variants that crashed on this
    /// CPU): the handshake says them back (`DeviceFacts::cpu_variants_skipped`).
    #[cfg_attr(feature = "cli", arg(skip))]
    #[serde(default)]
    pub cpu_code_skipped: Vec<crate::gpu::SkippedCpuCode>,
    /// Run the simulated engine instead of llama.cpp (tests and `--engine sim`).
    #[cfg_attr(feature = "cli", command(flatten))]
    pub fake: FakeOptions,
    /// Serve over an existing engine's HTTP routes instead of llama.cpp in this process
    /// (`engine: upstream`); its key, if any, comes in the environment
    /// ([`UPSTREAM_API_KEY_ENV`]), never in these options.
    #[cfg_attr(feature = "cli", arg(skip))]
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upstream: Option<UpstreamTarget>,
}

/// The environment variable the worker reads an upstream's bearer key from.
pub const UPSTREAM_API_KEY_ENV: &str = "STRATA_UPSTREAM_API_KEY";

/// The upstream engine a worker serves over.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct UpstreamTarget {
    /// `http://HOST:PORT`, no trailing slash needed.
    pub url: String,
    /// `auto`, `llama-server`, `vllm` or `sglang`.
    pub kind: String,
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
        Self::of(EngineSettings {
            model: Some(model),
            ..EngineSettings::default()
        })
    }

    /// Options for these engine settings, the worker's own at their defaults.
    pub fn of(engine: EngineSettings) -> Self {
        Self {
            engine,
            n_batch: 2048,
            cpu_code_skipped: Vec::new(),
            fake: FakeOptions::default(),
            upstream: None,
        }
    }

    /// Options for the simulated engine.
    pub fn simulated(fake: FakeOptions) -> Self {
        Self {
            fake: FakeOptions {
                enabled: true,
                ..fake
            },
            ..Self::of(EngineSettings::default())
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

/// The engine's settings read through the options (`options.ctx_tokens`): the worker's code
/// reads them where they were fields of their own before [`EngineSettings`] was one struct.
impl std::ops::Deref for WorkerOptions {
    type Target = EngineSettings;
    fn deref(&self) -> &EngineSettings {
        &self.engine
    }
}

impl std::ops::DerefMut for WorkerOptions {
    fn deref_mut(&mut self) -> &mut EngineSettings {
        &mut self.engine
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
        let mut options = WorkerOptions::for_model(PathBuf::new());
        options.engine.threads = 3;
        assert_eq!(options.effective_threads(), 3);
    }
}
