//! One running worker process (one generation): its pipes, its reader threads, its handshake.

use super::{EngineError, WorkerLaunch, spawn};
use crate::protocol::{Command, CommandLine, Handshake, PROTOCOL_VERSION, Reply, ReplyLine};
use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Lines of the worker's stderr kept to explain its death.
const STDERR_TAIL_LINES: usize = 20;
/// How long a worker whose stdin closed may take to exit before it is killed.
const EXIT_GRACE: Duration = Duration::from_secs(2);

/// How a worker ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WorkerExit {
    Code(i32),
    Signal(i32),
    /// Still running when we gave up waiting; it was killed.
    Killed,
    Unknown,
}

impl std::fmt::Display for WorkerExit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Code(code) => write!(f, "exit code {code}"),
            Self::Signal(signal) => match signal_words(*signal) {
                Some(words) => write!(f, "killed by signal {signal}, {words}"),
                None => write!(f, "killed by signal {signal}"),
            },
            Self::Killed => write!(f, "stopped by the supervisor"),
            Self::Unknown => write!(f, "unknown status"),
        }
    }
}

/// A signal's name and what it means for the engine worker, for the words a person reads.
pub fn signal_words(signal: i32) -> Option<&'static str> {
    Some(match signal {
        4 => {
            "SIGILL: an illegal instruction (llama.cpp's CPU code used an instruction this CPU \
             or its system does not run)"
        }
        6 => "SIGABRT: llama.cpp stopped itself on a failed check (its log says which)",
        7 => "SIGBUS: a bad memory access (a model file changed or cut short while mapped?)",
        9 => "SIGKILL: killed (by the app, a person, or the system when memory ran out)",
        11 => "SIGSEGV: an invalid memory access (a crash in llama.cpp)",
        15 => "SIGTERM: asked to stop",
        _ => return None,
    })
}

#[derive(Debug)]
enum FromWorker {
    /// Boxed: a handshake line is large, every other is small.
    Line(Box<ReplyLine>),
    Garbage(String),
    Eof,
}

#[derive(Debug)]
pub struct EngineProcess {
    generation: u64,
    pid: u32,
    child: Arc<Mutex<Child>>,
    to_worker: Option<std::sync::mpsc::Sender<String>>,
    from_worker: mpsc::UnboundedReceiver<FromWorker>,
    stderr_tail: Arc<Mutex<VecDeque<String>>>,
    handshake: Handshake,
    next_id: u64,
    dead: Option<EngineError>,
    /// When stdout closed: the exit grace runs from here, however often `recv` is cancelled
    /// and called again.
    eof_at: Option<Instant>,
}

impl EngineProcess {
    /// Spawns a worker and waits for its handshake.
    pub async fn start(launch: &WorkerLaunch, generation: u64) -> Result<Self, EngineError> {
        let mut process = Self::spawn_worker(launch, generation).await?;
        let first = match process.recv(launch.handshake_timeout).await {
            Ok(line) => line,
            Err(EngineError::Unresponsive(_)) => {
                return Err(EngineError::HandshakeTimeout {
                    secs: launch.handshake_timeout.as_secs(),
                    stderr_tail: process.stderr_tail(),
                });
            }
            Err(e) => return Err(e),
        };
        match first.reply {
            Reply::Ready(handshake) if handshake.protocol_version == PROTOCOL_VERSION => {
                log_ready(generation, process.pid, &handshake);
                process.handshake = *handshake;
                Ok(process)
            }
            Reply::Ready(handshake) => {
                process.kill();
                Err(EngineError::ProtocolVersion {
                    got: handshake.protocol_version,
                    want: PROTOCOL_VERSION,
                })
            }
            other => {
                process.kill();
                Err(EngineError::Protocol(format!(
                    "expected the handshake, got {other:?}"
                )))
            }
        }
    }

