//! The lifecycle tables: every transition goes through one checked function.

use crate::ParkPlace;
use crate::ids::{RequestId, SeqId};
use crate::lifecycle::{ParkedKind, Phase, SlotState, phase_transition_ok, slot_transition_ok};

#[test]
fn legal_request_transitions_follow_the_lifecycle() {
    let seq = SeqId(0);
    let read = Phase::Reading { seq, read_to: 10 };
    let parked_read = Phase::Parked {
        place: ParkPlace::HostRam,
        kind: ParkedKind::Read { read_to: 10 },
    };
    let parked_decode = Phase::Parked {
        place: ParkPlace::HostRam,
        kind: ParkedKind::Decode,
    };
    assert!(phase_transition_ok(&Phase::Waiting, &read));
    assert!(phase_transition_ok(&read, &Phase::Decoding { seq }));
    assert!(phase_transition_ok(&read, &parked_read));
    assert!(phase_transition_ok(&parked_read, &read));
    assert!(phase_transition_ok(
        &Phase::Decoding { seq },
        &parked_decode
    ));
    assert!(phase_transition_ok(
        &parked_decode,
        &Phase::Decoding { seq }
    ));
    for p in [
        &Phase::Waiting,
        &read,
        &parked_read,
        &Phase::Decoding { seq },
    ] {
        assert!(phase_transition_ok(p, &Phase::Ended));
    }
}

#[test]
fn illegal_request_transitions_are_refused() {
    let seq = SeqId(0);
    let parked_read = Phase::Parked {
        place: ParkPlace::HostRam,
        kind: ParkedKind::Read { read_to: 10 },
    };
    // skipping the read, reading backwards, changing slot mid-read, resuming elsewhere
    assert!(!phase_transition_ok(
        &Phase::Waiting,
        &Phase::Decoding { seq }
    ));
    assert!(!phase_transition_ok(
        &Phase::Reading { seq, read_to: 10 },
        &Phase::Reading { seq, read_to: 5 }
    ));
    assert!(!phase_transition_ok(
        &Phase::Reading { seq, read_to: 10 },
        &Phase::Reading {
            seq: SeqId(1),
            read_to: 20
        }
    ));
    assert!(!phase_transition_ok(
        &parked_read,
        &Phase::Reading { seq, read_to: 0 }
    ));
    assert!(!phase_transition_ok(&parked_read, &Phase::Decoding { seq }));
    assert!(!phase_transition_ok(
        &Phase::Decoding { seq },
        &Phase::Waiting
    ));
    assert!(!phase_transition_ok(&Phase::Ended, &Phase::Waiting));
    assert!(!phase_transition_ok(&Phase::Waiting, &parked_read));
}

#[test]
fn slot_transitions_never_hand_a_busy_slot_to_another_request() {
    let busy = SlotState::Busy {
        request: RequestId(1),
    };
    assert!(slot_transition_ok(&SlotState::Empty, &busy));
    assert!(slot_transition_ok(&busy, &SlotState::Empty));
    assert!(!slot_transition_ok(
        &busy,
        &SlotState::Busy {
            request: RequestId(2)
        }
    ));
    assert!(!slot_transition_ok(&SlotState::Empty, &SlotState::Empty));
}

/// A scheduler with request 1 admitted (it is reading).
fn one_waiting() -> crate::Scheduler {
    let mut s = crate::Scheduler::new(
        crate::SchedulerSettings::default(),
        super::sim::facts(1, 256),
    )
    .unwrap();
    let _ = s.admit(
        crate::NewRequest {
            id: RequestId(1),
            prompt: vec![5; 10],
            priority: 0,
            priority_given: false,
            max_tokens: None,
        },
        std::time::Duration::ZERO,
    );
    s
}

#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "illegal transition")]
fn an_illegal_transition_panics_in_debug_builds() {
    one_waiting().set_phase(RequestId(1), Phase::Waiting);
}

#[test]
#[cfg(not(debug_assertions))]
fn an_illegal_transition_is_refused_with_a_diagnostic_in_release_builds() {
    let mut s = one_waiting();
    let before = s.request_state(RequestId(1));
    assert_eq!(before, Some(crate::RequestStatus::Reading));
    // reading → waiting is not a legal transition
    assert!(!s.set_phase(RequestId(1), Phase::Waiting));
    assert_eq!(s.request_state(RequestId(1)), before);
    let diagnostics = s
        .handle(crate::Event::Tick, std::time::Duration::ZERO)
        .diagnostics;
    assert!(
        diagnostics.iter().any(|d| d.contains("illegal transition")),
        "{diagnostics:?}"
    );
}
