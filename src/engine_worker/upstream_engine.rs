//! The upstream backend (`engine: upstream`): the worker's steps served by an existing
//! llama-server over HTTP, so the host's scheduler, its five API front ends and the dashboard
//! run unchanged in front of it (docs/ARCHITECTURE.md, "An upstream engine").
//!
//! - **What a sequence holds** is kept here as its tokens; the upstream's slot holds the same
//!   prefix in its cache (`cache_prompt`), so each request sends the whole sequence and the
//!   upstream reads only what its slot does not hold yet.
//! - **A prompt chunk** that does not end the prompt is a prefix read on the sequence's slot
//!   (`n_predict: 0`, answered whole): a long read is successive reads at the host's chunk
//!   boundaries, and a short request is dispatched between two of them.
//! - **Decoding** is one stream per request (`stream`, `return_tokens`), started by the
//!   prompt's last chunk; each step takes the request's next token from it. A stream whose
//!   sequence was fed another token than the one it sampled (moved, parked and restored,
//!   trimmed) is dropped and a new one starts from what the sequence holds: for greedy
//!   sampling the same text, the upstream's prefix cache making it cheap.
//! - **Pausing or parking** a request drops its stream (the upstream stops generating for it
//!   and serves the others): a paused request is one left out of a step. Parking keeps its
//!   tokens; its next step sends them again (the slot's cache still holds them unless another
//!   request took the slot).
//! - **The upstream gone** (refused connection, reset, a stream cut short) exits the worker
//!   ([`lost`]): the host sees an engine failure, as when a worker crashes.

use super::backend::{Backend, ChunkRun, DecodeRun, Refusal};
use super::upstream_http::{Http, Stream, StreamEvent, Transport};
use super::{WorkerError, WorkerOptions};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{DeviceFacts, ErrorKind, Handshake, PROTOCOL_VERSION, Sampling};
use crate::upstream::{Probes, UpstreamKind, detect_kind};
use llama_cpp_2::model::LlamaModel;
use llama_cpp_2::token::LlamaToken;
use serde_json::{Value, json};
use std::collections::HashMap;

/// A request's token stream and the token its sequence must be fed next for it to go on.
struct Decoding {
    seq: SeqId,
    stream: Stream,
    /// The stream's last token handed out: the next decode must feed exactly it.
    expects: Option<TokenId>,
    /// Tokens received and not handed out yet.
    ready: std::collections::VecDeque<TokenId>,
    /// The stream's last event came (`stop_type`).
    ended: Option<String>,
}

pub struct UpstreamEngine {
    http: Http,
    vocab: LlamaModel,
    handshake: Handshake,
    /// What each sequence holds.
    held: HashMap<SeqId, Vec<TokenId>>,
    /// The upstream slot each sequence last used (its cache there).
    slot_of: HashMap<SeqId, u32>,
    upstream_slots: u32,
    samplers: HashMap<RequestId, Sampling>,
    decoding: HashMap<RequestId, Decoding>,
    /// The token reported when the upstream ends a stream at end of generation.
    eos: TokenId,
}

impl UpstreamEngine {
    /// Connects to the upstream, checks it is a llama-server serving the same vocabulary as
    /// the GGUF at hand, and measures its prompt reading.
    pub fn connect(
        url: &str,
        kind: &str,
        key: Option<String>,
        model_path: &std::path::Path,
        options: &WorkerOptions,
    ) -> Result<Self, WorkerError> {
        let http = Http::new(url, key).map_err(WorkerError::Backend)?;
        let probes = llama_server_probes(&http, url, kind)?;
        let props = probes.props.unwrap_or_default();
        let upstream_slots = props["total_slots"].as_u64().unwrap_or(1).max(1) as u32;
        let n_ctx = props["default_generation_settings"]["n_ctx"]
            .as_u64()
            .unwrap_or(0) as u32;
        let params = llama_cpp_2::model::params::LlamaModelParams::default().with_vocab_only(true);
        let backend = crate::machine::backend().map_err(WorkerError::Backend)?;
        let vocab = LlamaModel::load_from_file(backend, model_path, &params).map_err(|e| {
            WorkerError::Model {
                path: model_path.display().to_string(),
                message: e.to_string(),
            }
        })?;
        let theirs = probes
            .models
            .as_ref()
            .and_then(|m| m["data"][0]["meta"]["n_vocab"].as_i64());
        let ours = i64::from(vocab.vocab().n_tokens());
        if theirs.is_some_and(|n| n != ours) {
            return Err(WorkerError::Backend(format!(
                "the upstream at {url} serves a model of {} tokens of vocabulary, and {} has \
                 {ours}: give the GGUF the upstream serves (`model`)",
                theirs.unwrap_or_default(),
                model_path.display()
            )));
        }
        let facts = facts_over(&vocab, model_path, n_ctx, probes.models.as_ref());
        let slots = options.slots.clamp(1, upstream_slots);
        let eos = vocab.vocab().eos().0;
        let mut engine = Self {
            handshake: Handshake {
                protocol_version: PROTOCOL_VERSION,
                model: facts,
                slots,
                sequences: options.effective_sequences().max(slots + 1),
                kv_cells: n_ctx.saturating_mul(upstream_slots),
                n_batch: options.n_batch,
                threads: 0,
                prompt_tokens_per_sec: 0.0,
                chunk_tokens: 256,
                simulated: false,
                device: DeviceFacts {
                    name: format!("llama-server at {}", http.base()),
                    backend: "upstream".into(),
                    picked_by: format!("upstream_url, {upstream_slots} slot(s) there"),
                    ..DeviceFacts::default()
                },
            },
            http,
            vocab,
            held: HashMap::new(),
            slot_of: HashMap::new(),
            upstream_slots,
            samplers: HashMap::new(),
            decoding: HashMap::new(),
            eos,
        };
        let speed = engine.measure_prompt_speed();
        engine.handshake.prompt_tokens_per_sec = speed;
        engine.handshake.chunk_tokens = super::llama::chunk_tokens_for(speed, options.n_batch);
        Ok(engine)
    }

