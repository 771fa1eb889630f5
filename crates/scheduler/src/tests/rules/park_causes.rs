//! The snapshot says why a request is parked and for whom, and when a decoding request may be
//! paused (the dashboard's and `/v1/scheduler`'s "why").

use super::*;
use crate::{ParkCause, ParkedView};

/// Runs in 10 ms steps until `id` is parked; its view then.
fn parked_view(sim: &mut Sim, id: u64, limit_secs: f64) -> ParkedView {
    let mut t = sim.now.as_secs_f64();
    while t < limit_secs {
        t += 0.01;
        sim.run(t);
        if let Some(v) = sim
            .s
            .snapshot(sim.now)
            .parked
            .into_iter()
            .find(|v| v.request_id.0 == id)
        {
            return v;
        }
    }
    panic!("{id} was never parked by {limit_secs} s");
}

#[test]
fn a_paused_stream_names_the_request_it_was_paused_for() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(40));
    let v = parked_view(&mut sim, 1, 20.0);
    assert_eq!(
        (v.cause, v.parked_for),
        (Some(ParkCause::Paused), Some(RequestId(2)))
    );
}

#[test]
fn a_read_that_gave_way_names_the_request_and_the_reason() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.3).output(20));
    let v = parked_view(&mut sim, 1, 10.0);
    assert_eq!(
        (v.cause, v.parked_for),
        (Some(ParkCause::GaveWayShorterLeft), Some(RequestId(2)))
    );

    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(3000, 2)).at(0.3).priority(5).output(20));
    let v = parked_view(&mut sim, 1, 10.0);
    assert_eq!(
        (v.cause, v.parked_for),
        (Some(ParkCause::GaveWayHigherPriority), Some(RequestId(2)))
    );
}

#[test]
fn a_decode_parked_for_cells_says_the_pool_was_full() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).priority(5).output(400));
    let v = parked_view(&mut sim, 1, 100.0);
    assert_eq!((v.cause, v.parked_for), (Some(ParkCause::KvPoolFull), None));
}

#[test]
fn a_decoding_stream_counts_down_to_its_quantum_only_with_solo_priority() {
    for solo_priority in [true, false] {
        let mut sim = solo(256, solo_priority);
        sim.arrive(Arrival::new(1, p(300, 1)).output(400));
        sim.run(2.0);
        let slot = &sim.s.snapshot(sim.now).slots[0];
        assert_eq!(slot.effective_priority, Some(0));
        let ran = slot.run_secs;
        assert!((ran - sim.now.as_secs_f64()).abs() < 1e-9, "ran {ran}");
        match slot.pausable_in_secs {
            Some(left) if solo_priority => {
                // the 5 s quantum counts from the slot, taken at 0 s
                assert!((left - (5.0 - ran)).abs() < 1e-9, "{left}");
            }
            None if !solo_priority => {}
            other => panic!("solo_priority {solo_priority}: {other:?}"),
        }
        sim.run(6.0);
        let slot = &sim.s.snapshot(sim.now).slots[0];
        if solo_priority {
            assert_eq!(slot.pausable_in_secs, Some(0.0));
        }
    }
}

#[test]
fn a_stream_being_cancelled_shows_no_pause_countdown() {
    // Regression: the countdown restated R7's guard without `cancel_pending`, so a stream
    // ending at the next boundary showed "pausable in 0 s", a pause that never comes.
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.run(6.0);
    assert_eq!(sim.s.snapshot(sim.now).slots[0].pausable_in_secs, Some(0.0));
    let _ = sim
        .s
        .handle(Event::Cancelled(crate::ids::RequestId(1)), sim.now);
    assert_eq!(sim.s.snapshot(sim.now).slots[0].pausable_in_secs, None);
}
