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
    // in its sequence (room in the pool) and in host RAM (a pool too small for both)
    for (cells, place) in [(1_000_000, "pool"), (700, "host")] {
        let mut f = facts(1, 256);
        f.sequences = 2;
        f.kv_cells_total = cells;
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
        let parked_to = sim.log.iter().find_map(|(_, a)| match a {
            Action::Park { request, to, .. } if request.0 == 1 => Some(*to),
            _ => None,
        });
        match place {
            "pool" => assert!(
                matches!(parked_to, Some(ParkPlace::Pool(_))),
                "{parked_to:?}"
            ),
            _ => assert_eq!(parked_to, Some(ParkPlace::HostRam)),
        }
        assert_eq!(sim.failed_with(1), Some(FailKind::EngineDied), "{place}");
        assert!(sim.pos(is_restore(1)).is_none(), "{place}");
        assert_eq!(sim.rec(3).finish_reason(), Some(FinishReason::Stop));
    }
}

#[test]
fn three_failed_starts_fail_the_waiting_and_the_engine_stays_failed_until_a_retry() {
    let mut sim = solo(256, false);
    sim.failing_starts = 3;
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.kill_engine_at(1.0);
    sim.arrive(Arrival::new(3, p(300, 3)).at(60.0).output(5));
    sim.arrive(Arrival::new(4, p(300, 4)).at(61.0).output(5));
    sim.event_at(70.0, Event::RestartRequested);
    sim.arrive(Arrival::new(5, p(300, 5)).at(80.0).output(5));
    sim.run(65.0);
    assert!(matches!(
        sim.failed_with(2),
        Some(FailKind::EngineUnavailable { .. })
    ));
    // arrivals while failed are refused with the reason, and neither start nor queue anything
    for id in [3, 4] {
        assert_eq!(
            sim.rec(id).refused.as_ref().map(|(_, r)| r),
            Some(&Refusal::EngineUnavailable {
                stderr_tail: "CUDA error: out of memory".into()
            }),
            "req-{id}"
        );
    }
    assert_eq!(sim.s.engine_failed(), Some("CUDA error: out of memory"));
    assert!(sim.s.engine_down());
    assert!(!sim.s.has_work());
    assert_eq!(restart_attempts(&sim), vec![(1, 0.0), (2, 1.0), (3, 2.0)]);
    // the retry starts a new run of attempts at once; the engine that comes up serves again
    sim.run(200.0);
    sim.check_end();
    assert_eq!(
        restart_attempts(&sim),
        vec![(1, 0.0), (2, 1.0), (3, 2.0), (1, 0.0)]
    );
    let retried_at = sim
        .log
        .iter()
        .filter(|(_, a)| matches!(a, Action::RestartEngine { .. }))
        .map(|(t, _)| t.as_secs_f64())
        .next_back();
    assert_eq!(retried_at, Some(70.0));
    assert_eq!(sim.s.engine_failed(), None);
    assert_eq!(sim.rec(5).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.s.snapshot(sim.now).counters.engine_restarts, 1);
}

