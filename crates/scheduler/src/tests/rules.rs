//! One scenario per rule (R1-R12) and per precedence line, named after what it proves.
//! Virtual engine: 1,000 prompt tokens/s, 0.05 s per decode step, chunks of 256 unless said.

use super::sim::{facts, is_assign, is_deliver, is_park, is_release, is_restore, prompt};
use super::{batch, solo, with};
use crate::ids::{RequestId, SeqId};
use crate::{
    Action, ConversationId, Event, FailKind, FinishReason, GiveWay, MaxTokensOverContext,
    ParkPlace, PriorityOrder, PriorityRange, Refusal, SchedulerSettings, resolve_priority,
};

fn p(len: u32, unique: u32) -> Vec<i32> {
    prompt(unique, 0, len, unique)
}

fn assigned_seq(sim: &super::Sim, id: u64) -> (SeqId, u32) {
    sim.log
        .iter()
        .find_map(|(_, a)| match a {
            Action::Assign {
                request,
                seq,
                keep_tokens,
            } if request.0 == id => Some((*seq, *keep_tokens)),
            _ => None,
        })
        .expect("never assigned")
}

// ---------------------------------------------------------------- precedence

#[test]
fn precedence_1_what_must_end_ends_before_a_slot_is_filled() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 200, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.cancel_at(1.0, 1);
    sim.run(100.0);
    sim.check_end();
    let release = sim.pos(is_release(1)).unwrap();
    let assign = sim.pos(is_assign(2)).unwrap();
    assert!(release < assign);
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Cancelled));
}

#[test]
fn precedence_2_a_pause_comes_before_the_slot_is_filled_and_nothing_else_is_paused() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 5, None);
    sim.run(200.0);
    sim.check_end();
    assert!(sim.pos(is_park(1)).unwrap() < sim.pos(is_assign(2)).unwrap());
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 1);
    // without solo_priority, nothing running is paused
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 5, None);
    sim.run(200.0);
    sim.check_end();
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
}

#[test]
fn precedence_3_free_slots_are_filled_highest_effective_priority_first() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 100, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 120, None);
    sim.arrive(0.1, 3, p(300, 3), 1, 5, None);
    sim.arrive(0.2, 4, p(300, 4), 7, 5, None);
    sim.arrive(0.3, 5, p(300, 5), 3, 5, None);
    sim.run(100.0);
    sim.check_end();
    let order: Vec<usize> = [4, 5, 3]
        .iter()
        .map(|id| sim.pos(is_assign(*id)).unwrap())
        .collect();
    assert!(order[0] < order[1] && order[1] < order[2], "{order:?}");
}

#[test]
fn precedence_4_the_lane_goes_only_to_slot_holders_and_the_reader_keeps_it() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(3000, 1), 0, 5, None);
    sim.arrive(0.1, 2, p(3000, 2), 0, 5, None);
    sim.arrive(0.3, 3, p(200, 3), 9, 5, None); // no slot: cannot take the lane
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
    assert!(sim.first_chunk(3) > sim.last_chunk(1));
    assert!(!sim.rec(3).lane_without_slot);
}

#[test]
fn precedence_5_a_step_is_one_chunk_on_absolute_boundaries_plus_a_token_per_decoder() {
    let mut sim = batch(3, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 50, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 50, None);
    sim.arrive(0.5, 3, p(1000, 3), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    let mixed = sim.log.iter().any(|(_, a)| {
        matches!(a, Action::Step(s) if s.chunk.as_ref().is_some_and(|c| c.request.0 == 3) && s.decode.len() == 2)
    });
    assert!(mixed, "a chunk rides with the decodes");
    for (_, r) in sim.chunks() {
        assert!(r.end % 256 == 0 || r.end == 300 || r.end == 1000, "{r:?}");
    }
}

// ---------------------------------------------------------------- R1

#[test]
fn a_free_slot_goes_to_the_highest_priority_waiting() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 100, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 120, None);
    sim.arrive(0.1, 3, p(300, 3), 0, 5, None);
    sim.arrive(0.2, 4, p(300, 4), 5, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(4)).unwrap() < sim.pos(is_assign(3)).unwrap());
}

#[test]
fn equal_priorities_take_free_slots_in_arrival_order() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 100, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 120, None);
    sim.arrive(0.1, 3, p(300, 3), 0, 5, None);
    sim.arrive(0.2, 4, p(300, 4), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(3)).unwrap() < sim.pos(is_assign(4)).unwrap());
}

