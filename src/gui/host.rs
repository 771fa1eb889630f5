//! The app's own server: the service and the HTTP server on the background runtime, which the
//! settings view can stop and start again with settings only a new engine takes (model,
//! parallel, context, chunk size, threads, GPU layers, flash attention, KV type).
//!
//! [`ServerHost`] is a cloneable handle; the state (the config in force and what runs) sits
//! behind one async lock, so an apply and a tray action never interleave.

use crate::config::{self, Config, ConfigError, FlashAttn, KvType, RECENT_MODELS_MAX};
use crate::server::{Running, ServerError, start_on};
use crate::service::{EngineStatus, ServiceHandle};
use serde_json::json;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The settings a new engine takes: what the settings view edits.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartSettings {
    /// `None`: the default model (fetched on first use).
    pub model: Option<PathBuf>,
    pub parallel: u32,
    pub ctx: u32,
    /// `None`: the engine's measured figure (about a quarter second of reading).
    pub chunk_tokens: Option<u32>,
    pub threads: u32,
    pub gpu_layers: crate::config::GpuLayers,
    pub flash_attn: FlashAttn,
    pub kv_type: KvType,
}

impl RestartSettings {
    pub fn of(config: &Config) -> Self {
        let a = &config.app;
        Self {
            model: a.model.clone(),
            parallel: a.parallel,
            ctx: a.ctx,
            chunk_tokens: config.scheduler.chunk_tokens,
            threads: a.threads,
            gpu_layers: a.gpu_layers,
            flash_attn: a.flash_attn,
            kv_type: a.kv_type,
        }
    }

    fn apply_to(&self, config: &mut Config) {
        let a = &mut config.app;
        a.model.clone_from(&self.model);
        a.parallel = self.parallel;
        a.ctx = self.ctx;
        a.threads = self.threads;
        a.gpu_layers = self.gpu_layers;
        a.flash_attn = self.flash_attn;
        a.kv_type = self.kv_type;
        config.scheduler.chunk_tokens = self.chunk_tokens;
    }

    /// The config file's keys for these settings: only those that differ from `before` (so a
    /// one-run command-line flag is not written to the file by an unrelated change).
    fn changed_keys(&self, before: &Self) -> serde_json::Map<String, serde_json::Value> {
        let pairs = [
            ("model", json!(self.model), json!(before.model)),
            ("parallel", json!(self.parallel), json!(before.parallel)),
            ("ctx", json!(self.ctx), json!(before.ctx)),
            (
                "chunk_tokens",
                json!(self.chunk_tokens),
                json!(before.chunk_tokens),
            ),
            ("threads", json!(self.threads), json!(before.threads)),
            (
                "gpu_layers",
                json!(self.gpu_layers),
                json!(before.gpu_layers),
            ),
            (
                "flash_attn",
                json!(self.flash_attn),
                json!(before.flash_attn),
            ),
            ("kv_type", json!(self.kv_type), json!(before.kv_type)),
        ];
        pairs
            .into_iter()
            .filter(|(_, now, was)| now != was)
            .map(|(key, now, _)| (key.to_owned(), now))
            .collect()
    }
}

/// How long a new engine may take to load before an apply counts it as failed.
const ENGINE_READY_SECS: u64 = 600;

#[derive(Debug, thiserror::Error)]
pub enum HostError {
    /// The new settings do not validate; nothing was stopped.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The new settings failed to start; the previous ones run again.
    #[error("{error}; the previous settings run again")]
    RolledBack { error: ServerError },
    /// The new engine failed while loading; the previous settings run again.
    #[error("the new engine failed: {reason}; the previous settings run again")]
    EngineFailed { reason: String },
    /// Neither the new nor the previous settings started.
    #[error("{error}; the previous settings failed too: {previous}")]
    Down {
        error: String,
        previous: ServerError,
    },
}

/// What an apply did.
#[derive(Debug, Clone)]
pub struct Applied {
    pub service: ServiceHandle,
    /// Why the settings were not saved to the config file, if they were not.
    pub not_saved: Option<String>,
}

struct HostState {
    config: Config,
    running: Option<Running>,
}

type OnStart = Arc<dyn Fn(&ServiceHandle) + Send + Sync>;

