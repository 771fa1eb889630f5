//! Where a solo pause or give-way parks the running request (R3, R7): in its own sequence when
//! the newcomer can have the slot beside its cells, else in host RAM, else not at all; and
//! what the newcomer needs for that (its prefix already in the pool, a parked request's
//! sequence, a sequence id).

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

fn solo_priority() -> SchedulerSettings {
    SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    }
}

/// One slot and two sequences: the follow-up's conversation is in the other one. The
/// follow-up continues it in place, so it needs no sequence id: the stream stays in its own.
#[test]
fn a_stream_paused_for_a_follow_up_of_a_kept_conversation_stays_in_its_sequence_when_none_is_free()
{
    let mut f = facts(1, 256);
    f.sequences = 2;
    let mut sim = with(solo_priority(), f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(2.0).output(400)); // the stream
    sim.follow_up(10.0, 3, 1, prompt(9, 0, 20, 3), 5, 5);
    sim.run(200.0);
    sim.check_end();
    let (seq2, _) = assigned_seq(&sim, 2);
    assert_eq!(parks_to(&sim, 2), [ParkPlace::Pool(seq2)]);
    let (seq3, kept) = assigned_seq(&sim, 3);
    assert_eq!((seq3, kept), (assigned_seq(&sim, 1).0, 300 + 5 - 1));
}

/// A pause to host RAM counts the stream's own cells as freed, even when it has pledged none
/// (a share of one token: its reservation is always exactly what it holds).
#[test]
fn a_stream_that_has_pledged_no_cells_is_paused_to_host_ram_for_a_request_that_needs_its_cells() {
    let mut f = facts(1, 256);
    f.kv_cells_total = 1000;
    let s = SchedulerSettings {
        output_reserve_tokens: 1,
        ..solo_priority()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    // 701 cells: not beside the stream (about 395 at 5 s), only in its place
    sim.arrive(Arrival::new(2, p(700, 2)).at(1.0).priority(5).output(5));
    sim.run(200.0);
    sim.check_end();
    assert_eq!(parks_to(&sim, 1), [ParkPlace::HostRam]);
    let t = sim.time_of(is_park(1)).unwrap();
    assert!((t - 5.0).abs() < 1e-6, "paused at {t}");
    assert!(sim.rec(2).ended_at() < sim.rec(1).ended_at());
}

/// The newcomer shares a long prefix with the stream: it needs only the cells past that
/// prefix (a copy shares the stream's cells), which fit beside the stream, so the stream stays
/// in its sequence.
#[test]
fn a_stream_paused_for_a_request_sharing_its_prefix_stays_in_its_sequence_when_the_rest_fits() {
    let mut f = facts(1, 256);
    f.kv_cells_total = 1500;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..solo_priority()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(400));
    // 1,208 cells, 900 of them shared with the stream: 308 more fit beside its ~1,090 (at
    // 5 s); the whole 1,208 would not
    sim.arrive(
        Arrival::new(2, prompt(1, 900, 1200, 2))
            .at(1.0)
            .priority(5)
            .output(5),
    );
    sim.run(200.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    assert_eq!(parks_to(&sim, 1), [ParkPlace::Pool(seq1)]);
    assert!(sim.log.iter().any(|(_, a)| matches!(
        a,
        Action::CopyPrefix { from, tokens: 900, for_request, .. } if *from == seq1 && for_request.0 == 2
    )));
}

/// A request parked in host RAM that now outranks the stream needs its whole reservation
/// back: when that does not fit beside the stream, the stream goes to host RAM at once (not
/// parked in its sequence first and then moved).
#[test]
fn a_stream_paused_for_a_request_parked_in_host_ram_goes_to_host_ram_when_that_one_needs_its_cells()
{
    let mut f = facts(1, 256);
    f.kv_cells_total = 800;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..solo_priority()
    };
    let mut sim = with(s, f);
    // request 1 is paused for request 2 at 5 s, to host RAM (508 cells do not fit beside its
    // ~390 in 800)
    sim.arrive(Arrival::new(1, p(300, 1)).output(400));
    sim.arrive(Arrival::new(2, p(500, 2)).at(1.0).priority(5).output(400));
    // then request 1 outranks request 2: at 10 s (request 2's quantum) it comes back and
    // needs its ~390 cells, which do not fit beside request 2's ~600
    sim.event_at(
        7.0,
        Event::Reprioritised {
            request: RequestId(1),
            priority: 10,
        },
    );
    sim.run(300.0);
    sim.check_end();
    assert_eq!(parks_to(&sim, 1), [ParkPlace::HostRam]);
    assert_eq!(parks_to(&sim, 2), [ParkPlace::HostRam]);
    let c = sim.s.snapshot(sim.now).counters;
    assert_eq!((c.parks_in_pool, c.parks_to_host), (0, 2), "{c:?}");
}

