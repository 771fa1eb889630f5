//! R5 no deadlock.

use super::*;

#[test]
fn a_request_waiting_for_a_slot_never_holds_the_lane() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(3000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(3000, 2)).at(0.25).output(5));
    sim.arrive(Arrival::new(3, p(100, 3)).at(0.5).output(5));
    sim.run(100.0);
    sim.check_end(); // every chunk went to the holder of its slot
    for id in 1..=3 {
        assert!(!sim.rec(id).lane_without_slot);
    }
}
