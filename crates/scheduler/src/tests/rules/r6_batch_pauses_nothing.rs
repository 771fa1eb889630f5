//! R6 batch mode pauses nothing.

use super::*;

#[test]
fn batch_mode_never_pauses_a_decoding_request() {
    let mut sim = batch(2, 256);
    // `solo_priority` cannot be set in batch mode (a configuration error; a later engine with
    // `parallel` 2 turns it off); forced on here, R7's mode guard alone keeps it from pausing.
    // Audit: with it off, the guard was never reached.
    sim.s.settings.solo_priority = true;
    sim.arrive(Arrival::new(1, p(300, 1)).output(300));
    sim.arrive(Arrival::new(2, p(300, 2)).output(300));
    sim.arrive(Arrival::new(3, p(100, 3)).at(6.0).priority(100).output(5));
    sim.run(200.0);
    sim.check_end();
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
    assert!(sim.rec(3).first_assign.unwrap().as_secs_f64() > 15.0);
}

/// A decode parked to host RAM because the pool is full takes nothing else with it: the
/// reader keeps the lane (with `yields_max` 0 it never gives way, even to a higher priority).
#[test]
fn a_kv_park_of_a_decode_leaves_the_read_lane_with_its_holder() {
    let mut f = facts(3, 256);
    // 10,008 (the reader) + 308 (the one waiting for the lane) + 34 (the decode's first
    // shares): the decode's fourth share finds no cell
    f.kv_cells_total = 10_008 + 308 + 34;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        yields_max: 0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(10, 1)).output(1000));
    sim.arrive(Arrival::new(2, p(10_000, 2)).at(0.1).priority(1).output(5));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).priority(1).output(5));
    sim.event_at(
        0.5,
        Event::Reprioritised {
            request: RequestId(3),
            priority: 2,
        },
    );
    sim.run(300.0);
    sim.check_end();
    let parked = sim
        .time_of(is_park(1))
        .expect("the decode was never parked");
    let chunks = sim.chunks();
    let read_ends = sim
        .log
        .iter()
        .find_map(|(t, a)| match a {
            Action::Step(s)
                if s.chunk
                    .as_ref()
                    .is_some_and(|c| c.request.0 == 2 && c.is_last) =>
            {
                Some(t.as_secs_f64())
            }
            _ => None,
        })
        .unwrap();
    assert!(
        parked < read_ends,
        "parked at {parked}, the read ended at {read_ends}"
    );
    assert_eq!(sim.s.snapshot(sim.now).counters.kv_parks, 1);
    assert!(
        sim.last_chunk(2) < sim.first_chunk(3),
        "{:?}",
        &chunks[..chunks.len().min(60)]
    );
}
