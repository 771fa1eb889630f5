//! Checkpoints on a real recurrent model: a tiny Mamba with random weights
//! (`STRATA_TEST_MAMBA`, written by scripts/make-mamba.sh), whose state llama.cpp cannot cut
//! inside a sequence. The worker takes a checkpoint 4 tokens before each prompt's end; a next
//! turn that departs at the end (the answer re-rendered) is cut back to it, and what follows
//! is token-identical to the same prompt read from scratch (one thread, the same chunks: the
//! prompts' lengths put the near-end places on chunk boundaries).

use crate::support::*;
use strata_desk::engine::{EngineProcess, WorkerLaunch};
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::{Command, Reply};

const CHUNK: usize = 16;
const CONTINUATION_TOKENS: usize = 12;

fn mamba_path() -> std::path::PathBuf {
    let path = std::env::var_os("STRATA_TEST_MAMBA")
        .map(std::path::PathBuf::from)
        .expect("STRATA_TEST_MAMBA names the tests' recurrent model (scripts/make-mamba.sh)");
    assert!(path.is_file(), "{} is not a file", path.display());
    path
}

async fn mamba() -> EngineProcess {
    let launch = WorkerLaunch::new(
        worker_exe(),
        strata_desk::protocol::WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 2048,
            threads: 1,
            ..strata_desk::protocol::EngineSettings::for_model(mamba_path())
        }),
    );
    EngineProcess::start(&launch, 1)
        .await
        .expect("the worker starts with the recurrent model")
}

/// `n` tokens of the test vocabulary from text seeded by `seed`.
fn tokens(n: usize, seed: usize) -> Vec<TokenId> {
    seeded_tokens(&mamba_path(), n, seed, false)
}

/// Opens `request` on sequence 0 keeping `keep_tokens`, reads `prompt[from..]` on absolute
/// `CHUNK` boundaries and decodes: the sampled tokens.
async fn turn(
    engine: &mut EngineProcess,
    request: u64,
    keep_tokens: u32,
    prompt: &[TokenId],
) -> Vec<TokenId> {
    let opened = call(
        engine,
        Command::Open {
            request: RequestId(request),
            seq: SeqId(0),
            keep_tokens,
            sampling: greedy(),
        },
    )
    .await;
    assert!(
        matches!(opened, Reply::Opened { kept_tokens, .. } if kept_tokens == keep_tokens),
        "{opened:?}"
    );
    let from = keep_tokens as usize;
    let replies = read_on_boundaries(engine, RequestId(request), prompt, from, CHUNK).await;
    let mut sampled: Vec<TokenId> = replies
        .last()
        .map_or(Vec::new(), |d| d.sampled.iter().map(|s| s.token).collect());
    let request = RequestId(request);
    sampled.extend(decode_n(engine, request, CONTINUATION_TOKENS - 1).await);
    call(engine, Command::Close { request }).await;
    sampled
}

#[tokio::test]
async fn a_recurrent_state_cut_back_to_its_checkpoint_continues_token_identical() {
    let _serial = real_model();
    let mut engine = mamba().await;
    let model = &engine.handshake().model;
    assert!(!model.trims_at_any_token && model.keeps_checkpoints);
    assert_eq!(model.rewindable_tokens, 0);

    // turn 1: 260 prompt tokens and 12 sampled (11 of them decoded into the state)
    let first = tokens(260, 0);
    turn(&mut engine, 1, 0, &first).await;
    // turn 2 departs right after turn 1's prompt: only the checkpoint at 256, 4 before its end,
    // can give it back
    let mut second = first.clone();
    second.extend(tokens(16, 1));
    let continued = turn(&mut engine, 2, 256, &second).await;
    let stats = match call(&mut engine, Command::Stats).await {
        Reply::Stats(stats) => stats,
        other => panic!("{other:?}"),
    };
    assert_eq!(stats.checkpoint_restores, 1);
    eprintln!(
        "the recurrent test model: {} checkpoints, {} bytes",
        stats.checkpoints, stats.checkpoint_bytes
    );
    engine.shutdown().await;

    let mut fresh = mamba().await;
    let scratch = turn(&mut fresh, 1, 0, &second).await;
    fresh.shutdown().await;
    assert_eq!(
        continued, scratch,
        "continued from the checkpoint, the state differs from a read from scratch"
    );
    let distinct: std::collections::BTreeSet<_> = scratch.iter().collect();
    assert!(
        distinct.len() > 2,
        "random weights that say nothing: {scratch:?}"
    );
}
