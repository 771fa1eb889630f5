//! Transient room (SCHEDULING.md, "Transient room"): the plan makes room for the moment a
//! command needs, and the simulated engine refuses what the worker would (a run that planned a
//! refused command fails with the engine's words). The audit's three scenarios.

use super::*;

/// Solo mode over a pool (and context) of `cells` cells, default settings otherwise.
fn solo_pool(cells: u32, settings: SchedulerSettings) -> Sim {
    let mut f = facts(1, 256);
    f.kv_cells_total = cells;
    f.context_tokens = cells;
    with(settings, f)
}

fn keep_of(sim: &Sim, id: u64) -> u32 {
    assigned_seq(sim, id).1
}

/// Audit finding 1: a finished 1,000-token conversation kept, then a 1,488-token prompt with
/// 512 output tokens reserved leaves no cell free. Its 512th token fills the pool's last cell;
/// the step ahead after that step does not fit and is not run (the worker answers "not run";
/// it once was a refusal that lost the engine), and the next share comes from moving the kept
/// conversation to host RAM.
#[test]
fn a_full_pool_s_last_cell_is_used_and_the_step_ahead_that_does_not_fit_is_not_run() {
    let mut sim = solo_pool(3000, SchedulerSettings::default());
    // 901 prompt tokens and 100 sampled: the conversation keeps 1,000 (the last is not fed)
    sim.arrive(Arrival::new(1, p(901, 1)).output(100));
    sim.arrive(Arrival::new(2, p(1488, 2)).at(10.0).output(600));
    sim.run(500.0);
    sim.check_end();
    assert_eq!(keep_of(&sim, 2), 0);
    assert_eq!(sim.rec(2).delivered.len(), 600);
    assert!(sim.room.full_pool_steps > 0, "{:?}", sim.room);
    assert_eq!(sim.room.aheads_not_run, 1, "{:?}", sim.room);
    assert_eq!(
        sim.count(|a| matches!(a, Action::EvictConversation { .. })),
        1,
        "the kept conversation made room for the next share"
    );
}

/// Audit finding 2: a request that shares only a system prompt with a longer conversation in
/// host RAM. The engine loads the conversation whole before the request's `open` cuts it, so
/// room is made for all of it (here by moving the idle conversation in the pool out), not
/// only for the request's reservation: the load fits and the prefix is kept.
#[test]
fn a_request_sharing_a_prefix_with_a_longer_host_ram_conversation_gets_room_for_all_of_it() {
    let mut sim = solo_pool(4000, SchedulerSettings::default());
    // A: 600 tokens of system prompt, 2,500 tokens in all once it ends
    sim.arrive(Arrival::new(1, prompt(1, 600, 2400, 1)).output(101));
    // B needs 2,012 cells: A's conversation goes to host RAM
    sim.arrive(Arrival::new(2, p(1500, 2)).at(10.0).output(100));
    // R shares A's system prompt; it waits for B, whose conversation then holds 1,599 cells
    sim.arrive(Arrival::new(3, prompt(1, 600, 700, 3)).at(12.0).output(10));
    sim.run(500.0);
    sim.check_end();
    assert_eq!(
        keep_of(&sim, 3),
        600,
        "the system prompt is kept, not read again"
    );
    assert!(sim.room.longer_restores > 0, "{:?}", sim.room);
    let restored = sim.pos(|a| matches!(a, Action::RestoreConversation { .. }));
    let b_out = sim.pos(
        |a| matches!(a, Action::EvictConversation { seq, .. } if *seq == assigned_seq(&sim, 2).0),
    );
    assert!(
        b_out.is_some_and(|e| restored.is_some_and(|r| e < r)),
        "B's idle conversation made room before the load"
    );
}

/// Audit finding 3: with `host_cache_conversations_max: 2`, the follow-up of the oldest cached
/// conversation needs the idle one in the pool moved to host RAM. That push once dropped the
/// oldest entry, the very one being restored: the follow-up kept nothing and read its whole
/// prompt again. The conversation being restored leaves the cache first.
#[test]
fn the_conversation_being_restored_is_not_pushed_out_of_a_full_host_cache_by_the_room_made_for_it()
{
    let settings = SchedulerSettings {
        host_cache_conversations_max: 2,
        ..SchedulerSettings::default()
    };
    let mut sim = solo_pool(2000, settings);
    sim.arrive(Arrival::new(1, p(1000, 1)).output(100)); // X: 1,099 tokens kept
    sim.arrive(Arrival::new(2, p(1000, 2)).at(10.0).output(100)); // Y: X to host RAM
    sim.arrive(Arrival::new(3, p(1000, 3)).at(20.0).output(100)); // Z: Y to host RAM
    // X's next turn: Z goes to host RAM for room, and the cache holds two
    sim.follow_up(30.0, 4, 1, p(100, 4), 0, 5);
    sim.run(500.0);
    sim.check_end();
    assert_eq!(
        keep_of(&sim, 4),
        1099,
        "the follow-up keeps its whole conversation"
    );
    assert_eq!(
        sim.count(|a| matches!(a, Action::DropConversation { .. })),
        0,
        "with X out of the cache, Y and Z fit in it"
    );
}
