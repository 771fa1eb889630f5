//! R12 live rollback.

use super::*;

#[test]
fn turning_solo_priority_off_resumes_the_parked_in_order_and_starts_no_new_pause() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(400));
    sim.arrive(Arrival::new(3, p(300, 3)).at(7.0).priority(9).output(200));
    // by 13 s: 1 paused at 5 s for 2, 2 paused at ~12 s for 3
    sim.event_at(13.0, Event::SettingsChanged(Box::default()));
    sim.arrive(Arrival::new(4, p(300, 4)).at(14.0).priority(50).output(5));
    sim.run(300.0);
    sim.check_end();
    let parks_before = sim
        .log
        .iter()
        .filter(|(t, a)| t.as_secs_f64() <= 13.0 && matches!(a, Action::Park { .. }))
        .count();
    assert_eq!(parks_before, 2);
    let parks_after = sim
        .log
        .iter()
        .filter(|(t, a)| t.as_secs_f64() > 13.0 && matches!(a, Action::Park { .. }))
        .count();
    assert_eq!(parks_after, 0, "no new pause after the rollback");
    // parked ones resume in order, ahead of the fresh higher priority
    let r1 = sim.pos(is_restore(1)).unwrap();
    let r2 = sim.pos(is_restore(2)).unwrap();
    assert!(r1 < r2 && r2 < sim.pos(is_assign(4)).unwrap());
    assert_eq!(sim.rec(1).delivered.len(), 400);
    assert_eq!(sim.rec(2).delivered.len(), 400);
}

#[test]
fn give_way_can_be_changed_at_run_time() {
    let mut sim = batch(2, 256);
    let off = SchedulerSettings {
        give_way: GiveWay::Off,
        ..SchedulerSettings::default()
    };
    sim.event_at(0.0, Event::SettingsChanged(Box::new(off)));
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.3).output(5));
    sim.event_at(2.0, Event::SettingsChanged(Box::default()));
    sim.arrive(Arrival::new(3, p(300, 3)).at(2.1).output(5));
    sim.run(100.0);
    sim.check_end();
    let first_of_2 = sim
        .time_of(
            |a| matches!(a, Action::Step(s) if s.chunk.as_ref().is_some_and(|c| c.request.0 == 2)),
        )
        .unwrap();
    assert!(first_of_2 >= 2.0, "gave way while off, at {first_of_2}");
    assert!(sim.first_chunk(2) < sim.last_chunk(1));
    assert!(sim.first_chunk(3) < sim.last_chunk(1));
}
