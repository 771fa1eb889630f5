//! Strata Desk: serve a local LLM to coding agents, and show live how the scheduler shares
//! the engine.
//!
//! The crate map (dependency rules in brackets):
//!
//! - [`ids`]: identifier types shared by every module.
//! - [`protocol`]: the typed, versioned JSON-lines messages between the host and the engine
//!   worker process. [imports only `ids`]
//! - [`engine_worker`]: the child process that runs llama.cpp: one context, one unified KV
//!   pool, one sampler per request; steps of one prompt chunk plus one token per decoding
//!   sequence. [the only place that runs inference]
//! - [`engine`]: the host side: spawn the worker from this binary, handshake, deadlines, death
//!   detection, restart; one generation id per worker process.
//! - [`tokenizer`]: the same GGUF loaded vocab-only on the host. [with `grammar`, the host's
//!   only use of llama-cpp-2]
//! - [`chat`]: chat template rendering (minijinja) with message text kept apart from markup,
//!   incremental UTF-8 decoding.
//! - [`grammar`]: JSON schemas and tool calls → llama.cpp grammars (GBNF) that constrain
//!   sampling.
//! - [`models`]: the default model, fetched with pip, checked by SHA-256, cached.
//! - [`scheduler`]: the pure rules of SCHEDULING.md: events in, actions out, `now` passed in;
//!   no I/O, no clock, no async. [imports only `ids`]
//! - [`config`]: the JSON config file and flags → a validated `Config`. [imports only the
//!   scheduler's settings and `models::project_dirs`]
//! - [`metrics`]: Prometheus metrics (prometheus-client), recorded by the service.
//!   [imports only the scheduler's counters]
//! - [`service`]: the one async actor: owns the scheduler, the engine worker and each live
//!   request's response side; a cloneable handle; snapshots.
//! - [`api`]: axum routes, DTOs, validation, one error type mapped to HTTP in one place.
//!   [sees only the service handle and snapshot types]
//! - [`generate`]: `strata-desk generate`, the simplest driver of the engine.
//! - [`bench`]: `strata-desk bench`, a load client for any OpenAI-compatible server.
//!   [HTTP only; imports nothing of the crate]
//! - [`gui`]: the desktop window (eframe/egui): panels over the service snapshot, commands
//!   drained once per frame, the settings view, the timeline, the tray. [panels see only the
//!   service handle and snapshot types; `gui::host`, the app's own server, starts it from the
//!   config through `headless` as `main` does for `--headless`]
//! - [`headless`]: `--headless`: config → engine launch, service, HTTP server; signals.
//! - [`cli`]: the command line.
//!
//! `anyhow` is used only in `main.rs`; each module has its own error enum.

pub mod api;
pub mod bench;
pub mod chat;
pub mod cli;
pub mod config;
pub mod engine;
pub mod engine_worker;
pub mod generate;
pub mod grammar;
pub mod gui;
pub mod headless;
pub mod ids;
pub mod metrics;
pub mod models;
pub mod protocol;
pub mod scheduler;
pub mod service;
pub mod tokenizer;
