//! The actor's side of the engine worker: the process of the current generation, what it has
//! open, the outstanding step and its deadline, starts in their own tasks. It only carries out
//! what it is told (the scheduler decides every start, retry and step).

use crate::engine::{EngineError, EngineProcess, WorkerLaunch, cpu_code};
use crate::ids::RequestId;
use crate::protocol::{self, Command, Handshake, Reply};
use std::collections::{HashMap, HashSet};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// A finished start: its generation and the process, or why it failed.
pub(super) type StartResult = (u64, Result<EngineProcess, EngineError>);

pub(super) struct EngineLink {
    launch: WorkerLaunch,
    process: Option<EngineProcess>,
    /// The last handshake (kept after a death, for the snapshot's model facts).
    handshake: Option<Handshake>,
    /// Starts so far; a start's result is taken only if it is the latest.
    generation: u64,
    started_tx: mpsc::UnboundedSender<StartResult>,
    /// Requests the engine has open (a sampler, and a sequence or parked state).
    open: HashSet<RequestId>,
    /// The command id of the outstanding step.
    step_id: Option<u64>,
    /// When the outstanding step's reply is overdue (the engine is then stopped as silent).
    /// Fixed when the step is sent: each loop turn waits only for what is left of it.
    step_due: Instant,
    /// The outstanding step's whole deadline (what a timeout says).
    step_budget: Duration,
    /// Bytes of each entry of the engine's host-RAM conversation cache, by key.
    cache_bytes: HashMap<u64, u64>,
    /// The step ahead the worker runs after the outstanding step, not yet taken.
    ahead: Option<StepAhead>,
    /// The decodes of the outstanding step when it is a step ahead taken as sent: if the
    /// worker did not run it, the step is sent again as itself.
    step_taken: Option<Vec<RequestId>>,
    /// Steps ahead taken as the next step, rewound, and not run (the pool had no room for
    /// them, or the worker could not run them), since the app started.
    steps_ahead_taken: u64,
    steps_ahead_rewound: u64,
    steps_ahead_not_run: u64,
    /// The cells the worker reported in use after the last step (each shared cell once).
    cells_used: Option<u32>,
    /// Steps the running worker finished: a CPU fault within its first
    /// [`cpu_code::FIRST_STEPS`] is blamed on its CPU variant.
    steps_done: u64,
}

/// A decode-only step sent before the last step's reply arrived, so the worker never waits for
/// the host between two steps (the protocol's round trip is hidden behind the step). The
/// scheduler still decides every step: when the step it asks for next is this one, it is
/// taken as sent; otherwise it is rewound (its tokens dropped in the worker, the samplers put
/// back) before anything else is sent, so what follows is as if it never ran.
#[derive(Debug)]
struct StepAhead {
    id: u64,
    decode: Vec<RequestId>,
}

impl EngineLink {
    /// The link, and where finished starts arrive.
    pub fn new(launch: WorkerLaunch) -> (Self, mpsc::UnboundedReceiver<StartResult>) {
        let (started_tx, started_rx) = mpsc::unbounded_channel();
        let link = Self {
            launch,
            process: None,
            handshake: None,
            generation: 0,
            started_tx,
            open: HashSet::new(),
            step_id: None,
            step_due: Instant::now(),
            step_budget: Duration::ZERO,
            cache_bytes: HashMap::new(),
            ahead: None,
            step_taken: None,
            steps_ahead_taken: 0,
            steps_ahead_rewound: 0,
            steps_ahead_not_run: 0,
            cells_used: None,
            steps_done: 0,
        };
        (link, started_rx)
    }

    pub fn launch(&self) -> &WorkerLaunch {
        &self.launch
    }

