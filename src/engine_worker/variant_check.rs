//! `strata-desk cpu-check` (hidden; for the tests): one forward pass of a fixed prompt and a
//! greedy continuation on one CPU variant, at one thread, printed as JSON: at each position the
//! top token and the gap between the two best logits. `tests/it/cpu_variants.rs` runs it for
//! every variant this CPU runs and compares each with `x64` (ggml's plain x86-64 code): a top
//! token that differs must be a near-tie there. A variant that computes wrong (a miscompiled
//! kernel, a patch gone bad) fails before any user sees its output.

use super::{WorkerError, modules};
use llama_cpp_2::context::params::LlamaContextParams;
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use serde::{Deserialize, Serialize};
use std::num::NonZeroU32;
use std::path::Path;

/// The prompt read (code and prose: a coding agent's mix).
pub const PROMPT: &str = "fn main() {\n    let numbers = vec![3, 1, 4, 1, 5, 9, 2, 6];\n    \
     let total: i32 = numbers.iter().sum();\n    println!(\"total = {total}\");\n}\n\
     The function above adds the numbers in the list and prints";

/// Tokens kept per position, best first: enough to find where another variant's best token
/// stands here.
pub const KEPT: usize = 8;

/// One position: the best token, how far the second best's logit is below it, and the
/// [`KEPT`] best tokens with their logits.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Top {
    pub token: i32,
    pub gap: f32,
    pub best: Vec<(i32, f32)>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Check {
    pub variant: String,
    /// The top token after each prompt position (one pass over the whole prompt).
    pub prompt: Vec<Top>,
    /// The greedy continuation: each step's top token, which is then fed.
    pub greedy: Vec<Top>,
}

fn top(logits: &[f32]) -> Top {
    let mut order: Vec<usize> = (0..logits.len()).collect();
    let kept = KEPT.min(order.len());
    order.select_nth_unstable_by(kept.saturating_sub(1), |a, b| {
        logits[*b].total_cmp(&logits[*a])
    });
    order.truncate(kept);
    order.sort_by(|a, b| logits[*b].total_cmp(&logits[*a]).then(a.cmp(b)));
    let best: Vec<(i32, f32)> = order.iter().map(|&i| (i as i32, logits[i])).collect();
    Top {
        token: best.first().map_or(0, |b| b.0),
        gap: match best.as_slice() {
            [first, second, ..] => first.1 - second.1,
            _ => f32::INFINITY,
        },
        best,
    }
}

/// Runs the check on `cpu_code` (a variant's name) with `model`: the prompt, then `greedy`
/// tokens.
pub fn run(model: &Path, cpu_code: &str, greedy: usize) -> Result<Check, WorkerError> {
    let ctx_err = |e: &dyn std::fmt::Display| WorkerError::Context(e.to_string());
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    let modules = modules::load_as(cpu_code).map_err(WorkerError::Backend)?;
    let backend = LlamaBackend::init().map_err(|e| WorkerError::Backend(e.to_string()))?;
    let params = LlamaModelParams::default().with_n_gpu_layers(0);
    let loaded =
        LlamaModel::load_from_file(&backend, model, &params).map_err(|e| WorkerError::Model {
            path: model.display().to_string(),
            message: e.to_string(),
        })?;
    let params = LlamaContextParams::default()
        .with_n_ctx(NonZeroU32::new(512))
        .with_n_batch(512)
        .with_n_ubatch(512)
        .with_n_threads(1)
        .with_n_threads_batch(1);
    let mut ctx = loaded
        .new_context(&backend, params)
        .map_err(|e| ctx_err(&e))?;
    let tokens = loaded.vocab().tokenize(PROMPT.as_bytes(), true, false);
    let mut batch = LlamaBatch::new(512, 1);
    for (pos, token) in tokens.iter().enumerate() {
        batch
            .add(*token, pos as i32, &[0], true)
            .map_err(|e| ctx_err(&e))?;
    }
    ctx.decode(&mut batch).map_err(|e| ctx_err(&e))?;
    let prompt: Vec<Top> = (0..tokens.len())
        .map(|i| top(ctx.get_logits_ith(i as i32)))
        .collect();
    let mut continuation = Vec::with_capacity(greedy);
    let mut next = prompt
        .last()
        .cloned()
        .ok_or_else(|| ctx_err(&"an empty prompt"))?;
    for step in 0..greedy {
        let token = next.token;
        continuation.push(next);
        batch.clear();
        batch
            .add(
                llama_cpp_2::token::LlamaToken(token),
                (tokens.len() + step) as i32,
                &[0],
                true,
            )
            .map_err(|e| ctx_err(&e))?;
        ctx.decode(&mut batch).map_err(|e| ctx_err(&e))?;
        next = top(ctx.get_logits_ith(0));
    }
    Ok(Check {
        variant: modules.cpu.name().to_owned(),
        prompt,
        greedy: continuation,
    })
}

/// How far below the reference's best logit another variant's best token may stand on the
/// reference's own logits: 0.5, a probability ratio of 1.65 between the two. Summing in
/// another order (the AVX kernels' blocks, the activations quantized with SIMD rounding) moves
/// logits by up to 0.74 (SmolLM2) and 1.66 (Gemma 3) between `x64` and the AVX variants on
/// this prompt, and turned the top token where the reference's two best were up to 0.29 apart
/// (docs/TESTING.md, "Every CPU variant"); a kernel that computes wrong puts tokens far below,
/// or outside the reference's best, first.
pub const NEAR_TIE_LOGITS: f32 = 0.5;

