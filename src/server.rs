//! The server: the control plane (which makes the engine unit: `control::making`) and the
//! HTTP server over it, and how it stops. Both the window and `--headless` ([`run_headless`],
//! until a signal) run it through [`start_on`].

use crate::api::ApiState;
use crate::config::{Config, EngineKind};
use crate::control::{Control, MakingError};
use std::path::PathBuf;

// The making's old home: kept so that callers of `server::prepare_prompts` still find it.
pub use crate::control::{prepare_prompts, worker_launch};

#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The engine unit could not be made (the control plane's making).
    #[error(transparent)]
    Making(#[from] MakingError),
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

/// A server that runs: the control plane (and the engine it serves) and the HTTP server's
/// task.
#[derive(Debug)]
pub struct Running {
    pub control: Control,
    server: tokio::task::JoinHandle<std::io::Result<()>>,
    stop: tokio::sync::oneshot::Sender<()>,
}

/// Starts the control plane for `config` and serves the HTTP API on `listener` (call within a
/// tokio runtime). Changes are saved to `config_path` (else the default config file).
pub fn start_on(
    listener: tokio::net::TcpListener,
    config: &Config,
    config_path: Option<PathBuf>,
    exe: PathBuf,
) -> Result<Running, ServerError> {
    let control = Control::start(config.clone(), config_path, exe)?;
    Ok(serve_control(listener, control))
}

/// Serves the HTTP API for a control plane on `listener`.
pub fn serve_control(listener: tokio::net::TcpListener, control: Control) -> Running {
    let state = ApiState::new(control.clone());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(crate::api::serve(listener, state, async move {
        let _ = stopped.await;
    }));
    Running {
        control,
        server,
        stop,
    }
}

impl Running {
    /// The service first (it ends the open streams with an error), then the HTTP server (cut
    /// off if it has not closed within five seconds).
    pub async fn stop(self) {
        self.control.shutdown().await;
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
                self.control.shutdown().await;
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
    let running = start_on(listener, &config, config.source.clone(), exe)?;
    let engine = match config.app.engine {
        EngineKind::Llama => "llama.cpp".to_owned(),
        EngineKind::Sim => "SIMULATED engine (no model)".to_owned(),
        EngineKind::Upstream => format!(
            "over the upstream engine at {}",
            config.app.upstream_url.as_deref().unwrap_or_default()
        ),
    };
    eprintln!("strata-desk: serving on http://{addr} ({engine}); the engine is loading");
    announce(running.control.clone(), format!("http://{addr}"));
    running.until(shutdown_signal()).await
}

/// `--headless`'s own lines at the default log level: one each time an engine is ready
/// (model, context, device and layers, URL), one for each prompt refused as longer than the
/// context (what was refused and what to do).
fn announce(control: Control, url: String) {
    tokio::spawn(async move {
        let mut units = control.watch_units();
        let mut snapshots = control.service().watch();
        let mut announced = (0, 0);
        let mut announced_refusal = None;
        let mut announced_failure = None;
        loop {
            {
                let unit = units.borrow().generation;
                let s = snapshots.borrow_and_update();
                let ready = s.engine.status == crate::service::EngineStatus::Ready;
                if ready && announced != (unit, s.engine.generation) {
                    announced = (unit, s.engine.generation);
                    eprintln!("{}", ready_line(&s, &url));
                }
                // a start that failed for good, once: it stays failed until a retry
                if let crate::service::EngineStatus::Failed(reason) = &s.engine.status
                    && s.engine.needs_retry
                    && announced_failure != Some((unit, s.engine.generation))
                {
                    announced_failure = Some((unit, s.engine.generation));
                    eprintln!("{}", failure_line(reason));
                }
                if let Some(refusal) = &s.last_length_refusal
                    && announced_refusal != Some(refusal.at_secs)
                {
                    announced_refusal = Some(refusal.at_secs);
                    eprintln!("{}", refusal_line(refusal));
                }
            }
            // the service's changes, or a new unit (an apply) to follow
            let follow = tokio::select! {
                changed = snapshots.changed() => match changed {
                    Ok(()) => false,
                    // the service stopped: the next unit, if one comes
                    Err(_) => units.changed().await.is_ok() || return,
                },
                unit = units.changed() => unit.is_ok() || return,
            };
            if follow {
                snapshots = units.borrow_and_update().service.watch();
            }
        }
    });
}

/// The engine could not start, in words, and what to do: `--headless`'s line (the window shows
/// the same as a banner with a Retry button).
pub fn failure_line(reason: &str) -> String {
    format!(
        "strata-desk: the engine could not start ({}): {reason}; it stays down until a retry \
         (POST /v1/engine/restart, or restart the app); requests get 503 meanwhile",
        crate::service::failure_headline(reason)
    )
}

/// "the engine is ready": what a user checks first.
pub fn ready_line(s: &crate::service::ServiceSnapshot, url: &str) -> String {
    let e = &s.engine;
    let device = match &e.device {
        Some(d) if d.gpu_layers > 0 => format!(
            "{} ({}), {} of {} layers on the GPU ({}{}{})",
            d.name,
            d.backend,
            d.gpu_layers,
            d.model_layers,
            crate::service::chosen_by_words(&d.chosen_by),
            if d.picked_by.is_empty() { "" } else { "; " },
            d.picked_by
        ),
        // on the CPU the reason is shown only when a GPU backend failed to load
        Some(d) if !d.backends_not_loaded.is_empty() => {
            format!("{} ({}; {})", d.name, d.backend, d.picked_by)
        }
        Some(d) => format!("{} ({})", d.name, d.backend),
        None => "the CPU".to_owned(),
    };
    let device = match e.device.as_ref().map(crate::service::cpu_code_words) {
        Some(words) if !words.is_empty() => format!("{device}, {words}"),
        _ => device,
    };
    // an upstream engine's threads are its own (0 in the handshake): not said
    let threads = match e.threads {
        0 => String::new(),
        n => format!(", {n} thread(s)"),
    };
    format!(
        "strata-desk: ready on {url}: {}, context {} tokens{}, {device}{threads}",
        e.model,
        e.context_tokens,
        crate::service::context_words(&e.context_chosen_by),
    )
}

/// A prompt refused as longer than the context, and what to do.
pub fn refusal_line(r: &crate::service::LengthRefusal) -> String {
    let from = if r.client.is_empty() {
        String::new()
    } else {
        format!(" from {}", r.client)
    };
    format!(
        "strata-desk: refused a {}-token prompt{from}: the context holds {} tokens; give the \
         engine more (--ctx, or `ctx` in the config) or a model with a longer context",
        r.prompt_tokens, r.max_context_tokens
    )
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
