//! The one integration-test binary (each extra `tests/*.rs` would link the whole stack again).
//! Real-model tests take the `support::real_model()` lock: they share two cores.

mod cli;
mod engine_real;
mod support;