#[test]
fn the_slot_chosen_is_the_free_one_holding_the_longest_prefix() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, prompt(1, 900, 1000, 1), 0, 5, None);
    sim.arrive(0.0, 2, prompt(2, 900, 1000, 2), 0, 5, None);
    sim.arrive(10.0, 3, prompt(2, 900, 1200, 3), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    let (seq2, _) = assigned_seq(&sim, 2);
    let (seq3, keep) = assigned_seq(&sim, 3);
    assert_eq!(seq3, seq2);
    assert_eq!(keep, 900);
    assert_eq!(sim.rec(3).chunks[0].start, 900);
    let Some((_, Action::Finish { stats, .. })) = sim.rec(3).ends.first() else {
        panic!("not finished")
    };
    assert_eq!(
        (stats.prompt_tokens_held, stats.prompt_tokens_read),
        (900, 300)
    );
}

#[test]
fn without_a_prefix_an_empty_slot_goes_before_a_conversation() {
    let mut sim = batch(3, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 5, None);
    sim.arrive(5.0, 2, p(300, 2), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert_ne!(assigned_seq(&sim, 1).0, assigned_seq(&sim, 2).0);
}

#[test]
fn else_the_least_recently_used_conversation_is_overwritten() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 5, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 50, None);
    sim.arrive(10.0, 3, p(300, 3), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(assigned_seq(&sim, 3).0, assigned_seq(&sim, 1).0);
}

/// A fresh request that shares only a short template header with two free conversations, then
/// a follow-up of the more recent one: returns (the fresh one's slot, the slot the old
/// conversation was in, the follow-up's kept tokens, the longer conversation's length).
fn fresh_beside_two_conversations(shared: u32) -> (SeqId, SeqId, u32, u32) {
    let mut sim = batch(2, 256);
    // B's conversation lands in the first slot, A's in the second; B then gets a second turn,
    // so A's is the least recently used when the fresh request arrives.
    sim.arrive(0.0, 1, prompt(1, shared, 2000, 1), 0, 5, None);
    sim.arrive(0.1, 2, prompt(1, shared, 1000, 2), 0, 5, None);
    sim.follow_up(20.0, 3, 1, prompt(9, 0, 40, 3), 0, 5);
    sim.arrive(40.0, 4, prompt(1, shared, 1000, 4), 0, 5, None);
    sim.follow_up(40.5, 5, 3, prompt(9, 0, 40, 5), 0, 5);
    sim.run(200.0);
    sim.check_end();
    // both turns' prompts and outputs, less the last sampled token (never decoded into the cache)
    let conversation_len = 2000 + 5 + 40 + 5 - 1;
    (
        assigned_seq(&sim, 4).0,
        assigned_seq(&sim, 2).0,
        assigned_seq(&sim, 5).1,
        conversation_len,
    )
}

/// Regression (found by `bench followup-vs-fresh`, round 2): a fresh prompt whose only common
/// prefix was a 24-token template header took the first slot with that prefix, overwriting a
/// 2,400-token conversation whose follow-up arrived a second later and read it all again.
#[test]
fn a_prefix_shorter_than_a_block_does_not_choose_the_slot_the_least_recently_used_is_overwritten() {
    let (fresh, old, follow_up_kept, conversation_len) = fresh_beside_two_conversations(24);
    assert_eq!(
        fresh, old,
        "the fresh request overwrote the recent conversation"
    );
    assert!(follow_up_kept >= conversation_len, "{follow_up_kept}");
}

/// Regression (review of the fix above): the follow-up of a conversation shorter than a block
/// must still take its own slot, not overwrite the least recently used (long) conversation.
#[test]
fn the_follow_up_of_a_conversation_shorter_than_a_block_keeps_its_slot() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, prompt(1, 0, 2000, 1), 0, 5, None);
    sim.arrive(10.0, 2, prompt(2, 0, 30, 2), 0, 5, None);
    sim.follow_up(20.0, 3, 2, prompt(9, 0, 10, 3), 0, 5);
    sim.follow_up(30.0, 4, 1, prompt(9, 0, 10, 4), 0, 5);
    sim.run(200.0);
    sim.check_end();
    let (short_slot, _) = assigned_seq(&sim, 2);
    let (follow_up_slot, follow_up_kept) = assigned_seq(&sim, 3);
    assert_eq!(follow_up_slot, short_slot);
    assert_eq!(follow_up_kept, 30 + 5 - 1);
    // the long conversation was not overwritten: its own follow-up reads only its new tokens
    assert_eq!(assigned_seq(&sim, 4).1, 2000 + 5 - 1);
}

