//! The seeds' scenarios (#2109, #1288, #2822) and Strata's bugs, in virtual time, with their
//! shapes (GPU-like speeds and 8,192-token chunks where the seed measured on a GPU).

use super::sim::{Arrival, facts, is_assign, is_park, is_release, is_restore, prompt, secs};
use super::{Sim, with};
use crate::ids::RequestId;
use crate::{Action, FinishReason, GiveWay, SchedulerSettings};

fn gpu(parallel: u32, settings: SchedulerSettings) -> Sim {
    let mut sim = with(settings, facts(parallel, 8192));
    sim.read_tps = 5000.0;
    sim.decode_step_secs = 0.05;
    sim
}

/// 4 slots decoding 700-token stories, 8 more waiting at priority 10, a short request arriving
/// 2 s in. Returns its time to first token.
fn seed_2109_burst(short_priority: i32) -> (Sim, f64) {
    let mut sim = gpu(4, SchedulerSettings::default());
    for i in 0..12u64 {
        let story = 700 + 10 * i as u32;
        sim.arrive(
            Arrival::new(i, prompt(i as u32, 0, 400, i as u32))
                .priority(10)
                .output(story),
        );
    }
    sim.arrive(
        Arrival::new(100, prompt(100, 0, 200, 100))
            .at(2.0)
            .priority(short_priority)
            .output(20),
    );
    sim.run(1000.0);
    sim.check_end();
    let t = sim.ttft(100);
    (sim, t)
}

#[test]
fn seed_2109_a_higher_priority_short_request_gets_the_first_free_slot() {
    let (sim, with_priority) = seed_2109_burst(20);
    let first_release = sim.pos(|a| matches!(a, Action::Release { .. })).unwrap();
    let next_assign = sim.log[first_release..]
        .iter()
        .find_map(|(_, a)| match a {
            Action::Assign { request, .. } => Some(*request),
            _ => None,
        })
        .unwrap();
    assert_eq!(next_assign, RequestId(100));
    let (_, without) = seed_2109_burst(10);
    println!(
        "#2109 burst: short request TTFT {with_priority:.1} s with priority, {without:.1} s without"
    );
    assert!(
        with_priority < 40.0 && without > 2.0 * with_priority,
        "{with_priority} vs {without}"
    );
}

#[test]
fn seed_2109_an_84k_read_gives_way_at_a_chunk_boundary_to_an_equally_long_higher_priority() {
    let mut sim = gpu(4, SchedulerSettings::default());
    sim.arrive(
        Arrival::new(1, prompt(1, 0, 84_000, 1))
            .priority(10)
            .output(20),
    );
    sim.arrive(
        Arrival::new(2, prompt(2, 0, 84_000, 2))
            .at(3.0)
            .priority(20)
            .output(20),
    );
    sim.run(1000.0);
    sim.check_end();
    let c1 = &sim.rec(1).chunks;
    assert_eq!(c1[1].end, 16_384, "gave way at 16,384 tokens");
    assert_eq!(sim.first_chunk(2), 2);
    for c in &c1[..c1.len() - 1] {
        assert_eq!(c.end % 8192, 0);
    }
    assert!(sim.ttft(2) < sim.ttft(1));
    assert_eq!(
        sim.s.snapshot(sim.now).counters.give_ways_higher_priority,
        1
    );
    println!(
        "#2109 84K: second request TTFT {:.1} s, first request TTFT {:.1} s",
        sim.ttft(2),
        sim.ttft(1)
    );
}

