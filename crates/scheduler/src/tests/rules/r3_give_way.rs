//! R3 give-way at a chunk boundary.

use super::*;

#[test]
fn a_long_read_gives_way_to_a_higher_priority() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(5000, 2)).at(0.3).priority(5).output(5));
    sim.run(100.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.give_ways_higher_priority, 1);
    // it gives way at the very next boundary: request 1 read two chunks
    assert_eq!(sim.first_chunk(2), 2);
    assert!(sim.ttft(2) < sim.ttft(1));
}

#[test]
fn a_read_never_gives_way_to_a_lower_priority() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(5000, 1)).priority(5).output(5));
    sim.arrive(Arrival::new(2, p(100, 2)).at(0.3).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn an_equal_read_gives_way_to_one_with_half_as_much_left() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.3).output(5));
    sim.run(100.0);
    sim.check_end();
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 1);
    assert_eq!(sim.first_chunk(2), 2);
}

#[test]
fn an_equal_read_keeps_the_lane_against_more_than_half_its_left() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(2400, 2)).at(0.3).output(5)); // 2 × 2400 > 5000 - 512
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn a_reader_that_used_its_yields_keeps_the_lane() {
    let mut sim = batch(4, 256);
    sim.arrive(Arrival::new(1, p(10_000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(200, 2)).at(0.3).output(5));
    sim.arrive(Arrival::new(3, p(200, 3)).at(1.0).output(5));
    sim.arrive(Arrival::new(4, p(200, 4)).at(2.0).priority(5).output(5)); // even a higher priority
    sim.run(100.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.give_ways_shorter_left, 2);
    assert_eq!(c.give_ways_higher_priority, 0);
    assert!(sim.first_chunk(4) > sim.last_chunk(1));
    assert_eq!(sim.max_yields_seen, 2);
}

#[test]
fn no_give_way_with_one_chunk_or_less_left() {
    let mut sim = batch(2, 256);
    sim.arrive(Arrival::new(1, p(600, 1)).output(5));
    sim.arrive(Arrival::new(2, p(100, 2)).at(0.3).priority(9).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn give_way_off_never_gives_way() {
    let s = SchedulerSettings {
        give_way: GiveWay::Off,
        ..SchedulerSettings::default()
    };
    let mut sim = with(s, facts(2, 256));
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.3).priority(9).output(5));
    sim.run(100.0);
    sim.check_end();
    assert!(sim.last_chunk(1) < sim.first_chunk(2));
}

#[test]
fn a_solo_read_gives_way_by_parking_its_part_and_reads_nothing_twice() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(5000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.3).output(20));
    sim.run(100.0);
    sim.check_end(); // includes: no prompt token read twice, KV continuity
    let park = sim.pos(is_park(1)).unwrap();
    assert!(park < sim.pos(is_assign(2)).unwrap());
    assert!(sim.pos(is_restore(1)).unwrap() > sim.pos(is_release(2)).unwrap());
    assert_eq!(sim.rec(1).chunks[2].start, 512);
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.read_parks, c.read_restores, c.pauses), (1, 1, 0));
}

#[test]
fn a_read_that_gave_way_continues_on_the_boundaries_of_an_uninterrupted_read() {
    let mut sim = batch(3, 256);
    // a follow-up holding 300 tokens starts off-boundary: 300..512, then multiples of 256
    sim.arrive(Arrival::new(1, prompt(1, 300, 400, 1)).output(5));
    sim.arrive(Arrival::new(2, prompt(1, 300, 6000, 2)).at(5.0).output(5));
    sim.arrive(Arrival::new(3, p(300, 3)).at(5.7).output(5));
    sim.arrive(Arrival::new(4, p(300, 4)).at(6.5).output(5));
    sim.run(100.0);
    sim.check_end();
    let chunks = &sim.rec(2).chunks;
    assert_eq!(chunks[0], 300..512);
    for w in chunks.windows(2) {
        assert_eq!(w[0].end, w[1].start);
    }
    for c in &chunks[..chunks.len() - 1] {
        assert_eq!(c.end % 256, 0);
    }
    assert_eq!(sim.s.snapshot(sim.now).counters.give_ways_shorter_left, 2);
}

/// A waiting follow-up's left to read counts only what its kept conversation does not hold:
/// 24 new tokens make a fresh 3,000-token read give way in solo mode.
#[test]
fn a_waiting_follow_up_counts_only_its_new_tokens_as_left_to_read() {
    let mut sim = solo(256, false);
    sim.arrive(Arrival::new(1, p(1200, 1)).output(10));
    sim.arrive(Arrival::new(2, p(3000, 2)).at(2.0).output(5));
    sim.follow_up(2.5, 3, 1, p(24, 9), 0, 5);
    sim.run(2.51);
    // the snapshot says the same while it waits
    let waiting = sim.s.snapshot(sim.now).waiting;
    let w = waiting
        .iter()
        .find(|w| w.request_id.0 == 3)
        .expect("waiting");
    assert!(w.tokens_left_to_read < 40, "{w:?}");
    sim.run(100.0);
    sim.check_end();
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!(c.give_ways_shorter_left, 1, "{c:?}");
    // it read only its new tokens (the conversation's 1,210 were held)
    let read: u32 = sim.rec(3).chunks.iter().map(|r| r.end - r.start).sum();
    assert!(read < 40, "the follow-up read {read} tokens");
    assert!(sim.rec(3).ended_at() < sim.rec(2).ended_at());
}
