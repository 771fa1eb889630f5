//! The engine's settings, declared once: what a new engine takes. One struct serves the config
//! file (the app's `AppSettings` flattens it: its serde names are the config keys), the app's
//! flags and the worker's (clap, with the same names), the options the host hands the worker
//! (`WorkerOptions` flattens it) and the window's draft. Each key has one name, one default
//! (this struct's `Default`, which serde and clap both read) and its words for the docs
//! ([`ENGINE_KEY_DOCS`], beside the field; the app's schema takes them from here and a test
//! checks the two agree).
//!
//! The Rust field names carry the unit (`ctx_tokens`); the public name stays the config key
//! (`ctx`), as users and scripts know it.

use crate::{FlashAttn, GpuLayers, GpuMemoryLimit, KvType};
use std::path::PathBuf;

/// A grammar's work for one token at most, by default: well within the host's step deadline
/// (10 s and up), and far above what a grammar costs (docs/BENCHMARKS.md, "Grammars").
pub const DEFAULT_GRAMMAR_MS_PER_TOKEN: u64 = 2_000;

/// The floor of a fitted context, by default: what Qwen Code, Codex CLI and OpenCode need to
/// work and compact (docs/DEPLOYMENT.md, "Context windows"; Claude Code needs about 100K).
pub const DEFAULT_CTX_MIN_TOKENS: u32 = 32_768;

/// Checkpoints per sequence, by default: llama-server's `--ctx-checkpoints`. An agent's turn
/// takes two (4 and 4 + ubatch tokens before its prompt's end), so 32 cover a long session's
/// last 16 turns.
pub const DEFAULT_CTX_CHECKPOINTS: u32 = 32;

/// Tokens between checkpoints within one long read, by default: llama-server's
/// `--checkpoint-min-step`. A re-rendered turn departs at (or just before) the end of the
/// last prompt, which the checkpoints near it cover; these only shorten a far edit's read.
pub const DEFAULT_CHECKPOINT_MIN_STEP_TOKENS: u32 = 8192;

/// All checkpoints' host RAM, by default, in MiB: 32 of Gemma 3 270M's (about 7.5 MiB each,
/// docs/DEPLOYMENT.md) in each of 8 conversations; a 27B model's (hundreds of MiB each) keep
/// fewer, the oldest leaving first.
pub const DEFAULT_CHECKPOINT_MIB: u64 = 2048;

