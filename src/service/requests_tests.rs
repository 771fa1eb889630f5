//! The requests table's rows and their "why", on made-up snapshots.

use super::*;
use crate::scheduler::{ParkKind, ParkedIn, ParkedView, SchedulerSettings, WaitingView};
use crate::service::SlotView;

fn ready(solo_priority: bool, parallel: u32) -> ServiceSnapshot {
    let settings = SchedulerSettings {
        solo_priority,
        ..SchedulerSettings::default()
    };
    let mut s = ServiceSnapshot::starting(settings, parallel, true);
    s.engine.status = EngineStatus::Ready;
    s
}

fn slot(id: u32, request: u64, state: SlotStatus, priority: i32) -> SlotView {
    SlotView {
        slot: crate::scheduler::SlotView {
            id,
            state,
            request_id: Some(RequestId(request)),
            seq: None,
            priority: Some(priority),
            prompt_tokens: 2000,
            held_tokens: if state == SlotStatus::Reading {
                512
            } else {
                2100
            },
            read_tokens: 512,
            generated_tokens: 100,
            has_lane: state == SlotStatus::Reading,
            effective_priority: Some(i64::from(priority)),
            boost: 0,
            run_secs: 2.9,
            pausable_in_secs: None,
        },
        tokens_per_sec: Some(40.0),
    }
}

fn waiting(request: u64, priority: i32, waited_secs: f64) -> WaitingView {
    WaitingView {
        request_id: RequestId(request),
        priority,
        effective_priority: i64::from(priority),
        boost: 0,
        aging: 0,
        waited_secs,
        tokens_left_to_read: 300,
    }
}

fn parked(request: u64, cause: ParkCause, parked_for: Option<u64>) -> ParkedView {
    ParkedView {
        request_id: RequestId(request),
        priority: 0,
        effective_priority: 0,
        boost: 0,
        generated_tokens: 40,
        read_tokens: 300,
        parked_secs: 1.5,
        pauses: 1,
        kind: ParkKind::Decode,
        place: ParkedIn::Spare,
        seq: None,
        cause: Some(cause),
        parked_for: parked_for.map(RequestId),
    }
}

/// Request 9 came on the Messages route; every other one on Chat Completions.
fn facts(id: RequestId) -> Option<LiveFacts> {
    let route = if id.0 == 9 {
        Route::Messages
    } else {
        Route::ChatCompletions
    };
    Some(LiveFacts {
        origin: RequestOrigin {
            route,
            client: "claude-cli".into(),
        },
        prompt_tokens: 300,
        max_tokens: Some(64),
        elapsed_secs: 3.0,
        parks: 0,
        parked_secs: 0.0,
    })
}

/// R7's outlook as the scheduler publishes it.
fn outlook(
    holder: u64,
    waiter: u64,
    verdict: PauseVerdict,
    in_secs: Option<f64>,
) -> Option<crate::scheduler::PauseOutlookView> {
    Some(crate::scheduler::PauseOutlookView {
        holder: RequestId(holder),
        waiter: RequestId(waiter),
        verdict,
        in_secs,
    })
}

fn why_of(s: &ServiceSnapshot, id: u64) -> String {
    request_rows(s, facts)
        .into_iter()
        .find(|r| r.request_id.0 == id)
        .expect("a row")
        .why
}

#[test]
fn a_request_waiting_for_a_decoding_stream_it_outranks_says_when_the_stream_may_be_paused() {
    let mut s = ready(true, 1);
    let mut running = slot(0, 7, SlotStatus::Decoding, 0);
    running.slot.pausable_in_secs = Some(2.1);
    s.slots = vec![running];
    s.waiting = vec![waiting(8, 5, 0.4)];
    s.pause_outlook = outlook(7, 8, PauseVerdict::MayPauseLater, Some(2.1));
    assert_eq!(
        why_of(&s, 8),
        "waits for the slot: chatcmpl-7 decoding, may be paused in 2.1 s"
    );
    assert_eq!(
        why_of(&s, 7),
        "decoding; chatcmpl-8 (priority 5) ranks higher and may pause it in 2.1 s"
    );
}

