//! A request's token sampler on the real engine, and what a grammar costs it.
//!
//! Without a grammar it is llama.cpp's sampler chain (penalties, then greedy or top-k / top-p /
//! min-p / temperature / seeded draw), sampled in C. With one, masking the whole vocabulary
//! with the grammar at every step (the grammar first in the chain) costs a step milliseconds
//! on a 49K-token vocabulary, and the batch's other requests wait for it. So, as llama.cpp's
//! own `common_sampler` does: the token is drawn without the grammar and then checked against
//! it alone; only when the grammar rejects it are the candidates masked and the token drawn
//! again. Masking goes best first and stops as soon as the draw cannot change: greedy needs
//! the best allowed token, top-k `k` allowed ones; below those, candidates whose logit is
//! [`MARGIN_LOGITS`] under the best allowed one (times the temperature, when above 1) are
//! not looked at: their chance is under e^-20 of the best one's.
//! Before masking, the grammar is asked which first bytes it takes (one probe token per
//! byte, a few hundred candidates): a token whose text starts with a byte it refuses cannot be
//! allowed, so only the others are masked (a filter that never drops an allowed token).
//! The mask's work is bounded by a deadline: past it the request fails alone
//! ([`SampleError::TooSlow`]), never the step.

use crate::protocol::{Grammar, Sampling};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use llama_cpp_2::token::data::LlamaTokenData;
use llama_cpp_2::token::data_array::LlamaTokenDataArray;
use std::time::{Duration, Instant};

/// Logits this far under the best allowed candidate are not looked at (at temperature ≤ 1).
pub const MARGIN_LOGITS: f32 = 20.0;

/// The head of the candidates sorted best first (by llama.cpp's top-k, in C); past it the rest
/// is masked in blocks of this size.
const SORTED_HEAD: usize = 4096;

/// The first block the grammar masks; each next one is four times larger.
const FIRST_BLOCK: usize = 32;

/// All the grammars of one step together at most: the host's step deadline is 10 s and up.
/// (A request's own budget is the `grammar_ms_per_token` option.)
pub const GRAMMARS_PER_STEP: Duration = Duration::from_secs(6);

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SampleError {
    #[error(
        "its grammar took {spent_ms} ms to choose one token and was stopped (the engine's \
         `grammar_ms_per_token`): a simpler schema, or fewer tools, is faster"
    )]
    TooSlow { spent_ms: u64 },
    #[error("the grammar allows no token here")]
    NoneAllowed,
    #[error("the grammar refused the token it allowed: {0}")]
    Accept(String),
}

/// How much a grammar cost, counted over the engine's life.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct GrammarCounts {
    /// Tokens drawn under a grammar.
    pub sampled: u64,
    /// Of those, drawn again because the grammar rejected the first draw.
    pub redrawn: u64,
    /// Candidates the grammar masked in those redraws.
    pub masked_candidates: u64,
}

/// What the masking needs to know of the vocabulary, read once per engine: each token's first
/// byte (as the grammar reads it: control tokens' text included), a token that is exactly
/// that one byte, and the end-of-generation tokens (the grammar decides those apart).
#[derive(Default)]
pub struct VocabBytes {
    /// `NO_BYTE` for a token with no text.
    first_byte: Vec<u16>,
    probes: Vec<(u8, LlamaToken)>,
    eog: Vec<LlamaToken>,
}

const NO_BYTE: u16 = 256;

impl VocabBytes {
    pub fn new(model: &llama_cpp_2::model::LlamaModel) -> Self {
        let vocab = model.vocab();
        let n = vocab.n_tokens().max(0);
        let mut first_byte = Vec::with_capacity(n as usize);
        let mut probe: [Option<LlamaToken>; 256] = [None; 256];
        let mut eog = Vec::new();
        let mut piece = Vec::new();
        for id in 0..n {
            let token = LlamaToken(id);
            if vocab.is_eog(token) {
                eog.push(token);
            }
            piece.clear();
            vocab.token_to_piece_into(token, &mut piece, true, None);
            first_byte.push(piece.first().map_or(NO_BYTE, |b| u16::from(*b)));
            if let [b] = piece[..] {
                probe[b as usize].get_or_insert(token);
            }
        }
        let probes = (0..=255u8)
            .filter_map(|b| probe[b as usize].map(|t| (b, t)))
            .collect();
        Self {
            first_byte,
            probes,
            eog,
        }
    }
}

#[derive(Clone)]
pub enum TokenSampler {
    Plain(LlamaSampler),
    Constrained(Box<Constrained>),
}

