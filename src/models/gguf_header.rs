//! A GGUF file's header read from its first bytes: what a model is (architecture, layers,
//! attention shape, trained context, quantization, chat template) before its weights are
//! downloaded. The hub client (`hub`) fetches a prefix with an HTTP Range request and asks for
//! more while this says the prefix ends inside the header.
//!
//! Written here, not through llama.cpp's reader: `gguf_init_from_file` wants the file on disk
//! and llama-cpp-2's `GgufContext` exposes neither arrays (per-layer KV heads) nor a way to
//! say "the prefix was too short, fetch N more bytes". The format is small (gguf.md in ggml);
//! the facts read here are checked against llama.cpp's own reading of the same file in
//! tests/it/models_hub.rs.

use crate::engine_worker::KvType;
pub use crate::engine_worker::model_size::AttentionShape;
use crate::engine_worker::model_size::{kv_bytes_per_cell, quantization_name};
use std::collections::BTreeMap;

/// Why a prefix could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The prefix ends inside the header; at least this many bytes are needed.
    #[error("the header continues past the first {have} bytes")]
    NeedMore { have: usize },
    #[error("{0}")]
    Invalid(String),
}

/// A metadata value as far as the facts need it: numbers, strings, and arrays by length
/// (with their integers kept when they are per-layer numbers).
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(i128),
    Float(f64),
    Bool(bool),
    Str(String),
    Array { len: u64, ints: Vec<i128> },
}

/// Arrays of integers up to this length keep their values (per-layer figures); longer ones
/// (token types) are skipped over.
const INT_ARRAY_KEPT_MAX: u64 = 1024;

/// No string or array in a model's header is this long (the largest, a vocabulary's token
/// list, is a few MB); a longer length is damage.
const LENGTH_MAX_BYTES: u64 = 256 << 20;

/// The most of a file read for its header.
const HEADER_READ_MAX_BYTES: u64 = 512 << 20;

/// The metadata key/value section of a GGUF file.
#[derive(Debug, Clone, PartialEq)]
pub struct GgufHeader {
    pub version: u32,
    pub tensor_count: u64,
    pub metadata: BTreeMap<String, Value>,
}