/// #62: the starvation case. A priority-0 request aged above a priority-0 stream was told
/// the stream would be paused at the next token; R7 never pauses an equal for aging alone,
/// and the scheduler's outlook says so.
#[test]
fn a_request_aged_above_a_stream_of_its_own_priority_is_told_it_waits_for_the_stream_to_finish() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 1, SlotStatus::Decoding, 0)];
    let mut aged = waiting(2, 0, 31.0);
    aged.aging = 3;
    aged.effective_priority = 3;
    s.waiting = vec![aged];
    s.pause_outlook = outlook(1, 2, PauseVerdict::SameClass, None);
    assert_eq!(
        why_of(&s, 2),
        "waits for chatcmpl-1 to finish: same priority; aging moves it up the queue but does \
         not pause a stream"
    );
    assert_eq!(
        why_of(&s, 1),
        "decoding; chatcmpl-2 (priority 3: 0 + 3 aging) waits for it to finish: same \
         priority, and aging does not pause a stream"
    );
}

#[test]
fn with_preemption_off_a_waiting_request_is_told_the_stream_runs_to_its_end() {
    let mut s = ready(false, 1);
    s.slots = vec![slot(0, 7, SlotStatus::Decoding, 0)];
    s.waiting = vec![waiting(8, 5, 0.4)];
    assert_eq!(
        why_of(&s, 8),
        "waits for the slot: chatcmpl-7 decoding until it finishes (preemption is off)"
    );
}

#[test]
fn an_equal_priority_waits_and_is_told_only_a_higher_one_pauses() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 7, SlotStatus::Decoding, 3)];
    s.waiting = vec![waiting(8, 3, 0.4)];
    assert!(
        why_of(&s, 8).contains("only a higher priority pauses it"),
        "{}",
        why_of(&s, 8)
    );
}

#[test]
fn a_queue_ahead_is_counted_and_its_first_named() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 7, SlotStatus::Decoding, 0)];
    s.waiting = vec![waiting(9, 5, 0.2), waiting(8, 1, 0.9)];
    let why = why_of(&s, 8);
    assert!(
        why.ends_with("; 1 ahead of it (msg_9 first, priority 5)"),
        "{why}"
    );
}

/// R7: a higher priority pauses the stream, but for the first waiting request, not this one.
#[test]
fn r7_a_waiter_that_outranks_the_stream_behind_another_is_told_the_first_ahead_pauses_it() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 7, SlotStatus::Decoding, 0)];
    s.waiting = vec![waiting(9, 5, 0.2), waiting(8, 1, 0.9)];
    s.pause_outlook = outlook(7, 9, PauseVerdict::PausedAtNextToken, None);
    let why = why_of(&s, 8);
    // it outranks the stream too: it is not told that only a higher priority pauses it
    assert!(
        why.starts_with(
            "waits for the slot: chatcmpl-7 decoding (priority 0, below this one's 1: it is paused \
             for the first of those ahead)"
        ),
        "{why}"
    );
}

#[test]
fn a_parked_stream_names_who_it_was_paused_for_and_that_nothing_is_lost() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 9, SlotStatus::Decoding, 5)];
    s.parked = vec![parked(7, ParkCause::Paused, Some(9))];
    assert_eq!(
        why_of(&s, 7),
        "paused for msg_9 (priority 5); resumes when it is done, nothing lost"
    );
}

#[test]
fn a_read_that_gave_way_and_a_decode_parked_for_cells_say_so() {
    let mut s = ready(false, 1);
    s.slots = vec![slot(0, 9, SlotStatus::Reading, 0)];
    s.parked = vec![
        parked(7, ParkCause::GaveWayShorterLeft, Some(9)),
        parked(6, ParkCause::KvPoolFull, None),
    ];
    assert!(
        why_of(&s, 7)
            .starts_with("gave way at a chunk boundary to msg_9 (priority 0), which has less left"),
        "{}",
        why_of(&s, 7)
    );
    assert!(why_of(&s, 6).contains("the KV pool was full"));
}

#[test]
fn a_slot_holder_without_the_lane_names_the_reader() {
    let mut s = ready(false, 2);
    s.mode = Mode::Batch;
    let mut other = slot(1, 8, SlotStatus::Reading, 0);
    other.slot.has_lane = false;
    s.slots = vec![slot(0, 9, SlotStatus::Reading, 0), other];
    assert_eq!(
        why_of(&s, 8),
        "holds a slot, waits for the read lane: msg_9 is reading its prompt"
    );
    assert_eq!(
        why_of(&s, 9),
        "reading its prompt: 300 of 2000 tokens".replace("300", "512")
    );
}

