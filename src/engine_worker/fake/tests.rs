//! The simulated engine's own tests, and the helpers other worker tests share.

use super::*;
use crate::engine_worker::Worker;
use crate::protocol::{Chunk, Command, Reply};

pub(crate) fn worker(slots: u32, script: Option<FakeScript>) -> Worker<FakeEngine> {
    let mut engine = FakeEngine::new(&FakeOptions::instant(), slots, slots + 1).unwrap();
    if let Some(script) = script {
        engine.script = script;
    }
    Worker::new(engine, 1 << 30)
}

pub(crate) fn ok(worker: &mut Worker<FakeEngine>, command: Command) -> Reply {
    match worker.serve(command) {
        Reply::Error(e) => panic!("refused: {e:?}"),
        reply => reply,
    }
}

pub(crate) fn tokens(text: &str) -> Vec<TokenId> {
    text.bytes().map(TokenId::from).collect()
}

pub(crate) fn open(worker: &mut Worker<FakeEngine>, request: u64, seq: u32, seed: Option<u32>) {
    let sampling = Sampling {
        temperature: if seed.is_some() { 1.0 } else { 0.0 },
        seed: seed.unwrap_or(0),
        ..Sampling::default()
    };
    ok(
        worker,
        Command::Open {
            request: RequestId(request),
            seq: SeqId(seq),
            keep_tokens: 0,
            sampling,
        },
    );
}

pub(crate) fn sampled(reply: Reply) -> Vec<TokenId> {
    match reply {
        Reply::StepDone(done) => done.sampled.iter().map(|s| s.token).collect(),
        other => panic!("{other:?}"),
    }
}

pub(crate) fn read(worker: &mut Worker<FakeEngine>, request: u64, prompt: &[TokenId]) -> TokenId {
    let chunk = Chunk {
        request: RequestId(request),
        start: 0,
        tokens: prompt.to_vec(),
        last: true,
        prompt_tokens: 0,
    };
    sampled(ok(
        worker,
        Command::Step {
            chunk: Some(chunk),
            decode: vec![],
        },
    ))[0]
}

pub(crate) fn decode(worker: &mut Worker<FakeEngine>, request: u64, n: usize) -> Vec<TokenId> {
    (0..n)
        .map(|_| {
            sampled(ok(
                worker,
                Command::Step {
                    chunk: None,
                    decode: vec![RequestId(request)],
                },
            ))[0]
        })
        .collect()
}

pub(crate) fn uninterrupted(seed: Option<u32>) -> Vec<TokenId> {
    let mut w = worker(2, None);
    open(&mut w, 1, 0, seed);
    let mut out = vec![read(&mut w, 1, &tokens("tell me a story"))];
    out.extend(decode(&mut w, 1, 30));
    out
}

#[test]
fn a_parked_and_restored_request_continues_identically_greedy_and_seeded() {
    for seed in [None, Some(9)] {
        let mut w = worker(2, None);
        open(&mut w, 1, 0, seed);
        let mut out = vec![read(&mut w, 1, &tokens("tell me a story"))];
        out.extend(decode(&mut w, 1, 10));
        assert!(matches!(
            ok(
                &mut w,
                Command::Park {
                    request: RequestId(1)
                }
            ),
            Reply::Parked(_)
        ));
        open(&mut w, 2, 0, seed);
        read(&mut w, 2, &tokens("something else entirely"));
        decode(&mut w, 2, 5);
        ok(
            &mut w,
            Command::Restore {
                request: RequestId(1),
                seq: SeqId(1),
            },
        );
        out.extend(decode(&mut w, 1, 20));
        assert_eq!(out, uninterrupted(seed), "seed {seed:?}");
    }
}

#[test]
fn a_lost_token_changes_what_the_simulated_engine_says_next() {
    let mut w = worker(1, None);
    open(&mut w, 1, 0, None);
    let mut out = vec![read(&mut w, 1, &tokens("tell me a story"))];
    out.extend(decode(&mut w, 1, 10));
    ok(
        &mut w,
        Command::Park {
            request: RequestId(1),
        },
    );
    ok(
        &mut w,
        Command::Restore {
            request: RequestId(1),
            seq: SeqId(0),
        },
    );
    // Drop the last cached token behind the request's back, as a lossy park would.
    let held = w.stats().seq_tokens[0];
    w.backend_mut().seqs[0].truncate(held as usize - 1);
    w.backend_mut().seqs[0].push(TokenId::from(b'#'));
    out.extend(decode(&mut w, 1, 20));
    assert_ne!(out, uninterrupted(None));
}

#[test]
fn a_scripted_output_comes_out_byte_for_byte_then_ends() {
    let script = FakeScript {
        rules: vec![FakeRule {
            prompt_contains: "weather".into(),
            output: "<tool_call>{\"name\":\"w\"}</tool_call>".into(),
        }],
    };
    let mut w = worker(1, Some(script));
    open(&mut w, 1, 0, None);
    let mut out = vec![read(&mut w, 1, &tokens("what is the weather?"))];
    out.extend(decode(&mut w, 1, 40));
    let end = out.iter().position(|t| *t == FAKE_EOG).expect("ends");
    let text: Vec<u8> = out[..end].iter().map(|t| *t as u8).collect();
    assert_eq!(text, b"<tool_call>{\"name\":\"w\"}</tool_call>");
}

#[test]
fn the_simulated_kv_budget_fails_the_request_whose_chunk_does_not_fit() {
    let options = FakeOptions {
        kv_cells: 10,
        ..FakeOptions::instant()
    };
    let mut w = Worker::new(FakeEngine::new(&options, 1, 2).unwrap(), 0);
    open(&mut w, 1, 0, None);
    let reply = w.serve(Command::Step {
        chunk: Some(Chunk {
            request: RequestId(1),
            start: 0,
            tokens: tokens("eleven toks"),
            last: true,
            prompt_tokens: 0,
        }),
        decode: vec![],
    });
    // the request fails alone (the step still answers), never the engine
    let Reply::StepDone(done) = &reply else {
        panic!("{reply:?}");
    };
    assert!(
        done.failed.len() == 1
            && done.failed[0].kind == ErrorKind::Engine
            && done.failed[0].message.contains("KV pool is full")
            && done.sampled.is_empty(),
        "{reply:?}"
    );
}

#[test]
fn fault_specs_parse_or_name_what_was_wrong() {
    assert_eq!(
        parse_fault("die:3").unwrap(),
        (FaultAt::Step(3), ScheduledFault::Fault(Fault::Die))
    );
    assert_eq!(
        parse_fault("slow:2:150").unwrap(),
        (
            FaultAt::Step(2),
            ScheduledFault::Slow(Duration::from_millis(150))
        )
    );
    assert_eq!(
        parse_fault("error-at-message:7").unwrap(),
        (FaultAt::Message(7), ScheduledFault::Fault(Fault::Error))
    );
    assert_eq!(
        parse_fault("error-at-rewind:2").unwrap(),
        (FaultAt::Rewind(2), ScheduledFault::Fault(Fault::Error))
    );
    assert_eq!(
        parse_fault("error-at-ahead:3").unwrap(),
        (FaultAt::Ahead(3), ScheduledFault::Fault(Fault::Error))
    );
    assert_eq!(
        parse_fault("error-at-load:1").unwrap(),
        (FaultAt::Load(1), ScheduledFault::Fault(Fault::Error))
    );
    for bad in [
        "die",
        "die:x",
        "slow:2",
        "explode:1",
        "error:1",
        "die-at-message",
    ] {
        assert!(
            parse_fault(bad).unwrap_err().to_string().contains(bad),
            "{bad}"
        );
    }
}
