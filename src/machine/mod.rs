//! This machine, as the app and its engine worker see it: its memory ([`ram_available_bytes`]),
//! its GPUs ([`gpus`], [`gpu_memory`]), the app's folders on it ([`project_dirs`]), and
//! llama.cpp's start in this process: its backend modules ([`modules`]: which CPU code runs
//! here) and its backend ([`backend`]).
//!
//! The lowest floor of the app (docs/ARCHITECTURE.md): it imports nothing of the crate, so
//! everything that asks about the machine (`engine_worker`, `models`, `tokenizer`, `engine`,
//! `config`) asks downwards, and none of them has to ask another.

mod llama;
mod memory;
pub mod modules;

pub use llama::{backend, gpu_memory, gpus};
pub use memory::ram_available_bytes;

/// The project's directories (config, data) on this platform.
pub fn project_dirs() -> Option<directories::ProjectDirs> {
    directories::ProjectDirs::from("dev", "strata", "strata-desk")
}
