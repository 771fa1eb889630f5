//! Checkpoints in the worker, on the simulated engine with a cache that cannot be cut inside
//! a sequence (`non_trimmable`, as a recurrent model's): taken at the end of each prompt read
//! and every `min_step` tokens within one, reported with the step, restored by a cut to
//! exactly their place, carried by parks and conversation saves, bounded.

use super::FakeOptions;
use super::Worker;
use super::fake::tests::{decode, ok, tokens};
use super::fake::{FAKE_BYTES_PER_TOKEN, FakeEngine};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{CheckpointAt, Chunk, Command, Reply, Sampling, SeqCheckpoints, StepDone};

fn worker(min_step: u32, bytes: u64) -> Worker<FakeEngine> {
    let options = FakeOptions {
        non_trimmable: true,
        ..FakeOptions::instant()
    };
    Worker::new(FakeEngine::new(&options, 1, 3).unwrap(), 1 << 30)
        .with_checkpoints(32, bytes, min_step)
}

fn open(w: &mut Worker<FakeEngine>, request: u64, seq: u32, keep_tokens: u32) -> Reply {
    w.serve(Command::Open {
        request: RequestId(request),
        seq: SeqId(seq),
        keep_tokens,
        sampling: Sampling::default(),
    })
}

/// Reads `prompt[start..]` in chunks of `chunk` tokens: every step's reply.
fn read_from(
    w: &mut Worker<FakeEngine>,
    request: u64,
    prompt: &[TokenId],
    start: usize,
    chunk: usize,
) -> Vec<StepDone> {
    let mut at = start;
    let mut replies = Vec::new();
    while at < prompt.len() {
        let end = (at + chunk).min(prompt.len());
        let reply = ok(
            w,
            Command::Step {
                chunk: Some(Chunk {
                    request: RequestId(request),
                    start: at as u32,
                    tokens: prompt[at..end].to_vec(),
                    last: end == prompt.len(),
                }),
                decode: vec![],
            },
        );
        let Reply::StepDone(done) = reply else {
            panic!("{reply:?}")
        };
        replies.push(done);
        at = end;
    }
    replies
}

fn close(w: &mut Worker<FakeEngine>, request: u64) {
    ok(
        w,
        Command::Close {
            request: RequestId(request),
        },
    );
}

/// The report of `seq` holding checkpoints at `places` (the simulated engine's bytes).
fn report(seq: u32, places: &[u32]) -> Vec<SeqCheckpoints> {
    vec![SeqCheckpoints {
        seq: SeqId(seq),
        checkpoints: places
            .iter()
            .map(|&tokens| CheckpointAt {
                tokens,
                bytes: u64::from(tokens) * FAKE_BYTES_PER_TOKEN,
            })
            .collect(),
    }]
}

#[test]
fn a_cut_back_to_the_end_of_the_last_read_restores_its_checkpoint_and_continues_as_from_scratch() {
    let first = tokens(&"the history of the salt road. ".repeat(4));
    let mut w = worker(u32::MAX, 1 << 30);
    assert!(matches!(open(&mut w, 1, 0, 0), Reply::Opened { .. }));
    let replies = read_from(&mut w, 1, &first, 0, 64);
    let n = first.len() as u32;
    assert_eq!(replies.last().unwrap().checkpoints, report(0, &[n]));
    assert!(
        replies[..replies.len() - 1]
            .iter()
            .all(|d| d.checkpoints.is_empty())
    );
    let answer = decode(&mut w, 1, 6);
    close(&mut w, 1);

    // the next turn departs right where the last prompt ended (the answer re-rendered)
    let mut next = first.clone();
    next.extend(tokens("a re-rendered answer, then the user's next turn"));
    assert_ne!(&next[first.len()..first.len() + answer.len()], &answer[..]);
    // a cut anywhere but at the checkpoint is refused, as the cache refuses it
    assert!(matches!(open(&mut w, 2, 0, n - 3), Reply::Error(_)));
    assert!(matches!(open(&mut w, 2, 0, n), Reply::Opened { kept_tokens, .. } if kept_tokens == n));
    let continued = {
        read_from(&mut w, 2, &next, first.len(), 64);
        decode(&mut w, 2, 8)
    };
    let stats = w.stats();
    assert_eq!(
        (stats.checkpoint_restores, stats.checkpoint_tokens_saved),
        (1, u64::from(n))
    );

    let mut fresh = worker(u32::MAX, 1 << 30);
    open(&mut fresh, 1, 0, 0);
    read_from(&mut fresh, 1, &next, 0, 64);
    assert_eq!(
        continued,
        decode(&mut fresh, 1, 8),
        "the restored state differs"
    );
}

#[test]
fn a_long_read_takes_a_checkpoint_every_min_step_tokens_and_one_at_its_end() {
    let prompt = tokens(&"x".repeat(300));
    let mut w = worker(100, 1 << 30);
    open(&mut w, 1, 0, 0);
    let taken: Vec<Vec<SeqCheckpoints>> = read_from(&mut w, 1, &prompt, 0, 64)
        .into_iter()
        .map(|d| d.checkpoints)
        .collect();
    // chunks end at 64, 128, 192, 256, 300: 128 and 256 are 100 past the last, 300 ends it
    assert_eq!(
        taken,
        [
            vec![],
            report(0, &[128]),
            vec![],
            report(0, &[128, 256]),
            report(0, &[128, 256, 300]),
        ]
    );
}

#[test]
fn checkpoints_travel_with_a_saved_conversation_and_a_parked_request() {
    let prompt = tokens(&"y".repeat(200));
    let mut w = worker(u32::MAX, 1 << 30);
    open(&mut w, 1, 0, 0);
    read_from(&mut w, 1, &prompt, 0, 64);
    decode(&mut w, 1, 3);
    ok(
        &mut w,
        Command::Park {
            request: RequestId(1),
        },
    );
    assert_eq!(
        w.stats().checkpoints,
        0,
        "the checkpoints left the pool with the state"
    );
    ok(
        &mut w,
        Command::Restore {
            request: RequestId(1),
            seq: SeqId(2),
        },
    );
    close(&mut w, 1);
    ok(
        &mut w,
        Command::SaveConversation {
            seq: SeqId(2),
            key: 7,
            keep: vec![],
        },
    );
    ok(
        &mut w,
        Command::LoadConversation {
            key: 7,
            seq: SeqId(1),
            take: true,
        },
    );
    assert!(matches!(open(&mut w, 2, 1, 200), Reply::Opened { .. }));
    assert_eq!(w.stats().checkpoint_restores, 1);
}

#[test]
fn past_the_bytes_bound_the_oldest_checkpoint_of_another_sequence_leaves_and_is_reported() {
    let prompt = tokens(&"z".repeat(100));
    let one = prompt.len() as u64 * FAKE_BYTES_PER_TOKEN;
    let mut w = worker(u32::MAX, one + one / 2);
    open(&mut w, 1, 0, 0);
    read_from(&mut w, 1, &prompt, 0, 100);
    decode(&mut w, 1, 2);
    close(&mut w, 1);
    open(&mut w, 2, 1, 0);
    let done = read_from(&mut w, 2, &prompt, 0, 100);
    let mut both = report(0, &[]);
    both.extend(report(1, &[100]));
    assert_eq!(done[0].checkpoints, both);
    // sequence 0 (102 tokens) has no checkpoint left to be cut back to
    assert!(matches!(open(&mut w, 3, 0, 100), Reply::Error(_)));
    assert_eq!(w.stats().checkpoints, 1);
}
