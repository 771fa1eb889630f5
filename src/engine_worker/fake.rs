//! The simulated engine: the same protocol as the real one, with no model.
//!
//! Its vocabulary is bytes: token `b` (0..=255) is the byte `b`, [`FAKE_EOG`] ends a generation
//! and [`FAKE_TURN`] starts a turn; five more are the fill-in-the-middle tokens. Its "KV cache"
//! is the token list of each sequence, and the next token is a function of that whole list and
//! the request's sampler state, so a pause, park or give-way that lost or changed a token would
//! change the output, as on a real engine.
//! A script can make outputs whose prompt contains a string be a given text (tool calls, say).
//! Prompt reading and decoding take simulated time; faults can be injected by step number.
//! Every UI labels it as simulated (`Handshake::simulated`).

use super::FakeOptions;
use super::backend::{Backend, ChunkRun, DecodeRun, Fault, Refusal, SamplerCheckpoint};
use crate::ids::{RequestId, SeqId, TokenId};
use crate::protocol::{ErrorKind, Handshake, ModelFacts, PROTOCOL_VERSION, Sampling};
use serde::Deserialize;
use std::collections::HashMap;
use std::time::Duration;

use crate::protocol::sim_vocab::{
    EOG as FAKE_EOG, FIM_MID, FIM_PRE, FIM_REP, FIM_SEP, FIM_SUF, TURN as FAKE_TURN,
    VOCAB as FAKE_VOCAB,
};

/// How a script's `prompt_contains` names the fill-in-the-middle tokens: unlike their
/// vocabulary names, text a client sends cannot be taken for them.
const SCRIPT_NAMES: &[(TokenId, &str)] = &[
    (FIM_PRE, "<<FIM_PRE>>"),
    (FIM_SUF, "<<FIM_SUF>>"),
    (FIM_MID, "<<FIM_MID>>"),
    (FIM_REP, "<<FIM_REP>>"),
    (FIM_SEP, "<<FIM_SEP>>"),
];

/// A prompt as a script's `prompt_contains` reads it: its bytes, with the fill-in-the-middle
/// tokens by their [`SCRIPT_NAMES`], so a rule can check their order; the chat markers are
/// left out.
fn script_text(tokens: &[TokenId]) -> Vec<u8> {
    let mut text = Vec::with_capacity(tokens.len());
    for &token in tokens {
        match u8::try_from(token) {
            Ok(byte) => text.push(byte),
            Err(_) => {
                let name = SCRIPT_NAMES.iter().find(|(t, _)| *t == token);
                text.extend_from_slice(name.map_or("", |(_, n)| *n).as_bytes());
            }
        }
    }
    text
}

/// Simulated bytes of KV state per token, for park and cache accounting.
pub(crate) const FAKE_BYTES_PER_TOKEN: u64 = 1024;
const LETTERS: &[u8] = b"etaoinshrdlucmfwypvbgkjqxz";