#[test]
fn a_request_reading_its_prompt_says_how_long_is_left_at_the_engines_rate() {
    let mut s = ready(false, 1);
    s.engine.prompt_tokens_per_sec = 296.0;
    s.slots = vec![slot(0, 9, SlotStatus::Reading, 0)];
    // 2000 tokens, 512 held: 1488 left at 296 a second
    assert_eq!(
        why_of(&s, 9),
        "reading its prompt: 512 of 2000 tokens, about 5.0 s left"
    );
}

#[test]
fn in_batch_mode_a_waiting_request_is_told_every_slot_is_busy_and_no_one_is_paused() {
    let mut s = ready(false, 2);
    s.mode = Mode::Batch;
    s.slots = vec![
        slot(0, 6, SlotStatus::Decoding, 0),
        slot(1, 7, SlotStatus::Decoding, 0),
    ];
    s.waiting = vec![waiting(8, 5, 0.1)];
    assert_eq!(
        why_of(&s, 8),
        "waits for a free slot: all 2 are busy (chatcmpl-6, chatcmpl-7); batch mode pauses no one"
    );
}

#[test]
fn a_waiting_request_before_the_engine_is_up_waits_for_the_engine() {
    let mut s = ready(false, 1);
    s.engine.status = EngineStatus::Loading;
    s.waiting = vec![waiting(8, 0, 0.1)];
    assert_eq!(why_of(&s, 8), "waits for the engine to load");
}

#[test]
fn rows_carry_the_client_id_route_client_and_progress() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 9, SlotStatus::Decoding, 2)];
    s.waiting = vec![waiting(8, 0, 0.5)];
    let rows = request_rows(&s, facts);
    assert_eq!(rows[0].client_id, "msg_9");
    assert_eq!(rows[0].route, Route::Messages);
    assert_eq!(rows[0].client, "claude-cli");
    assert_eq!((rows[0].read_tokens, rows[0].generated_tokens), (2000, 100));
    assert_eq!(rows[1].client_id, "chatcmpl-8");
    assert_eq!(rows[1].state, RequestStatus::Waiting);
    assert_eq!((rows[1].prompt_tokens, rows[1].read_tokens), (300, 0));
    assert_eq!(rows[1].max_tokens, Some(64));
}

#[test]
fn client_ids_follow_the_route_and_user_agents_give_their_product() {
    assert_eq!(Route::Responses.client_id(RequestId(3)), "resp_3");
    assert_eq!(Route::Messages.client_id(RequestId(3)), "msg_3");
    assert_eq!(Route::ChatCompletions.client_id(RequestId(3)), "chatcmpl-3");
    assert_eq!(Route::Completions.client_id(RequestId(3)), "cmpl-3");
    assert_eq!(Route::Infill.client_id(RequestId(3)), "infill-3");
    use crate::service::user_agent_product;
    assert_eq!(
        user_agent_product("claude-cli/2.0.1 (external, cli)"),
        "claude-cli"
    );
    assert_eq!(
        user_agent_product("codex_cli_rs/0.42.0 (Debian 12)"),
        "codex_cli_rs"
    );
    assert_eq!(user_agent_product("OpenAI/Python 1.99.1"), "OpenAI");
    assert_eq!(user_agent_product(""), "");
}

#[test]
fn a_parked_request_shows_the_prompt_it_read_and_holds_not_zero() {
    let mut s = ready(true, 1);
    let mut read = parked(7, ParkCause::GaveWayShorterLeft, Some(8));
    read.kind = ParkKind::Read;
    read.read_tokens = 120;
    s.parked = vec![parked(6, ParkCause::Paused, Some(8)), read];
    let rows = request_rows(&s, facts);
    let progress: Vec<(u32, u32, u32)> = rows
        .iter()
        .map(|r| (r.prompt_tokens, r.read_tokens, r.generated_tokens))
        .collect();
    assert_eq!(progress, [(300, 300, 40), (300, 120, 40)]);
}

#[test]
fn a_request_that_outranks_a_stream_only_by_the_boost_is_told_so() {
    let mut s = ready(true, 1);
    s.slots = vec![slot(0, 7, SlotStatus::Decoding, 0)];
    let mut boosted = waiting(8, 0, 0.4);
    (boosted.boost, boosted.effective_priority) = (1, 1);
    s.waiting = vec![boosted];
    s.pause_outlook = outlook(7, 8, PauseVerdict::PausedAtNextToken, None);
    assert_eq!(
        why_of(&s, 8),
        "waits for the slot: chatcmpl-7 decoding, to be paused at the next token \
         (this one ranks higher by the small-request boost)"
    );
    let rows = request_rows(&s, facts);
    assert_eq!(
        priority_words(&rows[1]),
        "priority 1: 0 + 1 small-request boost"
    );
}