/// A handle on the app's server; cheap to clone.
#[derive(Clone)]
pub struct ServerHost {
    state: Arc<tokio::sync::Mutex<HostState>>,
    /// The service now serving and the config in force (read by frames without waiting on
    /// the lock above), and how many times the server was started.
    current: Arc<Mutex<(ServiceHandle, Config, u64)>>,
    addr: SocketAddr,
    exe: PathBuf,
    /// Where preferences are written: the config file the app read, or the default one.
    config_path: Option<PathBuf>,
    on_start: Arc<Mutex<Option<OnStart>>>,
    /// One writer of the config file at a time.
    file: Arc<Mutex<()>>,
}

impl std::fmt::Debug for ServerHost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ServerHost")
            .field("addr", &self.addr)
            .field("config_path", &self.config_path)
            .finish_non_exhaustive()
    }
}

impl ServerHost {
    /// Starts serving `config` on `listener` (call within the background runtime).
    pub fn start(
        listener: tokio::net::TcpListener,
        config: Config,
        config_path: Option<PathBuf>,
        exe: PathBuf,
    ) -> Result<Self, ServerError> {
        let addr = listener.local_addr().map_err(|source| ServerError::Bind {
            addr: "the listener".into(),
            source,
        })?;
        let running = start_on(listener, &config, exe.clone())?;
        let current = (running.service.clone(), config.clone(), 1);
        Ok(Self {
            state: Arc::new(tokio::sync::Mutex::new(HostState {
                config,
                running: Some(running),
            })),
            current: Arc::new(Mutex::new(current)),
            addr,
            exe,
            config_path: config_path.or_else(config::default_path),
            on_start: Arc::new(Mutex::new(None)),
            file: Arc::new(Mutex::new(())),
        })
    }

    /// Called with each service this host starts, now and after every apply (the window uses
    /// it to repaint on the new service's changes).
    pub fn on_start(&self, f: impl Fn(&ServiceHandle) + Send + Sync + 'static) {
        let f: OnStart = Arc::new(f);
        f(&self.service());
        *self.on_start.lock().unwrap_or_else(|e| e.into_inner()) = Some(f);
    }

    /// The service serving now.
    pub fn service(&self) -> ServiceHandle {
        self.lock_current().0.clone()
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.lock_current().1.clone()
    }

    /// How many times a server was started (1 until the first apply).
    pub fn generation(&self) -> u64 {
        self.lock_current().2
    }

