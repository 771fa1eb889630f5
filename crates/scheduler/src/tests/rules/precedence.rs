//! Precedence at each step boundary, one test per line.

use super::*;

/// Two slots, both decoding, one request waiting: a cancel of a decoder waits for the step's
/// end; at that boundary its slot is freed first, so the waiting request takes it in the same
/// pass (no step in between). Audit: with one slot this held whatever the order.
#[test]
fn precedence_1_what_must_end_ends_before_a_slot_is_filled() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(200));
    sim.arrive(Arrival::new(2, p(300, 2)).output(200));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).output(5));
    sim.cancel_at(2.0, 1);
    sim.run(100.0);
    sim.check_end();
    let release = sim.pos(is_release(1)).unwrap();
    let assign = sim.pos(is_assign(3)).unwrap();
    assert!(release < assign);
    let steps_between = sim.log[release..assign]
        .iter()
        .filter(|(_, a)| matches!(a, Action::Step(_)))
        .count();
    assert_eq!(steps_between, 0, "the freed slot was filled a step late");
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Cancelled));
}

#[test]
fn precedence_2_a_pause_comes_before_the_slot_is_filled_and_nothing_else_is_paused() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    assert!(sim.pos(is_park(1)).unwrap() < sim.pos(is_assign(2)).unwrap());
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 1);
    // without solo_priority, nothing running is paused
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
}

#[test]
fn precedence_3_free_slots_are_filled_highest_effective_priority_first() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(100));
    sim.arrive(Arrival::new(2, p(300, 2)).output(120));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).priority(1).output(5));
    sim.arrive(Arrival::new(4, p(300, 4)).at(0.2).priority(7).output(5));
    sim.arrive(Arrival::new(5, p(300, 5)).at(0.3).priority(3).output(5));
    sim.run(100.0);
    sim.check_end();
    let order: Vec<usize> = [4, 5, 3]
        .iter()
        .map(|id| sim.pos(is_assign(*id)).unwrap())
        .collect();
    assert!(order[0] < order[1] && order[1] < order[2], "{order:?}");
}

#[test]
fn precedence_4_the_lane_goes_only_to_slot_holders_and_the_reader_keeps_it() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(3000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(3000, 2)).at(0.1).output(5));
    sim.arrive(Arrival::new(3, p(200, 3)).at(0.3).priority(9).output(5)); // no slot: cannot take the lane
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
    assert!(sim.first_chunk(3) > sim.last_chunk(1));
    assert!(!sim.rec(3).lane_without_slot);
}

#[test]
fn precedence_5_a_step_is_one_chunk_on_absolute_boundaries_plus_a_token_per_decoder() {
    let mut sim = batch(3, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(50));
    sim.arrive(Arrival::new(2, p(300, 2)).output(50));
    sim.arrive(Arrival::new(3, p(1000, 3)).at(0.5).output(5));
    sim.run(100.0);
    sim.check_end();
    let mixed = sim.log.iter().any(|(_, a)| {
        matches!(a, Action::Step(s) if s.chunk.as_ref().is_some_and(|c| c.request.0 == 3) && s.decode.len() == 2)
    });
    assert!(mixed, "a chunk rides with the decodes");
    for (_, r) in sim.chunks() {
        assert!(r.end % 256 == 0 || r.end == 300 || r.end == 1000, "{r:?}");
    }
}
