//! The engine worker: a child process, the only place that runs inference.
//!
//! It loads a GGUF with llama.cpp into one context with one unified KV pool shared by
//! `kv_sequences` sequences (of which `slots` run in one step) (or, with `--fake`, runs the simulated engine), answers the handshake,
//! then serves [`crate::protocol`] commands read as JSON lines from stdin, in order, until
//! stdin closes. Each request keeps one sampler object from open to close, whatever sequence
//! it is on, parked or not. A bad line gets an error reply; the worker goes on.
//!
//! - `backend`: what a backend does (the trait); `llama`: the real one (`load`: the model
//!   and its GPU layers, on the device `device` picks); `fake`: the simulated one (also used in process by tests);
//! - `worker`: the protocol's checks and bookkeeping over any backend;
//! - `cache`: the host-RAM conversation cache;
//! - `upstream_engine`: the backend over an existing llama-server (`engine: upstream`), through
//!   `upstream_http`.

mod backend;
mod cache;
#[cfg(test)]
mod checkpoint_tests;
mod checkpoints;
mod device;
mod fake;
pub mod fault;
mod fit;
mod llama;
mod llama_facts;
mod load;
pub mod model_size;
#[cfg(test)]
mod pattern_fuzz_tests;
mod sampler;
#[cfg(test)]
mod sampler_tests;
#[cfg(test)]
mod step_ahead_tests;
mod upstream_engine;
mod upstream_http;
pub mod variant_check;
mod worker;

pub use crate::machine::modules;
pub use crate::protocol::{
    DEFAULT_GRAMMAR_MS_PER_TOKEN, FakeOptions, FlashAttn, KvType, WorkerOptions,
};
pub use backend::{Backend, Fault};
pub use fake::{FakeEngine, FakeRule, FakeScript, FakeSetupError};
pub use worker::Worker;

use crate::protocol::{Command, CommandLine, ErrorKind, Reply, ReplyLine, salvage_id};
use std::io::{BufRead, Write};

/// Why the worker could not start or serve.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    #[error("llama.cpp backend: {0}")]
    Backend(String),
    #[error("cannot load model {path}: {message}")]
    Model { path: String, message: String },
    #[error("no --model given")]
    NoModel,
    #[error("{0}")]
    Device(String),
    #[error("cannot create the llama.cpp context: {0}")]
    Context(String),
    #[error(transparent)]
    Fake(#[from] FakeSetupError),
    #[error("i/o on the protocol pipes: {0}")]
    Io(#[from] std::io::Error),
}

const MIB: u64 = 1024 * 1024;

/// The simulated engine's fault that keeps the worker alive after stdin closes: a worker that
/// outlives its app unless the platform kills it (Linux `PR_SET_PDEATHSIG`, a Windows job
/// object), which the worker's own exit on stdin EOF would otherwise hide.
pub const IGNORE_STDIN_EOF: &str = "ignore-stdin-eof";

/// Runs the worker until stdin closes.
pub fn run(options: &WorkerOptions) -> Result<(), WorkerError> {
    if options.fake.enabled {
        let mut fake = options.fake.clone();
        let linger = fake.faults.iter().any(|f| f == IGNORE_STDIN_EOF);
        fake.faults.retain(|f| f != IGNORE_STDIN_EOF);
        let engine = FakeEngine::new(&fake, options.slots, options.effective_sequences())?;
        if fake.load_secs > 0.0 {
            std::thread::sleep(std::time::Duration::from_secs_f64(fake.load_secs));
        }
        serve_stdio(&mut worker(engine, options))?;
        if linger {
            // Not `eprintln!`: with the app gone stderr is a broken pipe, and it would panic.
            let _ = writeln!(
                std::io::stderr(),
                "simulated engine: injected fault: stdin closed, staying alive"
            );
            loop {
                std::thread::sleep(std::time::Duration::from_secs(3600));
            }
        }
        return Ok(());
    }
    let path = options.model.as_deref().ok_or(WorkerError::NoModel)?;
    if let Some(upstream) = &options.upstream {
        let key = std::env::var(crate::protocol::UPSTREAM_API_KEY_ENV)
            .ok()
            .filter(|k| !k.is_empty());
        let engine = upstream_engine::UpstreamEngine::connect(
            &upstream.url,
            &upstream.kind,
            key,
            path,
            options,
        )?;
        return serve_stdio(&mut worker(engine, options));
    }
    llama_cpp_2::send_logs_to_tracing(llama_cpp_2::LogOptions::default());
    let modules = modules::load_as(&options.cpu_code).map_err(WorkerError::Backend)?;
    let backend = llama_cpp_2::llama_backend::LlamaBackend::init()
        .map_err(|e| WorkerError::Backend(e.to_string()))?;
    let loaded = load::load_model(&backend, options, path, modules)?;
    let engine = llama::LlamaEngine::new(
        &backend,
        &loaded.model,
        options,
        path,
        loaded.device,
        &loaded.context,
    )?;
    serve_stdio(&mut worker(engine, options))
}

/// The worker over a backend, with the options' bounds.
fn worker<B: Backend>(engine: B, options: &WorkerOptions) -> Worker<B> {
    Worker::new(engine, options.conversation_cache_mib * MIB).with_checkpoints(
        options.ctx_checkpoints,
        options.checkpoint_mib * MIB,
        options.checkpoint_min_step_tokens,
        worker::before_end_tokens(options.ubatch_tokens),
    )
}

/// The handshake, then one reply line per command line, until stdin closes.
fn serve_stdio<B: Backend>(worker: &mut Worker<B>) -> Result<(), WorkerError> {
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    write_line(
        &mut out,
        &ReplyLine {
            id: Some(0),
            reply: Reply::Ready(Box::new(worker.backend().handshake().clone())),
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
            Ok(CommandLine { id, mut command }) => {
                let mut miscount = false;
                match worker.fault_for(&command) {
                    Some(Fault::Die) => {
                        eprintln!("simulated engine: injected fault: dying at command {id}");
                        std::process::exit(3);
                    }
                    Some(Fault::Hang) => {
                        eprintln!("simulated engine: injected fault: hanging at command {id}");
                        loop {
                            std::thread::sleep(std::time::Duration::from_secs(3600));
                        }
                    }
                    Some(Fault::Malformed) => {
                        out.write_all(b"{this is not a reply\n")?;
                        out.flush()?;
                        continue;
                    }
                    Some(Fault::Error) => {
                        eprintln!("simulated engine: injected fault: an error for command {id}");
                        write_line(
                            &mut out,
                            &ReplyLine::error(
                                Some(id),
                                ErrorKind::Engine,
                                "simulated engine: injected error",
                            ),
                        )?;
                        continue;
                    }
                    Some(Fault::MiscountCells) => {
                        eprintln!("simulated engine: injected fault: miscounting cells at {id}");
                        miscount = true;
                    }
                    Some(Fault::DropChunk) => {
                        eprintln!("simulated engine: injected fault: losing the chunk of {id}");
                        if let Command::Step { chunk, .. } = &mut command {
                            *chunk = None;
                        }
                    }
                    None => {}
                }
                let mut reply = worker.serve(command);
                if let (true, Reply::StepDone(done)) = (miscount, &mut reply) {
                    done.kv_cells_used = done.kv_cells_used.map(|n| n + 1);
                }
                ReplyLine {
                    id: Some(id),
                    reply,
                }
            }
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

fn write_line(out: &mut impl Write, line: &ReplyLine) -> Result<(), WorkerError> {
    serde_json::to_writer(&mut *out, line).map_err(std::io::Error::from)?;
    out.write_all(b"\n")?;
    out.flush()?;
    Ok(())
}
