//! The worker's inference state: the model, the one context, the requests open on it.

use super::{FlashAttn, KvType, WorkerError, WorkerOptions};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{
    Chunk, ErrorKind, Handshake, ModelFacts, PROTOCOL_VERSION, ReadProgress, Reply, Sampled,
    Sampling, Stats, StepDone,
};
use llama_cpp_2::context::LlamaContext;
use llama_cpp_2::context::params::{KvCacheType, LlamaContextParams};
use llama_cpp_2::llama_backend::LlamaBackend;
use llama_cpp_2::llama_batch::LlamaBatch;
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::model::params::LlamaModelParams;
use llama_cpp_2::sampling::LlamaSampler;
use llama_cpp_2::token::LlamaToken;
use std::collections::HashMap;
use std::num::NonZeroU32;
use std::time::Instant;

type Refusal = (ErrorKind, String);

/// Turn-start markers of the common chat formats, the first one the vocabulary has as a
/// single control token is the engine's checkpoint token.
const TURN_MARKERS: [&str; 4] = [
    "<|im_start|>",
    "<|start_header_id|>",
    "<start_of_turn>",
    "<|turn>",
];

/// Largest context taken by default when the model's is larger (memory).
const DEFAULT_CTX_CAP_TOKENS: u32 = 32_768;

pub fn load_model(
    backend: &LlamaBackend,
    options: &WorkerOptions,
) -> Result<LlamaModel, WorkerError> {
    let params = LlamaModelParams::default().with_n_gpu_layers(options.gpu_layers);
    LlamaModel::load_from_file(backend, &options.model, &params).map_err(|e| WorkerError::Model {
        path: options.model.display().to_string(),
        message: e.to_string(),
    })
}

/// One open request: where it runs, how far its sequence got, its own sampler.
struct OpenRequest {
    seq: SeqId,
    sampler: LlamaSampler,
    /// The last sampled token, not yet in the KV cache: the next decode feeds it.
    pending: Option<TokenId>,
}

pub struct Engine<'m> {
    model: &'m LlamaModel,
    ctx: LlamaContext<'m>,
    batch: LlamaBatch<'static>,
    n_batch: u32,
    handshake: Handshake,
    requests: HashMap<RequestId, OpenRequest>,
    /// Tokens each sequence holds (positions `0..len`).
    seq_len: Vec<u32>,
    steps: u64,
    prompt_tokens_read: u64,
    tokens_decoded: u64,
}

impl<'m> Engine<'m> {
    pub fn new(
        backend: &LlamaBackend,
        model: &'m LlamaModel,
        options: &WorkerOptions,
    ) -> Result<Self, WorkerError> {
        let threads = options.effective_threads();
        let n_ctx_train = model.n_ctx_train();
        let ctx_tokens = if options.ctx_tokens > 0 {
            options.ctx_tokens
        } else {
            n_ctx_train.min(DEFAULT_CTX_CAP_TOKENS)
        };
        let slots = options.slots.max(1);
        let n_batch = options.n_batch.clamp(64, ctx_tokens.max(64));
        let kv = match options.kv_type {
            KvType::F16 => KvCacheType::F16,
            KvType::Q8_0 => KvCacheType::Q8_0,
        };
        let flash = match options.flash_attn {
            FlashAttn::Auto => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_AUTO,
            FlashAttn::On => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_ENABLED,
            FlashAttn::Off => llama_cpp_sys_2::LLAMA_FLASH_ATTN_TYPE_DISABLED,
        };
        let params = LlamaContextParams::default()
            .with_n_ctx(NonZeroU32::new(ctx_tokens))
            .with_n_batch(n_batch)
            .with_n_ubatch(n_batch.min(512))
            .with_n_seq_max(slots)
            .with_kv_unified(true)
            .with_n_threads(threads as i32)
            .with_n_threads_batch(threads as i32)
            .with_type_k(kv)
            .with_type_v(kv)
            .with_flash_attention_policy(flash);
        let ctx = model
            .new_context(backend, params)
            .map_err(|e| WorkerError::Context(e.to_string()))?;
        let n_batch = ctx.n_batch();
        let kv_cells = ctx.n_ctx();

        let facts = model_facts(model, options, kv_cells);
        let mut engine = Self {
            model,
            ctx,
            batch: LlamaBatch::new(n_batch as usize, 1),
            n_batch,
            handshake: Handshake {
                protocol_version: PROTOCOL_VERSION,
                model: facts,
                slots,
                kv_cells,
                n_batch,
                threads,
                prompt_tokens_per_sec: 0.0,
                chunk_tokens: 256,
                simulated: false,
            },
            requests: HashMap::new(),
            seq_len: vec![0; slots as usize],
            steps: 0,
            prompt_tokens_read: 0,
            tokens_decoded: 0,
        };
        let speed = engine.measure_prompt_speed()?;
        engine.handshake.prompt_tokens_per_sec = speed;
        engine.handshake.chunk_tokens = chunk_tokens_for(speed, n_batch);
        Ok(engine)
    }

