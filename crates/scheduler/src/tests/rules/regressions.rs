//! Regressions found in review, one per fixed bug.

use super::*;

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
    sim.arrive(Arrival::new(1, p(300, 1)).priority(busy).output(20));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.1).priority(third).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.2).priority(first).output(5));
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
    sim.arrive(Arrival::new(1, p(300, 1)).output(2000));
    sim.arrive(Arrival::new(2, p(3000, 2)).at(0.1).output(5));
    sim.arrive(Arrival::new(3, p(500, 3)).at(0.1).output(5000));
    sim.arrive(
        Arrival::new(4, p(1999, 4))
            .at(0.1)
            .output(5000)
            .max_tokens(3000),
    );
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
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.kill_engine_at(1.0); // start 1 at 1.0, due at 3.0
    sim.event_at(2.0, Event::EngineDied); // start 2 after 1 s of backoff, due at 5.0
    sim.event_at(2.5, Event::RestartRequested);
    sim.run(100.0);
    assert_eq!(restart_delays(&sim), vec![0.0, 1.0]);
    assert_eq!(
        sim.diagnostics,
        vec![crate::engine_events::RESTART_DURING_START.to_string()]
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
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
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
    // failed, not down: the next arrival would be refused and start nothing (R10)
    assert_eq!(
        sim.s.engine_failed(),
        Some("the engine died while starting")
    );
    assert!(sim.diagnostics.is_empty());
}

#[test]
fn a_duplicate_request_id_emits_no_action_and_leaves_the_live_request_untouched() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(300, 1)).output(20));
    sim.run(0.5);
    let before = sim.log.len();
    sim.admit(crate::NewRequest {
        id: RequestId(1),
        prompt: p(100, 9),
        priority: 5,
        priority_given: true,
        max_tokens: Some(1),
    });
    assert_eq!(sim.log.len(), before, "the duplicate produced actions");
    assert_eq!(sim.diagnostics.len(), 1);
    assert!(sim.diagnostics[0].contains("req-1"));
    sim.diagnostics.clear();
    sim.run(100.0);
    sim.check_end();
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
    sim.arrive(Arrival::new(1, p(4096, 1)).output(5));
    sim.arrive(Arrival::new(2, p(4095, 2)).output(5));
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
    let out = sched
        .admit(
            crate::NewRequest {
                id: RequestId(1),
                prompt: p(600, 1),
                priority: 0,
                priority_given: true,
                max_tokens: None,
            },
            t,
        )
        .unwrap();
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
    f.sequences = 3;
    f.kv_cells_total = 9000;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(Arrival::new(1, p(8000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(3000, 2)).at(1.0).output(5));
    sim.arrive(Arrival::new(3, p(300, 3)).at(2.1).output(5));
    sim.run(200.0);
    sim.check_end();
    let first_restore_of_a = sim.pos(is_restore(1)).expect("A never restored");
    assert!(matches!(
        sim.log[first_restore_of_a].1,
        Action::Restore {
            from: ParkPlace::Pool(_),
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
    sim.arrive(Arrival::new(1, p(300, 1)).output(100));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.arrive(Arrival::new(3, p(300, 3)).at(0.2).output(5));
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
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(200));
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
    sim.arrive(Arrival::new(1, first.clone()).output(10));
    sim.arrive(Arrival::new(2, p(2400, 2)).at(5.0).output(10));
    let mut follow = first;
    follow.extend(prompt(9, 0, 300, 9));
    sim.arrive(Arrival::new(3, follow).at(20.0).output(5));
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

/// Regression (audit): the dashboard's +1/-1 sent the next integer as it was, past
/// `priority_range`.
#[test]
fn a_new_priority_is_clamped_to_the_priority_range() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(300, 1)).output(100));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.run(0.2);
    for (asked, kept) in [(101, 100), (-5000, -100), (7, 7)] {
        sim.feed(Event::Reprioritised {
            request: RequestId(2),
            priority: asked,
        });
        assert_eq!(sim.s.snapshot(sim.now).waiting[0].priority, kept, "{asked}");
    }
    sim.run(100.0);
    sim.check_end();
}