#[test]
fn a_stream_paused_for_a_boosted_request_names_the_boost() {
    let mut s = ready(true, 1);
    let mut short = slot(0, 9, SlotStatus::Decoding, 0);
    (short.slot.boost, short.slot.effective_priority) = (1, Some(1));
    s.slots = vec![short];
    s.parked = vec![parked(7, ParkCause::Paused, Some(9))];
    assert_eq!(
        why_of(&s, 7),
        "paused for msg_9 (priority 1: 0 + 1 small-request boost); resumes when it is done, \
         nothing lost"
    );
    let rows = request_rows(&s, facts);
    assert_eq!(
        (rows[0].boost, rows[0].aging),
        (1, 0),
        "the boost is not aging"
    );
}

/// Facts where request 7 arrived 10 s ago and every other one 3 s ago.
fn facts_7_first(id: RequestId) -> Option<LiveFacts> {
    let mut f = facts(id)?;
    if id.0 == 7 {
        f.elapsed_secs = 10.0;
    }
    Some(f)
}

#[test]
fn a_read_overtaken_after_the_one_it_gave_way_to_ended_names_who_overtook_it_and_by_which_rule() {
    let mut s = ready(false, 1);
    // it gave way to 14, which has ended; 15, of its priority and later, holds the slot now
    s.slots = vec![slot(0, 15, SlotStatus::Decoding, 0)];
    s.parked = vec![parked(7, ParkCause::GaveWayShorterLeft, Some(14))];
    s.finished = vec![crate::service::cost::FinishedRequest {
        request_id: RequestId(14),
        client_id: "chatcmpl-14".into(),
        client: String::new(),
        route: Route::ChatCompletions,
        priority: 0,
        outcome: "stop",
        prompt_tokens: 10,
        prompt_tokens_held: 0,
        prompt_tokens_read: 10,
        output_tokens: 10,
        queue_wait_secs: None,
        ttft_secs: None,
        parks: 0,
        parked_secs: 0.0,
        pauses: 0,
        give_ways: 0,
        end_to_end_secs: 1.0,
        paused_others: 0,
        gained_secs_estimate: None,
        ended_at_secs: 1.0,
    }]
    .into();
    let rows = request_rows(&s, facts_7_first);
    let why = &rows.iter().find(|r| r.request_id.0 == 7).unwrap().why;
    assert_eq!(
        why,
        "made room for chatcmpl-14, which no longer holds a slot; now overtaken by \
         chatcmpl-15, which arrived later at the same priority and went first: a read that \
         gives way goes behind its equals that were waiting (R4's new ticket); resumes when \
         the slot is free, nothing lost"
    );
    assert!(!why.contains("req-"), "{why}");

    // a paused decode keeps its place among equals (no new ticket): R4 is not the rule
    s.parked = vec![parked(7, ParkCause::Paused, Some(14))];
    let rows = request_rows(&s, facts_7_first);
    let why = &rows.iter().find(|r| r.request_id.0 == 7).unwrap().why;
    assert!(
        why.contains("chatcmpl-15, which went first at the same priority;"),
        "{why}"
    );

    // with two slots no one holder overtook it: it says what it waits for
    let mut two = s.clone();
    two.slots.push(slot(1, 16, SlotStatus::Decoding, 0));
    let rows = request_rows(&two, facts_7_first);
    let why = &rows.iter().find(|r| r.request_id.0 == 7).unwrap().why;
    assert_eq!(
        why,
        "made room for chatcmpl-14, which no longer holds a slot; resumes when a slot is free, \
         nothing lost"
    );

    // overtaken by a boosted one: the boost is the rule named
    let mut boosted = slot(0, 15, SlotStatus::Decoding, 0);
    (boosted.slot.boost, boosted.slot.effective_priority) = (1, Some(1));
    s.slots = vec![boosted];
    s.finished = Default::default();
    let rows = request_rows(&s, facts_7_first);
    let why = &rows.iter().find(|r| r.request_id.0 == 7).unwrap().why;
    assert!(
        why.starts_with(
            "made room for an earlier request, which no longer holds a slot; now \
             overtaken by chatcmpl-15, which ranks higher by the small-request boost \
             (priority 1: 0 + 1 small-request boost)"
        ),
        "{why}"
    );
}