    /// The upstream's prompt reading, tokens per second (its own timings of a 256-token read
    /// on slot 0, not kept in its cache); 0 if it does not say.
    fn measure_prompt_speed(&mut self) -> f64 {
        let text = " the".repeat(256);
        let tokens: Vec<TokenId> = self
            .vocab
            .vocab()
            .tokenize(text.as_bytes(), false, false)
            .iter()
            .map(|t| t.0)
            .collect();
        let body = json!({"prompt": tokens, "n_predict": 0, "cache_prompt": false, "id_slot": 0});
        match self.http.post_json("/completion", &body) {
            Ok((200, answer)) => answer["timings"]["prompt_per_second"]
                .as_f64()
                .unwrap_or(0.0),
            Ok(_) => 0.0,
            Err(e) => lost(self.http.base(), &e),
        }
    }

    /// The upstream slot for `seq`: the one it used last, unless another sequence's stream
    /// holds it; else one no stream holds (its stream dropped if every slot is held).
    fn slot_for(&mut self, seq: SeqId) -> u32 {
        let streaming: HashMap<u32, RequestId> = self
            .decoding
            .iter()
            .filter(|(_, d)| d.seq != seq)
            .filter_map(|(r, d)| Some((*self.slot_of.get(&d.seq)?, *r)))
            .collect();
        if let Some(slot) = self
            .slot_of
            .get(&seq)
            .filter(|s| !streaming.contains_key(s))
        {
            return *slot;
        }
        let used: Vec<u32> = self.slot_of.values().copied().collect();
        let free = (0..self.upstream_slots).filter(|s| !streaming.contains_key(s));
        let slot = free
            .clone()
            .find(|s| !used.contains(s))
            .or_else(|| free.clone().next())
            .unwrap_or_else(|| {
                // every slot streams for another request: the first gives its slot up (it
                // starts again from its tokens when it is next decoded)
                let (slot, request) = streaming
                    .iter()
                    .min_by_key(|(s, _)| **s)
                    .map(|(s, r)| (*s, *r))
                    .unwrap_or((0, RequestId(0)));
                self.decoding.remove(&request);
                slot
            });
        self.slot_of.retain(|_, s| *s != slot);
        self.slot_of.insert(seq, slot);
        slot
    }

    /// Reads `seq`'s tokens on its slot without generating (a prompt chunk that does not end
    /// the prompt).
    fn read_prefix(&mut self, seq: SeqId) -> Result<(), Refusal> {
        let slot = self.slot_for(seq);
        let body = json!({
            "prompt": self.held.get(&seq).cloned().unwrap_or_default(),
            "n_predict": 0,
            "cache_prompt": true,
            "id_slot": slot,
        });
        match self.http.post_json("/completion", &body) {
            Ok((200, _)) => Ok(()),
            Ok((status, answer)) => Err((
                ErrorKind::Engine,
                format!("the upstream refused a prompt read ({status}): {answer}"),
            )),
            Err(e) => lost(self.http.base(), &e),
        }
    }

