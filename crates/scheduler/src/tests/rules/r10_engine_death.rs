//! R10 engine death.

use super::*;

#[test]
fn engine_death_fails_what_it_held_keeps_the_waiting_and_restarts() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).output(500));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).output(5));
    sim.kill_engine_at(3.0);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.failed_with(1), Some(FailKind::EngineDied));
    assert_eq!(sim.failed_with(2), Some(FailKind::EngineDied));
    assert_eq!(sim.rec(1).ended_at().unwrap().as_secs_f64(), 3.0);
    assert_eq!(sim.rec(3).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.s.snapshot(sim.now).counters.engine_restarts, 1);
}

#[test]
fn parked_state_from_a_dead_engine_is_never_restored() {
    let mut f = facts(1, 256);
    f.spare_seqs = 0;
    let s = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(400));
    sim.kill_engine_at(8.0);
    sim.arrive(Arrival::new(3, p(300, 3)).at(9.0).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.log.iter().any(
        |(_, a)| matches!(a, Action::Park { request, to: ParkPlace::HostRam, .. } if request.0 == 1)
    ));
    assert_eq!(sim.failed_with(1), Some(FailKind::EngineDied));
    assert!(sim.pos(is_restore(1)).is_none());
    assert_eq!(sim.rec(3).finish_reason(), Some(FinishReason::Stop));
}

#[test]
fn three_failed_starts_fail_the_waiting_with_503_and_the_next_request_tries_again() {
    let mut sim = solo(256, false);
    sim.failing_starts = 3;
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.kill_engine_at(1.0);
    sim.arrive(Arrival::new(3, p(300, 3)).at(60.0).output(5));
    sim.run(200.0);
    sim.check_end();
    assert!(matches!(
        sim.failed_with(2),
        Some(FailKind::EngineUnavailable { .. })
    ));
    assert_eq!(sim.rec(3).finish_reason(), Some(FinishReason::Stop));
    let delays: Vec<f64> = sim
        .log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::RestartEngine { delay_secs, .. } => Some(*delay_secs),
            _ => None,
        })
        .collect();
    assert_eq!(delays, vec![0.0, 1.0, 2.0, 0.0]);
}

#[test]
fn a_user_restart_fails_in_flight_with_engine_restarted_and_keeps_the_waiting() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.event_at(2.0, Event::RestartRequested);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.failed_with(1), Some(FailKind::EngineRestarted));
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
}
