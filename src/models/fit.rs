//! What fits: before a download, from a model's header and file size and this machine's free
//! memory, where its weights and KV cache would go at a context size, and the largest context
//! that fits. An estimate, and named as one: once a model is on disk, llama.cpp's own fitting
//! (`gpu_layers: auto`) decides.
//!
//! The estimate: the weights split evenly over the layers plus one share for the embeddings
//! and output; the KV cache evenly over the layers; on the GPU, llama.cpp's margin
//! ([`margin_bytes`]: 1 GiB or a tenth of the card; under a `gpu_memory_limit`, all but the
//! limit) and its compute buffer (from the vocabulary and the embedding:
//! `HeaderFacts::gpu_compute_bytes`) are kept free. Layers that do not fit stay in RAM with
//! their KV cache.

use strata_protocol::gpu::margin_bytes;

/// A model as the estimate needs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ModelShape {
    /// The GGUF file's size (all parts).
    pub weights_bytes: u64,
    pub layers: u32,
    /// At the KV cache's type.
    pub kv_bytes_per_token: u64,
    /// The context it was trained for: the largest context the estimate offers.
    pub trained_context: u32,
    /// llama.cpp's compute buffer on the GPU, kept free beside the layers.
    pub compute_bytes: u64,
}

/// The memory a model could use: a GPU's and the system's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    /// The GPU's name, total and free memory; `None` without a GPU.
    pub gpu: Option<GpuMemory>,
    pub ram_available_bytes: u64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuMemory {
    pub name: String,
    pub total_bytes: u64,
    pub free_bytes: u64,
    /// `gpu_memory_limit` (0: none): the most the engine may take.
    pub limit_bytes: u64,
}

impl GpuMemory {
    /// What llama.cpp's fitting lets the model take: the free memory less the margin, and at
    /// most the limit (its fitting leaves max(margin, free − limit) free).
    pub fn usable_bytes(&self) -> u64 {
        let usable = self
            .free_bytes
            .saturating_sub(margin_bytes(self.total_bytes));
        if self.limit_bytes > 0 {
            usable.min(self.limit_bytes)
        } else {
            usable
        }
    }
}

/// Where a model would run at one context size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Every layer on the GPU.
    OnGpu,
    /// `cpu_layers` of the layers in RAM (slower: each step waits for the CPU's share).
    PartlyOnCpu { cpu_layers: u32 },
    /// No GPU (or none of it free): all in RAM.
    CpuOnly,
    /// RAM lacks `short_bytes` for what the GPU cannot take.
    DoesNotFit { short_bytes: u64 },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fit {
    pub ctx_tokens: u32,
    pub gpu_layers: u32,
    /// Bytes on the GPU (weights and KV of its layers) and in RAM.
    pub gpu_bytes: u64,
    pub ram_bytes: u64,
    pub kv_bytes: u64,
    pub verdict: Verdict,
}

/// llama.cpp's compute buffer on a GPU at its default micro-batch of 512 tokens, as an
/// estimate: the logits of every token of the batch (4 bytes a vocabulary entry) and its
/// activations (16 of the embedding's length a token, with flash attention); 512 MiB when
/// the vocabulary or the embedding is not known (0). llama.cpp measured 103-129 MiB for the
/// test model (49,152 tokens, 576 long: 114 MiB here) on the software Vulkan device
/// (scripts/check-gpu.py, check 11).
pub fn compute_bytes(vocab_size: u32, embedding_length: u32) -> u64 {
    const UBATCH_TOKENS: u64 = 512;
    if vocab_size == 0 || embedding_length == 0 {
        return 512 << 20;
    }
    UBATCH_TOKENS * 4 * (u64::from(vocab_size) + 16 * u64::from(embedding_length))
}

impl ModelShape {
    fn layer_weights_bytes(&self) -> u64 {
        self.weights_bytes / (u64::from(self.layers) + 1)
    }

    fn layer_kv_bytes(&self, ctx_tokens: u32) -> u64 {
        self.kv_bytes(ctx_tokens) / u64::from(self.layers.max(1))
    }

    fn kv_bytes(&self, ctx_tokens: u32) -> u64 {
        self.kv_bytes_per_token
            .saturating_mul(u64::from(ctx_tokens))
    }
}

