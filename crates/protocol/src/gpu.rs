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

/// `gpu_memory_limit`: the most GPU memory the engine may take (model, KV pool and compute
/// buffers), to leave room for the desktop and other programs; 0: no limit. A number of MiB,
/// or a string with its unit: `"6 GiB"`, `"512MiB"`. Serialized as the number of MiB.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct GpuMemoryLimit {
    pub mib: u64,
}

impl GpuMemoryLimit {
    pub fn bytes(self) -> u64 {
        self.mib.saturating_mul(1 << 20)
    }
}

impl std::fmt::Display for GpuMemoryLimit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.mib)
    }
}

impl std::str::FromStr for GpuMemoryLimit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        let digits = text
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len());
        let (number, unit) = text.split_at(digits);
        let scale = match unit.trim().to_ascii_lowercase().as_str() {
            "" | "mib" => 1,
            "gib" => 1024,
            _ => 0,
        };
        match number.parse::<u64>() {
            Ok(n) if scale > 0 => n
                .checked_mul(scale)
                .map(|mib| Self { mib })
                .ok_or_else(|| format!("{s:?} is more memory than any GPU has")),
            _ => Err(format!(
                "expected a number of MiB or a size such as \"6 GiB\" or \"512 MiB\", got {s:?}"
            )),
        }
    }
}

impl Serialize for GpuMemoryLimit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_u64(self.mib)
    }
}

