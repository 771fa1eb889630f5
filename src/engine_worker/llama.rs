//! The real backend: llama.cpp through llama-cpp-2. One context, one unified KV pool shared by
//! every sequence, one sampler per request.

use super::backend::{Backend, ChunkRun, DecodeRun, Refusal, SamplerCheckpoint};
use super::llama_facts::{model_facts, sliding_window};
use super::sampler::{GRAMMARS_PER_STEP, GrammarCounts, TokenSampler, VocabBytes};
use super::{FlashAttn, KvType, WorkerError, WorkerOptions};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{DeviceFacts, ErrorKind, Handshake, PROTOCOL_VERSION, Sampling};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::context::session::{LlamaStateSeqFlags, SeqState};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Instant;

/// The context the engine makes from the options, the model and the context chosen
/// ([`super::fit`]): also what llama.cpp's fitting measures.
pub(super) struct ContextPlan {
    pub(super) ctx_tokens: u32,
    sequences: u32,
    n_batch: u32,
    /// llama.cpp's physical batch (`ubatch_tokens`), at most `n_batch`.
    n_ubatch: u32,
    threads: u32,
    kv: KvCacheType,
    flash: llama_cpp_sys_2::llama_flash_attn_type,
    /// A sliding-window model's window layers keep the whole context (`swa_full`).
    swa_full: bool,
}

impl ContextPlan {
    /// `ctx_tokens` 0: llama.cpp's to choose (its fitting; a context takes the trained one).
    pub(super) fn new(options: &WorkerOptions, model: &LlamaModel, ctx_tokens: u32) -> Self {
        let slots = options.slots.max(1);
        // Recurrent and hybrid models allocate state for every sequence: fewer of them.
        let sequences = if model.is_recurrent() || model.is_hybrid() {
            options.effective_sequences().min(slots + 2)
        } else {
            options.effective_sequences()
        };
        let n_batch = if ctx_tokens == 0 {
            options.n_batch.max(64)
        } else {
            options.n_batch.clamp(64, ctx_tokens.max(64))
        };
        Self {
            ctx_tokens,
            sequences,
            n_batch,
            n_ubatch: options.ubatch_tokens.clamp(1, n_batch),
            threads: options.effective_threads(),
            kv: match options.kv_type {
                KvType::F16 => KvCacheType::F16,
                KvType::Q8_0 => KvCacheType::Q8_0,
            },
            flash: match options.flash_attn {
                FlashAttn::Auto => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_AUTO,
                FlashAttn::On => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED,
                FlashAttn::Off => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED,
            },
            swa_full: options.swa_full,
        }
    }

    pub(super) fn params(&self) -> LlamaContextParams {
        LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(self.ctx_tokens))
            .with_n_batch(self.n_batch)
            .with_n_ubatch(self.n_ubatch)
            .with_n_seq_max(self.sequences)
            .with_kv_unified(true)
            .with_n_threads(self.threads as i32)
            .with_n_threads_batch(self.threads as i32)
            .with_type_k(self.kv)
            .with_type_v(self.kv)
            .with_flash_attention_policy(self.flash)
            // llama.cpp's library default is a full-size window cache; its servers' is not:
            // at 28K tokens Gemma 3 270M decoded 0.94-0.96x and read 0.89-0.92x with it
            // in llama.cpp's own benchmark (docs/BENCHMARKS.md)
            .with_swa_full(self.swa_full)
    }
}

pub struct LlamaEngine<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    n_batch: u32,
    handshake: Handshake,
    /// One sampler object per request, kept from open to close whatever sequence it is on.
    samplers: HashMap<RequestId, TokenSampler>,
    /// Sampler states before a step ahead (undone by a rewind): `llama_sampler_clone` copies
    /// each sampler's state (the seeded generator, the grammar's stacks, the penalties' window).
    sampler_checkpoint: SamplerCheckpoint<TokenSampler>,
    /// What grammars cost so far.
    grammar_counts: GrammarCounts,
    /// A request's grammar work for one token at most (`grammar_ms_per_token`).
    grammar_per_token: std::time::Duration,
    /// Read from the vocabulary when the first request with a grammar samples.
    vocab_bytes: Option<VocabBytes>,
    /// A sliding-window model's window (tokens) when its window layers keep only that:
    /// a cut must leave the window before the cut in the cache ([`Backend::trim`]).
    window_only: Option<u32>,
    /// Recurrent or hybrid layers: the state is cut nowhere but at its end.
    recurrent: bool,
}

