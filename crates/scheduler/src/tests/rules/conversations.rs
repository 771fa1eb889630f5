//! Conversations keep their own sequences (SCHEDULING.md's vocabulary, R1 and R3's park):
//! parks with room cost no copy, an interrupting request's conversation survives the restore,
//! cells run short in the stated order, and engines that cannot trim share no prefix.

use super::*;

fn parks_to(sim: &Sim, id: u64) -> Vec<ParkPlace> {
    sim.log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::Park { request, to, .. } if request.0 == id => Some(*to),
            _ => None,
        })
        .collect()
}

#[test]
fn a_solo_give_way_with_room_in_the_pool_parks_in_the_sequence_and_copies_nothing() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(3000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).output(5));
    sim.run(100.0);
    sim.check_end();
    let (seq, _) = assigned_seq(&sim, 1);
    assert_eq!(parks_to(&sim, 1), vec![ParkPlace::Pool(seq)]);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::Restore { request, from: ParkPlace::Pool(s), into_seq } if request.0 == 1 && s == into_seq
    )));
    let counters = sim.s.snapshot(sim.now).counters;
    assert_eq!((counters.parks_in_pool, counters.parks_to_host), (1, 0));
}

#[test]
fn a_pause_with_room_in_the_pool_parks_in_the_sequence() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    let (seq, _) = assigned_seq(&sim, 1);
    assert_eq!(parks_to(&sim, 1), vec![ParkPlace::Pool(seq)]);
    assert_eq!(sim.s.snapshot(sim.now).counters.parks_to_host, 0);
}

#[test]
fn a_park_goes_to_host_ram_only_when_its_cells_are_needed() {
    let mut f = facts(1, 256);
    f.kv_cells_total = 700;
    let s = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    assert_eq!(parks_to(&sim, 1), vec![ParkPlace::HostRam]);
    assert_eq!(sim.s.snapshot(sim.now).counters.parks_to_host, 1);
}

/// Regression: restoring a parked stream set the slot empty, dropping the conversation of the
/// request that had interrupted it unsaved; that request's next turn read everything again.
#[test]
fn the_conversation_of_the_request_a_stream_was_paused_for_survives_the_restore() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(1000, 2)).at(1.0).priority(5).output(5));
    // the short request's next turn, after the stream was restored
    sim.follow_up(12.0, 3, 2, prompt(9, 0, 20, 3), 5, 5);
    sim.run(200.0);
    sim.check_end();
    assert!(sim.time_of(is_restore(1)).unwrap() < 12.0);
    let (seq2, _) = assigned_seq(&sim, 2);
    let (seq3, kept) = assigned_seq(&sim, 3);
    assert_eq!(seq3, seq2);
    assert_eq!(
        kept,
        1000 + 5 - 1,
        "the follow-up read its conversation again"
    );
    assert_eq!(
        sim.count(|a| matches!(a, Action::EvictConversation { .. })),
        0
    );
}

#[test]
fn when_cells_run_short_idle_conversations_leave_least_recently_used_first_never_a_running_request()
{
    let mut f = facts(2, 256);
    f.kv_cells_total = 3000;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(Arrival::new(1, p(1000, 1)).output(5)); // kept first: least recently used
    sim.arrive(Arrival::new(2, p(1000, 2)).at(5.0).output(5));
    sim.arrive(Arrival::new(3, p(800, 3)).at(10.0).output(300)); // runs long
    sim.arrive(Arrival::new(4, p(900, 4)).at(11.0).output(5)); // needs cells
    sim.run(200.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    let evicted: Vec<SeqId> = sim
        .log
        .iter()
        .filter_map(|(_, a)| match a {
            Action::EvictConversation { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    // 3's admission moved 1 out (the least recently used), 4's then moved 2 out, while 3
    // ran: the idle conversations made the room, never the running request's cells
    let (seq2, _) = assigned_seq(&sim, 2);
    assert_eq!(evicted, vec![seq1, seq2]);
    let four_in = sim.rec(4).first_assign.unwrap();
    assert!(
        four_in < sim.rec(3).ended_at().unwrap(),
        "4 waited for 3 to end"
    );
    // the running request was never parked for it (batch mode parks nothing, R6)
    assert!(sim.pos(is_park(3)).is_none());
    assert_eq!(sim.rec(3).delivered.len(), 300);
}

#[test]
fn a_request_sharing_a_prefix_with_a_running_one_copies_its_cells() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(300));
    sim.arrive(Arrival::new(2, prompt(1, 900, 1100, 2)).at(2.0).output(5));
    sim.run(200.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    let (seq2, keep) = assigned_seq(&sim, 2);
    assert_ne!(seq1, seq2);
    assert_eq!(keep, 900);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::CopyPrefix { from, to, tokens: 900, .. } if *from == seq1 && *to == seq2
    )));
}