#[derive(Debug, Clone, Default, Deserialize)]
pub struct FakeScript {
    #[serde(default)]
    pub rules: Vec<FakeRule>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct FakeRule {
    /// The rule applies when the prompt (as text) contains this.
    pub prompt_contains: String,
    /// The whole output, then end of generation.
    pub output: String,
}

#[derive(Debug, thiserror::Error)]
pub enum FakeSetupError {
    #[error("cannot read the fake script {path}: {message}")]
    Script { path: String, message: String },
    #[error(
        "--fake-fault {0:?}: expected die:STEP, hang:STEP, malformed:STEP, drop-chunk:STEP, miscount-cells:STEP, slow:STEP:MILLIS, KIND-at-message:N, error-at-rewind:N, error-at-ahead:N or error-at-load:N"
    )]
    Fault(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ScheduledFault {
    Fault(Fault),
    Slow(Duration),
}

/// The sampler of one request: moves with the request, whatever sequence it is on.
#[derive(Debug, Clone)]
struct FakeSampler {
    seeded: bool,
    seed: u32,
    draws: u64,
    /// The scripted output, once the first token was sampled and a rule matched.
    script: Option<Vec<u8>>,
    decided: bool,
}

#[derive(Debug)]
pub struct FakeEngine {
    handshake: Handshake,
    options: FakeOptions,
    script: FakeScript,
    faults: HashMap<FaultAt, ScheduledFault>,
    seqs: Vec<Vec<TokenId>>,
    samplers: HashMap<RequestId, FakeSampler>,
    /// Sampler states before a step ahead (undone by a rewind).
    sampler_checkpoint: SamplerCheckpoint<FakeSampler>,
}

impl FakeEngine {
    /// A message- or rewind-counted fault: the first engine generation only (a restart serves).
    fn first_generation_fault(&self, at: FaultAt) -> Option<Fault> {
        (self.options.generation <= 1).then_some(())?;
        match self.faults.get(&at)? {
            ScheduledFault::Fault(fault) => Some(*fault),
            ScheduledFault::Slow(_) => None,
        }
    }

    pub fn new(options: &FakeOptions, slots: u32, sequences: u32) -> Result<Self, FakeSetupError> {
        let script = match &options.script {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| FakeSetupError::Script {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?;
                serde_json::from_str(&text).map_err(|e| FakeSetupError::Script {
                    path: path.display().to_string(),
                    message: e.to_string(),
                })?
            }
            None => FakeScript::default(),
        };
        let faults = options
            .faults
            .iter()
            .map(|spec| parse_fault(spec))
            .collect::<Result<HashMap<_, _>, _>>()?;
        let slots = slots.max(1);
        let sequences = sequences.max(slots + 1);
        // as the real engine: about a quarter second of (simulated) reading
        let chunk_tokens = if options.prompt_tokens_per_sec > 0.0 {
            super::llama::chunk_tokens_for(options.prompt_tokens_per_sec, 8192)
        } else {
            256
        };
        Ok(Self {
            handshake: Handshake {
                protocol_version: PROTOCOL_VERSION,
                model: ModelFacts {
                    name: "simulated".into(),
                    path: String::new(),
                    n_ctx: options.kv_cells,
                    n_ctx_train: options.kv_cells,
                    ctx_chosen_by: "set".to_owned(),
                    n_vocab: FAKE_VOCAB,
                    bos: None,
                    eog: vec![FAKE_EOG],
                    turn_token: Some(FAKE_TURN),
                    trims_at_any_token: !options.non_trimmable,
                    rewinds_last_token: !options.non_trimmable,
                    // a non-trimmable cache keeps checkpoints, as a recurrent model's does
                    keeps_checkpoints: options.non_trimmable,
                    rewindable_tokens: if options.non_trimmable { 0 } else { u32::MAX },
                    chat_template: None,
                    size: Box::default(),
                },
                slots,
                sequences,
                kv_cells: options.kv_cells,
                n_batch: 8192,
                threads: 1,
                // With no simulated delay it reads "instantly": report a speed to match, so
                // deadlines scaled to it stay short.
                prompt_tokens_per_sec: if options.prompt_tokens_per_sec > 0.0 {
                    options.prompt_tokens_per_sec
                } else {
                    1_000_000.0
                },
                chunk_tokens,
                simulated: true,
                device: crate::protocol::DeviceFacts {
                    name: "simulated".into(),
                    backend: "simulated".into(),
                    chosen_by: "simulated".into(),
                    ..Default::default()
                },
            },
            options: options.clone(),
            script,
            faults,
            seqs: vec![Vec::new(); sequences as usize],
            samplers: HashMap::new(),
            sampler_checkpoint: SamplerCheckpoint::default(),
        })
    }

    fn next_token(&mut self, request: RequestId, seq: SeqId) -> TokenId {
        let tokens = &self.seqs[seq.0 as usize];
        let sampler = self
            .samplers
            .get_mut(&request)
            .expect("checked by the worker");
        if !sampler.decided {
            sampler.decided = true;
            let text = String::from_utf8_lossy(&script_text(tokens)).into_owned();
            sampler.script = self
                .script
                .rules
                .iter()
                .find(|rule| text.contains(&rule.prompt_contains))
                .map(|rule| rule.output.as_bytes().to_vec());
        }
        if let Some(output) = &sampler.script {
            sampler.draws += 1;
            return output
                .get(sampler.draws as usize - 1)
                .map_or(FAKE_EOG, |b| TokenId::from(*b));
        }
        // FNV-1a over everything the sequence holds, then the sampler's own draws when seeded.
        let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
        for token in tokens {
            hash ^= *token as u64;
            hash = hash.wrapping_mul(0x100_0000_01b3);
        }
        if sampler.seeded {
            hash ^= (u64::from(sampler.seed) << 32) ^ sampler.draws;
            hash = hash.wrapping_mul(0x100_0000_01b3);
        }
        sampler.draws += 1;
        if hash.is_multiple_of(6) {
            TokenId::from(b' ')
        } else {
            TokenId::from(LETTERS[(hash >> 8) as usize % LETTERS.len()])
        }
    }
}

/// What a fault's number counts: steps, or every command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum FaultAt {
    Step(u64),
    Message(u64),
    Rewind(u64),
    Ahead(u64),
    Load(u64),
}

