//! The worker's command-line options (`strata-desk engine-worker ...`).

use clap::{Args, ValueEnum};
use std::path::PathBuf;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum FlashAttn {
    #[default]
    Auto,
    On,
    Off,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum, Default)]
pub enum KvType {
    #[default]
    F16,
    #[value(name = "q8_0")]
    Q8_0,
}

#[derive(Debug, Clone, Args)]
pub struct WorkerOptions {
    /// The GGUF model file.
    #[arg(long)]
    pub model: PathBuf,
    /// Context size in tokens (the unified KV pool); 0 takes the model's, at most 32768.
    #[arg(long = "ctx", default_value_t = 0)]
    pub ctx_tokens: u32,
    /// Sequences (slots) served at once; the KV pool is shared by all of them.
    #[arg(long, default_value_t = 1)]
    pub slots: u32,
    /// CPU threads for llama.cpp; 0 takes one less than the cores (at least 1).
    #[arg(long, default_value_t = 0)]
    pub threads: u32,
    /// Layers offloaded to the GPU (0 on a CPU build).
    #[arg(long, default_value_t = 0)]
    pub gpu_layers: u32,
    #[arg(long, value_enum, default_value_t = FlashAttn::Auto)]
    pub flash_attn: FlashAttn,
    #[arg(long, value_enum, default_value_t = KvType::F16)]
    pub kv_type: KvType,
    /// Most tokens a single llama.cpp decode call takes.
    #[arg(long, default_value_t = 2048)]
    pub n_batch: u32,
}

impl WorkerOptions {
    /// Threads to run llama.cpp with: the option, else one less than the cores (two engine
    /// threads on two cores collapse when anything else runs).
    pub fn effective_threads(&self) -> u32 {
        if self.threads > 0 {
            return self.threads;
        }
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get() as u32);
        cores.saturating_sub(1).max(1)
    }
}
