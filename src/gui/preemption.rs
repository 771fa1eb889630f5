//! The rollback switch and its neighbour. The Preemption switch is `solo_priority` itself: two
//! states, one click from either, the same as the tray's item and `PATCH /v1/settings
//! {"solo_priority": ...}`. Off at any moment loses nothing: a parked stream resumes as R12
//! says. In batch mode (`parallel` ≥ 2), where `solo_priority` does not apply, it is shown
//! disabled with the reason. `give_way` has its own plainly named switch beside it ("Long
//! reads give way to short requests"): off, or back to the last value it had that was on
//! (`left` when none was seen).

use super::commands::Command;
use crate::service::{GiveWay, ServiceSnapshot};

/// What the Preemption switch shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preemption {
    On,
    Off,
    /// `parallel` ≥ 2: nothing is paused, the switch does not apply.
    Batch,
}

/// The switch's state for a snapshot.
pub fn preemption_of(s: &ServiceSnapshot) -> Preemption {
    if s.engine.parallel >= 2 {
        Preemption::Batch
    } else if s.solo_priority {
        Preemption::On
    } else {
        Preemption::Off
    }
}

/// What a click on the switch sends: the opposite of what it shows (none in batch mode).
pub fn preemption_click(s: &ServiceSnapshot) -> Option<Command> {
    match preemption_of(s) {
        Preemption::On => Some(Command::SetSoloPriority(false)),
        Preemption::Off => Some(Command::SetSoloPriority(true)),
        Preemption::Batch => None,
    }
}

/// What a click on the give-way switch sends: giving way turned off, or back on (the control
/// plane keeps which `give_way` that restores, for the window and the tray alike).
pub fn give_way_click(s: &ServiceSnapshot) -> Command {
    Command::SetGivingWay(s.give_way == GiveWay::Off)
}

/// The switch's label in each state.
pub const PREEMPTION_ON: &str = "Preemption: on (short requests may interrupt long ones)";
pub const PREEMPTION_OFF: &str = "Preemption: off (requests run in turn, nothing is interrupted)";
pub const PREEMPTION_BATCH: &str = "Preemption: does not apply in batch mode";

/// The switch's label for a state.
pub fn preemption_label(state: Preemption) -> &'static str {
    match state {
        Preemption::On => PREEMPTION_ON,
        Preemption::Off => PREEMPTION_OFF,
        Preemption::Batch => PREEMPTION_BATCH,
    }
}

/// The switch's tooltip: what happens to a parked stream when it is switched off.
pub const PREEMPTION_TOOLTIP: &str = "solo_priority. On: a short or higher-priority request may \
pause a long stream (after its quantum); the stream resumes where it stopped, nothing lost. Off: \
no stream is paused; a stream already parked resumes when the request it was paused for ends.";

/// The give-way switch's label and tooltip.
pub const GIVE_WAY_LABEL: &str = "Long reads give way to short requests";
pub const GIVE_WAY_TOOLTIP: &str = "give_way. On: a long prompt read lets a shorter or \
higher-priority request go first at a chunk boundary (nothing read is lost). Off: a read runs \
to its end once started.";

/// Why the switch is disabled in batch mode.
pub const BATCH_REASON: &str = "batch mode (parallel >= 2): several requests run together and \
none is paused, so solo_priority does not apply";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::service::SchedulerSettings;

    fn snapshot(solo_priority: bool, give_way: GiveWay, parallel: u32) -> ServiceSnapshot {
        let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), parallel, true);
        s.solo_priority = solo_priority;
        s.give_way = give_way;
        s
    }

    #[test]
    fn one_click_turns_solo_priority_off_from_every_state_and_leaves_give_way_alone() {
        for give_way in [GiveWay::Off, GiveWay::Left, GiveWay::Whole] {
            assert_eq!(
                preemption_click(&snapshot(true, give_way, 1)),
                Some(Command::SetSoloPriority(false))
            );
            assert_eq!(
                preemption_click(&snapshot(false, give_way, 1)),
                Some(Command::SetSoloPriority(true)),
                "off shows off: a click turns it on"
            );
        }
    }

    #[test]
    fn in_batch_mode_the_switch_does_nothing() {
        assert_eq!(
            preemption_of(&snapshot(false, GiveWay::Left, 2)),
            Preemption::Batch
        );
        assert_eq!(preemption_click(&snapshot(false, GiveWay::Left, 2)), None);
    }

    /// The switch asks the control plane to turn giving way on or off; which `give_way`
    /// comes back is the control plane's (one memory for the window and the tray).
    #[test]
    fn the_give_way_switch_asks_for_giving_way_on_or_off() {
        assert_eq!(
            give_way_click(&snapshot(false, GiveWay::Off, 1)),
            Command::SetGivingWay(true)
        );
        for on in [GiveWay::Left, GiveWay::Whole] {
            assert_eq!(
                give_way_click(&snapshot(true, on, 1)),
                Command::SetGivingWay(false)
            );
        }
    }
}