/// The same for a read parked in its own sequence: to come back it needs the rest of its
/// reservation (its unread prompt), which does not fit beside the stream.
#[test]
fn a_stream_paused_for_a_read_parked_in_its_sequence_goes_to_host_ram_when_the_read_needs_its_cells()
 {
    let mut f = facts(1, 256);
    f.kv_cells_total = 3200;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..solo_priority()
    };
    let mut sim = with(s, f);
    // request 1 reads 3,000 tokens (3,008 cells reserved); request 2 outranks it at 0.5 s and
    // it gives way, parked in its sequence after 512 tokens (308 cells fit beside them)
    sim.arrive(Arrival::new(1, p(3000, 1)).output(5));
    sim.arrive(Arrival::new(2, p(300, 2)).at(0.5).priority(5).output(400));
    // request 1 then outranks request 2: at request 2's quantum it needs 2,496 more cells,
    // and only ~2,280 are free beside request 2
    sim.event_at(
        2.0,
        Event::Reprioritised {
            request: RequestId(1),
            priority: 10,
        },
    );
    sim.run(300.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    assert_eq!(parks_to(&sim, 1), [ParkPlace::Pool(seq1)]);
    assert_eq!(parks_to(&sim, 2), [ParkPlace::HostRam]);
}

/// One slot and two sequences, one of them a request parked in its sequence whose prefix the
/// newcomer shares. Parked in its own sequence the stream would leave the newcomer no
/// sequence of its own for the copy (the parked one is its source): the stream goes to host
/// RAM at once, not parked in its sequence first and then moved.
#[test]
fn a_stream_paused_when_no_sequence_would_be_left_for_the_newcomer_goes_to_host_ram_at_once() {
    let mut f = facts(1, 256);
    f.sequences = 2;
    let mut sim = with(solo_priority(), f);
    // request 1 is paused for request 2 at 5 s, in its sequence (room for both)
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(400));
    sim.arrive(Arrival::new(2, p(300, 2)).at(1.5).priority(5).output(400));
    // request 3 shares request 1's 900-token prefix and outranks request 2: at 10 s
    // (request 2's quantum) it copies that prefix from request 1's sequence into request 2's
    sim.arrive(
        Arrival::new(3, prompt(1, 900, 1100, 3))
            .at(6.0)
            .priority(10)
            .output(5),
    );
    sim.run(300.0);
    sim.check_end();
    let (seq1, _) = assigned_seq(&sim, 1);
    let (seq2, _) = assigned_seq(&sim, 2);
    assert_eq!(parks_to(&sim, 1), [ParkPlace::Pool(seq1)]);
    assert_eq!(parks_to(&sim, 2), [ParkPlace::HostRam]);
    assert_eq!(assigned_seq(&sim, 3), (seq2, 900));
}

/// Regression (found while pinning `park_plan`, TESTING.md §12): R7 pauses the stream when W
/// "fits once P is parked", but `park_plan` counted W's source conversation as kept whole
/// (protected, its tail not dropped) and the stream's cells shared with others as never
/// freed. Here W fits once the stream is in host RAM (it continues its 1,000-token
/// conversation cut to the 900 tokens it shares: 3,300 - 900 = 2,400 cells free for its
/// 2,398), yet the old count said 2,398 of 3,300 - 1,000, and the stream was paused not at its
/// quantum (7 s) but at 18.85 s, when its own growth had pushed the conversation to host RAM.
/// W arrives after the stream's read, so R3 (a give-way) does not decide first.
#[test]
fn a_stream_is_paused_for_a_higher_priority_that_fits_once_it_leaves_by_cutting_its_conversation() {
    let mut f = facts(1, 256);
    f.kv_cells_total = 3300;
    f.context_tokens = 3300;
    let s = SchedulerSettings {
        output_reserve_tokens: 8,
        ..solo_priority()
    };
    let mut sim = with(s, f);
    sim.arrive(Arrival::new(1, prompt(1, 900, 1000, 1)).output(1));
    sim.arrive(Arrival::new(2, p(2000, 2)).at(2.0).output(400)); // the stream
    sim.arrive(
        Arrival::new(3, prompt(1, 900, 3290, 3))
            .at(4.5)
            .priority(5)
            .output(5),
    );
    sim.run(300.0);
    sim.check_end();
    let paused = sim
        .time_of(is_park(2))
        .expect("the stream was never paused");
    assert!((paused - 7.0).abs() < 0.1, "paused at {paused}");
    assert!(sim.rec(3).ended_at() < sim.rec(2).ended_at());
}
