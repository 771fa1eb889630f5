//! Identifier types shared by every module (the only thing `scheduler` and `protocol` may
//! import from the rest of the crate).

use serde::{Deserialize, Serialize};
use std::fmt;

/// A token id in the model's vocabulary (llama.cpp's `llama_token`).
pub type TokenId = i32;

/// One client request, unique for the life of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct RequestId(pub u64);

impl fmt::Display for RequestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "req-{}", self.0)
    }
}

/// An engine sequence (a slot, or a spare sequence used for parking), `0..slots`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(transparent)]
pub struct SeqId(pub u32);

impl fmt::Display for SeqId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "seq-{}", self.0)
    }
}
