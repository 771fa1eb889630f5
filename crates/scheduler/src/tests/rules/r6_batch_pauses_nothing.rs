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