#[test]
fn between_conversations_offering_the_same_prefix_the_least_recently_used_is_overwritten() {
    let (fresh, old, follow_up_kept, conversation_len) = fresh_beside_two_conversations(200);
    assert_eq!(
        fresh, old,
        "the fresh request overwrote the recent conversation"
    );
    assert!(follow_up_kept >= conversation_len, "{follow_up_kept}");
}

// ---------------------------------------------------------------- R2

#[test]
fn the_lane_goes_to_the_highest_priority_slot_holder() {
    let mut sim = batch(3, 256);
    sim.arrive(0.0, 1, p(1000, 1), 9, 5, None); // reads first, never gives way to lower
    sim.arrive(0.1, 2, p(2000, 2), 0, 5, None);
    sim.arrive(0.2, 3, p(2000, 3), 5, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.chunks()[sim.last_chunk(1) + 1].0, 3);
    assert!(sim.last_chunk(3) < sim.first_chunk(2));
}

#[test]
fn the_reader_keeps_the_lane_against_equals() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(2000, 1), 0, 5, None);
    sim.arrive(0.1, 2, p(2000, 2), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 0);
}

// ---------------------------------------------------------------- R3

#[test]
fn a_long_read_gives_way_to_a_higher_priority() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(5000, 2), 5, 5, None);
    sim.run(100.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.give_ways_higher_priority, 1);
    // it gives way at the very next boundary: request 1 read two chunks
    assert_eq!(sim.first_chunk(2), 2);
    assert!(sim.ttft(2) < sim.ttft(1));
}

#[test]
fn a_read_never_gives_way_to_a_lower_priority() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(5000, 1), 5, 5, None);
    sim.arrive(0.3, 2, p(100, 2), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn an_equal_read_gives_way_to_one_with_half_as_much_left() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(300, 2), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 1);
    assert_eq!(sim.first_chunk(2), 2);
}

#[test]
fn an_equal_read_keeps_the_lane_against_more_than_half_its_left() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(2400, 2), 0, 5, None); // 2 × 2400 > 5000 - 512
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn a_reader_that_used_its_yields_keeps_the_lane() {
    let mut sim = batch(4, 256);
    sim.arrive(0.0, 1, p(10_000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(200, 2), 0, 5, None);
    sim.arrive(1.0, 3, p(200, 3), 0, 5, None);
    sim.arrive(2.0, 4, p(200, 4), 5, 5, None); // even a higher priority
    sim.run(100.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.give_ways_shorter_left, 2);
    assert_eq!(c.give_ways_higher_priority, 0);
    assert!(sim.first_chunk(4) > sim.last_chunk(1));
    assert_eq!(sim.max_yields_seen, 2);
}

#[test]
fn no_give_way_with_one_chunk_or_less_left() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(600, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(100, 2), 9, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn give_way_off_never_gives_way() {
    let s = SchedulerSettings {
        give_way: GiveWay::Off,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(2, 256));
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(300, 2), 9, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn a_solo_read_gives_way_by_parking_its_part_and_reads_nothing_twice() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(300, 2), 0, 20, None);
    sim.run(100.0);
    sim.check_end(); // includes: no prompt token read twice, KV continuity
    let park = sim.pos(is_park(1)).unwrap();
    assert!(park < sim.pos(is_assign(2)).unwrap());
    assert!(sim.pos(is_restore(1)).unwrap() > sim.pos(is_release(2)).unwrap());
    assert_eq!(sim.rec(1).chunks[2].start, 512);
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.read_parks, c.read_restores, c.pauses), (1, 1, 0));
}

#[test]
fn a_read_that_gave_way_continues_on_the_boundaries_of_an_uninterrupted_read() {
    let mut sim = batch(3, 256);
    // a follow-up holding 300 tokens starts off-boundary: 300..512, then multiples of 256
    sim.arrive(0.0, 1, prompt(1, 300, 400, 1), 0, 5, None);
    sim.arrive(5.0, 2, prompt(1, 300, 6000, 2), 0, 5, None);
    sim.arrive(5.7, 3, p(300, 3), 0, 5, None);
    sim.arrive(6.5, 4, p(300, 4), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    let chunks = &sim.rec(2).chunks;
    assert_eq!(chunks[0], 300..512);
    for w in chunks.windows(2) {
        assert_eq!(w[0].end, w[1].start);
    }
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c.end % 256, 0);
    }
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 2);
}

// ---------------------------------------------------------------- R4

