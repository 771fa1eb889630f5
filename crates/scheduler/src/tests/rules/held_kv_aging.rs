//! Held for sure, the KV budget, aging and the small-request boost.

use super::*;

#[test]
fn held_for_sure_on_a_checkpoint_engine_is_cut_at_the_last_checkpoint_it_reported() {
    // request 1 reads 1,000 tokens in chunks of 256; request 2 shares its first 900
    for (trims, checkpoints, step, expect) in [
        (true, false, u32::MAX, 900),
        // checkpoints at 256, 512, 768, then 932 and 996 (4 + 64 and 4 before the end)
        (false, true, 256, 768),
        // only near the end of the read: none at or before 900
        (false, true, u32::MAX, 0),
        (false, false, 256, 0),
    ] {
        let mut f = facts(2, 256);
        f.trims_at_any_token = trims;
        f.rewindable_tokens = if trims { u32::MAX } else { 1 };
        let mut sim = with(SchedulerSettings::default(), f);
        sim.checkpoints = checkpoints;
        sim.checkpoint_step = step;
        sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(5));
        sim.arrive(Arrival::new(2, prompt(1, 900, 1200, 2)).at(5.0).output(5));
        sim.run(100.0);
        sim.check_end();
        assert_eq!(
            assigned_seq(&sim, 2).1,
            expect,
            "trims_at_any_token: {trims}, checkpoints: {checkpoints}"
        );
        if !trims {
            // no prefix shared between sequences: request 2 takes request 1's sequence over,
            // cut at the checkpoint
            assert_eq!(sim.count(|a| matches!(a, Action::CopyPrefix { .. })), 0);
            if checkpoints && expect > 0 {
                assert_eq!(assigned_seq(&sim, 2).0, assigned_seq(&sim, 1).0);
            }
        }
    }
}

#[test]
fn a_re_rendered_answer_continues_from_the_checkpoint_4_tokens_before_the_last_prompt_s_end() {
    // an agent sends the history back with the last answer re-serialised: the prompt departs
    // right where the last prompt ended, which the checkpoint 4 tokens before it covers
    for (checkpoints, rewindable, expect) in [(true, 1, 996), (true, 0, 996), (false, 1, 0)] {
        let mut f = facts(1, 256);
        f.trims_at_any_token = false;
        f.rewindable_tokens = rewindable;
        let mut sim = with(SchedulerSettings::default(), f);
        sim.checkpoints = checkpoints;
        let first = prompt(1, 900, 1000, 1);
        sim.arrive(Arrival::new(1, first.clone()).output(7));
        sim.run(10.0);
        let mut next = first;
        next.extend(prompt(9, 0, 40, 9)); // not the output sent: another rendering of it
        sim.arrive(Arrival::new(2, next).at(11.0).output(5));
        sim.run(100.0);
        sim.check_end();
        let (seq, keep) = assigned_seq(&sim, 2);
        let case = format!("checkpoints: {checkpoints}, rewindable: {rewindable}");
        assert_eq!(keep, expect, "{case}");
        if expect > 0 {
            assert_eq!(
                seq,
                assigned_seq(&sim, 1).0,
                "{case}: it takes the sequence over"
            );
        }
        assert_eq!(sim.rec(2).chunks[0].start, expect);
    }
}

#[test]
fn a_follow_up_keeps_the_whole_conversation_even_on_a_checkpoint_engine() {
    let mut f = facts(1, 256);
    f.trims_at_any_token = false;
    let mut sim = with(SchedulerSettings::default(), f);
    let first = prompt(1, 900, 1000, 1);
    sim.arrive(Arrival::new(1, first.clone()).output(7));
    sim.run(10.0);
    let mut follow = first;
    follow.extend_from_slice(&sim.rec(1).delivered);
    follow.extend(prompt(9, 0, 24, 9));
    sim.arrive(Arrival::new(2, follow).at(11.0).output(5));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(assigned_seq(&sim, 2).1, 1000 + 6);
    assert_eq!(sim.rec(2).chunks[0].start, 1006);
}

