//! What a grammar costs a decode step, through the engine worker on the test model, side by
//! side in one run: a request alone with no grammar, with a one-tool call grammar
//! (`{"x": string}`), with the 5 KB `anyOf` of 200 strings; and two requests decoding together,
//! both unconstrained or one of them under the `anyOf` grammar (what the other pays). The
//! figure is the worker's own step time (`step_micros`: the batch's decode and every sampling
//! in it), per step, over the steps where every request of the case is still generating.
//!
//! `cargo build --benches && target/debug/deps/grammar_cost-*` (or `cargo bench --bench
//! grammar_cost`; `STRATA_TEST_MODEL` or the default model; `STRATA_BENCH_ROUNDS` rounds, 4 by
//! default; `STRATA_BENCH_TEMPERATURE` to sample at a temperature with top-k 40 instead of
//! greedily). The cases take turns going first. Not a test: it prints medians with the
//! [lowest–highest] round, and each ratio paired round by round.

use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use serde_json::json;
use std::path::PathBuf;
use std::time::Duration;
use strata_desk::engine::{EngineProcess, WorkerLaunch};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::grammar::{ToolSpec, for_tool_calls};
use strata_desk::ids::{RequestId, SeqId, TokenId};
use strata_desk::protocol::EngineSettings;
use strata_desk::protocol::{Chunk, Command, Grammar, Reply, Sampling};

const CTX: u32 = 4096;
const STEPS: usize = 24;
const DEFAULT_ROUNDS: usize = 4;

fn rounds() -> usize {
    std::env::var("STRATA_BENCH_ROUNDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(DEFAULT_ROUNDS)
}

fn model_path() -> PathBuf {
    std::env::var_os("STRATA_TEST_MODEL")
        .map(PathBuf::from)
        .unwrap_or_else(|| strata_desk::models::ensure_default_model().expect("model"))
}

fn sampling(grammar: Option<&Grammar>) -> Sampling {
    let temperature = std::env::var("STRATA_BENCH_TEMPERATURE")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0);
    Sampling {
        temperature,
        seed: 7,
        grammar: grammar.cloned(),
        ..Sampling::default()
    }
}

/// One tool `{"x": string}`, a call required.
fn one_tool() -> Grammar {
    let tool = ToolSpec {
        name: "pick".into(),
        parameters: json!({"type": "object", "properties": {"x": {"type": "string"}},
            "required": ["x"]}),
    };
    for_tool_calls(&[tool], false).expect("one-tool grammar")
}

/// One tool whose `x` is any of 200 path strings (about 5 KB of schema), a call required.
fn any_of() -> Grammar {
    let paths: Vec<_> = (0..200)
        .map(|i| json!({"const": format!("src/module_{}/file_{i}.rs", i % 17)}))
        .collect();
    let parameters = json!({"type": "object", "properties": {"x": {"anyOf": paths}},
        "required": ["x"]});
    assert!(parameters.to_string().len() > 5_000);
    let tool = ToolSpec {
        name: "pick".into(),
        parameters,
    };
    for_tool_calls(&[tool], false).expect("anyOf grammar")
}

fn prompt(model: &LlamaModel) -> Vec<TokenId> {
    let text = "<|im_start|>system\nYou are a coding assistant with one tool, pick, which \
                opens a file.<|im_end|>\n<|im_start|>user\nOpen the file that holds the \
                parser, then tell me what it does.<|im_end|>\n<|im_start|>assistant\n";
    let tokens = model.vocab().tokenize(text.as_bytes(), false, true);
    tokens.iter().map(|t| t.0).collect()
}