#[derive(Clone)]
pub struct Constrained {
    grammar: LlamaSampler,
    penalties: Option<LlamaSampler>,
    /// The draw: greedy, or the truncations, the temperature and the seeded draw.
    draw: LlamaSampler,
    /// Allowed candidates the draw needs to see: 1 (greedy), top-k's k, or all (`None`).
    needs: Option<usize>,
    margin: f32,
}

impl TokenSampler {
    pub fn new(
        model: &llama_cpp_2::model::LlamaModel,
        sampling: &Sampling,
    ) -> Result<Self, String> {
        let penalties = sampling.has_penalties().then(|| {
            LlamaSampler::penalties(
                model.n_vocab(),
                sampling.penalty_last_n,
                sampling.repeat_penalty,
                sampling.frequency_penalty,
                sampling.presence_penalty,
            )
        });
        let draw = draw_chain(sampling);
        let Some(grammar) = &sampling.grammar else {
            let chain: Vec<LlamaSampler> = penalties.into_iter().chain([draw]).collect();
            return Ok(Self::Plain(LlamaSampler::chain_simple(chain)));
        };
        let needs = if sampling.temperature <= 0.0 {
            Some(1)
        } else {
            (sampling.top_k > 0).then_some(sampling.top_k as usize)
        };
        Ok(Self::Constrained(Box::new(Constrained {
            grammar: grammar_sampler(model, grammar)?,
            penalties,
            draw,
            needs,
            margin: MARGIN_LOGITS * sampling.temperature.max(1.0),
        })))
    }

    /// Draws and accepts the token for the output at `index` of the last batch; the grammar's
    /// work (if any) ends by `until`.
    pub fn sample(
        &mut self,
        ctx: &LlamaContext<'_>,
        index: i32,
        vocab: &VocabBytes,
        until: Instant,
        counts: &mut GrammarCounts,
    ) -> Result<LlamaToken, SampleError> {
        match self {
            Self::Plain(chain) => Ok(chain.sample(ctx, index)),
            Self::Constrained(c) => c.sample(ctx.get_logits_ith(index), vocab, until, counts),
        }
    }
}

fn draw_chain(sampling: &Sampling) -> LlamaSampler {
    if sampling.temperature <= 0.0 {
        return LlamaSampler::greedy();
    }
    let mut chain = Vec::new();
    if sampling.top_k > 0 {
        chain.push(LlamaSampler::top_k(sampling.top_k));
    }
    if sampling.top_p < 1.0 {
        chain.push(LlamaSampler::top_p(sampling.top_p, 1));
    }
    if sampling.min_p > 0.0 {
        chain.push(LlamaSampler::min_p(sampling.min_p, 1));
    }
    chain.push(LlamaSampler::temp(sampling.temperature));
    chain.push(LlamaSampler::dist(sampling.seed));
    LlamaSampler::chain_simple(chain)
}

fn grammar_sampler(
    model: &llama_cpp_2::model::LlamaModel,
    grammar: &Grammar,
) -> Result<LlamaSampler, String> {
    let sampler = match (&grammar.lazy_trigger, &grammar.lazy_pattern) {
        (_, Some(pattern)) => LlamaSampler::grammar_lazy_patterns(
            model,
            &grammar.gbnf,
            "root",
            std::slice::from_ref(pattern),
            &[],
        ),
        (Some(word), None) => LlamaSampler::grammar_lazy(model, &grammar.gbnf, "root", [word], &[]),
        (None, None) => LlamaSampler::grammar(model, &grammar.gbnf, "root"),
    };
    sampler.map_err(|e| format!("the grammar was refused: {e}"))
}

impl Constrained {
    fn sample(
        &mut self,
        logits: &[f32],
        vocab: &VocabBytes,
        until: Instant,
        counts: &mut GrammarCounts,
    ) -> Result<LlamaToken, SampleError> {
        counts.sampled += 1;
        let mut candidates = LlamaTokenDataArray::new(candidates(logits), false);
        if let Some(penalties) = &mut self.penalties {
            candidates.apply_sampler(penalties);
        }
        let mut first = candidates.clone();
        first.apply_sampler(&mut self.draw);
        let drawn = first.selected_token().ok_or(SampleError::NoneAllowed)?;
        let token = if self.allows(drawn) {
            drawn
        } else {
            counts.redrawn += 1;
            let candidates = self.first_bytes_taken(candidates, vocab);
            let mut allowed = self.allowed_best_first(candidates, until, counts)?;
            allowed.apply_sampler(&mut self.draw);
            allowed.selected_token().ok_or(SampleError::NoneAllowed)?
        };
        self.grammar
            .try_accept(token)
            .map_err(|e| SampleError::Accept(e.to_string()))?;
        if let Some(penalties) = &mut self.penalties {
            penalties.accept(token);
        }
        self.draw.accept(token);
        Ok(token)
    }

