//! An existing serving engine (llama-server, vLLM, SGLang) that Strata Desk's scheduler can sit
//! in front of (issue #65, "Beyond one machine"): which kind a server is, found from its own
//! routes ([`detect_kind`]); how busy it is, read from its `/metrics` and llama-server's
//! `/slots` ([`UpstreamLoad`]); whether it has room for one more request ([`has_room`]); and
//! our priority in its direction ([`upstream_priority`]).
//!
//! These are the upstream engine's readings, pure functions over what the routes answered;
//! the worker's upstream backend (`engine_worker::upstream_engine`, docs/ARCHITECTURE.md, "An
//! upstream engine") finds its upstream's kind with them. Each reading names the engine version whose
//! routes and metric names it was written from; `tests/fixtures/upstream/` holds what those
//! versions answer (captured from llama-server, assembled from vLLM's and SGLang's source).
//! [imports nothing of the crate]

mod kind;
mod load;
mod prometheus_text;

pub use kind::{Probes, UpstreamKind, detect_kind};
pub use load::{DispatchLimits, SlotState, UpstreamLoad, has_room, parse_slots, upstream_priority};
pub use prometheus_text::{PrometheusSample, parse_prometheus_text};
