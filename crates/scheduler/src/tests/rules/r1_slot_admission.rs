//! R1 slot admission.

use super::*;

#[test]
fn a_free_slot_goes_to_the_highest_priority_waiting() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(100));
    sim.arrive(Arrival::new(2, p(300, 2)).output(120));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).output(5));
    sim.arrive(Arrival::new(4, p(300, 4)).at(0.2).priority(5).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(4)).unwrap() < sim.pos(is_assign(3)).unwrap());
}

#[test]
fn equal_priorities_take_free_slots_in_arrival_order() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(100));
    sim.arrive(Arrival::new(2, p(300, 2)).output(120));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).output(5));
    sim.arrive(Arrival::new(4, p(300, 4)).at(0.2).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(3)).unwrap() < sim.pos(is_assign(4)).unwrap());
}

/// The sequences that hold a kept conversation at the end, by the request that left it.
fn kept_seqs(sim: &Sim) -> Vec<SeqId> {
    let snapshot = sim.s.snapshot(sim.now);
    snapshot
        .conversations
        .iter()
        .filter_map(|c| c.seq)
        .collect()
}

fn evictions(sim: &Sim) -> usize {
    sim.count(|a| matches!(a, Action::EvictConversation { .. }))
}

#[test]
fn a_request_sharing_part_of_a_kept_conversation_copies_that_prefix_and_the_conversation_survives()
{
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(5));
    sim.arrive(Arrival::new(2, prompt(2, 900, 1000, 2)).output(5));
    sim.arrive(Arrival::new(3, prompt(2, 900, 1200, 3)).at(10.0).output(5));
    sim.run(100.0);
    sim.check_end();
    let (seq2, _) = assigned_seq(&sim, 2);
    let (seq3, keep) = assigned_seq(&sim, 3);
    assert_ne!(seq3, seq2, "the conversation's sequence was taken");
    assert_eq!(keep, 900);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::CopyPrefix { from, to, tokens: 900, .. } if *from == seq2 && *to == seq3
    )));
    assert_eq!(sim.rec(3).chunks[0].start, 900);
    let Some((_, Action::Finish { stats, .. })) = sim.rec(3).ends.first() else {
        panic!("not finished")
    };
    assert_eq!(
        (stats.prompt_tokens_held, stats.prompt_tokens_read),
        (900, 300)
    );
    // all three conversations are kept, each in its own sequence
    assert_eq!(kept_seqs(&sim).len(), 3);
    assert_eq!(evictions(&sim), 0);
}

#[test]
fn a_follow_up_continues_its_whole_conversation_in_that_sequence() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, prompt(1, 0, 1000, 1)).output(5));
    sim.follow_up(10.0, 2, 1, prompt(9, 0, 40, 2), 0, 5);
    sim.run(100.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    let (seq2, keep) = assigned_seq(&sim, 2);
    assert_eq!(seq2, seq1);
    assert_eq!(keep, 1000 + 5 - 1);
    assert_eq!(sim.count(|a| matches!(a, Action::CopyPrefix { .. })), 0);
}

#[test]
fn without_a_prefix_a_request_takes_a_free_sequence_and_overwrites_no_conversation() {
    let mut sim = batch(3, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(5.0).output(5));
    sim.run(100.0);
    sim.check_end();
    assert_ne!(assigned_seq(&sim, 1).0, assigned_seq(&sim, 2).0);
    assert_eq!(kept_seqs(&sim).len(), 2);
}

#[test]
fn when_sequence_ids_run_out_the_least_recently_used_conversation_goes_to_host_ram() {
    // two slots, three sequences: the third request finds one free, the fourth none
    let mut f = facts(2, 256);
    f.sequences = 3;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).output(50));
    sim.arrive(Arrival::new(3, p(300, 3)).at(10.0).output(5));
    sim.arrive(Arrival::new(4, p(300, 4)).at(20.0).output(5));
    sim.run(100.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    assert_ne!(assigned_seq(&sim, 3).0, seq1);
    assert_eq!(assigned_seq(&sim, 4).0, seq1);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::EvictConversation { seq, to_cache: Some(_) } if *seq == seq1
    )));
}

/// A fresh request that shares only a template header (or a system prompt) with two kept
/// conversations, then a follow-up of the more recent one: returns (the fresh one's sequence,
/// the two conversations' sequences, the follow-up's kept tokens, the conversation's length).
fn fresh_beside_two_conversations(shared: u32) -> (Sim, SeqId, [SeqId; 2], u32, u32) {
    let mut sim = batch(2, 256);
    // B's conversation lands first, A's second; B then gets a second turn, so A's is the
    // least recently used when the fresh request arrives.
    sim.arrive(Arrival::new(1, prompt(1, shared, 2000, 1)).output(5));
    sim.arrive(
        Arrival::new(2, prompt(1, shared, 1000, 2))
            .at(0.1)
            .output(5),
    );
    sim.follow_up(20.0, 3, 1, prompt(9, 0, 40, 3), 0, 5);
    sim.arrive(
        Arrival::new(4, prompt(1, shared, 1000, 4))
            .at(40.0)
            .output(5),
    );
    sim.follow_up(40.5, 5, 3, prompt(9, 0, 40, 5), 0, 5);
    sim.run(200.0);
    sim.check_end();
    // both turns' prompts and outputs, less the last sampled token (never decoded into the cache)
    let conversation_len = 2000 + 5 + 40 + 5 - 1;
    let fresh = assigned_seq(&sim, 4).0;
    let old = [assigned_seq(&sim, 3).0, assigned_seq(&sim, 2).0];
    let kept = assigned_seq(&sim, 5).1;
    (sim, fresh, old, kept, conversation_len)
}

/// Regression (found by `bench followup-vs-fresh`, round 2): a fresh prompt whose only common
/// prefix was a 24-token template header overwrote a 2,400-token conversation whose follow-up
/// arrived a second later and read it all again. Now it overwrites nothing.
#[test]
fn a_fresh_request_sharing_only_a_template_header_overwrites_no_conversation() {
    let (sim, fresh, old, follow_up_kept, conversation_len) = fresh_beside_two_conversations(24);
    assert!(!old.contains(&fresh), "{fresh} overwrote a conversation");
    assert!(follow_up_kept >= conversation_len, "{follow_up_kept}");
    assert_eq!(evictions(&sim), 0);
}

/// Regression (review of the fix above): the follow-up of a conversation shorter than a block
/// must still take its own slot, not overwrite the least recently used (long) conversation.
#[test]
fn the_follow_up_of_a_conversation_shorter_than_a_block_keeps_its_slot() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, prompt(1, 0, 2000, 1)).output(5));
    sim.arrive(Arrival::new(2, prompt(2, 0, 30, 2)).at(10.0).output(5));
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

/// Agents sharing a system prompt share its cells: the fresh request copies the shared prefix
/// (200 tokens, three blocks) and both conversations stay.
#[test]
fn a_fresh_request_sharing_a_system_prompt_copies_it_and_both_conversations_stay() {
    let (sim, fresh, old, follow_up_kept, conversation_len) = fresh_beside_two_conversations(200);
    assert!(!old.contains(&fresh), "{fresh} overwrote a conversation");
    assert!(follow_up_kept >= conversation_len, "{follow_up_kept}");
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::CopyPrefix { to, tokens, .. } if *to == fresh && *tokens >= 192
    )));
    assert_eq!(evictions(&sim), 0);
}