#[test]
fn a_read_that_gave_way_queues_behind_equals_that_were_waiting_for_the_lane() {
    let mut sim = batch(3, 256);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.1, 2, p(5000, 2), 0, 5, None);
    sim.arrive(0.3, 3, p(200, 3), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    let chunks = sim.chunks();
    let after_short = sim.first_chunk(3) + 1;
    assert_eq!(chunks[after_short].0, 2, "no instant re-grab by request 1");
}

// ---------------------------------------------------------------- R5

#[test]
fn a_request_waiting_for_a_slot_never_holds_the_lane() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(3000, 1), 0, 5, None);
    sim.arrive(0.25, 2, p(3000, 2), 0, 5, None);
    sim.arrive(0.5, 3, p(100, 3), 0, 5, None);
    sim.run(100.0);
    sim.check_end(); // every chunk went to the holder of its slot
    for id in 1..=3 {
        assert!(!sim.rec(id).lane_without_slot);
    }
}

// ---------------------------------------------------------------- R6

#[test]
fn batch_mode_never_pauses_a_decoding_request() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 300, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 300, None);
    sim.arrive(6.0, 3, p(100, 3), 100, 5, None);
    sim.run(200.0);
    sim.check_end();
    assert_eq!(sim.count(|a| matches!(a, Action::Park { .. })), 0);
    assert!(sim.rec(3).first_assign.unwrap().as_secs_f64() > 15.0);
}

// ---------------------------------------------------------------- R7

#[test]
fn solo_priority_pauses_a_decoding_request_only_after_the_quantum() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 5, None);
    sim.run(200.0);
    sim.check_end();
    let t = sim.time_of(is_park(1)).unwrap();
    assert!((5.0..5.1).contains(&t), "paused at {t}");
}

#[test]
fn a_read_is_not_paused_by_r7() {
    let s = SchedulerSettings {
        solo_priority: true,
        yields_max: 0,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(0.0, 1, p(12_000, 1), 0, 400, None); // 12 s of reading
    sim.arrive(1.0, 2, p(300, 2), 5, 5, None);
    sim.run(200.0);
    sim.check_end();
    let park = sim.pos(is_park(1)).unwrap();
    let first_token = sim.pos(is_deliver(1)).unwrap();
    assert!(park > first_token);
}

#[test]
fn a_paused_request_resumes_ahead_of_fresh_equals() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 40, None);
    sim.arrive(5.5, 3, p(300, 3), 0, 5, None);
    sim.run(200.0);
    sim.check_end();
    assert!(sim.pos(is_restore(1)).unwrap() < sim.pos(is_assign(3)).unwrap());
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
    sim.arrive(0.0, 1, p(300, 1), 0, 200, None);
    for i in 0..20 {
        sim.arrive(
            0.5 + f64::from(i) * 0.3,
            10 + u64::from(i),
            p(100, 10 + i),
            5,
            2,
            None,
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

// ---------------------------------------------------------------- R8

#[test]
fn a_pause_loses_nothing_and_resumes_from_the_exact_tokens() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(700, 1), 0, 600, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 30, None);
    sim.arrive(12.0, 3, p(300, 3), 5, 30, None);
    sim.run(300.0);
    sim.check_end(); // delivered == sampled in order, KV continuous across park/restore
    assert_eq!(sim.rec(1).delivered.len(), 600);
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.pauses, c.resumes, c.processed_prefix_losses), (2, 2, 0));
    assert_eq!(sim.prefix_losses, 0);
}

// ---------------------------------------------------------------- R9

#[test]
fn cancelling_a_waiting_request_sends_nothing_to_the_engine() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 100, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.cancel_at(1.0, 2);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(2)).is_none());
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Cancelled));
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.waiting, 1);
}

#[test]
fn cancelling_a_reader_releases_its_slot_at_the_next_boundary() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.1, 2, p(5000, 2), 0, 5, None);
    sim.cancel_at(0.3, 1);
    sim.run(100.0);
    sim.check_end();
    let t = sim.time_of(is_release(1)).unwrap();
    assert!((0.5..0.52).contains(&t), "released at {t}");
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.reading, 1);
}

#[test]
fn cancelling_a_decoder_stops_its_tokens_and_others_go_on() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 500, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 100, None);
    sim.cancel_at(2.0, 1);
    sim.run(100.0);
    sim.check_end();
    let n = sim.rec(1).delivered.len();
    assert!(n > 10 && n < 500);
    assert_eq!(sim.rec(2).delivered.len(), 100);
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.decoding, 1);
}

#[test]
fn cancelling_a_parked_request_drops_its_parked_state() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 100, None);
    sim.cancel_at(6.0, 1);
    sim.run(100.0);
    sim.check_end(); // engine holds no parked state
    assert!(
        sim.pos(|a| matches!(a, Action::DropParked { request, .. } if request.0 == 1))
            .is_some()
    );
    assert!(sim.pos(is_restore(1)).is_none());
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.parked, 1);
}