    /// Starts `request`'s stream from what `seq` holds.
    fn start_stream(&mut self, request: RequestId, seq: SeqId) -> Result<(), Refusal> {
        let sampling = self
            .samplers
            .get(&request)
            .ok_or((ErrorKind::Invalid, format!("no sampler for {request}")))?;
        let mut body = sampling_body(sampling);
        body["prompt"] = json!(self.held.get(&seq).cloned().unwrap_or_default());
        self.decoding.remove(&request);
        let slot = self.slot_for(seq);
        body["id_slot"] = json!(slot);
        let stream = self.http.stream("/completion", &body);
        self.decoding.insert(
            request,
            Decoding {
                seq,
                stream,
                expects: None,
                ready: Default::default(),
                ended: None,
            },
        );
        Ok(())
    }

    /// `request`'s next token from its stream, which must continue `seq` as it is now.
    fn next_token(
        &mut self,
        request: RequestId,
        seq: SeqId,
        fed: Option<TokenId>,
    ) -> Result<TokenId, Refusal> {
        let fresh = match self.decoding.get(&request) {
            Some(d) => {
                d.seq != seq || d.expects != fed || (d.ready.is_empty() && d.ended.is_some())
            }
            None => true,
        };
        if fresh {
            self.start_stream(request, seq)?;
        }
        let eos = self.eos;
        // disjoint fields: the stream is read through `http` while `decoding` is held
        let http = &self.http;
        let decoding = self
            .decoding
            .get_mut(&request)
            .ok_or((ErrorKind::Invalid, format!("no stream for {request}")))?;
        loop {
            if let Some(token) = decoding.ready.pop_front() {
                decoding.expects = Some(token);
                return Ok(token);
            }
            if let Some(stop_type) = &decoding.ended {
                // the upstream stopped: at end of generation, its end token
                if stop_type == "eos" {
                    decoding.expects = Some(eos);
                    return Ok(eos);
                }
                return Err((
                    ErrorKind::Engine,
                    format!("the upstream stopped ({stop_type})"),
                ));
            }
            match http.next_event(&mut decoding.stream) {
                StreamEvent::Tokens(tokens) => decoding.ready.extend(tokens),
                StreamEvent::End { stop_type } => decoding.ended = Some(stop_type),
                StreamEvent::Refused { status, body } => {
                    self.decoding.remove(&request);
                    return Err((
                        ErrorKind::Engine,
                        format!("the upstream refused the request ({status}): {body}"),
                    ));
                }
                StreamEvent::Lost(e) => lost(http.base(), &Transport(e)),
            }
        }
    }

    /// Drops the streams decoding on `seq` (it is being moved, parked or cut).
    fn stop_streams_on(&mut self, seq: SeqId) {
        self.decoding.retain(|_, d| d.seq != seq);
    }
}

/// The model's facts over an upstream: the vocabulary's from the GGUF at hand, the sizes the
/// upstream's `/v1/models` gives, and a cache the upstream keeps (any prefix can be sent
/// again: no step ahead, no checkpoints of ours).
fn facts_over(
    vocab: &LlamaModel,
    model_path: &std::path::Path,
    n_ctx: u32,
    models: Option<&Value>,
) -> crate::protocol::ModelFacts {
    let meta = models
        .map(|m| m["data"][0]["meta"].clone())
        .unwrap_or_default();
    let mut facts = super::llama_facts::vocabulary_facts(vocab, model_path, n_ctx);
    facts.ctx_chosen_by = "upstream".into();
    facts.n_ctx_train = meta["n_ctx_train"].as_u64().unwrap_or(0) as u32;
    facts.size = Box::new(crate::protocol::ModelSize {
        quantization: meta["ftype"].as_str().unwrap_or_default().to_owned(),
        params: meta["n_params"].as_u64().unwrap_or(0),
        weights_bytes: meta["size"].as_u64().unwrap_or(0),
        kv_bytes_per_cell: 0,
    });
    // the upstream keeps its own cache: any prefix can be sent again
    facts.trims_at_any_token = true;
    facts.rewinds_last_token = false;
    facts.keeps_checkpoints = false;
    facts.rewindable_tokens = u32::MAX;
    facts
}

