//! Shared test fixtures: the real model, the worker binary, a serial lock for real-model tests.

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard, OnceLock};
use strata_desk::engine::{EngineProcess, WorkerLaunch};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::{Chunk, Command, Reply, Sampling, StepDone};
use strata_desk::tokenizer::Tokenizer;

/// The test model: `STRATA_TEST_MODEL`, else the default model (fetched once if missing).
pub fn model_path() -> PathBuf {
    static PATH: OnceLock<PathBuf> = OnceLock::new();
    PATH.get_or_init(|| match std::env::var_os("STRATA_TEST_MODEL") {
        Some(path) => PathBuf::from(path),
        None => strata_desk::models::ensure_default_model().expect("the default model"),
    })
    .clone()
}

/// Real-model tests run one at a time: two engines on two cores would time each other out.
pub fn real_model() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

pub fn worker_exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_strata-desk"))
}

pub fn launch(slots: u32, threads: u32) -> WorkerLaunch {
    WorkerLaunch::new(
        worker_exe(),
        WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 4096,
            slots,
            threads,
            ..strata_desk::protocol::EngineSettings::for_model(model_path())
        }),
    )
}

pub async fn start(slots: u32, threads: u32) -> EngineProcess {
    EngineProcess::start(&launch(slots, threads), 1)
        .await
        .expect("the worker starts")
}

pub fn tokenizer() -> &'static Tokenizer {
    static TOKENIZER: OnceLock<Tokenizer> = OnceLock::new();
    TOKENIZER.get_or_init(|| Tokenizer::load(&model_path()).expect("the vocabulary loads"))
}

/// A ChatML prompt of the user text, tokenized as the app does.
pub fn chat_prompt(user: &str) -> Vec<TokenId> {
    let t = tokenizer();
    let template = strata_desk::chat::ChatTemplate::new(
        t.chat_template().as_deref(),
        &t.bos_text(),
        &t.eos_text(),
    )
    .unwrap();
    let segments = template
        .render(&[strata_desk::chat::ChatMessage::new("user", user)])
        .unwrap();
    t.tokenize_segments(&segments)
}

/// A long, varied text: numbered facts about made-up towns.
pub fn long_text(sentences: usize) -> String {
    let towns = [
        "Arden", "Belmoor", "Caskin", "Dunmere", "Elsworth", "Farrow", "Glenholt",
    ];
    let goods = [
        "wool", "copper", "barley", "salt", "timber", "glass", "cheese",
    ];
    (0..sentences)
        .map(|i| {
            format!(
                "Fact {i}: the town of {} traded {} bales of {} in year {}. ",
                towns[i % towns.len()],
                (i * 37) % 500 + 3,
                goods[(i * 3) % goods.len()],
                1700 + (i * 11) % 300
            )
        })
        .collect()
}

/// `n` tokens of `model`'s vocabulary from text seeded by `seed` (its BOS first when `bos`).
pub fn seeded_tokens(model: &std::path::Path, n: usize, seed: usize, bos: bool) -> Vec<TokenId> {
    let t = Tokenizer::load(model).expect("the vocabulary loads");
    let mut out: Vec<TokenId> = if bos {
        t.bos_to_add().into_iter().collect()
    } else {
        Vec::new()
    };
    let text = long_text(n / 8 + 40 + seed).split_off(seed * 997 % 400);
    out.extend(t.tokenize_text(&text));
    assert!(out.len() >= n, "only {} tokens", out.len());
    out.truncate(n);
    out
}

/// A whole prompt read in one chunk.
pub fn whole_prompt(request: RequestId, tokens: &[TokenId]) -> Chunk {
    Chunk {
        request,
        start: 0,
        tokens: tokens.to_vec(),
        last: true,
        prompt_tokens: tokens.len() as u32,
    }
}

/// Reads `prompt[from..]` on absolute `chunk_tokens` boundaries: each step's reply.
pub async fn read_on_boundaries(
    engine: &mut EngineProcess,
    request: RequestId,
    prompt: &[TokenId],
    from: usize,
    chunk_tokens: usize,
) -> Vec<StepDone> {
    let mut replies = Vec::new();
    let mut start = from;
    while start < prompt.len() {
        let end = ((start / chunk_tokens + 1) * chunk_tokens).min(prompt.len());
        let chunk = Chunk {
            request,
            start: start as u32,
            tokens: prompt[start..end].to_vec(),
            last: end == prompt.len(),
            prompt_tokens: prompt.len() as u32,
        };
        replies.push(step(engine, Some(chunk), vec![]).await);
        start = end;
    }
    replies
}

pub fn greedy() -> Sampling {
    Sampling::default()
}

pub async fn call(engine: &mut EngineProcess, command: Command) -> Reply {
    let deadline = engine.step_deadline(4096, 8);
    engine
        .call(command, deadline)
        .await
        .expect("the call succeeds")
}

pub async fn step(
    engine: &mut EngineProcess,
    chunk: Option<Chunk>,
    decode: Vec<RequestId>,
) -> StepDone {
    match call(engine, Command::Step { chunk, decode }).await {
        Reply::StepDone(done) => done,
        other => panic!("expected a step reply, got {other:?}"),
    }
}