#[test]
fn an_engine_that_cannot_trim_shares_no_prefix_between_sequences() {
    // with checkpoints every 256 tokens, request 1's first 768 would be a usable prefix for
    // request 2 while request 1 runs: still nothing is copied from a live sequence
    for checkpoints in [false, true] {
        let mut f = facts(2, 256);
        f.trims_at_any_token = false;
        f.rewindable_tokens = 0;
        let mut sim = with(SchedulerSettings::default(), f);
        sim.checkpoints = checkpoints;
        sim.checkpoint_step = 256;
        sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(300));
        sim.arrive(Arrival::new(2, prompt(1, 900, 1100, 2)).at(2.0).output(5));
        sim.arrive(Arrival::new(3, prompt(1, 900, 1200, 3)).at(30.0).output(5));
        sim.run(200.0);
        sim.check_end();
        assert_eq!(
            sim.count(|a| matches!(a, Action::CopyPrefix { .. })),
            0,
            "checkpoints: {checkpoints}"
        );
        assert_eq!(assigned_seq(&sim, 2).1, 0, "checkpoints: {checkpoints}");
    }
}

/// A stream parked in its sequence moves to host RAM when the cells are needed after all, and
/// that move counts as a park to host.
#[test]
fn a_stream_parked_in_the_pool_moves_to_host_ram_when_its_cells_are_needed_and_is_counted() {
    let mut f = facts(1, 256);
    f.kv_cells_total = 2000;
    let s = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(500, 1)).output(1000));
    // W fits beside the paused stream (parked in the pool); X, after W, needs its cells
    sim.arrive(Arrival::new(2, p(300, 2)).at(6.0).priority(5).output(20));
    sim.arrive(Arrival::new(3, p(1500, 3)).at(6.5).priority(5).output(5));
    sim.run(300.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.parks_in_pool, c.parks_to_host), (1, 1), "{c:?}");
    assert_eq!(sim.rec(1).delivered.len(), 1000);
}

/// Room is made from conversations that free cells by themselves first: a conversation whose
/// every cell is shared (a copy of another's prefix, cancelled before it read anything) frees
/// nothing while the other holds those cells, so it is not evicted when the other's own tail
/// is enough.
#[test]
fn a_conversation_whose_cells_are_all_shared_is_not_evicted_for_room_its_source_s_tail_gives() {
    let mut f = facts(2, 256);
    // 1,000 (the conversation) + 5,008 (the long read) + 250 free
    f.kv_cells_total = 6258;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        give_way: GiveWay::Off,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(1));
    sim.arrive(Arrival::new(2, p(5000, 2)).at(1.5).output(5)); // holds the lane for 5 s
    // copies request 1's 900-token prefix (208 more cells), waits for the lane, is cancelled:
    // its conversation is those 900 shared cells
    sim.arrive(Arrival::new(3, prompt(1, 900, 1100, 3)).at(1.9).output(5));
    sim.cancel_at(2.5, 3);
    // needs 308 cells, 250 are free: request 1's conversation frees its 100-token tail
    sim.arrive(Arrival::new(4, p(300, 4)).at(3.0).output(5));
    sim.run(100.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    let (seq3, kept) = assigned_seq(&sim, 3);
    assert_eq!(kept, 900);
    assert!(sim.rec(3).chunks.is_empty());
    let before_4 = sim.pos(is_assign(4)).unwrap();
    let evicted: Vec<SeqId> = sim.log[..before_4]
        .iter()
        .filter_map(|(_, a)| match a {
            Action::EvictConversation { seq, .. } => Some(*seq),
            _ => None,
        })
        .collect();
    assert_eq!(evicted, [seq1], "request 3's conversation is in {seq3}");
}