/// Reads the header from a file's first bytes.
pub fn parse_prefix(bytes: &[u8]) -> Result<GgufHeader, HeaderError> {
    let mut r = Reader { bytes, at: 0 };
    if r.take(4)? != b"GGUF" {
        return Err(HeaderError::Invalid(
            "not a GGUF file: it does not start with GGUF".into(),
        ));
    }
    let version = r.u32()?;
    if !(2..=3).contains(&version) {
        return Err(HeaderError::Invalid(format!(
            "GGUF version {version} (2 and 3 are read)"
        )));
    }
    let tensor_count = r.u64()?;
    let kv_count = r.u64()?;
    let mut metadata = BTreeMap::new();
    for _ in 0..kv_count {
        let key = r.string()?;
        let kind = r.u32()?;
        let value = r.value(kind)?;
        metadata.insert(key, value);
    }
    Ok(GgufHeader {
        version,
        tensor_count,
        metadata,
    })
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: u64) -> Result<&'a [u8], HeaderError> {
        if n > LENGTH_MAX_BYTES {
            // a damaged length: reading on would fetch or load the whole file for nothing
            return Err(HeaderError::Invalid(format!(
                "a length of {n} bytes in its header: not a model's header"
            )));
        }
        let end = usize::try_from(n)
            .ok()
            .and_then(|n| self.at.checked_add(n))
            .ok_or_else(|| HeaderError::Invalid(format!("a length of {n} bytes")))?;
        let got = self.bytes.get(self.at..end).ok_or(HeaderError::NeedMore {
            have: self.bytes.len(),
        })?;
        self.at = end;
        Ok(got)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], HeaderError> {
        Ok(self.take(N as u64)?.try_into().expect("took N bytes"))
    }

    fn u32(&mut self) -> Result<u32, HeaderError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, HeaderError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn string(&mut self) -> Result<String, HeaderError> {
        let len = self.u64()?;
        let bytes = self.take(len)?;
        String::from_utf8(bytes.to_vec())
            .map_err(|_| HeaderError::Invalid("a string that is not UTF-8".into()))
    }

    /// A scalar of GGUF type `kind` as an integer, or `None` for a non-integer type.
    fn int(&mut self, kind: u32) -> Result<Option<i128>, HeaderError> {
        Ok(Some(match kind {
            0 => i128::from(self.array::<1>()?[0]),
            1 => i128::from(i8::from_le_bytes(self.array()?)),
            2 => i128::from(u16::from_le_bytes(self.array()?)),
            3 => i128::from(i16::from_le_bytes(self.array()?)),
            4 => i128::from(self.u32()?),
            5 => i128::from(i32::from_le_bytes(self.array()?)),
            10 => i128::from(self.u64()?),
            11 => i128::from(i64::from_le_bytes(self.array()?)),
            _ => return Ok(None),
        }))
    }

    fn value(&mut self, kind: u32) -> Result<Value, HeaderError> {
        if let Some(i) = self.int(kind)? {
            return Ok(Value::Int(i));
        }
        Ok(match kind {
            6 => Value::Float(f64::from(f32::from_le_bytes(self.array()?))),
            12 => Value::Float(f64::from_le_bytes(self.array()?)),
            7 => Value::Bool(self.array::<1>()?[0] != 0),
            8 => Value::Str(self.string()?),
            9 => {
                let element = self.u32()?;
                let len = self.u64()?;
                let mut ints = Vec::new();
                for _ in 0..len {
                    match element {
                        8 => {
                            let n = self.u64()?;
                            self.take(n)?;
                        }
                        7 => {
                            self.take(1)?;
                        }
                        6 => {
                            self.take(4)?;
                        }
                        12 => {
                            self.take(8)?;
                        }
                        9 => return Err(HeaderError::Invalid("an array of arrays".into())),
                        _ => {
                            let i = self.int(element)?.ok_or_else(|| {
                                HeaderError::Invalid(format!("an array of type {element}"))
                            })?;
                            if len <= INT_ARRAY_KEPT_MAX {
                                ints.push(i);
                            }
                        }
                    }
                }
                Value::Array { len, ints }
            }
            other => return Err(HeaderError::Invalid(format!("a value of type {other}"))),
        })
    }
}

/// Reads the header of a GGUF on disk: its first MBs, more while the header continues.
pub fn read_file_facts(path: &std::path::Path) -> Result<HeaderFacts, String> {
    use std::io::Read;
    let what = |e: std::io::Error| format!("{}: {e}", path.display());
    let mut file = std::fs::File::open(path).map_err(what)?;
    let mut bytes = Vec::new();
    let mut want: u64 = 2 << 20;
    loop {
        let have = bytes.len() as u64;
        (&mut file)
            .take(want - have)
            .read_to_end(&mut bytes)
            .map_err(what)?;
        match parse_prefix(&bytes) {
            Ok(header) => return header.facts().map_err(|e| e.to_string()),
            Err(HeaderError::NeedMore { .. })
                if (bytes.len() as u64) == want && want < HEADER_READ_MAX_BYTES =>
            {
                want *= 4;
            }
            Err(HeaderError::NeedMore { have }) => {
                return Err(format!(
                    "{}: the file ends inside its GGUF header ({have} bytes)",
                    path.display()
                ));
            }
            Err(e) => return Err(format!("{}: {e}", path.display())),
        }
    }
}

/// What the header says a model is, as a download decision needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeaderFacts {
    pub architecture: String,
    pub name: Option<String>,
    /// llama.cpp's name of `general.file_type` (`Q4_K_M`), when it names one.
    pub quantization: Option<String>,
    pub layers: u32,
    /// The context it was trained for.
    pub context_length: u32,
    pub shape: AttentionShape,
    /// Tokens of the vocabulary (`tokenizer.ggml.tokens`) and the embedding's length: what
    /// llama.cpp's compute buffer is sized by ([`HeaderFacts::gpu_compute_bytes`]); 0 when
    /// the header does not say.
    pub vocab_size: u32,
    pub embedding_length: u32,
    pub chat_template: Option<String>,
    /// The tool-call family its template writes, as `discover::describe` names it.
    pub tool_calls: Option<String>,
    /// Split files: how many parts the model has (`split.count`), 1 when whole.
    pub split_count: u32,
}