    fn lock_current(&self) -> std::sync::MutexGuard<'_, (ServiceHandle, Config, u64)> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Where preferences are written.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.config_path.as_deref()
    }

    /// Writes preference keys to the config file (a failure is reported, not fatal: the
    /// setting holds for this run either way).
    pub fn remember(
        &self,
        keys: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), ConfigError> {
        let _one_writer = self.file.lock().unwrap_or_else(|e| e.into_inner());
        match &self.config_path {
            Some(path) => config::persist(path, keys),
            None => Err(ConfigError::Write {
                path: "(none)".into(),
                message: "this platform has no config folder".into(),
            }),
        }
    }

    /// Changes the live switches (R12) of the service serving now, keeps them for the next
    /// apply and saves them. Waits for an apply in progress, so a switch is never lost to it.
    /// Answers what to log: the settings in force, and why they were not saved, if not.
    pub async fn set_live(&self, change: crate::service::SettingsChange) -> Result<String, String> {
        let mut state = self.state.lock().await;
        let settings = self
            .service()
            .change_settings(change)
            .await
            .map_err(|e| e.to_string())?;
        state.config.scheduler.solo_priority = settings.solo_priority;
        state.config.scheduler.give_way = settings.give_way;
        self.lock_current().1 = state.config.clone();
        let mut keys = serde_json::Map::new();
        if change.solo_priority.is_some() {
            keys.insert("solo_priority".into(), json!(settings.solo_priority));
        }
        if change.give_way.is_some() {
            keys.insert("give_way".into(), json!(settings.give_way));
        }
        let saved = match self.remember(keys) {
            Ok(()) => String::new(),
            Err(e) => format!(" (not saved: {e})"),
        };
        Ok(format!(
            "solo_priority {}, give_way {}{saved}",
            if settings.solo_priority { "on" } else { "off" },
            json!(settings.give_way).as_str().unwrap_or("?")
        ))
    }

    /// Restarts the server with `settings`: validates first (an invalid value stops nothing),
    /// ends every request in flight or waiting with a shutdown error, starts the new engine on
    /// the same address and, once it is ready, writes the changed settings to the config file.
    /// If the new settings fail to start or the new engine fails to load, the previous ones
    /// run again and the error says so.
    pub async fn apply(&self, settings: &RestartSettings) -> Result<Applied, HostError> {
        let mut state = self.state.lock().await;
        // The live switches as they are now (the API may have changed them too): a change that
        // changes nothing answers the settings in force, without the snapshot's lag.
        if let Ok(live) = self
            .service()
            .change_settings(crate::service::SettingsChange {
                solo_priority: None,
                give_way: None,
            })
            .await
        {
            state.config.scheduler.solo_priority = live.solo_priority;
            state.config.scheduler.give_way = live.give_way;
        }
        let previous = state.config.clone();
        let mut next = previous.clone();
        settings.apply_to(&mut next);
        if let Some(model) = &settings.model {
            let recent = &mut next.app.recent_models;
            recent.retain(|m| m != model);
            recent.insert(0, model.clone());
            recent.truncate(RECENT_MODELS_MAX);
        }
        next.validate()?;
        if let Some(running) = state.running.take() {
            running.stop().await;
        }
        let failure = match self.start_config(&next).await {
            Ok(started) => match ready(&started.service).await {
                Ok(()) => {
                    let mut keys = settings.changed_keys(&RestartSettings::of(&previous));
                    if next.app.recent_models != previous.app.recent_models {
                        keys.insert("recent_models".into(), json!(next.app.recent_models));
                    }
                    let service = started.service.clone();
                    self.install(&mut state, started, next);
                    let not_saved = self.remember(keys).err().map(|e| e.to_string());
                    return Ok(Applied { service, not_saved });
                }
                Err(reason) => {
                    started.stop().await;
                    HostError::EngineFailed { reason }
                }
            },
            Err(error) => HostError::RolledBack { error },
        };
        match self.start_config(&previous).await {
            Ok(running) => {
                self.install(&mut state, running, previous);
                Err(failure)
            }
            Err(previous) => Err(HostError::Down {
                error: failure.to_string(),
                previous,
            }),
        }
    }

    async fn start_config(&self, config: &Config) -> Result<Running, ServerError> {
        let listener = bind_again(self.addr).await?;
        let exe = self.exe.clone();
        let config = config.clone();
        // Loading the tokenizer reads the model file: off the async threads.
        tokio::task::spawn_blocking(move || start_on_blocking(listener, &config, exe))
            .await
            .unwrap_or_else(|e| Err(ServerError::Serve(std::io::Error::other(e))))
    }

    fn install(&self, state: &mut HostState, running: Running, config: Config) {
        let service = running.service.clone();
        state.running = Some(running);
        state.config = config.clone();
        {
            let mut current = self.lock_current();
            let generation = current.2 + 1;
            *current = (service.clone(), config, generation);
        }
        let on_start = self
            .on_start
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        if let Some(f) = on_start {
            f(&service);
        }
    }

    /// Ends every request, stops the server and the engine.
    pub async fn shutdown(&self) {
        if let Some(running) = self.state.lock().await.running.take() {
            running.stop().await;
        }
    }
}

fn start_on_blocking(
    listener: tokio::net::TcpListener,
    config: &Config,
    exe: PathBuf,
) -> Result<Running, ServerError> {
    let runtime = tokio::runtime::Handle::current();
    let _enter = runtime.enter();
    start_on(listener, config, exe)
}

/// Binds the address the previous server just closed. The port can read as in use for a
/// moment after the close (a process being forked at that instant holds a copy of the socket
/// until it execs), so this tries again for up to two seconds.
async fn bind_again(addr: SocketAddr) -> Result<tokio::net::TcpListener, ServerError> {
    let mut tries = 0;
    loop {
        match tokio::net::TcpListener::bind(addr).await {
            Ok(listener) => return Ok(listener),
            Err(e) if e.kind() == std::io::ErrorKind::AddrInUse && tries < 40 => {
                tries += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(source) => {
                return Err(ServerError::Bind {
                    addr: addr.to_string(),
                    source,
                });
            }
        }
    }
}

/// Waits until a new service's engine is ready; the reason when it fails or never loads.
async fn ready(service: &ServiceHandle) -> Result<(), String> {
    let mut snapshots = service.watch();
    let outcome = tokio::time::timeout(Duration::from_secs(ENGINE_READY_SECS), async {
        loop {
            match &snapshots.borrow_and_update().engine.status {
                EngineStatus::Ready => return Ok(()),
                EngineStatus::Failed(reason) => return Err(reason.clone()),
                EngineStatus::Loading | EngineStatus::Restarting => {}
            }
            if snapshots.changed().await.is_err() {
                return Err("the service stopped".to_owned());
            }
        }
    })
    .await;
    outcome.unwrap_or_else(|_| Err(format!("not ready after {ENGINE_READY_SECS} s")))
}