/// `KIND:STEP` (`die`, `hang`, `malformed`, `drop-chunk`, `miscount-cells`;
/// `slow:STEP:MILLIS`) counts steps;
/// `KIND-at-message:N` (`die`, `hang`, `malformed`, `error`) counts every command line;
/// `error-at-rewind:N` answers the Nth rewind of a step ahead with an error, `error-at-ahead:N`
/// the Nth step ahead, `error-at-load:N` the Nth conversation load.
fn parse_fault(spec: &str) -> Result<(FaultAt, ScheduledFault), FakeSetupError> {
    let bad = || FakeSetupError::Fault(spec.to_owned());
    let parts: Vec<&str> = spec.split(':').collect();
    let n = parts
        .get(1)
        .and_then(|s| s.parse::<u64>().ok())
        .ok_or_else(bad)?;
    let (at, fault) = match (parts[0], parts.len()) {
        ("die", 2) => (FaultAt::Step(n), ScheduledFault::Fault(Fault::Die)),
        ("hang", 2) => (FaultAt::Step(n), ScheduledFault::Fault(Fault::Hang)),
        ("malformed", 2) => (FaultAt::Step(n), ScheduledFault::Fault(Fault::Malformed)),
        ("drop-chunk", 2) => (FaultAt::Step(n), ScheduledFault::Fault(Fault::DropChunk)),
        ("miscount-cells", 2) => (
            FaultAt::Step(n),
            ScheduledFault::Fault(Fault::MiscountCells),
        ),
        ("slow", 3) => (
            FaultAt::Step(n),
            ScheduledFault::Slow(Duration::from_millis(parts[2].parse().map_err(|_| bad())?)),
        ),
        ("die-at-message", 2) => (FaultAt::Message(n), ScheduledFault::Fault(Fault::Die)),
        ("hang-at-message", 2) => (FaultAt::Message(n), ScheduledFault::Fault(Fault::Hang)),
        ("malformed-at-message", 2) => {
            (FaultAt::Message(n), ScheduledFault::Fault(Fault::Malformed))
        }
        ("error-at-message", 2) => (FaultAt::Message(n), ScheduledFault::Fault(Fault::Error)),
        ("error-at-rewind", 2) => (FaultAt::Rewind(n), ScheduledFault::Fault(Fault::Error)),
        ("error-at-ahead", 2) => (FaultAt::Ahead(n), ScheduledFault::Fault(Fault::Error)),
        ("error-at-load", 2) => (FaultAt::Load(n), ScheduledFault::Fault(Fault::Error)),
        _ => return Err(bad()),
    };
    Ok((at, fault))
}

impl Backend for FakeEngine {
    type Saved = Vec<TokenId>;

    fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// The simulated engine ignores grammars: its outputs are scripted or hashed bytes.
    fn new_sampler(&mut self, request: RequestId, sampling: &Sampling) -> Result<(), Refusal> {
        self.samplers.insert(
            request,
            FakeSampler {
                seeded: sampling.temperature > 0.0,
                seed: sampling.seed,
                draws: 0,
                script: None,
                decided: false,
            },
        );
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
        let held = self.seqs[seq.0 as usize].len();
        if self.options.non_trimmable && keep_tokens > 0 && (keep_tokens as usize) < held {
            // as llama.cpp refuses to cut a recurrent state inside
            return Err((
                ErrorKind::Engine,
                format!("{seq} cannot be cut at {keep_tokens} of {held} tokens"),
            ));
        }
        self.seqs[seq.0 as usize].truncate(keep_tokens as usize);
        Ok(())
    }