/// Where `model` would go at `ctx_tokens` on `machine`. The sums saturate: a shape whose
/// sizes pass 64 bits (a header refuses one; a listing's sizes are the hub's word) does not
/// fit rather than wrapping to a small size that would.
pub fn fit(model: &ModelShape, machine: &Machine, ctx_tokens: u32) -> Fit {
    let kv_bytes = model.kv_bytes(ctx_tokens);
    let whole = model.weights_bytes.saturating_add(kv_bytes);
    let usable = machine
        .gpu
        .as_ref()
        .map_or(0, |g| g.usable_bytes().saturating_sub(model.compute_bytes));
    let per_layer = model
        .layer_weights_bytes()
        .saturating_add(model.layer_kv_bytes(ctx_tokens));
    let (gpu_layers, gpu_bytes) = if whole <= usable {
        (model.layers, whole)
    } else {
        // not whole: at least one layer (with the output's share) stays in RAM
        let n = usable
            .checked_div(per_layer)
            .unwrap_or(0)
            .min(u64::from(model.layers.saturating_sub(1)));
        (n as u32, n * per_layer)
    };
    let ram_bytes = whole - gpu_bytes;
    let verdict = if ram_bytes > machine.ram_available_bytes {
        Verdict::DoesNotFit {
            short_bytes: ram_bytes - machine.ram_available_bytes,
        }
    } else if gpu_layers == model.layers && ram_bytes == 0 {
        Verdict::OnGpu
    } else if gpu_layers == 0 {
        Verdict::CpuOnly
    } else {
        Verdict::PartlyOnCpu {
            cpu_layers: model.layers - gpu_layers,
        }
    };
    Fit {
        ctx_tokens,
        gpu_layers,
        gpu_bytes,
        ram_bytes,
        kv_bytes,
        verdict,
    }
}

/// The largest context (up to the trained one) at which the model keeps the best place this
/// machine offers it at its smallest context: all on the GPU if it can be, else the fewest
/// layers on the CPU, else in RAM. `None` when it does not fit even at `floor_tokens`.
pub fn largest_context(model: &ModelShape, machine: &Machine, floor_tokens: u32) -> Option<Fit> {
    let floor = floor_tokens.min(model.trained_context);
    let at_floor = fit(model, machine, floor);
    let keeps = |f: &Fit| match (at_floor.verdict, f.verdict) {
        (_, Verdict::DoesNotFit { .. }) => false,
        (Verdict::OnGpu, v) => v == Verdict::OnGpu,
        (Verdict::PartlyOnCpu { .. }, _) => f.gpu_layers >= at_floor.gpu_layers,
        _ => true,
    };
    if !keeps(&at_floor) {
        return None;
    }
    // binary search over the context: the fit only gets worse as it grows
    let (mut good, mut bad) = (floor, model.trained_context.saturating_add(1));
    while bad - good > 1 {
        let mid = good + (bad - good) / 2;
        if keeps(&fit(model, machine, mid)) {
            good = mid;
        } else {
            bad = mid;
        }
    }
    Some(fit(model, machine, good))
}