    /// Spawns a worker with a thread on each of its pipes; its handshake is still to come.
    async fn spawn_worker(launch: &WorkerLaunch, generation: u64) -> Result<Self, EngineError> {
        let mut command = std::process::Command::new(&launch.exe);
        command
            .args(launch.args_for(generation))
            .envs(launch.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let spawn_error = |e: std::io::Error| EngineError::Spawn {
            exe: launch.exe.display().to_string(),
            message: e.to_string(),
        };
        let mut child = spawn::spawn(command).await.map_err(spawn_error)?;
        let pid = child.id();
        let (stdin, stdout, stderr) =
            match (child.stdin.take(), child.stdout.take(), child.stderr.take()) {
                (Some(i), Some(o), Some(e)) => (i, o, e),
                _ => return Err(spawn_error(std::io::Error::other("a pipe is missing"))),
            };

        let (reply_tx, from_worker) = mpsc::unbounded_channel();
        std::thread::Builder::new()
            .name(format!("engine-{generation}-stdout"))
            .spawn(move || read_replies(stdout, &reply_tx))
            .map_err(spawn_error)?;
        let stderr_tail = Arc::new(Mutex::new(VecDeque::new()));
        let tail = Arc::clone(&stderr_tail);
        std::thread::Builder::new()
            .name(format!("engine-{generation}-stderr"))
            .spawn(move || read_stderr(stderr, &tail, generation))
            .map_err(spawn_error)?;
        let (line_tx, line_rx) = std::sync::mpsc::channel::<String>();
        std::thread::Builder::new()
            .name(format!("engine-{generation}-stdin"))
            .spawn(move || write_commands(stdin, &line_rx))
            .map_err(spawn_error)?;

        Ok(Self {
            generation,
            pid,
            child: Arc::new(Mutex::new(child)),
            to_worker: Some(line_tx),
            from_worker,
            stderr_tail,
            handshake: placeholder_handshake(),
            next_id: 1,
            dead: None,
            eof_at: None,
        })
    }

    pub fn generation(&self) -> u64 {
        self.generation
    }

    pub fn pid(&self) -> u32 {
        self.pid
    }

    pub fn handshake(&self) -> &Handshake {
        &self.handshake
    }

    /// The worker's last stderr lines.
    pub fn stderr_tail(&self) -> Vec<String> {
        self.stderr_tail
            .lock()
            .map(|t| t.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// Why the worker is gone, once it is.
    pub fn death(&self) -> Option<&EngineError> {
        self.dead.as_ref()
    }

    /// Sends a command without waiting for its reply; returns its id. Replies come in order.
    pub fn send(&mut self, command: Command) -> Result<u64, EngineError> {
        if let Some(dead) = &self.dead {
            return Err(dead.clone());
        }
        let id = self.next_id;
        self.next_id += 1;
        let line = serde_json::to_string(&CommandLine { id, command })
            .map_err(|e| EngineError::Protocol(e.to_string()))?;
        self.send_raw(line)?;
        Ok(id)
    }

    /// Sends a raw line (tests use it to send garbage).
    pub fn send_raw(&mut self, line: String) -> Result<(), EngineError> {
        let sent = self
            .to_worker
            .as_ref()
            .is_some_and(|tx| tx.send(line).is_ok());
        if sent {
            Ok(())
        } else {
            Err(EngineError::NotRunning)
        }
    }

    /// The next reply, within `deadline`. Past it the worker is stopped and counted dead.
    pub async fn recv(&mut self, deadline: Duration) -> Result<ReplyLine, EngineError> {
        if let Some(dead) = &self.dead {
            return Err(dead.clone());
        }
        let error = match tokio::time::timeout(deadline, self.from_worker.recv()).await {
            Ok(Some(FromWorker::Line(line))) => return Ok(*line),
            Ok(Some(FromWorker::Garbage(text))) => {
                EngineError::Protocol(format!("a line that is no reply: {text:.200}"))
            }
            Ok(Some(FromWorker::Eof) | None) => {
                let eof_at = *self.eof_at.get_or_insert_with(Instant::now);
                let exit = self.reap_until(eof_at + EXIT_GRACE).await;
                // The stderr reader may still be draining the last lines.
                tokio::time::sleep(Duration::from_millis(50)).await;
                EngineError::Died {
                    exit,
                    stderr_tail: self.stderr_tail(),
                }
            }
            Err(_) => {
                self.kill();
                EngineError::Unresponsive(deadline)
            }
        };
        if matches!(error, EngineError::Protocol(_)) {
            self.kill();
        }
        tracing::warn!(generation = self.generation, "engine worker lost: {error}");
        self.dead = Some(error.clone());
        Err(error)
    }

    /// The reply to command `id` (sent earlier; replies come in order): a reply to anything
    /// else breaks the protocol.
    pub async fn recv_for(
        &mut self,
        id: u64,
        deadline: Duration,
    ) -> Result<ReplyLine, EngineError> {
        let line = self.recv(deadline).await?;
        if line.id != Some(id) {
            let error = EngineError::Protocol(format!("reply {:?} to command {id}", line.id));
            self.kill();
            self.dead = Some(error.clone());
            return Err(error);
        }
        Ok(line)
    }

    /// Sends a command and waits for its reply. An error reply becomes `Refused`.
    pub async fn call(
        &mut self,
        command: Command,
        deadline: Duration,
    ) -> Result<Reply, EngineError> {
        let id = self.send(command)?;
        let line = self.recv_for(id, deadline).await?;
        match line.reply {
            Reply::Error(e) => Err(EngineError::Refused {
                kind: e.kind,
                message: e.message,
            }),
            reply => Ok(reply),
        }
    }

    /// A deadline for a step reading `prompt_tokens` and decoding `decodes` tokens: ten times
    /// the expected time at the measured speed, plus a margin for a busy machine.
    pub fn step_deadline(&self, prompt_tokens: usize, decodes: usize) -> Duration {
        let speed = self.handshake.prompt_tokens_per_sec.max(1.0);
        let expected = (prompt_tokens + decodes * 8) as f64 / speed;
        Duration::from_secs(10) + Duration::from_secs_f64(expected * 10.0)
    }

    /// Closes stdin (the worker exits by itself), waits a grace period, then kills.
    pub async fn shutdown(mut self) -> WorkerExit {
        self.to_worker = None;
        let exit = self.reap_until(Instant::now() + EXIT_GRACE).await;
        self.dead = Some(EngineError::NotRunning);
        exit
    }

    /// Kills the worker at once.
    pub fn kill(&mut self) {
        if let Ok(mut child) = self.child.lock() {
            let _ = child.kill();
            let _ = child.wait();
        }
        self.to_worker = None;
    }

    /// Waits until `deadline` for the worker to exit, then kills it.
    async fn reap_until(&mut self, deadline: Instant) -> WorkerExit {
        loop {
            let status = self
                .child
                .lock()
                .ok()
                .and_then(|mut c| c.try_wait().ok().flatten());
            if let Some(status) = status {
                return exit_of(status);
            }
            if Instant::now() >= deadline {
                self.kill();
                return WorkerExit::Killed;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for EngineProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

fn exit_of(status: std::process::ExitStatus) -> WorkerExit {
    if let Some(code) = status.code() {
        return WorkerExit::Code(code);
    }
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt;
        if let Some(signal) = status.signal() {
            return WorkerExit::Signal(signal);
        }
    }
    WorkerExit::Unknown
}

/// The ready worker's device, threads and layers on the GPU in the log, with a warning when
/// the fit was cut or GPU memory runs low.
fn log_ready(generation: u64, pid: u32, handshake: &Handshake) {
    let d = &handshake.device;
    tracing::info!(
        generation,
        pid,
        "engine worker ready: {}, {} threads, {} of {} layers on the GPU \
         (gpu_layers {})",
        d.name,
        handshake.threads,
        d.gpu_layers,
        d.model_layers,
        d.chosen_by
    );
    if !d.fit_warning.is_empty() {
        tracing::warn!("{}: {}", d.name, d.fit_warning);
    }
    if d.vram_low {
        let within = if d.vram_limit_bytes > 0 {
            format!(" within gpu_memory_limit {} MiB", d.vram_limit_bytes >> 20)
        } else {
            String::new()
        };
        tracing::warn!(
            "{}: {} MiB of GPU memory free{within}, under the margin: the system \
             may spill into shared memory (about ten times slower)",
            d.name,
            d.vram_free_bytes >> 20
        );
    }
}

fn read_replies(stdout: std::process::ChildStdout, tx: &mpsc::UnboundedSender<FromWorker>) {
    let mut reader = BufReader::new(stdout);
    let mut line = String::new();
    loop {
        line.clear();
        match reader.read_line(&mut line) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let parsed = match serde_json::from_str::<ReplyLine>(line.trim()) {
                    Ok(reply) => FromWorker::Line(Box::new(reply)),
                    Err(_) => FromWorker::Garbage(line.trim().to_owned()),
                };
                if tx.send(parsed).is_err() {
                    return;
                }
            }
        }
    }
    let _ = tx.send(FromWorker::Eof);
}

/// Reads the worker's stderr to its end: bytes, decoded lossily line by line, so a line that is
/// not UTF-8 (a driver's message in a local code page) never stops the reader, which would let
/// the pipe fill and block the worker.
fn read_stderr(stderr: impl std::io::Read, tail: &Mutex<VecDeque<String>>, generation: u64) {
    let mut reader = BufReader::new(stderr);
    let mut bytes = Vec::new();
    loop {
        bytes.clear();
        match reader.read_until(b'\n', &mut bytes) {
            Ok(0) | Err(_) => break,
            Ok(_) => {}
        }
        let line = String::from_utf8_lossy(&bytes)
            .trim_end_matches(['\n', '\r'])
            .to_owned();
        tracing::debug!(target: "strata_desk::engine_worker", generation, "{line}");
        if let Ok(mut tail) = tail.lock() {
            if tail.len() == STDERR_TAIL_LINES {
                tail.pop_front();
            }
            tail.push_back(line);
        }
    }
}

fn write_commands(mut stdin: std::process::ChildStdin, lines: &std::sync::mpsc::Receiver<String>) {
    for line in lines {
        if stdin.write_all(line.as_bytes()).is_err()
            || stdin.write_all(b"\n").is_err()
            || stdin.flush().is_err()
        {
            return;
        }
    }
    // The sender was dropped: dropping stdin closes the pipe and the worker exits.
}

fn placeholder_handshake() -> Handshake {
    Handshake {
        protocol_version: 0,
        model: crate::protocol::ModelFacts {
            name: String::new(),
            path: String::new(),
            n_ctx: 0,
            n_ctx_train: 0,
            ctx_chosen_by: String::new(),
            n_vocab: 0,
            bos: None,
            eog: Vec::new(),
            turn_token: None,
            trims_at_any_token: true,
            rewinds_last_token: true,
            keeps_checkpoints: false,
            rewindable_tokens: u32::MAX,
            chat_template: None,
            size: Box::default(),
        },
        slots: 0,
        sequences: 0,
        kv_cells: 0,
        n_batch: 0,
        threads: 0,
        prompt_tokens_per_sec: 0.0,
        chunk_tokens: 0,
        simulated: false,
        device: Default::default(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stderr_line_that_is_not_utf8_is_kept_lossily_and_the_reader_goes_on() {
        // A Windows driver may print in a local code page: 0xE9 is "é" in Latin-1.
        let mut input = b"first line\n".to_vec();
        input.extend_from_slice(b"caf\xE9 au lait\r\n");
        input.extend_from_slice(b"last words");
        let tail = Mutex::new(VecDeque::new());
        read_stderr(&input[..], &tail, 1);
        let tail: Vec<String> = tail.into_inner().unwrap().into_iter().collect();
        assert_eq!(tail, ["first line", "caf\u{FFFD} au lait", "last words"]);
    }

    #[test]
    fn the_stderr_tail_keeps_the_last_lines_only() {
        let input: String = (0..STDERR_TAIL_LINES + 5)
            .map(|i| format!("line {i}\n"))
            .collect();
        let tail = Mutex::new(VecDeque::new());
        read_stderr(input.as_bytes(), &tail, 1);
        let tail = tail.into_inner().unwrap();
        assert_eq!(tail.len(), STDERR_TAIL_LINES);
        assert_eq!(
            tail.back().unwrap(),
            &format!("line {}", STDERR_TAIL_LINES + 4)
        );
    }
}