#[test]
fn idle_conversations_go_to_host_ram_before_a_request_waits_and_come_back_for_a_follow_up() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 3000;
    f.context_tokens = 3000;
    let mut sim = with(SchedulerSettings::default(), f);
    let first = prompt(1, 1000, 1000, 1);
    sim.arrive(Arrival::new(1, first.clone()).output(10));
    sim.arrive(Arrival::new(2, p(2400, 2)).at(5.0).output(10));
    let mut follow = first;
    follow.extend(prompt(9, 0, 300, 9));
    sim.arrive(Arrival::new(3, follow).at(20.0).output(5));
    sim.run(100.0);
    sim.check_end();
    let evict = sim
        .pos(|a| {
            matches!(
                a,
                Action::EvictConversation {
                    to_cache: Some(_),
                    ..
                }
            )
        })
        .unwrap();
    assert!(evict < sim.pos(is_assign(2)).unwrap());
    assert!(
        sim.pos(|a| matches!(a, Action::RestoreConversation { .. }))
            .is_some()
    );
    assert_eq!(assigned_seq(&sim, 3).1, 1000);
}

#[test]
fn aging_raises_effective_priority_by_one_per_interval() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(300, 1)).output(2000)); // 100 s of decoding
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).priority(3).output(5));
    sim.run(95.0);
    let snap = sim.s.snapshot(sim.now);
    assert_eq!(snap.waiting[0].request_id, RequestId(2));
    assert_eq!(snap.waiting[0].effective_priority, 3 + 3); // 94.9 s / 30 s
}

#[test]
fn the_small_request_boost_needs_solo_priority_and_no_given_priority() {
    // with solo_priority only the small request without a given priority gets +1; without
    // solo_priority nobody does
    for (solo_priority, expected) in [(true, vec![1, 0, 0]), (false, vec![0, 0, 0])] {
        let mut sim = solo(256, solo_priority);
        sim.arrive(Arrival::new(1, p(300, 1)).output(2000));
        sim.arrive(
            Arrival::new(2, p(300, 2))
                .at(0.1)
                .no_priority_given()
                .output(5),
        );
        sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).output(5));
        sim.arrive(
            Arrival::new(4, p(5000, 4))
                .at(0.1)
                .no_priority_given()
                .output(5),
        );
        sim.run(1.0);
        let snap = sim.s.snapshot(sim.now);
        let ids: Vec<u64> = snap.waiting.iter().map(|w| w.request_id.0).collect();
        assert_eq!(ids, vec![2, 3, 4]);
        let eff: Vec<i64> = snap.waiting.iter().map(|w| w.effective_priority).collect();
        assert_eq!(eff, expected, "solo_priority: {solo_priority}");
    }
}

#[test]
fn the_snapshot_is_plain_data_that_serializes() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(3000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).priority(2).output(5));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).output(5));
    sim.run(0.2);
    let snap = sim.s.snapshot(sim.now);
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(v["mode"], "batch");
    assert_eq!(v["slots"].as_array().unwrap().len(), 2);
    assert_eq!(v["waiting"][0]["tokens_left_to_read"], 300);
    assert!(v["counters"]["give_ways_higher_priority"].is_u64());
}

/// Audit finding: admissions made room (and took the free cells) before running decodes grew,
/// so a running decode found no cell for its next token and was skipped for as long as other
/// steps ran.
#[test]
fn a_running_decode_s_next_cell_is_reserved_before_any_admission_and_it_is_never_skipped() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    // needs 634 + 8 cells: 644 are free at 3 s; it took them, and request 1 was skipped in
    // 4 steps while it read (before the fix)
    sim.arrive(Arrival::new(2, p(634, 2)).at(3.0).output(5));
    sim.run(300.0);
    sim.check_end();
    let first = sim.pos(is_deliver(1)).unwrap();
    let released = sim.pos(is_release(1)).unwrap();
    let skipped = sim.log[first..released]
        .iter()
        .filter(|(_, a)| matches!(a, Action::Step(step) if !step.decode.iter().any(|(id, _)| id.0 == 1)))
        .count();
    assert_eq!(skipped, 0, "request 1 was skipped in {skipped} steps");
    assert!(
        sim.pos(is_park(1)).is_none(),
        "the running decode was parked"
    );
    assert_eq!(sim.rec(2).delivered.len(), 5);
}

