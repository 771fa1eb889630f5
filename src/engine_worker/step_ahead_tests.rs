//! A step ahead (the host's pipelining) over the simulated engine: rewound, it leaves no trace
//! in what a request says next; taken, it is the step the host would have sent.

use super::fake::tests::{decode, ok, open, read, sampled, tokens, uninterrupted, worker};
use crate::ids::RequestId;
use crate::protocol::{Command, ErrorKind, Reply, Stats};

fn step_ahead(w: &mut super::Worker<super::fake::FakeEngine>, request: u64) -> Reply {
    w.serve(Command::StepAhead {
        decode: vec![RequestId(request)],
    })
}

fn stats(w: &mut super::Worker<super::fake::FakeEngine>) -> Stats {
    match ok(w, Command::Stats) {
        Reply::Stats(stats) => stats,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_rewound_step_ahead_leaves_the_output_token_identical_greedy_and_seeded() {
    for seed in [None, Some(9)] {
        let mut w = worker(2, None);
        open(&mut w, 1, 0, seed);
        let mut out = vec![read(&mut w, 1, &tokens("tell me a story"))];
        out.extend(decode(&mut w, 1, 10));
        let before = stats(&mut w);
        for _ in 0..3 {
            sampled(step_ahead(&mut w, 1));
            assert_eq!(ok(&mut w, Command::Rewind), Reply::Rewound { cells: 1 });
        }
        let after = stats(&mut w);
        assert_eq!(
            (after.steps, after.tokens_decoded, after.kv_cells_used),
            (before.steps, before.tokens_decoded, before.kv_cells_used),
            "the counters and the pool are as before the steps ahead"
        );
        out.extend(decode(&mut w, 1, 20));
        assert_eq!(out, uninterrupted(seed), "seed {seed:?}");
    }
}

#[test]
fn a_step_ahead_that_is_not_rewound_is_the_next_step() {
    for seed in [None, Some(9)] {
        let mut w = worker(2, None);
        open(&mut w, 1, 0, seed);
        let mut out = vec![read(&mut w, 1, &tokens("tell me a story"))];
        for _ in 0..10 {
            out.extend(sampled(step_ahead(&mut w, 1)));
        }
        out.extend(decode(&mut w, 1, 20));
        assert_eq!(out, uninterrupted(seed), "seed {seed:?}");
    }
}

#[test]
fn a_rewind_is_refused_unless_a_step_ahead_was_the_last_command() {
    let mut w = worker(2, None);
    open(&mut w, 1, 0, None);
    read(&mut w, 1, &tokens("tell me a story"));
    let refused = |reply: Reply| matches!(reply, Reply::Error(e) if e.kind == ErrorKind::Invalid);
    assert!(refused(w.serve(Command::Rewind)), "after a step");
    sampled(step_ahead(&mut w, 1));
    ok(&mut w, Command::Stats);
    assert!(refused(w.serve(Command::Rewind)), "the step ahead stood");
    sampled(step_ahead(&mut w, 1));
    ok(&mut w, Command::Rewind);
    assert!(refused(w.serve(Command::Rewind)), "a second rewind");
}

/// Serves a command as the worker's loop does: a fault, if one is due, answers instead.
fn served(w: &mut super::Worker<super::fake::FakeEngine>, command: Command) -> Option<Reply> {
    match w.fault_for(&command) {
        Some(_) => None,
        None => Some(w.serve(command)),
    }
}

#[test]
fn a_command_answered_by_a_fault_lets_the_step_ahead_before_it_stand() {
    let options = crate::protocol::FakeOptions {
        faults: vec!["error-at-message:4".into()],
        ..crate::protocol::FakeOptions::instant()
    };
    let engine = super::fake::FakeEngine::new(&options, 2, 3).unwrap();
    let mut w = super::Worker::new(engine, 1 << 30);
    let chunk = crate::protocol::Chunk {
        request: RequestId(1),
        start: 0,
        tokens: tokens("tell me a story"),
        last: true,
    };
    let open = Command::Open {
        request: RequestId(1),
        seq: crate::ids::SeqId(0),
        keep_tokens: 0,
        sampling: crate::protocol::Sampling::default(),
    };
    assert!(served(&mut w, open).is_some(), "message 1");
    let read = Command::Step {
        chunk: Some(chunk),
        decode: vec![],
    };
    assert!(served(&mut w, read).is_some(), "message 2");
    let ahead = Command::StepAhead {
        decode: vec![RequestId(1)],
    };
    assert!(served(&mut w, ahead).is_some(), "message 3");
    assert!(
        served(&mut w, Command::Stats).is_none(),
        "message 4 is the fault"
    );
    let rewind = served(&mut w, Command::Rewind).unwrap();
    assert!(
        matches!(&rewind, Reply::Error(e) if e.kind == ErrorKind::Invalid),
        "a rewind after a faulted command found the step ahead still undoable: {rewind:?}"
    );
}
