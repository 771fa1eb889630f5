//! The grammar sampler on the test model, against llama.cpp's own grammar-first chain: the
//! same tokens when greedy, output the grammar takes when drawn at a temperature, and a
//! grammar past its budget stopped with an error of its own.

use super::sampler::{GrammarCounts, SampleError, TokenSampler, VocabBytes};
use crate::grammar::{ToolSpec, for_json_schema, for_tool_calls};
use crate::protocol::{Grammar, Sampling};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use serde_json::{Value, json};
use std::num::NonZeroU32;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

pub(super) fn model() -> &'static LlamaModel {
    static MODEL: OnceLock<LlamaModel> = OnceLock::new();
    MODEL.get_or_init(|| {
        let path = match std::env::var_os("STRATA_TEST_MODEL") {
            Some(path) => path.into(),
            None => crate::models::ensure_default_model().expect("the default model"),
        };
        let backend = crate::machine::backend().expect("backend");
        LlamaModel::load_from_file(backend, path, &LlamaModelParams::default()).expect("model")
    })
}

fn context() -> LlamaContext<'static> {
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(1024))
        .with_n_threads(2)
        .with_n_threads_batch(2);
    let backend = crate::machine::backend().expect("backend");
    model().new_context(backend, params).expect("context")
}

const PROMPT: &str = "<|im_start|>system\nYou have one tool, pick, which opens a file.\
                      <|im_end|>\n<|im_start|>user\nOpen the parser's file.<|im_end|>\n\
                      <|im_start|>assistant\n";

