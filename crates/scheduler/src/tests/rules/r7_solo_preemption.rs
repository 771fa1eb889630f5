//! R7 solo preemption.

use super::*;

#[test]
fn solo_priority_pauses_a_decoding_request_only_after_the_quantum() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    let t = sim.time_of(is_park(1)).unwrap();
    // at the first boundary where it has run the quantum (5 s since its slot at 0 s; steps
    // end at 0.3 + 0.05 k s), not one step later
    assert!((t - 5.0).abs() < 1e-6, "paused at {t}");
}

#[test]
fn a_read_is_not_paused_by_r7() {
    let s = SchedulerSettings {
        solo_priority: true,
        yields_max: 0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(12_000, 1)).output(400)); // 12 s of reading
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    let park = sim.pos(is_park(1)).unwrap();
    let first_token = sim.pos(is_deliver(1)).unwrap();
    assert!(park > first_token);
}

/// The fresh request F has the older ticket (it waited behind X before the stream P came), so
/// only the paused-first tiebreak puts P ahead of it. Audit: in the old test the paused
/// request also had the older ticket, so the tiebreak was never needed.
#[test]
fn a_paused_request_resumes_ahead_of_fresh_equals() {
    let s = SchedulerSettings {
        solo_priority: true,
        aging_interval_secs: 0.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(9, p(300, 9)).priority(10).output(40)); // X holds the slot
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).priority(-1).output(5)); // F, older
    sim.arrive(Arrival::new(1, p(300, 1)).at(0.2).output(400)); // P
    sim.arrive(Arrival::new(2, p(300, 2)).at(8.0).priority(5).output(40)); // W pauses P
    // F becomes P's equal while P is parked
    sim.event_at(
        9.0,
        Event::Reprioritised {
            request: RequestId(3),
            priority: 0,
        },
    );
    sim.run(200.0);
    sim.check_end();
    assert!(sim.pos(is_park(1)).is_some(), "P was never paused");
    assert!(sim.pos(is_assign(3)).unwrap() > sim.pos(is_park(1)).unwrap());
    assert!(sim.pos(is_restore(1)).unwrap() < sim.pos(is_assign(3)).unwrap());
}

/// R7's guard ("P has produced a token since it was restored") holds by construction: the
/// restore of a paused decode and the step that decodes it are composed in the same pass, so
/// no boundary ever sees a restored decode without its next token. Shown through events only
/// (it once set the scheduler's state by hand to reach a boundary that cannot happen): under a
/// steady stream of higher priorities, every restore of the paused stream comes with a step
/// that decodes it, and it delivers a token before any later pause.
#[test]
fn the_pause_guard_keeps_a_restored_request_that_has_no_new_token() {
    let s = SchedulerSettings {
        solo_priority: true,
        min_run_quantum_secs: 0.0,
        aging_interval_secs: 0.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    for i in 0..10 {
        let at = 1.0 + f64::from(i) * 0.35;
        sim.arrive(
            Arrival::new(10 + u64::from(i), p(100, 10 + i))
                .at(at)
                .priority(5)
                .output(3),
        );
    }
    sim.run(200.0);
    sim.check_end();
    let restores: Vec<usize> = (0..sim.log.len())
        .filter(|i| is_restore(1)(&sim.log[*i].1))
        .collect();
    assert!(
        restores.len() >= 3,
        "P was paused and restored only {} times",
        restores.len()
    );
    for i in restores {
        let (at, _) = sim.log[i];
        let next_step = sim.log[i + 1..].iter().find_map(|(t, a)| match a {
            Action::Step(step) => Some((*t, step.clone())),
            _ => None,
        });
        let (t, step) = next_step.expect("a step after the restore");
        assert_eq!(t, at, "the restore and its step are one boundary");
        assert!(
            step.decode.iter().any(|(id, _)| id.0 == 1),
            "the step composed with P's restore decodes P: {step:?}"
        );
        let next_park = sim.log[i..].iter().position(|(_, a)| is_park(1)(a));
        if let Some(j) = next_park {
            assert!(
                sim.log[i..i + j].iter().any(|(_, a)| is_deliver(1)(a)),
                "P was paused again before a token"
            );
        }
    }
}

#[test]
fn a_paused_request_is_not_paused_again_before_it_produced_a_token() {
    let s = SchedulerSettings {
        solo_priority: true,
        min_run_quantum_secs: 0.0,
        aging_interval_secs: 0.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(300, 1)).output(200));
    for i in 0..20 {
        sim.arrive(
            Arrival::new(10 + u64::from(i), p(100, 10 + i))
                .at(0.5 + f64::from(i) * 0.3)
                .priority(5)
                .output(2),
        );
    }
    sim.run(200.0);
    sim.check_end();
    // between each restore of 1 and its next park, it delivered a token
    let mut resumed_at = None;
    for (i, (_, a)) in sim.log.iter().enumerate() {
        if is_restore(1)(a) {
            resumed_at = Some(i);
        }
        if is_park(1)(a)
            && let Some(r) = resumed_at
        {
            assert!(sim.log[r..i].iter().any(|(_, a)| is_deliver(1)(a)));
        }
    }
    assert!(sim.s.snapshot(sim.now).counters.pauses >= 2);
}

