//! The engine worker: a child process, the only place that runs inference.
//!
//! It loads a GGUF with llama.cpp into one context with one unified KV pool shared by
//! `slots` sequences, answers the handshake, then serves [`crate::protocol`] commands read as
//! JSON lines from stdin, in order, until stdin closes. Each request keeps one sampler object
//! from open to close, whatever sequence it is on. A bad line gets an error reply; the worker
//! goes on.

mod options;
mod state;

pub use options::{FlashAttn, KvType, WorkerOptions};

use crate::protocol::{Command, CommandLine, ErrorKind, Reply, ReplyLine, salvage_id};
use state::Engine;
use std::io::{BufRead, Write};

/// Why the worker could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    #[error("cannot load model {path}: {message}")]
    Model { path: String, message: String },
    #[error("cannot create the llama.cpp context: {0}")]
    Context(String),
    #[error("i/o on the protocol pipes: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the worker until stdin closes.
pub fn run(options: &WorkerOptions) -> Result<(), WorkerError> {
    let backend = llama_cpp_2::llama_backend::LlamaBackend::init()
        .map_err(|e| WorkerError::Backend(e.to_string()))?;
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    let model = state::load_model(&backend, options)?;
    let mut engine = Engine::new(&backend, &model, options)?;

    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    write_line(
        &mut out,
        &ReplyLine {
            id: Some(0),
            reply: Reply::Ready(engine.handshake().clone()),
        },
    )?;

    let stdin = std::io::stdin();
    let mut input = stdin.lock();
    let mut raw = Vec::new();
    loop {
        raw.clear();
        if input.read_until(b'\n', &mut raw)? == 0 {
            tracing::info!("stdin closed: the worker exits");
            return Ok(());
        }
        let line = String::from_utf8_lossy(&raw);
        let line = line.trim();
        if line.is_empty() {
            continue;
        }
        let reply = match serde_json::from_str::<CommandLine>(line) {
            Ok(CommandLine { id, command }) => ReplyLine {
                id: Some(id),
                reply: serve(&mut engine, command),
            },
            Err(e) => ReplyLine::error(
                salvage_id(line),
                ErrorKind::Malformed,
                format!(
                    "not a command of protocol v{}: {e}",
                    crate::protocol::PROTOCOL_VERSION
                ),
            ),
        };
        write_line(&mut out, &reply)?;
    }
}

fn serve(engine: &mut Engine<'_>, command: Command) -> Reply {
    let result = match command {
        Command::Open {
            request,
            seq,
            keep_tokens,
            sampling,
        } => engine.open(request, seq, keep_tokens, &sampling),
        Command::Step { chunk, decode } => engine.step(chunk, &decode).map(Reply::StepDone),
        Command::Close { request } => engine.close(request),
        Command::Stats => Ok(Reply::Stats(engine.stats())),
    };
    result.unwrap_or_else(|(kind, message)| {
        Reply::Error(crate::protocol::ErrorReply { kind, message })
    })
}

fn write_line(out: &mut impl Write, line: &ReplyLine) -> Result<(), WorkerError> {
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}
