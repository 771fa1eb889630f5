//! R8's drift check and the per-request error: the engine could not serve one request
//! (`Event::RequestFailed`). It fails alone; what it lost is counted; the rest go on.
//! The service feeds the event when the engine refuses a request's command or its step part
//! (`StepDone.failed`), so a failure may arrive while that request's step is outstanding.

use super::*;

fn failed(message: &str, lost_tokens: u32, id: u64) -> Event {
    Event::RequestFailed {
        request: RequestId(id),
        message: message.into(),
        lost_tokens,
    }
}

fn failed_with_message(sim: &Sim, id: u64) -> Option<String> {
    match sim.failed_with(id)? {
        FailKind::RequestFailed { message } => Some(message),
        other => panic!("req-{id} failed with {other:?}"),
    }
}

fn ended_at(sim: &Sim, id: u64) -> f64 {
    sim.rec(id).ends[0].0.as_secs_f64()
}

#[test]
fn a_decode_that_fails_in_its_step_ends_at_the_step_s_end_with_nothing_of_that_step_delivered() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(50, 1)).output(100));
    sim.arrive(Arrival::new(2, p(50, 2)).output(100));
    // decode steps take 0.05 s: 1.0001 s falls inside one, both requests in it
    sim.event_at(1.0001, failed("the engine refused req-1's sampler", 0, 1));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(
        failed_with_message(&sim, 1).as_deref(),
        Some("the engine refused req-1's sampler")
    );
    // not at the event: when the step it was in came back, and its token of that step is
    // not delivered (the engine did not run its part)
    let ended = ended_at(&sim, 1);
    assert!(ended > 1.0001 && ended <= 1.06, "failed at {ended}");
    let delivered_by_event = sim
        .log
        .iter()
        .filter(|(t, a)| t.as_secs_f64() < 1.0001 && is_deliver(1)(a))
        .count();
    assert_eq!(sim.rec(1).delivered.len(), delivered_by_event);
    // the other request of the same steps finishes whole
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.rec(2).delivered.len(), 100);
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.failed, c.processed_prefix_losses), (1, 0));
    // its sequence is released without keeping a conversation
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::Release { request, keep_as_conversation: false, .. } if request.0 == 1
    )));
}

#[test]
fn a_read_that_fails_in_its_step_counts_what_it_lost_frees_the_lane_and_the_next_read_goes_on() {
    // give_way off: req-1 keeps the lane while req-2 waits for the slot
    let settings = SchedulerSettings {
        give_way: GiveWay::Off,
        ..SchedulerSettings::default()
    };
    let mut sim = with(settings, facts(1, 256));
    sim.arrive(Arrival::new(1, p(3000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(600, 2)).at(0.1).output(5));
    // chunks of 256 take 0.256 s: at 1.0 s req-1 has read 768 tokens and reads its 4th chunk
    sim.event_at(1.0, failed("the engine lost a chunk", 768, 1));
    sim.run(100.0);
    sim.check_end_losing(768);
    assert_eq!(
        failed_with_message(&sim, 1).as_deref(),
        Some("the engine lost a chunk")
    );
    // when its chunk in flight came back (0.768 to 1.024 s), not at the event
    let ended = ended_at(&sim, 1);
    assert!(ended > 1.0 && ended <= 1.03, "failed at {ended}");
    // four chunks were sent; the fourth's reading did not count (3 × 256 read, all lost)
    let sent: u32 = sim.rec(1).chunks.iter().map(|c| c.end - c.start).sum();
    assert_eq!(sent, 4 * 256, "the sim saw its chunks sent");
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.processed_prefix_losses, 768);
    assert_eq!(c.failed, 1);
    // req-2 got the slot and the lane and read its whole prompt, once
    assert!(sim.time_of(is_assign(2)).unwrap() >= ended);
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    let read2: u32 = sim.rec(2).chunks.iter().map(|c| c.end - c.start).sum();
    assert_eq!(read2, 600);
}

#[test]
fn a_parked_request_that_fails_drops_its_parked_state_at_once_and_the_stream_goes_on() {
    // the pool is too small for both: req-1 is parked to host RAM for req-2
    let mut f = facts(1, 256);
    f.kv_cells_total = 1000;
    let settings = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let mut sim = with(settings, f);
    sim.arrive(Arrival::new(1, p(500, 1)).output(400));
    sim.arrive(Arrival::new(2, p(450, 2)).at(7.0).priority(5).output(100));
    sim.run(7.9);
    assert!(
        sim.log.iter().any(|(_, a)| matches!(
            a,
            Action::Park { request, to: ParkPlace::HostRam, .. } if request.0 == 1
        )),
        "req-1 was not parked to host RAM"
    );
    sim.event_at(8.0, failed("the engine could not restore req-1", 30, 1));
    sim.run(100.0);
    sim.check_end_losing(30);
    assert_eq!(
        failed_with_message(&sim, 1).as_deref(),
        Some("the engine could not restore req-1")
    );
    // at once (it is in no step), and its parked state is dropped
    let ended = sim.rec(1).ends[0].0.as_secs_f64();
    assert!((ended - 8.0).abs() < 1e-9, "failed at {ended}");
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::DropParked { request, place: ParkPlace::HostRam } if request.0 == 1
    )));
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.failed, c.processed_prefix_losses), (1, 30));
    assert!(sim.s.snapshot(sim.now).parked.is_empty());
}

#[test]
fn a_failure_for_a_request_that_already_ended_changes_nothing() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(50, 1)).output(3));
    sim.event_at(5.0, failed("late", 100, 1));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Stop));
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.failed, c.finished), (0, 1));
    // nothing of a request that no longer exists is counted as lost
    assert_eq!(c.processed_prefix_losses, 0);
}

#[test]
fn a_decode_that_fails_in_a_step_with_another_request_s_chunk_leaves_that_chunk_read() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(50, 1)).output(100));
    sim.arrive(Arrival::new(2, p(5000, 2)).at(0.5).output(5));
    // at 1.0001 s a step holds req-1's decode and a chunk of req-2's read
    sim.event_at(1.0001, failed("the engine refused req-1", 0, 1));
    sim.run(100.0);
    // KV continuity and no chunk read twice: the chunk beside the failed decode counted
    sim.check_end();
    assert!(failed_with_message(&sim, 1).is_some());
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    let read: u32 = sim.rec(2).chunks.iter().map(|c| c.end - c.start).sum();
    assert_eq!(read, 5000);
}

/// Regression (a refused conversation load): the engine then also refuses the request's open
/// and its chunk, each a consequence of the first. The request fails with the first refusal's
/// words (the cause, not "is not open"), and nothing is counted lost for what followed it.
#[test]
fn the_first_refusal_of_a_request_is_its_cause_and_what_follows_it_loses_nothing() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(50, 1)).output(100));
    sim.arrive(Arrival::new(2, p(5000, 2)).at(0.5).output(5));
    sim.event_at(1.0001, failed("the conversation load was refused", 0, 2));
    sim.event_at(
        1.00011,
        failed("its open keeps 900 tokens of a sequence holding 0", 900, 2),
    );
    sim.event_at(1.00012, failed("req-2 is not open", 0, 2));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(
        failed_with_message(&sim, 2).as_deref(),
        Some("the conversation load was refused")
    );
    assert_eq!(sim.s.snapshot(sim.now).counters.processed_prefix_losses, 0);
}