/// B's first turn (~20K) answered, a fresh prompt A starts its read, 1 s later B's second turn
/// arrives with 24 new tokens. Returns (B2's TTFT, A's TTFT, give-ways).
fn seed_1288(give_way: GiveWay, fresh_len: u32) -> (f64, f64, u64) {
    let settings = SchedulerSettings {
        give_way,
        ..SchedulerSettings::default()
    };
    let mut sim = gpu(8, settings);
    let b1 = prompt(7, 20_000, 20_000, 7);
    sim.arrive(Arrival::new(1, b1.clone()).output(50));
    sim.run(9.0);
    let mut b2 = b1;
    b2.extend_from_slice(&sim.rec(1).delivered);
    b2.extend(prompt(8, 0, 24, 8));
    sim.arrive(
        Arrival::new(2, prompt(3, 0, fresh_len, 3))
            .at(10.0)
            .output(20),
    ); // A, fresh
    sim.arrive(Arrival::new(3, b2).at(11.0).output(20));
    sim.run(1000.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    (sim.ttft(3), sim.ttft(2), c.give_ways_shorter_left)
}

#[test]
fn seed_1288_a_follow_up_its_slot_holds_makes_a_fresh_30k_read_give_way() {
    let (b2, a, give_ways) = seed_1288(GiveWay::Left, 30_000);
    println!("#1288: B's next turn TTFT {b2:.2} s, A (fresh) TTFT {a:.2} s, give-ways {give_ways}");
    assert_eq!(give_ways, 1);
    assert!(b2 < 1.5, "B's next turn waited {b2}");
    assert!(a < 8.0);
}

#[test]
fn seed_1288_give_way_whole_would_not_give_way() {
    let (b2, _, give_ways) = seed_1288(GiveWay::Whole, 30_000);
    println!("#1288 whole: B's next turn TTFT {b2:.2} s, give-ways {give_ways}");
    assert_eq!(give_ways, 0);
    assert!(b2 > 4.0, "B's next turn waited for the whole read: {b2}");
}

#[test]
fn seed_1288_no_give_way_with_one_chunk_or_less_left() {
    let (_, _, give_ways) = seed_1288(GiveWay::Left, 14_000);
    assert_eq!(give_ways, 0);
}

#[test]
fn seed_2822_a_stream_pauses_only_after_the_quantum_and_resumes_with_nothing_lost() {
    let settings = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let mut sim = with(settings, facts(1, 256));
    sim.arrive(Arrival::new(1, prompt(1, 0, 300, 1)).output(600));
    sim.arrive(
        Arrival::new(2, prompt(2, 0, 150, 2))
            .at(1.0)
            .no_priority_given()
            .output(20),
    ); // small: boosted
    sim.run(1000.0);
    sim.check_end();
    let park = sim.time_of(is_park(1)).unwrap();
    assert!((5.0..5.1).contains(&park), "paused at {park}");
    assert!(sim.pos(is_restore(1)).unwrap() > sim.pos(is_release(2)).unwrap());
    assert_eq!(sim.rec(1).delivered.len(), 600);
    assert!(sim.ttft(2) < 5.0);
}

#[test]
fn seed_2822_aging_brings_a_paused_stream_back_within_its_bound_under_a_steady_stream() {
    let settings = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    // a boosted short request every second, each about 1.3 s of work: more than the engine
    // can do, so the paused stream comes back only by aging (audit: at one every 2 s the
    // stream resumed in every gap and aging was never needed)
    let steady = |aging_interval_secs: f64| {
        let settings = SchedulerSettings {
            aging_interval_secs,
            ..settings.clone()
        };
        let mut sim = with(settings, facts(1, 256));
        sim.arrive(Arrival::new(1, prompt(1, 0, 300, 1)).output(3000));
        for i in 0..150u64 {
            sim.arrive(
                Arrival::new(10 + i, prompt(10 + i as u32, 0, 300, 10 + i as u32))
                    .at(1.0 + i as f64)
                    .no_priority_given()
                    .output(20),
            );
        }
        sim.run(3000.0);
        sim.check_end();
        sim
    };
    // without aging the stream waits for the whole burst
    let starved = steady(0.0);
    let first_back = starved.time_of(is_restore(1)).unwrap();
    assert!(
        first_back > 150.0,
        "came back at {first_back} s without aging"
    );
    let sim = steady(30.0);
    // each pause of the stream ends within (g + 1) × 30 s + one request's time (g = 1)
    let mut parked_at = None;
    let mut pauses = 0;
    for (t, a) in &sim.log {
        if is_park(1)(a) {
            parked_at = Some(t.as_secs_f64());
            pauses += 1;
        }
        if is_restore(1)(a) {
            let waited = t.as_secs_f64() - parked_at.take().unwrap();
            assert!(waited <= 2.0 * 30.0 + 2.0, "parked {waited} s");
        }
    }
    assert!(pauses >= 3, "{pauses} pauses");
    println!("#2822 aging: {pauses} pauses of the stream, each under 62 s");
    assert_eq!(sim.rec(1).delivered.len(), 3000);
}

#[test]
fn strata_long_long_short_with_two_slots_does_not_deadlock() {
    let mut sim = with(SchedulerSettings::default(), facts(2, 256));
    sim.arrive(Arrival::new(1, prompt(1, 0, 6000, 1)).output(10));
    sim.arrive(Arrival::new(2, prompt(2, 0, 6000, 2)).at(0.25).output(10));
    sim.arrive(Arrival::new(3, prompt(3, 0, 100, 3)).at(0.5).output(10));
    sim.run(1000.0); // the driver panics on a state where work exists and nothing runs
    sim.check_end();
    for id in 1..=3 {
        assert!(sim.rec(id).finish_reason().is_some());
        assert!(!sim.rec(id).lane_without_slot);
    }
}

#[test]
fn strata_instant_re_grab_is_prevented_by_the_ticket_order() {
    let mut sim = with(SchedulerSettings::default(), facts(3, 256));
    sim.arrive(Arrival::new(1, prompt(1, 0, 6000, 1)).output(10));
    sim.arrive(Arrival::new(2, prompt(2, 0, 200, 2)).at(0.3).output(10));
    sim.arrive(Arrival::new(3, prompt(3, 0, 200, 3)).at(0.3).output(10));
    sim.run(1000.0);
    sim.check_end();
    let order: Vec<u64> = sim.chunks().iter().map(|(r, _)| *r).take(5).collect();
    assert_eq!(order, vec![1, 1, 2, 3, 1]);
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 1);
}

#[test]
fn a_kv_budget_full_of_gave_way_reads_and_cached_conversations_still_makes_progress() {
    let mut f = facts(3, 256);
    f.kv_cells_total = 7000;
    f.context_tokens = 6000;
    let mut sim = with(SchedulerSettings::default(), f);
    for i in 0..3u64 {
        sim.arrive(Arrival::new(i, prompt(i as u32, 0, 2000, i as u32)).output(30));
    }
    for i in 0..6u64 {
        let t = 10.0 + i as f64 * 0.7;
        sim.arrive(
            Arrival::new(10 + i, prompt(20 + i as u32, 0, 4000, 20 + i as u32))
                .at(t)
                .output(300),
        );
        sim.arrive(
            Arrival::new(30 + i, prompt(40 + i as u32, 0, 200, 40 + i as u32))
                .at(t + 0.4)
                .output(200),
        );
    }
    sim.run(5000.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert!(c.give_ways_shorter_left >= 1);
    assert!(sim.count(|a| matches!(a, Action::EvictConversation { .. })) >= 1);
    assert!(sim.s.snapshot(sim.now).kv_cells_used <= 7000);
    // every request finished (the check above fails on any stall): the reads that gave way,
    // the short ones, and the conversations evicted to make room
    for id in (0..3).chain(10..16).chain(30..36) {
        assert_eq!(
            sim.rec(id).finish_reason(),
            Some(FinishReason::Stop),
            "request {id}"
        );
    }
    let _ = (is_assign(0), secs(0.0));
}