/// The upstream's identifying routes, once it is known to be a llama-server (the only kind
/// served yet).
fn llama_server_probes(http: &Http, url: &str, kind: &str) -> Result<Probes, WorkerError> {
    let unreachable = |e: Transport| {
        WorkerError::Backend(format!("the upstream at {url} does not answer: {}", e.0))
    };
    let probes = Probes {
        props: http.get_json("/props").map_err(unreachable)?,
        server_info: http.get_json("/server_info").map_err(unreachable)?,
        version: http.get_json("/version").map_err(unreachable)?,
        models: http.get_json("/v1/models").map_err(unreachable)?,
    };
    let kind = match serde_json::from_value(json!(kind)).unwrap_or_default() {
        UpstreamKind::Auto => detect_kind(&probes).ok_or_else(|| {
            WorkerError::Backend(format!(
                "the upstream at {url} is none of llama-server, vLLM or SGLang by its \
                     routes (/props, /server_info, /version, /v1/models); name it with \
                     `upstream_kind`"
            ))
        })?,
        named => named,
    };
    if kind != UpstreamKind::LlamaServer {
        return Err(WorkerError::Backend(format!(
            "the upstream at {url} is {kind:?}: only llama-server is served yet (vLLM \
                 and SGLang: docs/DEPLOYMENT.md, \"An upstream engine\")"
        )));
    }
    Ok(probes)
}

/// The upstream went away: the worker exits, which the host handles as an engine failure.
fn lost(base: &str, e: &Transport) -> ! {
    eprintln!("engine worker: the upstream at {base} went away: {}", e.0);
    std::process::exit(4)
}

/// llama-server's sampling fields for ours; `n_predict: -1` (the host ends the request).
fn sampling_body(s: &Sampling) -> Value {
    let mut body = json!({
        "stream": true,
        "return_tokens": true,
        "cache_prompt": true,
        "n_predict": -1,
        "temperature": s.temperature,
        "top_k": s.top_k,
        "top_p": s.top_p,
        "min_p": s.min_p,
        "seed": s.seed,
        "repeat_penalty": s.repeat_penalty,
        "frequency_penalty": s.frequency_penalty,
        "presence_penalty": s.presence_penalty,
        "repeat_last_n": s.penalty_last_n,
    });
    if let Some(grammar) = &s.grammar {
        body["grammar"] = json!(grammar.gbnf);
        // llama.cpp's trigger types: 1 a word, 3 a pattern over the whole output
        match (&grammar.lazy_trigger, &grammar.lazy_pattern) {
            (_, Some(pattern)) => {
                body["grammar_lazy"] = json!(true);
                body["grammar_triggers"] = json!([{"type": 3, "value": pattern}]);
            }
            (Some(word), None) => {
                body["grammar_lazy"] = json!(true);
                body["grammar_triggers"] = json!([{"type": 1, "value": word}]);
                body["preserved_tokens"] = json!([word]);
            }
            (None, None) => {}
        }
    }
    body
}

impl Backend for UpstreamEngine {
    /// A sequence's tokens: sent again, the upstream's prefix cache reads what it lost.
    type Saved = Vec<TokenId>;

    fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    fn new_sampler(&mut self, request: RequestId, sampling: &Sampling) -> Result<(), Refusal> {
        self.samplers.insert(request, sampling.clone());
        Ok(())
    }

    fn drop_sampler(&mut self, request: RequestId) {
        self.samplers.remove(&request);
        self.decoding.remove(&request);
    }

    // no step ahead over an upstream (`rewinds_last_token` is false): nothing to keep
    fn checkpoint_samplers(&mut self, _requests: &[RequestId]) {}

    fn rewind_samplers(&mut self) {}

    fn trim(&mut self, seq: SeqId, keep_tokens: u32) -> Result<(), Refusal> {
        self.stop_streams_on(seq);
        self.held
            .entry(seq)
            .or_default()
            .truncate(keep_tokens as usize);
        Ok(())
    }

    fn copy_prefix(&mut self, from: SeqId, to: SeqId, tokens: u32) -> Result<(), Refusal> {
        self.stop_streams_on(to);
        let prefix: Vec<TokenId> = self
            .held
            .get(&from)
            .map(|t| t.iter().take(tokens as usize).copied().collect())
            .unwrap_or_default();
        self.held.insert(to, prefix);
        Ok(())
    }

    fn run(
        &mut self,
        chunk: Option<&ChunkRun<'_>>,
        decodes: &[DecodeRun],
    ) -> Result<Vec<Result<TokenId, Refusal>>, Refusal> {
        // A request decoding before and left out of this step is paused (`solo_priority`): its
        // stream is dropped, so the upstream stops generating for it and serves the others; its
        // next step starts a new stream from what its sequence holds, on the same slot.
        self.decoding.retain(|request, _| {
            chunk.is_some_and(|c| c.request == *request)
                || decodes.iter().any(|d| d.request == *request)
        });
        let mut sampled = Vec::new();
        if let Some(chunk) = chunk {
            let held = self.held.entry(chunk.seq).or_default();
            held.truncate(chunk.start_pos as usize);
            held.extend_from_slice(chunk.tokens);
            if chunk.sample {
                self.start_stream(chunk.request, chunk.seq)?;
                sampled.push(self.next_token(chunk.request, chunk.seq, None));
            } else {
                self.read_prefix(chunk.seq)?;
            }
        }
        for decode in decodes {
            let held = self.held.entry(decode.seq).or_default();
            held.truncate(decode.pos as usize);
            held.push(decode.token);
            sampled.push(self.next_token(decode.request, decode.seq, Some(decode.token)));
        }
        Ok(sampled)
    }

