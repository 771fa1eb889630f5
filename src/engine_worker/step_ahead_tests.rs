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

/// A simulated engine's worker with these options, two slots.
fn worker_with(options: crate::protocol::FakeOptions) -> super::Worker<super::fake::FakeEngine> {
    let engine = super::fake::FakeEngine::new(&options, 2, 3).unwrap();
    super::Worker::new(engine, 1 << 30)
}

/// A worker whose simulated engine injects `fault`.
fn with_fault(fault: &str) -> super::Worker<super::fake::FakeEngine> {
    worker_with(crate::protocol::FakeOptions {
        faults: vec![fault.into()],
        ..crate::protocol::FakeOptions::instant()
    })
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
    let mut w = with_fault("error-at-message:4");
    let chunk = crate::protocol::Chunk {
        request: RequestId(1),
        start: 0,
        tokens: tokens("tell me a story"),
        last: true,
        prompt_tokens: 0,
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

/// A worker over a pool of `kv_cells` cells, two slots.
fn small_pool(kv_cells: u32) -> super::Worker<super::fake::FakeEngine> {
    worker_with(crate::protocol::FakeOptions {
        kv_cells,
        ..crate::protocol::FakeOptions::instant()
    })
}

#[test]
fn a_step_ahead_that_does_not_fit_is_not_run_and_leaves_nothing() {
    // a 16-token prompt and its first token fill 16 of 18 cells; decodes take the last two
    let mut w = small_pool(18);
    open(&mut w, 1, 0, None);
    let mut out = vec![read(&mut w, 1, &tokens("tell me a story!"))];
    out.extend(sampled(step_ahead(&mut w, 1)));
    out.extend(sampled(step_ahead(&mut w, 1)));
    let before = stats(&mut w);
    assert_eq!(
        before.kv_cells_used, 18,
        "the pool is full to its last cell"
    );
    let reply = step_ahead(&mut w, 1);
    let Reply::StepAheadNotRun { reason } = &reply else {
        panic!("a step ahead on a full pool ran or was refused: {reply:?}");
    };
    assert!(reason.contains("18 cells used + 1 > 18"), "{reason}");
    let after = stats(&mut w);
    assert_eq!(
        (after.steps, after.tokens_decoded, after.kv_cells_used),
        (before.steps, before.tokens_decoded, before.kv_cells_used),
        "a step ahead that was not run leaves nothing"
    );
    let refused = |reply: Reply| matches!(reply, Reply::Error(e) if e.kind == ErrorKind::Invalid);
    assert!(
        refused(w.serve(Command::Rewind)),
        "nothing is left to rewind"
    );
    assert_eq!(out.len(), 3);
}

#[test]
fn a_step_that_does_not_fit_fails_only_its_chunk_s_request() {
    let mut w = small_pool(20);
    open(&mut w, 1, 0, None);
    read(&mut w, 1, &tokens("tell me a story!"));
    open(&mut w, 2, 1, None);
    // request 1's decode takes cell 17; request 2's 8-token chunk would need 8 of the 3 left
    let reply = ok(
        &mut w,
        Command::Step {
            chunk: Some(crate::protocol::Chunk {
                request: RequestId(2),
                start: 0,
                tokens: tokens("a second"),
                last: true,
                prompt_tokens: 0,
            }),
            decode: vec![RequestId(1)],
        },
    );
    let Reply::StepDone(done) = reply else {
        panic!("{reply:?}");
    };
    assert_eq!(done.failed.len(), 1, "{done:?}");
    assert_eq!(done.failed[0].request, RequestId(2));
    assert!(
        done.failed[0].message.contains("the KV pool is full"),
        "{done:?}"
    );
    assert_eq!(
        done.sampled.iter().map(|s| s.request).collect::<Vec<_>>(),
        vec![RequestId(1)],
        "the decode ran"
    );
    assert_eq!(
        done.kv_cells_used,
        Some(17),
        "the reply carries the pool's use"
    );
}

#[test]
fn an_injected_error_at_a_step_ahead_answers_instead_and_leaves_the_next_step_whole() {
    let mut w = with_fault("error-at-ahead:2");
    open(&mut w, 1, 0, None);
    let mut out = vec![read(&mut w, 1, &tokens("tell me a story"))];
    let ahead = || Command::StepAhead {
        decode: vec![RequestId(1)],
    };
    out.extend(sampled(served(&mut w, ahead()).unwrap()));
    assert!(served(&mut w, ahead()).is_none(), "the second is the fault");
    out.extend(decode(&mut w, 1, 29));
    assert_eq!(out, uninterrupted(None));
}