impl<'m> LlamaEngine<'m> {
    pub fn new(
        backend: &LlamaBackend,
        model: &'m LlamaModel,
        options: &WorkerOptions,
        model_path: &std::path::Path,
        mut device: DeviceFacts,
        context: &super::fit::ContextChoice,
    ) -> Result<Self, WorkerError> {
        let plan = ContextPlan::new(options, model, context.ctx_tokens);
        let (threads, slots, sequences) = (plan.threads, options.slots.max(1), plan.sequences);
        let params = plan.params();
        // the KV pool and compute buffers of a context on the GPU may not fit: say its memory
        let ctx = model.new_context(backend, params).map_err(|e| {
            WorkerError::Context(format!(
                "{e}{}",
                super::load::memory_words(
                    i32::try_from(device.gpu_layers).unwrap_or(i32::MAX),
                    device.vram_free_before_load_bytes,
                    options
                )
            ))
        })?;
        super::load::refresh_memory(&mut device);
        let n_batch = ctx.n_batch();
        let kv_cells = ctx.n_ctx();

        let mut facts = model_facts(model, model_path, kv_cells, options.kv_type);
        facts.ctx_chosen_by = context.chosen_by.to_owned();
        let window_only = sliding_window(model).filter(|_| !plan.swa_full);
        let recurrent = model.is_recurrent() || model.is_hybrid();
        // the pool's cells before a cut may be gone: only a whole conversation continues, or
        // one cut back to a checkpoint
        facts.trims_at_any_token &= window_only.is_none();
        facts.rewindable_tokens = match (recurrent, window_only) {
            (true, _) => 0,
            (false, Some(_)) => 1,
            (false, None) => u32::MAX,
        };
        facts.keeps_checkpoints = (recurrent || window_only.is_some())
            && options.ctx_checkpoints > 0
            && options.checkpoint_mib > 0;
        let mut engine = Self {
            model,
            ctx,
            batch: LlamaBatch::new(n_batch as usize, 1),
            n_batch,
            handshake: Handshake {
                protocol_version: PROTOCOL_VERSION,
                model: facts,
                slots,
                sequences,
                kv_cells,
                n_batch,
                threads,
                prompt_tokens_per_sec: 0.0,
                chunk_tokens: 256,
                simulated: false,
                device,
            },
            samplers: HashMap::new(),
            sampler_checkpoint: SamplerCheckpoint::default(),
            grammar_counts: GrammarCounts::default(),
            vocab_bytes: None,
            grammar_per_token: std::time::Duration::from_millis(options.grammar_ms_per_token),
            window_only,
            recurrent,
        };
        let speed = engine.warm_up()?;
        engine.handshake.prompt_tokens_per_sec = speed;
        engine.handshake.chunk_tokens = chunk_tokens_for(speed, n_batch);
        Ok(engine)
    }

    /// The warm-up before the handshake: a prompt batch (timed: [`Self::measure_prompt_speed`])
    /// and a one-token decode after it, on sequence 0, then dropped. Every layer runs both ways
    /// (a batch and a single row take different matrix kernels), so each quantisation type the
    /// model has meets the CPU code chosen: a variant that crashes on this CPU crashes here,
    /// before any request, and the host starts the worker again on the next best
    /// (`engine::cpu_code`). Returns the prompt speed.
    fn warm_up(&mut self) -> Result<f64, WorkerError> {
        super::fault::crash_if_told(&self.handshake.device.cpu_variant);
        let (speed, read) = self.measure_prompt_speed()?;
        // a token of the text read (not BOS: some models have none)
        let token = self.model.vocab().tokenize(b" the", false, false);
        if let Some(token) = token.first() {
            self.batch.clear();
            self.batch
                .add(*token, read as i32, &[0], true)
                .map_err(|e| WorkerError::Context(e.to_string()))?;
            let decoded = self.ctx.decode(&mut self.batch);
            self.ctx.synchronize();
            decoded.map_err(|e| WorkerError::Context(format!("warming up (one token): {e}")))?;
        }
        let _ = self.ctx.kv_cache_seq_rm(0, None, None);
        Ok(speed)
    }