/// Up to `n` tokens after [`PROMPT`], each drawn by `draw` from the last batch's output.
fn generate(n: usize, mut draw: impl FnMut(&LlamaContext<'_>) -> Option<LlamaToken>) -> Vec<i32> {
    let model = model();
    let mut ctx = context();
    let prompt = model.vocab().tokenize(PROMPT.as_bytes(), false, true);
    let mut batch = LlamaBatch::new(512, 1);
    for (i, token) in prompt.iter().enumerate() {
        batch
            .add(*token, i as i32, &[0], i + 1 == prompt.len())
            .unwrap();
    }
    ctx.decode(&mut batch).unwrap();
    let mut out = Vec::new();
    for pos in prompt.len()..prompt.len() + n {
        let Some(token) = draw(&ctx) else { break };
        out.push(token.0);
        if model.vocab().is_eog(token) {
            break;
        }
        batch.clear();
        batch.add(token, pos as i32, &[0], true).unwrap();
        ctx.decode(&mut batch).unwrap();
    }
    out
}

fn text(tokens: &[i32]) -> String {
    let vocab = model().vocab();
    let bytes: Vec<u8> = tokens
        .iter()
        .filter(|t| !vocab.is_eog(LlamaToken(**t)))
        .flat_map(|t| vocab.token_to_piece(LlamaToken(*t), true, None))
        .collect();
    String::from_utf8_lossy(&bytes).into_owned()
}

fn tool(parameters: Value) -> ToolSpec {
    ToolSpec {
        name: "pick".into(),
        parameters,
    }
}

fn grammars() -> Vec<(&'static str, Grammar)> {
    let paths: Vec<Value> = (0..200)
        .map(|i| json!({"const": format!("src/module_{}/file_{i}.rs", i % 17)}))
        .collect();
    vec![
        (
            "one tool",
            for_tool_calls(
                &[tool(
                    json!({"type": "object", "properties": {"x": {"type": "string"}},
                    "required": ["x"]}),
                )],
                false,
            )
            .unwrap(),
        ),
        (
            "anyOf of 200 strings",
            for_tool_calls(
                &[tool(
                    json!({"type": "object", "properties": {"x": {"anyOf": paths}},
                    "required": ["x"]}),
                )],
                false,
            )
            .unwrap(),
        ),
        (
            "a response_format schema",
            for_json_schema(&json!({"type": "object", "properties": {
                "files": {"type": "array", "items": {"type": "string"}, "maxItems": 3},
                "count": {"type": "integer"}}, "required": ["files", "count"]}))
            .unwrap(),
        ),
    ]
}

fn grammar_first_chain(grammar: &Grammar, penalties: bool) -> LlamaSampler {
    let model = model();
    let mut chain = vec![LlamaSampler::grammar(model, &grammar.gbnf, "root").unwrap()];
    if penalties {
        chain.push(LlamaSampler::penalties(model.n_vocab(), 64, 1.0, 1.0, 0.0));
    }
    chain.push(LlamaSampler::greedy());
    LlamaSampler::chain_simple(chain)
}

fn far() -> Instant {
    Instant::now() + Duration::from_secs(600)
}

#[test]
fn greedy_tokens_under_a_grammar_are_those_of_the_grammar_first_chain() {
    let vocab = VocabBytes::new(model());
    for (name, grammar) in grammars() {
        for penalties in [false, true] {
            let mut chain = grammar_first_chain(&grammar, penalties);
            let expected = generate(48, |ctx| Some(chain.sample(ctx, -1)));
            let sampling = Sampling {
                temperature: 0.0,
                frequency_penalty: if penalties { 1.0 } else { 0.0 },
                grammar: Some(grammar.clone()),
                ..Sampling::default()
            };
            let mut sampler = TokenSampler::new(model(), &sampling).unwrap();
            let mut counts = GrammarCounts::default();
            let got = generate(48, |ctx| {
                Some(sampler.sample(ctx, -1, &vocab, far(), &mut counts).unwrap())
            });
            assert_eq!(text(&got), text(&expected), "{name}, penalties {penalties}");
            assert_eq!(got, expected, "{name}, penalties {penalties}");
            // both ways were taken: a first draw the grammar took, and one it refused
            assert!(counts.redrawn > 0, "{name}: {counts:?}");
            assert!(counts.sampled > counts.redrawn, "{name}: {counts:?}");
        }
    }
}

#[test]
fn tokens_drawn_at_a_temperature_make_text_the_grammar_takes() {
    let vocab = VocabBytes::new(model());
    let (_, grammar) = grammars().swap_remove(0);
    // top-k (the draw needs k allowed candidates) and top-p alone (it needs them all, but
    // for the margin)
    for (top_k, top_p) in [(40, 0.95), (0, 0.9)] {
        for seed in 1..=3 {
            let sampling = Sampling {
                temperature: 0.8,
                top_k,
                top_p,
                seed,
                grammar: Some(grammar.clone()),
                ..Sampling::default()
            };
            let mut sampler = TokenSampler::new(model(), &sampling).unwrap();
            let mut counts = GrammarCounts::default();
            let tokens = generate(60, |ctx| {
                Some(sampler.sample(ctx, -1, &vocab, far(), &mut counts).unwrap())
            });
            let text = text(&tokens);
            let call = text
                .strip_prefix("<tool_call>")
                .and_then(|t| t.split("</tool_call>").next())
                .unwrap_or_else(|| panic!("not a call: {text:?}"));
            if text.contains("</tool_call>") {
                let call: Value =
                    serde_json::from_str(call.trim()).unwrap_or_else(|e| panic!("{e}: {text:?}"));
                assert_eq!(call["name"], "pick", "{text}");
                assert!(call["arguments"]["x"].is_string(), "{text}");
            }
        }
    }
}

#[test]
fn a_grammar_past_its_budget_stops_with_an_error_of_its_own() {
    let vocab = VocabBytes::new(model());
    let (_, grammar) = grammars().swap_remove(1);
    let sampling = Sampling {
        grammar: Some(grammar),
        ..Sampling::default()
    };
    let mut sampler = TokenSampler::new(model(), &sampling).unwrap();
    let mut counts = GrammarCounts::default();
    let mut result = None;
    generate(1, |ctx| {
        // the budget is spent before it starts: the grammar is not called at all
        let spent = Instant::now()
            .checked_sub(Duration::from_millis(5))
            .unwrap();
        result = Some(sampler.sample(ctx, -1, &vocab, spent, &mut counts));
        None
    });
    let error = result.unwrap().unwrap_err();
    assert!(matches!(error, SampleError::TooSlow { .. }), "{error:?}");
    assert!(
        error.to_string().contains("grammar_ms_per_token"),
        "{error}"
    );
}