    pub fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// Reads a throwaway prompt on sequence 0 and times it: about one second of reading is
    /// the default chunk. A GPU reads a short prompt too fast to time, so it gets a long one.
    fn measure_prompt_speed(&mut self) -> Result<f64, WorkerError> {
        let text = "The quick brown fox jumps over the lazy dog while the engine measures itself. "
            .repeat(512);
        let tokens: Vec<TokenId> = (self.model.vocab())
            .tokenize(text.as_bytes(), false, false)
            .iter()
            .map(|t| t.0)
            .collect();
        let mut speed = 0.0;
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
            let secs = started.elapsed().as_secs_f64().max(1e-6);
            let _ = self.ctx.kv_cache_seq_rm(0, None, None);
            speed = n as f64 / secs;
            if secs >= 0.1 {
                break;
            }
        }
        Ok(speed)
    }

    pub fn open(
        &mut self,
        request: RequestId,
        seq: SeqId,
        keep_tokens: u32,
        sampling: &Sampling,
    ) -> Result<Reply, Refusal> {
        let held = self.seq_held(seq)?;
        if self.requests.contains_key(&request) {
            return Err((ErrorKind::Invalid, format!("{request} is already open")));
        }
        if let Some((other, _)) = self.requests.iter().find(|(_, r)| r.seq == seq) {
            return Err((ErrorKind::Invalid, format!("{seq} is in use by {other}")));
        }
        let kept = keep_tokens.min(held);
        self.trim(seq, kept)?;
        self.requests.insert(
            request,
            OpenRequest {
                seq,
                sampler: make_sampler(sampling),
                pending: None,
            },
        );
        Ok(Reply::Opened {
            request,
            seq,
            kept_tokens: kept,
        })
    }

    pub fn close(&mut self, request: RequestId) -> Result<Reply, Refusal> {
        self.requests
            .remove(&request)
            .map(|_| Reply::Closed { request })
            .ok_or_else(|| (ErrorKind::Invalid, format!("{request} is not open")))
    }

    pub fn stats(&self) -> Stats {
        Stats {
            kv_cells: self.handshake.kv_cells,
            kv_cells_used: self.seq_len.iter().sum(),
            seq_tokens: self.seq_len.clone(),
            open_requests: self.requests.len() as u32,
            steps: self.steps,
            prompt_tokens_read: self.prompt_tokens_read,
            tokens_decoded: self.tokens_decoded,
        }
    }

    /// One step: the chunk (if any) and one token for every decoding request, in one batch.
    /// Only when the chunk does not fit beside the decodes in `n_batch` is its head read by
    /// itself first (llama.cpp aborts the process on a larger batch).
    pub fn step(
        &mut self,
        chunk: Option<Chunk>,
        decode: &[RequestId],
    ) -> Result<StepDone, Refusal> {
        let started = Instant::now();
        self.check_step(chunk.as_ref(), decode)?;
        let decode_count = decode.len() as u32;
        let room_with_decodes = self.n_batch.saturating_sub(decode_count);
        if chunk.is_some() && room_with_decodes == 0 {
            return Err((
                ErrorKind::Invalid,
                format!("{decode_count} decodes fill n_batch {}", self.n_batch),
            ));
        }

        let mut chunk_logits_at = None;
        if let Some(chunk) = &chunk {
            let seq = self.requests[&chunk.request].seq;
            let tokens = &chunk.tokens;
            let tail_len = tokens.len().min(room_with_decodes as usize);
            let head = &tokens[..tokens.len() - tail_len];
            for piece in head.chunks(self.n_batch as usize) {
                self.batch.clear();
                self.add_run(seq, piece, false)?;
                self.decode_batch()?;
            }
            self.batch.clear();
            self.add_run(seq, &tokens[tokens.len() - tail_len..], chunk.last)?;
            if chunk.last && tail_len > 0 {
                chunk_logits_at = Some(self.batch.n_tokens() - 1);
            }
        } else {
            self.batch.clear();
        }

        let mut decode_at = Vec::with_capacity(decode.len());
        for request in decode {
            let open = &self.requests[request];
            let (seq, token) = (open.seq, open.pending.unwrap_or_default());
            let pos = self.seq_len[seq.0 as usize];
            self.batch
                .add(LlamaToken(token), pos as i32, &[seq.0 as i32], true)
                .map_err(|e| (ErrorKind::Engine, e.to_string()))?;
            self.seq_len[seq.0 as usize] += 1;
            decode_at.push((*request, self.batch.n_tokens() - 1));
        }
        if self.batch.n_tokens() > 0 {
            self.decode_batch()?;
        }
        self.tokens_decoded += decode.len() as u64;

        let mut done = StepDone::default();
        if let Some(chunk) = &chunk {
            let open = &self.requests[&chunk.request];
            self.prompt_tokens_read += chunk.tokens.len() as u64;
            done.read = Some(ReadProgress {
                request: chunk.request,
                held_tokens: self.seq_len[open.seq.0 as usize],
            });
            if let Some(index) = chunk_logits_at {
                done.sampled.push(self.sample(chunk.request, index));
            }
        }
        for (request, index) in decode_at {
            done.sampled.push(self.sample(request, index));
        }
        self.steps += 1;
        done.step_micros = started.elapsed().as_micros() as u64;
        Ok(done)
    }

    fn check_step(&self, chunk: Option<&Chunk>, decode: &[RequestId]) -> Result<(), Refusal> {
        let mut seqs = Vec::with_capacity(decode.len() + 1);
        let mut added_per_seq = HashMap::new();
        if let Some(chunk) = chunk {
            let open = self.open_request(chunk.request)?;
            if open.pending.is_some() {
                return Err((
                    ErrorKind::Invalid,
                    format!("{} has finished reading its prompt", chunk.request),
                ));
            }
            seqs.push(open.seq);
            added_per_seq.insert(open.seq, chunk.tokens.len() as u32);
        }
        for request in decode {
            let open = self.open_request(*request)?;
            if open.pending.is_none() {
                return Err((
                    ErrorKind::Invalid,
                    format!("{request} has no sampled token to decode yet"),
                ));
            }
            if seqs.contains(&open.seq) {
                return Err((
                    ErrorKind::Invalid,
                    format!("{} appears twice in one step", open.seq),
                ));
            }
            seqs.push(open.seq);
            added_per_seq.insert(open.seq, 1);
        }
        let used: u32 = self.seq_len.iter().sum();
        let added: u32 = added_per_seq.values().sum();
        if used + added > self.handshake.kv_cells {
            return Err((
                ErrorKind::Engine,
                format!(
                    "the KV pool is full: {used} cells used + {added} > {} cells",
                    self.handshake.kv_cells
                ),
            ));
        }
        Ok(())
    }

    fn open_request(&self, request: RequestId) -> Result<&OpenRequest, Refusal> {
        self.requests
            .get(&request)
            .ok_or_else(|| (ErrorKind::Invalid, format!("{request} is not open")))
    }

    fn seq_held(&self, seq: SeqId) -> Result<u32, Refusal> {
        self.seq_len.get(seq.0 as usize).copied().ok_or_else(|| {
            (
                ErrorKind::Invalid,
                format!(
                    "{seq} does not exist: the engine has {} slots",
                    self.seq_len.len()
                ),
            )
        })
    }

    fn trim(&mut self, seq: SeqId, keep_tokens: u32) -> Result<(), Refusal> {
        self.ctx
            .kv_cache_seq_rm(seq.0 as i32, Some(keep_tokens), None)
            .map_err(|e| {
                (
                    ErrorKind::Engine,
                    format!("trimming {seq} to {keep_tokens}: {e}"),
                )
            })?;
        self.seq_len[seq.0 as usize] = keep_tokens;
        Ok(())
    }

    /// Adds prompt tokens for `seq` at its next positions; logits on the last one if asked.
    fn add_run(
        &mut self,
        seq: SeqId,
        tokens: &[TokenId],
        logits_last: bool,
    ) -> Result<(), Refusal> {
        let start = self.seq_len[seq.0 as usize];
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
        self.seq_len[seq.0 as usize] += tokens.len() as u32;
        Ok(())
    }

    fn decode_batch(&mut self) -> Result<(), Refusal> {
        self.ctx
            .decode(&mut self.batch)
            .map_err(|e| (ErrorKind::Engine, format!("llama.cpp decode failed: {e}")))
    }

    fn sample(&mut self, request: RequestId, index: i32) -> Sampled {
        let open = self
            .requests
            .get_mut(&request)
            .expect("checked before the step");
        let token = open.sampler.sample(&self.ctx, index);
        open.pending = Some(token.0);
        let vocab = self.model.vocab();
        Sampled {
            request,
            token: token.0,
            bytes: vocab.token_to_piece(token, false, None),
            eog: vocab.is_eog(token),
        }
    }
}

