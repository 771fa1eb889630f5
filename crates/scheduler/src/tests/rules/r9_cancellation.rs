//! R9 scoped cancellation.

use super::*;

#[test]
fn cancelling_a_waiting_request_sends_nothing_to_the_engine() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(300, 1)).output(100));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.1).output(5));
    sim.cancel_at(1.0, 2);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.pos(is_assign(2)).is_none());
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Cancelled));
    assert_eq!(sim.rec(1).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.waiting, 1);
}

#[test]
fn cancelling_a_reader_releases_its_slot_at_the_next_boundary() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(5000, 2)).at(0.1).output(5));
    sim.cancel_at(0.3, 1);
    sim.run(100.0);
    sim.check_end();
    let t = sim.time_of(is_release(1)).unwrap();
    assert!((0.5..0.52).contains(&t), "released at {t}");
    assert_eq!(sim.rec(2).finish_reason(), Some(FinishReason::Stop));
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.reading, 1);
}

#[test]
fn cancelling_a_decoder_stops_its_tokens_and_others_go_on() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(300, 1)).output(500));
    sim.arrive(Arrival::new(2, p(300, 2)).output(100));
    sim.cancel_at(2.0, 1);
    sim.run(100.0);
    sim.check_end();
    let n = sim.rec(1).delivered.len();
    assert!(n > 10 && n < 500);
    assert_eq!(sim.rec(2).delivered.len(), 100);
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.decoding, 1);
}

#[test]
fn cancelling_a_parked_request_drops_its_parked_state() {
    // parked in host RAM (a pool too small for both): its saved state is dropped
    let mut f = facts(1, 256);
    f.kv_cells_total = 700;
    let s = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(100));
    sim.cancel_at(6.0, 1);
    sim.run(100.0);
    sim.check_end(); // engine holds no parked state
    assert!(
        sim.pos(|a| matches!(a, Action::DropParked { request, .. } if request.0 == 1))
            .is_some()
    );
    assert!(sim.pos(is_restore(1)).is_none());
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.parked, 1);
}

#[test]
fn cancelling_a_request_parked_in_its_sequence_keeps_its_tokens_as_a_conversation() {
    let mut sim = solo(256, true);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.0).priority(5).output(100));
    sim.cancel_at(6.0, 1);
    sim.run(100.0);
    sim.check_end();
    let (seq, _) = assigned_seq(&sim, 1);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::Release { request, seq: s, keep_as_conversation: true } if request.0 == 1 && *s == seq
    )));
    assert!(sim.pos(is_restore(1)).is_none());
    assert_eq!(sim.s.snapshot(sim.now).counters.cancellations.parked, 1);
    let kept = sim.s.snapshot(sim.now).conversations;
    assert!(kept.iter().any(|c| c.seq == Some(seq)), "{kept:?}");
}

#[test]
fn a_slot_holder_cancelled_before_it_read_anything_keeps_no_empty_conversation() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    // it takes the second slot and waits for the lane (equal lengths: no give-way)
    sim.arrive(Arrival::new(2, p(5000, 2)).at(0.1).output(5));
    sim.cancel_at(0.5, 2);
    sim.run(100.0);
    sim.check_end();
    assert!(sim.rec(2).chunks.is_empty(), "{:?}", sim.rec(2).chunks);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::Release { request, keep_as_conversation: false, .. } if request.0 == 2
    )));
    let conversations = sim.s.snapshot(sim.now).conversations;
    assert_eq!(conversations.len(), 1, "{conversations:?}");
    assert!(conversations[0].tokens > 5000);
}