    /// Reads a throwaway prompt on sequence 0 and times it: about [`CHUNK_SECS`] of reading is
    /// the default chunk. A GPU reads a short prompt too fast to time, so it gets a long one.
    /// Returns the speed and the tokens of the last read, which stay in sequence 0.
    fn measure_prompt_speed(&mut self) -> Result<(f64, u32), WorkerError> {
        let text = "The quick brown fox jumps over the lazy dog while the engine measures itself. "
            .repeat(512);
        let tokens: Vec<TokenId> = (self.model.vocab())
            .tokenize(text.as_bytes(), false, false)
            .iter()
            .map(|t| t.0)
            .collect();
        let mut speed = 0.0;
        let mut read = 0;
        for wanted in [256u32, 2048] {
            let n = wanted.min(self.n_batch).min(self.handshake.kv_cells / 2) as usize;
            if n == 0 || tokens.len() < n {
                break;
            }
            let started = Instant::now();
            self.batch.clear();
            for (pos, token) in tokens[..n].iter().enumerate() {
                self.batch
                    .add(LlamaToken(*token), pos as i32, &[0], pos + 1 == n)
                    .map_err(|e| WorkerError::Context(e.to_string()))?;
            }
            self.ctx
                .decode(&mut self.batch)
                .map_err(|e| WorkerError::Context(format!("measuring prompt speed: {e}")))?;
            // On a GPU backend (Vulkan, CUDA) decode only queues the graph: wait for it, or
            // the rate counts the queueing alone (863 tokens/s against 9 on lavapipe) and the
            // first step, which then runs this work too, overruns the deadline it sets.
            self.ctx.synchronize();
            let secs = started.elapsed().as_secs_f64().max(1e-6);
            speed = n as f64 / secs;
            read = n as u32;
            if secs >= 0.1 {
                break;
            }
            let _ = self.ctx.kv_cache_seq_rm(0, None, None);
            read = 0;
        }
        Ok((speed, read))
    }

    /// Refuses a cut of `seq` to `keep_tokens` that its window layers cannot continue from:
    /// the next token's window reaches back `window - 1` positions, and a cache that keeps
    /// only windows has let older cells go (llama.cpp frees the cells a sequence's newest
    /// token no longer reaches). A step ahead's rewind of one token always passes; a
    /// conversation cut further back would read on with part of its window missing.
    fn window_kept(&self, seq: SeqId, keep_tokens: u32, window: u32) -> Result<(), Refusal> {
        let (lowest, highest) = (
            self.ctx.kv_cache_seq_pos_min(seq.0 as i32),
            self.ctx.kv_cache_seq_pos_max(seq.0 as i32),
        );
        let needed_from = i64::from(keep_tokens) - i64::from(window) + 1;
        let cuts = keep_tokens > 0 && i64::from(highest) >= i64::from(keep_tokens);
        if cuts && i64::from(lowest) > needed_from.max(0) {
            return Err((
                ErrorKind::Engine,
                format!(
                    "cutting {seq} to {keep_tokens} tokens: its sliding-window cache holds \
                     positions {lowest}-{highest}, and the next token's window of {window} \
                     needs them from {}",
                    needed_from.max(0)
                ),
            ));
        }
        Ok(())
    }

    /// Adds prompt tokens for `seq` from `start`; logits on the last one if asked.
    fn add_run(
        &mut self,
        seq: SeqId,
        start: u32,
        tokens: &[TokenId],
        logits_last: bool,
    ) -> Result<(), Refusal> {
        for (i, token) in tokens.iter().enumerate() {
            let last = i + 1 == tokens.len();
            self.batch
                .add(
                    LlamaToken(*token),
                    (start + i as u32) as i32,
                    &[seq.0 as i32],
                    logits_last && last,
                )
                .map_err(|e| (ErrorKind::Engine, e.to_string()))?;
        }
        Ok(())
    }

    fn decode_batch(&mut self) -> Result<(), Refusal> {
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| (ErrorKind::Engine, format!("llama.cpp decode failed: {e}")))
    }

    /// The token for `request` from the batch's output `index`; its grammar's work (if any)
    /// ends by `until`, or the request fails alone.
    fn sample(
        &mut self,
        request: RequestId,
        index: i32,
        until: Instant,
    ) -> Result<TokenId, Refusal> {
        let sampler = self
            .samplers
            .get_mut(&request)
            .ok_or_else(|| (ErrorKind::Invalid, format!("{request} has no sampler")))?;
        let vocab = match sampler {
            TokenSampler::Plain(_) => &VocabBytes::default(),
            TokenSampler::Constrained(_) => self
                .vocab_bytes
                .get_or_insert_with(|| VocabBytes::new(self.model)),
        };
        sampler
            .sample(&self.ctx, index, vocab, until, &mut self.grammar_counts)
            .map(|t| t.0)
            .map_err(|e| (ErrorKind::Invalid, format!("sampling for {request}: {e}")))
    }
}