#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
#[cfg_attr(feature = "cli", derive(clap::Args))]
#[serde(default)]
pub struct EngineSettings {
    /// A GGUF model [default: SmolLM2-135M-Instruct, fetched on first use].
    #[cfg_attr(feature = "cli", arg(long))]
    pub model: Option<PathBuf>,
    /// Slots: requests that read or decode together in one step.
    #[cfg_attr(
        feature = "cli",
        arg(id = "parallel", long = "parallel", alias = "slots", value_name = "PARALLEL",
            default_value_t = EngineSettings::default().slots)
    )]
    #[serde(rename = "parallel")]
    pub slots: u32,
    /// Engine sequences over the KV pool: every live request and kept conversation has its
    /// own, at most 256; 0 takes max(16, parallel + 1).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = EngineSettings::default().kv_sequences))]
    pub kv_sequences: u32,
    /// Context size in tokens (the unified KV pool); 0: the largest that fits in memory (GPU,
    /// else RAM) up to the model's trained context, by llama.cpp's fitting, and not below
    /// --ctx-min.
    #[cfg_attr(
        feature = "cli",
        arg(id = "ctx", long = "ctx", value_name = "CTX", default_value_t = EngineSettings::default().ctx_tokens)
    )]
    #[serde(rename = "ctx")]
    pub ctx_tokens: u32,
    /// The floor of a fitted context (--ctx 0): layers leave the GPU before the context goes
    /// below it; the model's trained context when that is smaller.
    #[cfg_attr(
        feature = "cli",
        arg(id = "ctx_min", long = "ctx-min", value_name = "CTX_MIN",
            default_value_t = EngineSettings::default().ctx_min_tokens)
    )]
    #[serde(rename = "ctx_min")]
    pub ctx_min_tokens: u32,
    /// CPU threads for llama.cpp; 0 takes the physical cores (at most the CPUs this process
    /// may use).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = EngineSettings::default().threads))]
    pub threads: u32,
    /// Layers offloaded to the GPU: `auto` (as many as fit in free memory; 0 without a GPU)
    /// or a count.
    #[cfg_attr(feature = "cli", arg(long, default_value_t = EngineSettings::default().gpu_layers))]
    pub gpu_layers: GpuLayers,
    /// The most GPU memory the engine may take, to leave room for the desktop and other
    /// programs: MiB, or with a unit (`6GiB`); 0: no limit.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = EngineSettings::default().gpu_memory_limit)
    )]
    pub gpu_memory_limit: GpuMemoryLimit,
    /// The device: `auto` (the GPU with the most free memory), `cpu`, or a device llama.cpp
    /// lists (`Vulkan0`, or its description, as `/health` and the window show).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = EngineSettings::default().device))]
    pub device: String,
    /// llama.cpp's flash attention.
    #[cfg_attr(
        feature = "cli",
        arg(long, value_enum, default_value_t = EngineSettings::default().flash_attn)
    )]
    pub flash_attn: FlashAttn,
    /// The KV cache's element type (q8_0 needs flash attention).
    #[cfg_attr(
        feature = "cli",
        arg(long, value_enum, default_value_t = EngineSettings::default().kv_type)
    )]
    pub kv_type: KvType,
    /// A sliding-window model's (Gemma 3, gpt-oss) window layers keep the whole context: a
    /// conversation continues from any token it shares, at a cost in memory and speed (Gemma
    /// 3 270M at 28K tokens: decode 0.94-0.96x, prompt read 0.89-0.92x) [default: off, as
    /// llama.cpp's servers: only a conversation the prompt extends whole continues].
    #[cfg_attr(feature = "cli", arg(long))]
    pub swa_full: bool,
    /// llama.cpp's CPU code: `auto` (the best variant this CPU runs, passing over those that
    /// crashed on it; `auto` on the app's command line also forgets that record) or a
    /// variant's name (`zen4`; `--version` names the one auto takes).
    #[cfg_attr(feature = "cli", arg(long, default_value_t = EngineSettings::default().cpu_code))]
    pub cpu_code: String,
    /// Prompt tokens llama.cpp computes in one pass (its physical batch, llama-server's
    /// `--ubatch-size`): larger reads a long prompt faster on a GPU, at more compute-buffer
    /// memory; at most the logical batch (2048).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = EngineSettings::default().ubatch_tokens)
    )]
    pub ubatch_tokens: u32,
    /// Bound of the host-RAM conversation cache, in MiB.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = EngineSettings::default().conversation_cache_mib)
    )]
    pub conversation_cache_mib: u64,
    /// Most milliseconds a request's grammar may spend choosing one token: past it that
    /// request fails alone (the step and the other requests go on).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = EngineSettings::default().grammar_ms_per_token)
    )]
    pub grammar_ms_per_token: u64,
    /// Checkpoints a sequence keeps at most, on a model whose cache cannot be cut at any token
    /// (sliding-window layers without --swa-full; recurrent and hybrid layers): the state a cut
    /// cannot rebuild, saved 4 and 4 + ubatch tokens before each prompt's end, so that a prompt
    /// departing from a kept conversation reads from the last one at or before the departure;
    /// 0: none.
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = EngineSettings::default().ctx_checkpoints)
    )]
    pub ctx_checkpoints: u32,
    /// Within a long prompt read, a checkpoint at least this many tokens after the last.
    #[cfg_attr(
        feature = "cli",
        arg(id = "checkpoint_min_step", long = "checkpoint-min-step", value_name = "CHECKPOINT_MIN_STEP",
            default_value_t = EngineSettings::default().checkpoint_min_step_tokens)
    )]
    #[serde(rename = "checkpoint_min_step")]
    pub checkpoint_min_step_tokens: u32,
    /// Bound of all sequences' checkpoints in host RAM, in MiB (the oldest leave first).
    #[cfg_attr(
        feature = "cli",
        arg(long, default_value_t = EngineSettings::default().checkpoint_mib)
    )]
    pub checkpoint_mib: u64,
}

impl Default for EngineSettings {
    fn default() -> Self {
        Self {
            model: None,
            slots: 1,
            kv_sequences: 0,
            ctx_tokens: 0,
            ctx_min_tokens: DEFAULT_CTX_MIN_TOKENS,
            threads: 0,
            gpu_layers: GpuLayers::Auto,
            gpu_memory_limit: GpuMemoryLimit::default(),
            device: "auto".to_owned(),
            flash_attn: FlashAttn::Auto,
            kv_type: KvType::F16,
            swa_full: false,
            cpu_code: "auto".to_owned(),
            ubatch_tokens: 512,
            conversation_cache_mib: 1024,
            grammar_ms_per_token: DEFAULT_GRAMMAR_MS_PER_TOKEN,
            ctx_checkpoints: DEFAULT_CTX_CHECKPOINTS,
            checkpoint_min_step_tokens: DEFAULT_CHECKPOINT_MIN_STEP_TOKENS,
            checkpoint_mib: DEFAULT_CHECKPOINT_MIB,
        }
    }
}