    fn piece(&self, token: TokenId) -> Vec<u8> {
        super::llama_facts::piece(&self.vocab, token)
    }

    fn is_eog(&self, token: TokenId) -> bool {
        self.vocab.vocab().is_eog(LlamaToken(token))
    }

    fn save(&mut self, seq: SeqId) -> Result<Vec<TokenId>, Refusal> {
        self.stop_streams_on(seq);
        Ok(self.held.get(&seq).cloned().unwrap_or_default())
    }

    fn saved_bytes(saved: &Vec<TokenId>) -> u64 {
        (saved.len() * std::mem::size_of::<TokenId>()) as u64
    }

    fn load(&mut self, saved: &Vec<TokenId>, seq: SeqId) -> Result<(), Refusal> {
        self.stop_streams_on(seq);
        self.held.insert(seq, saved.clone());
        Ok(())
    }

    fn cuts_exactly(&self, _seq: SeqId, _keep_tokens: u32) -> bool {
        true
    }

    fn save_partial(&mut self, seq: SeqId) -> Result<Vec<TokenId>, Refusal> {
        Ok(self.held.get(&seq).cloned().unwrap_or_default())
    }

    fn restore_partial(
        &mut self,
        saved: &Vec<TokenId>,
        seq: SeqId,
        tokens: u32,
    ) -> Result<(), Refusal> {
        self.stop_streams_on(seq);
        self.held
            .insert(seq, saved.iter().take(tokens as usize).copied().collect());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::sampling_body;
    use crate::protocol::{Grammar, Sampling};

    fn sampling(grammar: Option<Grammar>) -> Sampling {
        Sampling {
            temperature: 0.0,
            top_k: 40,
            top_p: 0.9,
            min_p: 0.05,
            seed: 7,
            repeat_penalty: 1.0,
            frequency_penalty: 0.0,
            presence_penalty: 0.0,
            penalty_last_n: 64,
            grammar,
        }
    }

    #[test]
    fn a_stream_asks_llama_server_for_token_ids_its_cache_and_our_sampling() {
        let body = sampling_body(&sampling(None));
        assert_eq!(body["stream"], true);
        assert_eq!(body["return_tokens"], true);
        assert_eq!(body["cache_prompt"], true);
        assert_eq!(body["seed"], 7);
        assert_eq!(body["repeat_last_n"], 64);
        assert!(body.get("grammar").is_none());
    }

    #[test]
    fn a_lazy_grammar_goes_with_llama_cpps_trigger_of_the_same_kind() {
        let word = sampling_body(&sampling(Some(Grammar {
            gbnf: "root ::= \"<tool_call>\" [a-z]*".into(),
            lazy_trigger: Some("<tool_call>".into()),
            lazy_pattern: None,
        })));
        assert_eq!(word["grammar_lazy"], true);
        // llama.cpp's COMMON_GRAMMAR_TRIGGER_TYPE_WORD; a one-token word must be preserved
        assert_eq!(word["grammar_triggers"][0]["type"], 1);
        assert_eq!(word["grammar_triggers"][0]["value"], "<tool_call>");
        assert_eq!(word["preserved_tokens"][0], "<tool_call>");
        let pattern = sampling_body(&sampling(Some(Grammar {
            gbnf: "root ::= [a-z]*".into(),
            lazy_trigger: None,
            lazy_pattern: Some("[\\s\\S]*?</think>\\s*([\\s\\S]*)".into()),
        })));
        // COMMON_GRAMMAR_TRIGGER_TYPE_PATTERN_FULL: matched against the whole output, as ours
        assert_eq!(pattern["grammar_triggers"][0]["type"], 3);
        let plain = sampling_body(&sampling(Some(Grammar {
            gbnf: "root ::= [a-z]*".into(),
            lazy_trigger: None,
            lazy_pattern: None,
        })));
        assert_eq!(plain["grammar"], "root ::= [a-z]*");
        assert!(plain.get("grammar_lazy").is_none());
    }
}