// ---------------------------------------------------------------- R10

#[test]
fn engine_death_fails_what_it_held_keeps_the_waiting_and_restarts() {
    let mut sim = batch(2, 256);
    sim.arrive(0.0, 1, p(300, 1), 0, 500, None);
    sim.arrive(0.0, 2, p(300, 2), 0, 500, None);
    sim.arrive(0.1, 3, p(300, 3), 0, 5, None);
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
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 400, None);
    sim.kill_engine_at(8.0);
    sim.arrive(9.0, 3, p(300, 3), 0, 5, None);
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
    sim.arrive(0.0, 1, p(300, 1), 0, 500, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.kill_engine_at(1.0);
    sim.arrive(60.0, 3, p(300, 3), 0, 5, None);
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
    sim.arrive(0.0, 1, p(300, 1), 0, 500, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.event_at(2.0, Event::RestartRequested);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.failed_with(1), Some(FailKind::EngineRestarted));
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
}

// ---------------------------------------------------------------- R11

#[test]
fn a_full_queue_refuses_with_retry_after() {
    let s = SchedulerSettings {
        queue_max: 2,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    for i in 0..4 {
        sim.arrive(0.0, i, p(300, i as u32), 0, 5, None);
    }
    sim.run(100.0);
    sim.check_end();
    // 0 takes the slot, 1 and 2 wait, 3 is refused
    assert_eq!(
        sim.refused_with(3),
        Some(Refusal::QueueFull {
            retry_after_secs: 5
        })
    );
}

#[test]
fn a_prompt_that_does_not_fit_the_context_is_refused_with_both_numbers() {
    let mut f = facts(1, 256);
    f.context_tokens = 4096;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.run(10.0);
    sim.check_end();
    assert_eq!(
        sim.refused_with(1),
        Some(Refusal::PromptTooLong {
            prompt_tokens: 5000,
            max_context_tokens: 4095
        })
    );
}

#[test]
fn max_tokens_over_the_room_is_clamped_and_ends_with_length() {
    let mut f = facts(1, 256);
    f.context_tokens = 1000;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(0.0, 1, p(900, 1), 0, 10_000, Some(32_000));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Length));
    assert_eq!(sim.rec(1).delivered.len(), 100);
}

#[test]
fn max_tokens_over_context_reject_refuses_the_request() {
    let mut f = facts(1, 256);
    f.context_tokens = 1000;
    let s = SchedulerSettings {
        max_tokens_over_context: MaxTokensOverContext::Reject,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(0.0, 1, p(900, 1), 0, 5, Some(32_000));
    sim.run(10.0);
    sim.check_end();
    assert_eq!(
        sim.refused_with(1),
        Some(Refusal::MaxTokensOverContext {
            max_tokens: 32_000,
            room_tokens: 100
        })
    );
}

// ---------------------------------------------------------------- R12

#[test]
fn turning_solo_priority_off_resumes_the_parked_in_order_and_starts_no_new_pause() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 400, None);
    sim.arrive(7.0, 3, p(300, 3), 9, 200, None);
    // by 13 s: 1 paused at 5 s for 2, 2 paused at ~12 s for 3
    sim.event_at(13.0, Event::SettingsChanged(Box::default()));
    sim.arrive(14.0, 4, p(300, 4), 50, 5, None);
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
    sim.arrive(0.0, 1, p(5000, 1), 0, 5, None);
    sim.arrive(0.3, 2, p(300, 2), 0, 5, None);
    sim.event_at(2.0, Event::SettingsChanged(Box::default()));
    sim.arrive(2.1, 3, p(300, 3), 0, 5, None);
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

// ---------------------------------------------------------------- held for sure, KV, aging

#[test]
fn held_for_sure_on_a_checkpoint_engine_is_cut_at_the_last_turn_token() {
    for (trims, expect) in [(true, 900), (false, 499)] {
        let mut f = facts(2, 256);
        f.trims_at_any_token = trims;
        let mut sim = with(SchedulerSettings::default(), f);
        sim.arrive(0.0, 1, prompt(1, 900, 1000, 1), 0, 5, None);
        sim.arrive(5.0, 2, prompt(1, 900, 1200, 2), 0, 5, None);
        sim.run(100.0);
        sim.check_end();
        assert_eq!(
            assigned_seq(&sim, 2).1,
            expect,
            "trims_at_any_token: {trims}"
        );
    }
}