    fn copy_prefix(&mut self, from: SeqId, to: SeqId, tokens: u32) -> Result<(), Refusal> {
        let prefix = self.seqs[from.0 as usize][..tokens as usize].to_vec();
        self.seqs[to.0 as usize] = prefix;
        Ok(())
    }

    fn run(
        &mut self,
        chunk: Option<&ChunkRun<'_>>,
        decodes: &[DecodeRun],
    ) -> Result<Vec<Result<TokenId, Refusal>>, Refusal> {
        let mut secs = 0.0;
        let mut sampled = Vec::with_capacity(decodes.len() + 1);
        if let Some(run) = chunk {
            if run.tokens.iter().any(|t| !(0..FAKE_VOCAB).contains(t)) {
                return Err((ErrorKind::Invalid, "a token outside the vocabulary".into()));
            }
            self.seqs[run.seq.0 as usize].extend_from_slice(run.tokens);
            if self.options.prompt_tokens_per_sec > 0.0 {
                secs += run.tokens.len() as f64 / self.options.prompt_tokens_per_sec;
            }
            if run.sample {
                sampled.push(self.next_token(run.request, run.seq));
            }
        }
        for run in decodes {
            self.seqs[run.seq.0 as usize].push(run.token);
            sampled.push(self.next_token(run.request, run.seq));
        }
        if !decodes.is_empty() && self.options.decode_steps_per_sec > 0.0 {
            secs += 1.0 / self.options.decode_steps_per_sec;
        }
        if secs > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(secs));
        }
        Ok(sampled.into_iter().map(Ok).collect())
    }

    fn piece(&self, token: TokenId) -> Vec<u8> {
        match token {
            FAKE_TURN => crate::protocol::control_text::wrap(b"<|im_start|>"),
            _ => u8::try_from(token).map(|b| vec![b]).unwrap_or_default(),
        }
    }

    fn is_eog(&self, token: TokenId) -> bool {
        token == FAKE_EOG
    }

    fn save(&mut self, seq: SeqId) -> Result<Vec<TokenId>, Refusal> {
        Ok(self.seqs[seq.0 as usize].clone())
    }

    fn saved_bytes(saved: &Vec<TokenId>) -> u64 {
        saved.len() as u64 * FAKE_BYTES_PER_TOKEN
    }

    fn load(&mut self, saved: &Vec<TokenId>, seq: SeqId) -> Result<(), Refusal> {
        self.seqs[seq.0 as usize] = saved.clone();
        Ok(())
    }

    fn cuts_exactly(&self, seq: SeqId, keep_tokens: u32) -> bool {
        !self.options.non_trimmable || keep_tokens as usize >= self.seqs[seq.0 as usize].len()
    }

    /// What a recurrent state stands for: everything the sequence read, as it is now.
    fn save_partial(&mut self, seq: SeqId) -> Result<Vec<TokenId>, Refusal> {
        Ok(self.seqs[seq.0 as usize].clone())
    }

    fn restore_partial(
        &mut self,
        saved: &Vec<TokenId>,
        seq: SeqId,
        tokens: u32,
    ) -> Result<(), Refusal> {
        if saved.len() != tokens as usize {
            return Err((
                ErrorKind::Engine,
                format!(
                    "a checkpoint of {} tokens restored at {tokens}",
                    saved.len()
                ),
            ));
        }
        self.seqs[seq.0 as usize] = saved.clone();
        Ok(())
    }

    fn fault_at_message(&mut self, message: u64) -> Option<Fault> {
        self.first_generation_fault(FaultAt::Message(message))
    }

    fn fault_at_rewind(&mut self, rewind: u64) -> Option<Fault> {
        self.first_generation_fault(FaultAt::Rewind(rewind))
    }

    fn fault_at_ahead(&mut self, ahead: u64) -> Option<Fault> {
        self.first_generation_fault(FaultAt::Ahead(ahead))
    }

    fn fault_at_load(&mut self, load: u64) -> Option<Fault> {
        self.first_generation_fault(FaultAt::Load(load))
    }

    fn fault_at_step(&mut self, step: u64) -> Option<Fault> {
        match self.faults.get(&FaultAt::Step(step))? {
            ScheduledFault::Fault(fault) => Some(*fault),
            ScheduledFault::Slow(delay) => {
                std::thread::sleep(*delay);
                None
            }
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
