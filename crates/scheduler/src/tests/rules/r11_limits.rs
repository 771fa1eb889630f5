//! R11 limits, no truncation.

use super::*;

#[test]
fn a_full_queue_refuses_with_retry_after() {
    let s = SchedulerSettings {
        queue_max: 2,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    for i in 0..4 {
        sim.arrive(Arrival::new(i, p(300, i as u32)).output(5));
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
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
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
    sim.arrive(Arrival::new(1, p(900, 1)).output(10_000).max_tokens(32_000));
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
    sim.arrive(Arrival::new(1, p(900, 1)).output(5).max_tokens(32_000));
    // exactly the room left is not over it: admitted
    sim.arrive(Arrival::new(2, p(900, 2)).at(1.0).output(5).max_tokens(100));
    sim.run(10.0);
    sim.check_end();
    assert_eq!(
        sim.refused_with(1),
        Some(Refusal::MaxTokensOverContext {
            max_tokens: 32_000,
            room_tokens: 100
        })
    );
    assert_eq!(sim.refused_with(2), None);
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
}

#[test]
fn a_request_that_names_no_limit_gets_the_server_default_and_every_request_the_cap() {
    let s = SchedulerSettings {
        max_output_tokens_default: Some(10),
        max_output_tokens_cap: Some(20),
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(1, 256));
    sim.arrive(Arrival::new(1, p(300, 1)).output(1000)); // names none: the default
    sim.arrive(Arrival::new(2, p(300, 2)).output(1000).max_tokens(500)); // over the cap
    sim.arrive(Arrival::new(3, p(300, 3)).output(1000).max_tokens(15)); // under it
    sim.run(200.0);
    sim.check_end();
    for (id, n) in [(1, 10), (2, 20), (3, 15)] {
        assert_eq!(sim.rec(id).delivered.len(), n, "request {id}");
        assert_eq!(sim.rec(id).finish_reason(), Some(FinishReason::Length));
    }
    // only the request the cap cut is counted (agents take that end as a failed turn)
    assert_eq!(sim.s.snapshot(sim.now).counters.output_cap_cuts, 1);
}

#[test]
fn a_request_the_cap_cut_is_counted_only_when_it_ends_at_the_cap() {
    let s = SchedulerSettings {
        max_output_tokens_cap: Some(20),
        ..SchedulerSettings::default()
    };
    let mut f = facts(1, 256);
    f.context_tokens = 400;
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(1000)); // names none: the cap cuts it
    sim.arrive(Arrival::new(2, p(300, 2)).output(5).max_tokens(500)); // stops before the cap
    sim.arrive(Arrival::new(3, p(390, 3)).output(1000)); // the room (10) is below the cap
    sim.run(200.0);
    sim.check_end();
    assert_eq!(sim.rec(1).delivered.len(), 20);
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.rec(3).delivered.len(), 10);
    assert_eq!(sim.s.snapshot(sim.now).counters.output_cap_cuts, 1);
}

#[test]
fn without_a_default_or_a_cap_a_request_that_names_no_limit_may_use_the_rest_of_the_context() {
    let mut f = facts(1, 256);
    f.context_tokens = 400;
    let mut sim = with(SchedulerSettings::default(), f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(1000));
    sim.run(200.0);
    sim.check_end();
    assert_eq!(sim.rec(1).delivered.len(), 100);
}