impl<'de> Deserialize<'de> for GpuMemoryLimit {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Mib(u64),
            Text(String),
        }
        match Raw::deserialize(deserializer)? {
            Raw::Mib(mib) => Ok(Self { mib }),
            Raw::Text(text) => text.parse().map_err(serde::de::Error::custom),
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

/// The memory llama.cpp's fitting must leave free on a device with `free_bytes` free: the
/// margin, or, under a `gpu_memory_limit` (`limit_bytes`, 0: none), all but the limit when
/// that is more, so the engine takes at most the limit.
pub fn fit_margin_bytes(total_bytes: u64, free_bytes: u64, limit_bytes: u64) -> u64 {
    let margin = margin_bytes(total_bytes);
    if limit_bytes == 0 {
        return margin;
    }
    margin.max(free_bytes.saturating_sub(limit_bytes))
}

/// A device's total and free memory as the engine may use them: under a `gpu_memory_limit`
/// (`limit_bytes`, 0: none) the total is at most the limit and the free memory at most what
/// the limit leaves beside the engine's own use (`used_bytes`).
pub fn within_limit(
    total_bytes: u64,
    free_bytes: u64,
    used_bytes: u64,
    limit_bytes: u64,
) -> (u64, u64) {
    if limit_bytes == 0 {
        return (total_bytes, free_bytes);
    }
    (
        total_bytes.min(limit_bytes),
        free_bytes.min(limit_bytes.saturating_sub(used_bytes)),
    )
}

/// Whether free memory has fallen under the margin (after loading): the warning the log,
/// `/health` and the dashboard show.
pub fn low_on_memory(free_bytes: u64, total_bytes: u64) -> bool {
    total_bytes > 0 && free_bytes < margin_bytes(total_bytes) / 2
}

/// A CPU variant the engine does not run, and why: `sapphirerapids`, "illegal instruction
/// (SIGILL) while warming up (recorded 2026-12-05 for this CPU and build)".
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct SkippedCpuCode {
    pub variant: String,
    pub why: String,
}

/// What the engine runs on, reported in the handshake.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct DeviceFacts {
    /// `CPU`, or the GPU's description (e.g. "NVIDIA GeForce RTX 4090").
    pub name: String,
    /// ggml's backend: `CPU`, `CUDA`, ...
    pub backend: String,
    /// llama.cpp's name of the GPU (`Vulkan0`, `CUDA0`; empty on the CPU): what `device`
    /// takes.
    #[serde(default)]
    pub id: String,
    /// Why this device (`device auto: the most free memory of 2 GPUs`, `device "Vulkan0" in
    /// the config`, ...).
    #[serde(default)]
    pub picked_by: String,
    /// Every GPU llama.cpp sees: `Vulkan0: NVIDIA GeForce RTX 4090, 22100 of 24564 MiB free`.
    #[serde(default)]
    pub devices: Vec<String>,
    /// Layers on the GPU, and the model's layers.
    pub gpu_layers: u32,
    pub model_layers: u32,
    /// How the layer count was chosen: `auto` (fitted), `auto-no-gpu`, `auto-fit-failed`,
    /// `set` (the config's number), `device-cpu` (`device: "cpu"`).
    pub chosen_by: String,
    /// The GPU's memory, after loading (0 on the CPU); within `gpu_memory_limit` when one is
    /// set (see [`within_limit`]).
    pub vram_total_bytes: u64,
    pub vram_free_bytes: u64,
    /// Free memory under the margin: the system may spill into shared memory.
    pub vram_low: bool,
    /// `gpu_memory_limit` in bytes (0: none).
    #[serde(default)]
    pub vram_limit_bytes: u64,
    /// The device's free memory before the model loaded, and what the engine took since, as
    /// the device reports it (a device that does not track its use, as Mesa's software
    /// device, reports 0 taken).
    #[serde(default)]
    pub vram_free_before_load_bytes: u64,
    #[serde(default)]
    pub vram_used_bytes: u64,
    /// Set when `gpu_layers` asks more layers than llama.cpp's fitting finds room for: the
    /// figures, in words (empty otherwise).
    #[serde(default)]
    pub fit_warning: String,
    /// llama.cpp's CPU code the engine runs: the variant a `cpu-variants` build loaded for
    /// this CPU (`haswell`, `zen4`, ...), or `built-in` (one CPU code linked in).
    #[serde(default)]
    pub cpu_variant: String,
    /// The CPU variants the build carries (empty for `built-in`).
    #[serde(default)]
    pub cpu_variants: Vec<String>,
    /// CPU variants passed over because they crashed on this CPU (the app's record), best
    /// first, with why: the engine runs `cpu_variant`, the next best.
    #[serde(default)]
    pub cpu_variants_skipped: Vec<SkippedCpuCode>,
    /// GPU backend modules that did not load, with the system's reason (`vulkan:
    /// libvulkan.so.1: cannot open shared object file`): the engine then runs on the CPU.
    #[serde(default)]
    pub backends_not_loaded: Vec<String>,
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
    fn a_gpu_memory_limit_is_mib_or_a_size_with_its_unit() {
        let limit = |s: &str| s.parse::<GpuMemoryLimit>().map(|l| l.mib);
        assert_eq!(limit("512"), Ok(512));
        assert_eq!(limit("512 MiB"), Ok(512));
        assert_eq!(limit("6GiB"), Ok(6144));
        assert_eq!(limit(" 6 gib "), Ok(6144));
        assert!(limit("6 GB").unwrap_err().contains("\"6 GB\""));
        assert!(limit("-1").is_err());
        assert!(limit("GiB").is_err());
        let parsed: GpuMemoryLimit = serde_json::from_str("\"2 GiB\"").unwrap();
        assert_eq!(parsed.bytes(), 2 * GIB);
        let parsed: GpuMemoryLimit = serde_json::from_str("300").unwrap();
        assert_eq!(serde_json::to_string(&parsed).unwrap(), "300");
        assert!(serde_json::from_str::<GpuMemoryLimit>("\"lots\"").is_err());
        assert_eq!(GpuMemoryLimit::default().bytes(), 0);
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

    #[test]
    fn a_memory_limit_makes_the_fitting_leave_all_but_the_limit_free() {
        // no limit: the margin
        assert_eq!(fit_margin_bytes(24 * GIB, 20 * GIB, 0), 24 * GIB / 10);
        // 6 GiB of a card with 20 GiB free: 14 GiB left free
        assert_eq!(fit_margin_bytes(24 * GIB, 20 * GIB, 6 * GIB), 14 * GIB);
        // a limit above what is free less the margin: the margin still holds
        assert_eq!(fit_margin_bytes(8 * GIB, 6 * GIB, 7 * GIB), GIB);
    }

    #[test]
    fn under_a_limit_the_memory_shown_is_what_the_limit_leaves() {
        assert_eq!(within_limit(8 * GIB, 6 * GIB, GIB, 0), (8 * GIB, 6 * GIB));
        // 4 GiB allowed, 1 GiB taken: 3 GiB left, though the card has 6 free
        assert_eq!(
            within_limit(8 * GIB, 6 * GIB, GIB, 4 * GIB),
            (4 * GIB, 3 * GIB)
        );
        // the card itself shorter than the limit
        assert_eq!(within_limit(8 * GIB, GIB, GIB, 4 * GIB), (4 * GIB, GIB));
        // more taken than allowed (layers set by hand): nothing left
        assert_eq!(
            within_limit(8 * GIB, 6 * GIB, 5 * GIB, 4 * GIB),
            (4 * GIB, 0)
        );
    }
}