/// The verdict in words: "all on the GPU", "12 of 28 layers on the CPU", ...
pub fn verdict_words(f: &Fit, layers: u32) -> String {
    match f.verdict {
        Verdict::OnGpu => "fits on the GPU".to_owned(),
        Verdict::PartlyOnCpu { cpu_layers } => {
            format!("fits with {cpu_layers} of {layers} layers on the CPU")
        }
        Verdict::CpuOnly => "runs on the CPU (in RAM)".to_owned(),
        Verdict::DoesNotFit { short_bytes } => {
            format!("does not fit: {:.1} GB short", short_bytes as f64 / 1e9)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const GB: u64 = 1_000_000_000;
    const GIB: u64 = 1 << 30;

    /// Qwen2.5-Coder-7B-Instruct Q4_K_M: 4.68 GB, 28 layers, 4 KV heads of 128, F16 cache:
    /// 28 * 4 * 256 * 2 = 57,344 bytes a token; trained for 32,768.
    const CODER_7B: ModelShape = ModelShape {
        weights_bytes: 4_683_073_504,
        layers: 28,
        kv_bytes_per_token: 57_344,
        trained_context: 32_768,
        compute_bytes: 512 << 20,
    };

    fn card(gib: u64) -> Machine {
        Machine {
            gpu: Some(GpuMemory {
                name: format!("{gib} GiB card"),
                total_bytes: gib * GIB,
                // the desktop holds some
                free_bytes: gib * GIB - GIB / 2,
                limit_bytes: 0,
            }),
            ram_available_bytes: 24 * GB,
        }
    }

    #[test]
    fn a_7b_coder_fits_a_12_gb_card_whole_and_an_8_gb_card_at_a_shorter_context() {
        let on_12 = largest_context(&CODER_7B, &card(12), 8192).unwrap();
        assert_eq!(on_12.verdict, Verdict::OnGpu);
        assert_eq!(on_12.ctx_tokens, 32_768);
        let on_8 = largest_context(&CODER_7B, &card(8), 8192).unwrap();
        assert_eq!(on_8.verdict, Verdict::OnGpu);
        // 8 GiB - 0.5 desktop - 1 margin - 0.5 compute - 4.68 GB of weights leave 1.76 GB of
        // KV: 30,681 tokens at 57,344 bytes
        assert_eq!(on_8.ctx_tokens, 30_681, "{on_8:?}");
        // just past it, every layer would fit but the output's share: one layer goes to the
        // CPU (was "0 of 28 layers on the CPU")
        assert_eq!(
            fit(&CODER_7B, &card(8), 30_700).verdict,
            Verdict::PartlyOnCpu { cpu_layers: 1 }
        );
        // past it, layers move to the CPU
        let at_full = fit(&CODER_7B, &card(8), 32_768);
        assert!(
            matches!(at_full.verdict, Verdict::PartlyOnCpu { cpu_layers } if cpu_layers > 0),
            "{at_full:?}"
        );
        assert_eq!(
            at_full.gpu_bytes + at_full.ram_bytes,
            4_683_073_504 + 57_344 * 32_768
        );
    }

    #[test]
    fn a_model_larger_than_the_card_keeps_some_layers_on_the_cpu_and_without_ram_does_not_fit() {
        let big = ModelShape {
            weights_bytes: 18 * GB,
            layers: 48,
            kv_bytes_per_token: 98_304,
            trained_context: 131_072,
            compute_bytes: 512 << 20,
        };
        let f = largest_context(&big, &card(16), 16_384).unwrap();
        let Verdict::PartlyOnCpu { cpu_layers } = f.verdict else {
            panic!("{f:?}")
        };
        assert!((10..30).contains(&cpu_layers), "{f:?}");
        let no_ram = Machine {
            ram_available_bytes: 2 * GB,
            ..card(16)
        };
        assert!(matches!(
            fit(&big, &no_ram, 16_384).verdict,
            Verdict::DoesNotFit { short_bytes } if short_bytes > GB
        ));
        assert_eq!(largest_context(&big, &no_ram, 16_384), None);
    }

    /// Regression (#61 item 7): sizes past 64 bits wrapped to small ones that "fit" (in a
    /// debug build the multiplication panicked).
    #[test]
    fn sizes_past_64_bits_do_not_fit_rather_than_wrap() {
        let absurd = ModelShape {
            weights_bytes: u64::MAX - 10,
            kv_bytes_per_token: u64::MAX / 3,
            ..CODER_7B
        };
        let f = fit(&absurd, &card(24), 8192);
        assert!(matches!(f.verdict, Verdict::DoesNotFit { .. }), "{f:?}");
        assert_eq!(largest_context(&absurd, &card(24), 8192), None);
    }

    #[test]
    fn without_a_gpu_everything_is_in_ram_up_to_the_trained_context() {
        let cpu = Machine {
            gpu: None,
            ram_available_bytes: 24 * GB,
        };
        let f = largest_context(&CODER_7B, &cpu, 8192).unwrap();
        assert_eq!(
            (f.verdict, f.gpu_layers, f.ctx_tokens),
            (Verdict::CpuOnly, 0, 32_768)
        );
        assert_eq!(verdict_words(&f, 28), "runs on the CPU (in RAM)");
        let small = Machine {
            gpu: None,
            ram_available_bytes: 5 * GB,
        };
        // 5 GB - 4.68 weights = 0.32 GB of KV: about 5,500 tokens
        let f = largest_context(&CODER_7B, &small, 2048).unwrap();
        assert!((5_000..6_000).contains(&f.ctx_tokens), "{f:?}");
    }
}
