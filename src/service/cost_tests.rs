use super::*;

fn finished(priority: i32, ended_at_secs: f64) -> FinishedRequest {
    FinishedRequest {
        request_id: RequestId(1),
        client_id: "chatcmpl-1".into(),
        client: String::new(),
        route: Route::ChatCompletions,
        priority,
        outcome: "stop",
        prompt_tokens: 10,
        prompt_tokens_held: 0,
        prompt_tokens_read: 10,
        output_tokens: 20,
        queue_wait_secs: Some(0.0),
        ttft_secs: Some(0.2),
        parks: 0,
        parked_secs: 0.0,
        pauses: 0,
        give_ways: 0,
        end_to_end_secs: 4.0,
        paused_others: 0,
        gained_secs_estimate: None,
        ended_at_secs,
    }
}

#[test]
fn a_request_parked_twice_is_summed_up_in_one_line() {
    let f = FinishedRequest {
        parks: 2,
        parked_secs: 6.71,
        pauses: 2,
        end_to_end_secs: 12.44,
        ..finished(0, 1.0)
    };
    assert_eq!(
        f.summary(),
        "parked 2 times, 6.7 s in all (2 pauses); 12.4 s end to end"
    );
}

#[test]
fn a_request_that_paused_another_names_the_estimate_as_one() {
    let f = FinishedRequest {
        queue_wait_secs: Some(0.31),
        paused_others: 1,
        gained_secs_estimate: Some(41.0),
        end_to_end_secs: 1.0,
        ..finished(5, 1.0)
    };
    assert_eq!(
        f.summary(),
        "never parked; waited 0.3 s for a slot; paused 1 other request, saving it about 41.0 s (estimate); 1.0 s end to end"
    );
}

#[test]
fn a_ledger_counts_each_park_once_and_the_open_one_up_to_now() {
    let t0 = Instant::now();
    let at = |secs: f64| t0 + Duration::from_secs_f64(secs);
    let mut l = Ledger::default();
    assert!(l.parked(at(1.0)));
    assert!(!l.parked(at(1.5)), "still parked: not a second park");
    l.resumed(at(3.0));
    l.resumed(at(3.5)); // not parked: nothing to add
    assert!(l.parked(at(4.0)));
    assert_eq!(l.parks, 2);
    assert!((l.parked_secs(at(5.0)) - 3.0).abs() < 1e-9);
    l.resumed(at(6.0));
    assert!((l.parked_secs(at(9.0)) - 4.0).abs() < 1e-9);
}

#[test]
fn the_wait_a_pause_saved_is_the_tokens_left_at_the_measured_rate() {
    assert_eq!(wait_estimate_secs(Some(2000), 400, Some(40.0)), Some(40.0));
    assert_eq!(wait_estimate_secs(None, 400, Some(40.0)), None);
    assert_eq!(wait_estimate_secs(Some(2000), 400, None), None);
    assert_eq!(wait_estimate_secs(Some(100), 400, Some(10.0)), Some(0.0));
    let mut l = Ledger::default();
    l.paused_other(None);
    assert_eq!(l.gained_secs_estimate, None);
    l.paused_other(Some(2.0));
    l.paused_other(Some(3.0));
    assert_eq!((l.paused_others, l.gained_secs_estimate), (3, Some(5.0)));
}

#[test]
fn the_sums_cover_the_window_by_priority_highest_first() {
    let old = FinishedRequest {
        parks: 9,
        parked_secs: 99.0,
        ..finished(0, 10.0)
    };
    let hit = FinishedRequest {
        parks: 2,
        parked_secs: 6.0,
        pauses: 1,
        give_ways: 1,
        end_to_end_secs: 30.0,
        ..finished(0, 700.0)
    };
    let clean = FinishedRequest {
        end_to_end_secs: 10.0,
        ..finished(0, 705.0)
    };
    let short = FinishedRequest {
        ttft_secs: Some(0.25),
        paused_others: 1,
        gained_secs_estimate: Some(40.0),
        ..finished(5, 706.0)
    };
    let view = cost_view(&[old, hit, clean, short], 710.0, 600.0);
    assert_eq!(view.window_secs, 600.0);
    let priorities: Vec<i32> = view.by_priority.iter().map(|c| c.priority).collect();
    assert_eq!(priorities, [5, 0]);
    let five = &view.by_priority[0];
    assert_eq!(
        (five.finished, five.interrupted, five.interrupting),
        (1, 0, 1)
    );
    assert_eq!(five.interrupting_ttft_secs_mean, Some(0.25));
    assert_eq!(five.gained_secs_estimate, Some(40.0));
    let zero = &view.by_priority[1];
    assert_eq!(
        (zero.finished, zero.interrupted),
        (2, 1),
        "the old one is out"
    );
    assert_eq!((zero.parked_secs, zero.pauses, zero.give_ways), (6.0, 1, 1));
    assert_eq!(zero.interrupted_end_to_end_secs_mean, Some(30.0));
    assert_eq!(zero.uninterrupted_end_to_end_secs_mean, Some(10.0));
    assert_eq!((zero.interrupting, zero.gained_secs_estimate), (0, None));
}

#[test]
fn a_class_that_was_never_parked_has_no_negative_zero_time_parked() {
    let view = cost_view(&[finished(5, 1.0)], 2.0, 600.0);
    let parked = view.by_priority[0].parked_secs;
    assert!(parked.is_sign_positive(), "{parked}");
    assert_eq!(format!("{parked:.1}"), "0.0");
}

#[test]
fn an_outcome_names_its_finish_reason_and_a_failure_has_none() {
    for reason in [
        Some(FinishReason::Stop),
        Some(FinishReason::Length),
        Some(FinishReason::Cancelled),
        None,
    ] {
        let mut f = finished(0, 1.0);
        f.outcome = outcome(reason);
        assert_eq!(f.finish_reason(), reason, "{}", f.outcome);
    }
}