/// Audit (aging anchors): equal long reads in batch mode trade the lane as they age (the one
/// waiting for the lane ages past the reader, which gives way to a higher effective priority);
/// `yields_max` bounds the trading.
#[test]
fn equal_long_reads_in_batch_mode_trade_the_lane_as_they_age_at_most_yields_max_times_each() {
    for yields_max in [0, 1, 2] {
        let s = SchedulerSettings {
            aging_interval_secs: 2.0,
            yields_max,
            ..SchedulerSettings::default()
        };
        let mut sim = with(s, facts(2, 256));
        sim.arrive(Arrival::new(1, p(20_000, 1)).output(5)); // 20 s of reading each
        sim.arrive(Arrival::new(2, p(20_000, 2)).at(0.1).output(5));
        sim.run(500.0);
        sim.check_end();
        let c = sim.s.snapshot(sim.now).counters;
        let give_ways = c.give_ways_higher_priority + c.give_ways_shorter_left;
        assert!(
            give_ways <= u64::from(2 * yields_max),
            "yields_max {yields_max}: {give_ways} give-ways"
        );
        if yields_max > 0 {
            assert!(give_ways > 0, "aging never traded the lane");
        }
        assert!(sim.max_yields_seen <= yields_max);
    }
}

/// Audit (aging anchors): a slot holder waiting for the lane behind a stream of higher-priority
/// reads ages while it waits, and reads within (g + 1) × interval plus one read's time.
#[test]
fn a_slot_holder_waiting_behind_higher_priority_readers_gets_the_lane_within_the_aging_bound() {
    let s = SchedulerSettings {
        aging_interval_secs: 5.0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(3, 256));
    // the higher-priority reads: 3 s each, a new one every 1.5 s for a minute, so one of them
    // always waits for the lane beside the low one
    sim.arrive(Arrival::new(100, p(3000, 100)).priority(1).output(1));
    sim.arrive(Arrival::new(1, p(2000, 1)).at(0.5).output(5)); // the low one takes a slot
    for i in 1..40u64 {
        sim.arrive(
            Arrival::new(100 + i, p(3000, 100 + i as u32))
                .at(1.5 * i as f64)
                .priority(1)
                .output(1),
        );
    }
    sim.run(500.0);
    sim.check_end();
    let admitted = sim.rec(1).first_assign.unwrap().as_secs_f64();
    let first_chunk_at = sim
        .log
        .iter()
        .find_map(|(t, a)| match a {
            Action::Step(step) if step.chunk.as_ref().is_some_and(|c| c.request.0 == 1) => {
                Some(t.as_secs_f64())
            }
            _ => None,
        })
        .unwrap();
    let waited = first_chunk_at - admitted;
    // g = 1: (1 + 1) × 5 s, plus one 3 s read that holds the lane
    assert!(
        waited <= 2.0 * 5.0 + 3.0 + 0.5,
        "waited {waited} s for the lane"
    );
    assert!(
        waited >= 5.0,
        "it did wait behind the higher ones ({waited} s)"
    );
}

/// Decodes that outgrow the pool: the lowest-ranked running request leaves for host RAM (a kv
/// park, counted), the others go on, and it comes back with nothing lost.
#[test]
fn when_running_decodes_outgrow_the_pool_the_lowest_ranked_is_parked_to_host_ram_and_counted() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    // each grows to 700 cells: 1,400 do not fit in 1,000
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).priority(5).output(400));
    sim.run(300.0);
    sim.check_end();
    let parks: Vec<u64> = sim
        .log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Park {
                request,
                to: ParkPlace::HostRam,
                ..
            } => Some(request.0),
            _ => None,
        })
        .collect();
    assert_eq!(parks, [1], "the lower priority leaves, once");
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.kv_parks, 1, "{c:?}");
    assert_eq!(sim.rec(1).delivered.len(), 400);
    assert_eq!(sim.rec(2).delivered.len(), 400);
    // the higher priority was never held up: it finished first
    assert!(sim.rec(2).ended_at() < sim.rec(1).ended_at());
}