fn make_sampler(sampling: &Sampling) -> LlamaSampler {
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

/// About one second of prompt reading, a multiple of 64 within 64..=8192 and `n_batch`.
pub fn chunk_tokens_for(prompt_tokens_per_sec: f64, n_batch: u32) -> u32 {
    let rounded = ((prompt_tokens_per_sec / 64.0).round() as u32).max(1) * 64;
    rounded.clamp(64, 8192).min(n_batch.max(64))
}

fn model_facts(model: &LlamaModel, options: &WorkerOptions, n_ctx: u32) -> ModelFacts {
    let vocab = model.vocab();
    let name = model.meta_val_str("general.name").unwrap_or_else(|_| {
        options
            .model
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default()
    });
    let eog = (0..vocab.n_tokens())
        .filter(|t| vocab.is_eog(LlamaToken(*t)))
        .collect();
    let turn_token = TURN_MARKERS.iter().find_map(|marker| {
        let tokens = vocab.tokenize(marker.as_bytes(), false, true);
        match tokens.as_slice() {
            [one] if vocab.is_control(*one) => Some(one.0),
            _ => None,
        }
    });
    let bos = vocab.bos();
    ModelFacts {
        name,
        path: options.model.display().to_string(),
        n_ctx,
        n_ctx_train: model.n_ctx_train(),
        n_vocab: vocab.n_tokens(),
        bos: (bos.0 >= 0).then_some(bos.0),
        eog,
        turn_token,
        trims_at_any_token: !(model.is_recurrent() || model.is_hybrid()),
        chat_template: model
            .chat_template(None)
            .ok()
            .and_then(|t| t.to_string().ok()),
    }
}

#[cfg(test)]
mod tests {
    use super::chunk_tokens_for;

    #[test]
    fn the_default_chunk_is_about_one_second_of_reading_within_bounds() {
        assert_eq!(chunk_tokens_for(270.0, 2048), 256);
        assert_eq!(chunk_tokens_for(10.0, 2048), 64);
        assert_eq!(chunk_tokens_for(50_000.0, 2048), 2048);
        assert_eq!(chunk_tokens_for(50_000.0, 16_384), 8192);
    }
}
