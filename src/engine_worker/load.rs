//! Loading the model: how many layers go to the GPU (`gpu_layers`: a count, or `auto`,
//! fitted by llama.cpp into free GPU memory, within `gpu_memory_limit`), and the facts of the
//! device it runs on.

use super::fit::{ContextChoice, Target, fit, set, unfitted};
use super::{WorkerError, WorkerOptions};
use crate::machine::gpus;
use crate::protocol::gpu::{low_on_memory, within_limit};
use crate::protocol::{DeviceFacts, GpuLayers};
use llama_cpp_2::LlamaBackendDevice;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;

/// A loaded model, the facts of the device it runs on (the handshake's `device`) and the
/// context to make for it.
pub struct Loaded {
    pub model: LlamaModel,
    pub device: DeviceFacts,
    pub(super) context: ContextChoice,
}

/// Loads the model on the device `device` picks ([`super::device`]) with its layers on it as
/// `gpu_layers` says, and chooses its context (`ctx`, or with 0 the largest that fits:
/// [`super::fit`]).
pub fn load_model(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
    modules: &super::modules::Modules,
) -> Result<Loaded, WorkerError> {
    let all = gpus();
    let listed: Vec<String> = all.iter().map(super::device::listed).collect();
    let choice = super::device::choose(&options.device, all).map_err(WorkerError::Device)?;
    let gpu = choice.gpu.as_ref();
    // What the device has free before this engine takes any: its own use is counted from it.
    let free_before = gpu.map_or(0, |g| g.memory_free as u64);
    let on = |params: LlamaModelParams| -> Result<_, WorkerError> {
        match gpu {
            Some(g) => params
                .with_devices(&[g.index])
                .map_err(|e| WorkerError::Device(e.to_string())),
            None => Ok(params),
        }
    };
    let mut fit_warning = String::new();
    let ctx_auto = options.ctx_tokens == 0;
    // the context alone, fitted where the model goes with the layers as asked
    let context_on = |target: Target<'_>| -> ContextChoice {
        if !ctx_auto {
            return set(options);
        }
        fit(backend, options, path, target).map_or_else(
            |why| {
                tracing::warn!("fitting the context failed ({why})");
                unfitted(options, &why)
            },
            |fitted| fitted.context,
        )
    };
    let cpu = || Box::pin(LlamaModelParams::default().with_n_gpu_layers(0));
    let (params, chosen_by, mut context) = match (options.gpu_layers, gpu) {
        (_, None) => (
            cpu(),
            if options.device.trim().eq_ignore_ascii_case("cpu") {
                "device-cpu"
            } else if options.gpu_layers == GpuLayers::Auto {
                "auto-no-gpu"
            } else {
                "set"
            },
            context_on(Target::Cpu),
        ),
        (GpuLayers::Count(n), Some(g)) => {
            let context = context_on(if n > 0 {
                Target::Gpu(g, Some(n))
            } else {
                Target::Cpu
            });
            if n > 0 {
                fit_warning = does_not_fit(backend, options, path, g, n, &context);
            }
            (
                Box::pin(on(LlamaModelParams::default().with_n_gpu_layers(n))?),
                "set",
                context,
            )
        }
        (GpuLayers::Auto, Some(g)) => match fit(backend, options, path, Target::Gpu(g, None)) {
            Ok(fitted) => (fitted.params, "auto", fitted.context),
            Err(why) => {
                tracing::warn!("fitting layers into GPU memory failed ({why}): the CPU only");
                (cpu(), "auto-fit-failed", context_on(Target::Cpu))
            }
        },
    };
    let model =
        LlamaModel::load_from_file(backend, path, &params).map_err(|e| WorkerError::Model {
            path: path.display().to_string(),
            message: format!(
                "{e}{}",
                memory_words(params.n_gpu_layers(), free_before, options)
            ),
        })?;
    if context.ctx_tokens == 0 {
        // the fitting failed: the floor, at most the trained context
        context.ctx_tokens = options
            .ctx_min_tokens
            .max(256)
            .min(model.n_ctx_train().max(256));
    }
    // The host logs the device and warns when its memory is low (`engine::process`).
    let mut device = device_facts(&model, params.n_gpu_layers(), chosen_by, gpu);
    device.picked_by = choice.why;
    if gpu.is_none() && !modules.not_loaded.is_empty() {
        device.picked_by = format!(
            "{} (a GPU backend did not load: {})",
            device.picked_by,
            modules.not_loaded.join("; ")
        );
    }
    device.devices = listed;
    device.cpu_variant = modules.cpu.name().to_owned();
    if let super::modules::CpuCode::Variant { of, .. } = &modules.cpu {
        device.cpu_variants.clone_from(of);
    }
    device
        .cpu_variants_skipped
        .clone_from(&options.cpu_code_skipped);
    device.backends_not_loaded.clone_from(&modules.not_loaded);
    if device.gpu_layers > 0 {
        device.vram_limit_bytes = options.gpu_memory_limit.bytes();
        device.vram_free_before_load_bytes = free_before;
        device.fit_warning = fit_warning;
        refresh_memory(&mut device);
    }
    if !context.warning.is_empty() {
        if !device.fit_warning.is_empty() {
            device.fit_warning.push_str("; ");
        }
        device.fit_warning.push_str(&context.warning);
    }
    Ok(Loaded {
        model,
        device,
        context,
    })
}

