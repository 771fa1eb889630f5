//! Which source a waiting request's held prefix comes from (SCHEDULING.md, R1):
//! the longest usable prefix; at equal length a kept conversation, then a live request's
//! sequence, then host RAM; among kept conversations the least recently used, among host-RAM
//! ones the oldest (each time the one that would be given up first).

use super::*;

/// The conversation id `seq`'s idle conversation was moved to host RAM under.
fn evicted_to_host(sim: &Sim, seq: SeqId) -> ConversationId {
    sim.log
        .iter()
        .find_map(|(_, a)| match a {
            Action::EvictConversation {
                seq: s,
                to_cache: Some(id),
            } if *s == seq => Some(*id),
            _ => None,
        })
        .expect("never moved to host RAM")
}

#[test]
fn among_kept_conversations_with_equally_long_prefixes_the_least_recently_used_is_continued() {
    // either request's conversation may be the older one (and so in the lower or the higher
    // sequence): the older is continued either way
    for first_done in [1u64, 2] {
        let mut sim = batch(2, 256);
        let (out1, out2) = if first_done == 1 { (1, 100) } else { (100, 1) };
        // the same 900-token system prompt, different questions
        sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(out1));
        sim.arrive(Arrival::new(2, prompt(1, 900, 1000, 2)).output(out2));
        sim.arrive(Arrival::new(3, prompt(1, 900, 1100, 3)).at(20.0).output(5));
        sim.run(100.0);
        sim.check_end();
        let older = assigned_seq(&sim, first_done).0;
        let copied_from: Vec<(SeqId, u32)> = sim
            .log
            .iter()
            .filter_map(|(_, a)| match a {
                Action::CopyPrefix {
                    from,
                    tokens,
                    for_request,
                    ..
                } if for_request.0 == 3 => Some((*from, *tokens)),
                _ => None,
            })
            .collect();
        assert_eq!(
            copied_from,
            [(older, 900)],
            "request {first_done}'s conversation is the older"
        );
    }
}

#[test]
fn among_host_ram_conversations_with_equally_long_prefixes_the_oldest_is_restored() {
    let mut f = facts(2, 256);
    f.kv_cells_total = 3000;
    f.context_tokens = 3000;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(1)); // kept first
    sim.arrive(Arrival::new(2, prompt(1, 900, 1000, 2)).output(1));
    // needs nearly the whole pool: both conversations go to host RAM, request 1's first
    sim.arrive(Arrival::new(3, p(2400, 3)).at(5.0).output(1));
    sim.arrive(Arrival::new(4, prompt(1, 900, 1100, 4)).at(20.0).output(5));
    sim.run(100.0);
    sim.check_end();
    let older = evicted_to_host(&sim, assigned_seq(&sim, 1).0);
    let newer = evicted_to_host(&sim, assigned_seq(&sim, 2).0);
    assert!(
        sim.pos(
            |a| matches!(a, Action::EvictConversation { to_cache: Some(c), .. } if *c == older)
        ) < sim.pos(
            |a| matches!(a, Action::EvictConversation { to_cache: Some(c), .. } if *c == newer)
        )
    );
    let restored: Vec<ConversationId> = sim
        .log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::RestoreConversation {
                conversation,
                for_request,
                ..
            } if for_request.0 == 4 => Some(*conversation),
            _ => None,
        })
        .collect();
    assert_eq!(restored, [older]);
    assert_eq!(assigned_seq(&sim, 4).1, 900);
}