impl HeaderFacts {
    /// The KV cache's bytes per token at `kv`.
    pub fn kv_bytes_per_token(&self, kv: KvType) -> u64 {
        kv_bytes_per_cell(self.shape, kv)
    }

    /// llama.cpp's compute buffer on a GPU, estimated ([`super::fit::compute_bytes`]).
    pub fn gpu_compute_bytes(&self) -> u64 {
        super::fit::compute_bytes(self.vocab_size, self.embedding_length)
    }
}

impl GgufHeader {
    fn get(&self, key: &str) -> Option<&Value> {
        self.metadata.get(key)
    }

    fn int(&self, key: &str) -> Option<i128> {
        match self.get(key)? {
            Value::Int(i) => Some(*i),
            _ => None,
        }
    }

    fn u32(&self, key: &str) -> Option<u32> {
        self.int(key).and_then(|i| u32::try_from(i).ok())
    }

    fn str(&self, key: &str) -> Option<&str> {
        match self.get(key)? {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }

    /// A per-layer figure stored as one number or an array (one per layer): the largest.
    fn per_layer_max(&self, key: &str) -> Option<u32> {
        match self.get(key)? {
            Value::Int(i) => u32::try_from(*i).ok(),
            Value::Array { ints, .. } => ints.iter().max().and_then(|i| u32::try_from(*i).ok()),
            _ => None,
        }
    }

    /// The facts, or what is missing that a model header must have.
    pub fn facts(&self) -> Result<HeaderFacts, HeaderError> {
        let missing = |key: String| HeaderError::Invalid(format!("its header has no {key}"));
        let architecture = self
            .str("general.architecture")
            .ok_or_else(|| missing("general.architecture".into()))?
            .to_owned();
        let key = |k: &str| format!("{architecture}.{k}");
        let layers = self
            .u32(&key("block_count"))
            .ok_or_else(|| missing(key("block_count")))?;
        let context_length = self
            .u32(&key("context_length"))
            .ok_or_else(|| missing(key("context_length")))?;
        let embedding = self.u32(&key("embedding_length"));
        let heads = self.per_layer_max(&key("attention.head_count"));
        let kv_heads = self
            .per_layer_max(&key("attention.head_count_kv"))
            .or(heads)
            .ok_or_else(|| missing(key("attention.head_count_kv")))?;
        // llama.cpp's default: the embedding split across the heads
        let head_size = embedding.zip(heads).and_then(|(e, h)| e.checked_div(h));
        let key_length = self
            .u32(&key("attention.key_length"))
            .or(head_size)
            .ok_or_else(|| missing(key("attention.key_length")))?;
        let value_length = self
            .u32(&key("attention.value_length"))
            .unwrap_or(key_length);
        let shape = AttentionShape {
            layers,
            kv_heads,
            key_length,
            value_length,
        };
        check_kv_size(&architecture, shape, context_length)?;
        let chat_template = self.str("tokenizer.chat_template").map(str::to_owned);
        let tool_calls = super::discover::tool_call_family(chat_template.as_deref());
        Ok(HeaderFacts {
            name: self.str("general.name").map(str::to_owned),
            quantization: self
                .u32("general.file_type")
                .and_then(quantization_name)
                .map(str::to_owned),
            layers,
            context_length,
            shape,
            vocab_size: match self.get("tokenizer.ggml.tokens") {
                Some(Value::Array { len, .. }) => u32::try_from(*len).unwrap_or(0),
                _ => 0,
            },
            embedding_length: embedding.unwrap_or(0),
            chat_template,
            tool_calls,
            split_count: self.u32("split.count").unwrap_or(1),
            architecture,
        })
    }
}

/// Refuses a shape whose KV cache does not fit 64 bits: the sizes shown and the fit multiply
/// these counts (`kv_bytes_per_cell`, then the context), and a product that wrapped would be
/// small and "fit". Worked out with checked arithmetic, in the order the sizes are: layers, KV
/// heads, a head's key and value lengths, the context; the field whose factor overflows is
/// named. 34 bytes for 32 values bounds every cache type's arithmetic (F16: 2 bytes a value;
/// Q8_0: values × 34 / 32).
fn check_kv_size(
    architecture: &str,
    shape: AttentionShape,
    context_length: u32,
) -> Result<(), HeaderError> {
    let overflow = |field: &str, value: u64| {
        HeaderError::Invalid(format!(
            "its header's {architecture}.{field} ({value}) makes the KV cache's size overflow 64 bits ({} layers × {} KV heads × {} + {} values a head × {context_length} tokens): not a model's header",
            shape.layers, shape.kv_heads, shape.key_length, shape.value_length
        ))
    };
    let lengths_field = "attention.key_length + value_length";
    let lengths = u64::from(shape.key_length) + u64::from(shape.value_length);
    // kv_bytes_per_cell adds the two lengths as u32
    if lengths > u64::from(u32::MAX) {
        return Err(overflow(lengths_field, lengths));
    }
    let factors = [
        ("block_count", u64::from(shape.layers)),
        ("attention.head_count_kv", u64::from(shape.kv_heads)),
        (lengths_field, lengths),
        ("context_length", u64::from(context_length)),
    ];
    factors
        .into_iter()
        .try_fold(34u64, |product, (field, factor)| {
            product
                .checked_mul(factor)
                .ok_or_else(|| overflow(field, factor))
        })
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A GGUF header with these metadata pairs (written by hand from gguf.md's layout).
    fn gguf(pairs: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
        let mut out = b"GGUF".to_vec();
        out.extend(3u32.to_le_bytes());
        out.extend(0u64.to_le_bytes());
        out.extend((pairs.len() as u64).to_le_bytes());
        for (key, kind, value) in pairs {
            out.extend((key.len() as u64).to_le_bytes());
            out.extend(key.as_bytes());
            out.extend(kind.to_le_bytes());
            out.extend(value);
        }
        out
    }

    fn string(s: &str) -> Vec<u8> {
        let mut v = (s.len() as u64).to_le_bytes().to_vec();
        v.extend(s.as_bytes());
        v
    }

    fn u32_array(values: &[u32]) -> Vec<u8> {
        let mut v = 4u32.to_le_bytes().to_vec();
        v.extend((values.len() as u64).to_le_bytes());
        for x in values {
            v.extend(x.to_le_bytes());
        }
        v
    }

    fn model(kv_heads: (u32, Vec<u8>)) -> Vec<u8> {
        gguf(&[
            ("general.architecture", 8, string("gemma3")),
            ("general.file_type", 4, 15u32.to_le_bytes().to_vec()),
            ("gemma3.block_count", 4, 4u32.to_le_bytes().to_vec()),
            ("gemma3.context_length", 4, 32768u32.to_le_bytes().to_vec()),
            ("gemma3.embedding_length", 4, 640u32.to_le_bytes().to_vec()),
            (
                "gemma3.attention.head_count",
                4,
                4u32.to_le_bytes().to_vec(),
            ),
            ("gemma3.attention.head_count_kv", kv_heads.0, kv_heads.1),
            (
                "gemma3.attention.key_length",
                4,
                256u32.to_le_bytes().to_vec(),
            ),
        ])
    }

    #[test]
    fn a_prefix_that_ends_inside_the_header_asks_for_more_and_the_whole_one_reads() {
        let bytes = model((4, 1u32.to_le_bytes().to_vec()));
        for cut in [3, 20, 30, bytes.len() - 1] {
            assert_eq!(
                parse_prefix(&bytes[..cut]),
                Err(HeaderError::NeedMore { have: cut }),
                "cut at {cut}"
            );
        }
        let facts = parse_prefix(&bytes).unwrap().facts().unwrap();
        assert_eq!(facts.architecture, "gemma3");
        assert_eq!(facts.quantization.as_deref(), Some("Q4_K_M"));
        assert_eq!(facts.context_length, 32768);
        // the value length defaults to the key's
        assert_eq!(
            facts.shape,
            AttentionShape {
                layers: 4,
                kv_heads: 1,
                key_length: 256,
                value_length: 256
            }
        );
        assert_eq!(facts.kv_bytes_per_token(KvType::F16), 4 * 512 * 2);
    }

    #[test]
    fn a_damaged_length_is_refused_rather_than_read_on() {
        // a string of 2^40 bytes: not "fetch more", which would read the whole file
        let mut bytes = gguf(&[]);
        bytes[16..24].copy_from_slice(&1u64.to_le_bytes());
        bytes.extend((1u64 << 40).to_le_bytes());
        assert!(matches!(parse_prefix(&bytes), Err(HeaderError::Invalid(_))));
    }

    /// Regression (#61 item 7): absurd counts made the KV cache's size wrap (here 2^22 layers ×
    /// 2^21 KV heads × 2^21 values a head × 2 bytes = 2^65: 0 once wrapped), so the fit said
    /// "fits"; in a debug build the multiplication panicked.
    #[test]
    fn counts_whose_kv_cache_overflows_64_bits_are_refused_naming_the_field() {
        let int = |v: u32| v.to_le_bytes().to_vec();
        let header = |layers: u32, kv_heads: u32, key: u32, value: u32, ctx: u32| {
            gguf(&[
                ("general.architecture", 8, string("llama")),
                ("llama.block_count", 4, int(layers)),
                ("llama.context_length", 4, int(ctx)),
                ("llama.attention.head_count", 4, int(kv_heads)),
                ("llama.attention.head_count_kv", 4, int(kv_heads)),
                ("llama.attention.key_length", 4, int(key)),
                ("llama.attention.value_length", 4, int(value)),
            ])
        };
        let refused = |bytes: Vec<u8>| parse_prefix(&bytes).unwrap().facts().unwrap_err();
        let err = refused(header(1 << 22, 1 << 21, 1 << 20, 1 << 20, 8192));
        assert_eq!(
            err.to_string(),
            "its header's llama.attention.key_length + value_length (2097152) makes the KV cache's size overflow 64 bits (4194304 layers × 2097152 KV heads × 1048576 + 1048576 values a head × 8192 tokens): not a model's header"
        );
        // the two lengths past a u32, which kv_bytes_per_cell adds
        let err = refused(header(1, 1, u32::MAX, 1, 8192));
        assert!(
            err.to_string()
                .starts_with("its header's llama.attention.key_length + value_length (4294967296)"),
            "{err}"
        );
        // a cell that fits, times a context that does not
        let err = refused(header(1 << 16, 1 << 16, 1 << 15, 1 << 15, u32::MAX));
        assert!(
            err.to_string()
                .starts_with("its header's llama.context_length (4294967295)"),
            "{err}"
        );
        // the largest real shapes are far from it
        let facts = parse_prefix(&header(128, 128, 256, 256, 1 << 20))
            .unwrap()
            .facts()
            .unwrap();
        assert_eq!(facts.kv_bytes_per_token(KvType::F16), 128 * 128 * 512 * 2);
    }

    #[test]
    fn kv_heads_given_per_layer_are_sized_by_the_largest() {
        let bytes = model((9, u32_array(&[1, 2, 0, 2])));
        let facts = parse_prefix(&bytes).unwrap().facts().unwrap();
        assert_eq!(facts.shape.kv_heads, 2);
    }

    #[test]
    fn a_file_that_is_not_gguf_or_lacks_the_shape_is_refused_by_name() {
        assert!(matches!(
            parse_prefix(b"PK\x03\x04 a zip file"),
            Err(HeaderError::Invalid(_))
        ));
        let bytes = gguf(&[("general.architecture", 8, string("llama"))]);
        let err = parse_prefix(&bytes).unwrap().facts().unwrap_err();
        assert_eq!(err.to_string(), "its header has no llama.block_count");
    }
}
