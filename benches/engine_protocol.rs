//! The engine worker's protocol against llama.cpp called in process, side by side in one run:
//! the same model, threads, context, prompt and chunking. Reports prompt-read and decode
//! tokens/s for both and their ratio, the host's overhead per decoded token with one step at a
//! time and pipelined (a step ahead, as the app sends them), and park/restore cost.
//!
//! `cargo bench --bench engine_protocol` (uses `STRATA_TEST_MODEL` or the default model;
//! `STRATA_BENCH_ROUNDS` rounds, 4 by default). Not a test: it asserts nothing and prints a
//! table of medians with the [lowest–highest] round beside each.

use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::num::NonZeroU32;
use std::path::PathBuf;
use std::time::{Duration, Instant};
use strata_desk::engine::{EngineProcess, WorkerLaunch};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::EngineSettings;
use strata_desk::protocol::{Chunk, Command, Reply, Sampling};

const THREADS: u32 = 1;
const CTX: u32 = 4096;
const CHUNK: usize = 256;
const PROMPT_TOKENS: usize = 1536;
const DECODE_TOKENS: usize = 128;
const DEFAULT_ROUNDS: usize = 4;

fn rounds() -> usize {
    std::env::var("STRATA_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_ROUNDS)
}

struct Run {
    read_secs: f64,
    decode_secs: f64,
    worker_step_secs: f64,
}

fn model_path() -> PathBuf {
    std::env::var_os("STRATA_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| strata_desk::models::ensure_default_model().expect("model"))
}

fn prompt(model: &LlamaModel) -> Vec<TokenId> {
    let text: String = (0..400)
        .map(|i| {
            format!(
                "Record {i}: the mill at Farrow ground {} sacks of barley. ",
                i * 7 % 300
            )
        })
        .collect();
    let tokens = model.vocab().tokenize(text.as_bytes(), false, false);
    tokens.iter().take(PROMPT_TOKENS).map(|t| t.0).collect()
}

fn in_process(backend: &LlamaBackend, model: &LlamaModel, prompt: &[TokenId]) -> Run {
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(CTX))
        .with_n_batch(2048)
        .with_n_ubatch(512)
        .with_n_seq_max(1)
        .with_kv_unified(true)
        .with_n_threads(THREADS as i32)
        .with_n_threads_batch(THREADS as i32);
    let mut ctx = model.new_context(backend, params).expect("context");
    let mut batch = LlamaBatch::new(2048, 1);
    let mut sampler = LlamaSampler::greedy();
    let started = Instant::now();
    let mut token = 0;
    for (i, piece) in prompt.chunks(CHUNK).enumerate() {
        batch.clear();
        for (j, t) in piece.iter().enumerate() {
            let last = (i * CHUNK + j + 1) == prompt.len();
            batch
                .add(LlamaToken(*t), (i * CHUNK + j) as i32, &[0], last)
                .unwrap();
        }
        ctx.decode(&mut batch).expect("decode");
        if (i + 1) * CHUNK >= prompt.len() {
            token = sampler.sample(&ctx, batch.n_tokens() - 1).0;
        }
    }
    let read_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    for n in 0..DECODE_TOKENS {
        batch.clear();
        batch
            .add(LlamaToken(token), (prompt.len() + n) as i32, &[0], true)
            .unwrap();
        ctx.decode(&mut batch).expect("decode");
        token = sampler.sample(&ctx, 0).0;
    }
    Run {
        read_secs,
        decode_secs: started.elapsed().as_secs_f64(),
        worker_step_secs: 0.0,
    }
}

async fn through_protocol(
    engine: &mut EngineProcess,
    round: u64,
    prompt: &[TokenId],
    pipelined: bool,
) -> Run {
    let deadline = Duration::from_secs(120);
    let request = RequestId(round);
    let open = Command::Open {
        request,
        seq: SeqId(0),
        keep_tokens: 0,
        sampling: Sampling::default(),
    };
    engine.call(open, deadline).await.expect("open");
    let mut worker_secs = 0.0;
    let started = Instant::now();
    let pieces: Vec<&[TokenId]> = prompt.chunks(CHUNK).collect();
    for (i, piece) in pieces.iter().enumerate() {
        let chunk = Chunk {
            request,
            start: (i * CHUNK) as u32,
            tokens: piece.to_vec(),
            last: i + 1 == pieces.len(),
            prompt_tokens: 0,
        };
        engine
            .call(
                Command::Step {
                    chunk: Some(chunk),
                    decode: vec![],
                },
                deadline,
            )
            .await
            .expect("read");
    }
    let read_secs = started.elapsed().as_secs_f64();
    let started = Instant::now();
    // One step at a time, or pipelined as the app does: each step's successor is sent as a
    // step ahead before its reply arrives, so the worker goes from one step to the next.
    let step = || Command::Step {
        chunk: None,
        decode: vec![request],
    };
    let ahead = || Command::StepAhead {
        decode: vec![request],
    };
    let mut waiting_for = engine.send(step()).expect("step");
    let mut next = (pipelined && DECODE_TOKENS > 1).then(|| engine.send(ahead()).expect("ahead"));
    for k in 1..=DECODE_TOKENS {
        let line = engine.recv_for(waiting_for, deadline).await.expect("reply");
        if let Reply::StepDone(done) = line.reply {
            worker_secs += done.step_micros as f64 / 1e6;
        }
        if k == DECODE_TOKENS {
            break;
        }
        waiting_for = match next.take() {
            Some(id) => {
                if k + 1 < DECODE_TOKENS {
                    next = Some(engine.send(ahead()).expect("ahead"));
                }
                id
            }
            None => engine.send(step()).expect("step"),
        };
    }
    let decode_secs = started.elapsed().as_secs_f64();
    engine
        .call(Command::Close { request }, deadline)
        .await
        .expect("close");
    engine
        .call(
            Command::Trim {
                seq: SeqId(0),
                keep_tokens: 0,
            },
            deadline,
        )
        .await
        .expect("trim");
    Run {
        read_secs,
        decode_secs,
        worker_step_secs: worker_secs,
    }
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median with the lowest and highest value beside it: `12.3 [10.1–14.0]`.
fn spread(values: Vec<f64>, decimals: usize) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mid = median(values);
    format!("{mid:.decimals$} [{low:.decimals$}–{high:.decimals$}]")
}

fn main() {
    let path = model_path();
    strata_desk::engine_worker::modules::load().expect("llama.cpp's modules");
    let backend = LlamaBackend::init().expect("backend");
    let model =
        LlamaModel::load_from_file(&backend, &path, &LlamaModelParams::default()).expect("model");
    let prompt = prompt(&model);
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let options = WorkerOptions::of(EngineSettings {
        ctx_tokens: CTX,
        threads: THREADS,
        ..EngineSettings::for_model(path)
    });
    let mut engine = runtime
        .block_on(EngineProcess::start(
            &WorkerLaunch::new(PathBuf::from(env!("CARGO_BIN_EXE_strata-desk")), options),
            1,
        ))
        .expect("worker");

    let rounds = rounds();
    let (mut local, mut remote, mut piped) = (Vec::new(), Vec::new(), Vec::new());
    // Rotate which side goes first, so none always runs on a warmer machine.
    for round in 0..rounds {
        for turn in 0..3 {
            let id = (round * 3 + turn) as u64 + 1;
            match (round + turn) % 3 {
                0 => local.push(in_process(&backend, &model, &prompt)),
                1 => {
                    remote.push(runtime.block_on(through_protocol(&mut engine, id, &prompt, false)))
                }
                _ => piped.push(runtime.block_on(through_protocol(&mut engine, id, &prompt, true))),
            }
        }
    }
    let read = |r: &Run| prompt.len() as f64 / r.read_secs;
    let decode = |r: &Run| DECODE_TOKENS as f64 / r.decode_secs;
    let overhead_us = |r: &Run| (r.decode_secs - r.worker_step_secs) / DECODE_TOKENS as f64 * 1e6;
    // Each side's figure, and its ratio to in process paired round by round (the rounds'
    // machine speeds differ more than the sides do).
    let row = |what: &str, measure: &dyn Fn(&Run) -> f64, side: &[Run]| {
        let mine: Vec<f64> = local.iter().map(measure).collect();
        let theirs: Vec<f64> = side.iter().map(measure).collect();
        let ratios = mine.iter().zip(&theirs).map(|(m, t)| t / m).collect();
        println!(
            "| {what} | {} | {} | {} |",
            spread(mine, 1),
            spread(theirs, 1),
            spread(ratios, 3)
        );
    };
    // Park and restore at the end of a read prompt plus a few tokens.
    let (park_ms, restore_ms, bytes_per_token, tokens) = runtime.block_on(async {
        let deadline = Duration::from_secs(120);
        let request = RequestId(99);
        let open = Command::Open {
            request,
            seq: SeqId(0),
            keep_tokens: 0,
            sampling: Sampling::default(),
        };
        engine.call(open, deadline).await.unwrap();
        let chunk = Chunk {
            request,
            start: 0,
            tokens: prompt.clone(),
            last: true,
            prompt_tokens: 0,
        };
        engine
            .call(
                Command::Step {
                    chunk: Some(chunk),
                    decode: vec![],
                },
                deadline,
            )
            .await
            .unwrap();
        let mut park = Vec::new();
        let mut restore = Vec::new();
        let mut bytes = 0;
        let mut tokens = 0;
        for _ in 0..rounds {
            let Ok(Reply::Parked(p)) = engine.call(Command::Park { request }, deadline).await
            else {
                panic!("park")
            };
            let Ok(Reply::Restored(r)) = engine
                .call(
                    Command::Restore {
                        request,
                        seq: SeqId(0),
                    },
                    deadline,
                )
                .await
            else {
                panic!("restore")
            };
            park.push(p.micros as f64 / 1e3);
            restore.push(r.micros as f64 / 1e3);
            bytes = p.bytes;
            tokens = p.tokens;
        }
        (
            median(park),
            median(restore),
            bytes as f64 / f64::from(tokens),
            tokens,
        )
    });

    println!(
        "engine protocol vs in-process llama.cpp ({THREADS} thread, {PROMPT_TOKENS}-token prompt in {CHUNK}-token chunks, {DECODE_TOKENS} decoded; medians of {rounds} rounds [lowest–highest])"
    );
    println!("| measure | in process | through the worker | ratio, round by round |");
    println!("| --- | --- | --- | --- |");
    row("prompt read, tokens/s", &read, &remote);
    row("decode one step at a time, tokens/s", &decode, &remote);
    row("decode pipelined (a step ahead), tokens/s", &decode, &piped);
    println!(
        "host overhead per decoded token (decode time − worker's step time): one at a time {} µs, pipelined {} µs",
        spread(remote.iter().map(overhead_us).collect(), 0),
        spread(piped.iter().map(overhead_us).collect(), 0)
    );
    println!(
        "park {tokens} tokens: {park_ms:.1} ms; restore: {restore_ms:.1} ms; {bytes_per_token:.0} bytes per token"
    );
}
