//! This machine's memory for the fit estimate: the first GPU llama.cpp sees, and the RAM
//! available now, as [`crate::machine`] reads them.

use super::fit::{GpuMemory, Machine};

/// The machine as a listing in the app sees it while an engine runs: the GPU as the engine
/// reported it (no device enumeration in the app's own process: with CUDA that would hold a
/// context of a few hundred MB there for the app's life), its free memory counting what the
/// running engine holds (a model picked replaces it): its layers' share of the weights and of
/// the KV pool. Under a `gpu_memory_limit` (the engine's figures are then within it), the
/// device's free memory before the engine loaded and the limit. Without an engine on a GPU,
/// [`this_machine`] with `limit_bytes` (`gpu_memory_limit`; 0: none).
pub fn machine_beside_engine(
    device: Option<&strata_protocol::gpu::DeviceFacts>,
    weights_bytes: u64,
    kv_pool_bytes: u64,
    limit_bytes: u64,
) -> Machine {
    let Some(d) = device.filter(|d| d.gpu_layers > 0 && d.vram_total_bytes > 0) else {
        return this_machine(limit_bytes);
    };
    let share = |bytes: u64| bytes * u64::from(d.gpu_layers) / u64::from(d.model_layers.max(1));
    let gpu = if d.vram_limit_bytes > 0 {
        // a model picked replaces this one: what was free before it, within the limit (the
        // device's total is not known past the limit: the free memory stands for it)
        GpuMemory {
            name: d.name.clone(),
            total_bytes: d.vram_free_before_load_bytes,
            free_bytes: d.vram_free_before_load_bytes,
            limit_bytes: d.vram_limit_bytes,
        }
    } else {
        GpuMemory {
            name: d.name.clone(),
            total_bytes: d.vram_total_bytes,
            free_bytes: (d.vram_free_bytes + share(weights_bytes) + share(kv_pool_bytes))
                .min(d.vram_total_bytes),
            limit_bytes: 0,
        }
    };
    Machine {
        gpu: Some(gpu),
        ram_available_bytes: crate::machine::ram_available_bytes().unwrap_or(0),
    }
}

/// The first GPU llama.cpp sees and the RAM available; `limit_bytes`: `gpu_memory_limit`
/// (0: none).
pub fn this_machine(limit_bytes: u64) -> Machine {
    let gpu =
        crate::machine::gpu_memory()
            .into_iter()
            .next()
            .map(|(name, total_bytes, free_bytes)| GpuMemory {
                name,
                total_bytes,
                free_bytes,
                limit_bytes,
            });
    Machine {
        gpu,
        ram_available_bytes: crate::machine::ram_available_bytes().unwrap_or(0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn beside_an_engine_on_the_gpu_its_memory_counts_as_free_for_the_model_that_replaces_it() {
        let device = strata_protocol::gpu::DeviceFacts {
            name: "NVIDIA GeForce RTX 4070".into(),
            backend: "CUDA".into(),
            gpu_layers: 14,
            model_layers: 28,
            chosen_by: "auto".into(),
            vram_total_bytes: 12 << 30,
            vram_free_bytes: 1 << 30,
            vram_low: false,
            ..Default::default()
        };
        // half the layers on the GPU: half of 8 GB of weights and of a 2 GB pool
        let m = machine_beside_engine(Some(&device), 8 << 30, 2 << 30, 0);
        let gpu = m.gpu.unwrap();
        assert_eq!(gpu.name, "NVIDIA GeForce RTX 4070");
        assert_eq!(gpu.free_bytes, (1 << 30) + (4 << 30) + (1 << 30));
        // never more than the card
        let m = machine_beside_engine(Some(&device), 40 << 30, 0, 0);
        assert_eq!(m.gpu.unwrap().free_bytes, 12 << 30);
    }

    #[test]
    fn beside_an_engine_within_a_gpu_memory_limit_the_limit_and_what_was_free_before_count() {
        let device = strata_protocol::gpu::DeviceFacts {
            gpu_layers: 14,
            model_layers: 28,
            // within the 6 GiB limit, as the engine reports them
            vram_total_bytes: 6 << 30,
            vram_free_bytes: 1 << 30,
            vram_limit_bytes: 6 << 30,
            vram_free_before_load_bytes: 11 << 30,
            ..Default::default()
        };
        let gpu = machine_beside_engine(Some(&device), 8 << 30, 2 << 30, 0)
            .gpu
            .unwrap();
        assert_eq!(gpu.limit_bytes, 6 << 30);
        // llama.cpp's fitting would leave max(1.1 GiB, 11 - 6 GiB) free of the 11 GiB
        assert_eq!(gpu.usable_bytes(), 6 << 30);
        // without one, the margin: a tenth of a 12 GiB card is more than 1 GiB
        let card = GpuMemory {
            name: String::new(),
            total_bytes: 12 << 30,
            free_bytes: 11 << 30,
            limit_bytes: 0,
        };
        assert_eq!(card.usable_bytes(), (11 << 30) - (12 << 30) / 10);
        let limited = GpuMemory {
            limit_bytes: 300 << 20,
            ..card
        };
        assert_eq!(limited.usable_bytes(), 300 << 20);
    }
}