/// The GPU the facts name (by llama.cpp's device name), as llama.cpp sees it now.
fn this_gpu(device: &DeviceFacts) -> Option<LlamaBackendDevice> {
    gpus().into_iter().find(|g| g.name == device.id)
}

/// For an error while loading with layers on a GPU: the memory it had, in words.
pub(super) fn memory_words(gpu_layers: i32, free_bytes: u64, options: &WorkerOptions) -> String {
    let gpus = gpus();
    let picked = super::device::choose(&options.device, gpus).ok();
    // llama.cpp's fitting answers -1 for "every layer"
    let Some(gpu) = picked.and_then(|c| c.gpu).filter(|_| gpu_layers != 0) else {
        return String::new();
    };
    let limit = options.gpu_memory_limit;
    let asked = if gpu_layers < 0 {
        "every layer".to_owned()
    } else {
        format!("{gpu_layers} layers")
    };
    format!(
        " ({asked} asked on {}: {} MiB free of {} MiB{})",
        gpu.description,
        free_bytes >> 20,
        (gpu.memory_total as u64) >> 20,
        if limit.mib > 0 {
            format!(", gpu_memory_limit {} MiB", limit.mib)
        } else {
            String::new()
        }
    )
}

/// A `gpu_layers` count against llama.cpp's fitting: the warning, with the figures, when it
/// asks more layers than the fitting finds room for (empty when they fit, or the fitting
/// cannot tell).
fn does_not_fit(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
    gpu: &LlamaBackendDevice,
    asked: u32,
    context: &ContextChoice,
) -> String {
    // the layers llama.cpp would put on the GPU at the context chosen
    let mut at = options.clone();
    at.engine.ctx_tokens = context.ctx_tokens;
    let at = if context.ctx_tokens > 0 { &at } else { options };
    let fitted = match fit(backend, at, path, Target::Gpu(gpu, None)) {
        Ok(fitted) => fitted,
        Err(why) => {
            tracing::warn!("fitting layers into GPU memory failed ({why}): not checked");
            return String::new();
        }
    };
    let layers = fitted.model_layers;
    let room = u32::try_from(fitted.params.n_gpu_layers()).map_or(layers, |n| n.min(layers));
    let asked = asked.min(layers);
    if asked <= room {
        return String::new();
    }
    let limit = options.gpu_memory_limit;
    format!(
        "gpu_layers {asked} does not fit: llama.cpp's fitting finds room for {room} of \
         {layers} layers in the GPU's {} MiB free{}, keeping {} MiB free beside them; the rest \
         may fail to allocate or spill into shared memory (about ten times slower)",
        (gpu.memory_free as u64) >> 20,
        if limit.mib > 0 {
            format!(" within gpu_memory_limit {} MiB", limit.mib)
        } else {
            String::new()
        },
        fitted.margin_bytes >> 20
    )
}

/// The device the model runs on, after loading; its memory is read once the context is made
/// ([`refresh_memory`]).
fn device_facts(
    model: &LlamaModel,
    gpu_layers: i32,
    chosen_by: &str,
    gpu: Option<&LlamaBackendDevice>,
) -> DeviceFacts {
    let model_layers = model.n_layer();
    let on_gpu = u32::try_from(gpu_layers).map_or(model_layers, |n| n.min(model_layers));
    let gpu = gpu.filter(|_| on_gpu > 0);
    let mut device = match gpu {
        Some(g) => DeviceFacts {
            name: g.description.clone(),
            backend: g.backend.clone(),
            id: g.name.clone(),
            ..DeviceFacts::default()
        },
        None => DeviceFacts {
            name: "CPU".to_owned(),
            backend: "CPU".to_owned(),
            ..DeviceFacts::default()
        },
    };
    // no GPU backend found: every layer runs on the CPU, whatever was asked
    device.gpu_layers = if gpu.is_some() { on_gpu } else { 0 };
    device.model_layers = model_layers;
    device.chosen_by = chosen_by.to_owned();
    device
}

/// Reads the GPU's total and free memory again (after the context took its KV pool and
/// buffers): what the engine took, what `gpu_memory_limit` leaves, and whether it is low.
/// Nothing on the CPU.
pub(super) fn refresh_memory(device: &mut DeviceFacts) {
    if device.gpu_layers == 0 {
        return;
    }
    if let Some(g) = this_gpu(device) {
        let free = g.memory_free as u64;
        device.vram_used_bytes = device.vram_free_before_load_bytes.saturating_sub(free);
        (device.vram_total_bytes, device.vram_free_bytes) = within_limit(
            g.memory_total as u64,
            free,
            device.vram_used_bytes,
            device.vram_limit_bytes,
        );
        device.vram_low = low_on_memory(device.vram_free_bytes, device.vram_total_bytes);
    }
}
