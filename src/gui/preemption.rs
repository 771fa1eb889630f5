//! The one Preemption switch over the two expert switches: off sets `solo_priority` and
//! `give_way` off (no stream is paused, no read gives way); on sets `solo_priority` on (solo
//! mode only: batch mode never pauses, so there it governs `give_way` alone) and `give_way`
//! back to what it was before it was switched off (`left` when nothing was seen). The window
//! and the tray each remember that value from the snapshots they see, so both agree without
//! sharing state; after an app restart with `give_way` off it is `left` again.

use crate::service::{GiveWay, ServiceSnapshot, SettingsChange};

/// What the switch shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preemption {
    On,
    Off,
    /// One of the two is on (an expert setting): shown as neither.
    Partly,
}

/// The switch's state for a snapshot.
pub fn preemption_of(s: &ServiceSnapshot) -> Preemption {
    let gives_way = s.give_way != GiveWay::Off;
    if s.engine.parallel >= 2 {
        return if gives_way {
            Preemption::On
        } else {
            Preemption::Off
        };
    }
    match (s.solo_priority, gives_way) {
        (true, true) => Preemption::On,
        (false, false) => Preemption::Off,
        _ => Preemption::Partly,
    }
}

/// The live-settings change that switches preemption `on` or off; `batch` when the engine
/// serves two or more slots (no `solo_priority` there).
pub fn preemption_change(on: bool, batch: bool, restore: GiveWay) -> SettingsChange {
    let restore = if restore == GiveWay::Off {
        GiveWay::Left
    } else {
        restore
    };
    SettingsChange {
        solo_priority: (!batch).then_some(on),
        give_way: Some(if on { restore } else { GiveWay::Off }),
    }
}

/// The `give_way` to put back when preemption is switched on: the last one seen that was on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveWayMemory(GiveWay);

impl Default for GiveWayMemory {
    fn default() -> Self {
        Self(GiveWay::Left)
    }
}

impl GiveWayMemory {
    pub fn observe(&mut self, s: &ServiceSnapshot) {
        if s.give_way != GiveWay::Off {
            self.0 = s.give_way;
        }
    }

    pub fn restore(self) -> GiveWay {
        self.0
    }
}

/// The switch's tooltip: what happens to a parked stream when it is switched off.
pub const PREEMPTION_TOOLTIP: &str = "On: a short, higher-priority request may pause a long \
stream (solo mode, after its quantum) and a long prompt read gives way at a chunk boundary. \
Off: requests run in turn and nothing is interrupted; a stream already parked resumes first, \
with nothing lost.";

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
    fn off_turns_both_switches_off_and_on_puts_give_way_back() {
        let off = preemption_change(false, false, GiveWay::Whole);
        assert_eq!(
            (off.solo_priority, off.give_way),
            (Some(false), Some(GiveWay::Off))
        );
        let on = preemption_change(true, false, GiveWay::Whole);
        assert_eq!(
            (on.solo_priority, on.give_way),
            (Some(true), Some(GiveWay::Whole))
        );
        let on = preemption_change(true, false, GiveWay::Off);
        assert_eq!(on.give_way, Some(GiveWay::Left), "never back to off");
    }

    #[test]
    fn in_batch_mode_the_switch_governs_give_way_alone() {
        let on = preemption_change(true, true, GiveWay::Left);
        assert_eq!((on.solo_priority, on.give_way), (None, Some(GiveWay::Left)));
        assert_eq!(
            preemption_of(&snapshot(false, GiveWay::Left, 2)),
            Preemption::On
        );
        assert_eq!(
            preemption_of(&snapshot(false, GiveWay::Off, 2)),
            Preemption::Off
        );
    }

    #[test]
    fn the_switch_shows_on_off_or_partly_from_the_two_settings() {
        assert_eq!(
            preemption_of(&snapshot(true, GiveWay::Left, 1)),
            Preemption::On
        );
        assert_eq!(
            preemption_of(&snapshot(false, GiveWay::Off, 1)),
            Preemption::Off
        );
        assert_eq!(
            preemption_of(&snapshot(false, GiveWay::Left, 1)),
            Preemption::Partly
        );
    }

    #[test]
    fn the_memory_keeps_the_last_give_way_that_was_on() {
        let mut memory = GiveWayMemory::default();
        assert_eq!(memory.restore(), GiveWay::Left);
        memory.observe(&snapshot(true, GiveWay::Whole, 1));
        memory.observe(&snapshot(false, GiveWay::Off, 1));
        assert_eq!(memory.restore(), GiveWay::Whole);
    }
}