impl Backend for LlamaEngine<'_> {
    type Saved = SeqState;

    fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    fn new_sampler(&mut self, request: RequestId, sampling: &Sampling) -> Result<(), Refusal> {
        let sampler = TokenSampler::new(self.model, sampling)
            .map_err(|e| (ErrorKind::Invalid, format!("sampler for {request}: {e}")))?;
        self.samplers.insert(request, sampler);
        Ok(())
    }

    fn drop_sampler(&mut self, request: RequestId) {
        self.samplers.remove(&request);
    }

    fn checkpoint_samplers(&mut self, requests: &[RequestId]) {
        self.sampler_checkpoint.keep(&self.samplers, requests);
    }

    fn rewind_samplers(&mut self) {
        self.sampler_checkpoint.restore(&mut self.samplers);
    }

    fn trim(&mut self, seq: SeqId, keep_tokens: u32) -> Result<(), Refusal> {
        if let Some(window) = self.window_only {
            self.window_kept(seq, keep_tokens, window)?;
        }
        self.ctx
            .kv_cache_seq_rm(seq.0 as i32, Some(keep_tokens), None)
            .map_err(|e| {
                (
                    ErrorKind::Engine,
                    format!("trimming {seq} to {keep_tokens}: {e}"),
                )
            })
    }

    fn copy_prefix(&mut self, from: SeqId, to: SeqId, tokens: u32) -> Result<(), Refusal> {
        if let Some(window) = self.window_only {
            self.window_kept(from, tokens, window)?;
        }
        self.trim(to, 0)?;
        self.ctx
            .copy_kv_cache_seq(from.0 as i32, to.0 as i32, Some(0), Some(tokens))
            .map_err(|e| (ErrorKind::Engine, format!("copying {from} to {to}: {e}")))
    }

    /// The chunk and the decodes in one batch. Only when the chunk does not fit beside the
    /// decodes in `n_batch` is its head read by itself first (llama.cpp aborts the process on
    /// a larger batch); the same chunk always splits on the same boundaries.
    fn run(
        &mut self,
        chunk: Option<&ChunkRun<'_>>,
        decodes: &[DecodeRun],
    ) -> Result<Vec<Result<TokenId, Refusal>>, Refusal> {
        let room_with_decodes = self.n_batch.saturating_sub(decodes.len() as u32) as usize;
        if chunk.is_some() && room_with_decodes == 0 {
            return Err((
                ErrorKind::Invalid,
                format!("{} decodes fill n_batch {}", decodes.len(), self.n_batch),
            ));
        }
        self.batch.clear();
        let mut chunk_logits_at = None;
        if let Some(run) = chunk {
            let tokens = run.tokens;
            let tail_len = tokens.len().min(room_with_decodes);
            let head_len = tokens.len() - tail_len;
            let mut pos = run.start_pos;
            for piece in tokens[..head_len].chunks(self.n_batch as usize) {
                self.batch.clear();
                self.add_run(run.seq, pos, piece, false)?;
                self.decode_batch()?;
                pos += piece.len() as u32;
            }
            self.batch.clear();
            self.add_run(run.seq, pos, &tokens[head_len..], run.sample)?;
            if run.sample && tail_len > 0 {
                chunk_logits_at = Some((run.request, self.batch.n_tokens() - 1));
            }
        }
        let mut decode_at = Vec::with_capacity(decodes.len());
        for run in decodes {
            self.batch
                .add(
                    LlamaToken(run.token),
                    run.pos as i32,
                    &[run.seq.0 as i32],
                    true,
                )
                .map_err(|e| (ErrorKind::Engine, e.to_string()))?;
            decode_at.push((run.request, self.batch.n_tokens() - 1));
        }
        if self.batch.n_tokens() > 0 {
            self.decode_batch()?;
        }
        // Each request's grammar has its own budget, and all of them together a step's, well
        // within the host's step deadline: a slow grammar fails its request, not the step.
        let sampling_started = Instant::now();
        let step_until = sampling_started + GRAMMARS_PER_STEP;
        let mut sampled = Vec::with_capacity(decodes.len() + 1);
        for (request, index) in chunk_logits_at.into_iter().chain(decode_at) {
            let until = (Instant::now() + self.grammar_per_token).min(step_until);
            sampled.push(self.sample(request, index, until));
        }
        Ok(sampled)
    }

    /// A token's text; a control token's (not end-of-generation) marked as such
    /// (`protocol::control_text`), so format markers reach the host's parser.
    fn piece(&self, token: TokenId) -> Vec<u8> {
        super::llama_facts::piece(self.model, token)
    }

    fn is_eog(&self, token: TokenId) -> bool {
        self.model.vocab().is_eog(LlamaToken(token))
    }

    fn save(&mut self, seq: SeqId) -> Result<SeqState, Refusal> {
        self.ctx
            .state_seq_get(seq.0 as i32, LlamaStateSeqFlags::empty())
            .map_err(|e| (ErrorKind::Engine, format!("saving {seq}: {e}")))
    }

    fn saved_bytes(saved: &SeqState) -> u64 {
        saved.byte_len() as u64
    }

    fn load(&mut self, saved: &SeqState, seq: SeqId) -> Result<(), Refusal> {
        self.trim(seq, 0)?;
        self.ctx
            .state_seq_set(saved, seq.0 as i32)
            .map_err(|e| (ErrorKind::Engine, format!("restoring into {seq}: {e}")))
    }

    fn cuts_exactly(&self, seq: SeqId, keep_tokens: u32) -> bool {
        let held = self.ctx.kv_cache_seq_pos_max(seq.0 as i32) + 1;
        if i64::from(keep_tokens) >= i64::from(held) {
            return true;
        }
        match self.window_only {
            _ if self.recurrent => false,
            Some(window) => self.window_kept(seq, keep_tokens, window).is_ok(),
            None => true,
        }
    }

    /// `PARTIAL_ONLY`: the window layers' cells of `seq` (not the full-attention layers',
    /// which a cut keeps), or its recurrent state (not a hybrid's attention layers').
    fn save_partial(&mut self, seq: SeqId) -> Result<SeqState, Refusal> {
        self.ctx
            .state_seq_get(seq.0 as i32, LlamaStateSeqFlags::PARTIAL_ONLY)
            .map_err(|e| (ErrorKind::Engine, format!("a checkpoint of {seq}: {e}")))
    }

    /// The checkpoint first (it replaces `seq`'s window cells or recurrent state whole), then
    /// the cut: the full-attention cells from `tokens` on go, and a recurrent state, now at
    /// `tokens`, has nothing past the cut to refuse it (llama-server's order).
    fn restore_partial(
        &mut self,
        saved: &SeqState,
        seq: SeqId,
        tokens: u32,
    ) -> Result<(), Refusal> {
        self.ctx.state_seq_set(saved, seq.0 as i32).map_err(|e| {
            (
                ErrorKind::Engine,
                format!("restoring a checkpoint of {seq}: {e}"),
            )
        })?;
        self.ctx
            .kv_cache_seq_rm(seq.0 as i32, Some(tokens), None)
            .map_err(|e| {
                (
                    ErrorKind::Engine,
                    format!("cutting {seq} to its checkpoint at {tokens}: {e}"),
                )
            })
    }
}

