//! `strata-desk --headless`: the service and the HTTP server, no window.

use crate::api::{ApiState, Prompts};
use crate::config::{Config, ConfigError, EngineKind};
use crate::engine::WorkerLaunch;
use crate::engine_worker::{FakeOptions, WorkerOptions};
use crate::models::{ModelFetchError, ensure_default_model};
use crate::service::{self, ServiceHandle, ServiceOptions};
use crate::tokenizer::{Tokenizer, TokenizerError};
use std::path::PathBuf;
use std::sync::Arc;

#[derive(Debug, thiserror::Error)]
pub enum HeadlessError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Model(#[from] ModelFetchError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the model's chat template: {0}")]
    Template(#[from] crate::chat::TemplateError),
    #[error(
        "cannot listen on {addr}: {source} (is another server using it? choose another port with --port)"
    )]
    Bind {
        addr: String,
        source: std::io::Error,
    },
    #[error("the HTTP server stopped: {0}")]
    Serve(std::io::Error),
}

/// Everything the server needs, built from the config: the worker launch, the prompts.
pub fn prepare(config: &Config, exe: PathBuf) -> Result<(WorkerLaunch, Prompts), HeadlessError> {
    let a = &config.app;
    let (options, tokenizer) = match a.engine {
        EngineKind::Llama => {
            let model = match &a.model {
                Some(path) => path.clone(),
                None => ensure_default_model()?,
            };
            let tokenizer = Tokenizer::load(&model)?;
            (WorkerOptions::for_model(model), tokenizer)
        }
        EngineKind::Sim => {
            let fake = FakeOptions {
                enabled: true,
                kv_cells: if a.ctx > 0 { a.ctx } else { 16_384 },
                prompt_tokens_per_sec: 2_000.0,
                decode_steps_per_sec: 50.0,
                script: None,
                faults: Vec::new(),
                load_secs: 0.0,
            };
            (WorkerOptions::simulated(fake), Tokenizer::simulated())
        }
    };
    let options = WorkerOptions {
        ctx_tokens: a.ctx,
        slots: a.parallel,
        threads: a.threads,
        gpu_layers: a.gpu_layers,
        flash_attn: a.flash_attn,
        kv_type: a.kv_type,
        conversation_cache_mib: a.conversation_cache_mib,
        ..options
    };
    Ok((WorkerLaunch::new(exe, options), Prompts::new(tokenizer)?))
}

/// Starts the service for a config; returns its handle and the API state.
pub fn start(config: &Config, exe: PathBuf) -> Result<(ServiceHandle, ApiState), HeadlessError> {
    let (launch, prompts) = prepare(config, exe)?;
    let handle = service::spawn(ServiceOptions {
        launch,
        settings: config.scheduler.clone(),
    });
    let state = ApiState {
        service: handle.clone(),
        prompts: Arc::new(prompts),
        app: Arc::new(config.app.clone()),
        scheduler: Arc::new(config.scheduler.clone()),
    };
    Ok((handle, state))
}

/// Runs until SIGTERM or Ctrl-C: stop accepting, end in-flight work with a clear error, stop
/// the worker.
pub async fn run(config: Config, exe: PathBuf) -> Result<(), HeadlessError> {
    let addr = std::net::SocketAddr::new(config.app.host, config.app.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| HeadlessError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let (handle, state) = start(&config, exe)?;
    let engine = match config.app.engine {
        EngineKind::Llama => "llama.cpp",
        EngineKind::Sim => "SIMULATED engine (no model)",
    };
    eprintln!("strata-desk: serving on http://{addr} ({engine}); the engine is loading");
    let service = handle.clone();
    let shutdown = async move {
        shutdown_signal().await;
        eprintln!("strata-desk: shutting down");
        service.shutdown().await;
    };
    crate::api::serve(listener, state, shutdown)
        .await
        .map_err(HeadlessError::Serve)?;
    handle.shutdown().await;
    Ok(())
}

async fn shutdown_signal() {
    #[cfg(unix)]
    {
        let mut term =
            match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
                Ok(term) => term,
                Err(_) => {
                    let _ = tokio::signal::ctrl_c().await;
                    return;
                }
            };
        tokio::select! {
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