/// Audit finding: W paused P, took the lane and its aging reset, so the parked P, aging,
/// tied with it; P had nothing left to read, so the shorter-left rule gave P the slot back at
/// the next chunk, and so on every aging interval. (It was first seen with W and P of one
/// priority, W aged +1; aging alone no longer pauses an equal, so W here is one priority up.)
#[test]
fn the_request_paused_for_w_does_not_take_the_slot_back_by_shorter_left_before_w_s_first_token() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(2000)); // P: a long stream
    // W: one priority up, 40 s of reading
    sim.arrive(Arrival::new(2, p(40_000, 2)).at(1.0).priority(1).output(5));
    sim.run(500.0);
    sim.check_end();
    let w_first = sim.time_of(is_deliver(2)).unwrap();
    let paused = sim.time_of(is_park(1)).unwrap();
    assert!(
        (5.0..5.1).contains(&paused),
        "P paused at {paused}: after its 5 s quantum"
    );
    assert!(w_first > paused + 35.0, "W read for 40 s: {w_first}");
    let restored = sim.time_of(is_restore(1)).unwrap();
    assert!(
        restored > w_first,
        "P came back at {restored}, before W's first token at {w_first}"
    );
    assert_eq!(sim.rec(2).ends.len(), 1);
    let give_ways = sim.s.snapshot(sim.now).counters.give_ways_shorter_left;
    assert_eq!(give_ways, 0);
}

/// R7: aging exists to bound waits. A waiter of the running stream's own class is bounded
/// already (it is next), so aging alone never lets it pause the stream; it still goes first
/// once the stream ends, ahead of a later arrival of the same class.
#[test]
fn aging_alone_never_lets_an_equal_pause_a_running_stream() {
    let s = SchedulerSettings {
        solo_priority: true,
        aging_interval_secs: 10.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(300, 1)).output(2000)); // P: 100 s of decoding
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).output(5)); // W: aged +9 by P's end
    sim.arrive(Arrival::new(3, p(300, 3)).at(50.0).output(5)); // a later equal
    sim.run(500.0);
    sim.check_end();
    assert_eq!(
        sim.count(is_park(1)),
        0,
        "P was paused by an equal that only aged"
    );
    let p_end = sim.rec(1).ended_at().unwrap().as_secs_f64();
    assert!(p_end < 101.0, "P ran to its end at once: {p_end}");
    let w_in = sim.time_of(is_assign(2)).unwrap();
    let later_in = sim.time_of(is_assign(3)).unwrap();
    assert!(
        w_in >= p_end && w_in < later_in,
        "W next ({w_in}), before the later equal ({later_in})"
    );
}

/// The audit's case: two equal-priority 3,000-token decodes with `solo_priority` on traded
/// the slot every aging interval (8 swaps; the first ended at 270 s instead of about 150 s).
#[test]
fn two_equal_long_decodes_run_one_after_the_other_without_trading_the_slot() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(3000));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).output(3000));
    sim.run(1000.0);
    sim.check_end();
    assert_eq!(sim.s.snapshot(sim.now).counters.pauses, 0);
    let first_end = sim.rec(1).ended_at().unwrap().as_secs_f64();
    assert!(first_end < 151.0, "the first ended at {first_end}");
}

/// Aging still bounds a lower priority's wait behind a long higher one: once aging lifts it
/// above the running stream's class, it pauses the stream (its class differs).
#[test]
fn a_lower_priority_that_aged_above_a_running_stream_still_pauses_it() {
    let s = SchedulerSettings {
        solo_priority: true,
        aging_interval_secs: 10.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(300, 1)).priority(1).output(2000)); // P: priority 1
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).output(5)); // W: priority 0
    sim.run(500.0);
    sim.check_end();
    let paused = sim.time_of(is_park(1)).expect("P was never paused");
    // W's effective priority passes P's 1 at +2, 20 s after it arrived
    assert!((21.0..21.1).contains(&paused), "paused at {paused}");
}

/// The small-request boost is a class of its own: a short request with no priority given
/// pauses a long stream of the same priority (R7's case), aging or not.
#[test]
fn the_small_request_boost_still_pauses_an_equal_long_stream() {
    let s = SchedulerSettings {
        solo_priority: true,
        aging_interval_secs: 0.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(300, 1)).output(2000)); // priority 0, given
    sim.arrive(
        Arrival::new(2, p(300, 2))
            .at(1.0)
            .no_priority_given()
            .output(5),
    );
    sim.run(500.0);
    sim.check_end();
    let paused = sim
        .time_of(is_park(1))
        .expect("the boosted short did not pause P");
    assert!((5.0..5.1).contains(&paused), "paused at {paused}");
}