/// Seconds of prompt reading per chunk: the longest a short request waits for a long read to
/// give way. Chosen from measurements (docs/BENCHMARKS.md, "Chunk size"): on two CPU cores a
/// quarter second (64 tokens) read a 1,500-token prompt about 22 % slower than one second
/// (256), in an older AVX2 build. With the `zen4` code it cost 16 % at 1.5K tokens against
/// 512-token chunks; half of that, and all of the cost growing with depth, was how llama.cpp's
/// flash attention split a small batch between threads, which our patch to it fixes
/// (patches/llama.cpp/): 8 % at 1.5K tokens, none at 6.9K. A GPU's quarter second is
/// thousands of tokens. The short request's time to first token is the goal.
pub const CHUNK_SECS: f64 = 0.25;

/// About [`CHUNK_SECS`] of prompt reading, a multiple of 64 within 64..=8192 and `n_batch`.
pub fn chunk_tokens_for(prompt_tokens_per_sec: f64, n_batch: u32) -> u32 {
    let rounded = ((prompt_tokens_per_sec * CHUNK_SECS / 64.0).round() as u32).max(1) * 64;
    rounded.clamp(64, 8192).min(n_batch.max(64))
}

#[cfg(test)]
mod tests {
    use super::chunk_tokens_for;

    #[test]
    fn the_default_chunk_is_about_a_quarter_second_of_reading_within_bounds() {
        // two CPU cores (about 270 tokens/s): a quarter second is 64 tokens
        assert_eq!(chunk_tokens_for(270.0, 2048), 64);
        assert_eq!(chunk_tokens_for(10.0, 2048), 64);
        assert_eq!(chunk_tokens_for(1100.0, 2048), 256);
        // a GPU: bounded by n_batch and 8192
        assert_eq!(chunk_tokens_for(50_000.0, 2048), 2048);
        assert_eq!(chunk_tokens_for(50_000.0, 16_384), 8192);
    }
}
