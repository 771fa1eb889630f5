//! `strata-desk models`: the GGUF models on this machine (this app's folder, LM Studio's,
//! Ollama's), each with what its header says and where it would run here: all on the GPU,
//! some layers on the CPU, or in RAM, and the largest context that keeps it so (an estimate:
//! llama.cpp's fitting decides at load).

use super::discover::{FoundModel, find_models, usual_folders};
use super::fit::{Machine, ModelShape};
use super::gguf_header::read_file_facts;
use super::hub::split_part;
use super::hub_rows::fit_and_words;
use crate::engine_worker::KvType;

#[derive(Debug, Clone, clap::Args)]
pub struct ModelsArgs {
    /// The smallest context a model must serve to be offered: the engine's floor of a fitted
    /// context (`ctx_min`) by default (Qwen Code, Codex CLI and OpenCode need 32K; Claude Code
    /// about 100K).
    #[arg(long, default_value_t = crate::config::DEFAULT_CTX_MIN_TOKENS)]
    pub min_ctx: u32,
    /// The most GPU memory the engine may take (as the server's `--gpu-memory-limit`: MiB,
    /// or with a unit) [default: no limit].
    #[arg(long)]
    pub gpu_memory_limit: Option<crate::config::GpuMemoryLimit>,
}

/// The report, as the terminal shows it.
pub fn report(args: &ModelsArgs, machine: &Machine, found: &[FoundModel]) -> String {
    let mut out = match &machine.gpu {
        Some(g) => format!(
            "This machine: {} ({:.1} GiB, {:.1} GiB free{}), RAM {:.1} GB available\n",
            g.name,
            g.total_bytes as f64 / GIB,
            g.free_bytes as f64 / GIB,
            if g.limit_bytes > 0 {
                format!(", within gpu_memory_limit {} MiB", g.limit_bytes >> 20)
            } else {
                String::new()
            },
            machine.ram_available_bytes as f64 / 1e9
        ),
        None => format!(
            "This machine: no GPU that llama.cpp sees, RAM {:.1} GB available\n",
            machine.ram_available_bytes as f64 / 1e9
        ),
    };
    if found.is_empty() {
        out += "No GGUF models found in this app's folder, LM Studio's or Ollama's; get one with `strata-desk pull REPO`.\n";
    }
    for model in found {
        // a split model is listed once, by its first part
        if split_part(&model.name).is_some_and(|(_, part, _)| part > 1) {
            continue;
        }
        let line = match read_file_facts(&model.path) {
            Ok(facts) => {
                let shape = ModelShape {
                    // each part about the first's size (the parts are cut evenly)
                    weights_bytes: model
                        .size_bytes
                        .saturating_mul(u64::from(facts.split_count)),
                    layers: facts.layers,
                    kv_bytes_per_token: facts.kv_bytes_per_token(KvType::F16),
                    trained_context: facts.context_length,
                    compute_bytes: facts.gpu_compute_bytes(),
                };
                let (_, fit) = fit_and_words(&shape, machine, args.min_ctx);
                format!(
                    "{}, {} layers, trained for {} tokens: {fit}",
                    [
                        Some(facts.architecture.as_str()),
                        facts.quantization.as_deref()
                    ]
                    .into_iter()
                    .flatten()
                    .collect::<Vec<_>>()
                    .join(" "),
                    facts.layers,
                    facts.context_length,
                )
            }
            Err(e) => format!("not readable: {e}"),
        };
        out += &format!(
            "  {}  [{}]  {:.1} MB\n      {line}\n      {}\n",
            model.name,
            model.source.words(),
            model.size_bytes as f64 / 1e6,
            model.path.display()
        );
    }
    out
}

const GIB: f64 = (1u64 << 30) as f64;

pub fn run(args: &ModelsArgs) -> String {
    report(
        args,
        &super::machine::this_machine(args.gpu_memory_limit.map_or(0, |l| l.bytes())),
        &find_models(&usual_folders()),
    )
}
