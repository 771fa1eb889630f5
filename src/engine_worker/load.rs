//! Loading the model: how many layers go to the GPU (`gpu_layers`: a count, or `auto`,
//! fitted by llama.cpp into free GPU memory, within `gpu_memory_limit`), and the facts of the
//! device it runs on.

use super::llama::ContextPlan;
use super::{WorkerError, WorkerOptions};
use crate::protocol::gpu::{fit_margin_bytes, low_on_memory, within_limit};
use crate::protocol::{DeviceFacts, GpuLayers};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::{LlamaBackendDevice, LlamaBackendDeviceType, list_llama_ggml_backend_devices};

/// Loads the model on the device `device` picks ([`super::device`]) with its layers on it as
/// `gpu_layers` says; returns it with the facts of the device it runs on (the handshake's
/// `device`).
pub fn load_model(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
) -> Result<(LlamaModel, DeviceFacts), WorkerError> {
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
    let (params, chosen_by) = match (options.gpu_layers, gpu) {
        (_, None) => (
            Box::pin(LlamaModelParams::default().with_n_gpu_layers(0)),
            if options.device.trim().eq_ignore_ascii_case("cpu") {
                "device-cpu"
            } else if options.gpu_layers == GpuLayers::Auto {
                "auto-no-gpu"
            } else {
                "set"
            },
        ),
        (GpuLayers::Count(n), Some(g)) => {
            if n > 0 {
                fit_warning = does_not_fit(backend, options, path, g, n);
            }
            (
                Box::pin(on(LlamaModelParams::default().with_n_gpu_layers(n))?),
                "set",
            )
        }
        (GpuLayers::Auto, Some(g)) => match fitted_params(backend, options, path, g) {
            Ok(fitted) => (fitted.params, "auto"),
            Err(why) => {
                tracing::warn!("fitting layers into GPU memory failed ({why}): the CPU only");
                (
                    Box::pin(LlamaModelParams::default().with_n_gpu_layers(0)),
                    "auto-fit-failed",
                )
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
    // The host logs the device and warns when its memory is low (`engine::process`).
    let mut device = device_facts(&model, params.n_gpu_layers(), chosen_by, gpu);
    device.picked_by = choice.why;
    device.devices = listed;
    if device.gpu_layers > 0 {
        device.vram_limit_bytes = options.gpu_memory_limit.bytes();
        device.vram_free_before_load_bytes = free_before;
        device.fit_warning = fit_warning;
        refresh_memory(&mut device);
    }
    Ok((model, device))
}

/// The GPU the facts name (by llama.cpp's device name), as llama.cpp sees it now.
fn this_gpu(device: &DeviceFacts) -> Option<LlamaBackendDevice> {
    gpus().into_iter().find(|g| g.name == device.id)
}

/// For an error while loading with layers on a GPU: the memory it had, in words.
pub(super) fn memory_words(gpu_layers: i32, free_bytes: u64, options: &WorkerOptions) -> String {
    let gpus = gpus();
    let picked = super::device::choose(&options.device, gpus).ok();
    let Some(gpu) = picked.and_then(|c| c.gpu).filter(|_| gpu_layers > 0) else {
        return String::new();
    };
    let limit = options.gpu_memory_limit;
    format!(
        " ({gpu_layers} layers asked on {}: {} MiB free of {} MiB{})",
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
) -> String {
    let fitted = match fitted_params(backend, options, path, gpu) {
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

/// The GPUs llama.cpp sees (none on a CPU-only build).
pub(crate) fn gpus() -> Vec<LlamaBackendDevice> {
    list_llama_ggml_backend_devices()
        .into_iter()
        .filter(|d| {
            matches!(
                d.device_type,
                LlamaBackendDeviceType::Gpu | LlamaBackendDeviceType::IntegratedGpu
            )
        })
        .collect()
}

/// The model's layers from its metadata (`{arch}.block_count`): a vocabulary-only model
/// reports 0 from `n_layer`.
fn block_count(model: &LlamaModel) -> u32 {
    model
        .meta_val_str("general.architecture")
        .and_then(|arch| model.meta_val_str(&format!("{arch}.block_count")))
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| model.n_layer())
}

/// What llama.cpp's fitting chose.
struct Fitted {
    params: std::pin::Pin<Box<LlamaModelParams>>,
    model_layers: u32,
    /// What it left free ([`fit_margin_bytes`]).
    margin_bytes: u64,
}

/// llama.cpp's own fitting (`common_fit_params`, as llama-server's `--fit`): as many layers
/// as fit in the GPU's free memory beside the KV pool and compute buffers of the context the
/// engine will make, leaving [`fit_margin_bytes`] free (the margin, or all but
/// `gpu_memory_limit`); the context is not shrunk for it. Only `gpu` is used.
fn fitted_params(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
    gpu: &LlamaBackendDevice,
) -> Result<Fitted, String> {
    // The model's own context and kind, for the context the engine will make.
    let probe = LlamaModel::load_from_file(
        backend,
        path,
        &LlamaModelParams::default().with_vocab_only(true),
    )
    .map_err(|e| e.to_string())?;
    let plan = ContextPlan::new(options, &probe);
    let model_layers = block_count(&probe);
    drop(probe);
    let mut cparams = plan.params();
    let margin = fit_margin_bytes(
        gpu.memory_total as u64,
        gpu.memory_free as u64,
        options.gpu_memory_limit.bytes(),
    );
    // One margin per device llama.cpp may use (more entries than it has devices): the one
    // device it is given first.
    let mut margins = vec![margin as usize; 256];
    let path_c =
        std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    let mut params = Box::pin(
        LlamaModelParams::default()
            .with_devices(&[gpu.index])
            .map_err(|e| e.to_string())?,
    );
    params
        .as_mut()
        .fit_params(
            &path_c,
            &mut cparams,
            &mut margins,
            plan.ctx_tokens,
            llama_cpp_sys_2::GGML_LOG_LEVEL_INFO,
        )
        .map_err(|e| e.to_string())?;
    tracing::info!(
        "llama.cpp's fitting: gpu_layers {} of {model_layers} on {}, leaving {} MiB free",
        params.n_gpu_layers(),
        gpu.name,
        margin >> 20
    );
    Ok(Fitted {
        params,
        model_layers,
        margin_bytes: margin,
    })
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
