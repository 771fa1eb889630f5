//! Which device the model runs on (`device`): `auto` takes the GPU with the most free memory
//! (a build with two backends lists one card twice, as `CUDA0` and `Vulkan0`, and two cards
//! are not split: one device is used); `cpu` keeps every layer on the CPU; any other value
//! names a device from llama.cpp's list, by its name (`Vulkan0`) or its description
//! (`NVIDIA GeForce RTX 4090`), as the window and `/health` list them.

use llama_cpp_2::LlamaBackendDevice;

/// The device picked, and why, in words.
#[derive(Debug)]
pub(super) struct Choice {
    /// `None`: the CPU.
    pub gpu: Option<LlamaBackendDevice>,
    pub why: String,
}

/// Picks the device `wanted` names among `gpus` (llama.cpp's GPUs, in its order).
pub(super) fn choose(wanted: &str, gpus: Vec<LlamaBackendDevice>) -> Result<Choice, String> {
    let wanted = wanted.trim();
    if wanted.is_empty() || wanted.eq_ignore_ascii_case("auto") {
        let count = gpus.len();
        // the first of equals, as llama.cpp orders them
        let best = gpus.into_iter().rev().max_by_key(|g| g.memory_free);
        let why = match count {
            0 => "device auto: no GPU found".to_owned(),
            1 => "device auto: the only GPU".to_owned(),
            n => format!("device auto: the most free memory of {n} GPUs"),
        };
        return Ok(Choice { gpu: best, why });
    }
    if wanted.eq_ignore_ascii_case("cpu") {
        return Ok(Choice {
            gpu: None,
            why: "device cpu in the config".to_owned(),
        });
    }
    let names: Vec<String> = gpus.iter().map(listed).collect();
    match gpus
        .into_iter()
        .find(|g| g.name.eq_ignore_ascii_case(wanted) || g.description.eq_ignore_ascii_case(wanted))
    {
        Some(gpu) => Ok(Choice {
            why: format!("device {wanted:?} in the config"),
            gpu: Some(gpu),
        }),
        None => Err(format!(
            "device {wanted:?} is not one llama.cpp sees here; the devices: {}",
            if names.is_empty() {
                "none but the CPU (`auto` or `cpu`)".to_owned()
            } else {
                format!("{}, `auto` or `cpu`", names.join("; "))
            }
        )),
    }
}

/// A GPU as the device list shows it: `Vulkan0: NVIDIA GeForce RTX 4090, 22100 of 24564 MiB
/// free`.
pub(super) fn listed(g: &LlamaBackendDevice) -> String {
    format!(
        "{}: {}, {} of {} MiB free",
        g.name,
        g.description,
        g.memory_free >> 20,
        g.memory_total >> 20
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use llama_cpp_2::LlamaBackendDeviceType;

    fn gpu(index: usize, name: &str, description: &str, free_mib: usize) -> LlamaBackendDevice {
        LlamaBackendDevice {
            index,
            name: name.into(),
            description: description.into(),
            backend: name.trim_end_matches(char::is_numeric).into(),
            memory_total: 24_576 << 20,
            memory_free: free_mib << 20,
            device_type: LlamaBackendDeviceType::Gpu,
        }
    }

    fn two() -> Vec<LlamaBackendDevice> {
        vec![
            gpu(1, "CUDA0", "NVIDIA GeForce RTX 3060", 9_000),
            gpu(2, "Vulkan0", "NVIDIA GeForce RTX 4090", 20_000),
        ]
    }

    #[test]
    fn auto_takes_the_gpu_with_the_most_free_memory_and_says_so() {
        let choice = choose("auto", two()).unwrap();
        assert_eq!(choice.gpu.unwrap().name, "Vulkan0");
        assert_eq!(choice.why, "device auto: the most free memory of 2 GPUs");
        let choice = choose("", two().into_iter().rev().collect()).unwrap();
        assert_eq!(choice.gpu.unwrap().name, "Vulkan0");
        // equals: the first llama.cpp lists
        let same = vec![gpu(1, "CUDA0", "A", 100), gpu(2, "Vulkan0", "A", 100)];
        assert_eq!(choose("auto", same).unwrap().gpu.unwrap().name, "CUDA0");
        let none = choose("auto", Vec::new()).unwrap();
        assert!(none.gpu.is_none());
        assert_eq!(none.why, "device auto: no GPU found");
    }

    #[test]
    fn a_device_is_named_by_its_name_or_description_or_is_the_cpu() {
        assert_eq!(choose("cuda0", two()).unwrap().gpu.unwrap().index, 1);
        let by_description = choose("NVIDIA GeForce RTX 3060", two()).unwrap();
        assert_eq!(by_description.gpu.unwrap().name, "CUDA0");
        assert!(by_description.why.contains("in the config"));
        assert!(choose("CPU", two()).unwrap().gpu.is_none());
    }

    #[test]
    fn an_unknown_device_is_refused_with_the_list_of_those_there_are() {
        let error = choose("Vulkan1", two()).unwrap_err();
        assert!(error.contains("\"Vulkan1\""), "{error}");
        assert!(
            error.contains("CUDA0: NVIDIA GeForce RTX 3060, 9000 of 24576 MiB free"),
            "{error}"
        );
        assert!(
            error.contains("Vulkan0: NVIDIA GeForce RTX 4090"),
            "{error}"
        );
        let error = choose("Vulkan0", Vec::new()).unwrap_err();
        assert!(error.contains("none but the CPU"), "{error}");
    }
}