#[test]
fn a_follow_up_keeps_the_whole_conversation_even_on_a_checkpoint_engine() {
    let mut f = facts(1, 256);
    f.trims_at_any_token = false;
    let mut sim = with(SchedulerSettings::default(), f);
    let first = prompt(1, 900, 1000, 1);
    sim.arrive(0.0, 1, first.clone(), 0, 7, None);
    sim.run(10.0);
    let mut follow = first;
    follow.extend_from_slice(&sim.rec(1).delivered);
    follow.extend(prompt(9, 0, 24, 9));
    sim.arrive(11.0, 2, follow, 0, 5, None);
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
    sim.arrive(0.0, 1, first.clone(), 0, 10, None);
    sim.arrive(5.0, 2, p(2400, 2), 0, 10, None);
    let mut follow = first;
    follow.extend(prompt(9, 0, 300, 9));
    sim.arrive(20.0, 3, follow, 0, 5, None);
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
    sim.arrive(0.0, 1, p(300, 1), 0, 2000, None); // 100 s of decoding
    sim.arrive(0.1, 2, p(300, 2), 3, 5, None);
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
        sim.arrive(0.0, 1, p(300, 1), 0, 2000, None);
        sim.arrive_full(0.1, 2, p(300, 2), 0, false, 5, None);
        sim.arrive_full(0.1, 3, p(300, 3), 0, true, 5, None);
        sim.arrive_full(0.1, 4, p(5000, 4), 0, false, 5, None);
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
    sim.arrive(0.0, 1, p(3000, 1), 0, 5, None);
    sim.arrive(0.1, 2, p(300, 2), 2, 5, None);
    sim.arrive(0.1, 3, p(300, 3), 0, 5, None);
    sim.run(0.2);
    let snap = sim.s.snapshot(sim.now);
    let v = serde_json::to_value(&snap).unwrap();
    assert_eq!(v["mode"], "batch");
    assert_eq!(v["slots"].as_array().unwrap().len(), 2);
    assert_eq!(v["waiting"][0]["tokens_left_to_read"], 300);
    assert!(v["counters"]["give_ways_higher_priority"].is_u64());
}

// ---------------------------------------------------------------- review regressions

#[test]
fn lower_first_priorities_are_clamped_once_and_keep_their_order() {
    let s = SchedulerSettings {
        priority_range: PriorityRange { min: 0, max: 10 },
        priority_order: PriorityOrder::LowerFirst,
        ..SchedulerSettings::default()
    };
    let first = resolve_priority(Some(1), &s);
    let third = resolve_priority(Some(3), &s);
    let busy = resolve_priority(Some(0), &s);
    assert_eq!((first, third), (-1, -3));
    let mut sim = with(s, facts(1, 256));
    sim.arrive(0.0, 1, p(300, 1), busy, 20, None);
    sim.arrive(0.1, 3, p(300, 3), third, 5, None);
    sim.arrive(0.2, 2, p(300, 2), first, 5, None);
    sim.run(100.0);
    sim.check_end();
    // the resolved values are kept as they are (not clamped again to 0)
    assert_eq!(sim.rec(2).priority, -1);
    assert_eq!(sim.rec(3).priority, -3);
    // user priority 1 goes before user priority 3, although it arrived later
    assert!(sim.pos(is_assign(2)).unwrap() < sim.pos(is_assign(3)).unwrap());
}

#[test]
fn a_smaller_context_at_a_new_handshake_fails_waiting_prompts_that_no_longer_fit_and_clamps_max_tokens()
 {
    let mut f = facts(1, 256);
    f.context_tokens = 4096;
    let mut sim = with(SchedulerSettings::default(), f.clone());
    sim.arrive(0.0, 1, p(300, 1), 0, 2000, None);
    sim.arrive(0.1, 2, p(3000, 2), 0, 5, None);
    sim.arrive(0.1, 3, p(500, 3), 0, 5000, None);
    sim.arrive(0.1, 4, p(1999, 4), 0, 5000, Some(3000));
    sim.event_at(2.0, Event::RestartRequested);
    f.context_tokens = 2000;
    sim.next_facts = Some(f);
    sim.run(500.0);
    sim.check_end();
    assert_eq!(sim.failed_with(1), Some(FailKind::EngineRestarted));
    assert_eq!(
        sim.failed_with(2),
        Some(FailKind::PromptTooLong {
            prompt_tokens: 3000,
            max_context_tokens: 1999
        })
    );
    // max_tokens follows the new room: 2000 - 500 and 2000 - 1999
    assert_eq!(sim.rec(3).finish_reason(), Some(FinishReason::Length));
    assert_eq!(sim.rec(3).delivered.len(), 1500);
    assert_eq!(sim.rec(4).finish_reason(), Some(FinishReason::Length));
    assert_eq!(sim.rec(4).delivered.len(), 1);
}

