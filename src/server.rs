//! The server: config → engine launch, service and HTTP server, and how it stops. Both the
//! window (`gui::host`, which can stop it and start it again with new settings) and
//! `--headless` ([`run_headless`], until a signal) run it through [`start_on`].

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
pub enum ServerError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Model(#[from] ModelFetchError),
    #[error(transparent)]
    Settings(#[from] crate::service::SettingsError),
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
pub fn prepare(config: &Config, exe: PathBuf) -> Result<(WorkerLaunch, Prompts), ServerError> {
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
                faults: config.sim_faults.clone(),
                load_secs: 0.0,
                non_trimmable: false,
                generation: 1,
            };
            (WorkerOptions::simulated(fake), Tokenizer::simulated())
        }
    };
    let options = WorkerOptions {
        ctx_tokens: a.ctx,
        slots: a.parallel,
        kv_sequences: a.kv_sequences,
        threads: a.threads,
        gpu_layers: a.gpu_layers,
        flash_attn: a.flash_attn,
        kv_type: a.kv_type,
        conversation_cache_mib: a.conversation_cache_mib,
        ..options
    };
    let prompts = Prompts::new(tokenizer)?.with_tool_call_format(a.tool_call_format);
    Ok((WorkerLaunch::new(exe, options), prompts))
}

/// Starts the service for a config; returns its handle and the API state.
pub fn start(config: &Config, exe: PathBuf) -> Result<(ServiceHandle, ApiState), ServerError> {
    let (launch, prompts) = prepare(config, exe)?;
    let handle = service::spawn(ServiceOptions {
        launch,
        settings: config.scheduler.clone(),
    })?;
    let state = ApiState::new(
        handle.clone(),
        Arc::new(prompts),
        Arc::new(config.app.clone()),
        Arc::new(config.scheduler.clone()),
    );
    Ok((handle, state))
}

/// A server that runs: the service and the HTTP server's task.
#[derive(Debug)]
pub struct Running {
    pub service: ServiceHandle,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// Starts the service and serves the HTTP API on `listener` (call within a tokio runtime).
pub fn start_on(
    listener: tokio::net::TcpListener,
    config: &Config,
    exe: PathBuf,
) -> Result<Running, ServerError> {
    let (service, state) = start(config, exe)?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::api::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    Ok(Running {
        service,
        server,
        stop,
    })
}

impl Running {
    /// The service first (it ends the open streams with an error), then the HTTP server (cut
    /// off if it has not closed within five seconds).
    pub async fn stop(self) {
        self.service.shutdown().await;
        let _ = self.stop.send(());
        let mut server = self.server;
        if tokio::time::timeout(std::time::Duration::from_secs(5), &mut server)
            .await
            .is_err()
        {
            server.abort();
        }
    }

    /// Waits until the HTTP server ends by itself (it fails), or `signal` fires; then stops.
    async fn until(
        mut self,
        signal: impl std::future::Future<Output = ()>,
    ) -> Result<(), ServerError> {
        tokio::select! {
            ended = &mut self.server => {
                self.service.shutdown().await;
                match ended {
                    Ok(Ok(())) => Ok(()),
                    Ok(Err(e)) => Err(ServerError::Serve(e)),
                    Err(e) => Err(ServerError::Serve(std::io::Error::other(e.to_string()))),
                }
            }
            () = signal => {
                eprintln!("strata-desk: shutting down");
                self.stop().await;
                Ok(())
            }
        }
    }
}

/// `--headless`: runs until SIGTERM or Ctrl-C, then stops accepting, ends in-flight work with
/// a clear error and stops the worker.
pub async fn run_headless(config: Config, exe: PathBuf) -> Result<(), ServerError> {
    let addr = std::net::SocketAddr::new(config.app.host, config.app.port);
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let running = start_on(listener, &config, exe)?;
    let engine = match config.app.engine {
        EngineKind::Llama => "llama.cpp",
        EngineKind::Sim => "SIMULATED engine (no model)",
    };
    eprintln!("strata-desk: serving on http://{addr} ({engine}); the engine is loading");
    running.until(shutdown_signal()).await
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
