//! llama.cpp's own fitting (`common_fit_params`, what llama-server's `--fit` runs): the
//! context and the GPU layers that fit in memory, measured by llama.cpp on the model and the
//! context the engine will make (no weights are read).
//!
//! `ctx` 0 takes the largest context that fits, up to the model's trained one and not below
//! `ctx_min`: on a GPU the fitting first shrinks the context to fit its free memory (within
//! `gpu_memory_limit`), then, at the floor, moves layers to the CPU; on the CPU it shrinks
//! the context to fit the RAM available now, keeping a quarter of the machine free.

use super::WorkerOptions;
use super::llama::ContextPlan;
use crate::protocol::gpu::fit_margin_bytes;
use llama_cpp_2::LlamaBackendDevice;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::{FitError, LlamaModelParams};
use std::pin::Pin;

/// What the host memory fitting leaves free beside what is in use now, at least.
const HOST_MARGIN_MIN_BYTES: u64 = 1 << 30;

/// Where the model goes: the CPU, or a GPU with its layers as `gpu_layers` says (`None`:
/// as many as fit).
#[derive(Clone, Copy)]
pub(super) enum Target<'a> {
    Cpu,
    Gpu(&'a LlamaBackendDevice, Option<u32>),
}

/// The context the engine makes, and why (the handshake's `ctx_chosen_by`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct ContextChoice {
    pub(super) ctx_tokens: u32,
    /// `set`, `trained`, `fit` or `floor`.
    pub(super) chosen_by: &'static str,
    /// Empty, or why the floor may not fit.
    pub(super) warning: String,
}

/// What llama.cpp's fitting chose.
pub(super) struct Fitted {
    /// The model's parameters with the fitted layers (as asked for a count or the CPU).
    pub(super) params: Pin<Box<LlamaModelParams>>,
    pub(super) model_layers: u32,
    /// What it left free ([`fit_margin_bytes`], or on the CPU [`host_margin_bytes`]).
    pub(super) margin_bytes: u64,
    pub(super) context: ContextChoice,
}

/// The model's facts a vocabulary-only load gives from its metadata (it reads no
/// hyperparameters: `n_layer` and `n_ctx_train` say 0 there).
pub(super) struct Probe {
    pub(super) model: LlamaModel,
    pub(super) trained_ctx: u32,
    pub(super) layers: u32,
}

impl Probe {
    pub(super) fn load(backend: &LlamaBackend, path: &std::path::Path) -> Result<Self, String> {
        let model = LlamaModel::load_from_file(
            backend,
            path,
            &LlamaModelParams::default().with_vocab_only(true),
        )
        .map_err(|e| e.to_string())?;
        let meta = |key: &str| -> Option<u32> {
            let arch = model.meta_val_str("general.architecture").ok()?;
            model
                .meta_val_str(&format!("{arch}.{key}"))
                .ok()?
                .trim()
                .parse()
                .ok()
        };
        Ok(Self {
            trained_ctx: meta("context_length").unwrap_or(0),
            layers: meta("block_count").unwrap_or_else(|| model.n_layer()),
            model,
        })
    }

    /// The floor of a fitted context: `ctx_min`, at most the trained context.
    fn floor(&self, options: &WorkerOptions) -> u32 {
        let floor = options.ctx_min_tokens.max(256);
        if self.trained_ctx > 0 {
            floor.min(self.trained_ctx)
        } else {
            floor
        }
    }
}

/// What llama.cpp's fitting must leave free of the host's memory: it measures against the
/// machine's total, so what is in use now (total − available) counts as taken, and a quarter
/// of the machine (at least a GiB) stays free beside it: unlike a GPU's, the RAM is shared
/// with the agent's builds, the editor and the desktop, and a KV pool is written whole when
/// it is made.
pub(super) fn host_margin_bytes(total_bytes: u64, available_bytes: Option<u64>) -> u64 {
    let in_use = available_bytes.map_or(0, |a| total_bytes.saturating_sub(a));
    in_use + HOST_MARGIN_MIN_BYTES.max(total_bytes / 4)
}

/// How a fitted context was chosen, from what the fitting returned.
pub(super) fn chosen_by(fitted_ctx: u32, trained_ctx: u32, floor: u32) -> &'static str {
    if fitted_ctx >= trained_ctx {
        "trained"
    } else if fitted_ctx > floor {
        "fit"
    } else {
        "floor"
    }
}