/// How far below `reference`'s best its logit for `token` is; `None` when `token` is not
/// among its [`KEPT`] best.
fn regret(reference: &Top, token: i32) -> Option<f32> {
    let best = reference.best.first()?.1;
    reference
        .best
        .iter()
        .find(|(t, _)| *t == token)
        .map(|(_, logit)| best - logit)
}

/// Where `checked` departs from `reference` (the `x64` run) by more than a near-tie: a prompt
/// position whose top token stands `tie` or more below the reference's best on the reference's
/// logits (or not among its best at all), or the same in the greedy continuation up to its
/// first different token (after it the two read different text). `None`: the variant agrees.
pub fn disagreement(reference: &Check, checked: &Check, tie: f32) -> Option<String> {
    if reference.prompt.len() != checked.prompt.len() {
        return Some("the prompts' lengths differ".to_owned());
    }
    let differs = |at: String, r: &Top, c: &Top| -> Option<String> {
        if r.token == c.token {
            return None;
        }
        match regret(r, c.token) {
            Some(below) if below < tie => None,
            Some(below) => Some(format!(
                "{at}: top token {} on {}, {} on {}, where it stands {below:.3} below the best",
                c.token, checked.variant, r.token, reference.variant
            )),
            None => Some(format!(
                "{at}: top token {} on {} is not among {}'s {KEPT} best ({} first)",
                c.token, checked.variant, reference.variant, r.token
            )),
        }
    };
    for (pos, (r, c)) in reference.prompt.iter().zip(&checked.prompt).enumerate() {
        if let Some(why) = differs(format!("prompt position {pos}"), r, c) {
            return Some(why);
        }
    }
    for (step, (r, c)) in reference.greedy.iter().zip(&checked.greedy).enumerate() {
        if let Some(why) = differs(format!("greedy step {step}"), r, c) {
            return Some(why);
        }
        if r.token != c.token {
            break;
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A position whose best tokens are `best` (token, logit), best first.
    fn at(best: &[(i32, f32)]) -> Top {
        Top {
            token: best[0].0,
            gap: best[0].1 - best[1].1,
            best: best.to_vec(),
        }
    }

    fn check(variant: &str, prompt: Vec<Top>, greedy: Vec<Top>) -> Check {
        Check {
            variant: variant.to_owned(),
            prompt,
            greedy,
        }
    }

    #[test]
    fn the_top_token_the_gap_to_the_second_best_and_the_best_few() {
        let t = top(&[0.5, 2.0, 1.5, -1.0]);
        assert_eq!((t.token, t.gap), (1, 0.5));
        assert_eq!(t.best, vec![(1, 2.0), (2, 1.5), (0, 0.5), (3, -1.0)]);
        let many: Vec<f32> = (0..100).map(|i| i as f32).collect();
        let t = top(&many);
        assert_eq!(t.best.len(), KEPT);
        assert_eq!(t.best[0], (99, 99.0));
        assert_eq!(t.best[KEPT - 1], (92, 92.0));
    }

    #[test]
    fn a_different_top_token_passes_only_near_the_references_best() {
        let sure = at(&[(5, 9.0), (6, 7.0), (7, 1.0)]);
        let close = at(&[(7, 9.0), (8, 8.8), (9, 5.0)]);
        let x64 = check("x64", vec![sure.clone(), close.clone()], vec![]);
        // position 1 takes x64's second, 0.2 below its best: a near-tie
        let near = check(
            "zen4",
            vec![sure.clone(), at(&[(8, 9.1), (7, 9.0)])],
            vec![],
        );
        assert_eq!(disagreement(&x64, &near, NEAR_TIE_LOGITS), None);
        // position 0 takes x64's second, 2.0 below its best
        let wrong = check(
            "zen4",
            vec![at(&[(6, 9.0), (5, 8.0)]), close.clone()],
            vec![],
        );
        let why = disagreement(&x64, &wrong, NEAR_TIE_LOGITS).unwrap();
        assert!(
            why.contains("prompt position 0") && why.contains("2.000 below"),
            "{why}"
        );
        // a token x64 does not rank at all
        let lost = check("zen4", vec![sure, at(&[(42, 9.0), (7, 8.0)])], vec![]);
        let why = disagreement(&x64, &lost, NEAR_TIE_LOGITS).unwrap();
        assert!(why.contains("not among x64's"), "{why}");
    }

    #[test]
    fn the_continuation_is_compared_up_to_its_first_different_token() {
        let p = vec![at(&[(1, 5.0), (2, 0.0)])];
        let x64 = check(
            "x64",
            p.clone(),
            vec![at(&[(9, 5.0), (3, 4.9)]), at(&[(3, 5.0), (4, 0.0)])],
        );
        // step 0 turns on a near-tie; what follows reads other text and is not compared
        let other = check(
            "zen4",
            p.clone(),
            vec![at(&[(3, 5.0), (9, 4.9)]), at(&[(77, 5.0), (4, 0.0)])],
        );
        assert_eq!(disagreement(&x64, &other, NEAR_TIE_LOGITS), None);
        // a sure step that differs fails
        let drift = check(
            "zen4",
            p,
            vec![at(&[(9, 5.0), (3, 4.9)]), at(&[(4, 5.0), (3, 0.0)])],
        );
        let why = disagreement(&x64, &drift, NEAR_TIE_LOGITS).unwrap();
        assert!(why.contains("greedy step 1"), "{why}");
    }
}
