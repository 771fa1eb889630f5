//! A loaded model's quantization and sizes, as the engine line shows them: the GGUF header's
//! file type by name, and the KV cache's bytes per cell from the model's shape.
//!
//! Written here: llama-cpp-2 0.1.160 does not expose `llama_model_ftype` or `llama_model_desc`,
//! so the file type is read from the header (`general.file_type`) and named from llama.h's
//! `llama_ftype`.

use super::KvType;

/// llama.h's `llama_ftype` by number (the removed ones left out).
pub fn quantization_name(file_type: u32) -> Option<&'static str> {
    Some(match file_type {
        0 => "F32",
        1 => "F16",
        2 => "Q4_0",
        3 => "Q4_1",
        7 => "Q8_0",
        8 => "Q5_0",
        9 => "Q5_1",
        10 => "Q2_K",
        11 => "Q3_K_S",
        12 => "Q3_K_M",
        13 => "Q3_K_L",
        14 => "Q4_K_S",
        15 => "Q4_K_M",
        16 => "Q5_K_S",
        17 => "Q5_K_M",
        18 => "Q6_K",
        19 => "IQ2_XXS",
        20 => "IQ2_XS",
        21 => "Q2_K_S",
        22 => "IQ3_XS",
        23 => "IQ3_XXS",
        24 => "IQ1_S",
        25 => "IQ4_NL",
        26 => "IQ3_S",
        27 => "IQ3_M",
        28 => "IQ2_S",
        29 => "IQ2_M",
        30 => "IQ4_XS",
        31 => "IQ1_M",
        32 => "BF16",
        36 => "TQ1_0",
        37 => "TQ2_0",
        38 => "MXFP4_MOE",
        39 => "NVFP4",
        40 => "Q1_0",
        41 => "Q2_0",
        _ => return None,
    })
}

/// The attention shape the KV cache is sized by.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AttentionShape {
    pub layers: u32,
    pub kv_heads: u32,
    /// Per head: the key's and the value's length.
    pub key_length: u32,
    pub value_length: u32,
}

/// Bytes one KV cell takes: every layer's key and value of every KV head, at the cache's
/// type (F16: 2 bytes a value; Q8_0: blocks of 32 values in 34 bytes).
pub fn kv_bytes_per_cell(shape: AttentionShape, kv: KvType) -> u64 {
    let values = u64::from(shape.layers)
        * u64::from(shape.kv_heads)
        * u64::from(shape.key_length + shape.value_length);
    match kv {
        KvType::F16 => values * 2,
        KvType::Q8_0 => values * 34 / 32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_types_are_named_as_llama_cpp_names_them() {
        assert_eq!(quantization_name(3), Some("Q4_1"));
        assert_eq!(quantization_name(15), Some("Q4_K_M"));
        assert_eq!(quantization_name(4), None);
    }

    #[test]
    fn the_test_models_kv_cell_is_what_llama_cpp_allocates() {
        // SmolLM2-135M: 30 layers, 3 KV heads of 64; llama.cpp's KV cache allocates per layer
        // a row of n_embd_k_gqa (heads x key length) values per cell for the keys and one of
        // n_embd_v_gqa for the values, `ggml_row_size` of the cache's type: 180 MiB for
        // 8,192 cells at F16
        let shape = AttentionShape {
            layers: 30,
            kv_heads: 3,
            key_length: 64,
            value_length: 64,
        };
        assert_eq!(kv_bytes_per_cell(shape, KvType::F16) * 8192, 180 << 20);
        assert_eq!(kv_bytes_per_cell(shape, KvType::Q8_0), 12_240);
    }
}
