//! The fit estimate (src/models/fit.rs) for the curated coding models on common cards, as
//! docs/DEPLOYMENT.md's "Which model for which card" shows it:
//!
//!   cargo run --example fit-table
//!
//! The shapes are those the models' cards and config.json give (layers, KV heads, head size,
//! trained context, vocabulary, embedding) and their Q4_K_M / MXFP4 files' sizes (approximate: from the hub's pages, not
//! read here, where no hub is reachable); the app reads the real figures from
//! each GGUF's header on the hub. A card is taken with 0.5 GiB held by the desktop.

use strata_desk::models::fit::{
    GpuMemory, Machine, ModelShape, Verdict, compute_bytes, largest_context,
};

struct Model {
    name: &'static str,
    weights_bytes: u64,
    layers: u32,
    kv_heads: u32,
    head_size: u32,
    trained_context: u32,
    vocab_size: u32,
    embedding_length: u32,
}

const MODELS: [Model; 6] = [
    Model {
        name: "Qwen2.5-Coder-1.5B Q4_K_M",
        weights_bytes: 1_117_320_736,
        layers: 28,
        kv_heads: 2,
        head_size: 128,
        trained_context: 32_768,
        vocab_size: 151936,
        embedding_length: 1536,
    },
    Model {
        name: "Qwen2.5-Coder-7B Q4_K_M",
        weights_bytes: 4_683_073_504,
        layers: 28,
        kv_heads: 4,
        head_size: 128,
        trained_context: 32_768,
        vocab_size: 152064,
        embedding_length: 3584,
    },
    Model {
        name: "Qwen2.5-Coder-14B Q4_K_M",
        weights_bytes: 8_988_110_976,
        layers: 48,
        kv_heads: 8,
        head_size: 128,
        trained_context: 32_768,
        vocab_size: 152064,
        embedding_length: 5120,
    },
    Model {
        name: "gpt-oss-20b MXFP4",
        weights_bytes: 12_109_566_560,
        layers: 24,
        kv_heads: 8,
        head_size: 64,
        trained_context: 131_072,
        vocab_size: 201088,
        embedding_length: 2880,
    },
    Model {
        name: "Qwen3-Coder-30B-A3B Q4_K_M",
        weights_bytes: 18_556_686_560,
        layers: 48,
        kv_heads: 4,
        head_size: 128,
        trained_context: 262_144,
        vocab_size: 151936,
        embedding_length: 2048,
    },
    Model {
        name: "Devstral-Small-2507 Q4_K_M",
        weights_bytes: 14_333_909_888,
        layers: 40,
        kv_heads: 8,
        head_size: 128,
        trained_context: 131_072,
        vocab_size: 131072,
        embedding_length: 5120,
    },
];

/// A coding agent's first request and room to work.
const MIN_CTX_TOKENS: u32 = strata_desk::config::DEFAULT_CTX_MIN_TOKENS;

fn main() {
    let cards = [8u64, 12, 16, 24];
    print!("| model (weights) | KV a token, F16 |");
    for gib in cards {
        print!(" {gib} GiB card |");
    }
    println!();
    println!("|---|---|{}", "---|".repeat(cards.len()));
    for m in &MODELS {
        let shape = ModelShape {
            weights_bytes: m.weights_bytes,
            layers: m.layers,
            kv_bytes_per_token: u64::from(m.layers * m.kv_heads * 2 * m.head_size) * 2,
            trained_context: m.trained_context,
            compute_bytes: compute_bytes(m.vocab_size, m.embedding_length),
        };
        print!(
            "| {} ({:.1} GB) | {:.0} KB |",
            m.name,
            m.weights_bytes as f64 / 1e9,
            shape.kv_bytes_per_token as f64 / 1e3
        );
        for gib in cards {
            let machine = Machine {
                gpu: Some(GpuMemory {
                    name: format!("{gib} GiB"),
                    total_bytes: gib << 30,
                    free_bytes: (gib << 30) - (1 << 29),
                    limit_bytes: 0,
                }),
                ram_available_bytes: 48_000_000_000,
            };
            let cell = match largest_context(&shape, &machine, MIN_CTX_TOKENS) {
                Some(f) => match f.verdict {
                    Verdict::OnGpu => format!("GPU, {}K", f.ctx_tokens / 1024),
                    Verdict::PartlyOnCpu { cpu_layers } => {
                        format!(
                            "{cpu_layers}/{} layers on CPU, {}K",
                            m.layers,
                            f.ctx_tokens / 1024
                        )
                    }
                    Verdict::CpuOnly => format!("CPU, {}K", f.ctx_tokens / 1024),
                    Verdict::DoesNotFit { .. } => "does not fit".to_owned(),
                },
                None => "does not fit".to_owned(),
            };
            print!(" {cell} |");
        }
        println!();
    }
}
