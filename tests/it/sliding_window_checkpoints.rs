//! Checkpoints on a real sliding-window model: Gemma 3 270M (`STRATA_TEST_GEMMA`, a 512-token
//! window in five layers of six) with its window layers keeping only their window. A
//! conversation that grew far past a prompt's end has let that point's window go; cut back
//! to 4 tokens before it, the worker restores the checkpoint it took there, and what follows
//! is token-identical to the same prompt read from scratch (one thread, the same chunk
//! boundaries: the prompts' lengths put the worker's near-end places on them).

use crate::models_hub::gemma_path;
use crate::support::*;
use strata_desk::engine::{EngineProcess, WorkerLaunch};
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::{Command, Reply, SeqCheckpoints};

/// The chunks of the reads compared: 16 tokens, so that the near-end places of both prompts
/// (4 and 4 + 512 before their ends, lengths 4 past a multiple of 16) fall on chunk
/// boundaries and no read is split where the other is not.
const CHUNK: usize = 16;
/// The second turn's chunks (its read is not compared).
const LONG_CHUNK: usize = 512;
const CONTINUATION_TOKENS: usize = 12;
/// The first prompt's length, and where its checkpoints are: 4 and 4 + 512 tokens before its
/// end.
const FIRST: usize = 1028;
const NEAR_END: [u32; 2] = [512, 1024];

async fn gemma(swa_full: bool) -> EngineProcess {
    let launch = WorkerLaunch::new(
        worker_exe(),
        strata_desk::protocol::WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 4096,
            // the window layers' cache: 512 x 2 sequences + 512 cells, which a 2,560-token
            // sequence wraps around
            kv_sequences: 2,
            threads: 1,
            swa_full,
            ..strata_desk::protocol::EngineSettings::for_model(gemma_path())
        }),
    );
    EngineProcess::start(&launch, 1)
        .await
        .expect("the worker starts with Gemma 3")
}

/// `n` tokens of Gemma's vocabulary (its BOS first for the first text) from text seeded by
/// `seed`.
fn tokens(n: usize, seed: usize) -> Vec<TokenId> {
    seeded_tokens(&gemma_path(), n, seed, seed == 0)
}

async fn open_keeping(engine: &mut EngineProcess, request: u64, keep_tokens: u32) -> Reply {
    call(
        engine,
        Command::Open {
            request: RequestId(request),
            seq: SeqId(0),
            keep_tokens,
            sampling: greedy(),
        },
    )
    .await
}

/// Reads `prompt[from..]` on absolute `chunk` boundaries, then decodes: the sampled tokens,
/// and each step's checkpoint report.
async fn continue_from(
    engine: &mut EngineProcess,
    request: u64,
    prompt: &[TokenId],
    (from, chunk): (usize, usize),
) -> (Vec<TokenId>, Vec<Vec<SeqCheckpoints>>) {
    let replies = read_on_boundaries(engine, RequestId(request), prompt, from, chunk).await;
    let mut sampled: Vec<TokenId> = replies
        .last()
        .map_or(Vec::new(), |d| d.sampled.iter().map(|s| s.token).collect());
    let reports = replies.into_iter().map(|d| d.checkpoints).collect();
    sampled.extend(decode_n(engine, RequestId(request), CONTINUATION_TOKENS - 1).await);
    (sampled, reports)
}

async fn stats(engine: &mut EngineProcess) -> strata_desk::protocol::Stats {
    match call(engine, Command::Stats).await {
        Reply::Stats(stats) => stats,
        other => panic!("{other:?}"),
    }
}

/// Turn 1 reads a 1,028-token prompt (checkpoints at 512 and 1,024); turn 2 continues it
/// whole with 1,536 more, so the window cells before 1,028 are overwritten. Returns turn 1's
/// prompt.
async fn two_turns(engine: &mut EngineProcess) -> Vec<TokenId> {
    let first = tokens(FIRST, 0);
    let mut second = first.clone();
    second.extend(tokens(1536, 1));
    assert!(matches!(
        open_keeping(engine, 1, 0).await,
        Reply::Opened { .. }
    ));
    let (_, reports) = continue_from(engine, 1, &first, (0, CHUNK)).await;
    let places = |r: &[SeqCheckpoints]| -> Vec<(SeqId, Vec<u32>)> {
        let tokens = |c: &SeqCheckpoints| c.checkpoints.iter().map(|k| k.tokens).collect();
        r.iter().map(|c| (c.seq, tokens(c))).collect()
    };
    let reported: Vec<_> = reports.iter().filter(|r| !r.is_empty()).collect();
    assert_eq!(reported.len(), 2, "{reports:?}");
    assert_eq!(places(reported[1]), [(SeqId(0), NEAR_END.to_vec())]);
    call(
        engine,
        Command::Close {
            request: RequestId(1),
        },
    )
    .await;
    // held: 1,028 prompt tokens and the 11 decoded; the next turn keeps 1,028 (a cut of 11
    // tokens, which the window still covers)
    assert!(matches!(
        open_keeping(engine, 2, FIRST as u32).await,
        Reply::Opened { .. }
    ));
    continue_from(engine, 2, &second, (FIRST, LONG_CHUNK)).await;
    call(
        engine,
        Command::Close {
            request: RequestId(2),
        },
    )
    .await;
    let before = stats(engine).await;
    assert_eq!(
        before.checkpoints, 4,
        "the checkpoints at 512, 1,024, 2,048, 2,560"
    );
    eprintln!(
        "Gemma 3 270M, 4 checkpoints: {} bytes ({} per checkpoint)",
        before.checkpoint_bytes,
        before.checkpoint_bytes / 4
    );
    first
}

#[tokio::test]
async fn a_conversation_cut_back_past_its_window_continues_from_a_checkpoint_token_identical() {
    let _serial = real_model();
    let full = gemma(true).await;
    let model = &full.handshake().model;
    assert!(!model.keeps_checkpoints && model.rewindable_tokens == u32::MAX);
    full.shutdown().await;

    let mut engine = gemma(false).await;
    let model = &engine.handshake().model;
    assert!(model.keeps_checkpoints, "a window cache keeps checkpoints");
    assert_eq!(model.rewindable_tokens, 1);

    let first = two_turns(&mut engine).await;

    // turn 3 departs from turn 2 right after the first prompt (turn 1's answer re-rendered):
    // cut back to the checkpoint 4 tokens before it
    let mut third = first.clone();
    // a short departure: what follows leans on the window before it, which only the
    // checkpoint holds
    third.extend(tokens(16, 2));
    assert!(
        matches!(
            open_keeping(&mut engine, 3, NEAR_END[1]).await,
            Reply::Opened {
                kept_tokens: 1024,
                ..
            }
        ),
        "the cut back to the checkpoint was refused"
    );
    let after = stats(&mut engine).await;
    assert_eq!(
        after.checkpoint_restores, 1,
        "the cut needed the checkpoint"
    );
    let (continued, _) = continue_from(&mut engine, 3, &third, (1024, CHUNK)).await;
    engine.shutdown().await;

    let mut fresh = gemma(false).await;
    assert!(matches!(
        open_keeping(&mut fresh, 1, 0).await,
        Reply::Opened { .. }
    ));
    let (scratch, _) = continue_from(&mut fresh, 1, &third, (0, CHUNK)).await;
    fresh.shutdown().await;
    assert_eq!(
        continued, scratch,
        "continued from the checkpoint, the conversation differs from a read from scratch"
    );
}