/// A decode alone fills the pool to its last cell without a park: its last share is cut at
/// the context (here the pool), so it always fits (the fallback that takes only the cells
/// needed is not reached with one request: see
/// `a_decode_whose_next_share_does_not_fit_beside_another_takes_just_the_cells_it_needs`).
#[test]
fn a_decode_fills_the_pool_to_its_last_cell_without_a_park() {
    let mut f = facts(1, 256);
    // reservations of 309 + 8 k cells: the last share (997 to 1,005) does not fit in 1,000
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    // 301 + 699 = 1,000: every cell (the last token sampled takes none)
    sim.arrive(Arrival::new(1, p(301, 1)).output(699));
    sim.run(300.0);
    sim.check_end();
    assert_eq!(sim.rec(1).delivered.len(), 699);
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
    assert_eq!(sim.s.snapshot(sim.now).counters.kv_parks, 0);
}

/// Two decodes sharing a pool they would fill exactly: neither is parked. (Request 2 ends
/// long before request 1's share runs short, and its conversation leaves for the share, so
/// every share fits whole; the fallback is pinned by
/// `a_decode_whose_next_share_does_not_fit_beside_another_takes_just_the_cells_it_needs`.)
#[test]
fn two_decodes_that_fill_the_pool_exactly_take_their_last_cells_one_at_a_time() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    // 301 + 299 and 301 + 99 cells: 1,000 (the last token of each takes none)
    sim.arrive(Arrival::new(1, p(301, 1)).output(300));
    sim.arrive(Arrival::new(2, p(301, 2)).output(100));
    sim.run(300.0);
    sim.check_end();
    assert_eq!(sim.rec(1).delivered.len(), 300);
    assert_eq!(sim.rec(2).delivered.len(), 100);
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
    assert_eq!(sim.s.snapshot(sim.now).counters.kv_parks, 0);
}

/// Two running decodes that fill the pool exactly, both still running when it is full: the
/// one whose next share no longer fits takes just the cell it needs, one at a time, so
/// neither is parked.
#[test]
fn a_decode_whose_next_share_does_not_fit_beside_another_takes_just_the_cells_it_needs() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    // 301 + 199 cells each (the last token sampled takes none): 1,000, every cell
    sim.arrive(Arrival::new(1, p(301, 1)).priority(5).output(200));
    sim.arrive(Arrival::new(2, p(301, 2)).output(200));
    sim.run(300.0);
    sim.check_end();
    assert_eq!(sim.rec(1).delivered.len(), 200);
    assert_eq!(sim.rec(2).delivered.len(), 200);
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
    assert_eq!(sim.s.snapshot(sim.now).counters.kv_parks, 0);
}

/// A decode's next share comes from free cells while they last: an idle conversation stays
/// in the pool (it leaves only when the share does not fit otherwise).
#[test]
fn a_decode_s_next_share_takes_free_cells_and_leaves_idle_conversations_in_the_pool() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(1)); // its conversation: 300 cells
    // grows 308 -> 356 cells beside it; 1,000 - 300 - 356 = 344 still free
    sim.arrive(Arrival::new(2, p(300, 2)).at(2.0).output(50));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.rec(2).delivered.len(), 50);
    assert_eq!(
        sim.count(|a| matches!(a, Action::EvictConversation { .. })),
        0
    );
    assert_eq!(sim.s.snapshot(sim.now).conversations.len(), 2);
}

/// A decode's reservation grows when its next token would pass it, not when it reaches it:
/// a request that needs exactly the cells left beside a decode that has used its whole
/// reservation is admitted at once.
#[test]
fn a_decode_grows_its_reservation_only_when_its_next_token_would_pass_it() {
    let mut f = facts(2, 256);
    // request 1 reserves 301 + 8 = 309 cells, request 2 needs 100 + 8 = 108: 417
    f.kv_cells_total = 417;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    // read by 0.301 s, then a token every 0.05 s; its 9th and last token is sampled in the
    // step that fills its 309th cell
    sim.arrive(Arrival::new(1, p(301, 1)).output(9));
    // arrives during the step that samples token 8 (0.601 s to 0.651 s): at that boundary
    // request 1 holds 308 cells and its next token takes the 309th, its last reserved
    sim.arrive(Arrival::new(2, p(100, 2)).at(0.62).output(5));
    sim.run(100.0);
    sim.check_end();
    let admitted = sim.time_of(is_assign(2)).unwrap();
    assert!((0.651..0.652).contains(&admitted), "admitted at {admitted}");
    assert!(sim.pos(is_assign(2)) < sim.pos(is_release(1)));
    assert_eq!(
        sim.count(|a| matches!(a, Action::EvictConversation { .. })),
        0
    );
}
