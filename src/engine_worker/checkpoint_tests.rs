//! Checkpoints in the worker, on the simulated engine with a cache that cannot be cut inside
//! a sequence (`non_trimmable`, as a recurrent model's): taken 4 and 4 + ubatch tokens before
//! each prompt's end and every `min_step` tokens within a read, reported with the step,
//! restored by a cut to exactly their place, carried by parks and conversation saves, bounded.

use super::FakeOptions;
use super::Worker;
use super::fake::tests::{decode, ok, tokens};
use super::fake::{FAKE_BYTES_PER_TOKEN, FakeEngine};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{CheckpointAt, Chunk, Command, Reply, Sampling, SeqCheckpoints, StepDone};

/// The physical batch the tests' workers place their second checkpoint before a prompt's end
/// by (4 + this).
const UBATCH: u32 = 32;

fn worker(min_step: u32, bytes: u64, ubatch: u32) -> Worker<FakeEngine> {
    let options = FakeOptions {
        non_trimmable: true,
        ..FakeOptions::instant()
    };
    Worker::new(FakeEngine::new(&options, 1, 3).unwrap(), 1 << 30).with_checkpoints(
        32,
        bytes,
        min_step,
        super::worker::before_end_tokens(ubatch),
    )
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
                    prompt_tokens: prompt.len() as u32,
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
fn a_departure_at_the_last_prompt_s_end_restores_the_checkpoint_4_tokens_before_it_and_continues_as_from_scratch()
 {
    let first = tokens(&"the history of the salt road. ".repeat(4));
    let mut w = worker(u32::MAX, 1 << 30, UBATCH);
    assert!(matches!(open(&mut w, 1, 0, 0), Reply::Opened { .. }));
    let replies = read_from(&mut w, 1, &first, 0, 64);
    let n = first.len() as u32;
    let near_end = [n - 4 - UBATCH, n - 4];
    assert_eq!(replies.last().unwrap().checkpoints, report(0, &near_end));
    let answer = decode(&mut w, 1, 6);
    close(&mut w, 1);

    // the next turn departs right where the last prompt ended (the answer re-rendered)
    let mut next = first.clone();
    next.extend(tokens("a re-rendered answer, then the user's next turn"));
    assert_ne!(&next[first.len()..first.len() + answer.len()], &answer[..]);
    // a cut anywhere but at a checkpoint is refused, as the cache refuses it: the end of the
    // last prompt too
    assert!(matches!(open(&mut w, 2, 0, n), Reply::Error(_)));
    let kept = n - 4;
    assert!(
        matches!(open(&mut w, 2, 0, kept), Reply::Opened { kept_tokens, .. } if kept_tokens == kept)
    );
    let continued = {
        read_from(&mut w, 2, &next, kept as usize, 64);
        decode(&mut w, 2, 8)
    };
    let stats = w.stats();
    assert_eq!(
        (stats.checkpoint_restores, stats.checkpoint_tokens_saved),
        (1, u64::from(kept))
    );

    let mut fresh = worker(u32::MAX, 1 << 30, UBATCH);
    open(&mut fresh, 1, 0, 0);
    read_from(&mut fresh, 1, &next, 0, 64);
    assert_eq!(
        continued,
        decode(&mut fresh, 1, 8),
        "the restored state differs"
    );
}

#[test]
fn a_long_read_takes_a_checkpoint_every_min_step_tokens_and_two_near_its_end() {
    let prompt = tokens(&"x".repeat(300));
    let mut w = worker(100, 1 << 30, 50);
    open(&mut w, 1, 0, 0);
    let taken: Vec<Vec<SeqCheckpoints>> = read_from(&mut w, 1, &prompt, 0, 64)
        .into_iter()
        .map(|d| d.checkpoints)
        .collect();
    // chunks end at 64, 128, 192, 256, 300: 128 is 100 past the start; 246 (54 before the
    // end) falls inside the fourth chunk, which is read in two runs, and 256 is then too near
    // it; 296 (4 before the end) inside the last
    assert_eq!(
        taken,
        [
            vec![],
            report(0, &[128]),
            vec![],
            report(0, &[128, 246]),
            report(0, &[128, 246, 296]),
        ]
    );
}

#[test]
fn a_place_at_a_chunk_s_start_is_taken_before_the_chunk_is_read() {
    // 68 tokens in chunks of 64: 4 before the end is where the last chunk starts
    let prompt = tokens(&"w".repeat(68));
    let mut w = worker(u32::MAX, 1 << 30, UBATCH);
    open(&mut w, 1, 0, 0);
    let taken: Vec<Vec<SeqCheckpoints>> = read_from(&mut w, 1, &prompt, 0, 64)
        .into_iter()
        .map(|d| d.checkpoints)
        .collect();
    assert_eq!(taken, [report(0, &[32]), report(0, &[32, 64])]);
}

#[test]
fn checkpoints_travel_with_a_saved_conversation_and_a_parked_request() {
    let prompt = tokens(&"y".repeat(200));
    let mut w = worker(u32::MAX, 1 << 30, UBATCH);
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
    assert!(matches!(open(&mut w, 2, 1, 196), Reply::Opened { .. }));
    assert_eq!(w.stats().checkpoint_restores, 1);
}

#[test]
fn past_the_bytes_bound_the_oldest_checkpoint_of_another_sequence_leaves_and_is_reported() {
    let prompt = tokens(&"z".repeat(100));
    let one = prompt.len() as u64 * FAKE_BYTES_PER_TOKEN;
    // one checkpoint a read (4 before the end: 4 + 100 before it is before the start)
    let mut w = worker(u32::MAX, one + one / 2, 100);
    open(&mut w, 1, 0, 0);
    read_from(&mut w, 1, &prompt, 0, 100);
    decode(&mut w, 1, 2);
    close(&mut w, 1);
    open(&mut w, 2, 1, 0);
    let done = read_from(&mut w, 2, &prompt, 0, 100);
    let mut both = report(0, &[]);
    both.extend(report(1, &[96]));
    assert_eq!(done[0].checkpoints, both);
    // sequence 0 (102 tokens) has no checkpoint left to be cut back to
    assert!(matches!(open(&mut w, 3, 0, 96), Reply::Error(_)));
    assert_eq!(w.stats().checkpoints, 1);
}