fn restart_delays(sim: &super::Sim) -> Vec<f64> {
    sim.log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::RestartEngine { delay_secs, .. } => Some(*delay_secs),
            _ => None,
        })
        .collect()
}

#[test]
fn an_engine_death_during_a_start_is_a_failed_start_and_a_restart_request_then_starts_nothing() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 500, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.kill_engine_at(1.0); // start 1 at 1.0, due at 3.0
    sim.event_at(2.0, Event::EngineDied); // start 2 after 1 s of backoff, due at 5.0
    sim.event_at(2.5, Event::RestartRequested);
    sim.run(100.0);
    assert_eq!(restart_delays(&sim), vec![0.0, 1.0]);
    assert_eq!(
        sim.diagnostics,
        vec![crate::events::RESTART_DURING_START.to_string()]
    );
    sim.diagnostics.clear();
    sim.check_end();
    assert_eq!(sim.failed_with(1), Some(FailKind::EngineDied));
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    assert!(sim.rec(2).first_assign.unwrap().as_secs_f64() >= 5.0);
}

#[test]
fn three_engine_deaths_while_starting_fail_the_waiting_with_503() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 500, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.kill_engine_at(1.0);
    for at in [2.0, 3.0, 4.0] {
        sim.event_at(at, Event::EngineDied);
    }
    sim.run(4.5);
    assert_eq!(restart_delays(&sim), vec![0.0, 1.0, 2.0]);
    assert!(matches!(
        sim.failed_with(2),
        Some(FailKind::EngineUnavailable { .. })
    ));
    assert!(!sim.s.has_work());
    assert!(sim.diagnostics.is_empty());
}

#[test]
fn a_duplicate_request_id_emits_no_action_and_leaves_the_live_request_untouched() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 20, None);
    sim.run(0.5);
    let before = sim.log.len();
    sim.feed(Event::Arrived(crate::NewRequest {
        id: RequestId(1),
        prompt: p(100, 9),
        priority: 5,
        priority_given: true,
        max_tokens: Some(1),
    }));
    assert_eq!(sim.log.len(), before, "the duplicate produced actions");
    assert_eq!(sim.diagnostics.len(), 1);
    assert!(sim.diagnostics[0].contains("req-1"));
    sim.diagnostics.clear();
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.count(|a| matches!(a, Action::Refuse { .. })), 0);
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.rec(1).delivered.len(), 20);
    assert_eq!(sim.rec(1).priority, 0);
    assert_eq!(sim.s.snapshot(sim.now).counters.refusals, 0);
}

#[test]
fn a_prompt_exactly_as_long_as_the_context_is_refused_with_the_true_maximum() {
    let mut f = facts(1, 256);
    f.context_tokens = 4096;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(0.0, 1, p(4096, 1), 0, 5, None);
    sim.arrive(0.0, 2, p(4095, 2), 0, 5, None);
    sim.run(100.0);
    sim.check_end();
    assert_eq!(
        sim.refused_with(1),
        Some(Refusal::PromptTooLong {
            prompt_tokens: 4096,
            max_context_tokens: 4095
        })
    );
    // context - 1 is accepted: room for exactly one output token
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Length));
    assert_eq!(sim.rec(2).delivered.len(), 1);
}

#[test]
fn a_chunk_starting_below_the_furthest_position_read_counts_the_tokens_read_again() {
    use crate::lifecycle::reread_tokens;
    assert_eq!(reread_tokens(0, &(0..256)), 0);
    assert_eq!(reread_tokens(256, &(256..512)), 0);
    assert_eq!(reread_tokens(512, &(256..512)), 256);
    assert_eq!(reread_tokens(512, &(256..768)), 256);
    assert_eq!(reread_tokens(600, &(256..512)), 256);
    assert_eq!(reread_tokens(300, &(512..768)), 0);
    // through the scheduler: a step whose chunk starts below what was read adds to the counter
    let mut sched = crate::Scheduler::new(SchedulerSettings::default(), facts(1, 256)).unwrap();
    let t = std::time::Duration::ZERO;
    let out = sched.handle(
        Event::Arrived(crate::NewRequest {
            id: RequestId(1),
            prompt: p(600, 1),
            priority: 0,
            priority_given: true,
            max_tokens: None,
        }),
        t,
    );
    assert!(out.actions.iter().any(|a| matches!(a, Action::Step(_))));
    sched.handle(Event::StepDone(vec![]), t); // 0..256 read, 256..512 outstanding
    assert_eq!(sched.snapshot(t).counters.processed_prefix_losses, 0);
    let chunk = sched
        .outstanding
        .as_mut()
        .and_then(|s| s.chunk.as_mut())
        .unwrap();
    assert_eq!(chunk.tokens, 256..512);
    chunk.tokens = 0..512; // as if the cache had lost the first chunk
    sched.handle(Event::StepDone(vec![]), t);
    assert_eq!(sched.snapshot(t).counters.processed_prefix_losses, 256);
}

