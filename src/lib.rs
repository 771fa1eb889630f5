//! Strata Desk: serve a local LLM to coding agents, and show live how the scheduler shares
//! the engine.
//!
//! The workspace's layers (docs/ARCHITECTURE.md): two crates below this one, which Cargo
//! keeps apart from tokio, llama.cpp and the UI, re-exported here under their module names:
//!
//! - [`protocol`] (crate `strata-protocol`, with [`ids`]): the host-worker contract: ids,
//!   JSON-lines messages, the worker's options, the simulated engine's vocabulary.
//! - [`scheduler`] (crate `strata-scheduler`): the pure rules of SCHEDULING.md: events in,
//!   actions out, `now` passed in; no I/O, no clock, no async. [imports only protocol's ids and cell pool]
//!
//! This crate's modules (dependency rules in brackets; `layer_rules` checks them, and
//! `layer_counts` the floors of docs/ARCHITECTURE.md: no import runs up one, no cycle runs
//! across folders):
//!
//! - [`machine`]: this machine's facts (RAM available, GPUs and their memory, the app's
//!   folders) and llama.cpp's start in this process (its backend modules, the host's backend).
//!   [the lowest floor: imports nothing of the crate]
//! - [`engine_worker`]: the child process that runs llama.cpp: one context, one unified KV
//!   pool, one sampler per request; steps of one prompt chunk plus one token per decoding
//!   sequence. [the only place that runs inference; imports the protocol, `grammar` and
//!   `machine`]
//! - [`engine`]: the host side: spawn the worker from this binary, handshake, deadlines, death
//!   detection, restart; one generation id per worker process. [no scheduler, no service]
//! - [`tokenizer`]: the same GGUF loaded vocab-only on the host. [with `grammar` and
//!   `machine`, the host's only use of llama-cpp-2]
//! - [`chat`]: chat template rendering (minijinja) with message text kept apart from markup,
//!   incremental UTF-8 decoding, output parsing. [imports nothing of the crate]
//! - [`upstream`]: an existing serving engine (llama-server, vLLM, SGLang) read from its own
//!   routes: its kind, its load, whether it has room, our priority in its direction.
//!   [imports nothing of the crate]
//! - [`grammar`]: JSON schemas and tool calls → llama.cpp grammars (GBNF) that constrain
//!   sampling.
//! - [`models`]: the default model, fetched with pip, checked by SHA-256, cached; the hub; the
//!   fit estimate. [below the control plane]
//! - [`config`]: the JSON config file and flags → a validated `Config`. [imports only the
//!   scheduler's settings, the protocol's engine settings and `machine::project_dirs`]
//! - [`metrics`]: Prometheus metrics (prometheus-client), recorded by the service.
//!   [imports only the scheduler's counters]
//! - [`service`]: the one async actor: owns the scheduler, the engine worker and each live
//!   request's response side; a cloneable handle; snapshots; re-exports the value types its
//!   callers name. [no HTTP, no window]
//! - [`api`]: axum routes, DTOs, validation, one error type mapped to HTTP in one place.
//!   [sees only the service handle and snapshot types]
//! - [`control`]: the control plane, the one owner of the settings in force: the engine unit
//!   (a service with its model's prompts) swapped whole by an apply, the live switches, the
//!   one rule that saves every change to the config file, the instance lock; the unit's making
//!   (config → the model's prompts and the engine launch, `control::making`) and the prompts
//!   themselves. The window, the tray, `--headless` and the HTTP routes all go through it.
//!   [no window, no server, no HTTP]
//! - [`server`]: the HTTP server over a control plane; how it stops. Both the window and
//!   `--headless` run it.
//! - [`generate`]: `strata-desk generate`, the simplest driver of the engine.
//! - [`bench`]: `strata-desk bench`, a load client for any OpenAI-compatible server.
//!   [HTTP only; imports nothing of the crate]
//! - [`gui`]: the desktop window (eframe/egui): panels over the service snapshot, commands
//!   drained once per frame, the settings view, the timeline, the tray. [sees only the service
//!   handle and snapshot types, and `server` to run its own]
//! - [`cli`]: the command line.
//! - [`console`]: on Windows, the terminal's console for a command-line run of this
//!   Windows-subsystem binary.
//!
//! `anyhow` is used only in `main.rs`; each module has its own error enum.

pub mod api;
pub mod bench;
pub mod chat;
pub mod cli;
pub mod config;
pub mod console;
pub mod control;
pub mod engine;
pub mod engine_worker;
pub mod generate;
pub mod grammar;
pub mod gui;
pub mod machine;
pub mod metrics;
pub mod models;
pub mod server;
pub mod service;
pub mod tokenizer;
pub mod upstream;

#[cfg(test)]
mod docs_facts;
#[cfg(test)]
mod layer_counts;
#[cfg(test)]
mod layer_rules;

// The two crates below are the layers a crate boundary can enforce; the app names them by
// their old module paths.
pub use strata_protocol as protocol;
pub use strata_protocol::ids;
pub use strata_scheduler as scheduler;