    pub fn handshake(&self) -> Option<&Handshake> {
        self.handshake.as_ref()
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn is_running(&self) -> bool {
        self.process.is_some()
    }

    pub fn step_outstanding(&self) -> bool {
        self.step_id.is_some()
    }

    /// Starts a new generation after `delay`, in its own task; its result arrives on
    /// the receiver [`EngineLink::new`] gave. An older start still under way is superseded.
    pub fn start(&mut self, delay: Duration) {
        self.generation += 1;
        let generation = self.generation;
        let launch = self.launch.clone();
        let tx = self.started_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let started = crate::engine::cpu_code::start(&launch, generation).await;
            let _ = tx.send((generation, started));
        });
    }

    /// A finished start: `None` when it was superseded; else the handshake, or why it failed.
    pub fn started(
        &mut self,
        generation: u64,
        started: Result<EngineProcess, EngineError>,
    ) -> Option<Result<Handshake, String>> {
        if generation != self.generation {
            return None;
        }
        Some(match started {
            Ok(process) => {
                let handshake = process.handshake().clone();
                self.process = Some(process);
                self.steps_done = 0;
                self.handshake = Some(handshake.clone());
                Ok(handshake)
            }
            Err(error) => Err(error.to_string()),
        })
    }

    /// Stops the process (politely) before a restart; what it held is gone.
    pub async fn stop(&mut self) {
        if let Some(process) = self.process.take() {
            process.shutdown().await;
        }
        self.forget();
    }

    /// A worker that died of a CPU fault (an illegal instruction, a bad memory access) in its
    /// first steps, on a CPU variant `cpu_code: auto` chose: the variant is recorded as
    /// crashing on this CPU, so the start R10 makes next takes the next best (the warm-up
    /// before the handshake catches most such crashes; this is for the rest).
    pub fn blame_cpu_code(&self) {
        let Some(process) = &self.process else {
            return;
        };
        let Some(EngineError::Died { exit, .. }) = process.death() else {
            return;
        };
        let Some(words) = cpu_code::cpu_fault(exit) else {
            return;
        };
        let device = &process.handshake().device;
        let options = &self.launch.options;
        if self.steps_done > cpu_code::FIRST_STEPS
            || options.fake.enabled
            || !crate::engine_worker::modules::is_auto(&options.cpu_code)
            || device.cpu_variants.is_empty()
        {
            return;
        }
        tracing::warn!(
            "the {} CPU code crashed on this CPU ({words}) after {} step(s)",
            device.cpu_variant,
            self.steps_done
        );
        cpu_code::record_crashes(
            self.launch.cpu_record.as_deref(),
            &cpu_code::CpuKey::here(),
            &[crate::protocol::gpu::SkippedCpuCode {
                variant: device.cpu_variant.clone(),
                why: format!("crashed on this CPU ({words}) in the engine's first steps"),
            }],
        );
    }

    /// The engine is gone: kill it for good. False when it was already gone.
    pub fn kill(&mut self) -> bool {
        let Some(mut process) = self.process.take() else {
            return false;
        };
        process.kill();
        self.forget();
        true
    }

    fn forget(&mut self) {
        self.open.clear();
        self.step_id = None;
        self.ahead = None;
        self.step_taken = None;
        self.cells_used = None;
        self.cache_bytes.clear();
    }

    /// Steps ahead taken as the next step, rewound, and not run, since the app started.
    pub fn steps_ahead(&self) -> (u64, u64, u64) {
        (
            self.steps_ahead_taken,
            self.steps_ahead_rewound,
            self.steps_ahead_not_run,
        )
    }

    /// The running worker's process id.
    pub fn worker_pid(&self) -> Option<u32> {
        self.process.as_ref().map(|p| p.pid())
    }

    /// Bytes in the engine's host-RAM conversation cache.
    pub fn cached_bytes(&self) -> u64 {
        self.cache_bytes.values().sum()
    }

    /// Sends a step; its reply is awaited with [`EngineLink::step_reply`]. A decode-only step
    /// that is the step ahead already running is taken as it is; a decode-only step is
    /// followed by the next one ahead (for a model that can drop its last position).
    pub async fn send_step(
        &mut self,
        chunk: Option<protocol::Chunk>,
        decode: Vec<RequestId>,
    ) -> Result<(), EngineError> {
        let taken = match self.ahead.take() {
            Some(ahead) if chunk.is_none() && ahead.decode == decode => {
                self.steps_ahead_taken += 1;
                Some(ahead.id)
            }
            Some(ahead) => {
                self.rewind(ahead).await?;
                None
            }
            None => None,
        };
        let process = self.process.as_mut().ok_or(EngineError::NotRunning)?;
        let chunk_tokens = chunk.as_ref().map_or(0, |c| c.tokens.len());
        self.step_budget = process.step_deadline(chunk_tokens, decode.len());
        self.step_due = Instant::now() + self.step_budget;
        let decode_only = chunk.is_none() && !decode.is_empty();
        self.step_id = Some(match taken {
            Some(id) => id,
            None => process.send(Command::Step {
                chunk,
                decode: decode.clone(),
            })?,
        });
        self.step_taken = taken.map(|_| decode.clone());
        let rewinds = self
            .handshake
            .as_ref()
            .is_some_and(|h| h.model.rewinds_last_token);
        if decode_only && rewinds {
            let id = process.send(Command::StepAhead {
                decode: decode.clone(),
            })?;
            self.ahead = Some(StepAhead { id, decode });
        }
        Ok(())
    }

    /// Undoes a step ahead that the scheduler did not ask for: its reply is dropped, then the
    /// worker rewinds it. A step ahead the worker did not run (no room, or refused: it leaves
    /// nothing behind) needs no rewind. A failed rewind is the engine's, never the request's
    /// whose command comes next: a step ahead left standing would put a token in a sequence
    /// that the host does not count, so it is returned as a broken protocol (fatal).
    async fn rewind(&mut self, ahead: StepAhead) -> Result<(), EngineError> {
        let process = self.process.as_mut().ok_or(EngineError::NotRunning)?;
        let deadline = process.step_deadline(0, ahead.decode.len());
        let line = process.recv_for(ahead.id, deadline).await?;
        if let Some(reason) = not_run(&line.reply) {
            tracing::debug!("a step ahead was not run: {reason}");
            self.steps_ahead_not_run += 1;
            return Ok(());
        }
        match process.call(Command::Rewind, deadline).await {
            Ok(_) => {}
            Err(EngineError::Refused { message, .. }) => {
                return Err(EngineError::Protocol(format!(
                    "the engine could not rewind a step ahead: {message}"
                )));
            }
            Err(error) => return Err(error),
        }
        self.steps_ahead_rewound += 1;
        Ok(())
    }

    /// The outstanding step's reply (call only while one is outstanding); a reply to anything
    /// else, or none by the step's deadline, is an error. When the step was a step ahead taken
    /// as sent and the worker did not run it, the step ahead queued behind it runs in its place
    /// (the same decodes, from the same state), else the step is sent as itself; either way
    /// its reply is awaited here. Cancel-safe (the actor awaits it in a `select!`): the link's
    /// state is whole at its one await, so a dropped call is taken up by the next.
    pub async fn step_reply(&mut self) -> Result<protocol::StepDone, String> {
        loop {
            let expected = self.step_id;
            let left = self.step_due.saturating_duration_since(Instant::now());
            let reply = match self.process.as_mut() {
                Some(process) => process.recv(left).await,
                None => Err(EngineError::NotRunning),
            };
            self.step_id = None;
            let taken = self.step_taken.take();
            let line = match reply {
                Ok(line) if line.id == expected => line,
                Ok(line) => return Err(format!("reply {:?} to step {expected:?}", line.id)),
                // the wait is resumed each loop turn, so the error holds only the last part
                Err(EngineError::Unresponsive(_)) => {
                    return Err(EngineError::Unresponsive(self.step_budget).to_string());
                }
                Err(error) => return Err(error.to_string()),
            };
            match (line.reply, taken) {
                (Reply::StepDone(done), _) => {
                    self.cells_used = done.kv_cells_used;
                    self.steps_done += 1;
                    return Ok(done);
                }
                (reply, Some(decode)) if not_run(&reply).is_some() => {
                    self.steps_ahead_taken -= 1;
                    self.steps_ahead_not_run += 1;
                    self.step_in_place_of_ahead(decode)
                        .map_err(|e| e.to_string())?;
                }
                (other, _) => return Err(format!("the engine refused a step: {other:?}")),
            }
        }
    }

    /// A taken step ahead was not run: the step ahead queued behind it becomes the step (it
    /// runs the same decodes from the same state), else the step is sent as itself.
    fn step_in_place_of_ahead(&mut self, decode: Vec<RequestId>) -> Result<(), EngineError> {
        let process = self.process.as_mut().ok_or(EngineError::NotRunning)?;
        self.step_budget = process.step_deadline(0, decode.len());
        self.step_due = Instant::now() + self.step_budget;
        match self.ahead.take() {
            Some(ahead) => {
                self.steps_ahead_taken += 1;
                self.step_id = Some(ahead.id);
                self.step_taken = Some(decode);
            }
            None => {
                self.step_id = Some(process.send(Command::Step {
                    chunk: None,
                    decode,
                })?);
            }
        }
        Ok(())
    }

    /// The cells the worker reported in use after the last step.
    pub fn cells_used(&self) -> Option<u32> {
        self.cells_used
    }

    /// One engine command and its reply. A refusal here means host and engine disagree about
    /// the engine's state: the caller treats the engine as lost.
    pub async fn call(&mut self, command: Command) -> Result<Reply, EngineError> {
        if let Some(ahead) = self.ahead.take() {
            self.rewind(ahead).await?;
        }
        let process = self.process.as_mut().ok_or(EngineError::NotRunning)?;
        let deadline = process.step_deadline(0, 1);
        process.call(command, deadline).await
    }

    /// Opens a request on a sequence: its sampler, and the tokens it keeps.
    pub async fn open(
        &mut self,
        request: RequestId,
        seq: crate::ids::SeqId,
        keep_tokens: u32,
        sampling: protocol::Sampling,
    ) -> Result<u32, EngineError> {
        let opened = self
            .call(Command::Open {
                request,
                seq,
                keep_tokens,
                sampling,
            })
            .await?;
        self.open.insert(request);
        Ok(match opened {
            Reply::Opened { kept_tokens, .. } => kept_tokens,
            _ => keep_tokens,
        })
    }

    /// Closes a request the engine has open (nothing to do otherwise).
    pub async fn close(&mut self, request: RequestId) -> Result<(), EngineError> {
        if self.open.remove(&request) && self.process.is_some() {
            self.call(Command::Close { request }).await?;
        }
        Ok(())
    }

    /// Moves the conversation in `seq` to the host-RAM cache under `key` (never dropping
    /// those in `keep`); the keys the cache dropped to stay in its byte bound.
    pub async fn save_conversation(
        &mut self,
        seq: crate::ids::SeqId,
        key: u64,
        keep: Vec<u64>,
    ) -> Result<Vec<u64>, EngineError> {
        let reply = self
            .call(Command::SaveConversation { seq, key, keep })
            .await?;
        let Reply::ConversationSaved { moved, evicted, .. } = reply else {
            return Ok(Vec::new());
        };
        self.cache_bytes.insert(key, moved.bytes);
        for key in &evicted {
            self.cache_bytes.remove(key);
        }
        Ok(evicted)
    }

    /// Moves a cached conversation into `seq` (it leaves the cache).
    pub async fn load_conversation(
        &mut self,
        key: u64,
        seq: crate::ids::SeqId,
    ) -> Result<(), EngineError> {
        self.cache_bytes.remove(&key);
        self.call(Command::LoadConversation {
            key,
            seq,
            take: true,
        })
        .await?;
        Ok(())
    }

    pub async fn drop_conversation(&mut self, key: u64) -> Result<(), EngineError> {
        self.cache_bytes.remove(&key);
        self.call(Command::DropConversation { key }).await?;
        Ok(())
    }

    /// Stops the engine at shutdown.
    pub async fn shutdown(&mut self) {
        if let Some(process) = self.process.take() {
            process.shutdown().await;
        }
    }
}

/// Why a step ahead did not run, if it did not: the worker answers one that does not fit with
/// [`Reply::StepAheadNotRun`], and any refusal of a step ahead left nothing behind either.
fn not_run(reply: &Reply) -> Option<&str> {
    match reply {
        Reply::StepAheadNotRun { reason } => Some(reason),
        Reply::Error(e) => Some(&e.message),
        _ => None,
    }
}
