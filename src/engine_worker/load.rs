//! Loading the model: how many layers go to the GPU (`gpu_layers`: a count, or `auto`,
//! fitted by llama.cpp into free GPU memory), and the facts of the device it runs on.

use super::llama::ContextPlan;
use super::{WorkerError, WorkerOptions};
use crate::protocol::gpu::{low_on_memory, margin_bytes};
use crate::protocol::{DeviceFacts, GpuLayers};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::{LlamaBackendDevice, LlamaBackendDeviceType, list_llama_ggml_backend_devices};

/// Loads the model with its layers on the GPU as `gpu_layers` says; returns it with the facts
/// of the device it runs on (the handshake's `device`).
pub fn load_model(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
) -> Result<(LlamaModel, DeviceFacts), WorkerError> {
    let (params, chosen_by) = match options.gpu_layers {
        GpuLayers::Count(n) => (
            Box::pin(LlamaModelParams::default().with_n_gpu_layers(n)),
            "set",
        ),
        GpuLayers::Auto if gpus().is_empty() => (
            Box::pin(LlamaModelParams::default().with_n_gpu_layers(0)),
            "auto-no-gpu",
        ),
        GpuLayers::Auto => match fitted_params(backend, options, path) {
            Ok(params) => (params, "auto"),
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
            message: e.to_string(),
        })?;
    // The host logs the device and warns when its memory is low (`engine::process`).
    let device = device_facts(&model, params.n_gpu_layers(), chosen_by);
    Ok((model, device))
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

/// llama.cpp's own fitting (`common_fit_params`, as llama-server's `--fit`): as many layers
/// as fit in each GPU's free memory beside the KV pool and compute buffers of the context the
/// engine will make, leaving [`margin_bytes`] free; the context is not shrunk for it.
fn fitted_params(
    backend: &LlamaBackend,
    options: &WorkerOptions,
    path: &std::path::Path,
) -> Result<std::pin::Pin<Box<LlamaModelParams>>, String> {
    // The model's own context and kind, for the context the engine will make.
    let probe = LlamaModel::load_from_file(
        backend,
        path,
        &LlamaModelParams::default().with_vocab_only(true),
    )
    .map_err(|e| e.to_string())?;
    let plan = ContextPlan::new(options, &probe);
    drop(probe);
    let mut cparams = plan.params();
    let largest = gpus()
        .iter()
        .map(|d| d.memory_total as u64)
        .max()
        .unwrap_or(0);
    // One margin per device llama.cpp may use (more entries than it has devices).
    let mut margins = vec![margin_bytes(largest) as usize; 256];
    for (i, gpu) in gpus().iter().enumerate() {
        margins[i] = margin_bytes(gpu.memory_total as u64) as usize;
    }
    let path_c =
        std::ffi::CString::new(path.to_string_lossy().as_bytes()).map_err(|e| e.to_string())?;
    let mut params = Box::pin(LlamaModelParams::default());
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
    Ok(params)
}

/// The device the model runs on, after loading; its free memory is read again once the
/// context is made ([`refresh_memory`]).
fn device_facts(model: &LlamaModel, gpu_layers: i32, chosen_by: &str) -> DeviceFacts {
    let model_layers = model.n_layer();
    let on_gpu = u32::try_from(gpu_layers).map_or(model_layers, |n| n.min(model_layers));
    let gpu = gpus().into_iter().next().filter(|_| on_gpu > 0);
    let mut device = match &gpu {
        Some(g) => DeviceFacts {
            name: g.description.clone(),
            backend: g.backend.clone(),
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
    refresh_memory(&mut device);
    device
}

/// Reads the GPU's total and free memory again (after the context took its KV pool and
/// buffers), and whether it is low. Nothing on the CPU.
pub(super) fn refresh_memory(device: &mut DeviceFacts) {
    if device.gpu_layers == 0 {
        return;
    }
    if let Some(g) = gpus().into_iter().next() {
        device.vram_total_bytes = g.memory_total as u64;
        device.vram_free_bytes = g.memory_free as u64;
        device.vram_low = low_on_memory(device.vram_free_bytes, device.vram_total_bytes);
    }
}
