//! R4 no instant re-grab.

use super::*;

#[test]
fn a_read_that_gave_way_queues_behind_equals_that_were_waiting_for_the_lane() {
    let mut sim = batch(3, 256);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(5000, 2)).at(0.1).output(5));
    sim.arrive(Arrival::new(3, p(200, 3)).at(0.3).output(5));
    sim.run(100.0);
    sim.check_end();
    let chunks = sim.chunks();
    let after_short = sim.first_chunk(3) + 1;
    assert_eq!(chunks[after_short].0, 2, "no instant re-grab by request 1");
}