    fn allows(&mut self, token: LlamaToken) -> bool {
        let mut one = LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 0.0, 0.0)], false);
        one.apply_sampler(&mut self.grammar);
        one.data.first().is_some_and(|c| c.logit().is_finite())
    }

    /// The candidates whose first byte the grammar takes (or that it decides apart: no text,
    /// no probe for their byte, end of generation).
    fn first_bytes_taken(
        &mut self,
        mut candidates: LlamaTokenDataArray,
        vocab: &VocabBytes,
    ) -> LlamaTokenDataArray {
        let probes = vocab
            .probes
            .iter()
            .map(|(_, t)| LlamaTokenData::new(*t, 0.0, 0.0));
        let mut probed = LlamaTokenDataArray::new(probes.collect(), false);
        probed.apply_sampler(&mut self.grammar);
        // per byte: taken, refused, or not probed (kept)
        let mut refused = [false; 257];
        for ((byte, _), c) in vocab.probes.iter().zip(&probed.data) {
            refused[*byte as usize] = !c.logit().is_finite();
        }
        candidates.data.retain(|c| {
            let id = c.id().0 as usize;
            let byte = vocab.first_byte.get(id).copied().unwrap_or(NO_BYTE);
            !refused[byte as usize] || vocab.eog.contains(&c.id())
        });
        candidates
    }

    /// The grammar's allowed candidates, best first, as many as the draw can choose among.
    fn allowed_best_first(
        &mut self,
        mut candidates: LlamaTokenDataArray,
        until: Instant,
        counts: &mut GrammarCounts,
    ) -> Result<LlamaTokenDataArray, SampleError> {
        let started = Instant::now();
        let all = candidates.data.clone();
        // sorted best first in C (this crate is unoptimised in test builds)
        candidates.apply_sampler(&mut LlamaSampler::top_k(SORTED_HEAD as i32));
        let head = candidates.data;
        let mut allowed: Vec<LlamaTokenData> = Vec::new();
        let mut start = 0;
        let mut block = FIRST_BLOCK;
        while start < head.len() {
            if self.enough(&allowed, head[start].logit()) {
                return Ok(LlamaTokenDataArray::new(allowed, false));
            }
            let end = (start + block).min(head.len());
            self.mask_into(&head[start..end], &mut allowed, (started, until), counts)?;
            start = end;
            block *= 4;
        }
        if head.len() < all.len() && !self.enough(&allowed, f32::NEG_INFINITY) {
            // the rest, unsorted: only what could still be drawn
            let floor = allowed
                .iter()
                .map(|c| c.logit())
                .fold(f32::NEG_INFINITY, f32::max)
                - self.margin;
            let last = head.last().map_or(f32::INFINITY, |c| c.logit());
            let in_head: std::collections::HashSet<i32> = head.iter().map(|c| c.id().0).collect();
            let rest: Vec<LlamaTokenData> = all
                .into_iter()
                .filter(|c| c.logit() <= last && c.logit() >= floor && !in_head.contains(&c.id().0))
                .collect();
            for piece in rest.chunks(SORTED_HEAD) {
                self.mask_into(piece, &mut allowed, (started, until), counts)?;
            }
        }
        if allowed.is_empty() {
            return Err(SampleError::NoneAllowed);
        }
        Ok(LlamaTokenDataArray::new(allowed, false))
    }

    /// Whether the allowed candidates found so far decide the draw, when the next candidate
    /// has logit `next`.
    fn enough(&self, allowed: &[LlamaTokenData], next: f32) -> bool {
        let Some(best) = allowed.first().map(|c| c.logit()) else {
            return false;
        };
        self.needs.is_some_and(|n| allowed.len() >= n) || next < best - self.margin
    }

    fn mask_into(
        &mut self,
        block: &[LlamaTokenData],
        allowed: &mut Vec<LlamaTokenData>,
        (started, until): (Instant, Instant),
        counts: &mut GrammarCounts,
    ) -> Result<(), SampleError> {
        if Instant::now() > until {
            return Err(SampleError::TooSlow {
                spent_ms: started.elapsed().as_millis() as u64,
            });
        }
        let mut masked = LlamaTokenDataArray::new(block.to_vec(), false);
        masked.apply_sampler(&mut self.grammar);
        counts.masked_candidates += block.len() as u64;
        allowed.extend(masked.data.into_iter().filter(|c| c.logit().is_finite()));
        Ok(())
    }
}

fn candidates(logits: &[f32]) -> Vec<LlamaTokenData> {
    let mut out = Vec::with_capacity(logits.len());
    out.extend(
        logits
            .iter()
            .enumerate()
            .map(|(i, l)| LlamaTokenData::new(LlamaToken(i as i32), *l, 0.0)),
    );
    out
}