impl EngineSettings {
    /// The settings for a model, every other at its default.
    pub fn for_model(model: PathBuf) -> Self {
        Self {
            model: Some(model),
            ..Self::default()
        }
    }
}

/// One key's words for the docs: its name (the config key), what its default means when the
/// value alone does not say, and the values it takes.
#[derive(Debug, Clone, Copy)]
pub struct EngineKeyDoc {
    pub name: &'static str,
    pub default_note: Option<&'static str>,
    pub values: &'static str,
}

const fn doc(
    name: &'static str,
    default_note: Option<&'static str>,
    values: &'static str,
) -> EngineKeyDoc {
    EngineKeyDoc {
        name,
        default_note,
        values,
    }
}

/// The engine keys' words for the docs (docs/DEPLOYMENT.md's table, `GET /v1/settings`), in
/// the order the docs list them; the app's schema takes them, and a test there checks that
/// every field above has its entry and no other.
pub const ENGINE_KEY_DOCS: &[EngineKeyDoc] = &[
    doc(
        "model",
        Some("SmolLM2-135M-Instruct, fetched on first use"),
        "a GGUF path; a path that is missing, not a file, not a GGUF or unreadable is refused \
         naming which",
    ),
    doc(
        "parallel",
        None,
        "1-64: slots, the requests read or decoded in one step; 2 or more cannot be combined \
         with `solo_priority`",
    ),
    doc(
        "kv_sequences",
        Some("max(16, `parallel` + 1)"),
        "0, or more than `parallel` and at most 256 (llama.cpp's limit): engine sequences over \
         the one KV pool; every live request and every kept conversation has its own, so this \
         bounds how many conversations stay in the pool. A recurrent or hybrid model gets at \
         most `parallel` + 2",
    ),
    doc(
        "ctx",
        Some(
            "the largest that fits in memory (the GPU's, else the RAM available less a quarter \
             of the machine's), up to \
             the model's trained context and not below `ctx_min`, by llama.cpp's fitting",
        ),
        "0, or 256-1048576: the KV pool's cells, shared by every sequence, and the most one \
         request holds. Larger than the model's training context it still runs, with a warning \
         in the log. Agents need about 100K for Claude Code (it compacts no earlier than about \
         67K), 32K for Qwen Code, Codex and OpenCode, 8K for aider (section 4, \"Context \
         windows\"). `/health` says the context and how it was chosen (`context_chosen_by`: \
         `set`, `trained`, `fit`, `floor`)",
    ),
    doc(
        "ctx_min",
        None,
        "256-1048576: the floor of a fitted context (`ctx` 0), the smallest context the agent \
         needs (98304 for Claude Code): on a GPU llama.cpp's fitting moves layers to the CPU \
         before the context goes below it; the model's trained context when that is smaller; \
         a floor that does not fit is kept, with a warning in `/health`, the log and the window",
    ),
    doc(
        "threads",
        Some(
            "the physical cores (at most the CPUs the process may use), as llama.cpp; chosen by \
             measurement (docs/BENCHMARKS.md, \"Engine defaults\")",
        ),
        "at most 1024",
    ),
    doc(
        "gpu_layers",
        None,
        "`\"auto\"`: llama.cpp's own fitting (`common_fit_params`, as llama-server's `--fit`) \
         puts as many layers on the GPU as its free memory holds beside the KV pool of the \
         context (with `ctx` 0, a context fitted first, down to `ctx_min`) and the compute \
         buffers, leaving 1 GiB or a tenth of the GPU free, \
         whichever is more (Windows spills what does not fit into shared memory, about ten \
         times slower); 0 where llama.cpp sees no GPU (a CPU build); if the fitting fails, the \
         CPU only, with a warning. A number sets the layers (more than the model has: all). \
         `/health`, `/v1/scheduler` and the window show the device, the layers and the free \
         memory, and warn when it falls under half the margin",
    ),
    doc(
        "gpu_memory_limit",
        Some("no limit"),
        "the most GPU memory the engine may take (weights, KV pool, compute buffers), to leave \
         room for the desktop and other programs: a number of MiB, or a size with its unit \
         (`\"6 GiB\"`, `\"512 MiB\"`). `gpu_layers: \"auto\"` fits into it; the memory \
         `/health` and the window show is then what the limit leaves, and the low-memory \
         warning counts from it; a `gpu_layers` count that does not fit gets a warning with \
         the figures",
    ),
    doc(
        "device",
        Some("`\"auto\"`"),
        "`\"auto\"`: the GPU with the most free memory (a build with CUDA and Vulkan lists one \
         card under both; two cards are not split: one is used); `\"cpu\"`: every layer on \
         the CPU; or a device llama.cpp lists, by its name (`\"Vulkan0\"`) or description \
         (`\"NVIDIA GeForce RTX 4090\"`), as `/health`'s `engine.device.devices` and the \
         window show them; a device that is not there stops the engine's start with the list \
         of those that are. `/health` and the window say which was picked and why",
    ),
    doc(
        "flash_attn",
        Some("llama.cpp's choice: on, on the CPU"),
        "`\"auto\"`, `\"on\"`, `\"off\"`. `\"off\"` decodes faster on the CPU at several \
         thousand tokens of context (docs/BENCHMARKS.md, \"Engine defaults\") but a paused, \
         parked or batched stream then no longer continues token-identical",
    ),
    doc(
        "kv_type",
        None,
        "`\"f16\"`, `\"q8_0\"`; `q8_0` is refused with `flash_attn: \"off\"`",
    ),
    doc(
        "swa_full",
        None,
        "`true`: a sliding-window model's (Gemma 3, gpt-oss) window layers keep the whole \
         context, so a conversation continues from any token it shares with a kept one; \
         `false`: they keep their window, as llama.cpp's servers do (Gemma 3 270M at 28K \
         tokens: 1.04-1.06x the decode, 1.09-1.12x the prompt read, a fraction of the window \
         layers' memory), and a kept conversation continues only when the prompt extends it whole \
         (else it is read again). No effect on other models",
    ),
    doc(
        "cpu_code",
        Some("`\"auto\"`"),
        "`\"auto\"`: the best of llama.cpp's CPU variants this CPU runs, passing over those \
         recorded as crashing on it (a variant that dies of an illegal instruction or a bad \
         memory access while the engine warms up is recorded in the data folder's \
         `cpu-code.json`, for this CPU and build, and the next one is started); or a variant's \
         name (`\"zen4\"`, `\"haswell\"`, `strata-desk --version` and `/health` list them): \
         that one, no fallback. An unknown name is refused with the list. `--cpu-code auto` \
         on the command line forgets the record",
    ),
    doc(
        "ubatch_tokens",
        Some("llama.cpp's default"),
        "64-2048: prompt tokens llama.cpp computes in one pass (its physical batch, \
         llama-server's `--ubatch-size`); larger reads a long prompt faster on a GPU at more \
         compute-buffer memory; above the logical batch (2048, or `ctx` when smaller) the \
         logical batch is used",
    ),
    doc(
        "conversation_cache_mib",
        None,
        "at most 1048576: the host-RAM conversation cache's bound in MiB",
    ),
    doc(
        "grammar_ms_per_token",
        None,
        "between 1 and 5000: the most a request's grammar (tools, `response_format`) may spend \
         choosing one token; past it that request fails alone with a 500 saying so",
    ),
    doc(
        "ctx_checkpoints",
        None,
        "0-1024: checkpoints one sequence keeps at most on a model whose cache cannot be cut at \
         any token (sliding-window layers with `swa_full` off; recurrent and hybrid layers): \
         the part of its state a cut cannot rebuild, saved in host RAM 4 and 4 + \
         `ubatch_tokens` tokens before each prompt's end (as llama-server does), so that a prompt that departs from a kept conversation (a re-rendered \
         answer, an edit) reads from the last checkpoint at or before the departure instead \
         of from the start; 0: none. No effect on other models",
    ),
    doc(
        "checkpoint_min_step",
        None,
        "at least 64: within one long prompt read, a checkpoint at least this many tokens \
         after the last one",
    ),
    doc(
        "checkpoint_mib",
        None,
        "at most 1048576: all sequences' checkpoints in host RAM, in MiB; the oldest leave \
         first (a conversation saved to the conversation cache takes its own along, counted \
         there)",
    ),
];