/// Runs llama.cpp's fitting for `target`: with `ctx` 0 the context (see the module), and on
/// a GPU with `gpu_layers` auto the layers. An error when llama.cpp cannot measure, or when
/// nothing fits with the layers left to it.
pub(super) fn fit(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
    target: Target<'_>,
) -> Result<Fitted, String> {
    let probe = Probe::load(backend, path)?;
    let ctx_auto = options.ctx_tokens == 0;
    let floor = probe.floor(options);
    let plan = ContextPlan::new(options, &probe.model, options.ctx_tokens);
    let (model_layers, trained_ctx) = (probe.layers, probe.trained_ctx);
    drop(probe);
    let mut cparams = plan.params();
    let (params, margin) = match target {
        Target::Cpu => {
            let total = cpu_memory_total_bytes();
            let margin = host_margin_bytes(total, crate::machine::ram_available_bytes());
            // no device: llama.cpp measures the host's memory
            let params = LlamaModelParams::default()
                .with_devices(&[])
                .map_err(|e| e.to_string())?
                .with_n_gpu_layers(0);
            (params, margin)
        }
        Target::Gpu(gpu, layers) => {
            let margin = fit_margin_bytes(
                gpu.memory_total as u64,
                gpu.memory_free as u64,
                options.gpu_memory_limit.bytes(),
            );
            let mut params = LlamaModelParams::default()
                .with_devices(&[gpu.index])
                .map_err(|e| e.to_string())?;
            if let Some(n) = layers {
                params = params.with_n_gpu_layers(n);
            }
            (params, margin)
        }
    };
    // One margin per device llama.cpp may use (more entries than it has devices): the one
    // device it is given, or the host.
    let mut margins = vec![margin as usize; 256];
    let path_c =
        std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    let mut params = Box::pin(params);
    let n_ctx_min = if ctx_auto { floor } else { plan.ctx_tokens };
    let fitted = params.as_mut().fit_params(
        &path_c,
        &mut cparams,
        &mut margins,
        n_ctx_min,
        llama_cpp_sys_2::GGML_LOG_LEVEL_INFO,
    );
    let layers_asked = !matches!(target, Target::Gpu(_, None));
    let context = match fitted {
        Ok(result) if ctx_auto => ContextChoice {
            ctx_tokens: result.n_ctx,
            chosen_by: chosen_by(result.n_ctx, trained_ctx, floor),
            warning: String::new(),
        },
        Ok(_) => set(options),
        // the layers were not llama.cpp's to move: the floor, which may not fit
        Err(FitError::Failure) if layers_asked => ContextChoice {
            ctx_tokens: if ctx_auto { floor } else { options.ctx_tokens },
            chosen_by: if ctx_auto { "floor" } else { "set" },
            warning: format!(
                "the context of {} tokens does not fit in {} beside the model: lower ctx_min \
                 or ctx, or use a smaller model",
                if ctx_auto { floor } else { options.ctx_tokens },
                match target {
                    Target::Cpu => "the RAM available".to_owned(),
                    Target::Gpu(g, _) => format!("the free memory of {}", g.description),
                }
            ),
        },
        Err(e) => return Err(e.to_string()),
    };
    tracing::info!(
        "llama.cpp's fitting: context {} ({}), gpu_layers {} of {model_layers}{}, leaving {} \
         MiB free",
        context.ctx_tokens,
        context.chosen_by,
        params.n_gpu_layers(),
        match target {
            Target::Cpu => " (the CPU)".to_owned(),
            Target::Gpu(g, _) => format!(" on {}", g.name),
        },
        margin >> 20
    );
    Ok(Fitted {
        params,
        model_layers,
        margin_bytes: margin,
        context,
    })
}

/// The context as the `ctx` setting says.
pub(super) fn set(options: &WorkerOptions) -> ContextChoice {
    ContextChoice {
        ctx_tokens: options.ctx_tokens,
        chosen_by: "set",
        warning: String::new(),
    }
}

/// When llama.cpp's fitting could not run: the `ctx` setting, else the floor (0 here: at
/// most the trained context, resolved once the model is loaded), with `why`.
pub(super) fn unfitted(options: &WorkerOptions, why: &str) -> ContextChoice {
    if options.ctx_tokens > 0 {
        return set(options);
    }
    ContextChoice {
        ctx_tokens: 0,
        chosen_by: "floor",
        warning: format!("llama.cpp's fitting failed ({why}): the context is ctx_min"),
    }
}

/// The host's physical memory as llama.cpp's CPU device reports it (what its fitting
/// measures against).
fn cpu_memory_total_bytes() -> u64 {
    llama_cpp_2::list_llama_ggml_backend_devices()
        .into_iter()
        .find(|d| matches!(d.device_type, llama_cpp_2::LlamaBackendDeviceType::Cpu))
        .map_or(0, |d| d.memory_total as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_margin_counts_what_is_in_use_now_plus_a_quarter_of_the_machine() {
        let gib = 1u64 << 30;
        assert_eq!(host_margin_bytes(32 * gib, Some(20 * gib)), 20 * gib);
        assert_eq!(host_margin_bytes(32 * gib, None), 8 * gib);
        assert_eq!(host_margin_bytes(8 * gib, Some(9 * gib)), 2 * gib);
        assert_eq!(host_margin_bytes(2 * gib, Some(2 * gib)), gib);
    }

    #[test]
    fn a_fitted_context_is_trained_when_whole_fit_above_the_floor_and_floor_at_it() {
        assert_eq!(chosen_by(131_072, 131_072, 32_768), "trained");
        assert_eq!(chosen_by(8_192, 8_192, 8_192), "trained");
        assert_eq!(chosen_by(65_536, 131_072, 32_768), "fit");
        assert_eq!(chosen_by(32_768, 131_072, 32_768), "floor");
    }
}