fn restart_attempts(sim: &Sim) -> Vec<(u32, f64)> {
    sim.log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::RestartEngine {
                attempt,
                delay_secs,
            } => Some((*attempt, *delay_secs)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_engine_that_died_with_nothing_waiting_is_down_and_the_next_arrival_starts_it() {
    let t = std::time::Duration::ZERO;
    let mut s = crate::Scheduler::new(SchedulerSettings::default(), facts(1, 256)).unwrap();
    let out = s.handle(Event::EngineDied, t);
    assert!(restarts(&out).is_empty(), "nothing waits: nothing starts");
    assert!(s.engine_down());
    assert_eq!(s.engine_failed(), None, "a death is not a failed start");
    let out = s.admit(new_request(1, 100), t).unwrap();
    assert_eq!(restarts(&out), vec![(1, 0.0)]);
    assert!(!s.engine_down());
    assert!(s.has_work());
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

fn new_request(id: u64, len: u32) -> crate::NewRequest {
    crate::NewRequest {
        id: RequestId(id),
        prompt: p(len, id as u32),
        priority: 0,
        priority_given: false,
        max_tokens: None,
    }
}

fn restarts(out: &crate::Outcome) -> Vec<(u32, f64)> {
    out.actions
        .iter()
        .filter_map(|a| match a {
            Action::RestartEngine {
                attempt,
                delay_secs,
            } => Some((*attempt, *delay_secs)),
            _ => None,
        })
        .collect()
}

#[test]
fn an_arrival_before_the_first_engine_is_ready_is_refused_as_starting_and_not_counted_against_it() {
    let t = std::time::Duration::ZERO;
    let mut s = crate::Scheduler::starting(SchedulerSettings::default(), 1).unwrap();
    let refused = s.admit(new_request(1, 100), t).unwrap_err();
    assert_eq!(
        refused.refusal,
        Refusal::EngineStarting {
            retry_after_secs: crate::ENGINE_STARTING_RETRY_SECS
        }
    );
    assert!(refused.outcome.actions.is_empty());
    assert!(!s.has_work());
    // The first handshake is not a restart; from then on arrivals are admitted.
    s.handle(Event::EngineReady(facts(1, 256)), t);
    assert_eq!(s.snapshot(t).counters.engine_restarts, 0);
    assert!(s.admit(new_request(2, 100), t).is_ok());
}

#[test]
fn a_failing_first_start_follows_r10_retries_then_arrivals_are_refused_with_the_reason_and_start_nothing_until_a_retry()
 {
    let t = std::time::Duration::ZERO;
    let settings = SchedulerSettings::default();
    let mut s = crate::Scheduler::starting(settings.clone(), 1).unwrap();
    let mut attempts = vec![(1, 0.0)];
    for _ in 1..settings.restart_attempts_max {
        let out = s.handle(
            Event::EngineStartFailed {
                stderr_tail: "bad model".into(),
            },
            t,
        );
        attempts.extend(restarts(&out));
    }
    // R10's backoff: 1 s, then 2 s.
    assert_eq!(attempts, vec![(1, 0.0), (2, 1.0), (3, 2.0)]);
    let out = s.handle(
        Event::EngineStartFailed {
            stderr_tail: "bad model".into(),
        },
        t,
    );
    assert!(restarts(&out).is_empty(), "no fourth attempt by itself");
    assert!(s.engine_down());
    assert_eq!(s.engine_failed(), Some("bad model"));
    // an agent retrying on 503: every arrival is refused with the reason, none starts the
    // engine or stays queued
    for id in 1..=3 {
        let refused = s.admit(new_request(id, 100), t).unwrap_err();
        assert_eq!(
            refused.refusal,
            Refusal::EngineUnavailable {
                stderr_tail: "bad model".into()
            }
        );
        assert!(refused.outcome.actions.is_empty(), "{:?}", refused.outcome);
        assert!(!s.has_work());
        assert_eq!(s.engine_failed(), Some("bad model"));
    }
    // a death report with no engine running starts nothing either
    let out = s.handle(Event::EngineDied, t);
    assert!(restarts(&out).is_empty());
    assert_eq!(
        out.diagnostics,
        vec![crate::engine_events::DIED_WHILE_FAILED.to_string()]
    );
    assert_eq!(s.engine_failed(), Some("bad model"));
    // the retry: a new run of attempts, at once
    let out = s.handle(Event::RestartRequested, t);
    assert_eq!(restarts(&out), vec![(1, 0.0)]);
    assert!(out.diagnostics.is_empty(), "{:?}", out.diagnostics);
    assert_eq!(s.engine_failed(), None);
    assert!(!s.engine_down());
    let refused = s.admit(new_request(4, 100), t).unwrap_err();
    assert_eq!(
        refused.refusal,
        Refusal::EngineStarting {
            retry_after_secs: crate::ENGINE_STARTING_RETRY_SECS
        }
    );
    s.handle(Event::EngineReady(facts(1, 256)), t);
    assert!(s.admit(new_request(5, 100), t).is_ok());
}