/// Decodes the requests (each with its grammar or none) together for up to [`STEPS`] steps
/// after their prompts are read; the step times (µs) while all of them are generating.
async fn case(
    engine: &mut EngineProcess,
    next_id: &mut u64,
    prompt: &[TokenId],
    grammars: &[Option<&Grammar>],
) -> Vec<f64> {
    let deadline = Duration::from_secs(600);
    let mut requests = Vec::new();
    for (i, grammar) in grammars.iter().enumerate() {
        *next_id += 1;
        let request = RequestId(*next_id);
        let seq = SeqId(i as u32);
        let open = Command::Open {
            request,
            seq,
            keep_tokens: 0,
            sampling: sampling(*grammar),
        };
        engine.call(open, deadline).await.expect("open");
        let chunk = Chunk {
            request,
            start: 0,
            tokens: prompt.to_vec(),
            last: true,
            prompt_tokens: 0,
        };
        let step = Command::Step {
            chunk: Some(chunk),
            decode: vec![],
        };
        engine.call(step, deadline).await.expect("read");
        requests.push(request);
    }
    let mut times = Vec::new();
    for _ in 0..STEPS {
        let step = Command::Step {
            chunk: None,
            decode: requests.clone(),
        };
        let Ok(Reply::StepDone(done)) = engine.call(step, deadline).await else {
            panic!("step")
        };
        assert!(done.failed.is_empty(), "{:?}", done.failed);
        times.push(done.step_micros as f64);
        if done.sampled.iter().any(|s| s.eog) {
            break;
        }
    }
    for (i, request) in requests.into_iter().enumerate() {
        engine
            .call(Command::Close { request }, deadline)
            .await
            .expect("close");
        let trim = Command::Trim {
            seq: SeqId(i as u32),
            keep_tokens: 0,
        };
        engine.call(trim, deadline).await.expect("trim");
    }
    times
}

fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(f64::total_cmp);
    values[values.len() / 2]
}

/// The median with the lowest and highest value beside it: `12.3 [10.1–14.0]`.
fn spread(values: &[f64], decimals: usize) -> String {
    let low = values.iter().copied().fold(f64::INFINITY, f64::min);
    let high = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let mid = median(values.to_vec());
    format!("{mid:.decimals$} [{low:.decimals$}–{high:.decimals$}]")
}

fn main() {
    let path = model_path();
    strata_desk::engine_worker::modules::load().expect("llama.cpp's modules");
    let backend = LlamaBackend::init().expect("backend");
    let model =
        LlamaModel::load_from_file(&backend, &path, &LlamaModelParams::default()).expect("model");
    let prompt = prompt(&model);
    drop(model);
    let (tool, any) = (one_tool(), any_of());
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let options = WorkerOptions::of(EngineSettings {
        ctx_tokens: CTX,
        slots: 2,
        ..EngineSettings::for_model(path)
    });
    let mut engine = runtime
        .block_on(EngineProcess::start(
            &WorkerLaunch::new(PathBuf::from(env!("CARGO_BIN_EXE_strata-desk")), options),
            1,
        ))
        .expect("worker");
    let cases: [(&str, Vec<Option<&Grammar>>); 5] = [
        ("alone, no grammar", vec![None]),
        ("alone, one-tool grammar", vec![Some(&tool)]),
        ("alone, 5 KB anyOf grammar", vec![Some(&any)]),
        ("two, neither constrained", vec![None, None]),
        ("two, one under the anyOf", vec![None, Some(&any)]),
    ];
    let rounds = rounds();
    // per case, per round: the mean step time (µs)
    let mut means = vec![Vec::new(); cases.len()];
    let mut steps = vec![0usize; cases.len()];
    let mut next_id = 0;
    for round in 0..rounds {
        for turn in 0..cases.len() {
            let which = (round + turn) % cases.len();
            let times = runtime.block_on(case(&mut engine, &mut next_id, &prompt, &cases[which].1));
            steps[which] += times.len();
            means[which].push(times.iter().sum::<f64>() / times.len() as f64);
        }
    }
    let ratio = |of: usize, to: usize| -> Vec<f64> {
        means[of]
            .iter()
            .zip(&means[to])
            .map(|(a, b)| a / b)
            .collect()
    };
    println!(
        "grammar cost per decode step through the worker ({} rounds, up to {STEPS} steps a case, {}-token prompt; medians [lowest–highest])",
        rounds,
        prompt.len()
    );
    println!("| case | steps measured | step, ms | ratio, round by round |");
    println!("| --- | --- | --- | --- |");
    let against = [None, Some(0), Some(0), None, Some(3)];
    for (i, (name, _)) in cases.iter().enumerate() {
        let ms: Vec<f64> = means[i].iter().map(|us| us / 1e3).collect();
        let ratio = match against[i] {
            Some(to) => format!("{} (to \"{}\")", spread(&ratio(i, to), 2), cases[to].0),
            None => "1".to_owned(),
        };
        println!("| {name} | {} | {} | {ratio} |", steps[i], spread(&ms, 1));
    }
}
