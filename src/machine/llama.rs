//! llama.cpp in this process: its backend, started once, and the GPUs it sees.

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::{LlamaBackendDevice, LlamaBackendDeviceType, list_llama_ggml_backend_devices};
use std::sync::OnceLock;

/// llama.cpp's backend in this process, with the best backend modules this machine runs
/// ([`super::modules::load`]) loaded first. It may be initialised once per process: the host's
/// tokenizer and its GPU listing share this one. (The engine worker starts its own, with the
/// CPU code its options name.)
pub fn backend() -> Result<&'static LlamaBackend, String> {
    static BACKEND: OnceLock<Result<LlamaBackend, String>> = OnceLock::new();
    BACKEND
        .get_or_init(|| {
            llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
            super::modules::load()?;
            let backend = LlamaBackend::init().map_err(|e| e.to_string())?;
            Ok(backend)
        })
        .as_ref()
        .map_err(Clone::clone)
}

/// The GPUs llama.cpp sees (none on a CPU-only build).
pub fn gpus() -> Vec<LlamaBackendDevice> {
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

/// The GPUs llama.cpp sees in this process, as (description, total bytes, free bytes); none
/// on a CPU-only build. For the fit estimate of models not loaded yet.
pub fn gpu_memory() -> Vec<(String, u64, u64)> {
    // ggml registers its devices with the backend
    if backend().is_err() {
        return Vec::new();
    }
    gpus()
        .into_iter()
        .map(|g| (g.description, g.memory_total as u64, g.memory_free as u64))
        .collect()
}