pub async fn open(engine: &mut EngineProcess, request: RequestId, seq: SeqId, sampling: Sampling) {
    let reply = call(
        engine,
        Command::Open {
            request,
            seq,
            keep_tokens: 0,
            sampling,
        },
    )
    .await;
    assert!(matches!(reply, Reply::Opened { .. }), "{reply:?}");
}

/// Reads `prompt` in chunks of `chunk_tokens`, then decodes until `n` tokens were sampled
/// (the first comes from the prompt's last chunk). Returns the sampled token ids.
pub async fn run_alone(
    engine: &mut EngineProcess,
    request: RequestId,
    seq: SeqId,
    prompt: &[TokenId],
    chunk_tokens: usize,
    n: usize,
    sampling: Sampling,
) -> Vec<TokenId> {
    open(engine, request, seq, sampling).await;
    let pieces: Vec<&[TokenId]> = prompt.chunks(chunk_tokens).collect();
    let mut out = Vec::new();
    for (i, piece) in pieces.iter().enumerate() {
        let chunk = Chunk {
            request,
            start: (i * chunk_tokens) as u32,
            tokens: piece.to_vec(),
            last: i + 1 == pieces.len(),
            prompt_tokens: prompt.len() as u32,
        };
        let done = step(engine, Some(chunk), vec![]).await;
        out.extend(done.sampled.iter().map(|s| s.token));
    }
    while out.len() < n {
        let done = step(engine, None, vec![request]).await;
        out.extend(done.sampled.iter().map(|s| s.token));
    }
    call(engine, Command::Close { request }).await;
    out
}

/// Reads `prompt[from..]` for an open request in chunks that end on absolute multiples of
/// `chunk_tokens` (as an uninterrupted read from 0 would); returns the first sampled token.
pub async fn read_aligned(
    engine: &mut EngineProcess,
    request: RequestId,
    prompt: &[TokenId],
    from: usize,
    chunk_tokens: usize,
) -> TokenId {
    let mut start = from;
    loop {
        let end = ((start / chunk_tokens + 1) * chunk_tokens).min(prompt.len());
        let last = end == prompt.len();
        let chunk = Chunk {
            request,
            start: start as u32,
            tokens: prompt[start..end].to_vec(),
            last,
            prompt_tokens: prompt.len() as u32,
        };
        let done = step(engine, Some(chunk), vec![]).await;
        if last {
            return done.sampled[0].token;
        }
        start = end;
    }
}

/// Decodes `n` more tokens for one request, alone.
pub async fn decode_n(engine: &mut EngineProcess, request: RequestId, n: usize) -> Vec<TokenId> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let done = step(engine, None, vec![request]).await;
        out.push(done.sampled[0].token);
    }
    out
}

pub async fn stats(engine: &mut EngineProcess) -> strata_desk::protocol::Stats {
    match call(engine, Command::Stats).await {
        Reply::Stats(stats) => stats,
        other => panic!("expected stats, got {other:?}"),
    }
}

pub fn seeded(seed: u32) -> Sampling {
    Sampling {
        temperature: 0.9,
        seed,
        ..Sampling::default()
    }
}

/// The Python with the official client packages (`tests/python/requirements.txt`) that
/// `./scripts/test.sh` makes in `.venv` and names in `STRATA_TEST_PYTHON`.
pub fn test_python() -> String {
    std::env::var("STRATA_TEST_PYTHON").expect(
        "STRATA_TEST_PYTHON must name a Python with the packages of tests/python/requirements.txt: \
         ./scripts/test.sh makes one in .venv",
    )
}

/// A script file for the simulated engine: the first rule whose text the prompt contains
/// gives the output.
pub fn script(rules: &[(&str, &str)]) -> PathBuf {
    static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = std::env::temp_dir().join(format!("strata-script-{}-{n}.json", std::process::id()));
    let rules: Vec<serde_json::Value> = rules
        .iter()
        .map(|(when, output)| serde_json::json!({"prompt_contains": when, "output": output}))
        .collect();
    std::fs::write(&path, serde_json::json!({ "rules": rules }).to_string()).unwrap();
    path
}

/// A multi-threaded runtime of its own, for tests that run frames on their own thread
/// (egui_kittest) and block on the server's work between them.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// Waits, polling every 10 ms for at most 30 s, until `check` holds.
pub async fn until(what: &str, check: impl Fn() -> bool) {
    let started = std::time::Instant::now();
    while !check() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(30),
            "timed out waiting until {what}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

/// The app's own server for the config file at `path` (changes are saved to it): the control
/// plane and the HTTP server on a free loopback port, as the window and `--headless` start it.
pub fn app_server(
    rt: &tokio::runtime::Runtime,
    path: &std::path::Path,
) -> (strata_desk::server::Running, std::net::SocketAddr) {
    let config =
        strata_desk::config::Config::load(Some(path), &strata_desk::config::Overrides::default())
            .unwrap();
    let _enter = rt.enter();
    let listener = rt
        .block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))
        .unwrap();
    let addr = listener.local_addr().unwrap();
    let running =
        strata_desk::server::start_on(listener, &config, Some(path.to_path_buf()), worker_exe())
            .unwrap();
    (running, addr)
}
