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
//! ([`SampleError::TooSlow`]), never the step. One call into llama.cpp's grammar cannot be
//! stopped, so each is sized to what is left ([`Pace`]): the time per candidate of the last
//! call says how many candidates the next may look at, and when not even one fits, the
//! request fails before the call, not after it. (The API's estimate refuses the patterns
//! whose single candidate could take seconds: `grammar::pattern_cost`.)

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
        let mut pace = Pace::new(until);
        let mut candidates = LlamaTokenDataArray::new(candidates(logits), false);
        if let Some(penalties) = &mut self.penalties {
            candidates.apply_sampler(penalties);
        }
        let mut first = candidates.clone();
        first.apply_sampler(&mut self.draw);
        let drawn = first.selected_token().ok_or(SampleError::NoneAllowed)?;
        let token = if self.allows(drawn, &mut pace)? {
            drawn
        } else {
            counts.redrawn += 1;
            let candidates = self.first_bytes_taken(candidates, vocab, &mut pace)?;
            let mut allowed = self.allowed_best_first(candidates, &mut pace, counts)?;
            allowed.apply_sampler(&mut self.draw);
            allowed.selected_token().ok_or(SampleError::NoneAllowed)?
        };
        pace.fits(1)?;
        self.grammar
            .try_accept(token)
            .map_err(|e| SampleError::Accept(e.to_string()))?;
        if let Some(penalties) = &mut self.penalties {
            penalties.accept(token);
        }
        self.draw.accept(token);
        Ok(token)
    }

    fn allows(&mut self, token: LlamaToken, pace: &mut Pace) -> Result<bool, SampleError> {
        pace.fits(1)?;
        let started = Instant::now();
        let mut one = LlamaTokenDataArray::new(vec![LlamaTokenData::new(token, 0.0, 0.0)], false);
        one.apply_sampler(&mut self.grammar);
        pace.took(1, started.elapsed());
        Ok(one.data.first().is_some_and(|c| c.logit().is_finite()))
    }

    /// The candidates whose first byte the grammar takes (or that it decides apart: no text,
    /// no probe for their byte, end of generation).
    fn first_bytes_taken(
        &mut self,
        mut candidates: LlamaTokenDataArray,
        vocab: &VocabBytes,
        pace: &mut Pace,
    ) -> Result<LlamaTokenDataArray, SampleError> {
        let probes = vocab
            .probes
            .iter()
            .map(|(_, t)| LlamaTokenData::new(*t, 0.0, 0.0));
        let mut probed = LlamaTokenDataArray::new(probes.collect(), false);
        if pace.fits(probed.data.len())? < probed.data.len() {
            return Err(pace.too_slow());
        }
        let started = Instant::now();
        probed.apply_sampler(&mut self.grammar);
        pace.took(probed.data.len(), started.elapsed());
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
        Ok(candidates)
    }

    /// The grammar's allowed candidates, best first, as many as the draw can choose among.
    fn allowed_best_first(
        &mut self,
        mut candidates: LlamaTokenDataArray,
        pace: &mut Pace,
        counts: &mut GrammarCounts,
    ) -> Result<LlamaTokenDataArray, SampleError> {
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
            start += self.mask_into(&head[start..end], &mut allowed, pace, counts)?;
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
            let mut start = 0;
            while start < rest.len() {
                let end = (start + SORTED_HEAD).min(rest.len());
                start += self.mask_into(&rest[start..end], &mut allowed, pace, counts)?;
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

    /// Masks the head of `block`, as much of it as the time left allows; how many it masked.
    fn mask_into(
        &mut self,
        block: &[LlamaTokenData],
        allowed: &mut Vec<LlamaTokenData>,
        pace: &mut Pace,
        counts: &mut GrammarCounts,
    ) -> Result<usize, SampleError> {
        let n = pace.fits(block.len())?;
        let started = Instant::now();
        let mut masked = LlamaTokenDataArray::new(block[..n].to_vec(), false);
        masked.apply_sampler(&mut self.grammar);
        pace.took(n, started.elapsed());
        counts.masked_candidates += n as u64;
        allowed.extend(masked.data.into_iter().filter(|c| c.logit().is_finite()));
        Ok(n)
    }
}

/// A token's grammar work against its deadline: each call into llama.cpp's grammar (which
/// cannot be stopped) is given only as many candidates as the time left takes at the pace of
/// the calls before it.
struct Pace {
    started: Instant,
    until: Instant,
    /// The last call's time per candidate (none yet: zero).
    per_candidate: Duration,
}

impl Pace {
    fn new(until: Instant) -> Self {
        Self {
            started: Instant::now(),
            until,
            per_candidate: Duration::ZERO,
        }
    }

    fn took(&mut self, candidates: usize, elapsed: Duration) {
        let n = u32::try_from(candidates.max(1)).unwrap_or(u32::MAX);
        self.per_candidate = elapsed / n;
    }

    /// Of `wanted` candidates, how many the time left takes (at least one, or the token fails).
    fn fits(&self, wanted: usize) -> Result<usize, SampleError> {
        let left = self.until.saturating_duration_since(Instant::now());
        let fit = match self.per_candidate.as_nanos() {
            _ if left.is_zero() => 0,
            0 => wanted,
            per => usize::try_from(left.as_nanos() / per).unwrap_or(usize::MAX),
        };
        match fit.min(wanted) {
            0 => Err(self.too_slow()),
            n => Ok(n),
        }
    }

    fn too_slow(&self) -> SampleError {
        SampleError::TooSlow {
            spent_ms: self.started.elapsed().as_millis() as u64,
        }
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

#[cfg(test)]
mod pace_tests {
    use super::*;

    #[test]
    fn a_call_is_given_only_the_candidates_the_time_left_takes_at_the_last_pace() {
        let mut pace = Pace::new(Instant::now() + Duration::from_secs(60));
        // no pace yet: all of them
        assert_eq!(pace.fits(4096).unwrap(), 4096);
        // one candidate a second: about 60 of the next 4096
        pace.took(2, Duration::from_secs(2));
        let n = pace.fits(4096).unwrap();
        assert!((55..=60).contains(&n), "{n}");
    }

    #[test]
    fn when_not_one_candidate_fits_the_token_fails_before_the_call() {
        let mut pace = Pace::new(Instant::now() + Duration::from_secs(5));
        pace.took(1, Duration::from_secs(10));
        assert!(matches!(pace.fits(1), Err(SampleError::TooSlow { .. })));
        let past = Pace::new(
            Instant::now()
                .checked_sub(Duration::from_millis(1))
                .unwrap(),
        );
        assert!(matches!(past.fits(1), Err(SampleError::TooSlow { .. })));
    }
}
