//! GPU offload: how many layers go to the GPU (`gpu_layers`), and what the engine reports
//! about its device.

use serde::{Deserialize, Serialize};

/// `gpu_layers`: `auto` (the default: as many layers as fit in the GPU's free memory, with
/// the KV pool, compute buffers and a margin; 0 where there is no GPU) or a count (0: CPU
/// only; more than the model has: all of them).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum GpuLayers {
    #[default]
    Auto,
    Count(u32),
}

impl std::fmt::Display for GpuLayers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Auto => f.write_str("auto"),
            Self::Count(n) => write!(f, "{n}"),
        }
    }
}

impl std::str::FromStr for GpuLayers {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        if s.eq_ignore_ascii_case("auto") {
            return Ok(Self::Auto);
        }
        s.parse::<u32>()
            .map(Self::Count)
            .map_err(|_| format!("expected `auto` or a number of layers, got {s:?}"))
    }
}

impl Serialize for GpuLayers {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Self::Auto => serializer.serialize_str("auto"),
            Self::Count(n) => serializer.serialize_u32(*n),
        }
    }
}

impl<'de> Deserialize<'de> for GpuLayers {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Count(u32),
            Word(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Count(n) => Ok(Self::Count(n)),
            Raw::Word(w) => w.parse().map_err(serde::de::Error::custom),
        }
    }
}

/// The memory llama.cpp's fitting leaves free on a device: 1 GiB, or a tenth of the device
/// if that is more. Windows drivers spill what does not fit into shared system memory, about
/// ten times slower, so the margin also absorbs other programs' use after the start.
pub fn margin_bytes(total_bytes: u64) -> u64 {
    const GIB: u64 = 1 << 30;
    GIB.max(total_bytes / 10)
}

/// Whether free memory has fallen under the margin (after loading): the warning the log,
/// `/health` and the dashboard show.
pub fn low_on_memory(free_bytes: u64, total_bytes: u64) -> bool {
    total_bytes > 0 && free_bytes < margin_bytes(total_bytes) / 2
}

/// What the engine runs on, reported in the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// `CPU`, or the GPU's description (e.g. "NVIDIA GeForce RTX 4090").
    pub name: String,
    /// ggml's backend: `CPU`, `CUDA`, ...
    pub backend: String,
    /// Layers on the GPU, and the model's layers.
    pub gpu_layers: u32,
    pub model_layers: u32,
    /// How the layer count was chosen: `auto` (fitted), `auto-no-gpu`, `auto-fit-failed`,
    /// `set` (the config's number).
    pub chosen_by: String,
    /// The GPU's memory, after loading (0 on the CPU).
    pub vram_total_bytes: u64,
    pub vram_free_bytes: u64,
    /// Free memory under the margin: the system may spill into shared memory.
    pub vram_low: bool,
}

#[cfg(test)]
mod tests {
    use super::*;

    const GIB: u64 = 1 << 30;

    #[test]
    fn gpu_layers_is_auto_or_a_count_in_json_and_on_the_command_line() {
        assert_eq!("auto".parse(), Ok(GpuLayers::Auto));
        assert_eq!("AUTO".parse(), Ok(GpuLayers::Auto));
        assert_eq!("99".parse(), Ok(GpuLayers::Count(99)));
        assert!("-1".parse::<GpuLayers>().unwrap_err().contains("\"-1\""));
        assert!("all".parse::<GpuLayers>().is_err());
        let auto: GpuLayers = serde_json::from_str("\"auto\"").unwrap();
        let count: GpuLayers = serde_json::from_str("12").unwrap();
        assert_eq!((auto, count), (GpuLayers::Auto, GpuLayers::Count(12)));
        assert!(serde_json::from_str::<GpuLayers>("\"most\"").is_err());
        assert_eq!(serde_json::to_string(&GpuLayers::Auto).unwrap(), "\"auto\"");
        assert_eq!(serde_json::to_string(&GpuLayers::Count(0)).unwrap(), "0");
        assert_eq!(GpuLayers::default(), GpuLayers::Auto);
    }

    #[test]
    fn the_margin_is_a_gib_or_a_tenth_of_the_device_whichever_is_more() {
        assert_eq!(margin_bytes(8 * GIB), GIB); // an 8 GiB RTX 4060
        assert_eq!(margin_bytes(10 * GIB), GIB);
        assert_eq!(margin_bytes(24 * GIB), 24 * GIB / 10); // an RTX 4090
        assert_eq!(margin_bytes(0), GIB);
    }

    #[test]
    fn memory_is_low_under_half_the_margin_and_never_without_a_gpu() {
        assert!(!low_on_memory(GIB, 8 * GIB));
        assert!(!low_on_memory(GIB / 2, 8 * GIB));
        assert!(low_on_memory(GIB / 2 - 1, 8 * GIB));
        assert!(low_on_memory(GIB, 24 * GIB)); // under 1.2 GiB on a 24 GiB card
        assert!(!low_on_memory(0, 0)); // the CPU
    }
}
