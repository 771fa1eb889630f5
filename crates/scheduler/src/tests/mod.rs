//! Scenario tests (one per rule and per precedence line), the seeds in virtual time, and
//! seeded randomized invariants, all driven by `sim`, a fake engine in virtual time.

mod invariants;
mod lifecycle;
mod rules;
mod seeds;
mod settings;
mod sim;
mod solo_preemption;

use super::{EngineFacts, SchedulerSettings};
use sim::Sim;

/// Batch mode (`parallel` ≥ 2) with default settings.
fn batch(parallel: u32, chunk: u32) -> Sim {
    Sim::new(SchedulerSettings::default(), sim::facts(parallel, chunk))
}

/// Solo mode, optionally with solo_priority.
fn solo(chunk: u32, solo_priority: bool) -> Sim {
    let s = SchedulerSettings {
        solo_priority,
        ..SchedulerSettings::default()
    };
    Sim::new(s, sim::facts(1, chunk))
}

fn with(settings: SchedulerSettings, facts: EngineFacts) -> Sim {
    Sim::new(settings, facts)
}
