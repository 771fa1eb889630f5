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

#[test]
fn the_slot_chosen_is_the_free_one_holding_the_longest_prefix() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(5));
    sim.arrive(Arrival::new(2, prompt(2, 900, 1000, 2)).output(5));
    sim.arrive(Arrival::new(3, prompt(2, 900, 1200, 3)).at(10.0).output(5));
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
    sim.arrive(Arrival::new(1, p(300, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(5.0).output(5));
    sim.run(100.0);
    sim.check_end();
    assert_ne!(assigned_seq(&sim, 1).0, assigned_seq(&sim, 2).0);
}

#[test]
fn else_the_least_recently_used_conversation_is_overwritten() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).output(50));
    sim.arrive(Arrival::new(3, p(300, 3)).at(10.0).output(5));
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

#[test]
fn between_conversations_offering_the_same_prefix_the_least_recently_used_is_overwritten() {
    let (fresh, old, follow_up_kept, conversation_len) = fresh_beside_two_conversations(200);
    assert_eq!(
        fresh, old,
        "the fresh request overwrote the recent conversation"
    );
    assert!(follow_up_kept >= conversation_len, "{follow_up_kept}");
}