#[test]
fn restoring_a_read_from_a_spare_never_moves_that_read_itself_to_host_ram() {
    // A (8000) gives way to B (3000), which gives way to C (300): A and B sit in the two
    // spares. A comes back first (older give-way ticket) but needs B's cells: B goes to host
    // RAM, A comes back from its spare.
    let mut f = facts(1, 256);
    f.spare_seqs = 2;
    f.kv_cells_total = 9000;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(0.0, 1, p(8000, 1), 0, 5, None);
    sim.arrive(1.0, 2, p(3000, 2), 0, 5, None);
    sim.arrive(2.1, 3, p(300, 3), 0, 5, None);
    sim.run(200.0);
    sim.check_end();
    let first_restore_of_a = sim.pos(is_restore(1)).expect("A never restored");
    assert!(matches!(
        sim.log[first_restore_of_a].1,
        Action::Restore {
            from: ParkPlace::Spare(_),
            ..
        }
    ));
    assert!(!sim.log[..first_restore_of_a].iter().any(|(_, a)| matches!(
        a,
        Action::Park { request, to: ParkPlace::HostRam, .. } if request.0 == 1
    )));
    assert!(sim.log[..first_restore_of_a].iter().any(|(_, a)| matches!(
        a,
        Action::Park { request, to: ParkPlace::HostRam, .. } if request.0 == 2
    )));
}

#[test]
fn a_reprioritised_waiting_request_takes_the_next_free_slot_ahead_of_earlier_arrivals() {
    let mut sim = solo(256, false);
    sim.arrive(0.0, 1, p(300, 1), 0, 100, None);
    sim.arrive(0.1, 2, p(300, 2), 0, 5, None);
    sim.arrive(0.2, 3, p(300, 3), 0, 5, None);
    sim.event_at(
        0.3,
        Event::Reprioritised {
            request: RequestId(3),
            priority: 4,
        },
    );
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(3)).unwrap() < sim.pos(is_assign(2)).unwrap());
}

#[test]
fn a_reprioritised_parked_request_shows_its_new_priority_and_loses_its_boost() {
    let mut sim = solo(256, true);
    sim.arrive(0.0, 1, p(300, 1), 0, 400, None);
    sim.arrive(1.0, 2, p(300, 2), 5, 200, None);
    sim.run(6.0);
    let before = sim.s.snapshot(sim.now);
    assert_eq!(before.parked.len(), 1, "{before:?}");
    assert_eq!(before.parked[0].request_id, RequestId(1));
    assert_eq!(before.parked[0].pauses, 1);
    sim.feed(Event::Reprioritised {
        request: RequestId(1),
        priority: -7,
    });
    let after = sim.s.snapshot(sim.now);
    assert_eq!(after.parked[0].priority, -7);
    assert_eq!(after.parked[0].effective_priority, -7);
    sim.run(200.0);
    sim.check_end();
}

#[test]
fn a_conversation_the_engine_evicted_is_never_restored() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 3000;
    f.context_tokens = 3000;
    let mut sim = with(SchedulerSettings::default(), f);
    let first = prompt(1, 1000, 1000, 1);
    sim.arrive(0.0, 1, first.clone(), 0, 10, None);
    sim.arrive(5.0, 2, p(2400, 2), 0, 10, None);
    let mut follow = first;
    follow.extend(prompt(9, 0, 300, 9));
    sim.arrive(20.0, 3, follow, 0, 5, None);
    sim.run(15.0);
    assert_eq!(sim.s.snapshot(sim.now).host_cached_conversations, 1);
    let keys = (0..8).map(ConversationId).collect();
    sim.feed(Event::ConversationsEvicted(keys));
    assert_eq!(sim.s.snapshot(sim.now).host_cached_conversations, 0);
    sim.run(100.0);
    sim.check_end();
    assert!(
        sim.pos(|a| matches!(a, Action::RestoreConversation { .. }))
            .is_none()
    );
}
