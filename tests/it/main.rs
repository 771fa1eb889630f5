//! The one integration-test binary (each extra `tests/*.rs` would link the whole stack again).
//! Real-model tests take the `support::real_model()` lock: they share two cores.

// The serial lock is held across awaits on purpose: each `#[tokio::test]` has its own runtime
// on its own thread, so holding it blocks only other tests, which is its job.
#![allow(clippy::await_holding_lock)]

mod agent_fixtures;
mod api_access;
mod api_agents;
mod api_bounds;
mod api_control;
mod api_cost;
mod api_disconnect;
mod api_drift;
mod api_fake;
mod api_families;
mod api_faults;
mod api_fim;
mod api_grammar_build;
mod api_load;
mod api_messages;
mod api_observe;
mod api_observed;
mod api_pipeline;
mod api_real;
mod api_requests;
mod api_room;
mod api_schemas;
mod api_tools;
mod api_validation;
mod bench;
mod chat_corpus;
mod cli;
mod control;
mod cpu_variants;
mod engine_exact;
mod engine_fake;
mod engine_park;
mod engine_real;
mod fake_hub;
mod fault_every_message;
mod grammar_real;
mod gui;
mod gui_apply;
mod gui_layout;
mod hostile_hub;
mod lifecycle;
mod models_found;
mod models_hub;
mod models_hub_bounds;
mod models_hub_faults;
mod models_hub_hostile;
mod platform;
mod recurrent_checkpoints;
mod rollback;
mod room_real;
#[cfg(target_os = "linux")]
mod second_start;
mod settings_every_key;
mod sliding_window;
mod sliding_window_checkpoints;
mod support;
mod upstream_real;
mod upstream_scenarios;
