//! R2 read lane.

use super::*;

#[test]
fn the_lane_goes_to_the_highest_priority_slot_holder() {
    let mut sim = batch(3, 256);
    sim.arrive(Arrival::new(1, p(1000, 1)).priority(9).output(5)); // reads first, never gives way to lower
    sim.arrive(Arrival::new(2, p(2000, 2)).at(0.1).output(5));
    sim.arrive(Arrival::new(3, p(2000, 3)).at(0.2).priority(5).output(5));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.chunks()[sim.last_chunk(1) + 1].0, 3);
    assert!(sim.last_chunk(3) < sim.first_chunk(2));
}

#[test]
fn the_reader_keeps_the_lane_against_equals() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(2000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(2000, 2)).at(0.1).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 0);
}
