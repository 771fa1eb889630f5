//! R8 a pause loses nothing.

use super::*;

#[test]
fn a_pause_loses_nothing_and_resumes_from_the_exact_tokens() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(700, 1)).output(600));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(30));
    sim.arrive(Arrival::new(3, p(300, 3)).at(12.0).priority(5).output(30));
    sim.run(300.0);
    sim.check_end(); // delivered == sampled in order, KV continuous across park/restore
    assert_eq!(sim.rec(1).delivered.len(), 600);
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.pauses, c.resumes, c.processed_prefix_losses), (2, 2, 0));
    assert_eq!(sim.prefix_losses, 0);
}
