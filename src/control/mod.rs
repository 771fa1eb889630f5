//! The control plane: the one owner of the settings in force and of what serves them. The
//! window, the tray, `--headless` and the HTTP routes all change settings through it; none
//! keeps a copy of its own.
//!
//! - **The engine unit** ([`Unit`]): the service (scheduler and engine worker) with the
//!   model's tokenizer, chat template and tool-call format. It is swapped whole when a setting
//!   that needs a new engine is applied; the HTTP server and its listener stay, and so does
//!   every client that is not using the engine (`/health`, `/v1/scheduler/events` follow the
//!   new unit).
//! - **Live switches** ([`Control::change_live`]): `solo_priority` (the rollback switch) and
//!   `give_way`, each change one event in the service's log naming who made it.
//! - **One persistence rule**: every change made while the app runs, from any entry point, is
//!   saved to the config file the app read (or the default one), the changed keys only, the
//!   file's other keys and its permissions kept. A one-run command-line flag is never written.
//! - **Apply with rollback** ([`Control::apply`]): a setting that fails to apply leaves the
//!   previous one running, and the error says why.
//! - **The instance lock** ([`lock_instance`]): one app per config file.

mod lock;
mod making;
mod prompts;

pub use lock::{InstanceLock, LockError, lock_instance};
pub use making::{MakingError, prepare_prompts, worker_launch};
pub use prompts::{GrammarCache, Prompt, PromptError, Prompts};

use crate::config::{self, Config, ConfigError, EngineSettings, RECENT_MODELS_MAX, SettingsPatch};
use crate::service::{
    EngineStatus, GiveWay, Observation, Observed, RestartReport, SchedulerSettings, ServiceHandle,
    ServiceOptions, SettingsChange,
};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;
use tokio::sync::watch;

/// What serves now: one engine with its model's prompts, under one config.
#[derive(Debug)]
pub struct Unit {
    pub service: ServiceHandle,
    pub prompts: Arc<Prompts>,
    pub config: Config,
    /// Units started so far (1 for the first).
    pub generation: u64,
}

/// The settings a new engine takes, as the settings view edits them: the engine's settings and
/// the scheduler's read chunk. An apply takes them as a patch of config keys
/// ([`RestartSettings::patch`]); which changed is a diff of serialized values.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RestartSettings {
    #[serde(flatten)]
    pub engine: EngineSettings,
    /// `None`: the engine's measured figure (about a quarter second of reading).
    pub chunk_tokens: Option<u32>,
}

impl RestartSettings {
    pub fn of(config: &Config) -> Self {
        Self {
            engine: config.app.engine_settings.clone(),
            chunk_tokens: config.scheduler.chunk_tokens,
        }
    }

    /// These settings as config keys.
    pub fn patch(&self) -> SettingsPatch {
        config::flat(self)
    }
}

/// How long a new engine may take to load before an apply counts it as failed.
const ENGINE_READY_SECS: u64 = 600;

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    /// The new settings do not validate; nothing was stopped.
    #[error(transparent)]
    Invalid(#[from] ConfigError),
    /// The new settings could not be prepared (the model file, its tokenizer or template);
    /// nothing was stopped.
    #[error("{0}; nothing was stopped")]
    NotStarted(MakingError),
    /// The new engine failed while loading; the previous settings run again.
    #[error("the new engine failed: {reason}; the previous settings run again")]
    EngineFailed { reason: String },
    /// No engine could be started with these settings (the app has no way to run the engine).
    #[error("this app cannot start engines: {0}")]
    Unavailable(&'static str),
}

/// A live change that was made.
#[derive(Debug, Clone)]
pub struct LiveChanged {
    /// Every scheduler setting now in force.
    pub settings: SchedulerSettings,
    /// Why the change was not saved to the config file, if it was not.
    pub not_saved: Option<String>,
}

/// What an apply did.
#[derive(Debug, Clone)]
pub struct Applied {
    pub service: ServiceHandle,
    /// Why the settings were not saved to the config file, if they were not.
    pub not_saved: Option<String>,
}

struct Inner {
    /// One change at a time (an apply, a switch, a save), in order.
    changes: tokio::sync::Mutex<()>,
    /// What serves now, read by every request and frame without waiting on a change.
    current: RwLock<Arc<Unit>>,
    /// The same, for those that follow it across swaps.
    units: watch::Sender<Arc<Unit>>,
    /// This app's binary (the engine worker); `None` where no new engine can be started.
    exe: Option<PathBuf>,
    /// Where changes are saved: the config file the app read, or the default one.
    config_path: Option<PathBuf>,
    /// One writer of the config file at a time.
    file: Mutex<()>,
    /// The `give_way` that turning giving way back on restores: the last one in force that
    /// was not `off` (one memory for the window, the tray and every other entry point).
    give_way_back: Mutex<GiveWay>,
}

/// A handle on the control plane; cheap to clone.
#[derive(Clone)]
pub struct Control(Arc<Inner>);

impl std::fmt::Debug for Control {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Control")
            .field("config_path", &self.0.config_path)
            .field("generation", &self.unit().generation)
            .finish_non_exhaustive()
    }
}

impl Control {
    /// Starts the first engine unit for `config` (call within a tokio runtime). Changes are
    /// saved to `config_path`, else to the default config file.
    pub fn start(
        config: Config,
        config_path: Option<PathBuf>,
        exe: PathBuf,
    ) -> Result<Self, MakingError> {
        let prompts = Arc::new(prepare_prompts(&config)?);
        // made once for the app's run: every unit after this one continues it
        let service = spawn_service(&config, exe.clone(), Observation::default())?;
        Ok(Self::over(
            Unit {
                service,
                prompts,
                config,
                generation: 1,
            },
            Some(exe),
            config_path.or_else(config::default_path),
        ))
    }

    /// A control plane over a unit started elsewhere (tests); without `exe` it cannot apply
    /// new engine settings, and without `config_path` it saves nothing.
    pub fn over(unit: Unit, exe: Option<PathBuf>, config_path: Option<PathBuf>) -> Self {
        let give_way_back = match unit.config.scheduler.give_way {
            GiveWay::Off => GiveWay::Left,
            on => on,
        };
        let unit = Arc::new(unit);
        let (units, _) = watch::channel(unit.clone());
        Self(Arc::new(Inner {
            changes: tokio::sync::Mutex::new(()),
            current: RwLock::new(unit),
            units,
            exe,
            config_path,
            file: Mutex::new(()),
            give_way_back: Mutex::new(give_way_back),
        }))
    }

    /// What serves now.
    pub fn unit(&self) -> Arc<Unit> {
        self.0
            .current
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// The service serving now.
    pub fn service(&self) -> ServiceHandle {
        self.unit().service.clone()
    }

    /// The config in force.
    pub fn config(&self) -> Config {
        self.unit().config.clone()
    }

    /// Follows the unit across swaps (the event stream, the window's repaints).
    pub fn watch_units(&self) -> watch::Receiver<Arc<Unit>> {
        self.0.units.subscribe()
    }

    /// Where changes are saved.
    pub fn config_path(&self) -> Option<&std::path::Path> {
        self.0.config_path.as_deref()
    }

    /// Writes preference keys to the config file (a failure is reported, not fatal: the
    /// setting holds for this run either way).
    pub fn remember(
        &self,
        keys: serde_json::Map<String, serde_json::Value>,
    ) -> Result<(), ConfigError> {
        if keys.is_empty() {
            return Ok(());
        }
        let _one_writer = self.0.file.lock().unwrap_or_else(|e| e.into_inner());
        match &self.0.config_path {
            Some(path) => config::persist(path, keys),
            None => Err(ConfigError::Write {
                path: "(none)".into(),
                message: "there is no config file to save to".into(),
            }),
        }
    }

    /// Changes the live switches (R12) of the service serving now, keeps them for the next
    /// engine, and saves them (the one rule for every entry point). `by` names who made the
    /// change (the window, the tray, an HTTP client's key) in the service's log. Waits for an
    /// apply in progress, so a switch is never lost to it.
    pub async fn change_live(
        &self,
        change: SettingsChange,
        by: &str,
    ) -> Result<LiveChanged, crate::service::ControlError> {
        let _one_change = self.0.changes.lock().await;
        let settings = self.service().change_settings_by(change, by).await?;
        if settings.give_way != GiveWay::Off {
            *self
                .0
                .give_way_back
                .lock()
                .unwrap_or_else(|e| e.into_inner()) = settings.give_way;
        }
        // the keys the change named, with the values now in force
        let in_force = config::flat(&settings);
        let keys: SettingsPatch = config::flat(&change)
            .into_iter()
            .filter(|(_, asked)| !asked.is_null())
            .filter_map(|(key, _)| Some((key.clone(), in_force.get(&key)?.clone())))
            .collect();
        self.update_config(|config| {
            if let Ok(patched) = config.patched(&keys) {
                *config = patched;
            }
        });
        let not_saved = self.remember(keys).err().map(|e| e.to_string());
        Ok(LiveChanged {
            settings,
            not_saved,
        })
    }

    /// Saves keys that take effect only when the app starts again (`host`, `port`, `engine`,
    /// `api_keys`, ...) or that the service does not hold (`recent_models`): validated over
    /// the config in force, written to the config file as the file writes them. The config in
    /// force takes the preferences (the window reads them), not the restart keys (they are
    /// not in force). Returns why they were not saved, if they were not.
    pub fn save_for_restart(&self, patch: &SettingsPatch) -> Result<Option<String>, ConfigError> {
        let now = self.config();
        let next = now.patched(patch)?;
        next.validate()?;
        let written = next.flat();
        let keys: SettingsPatch = patch
            .keys()
            .filter_map(|key| Some((key.clone(), written.get(key)?.clone())))
            .collect();
        let preferences: SettingsPatch = keys
            .iter()
            .filter(|(key, _)| {
                config::schema::find(key)
                    .is_some_and(|k| k.applies == config::schema::Applies::Live)
            })
            .map(|(key, value)| (key.clone(), value.clone()))
            .collect();
        self.update_config(|config| {
            if let Ok(patched) = config.patched(&preferences) {
                *config = patched;
            }
        });
        Ok(self.remember(keys).err().map(|e| e.to_string()))
    }

    /// Turns long reads giving way on (the `give_way` last in force that was on; `left` at
    /// first) or off, as the window's and the tray's switch do.
    pub async fn set_giving_way(
        &self,
        on: bool,
        by: &str,
    ) -> Result<LiveChanged, crate::service::ControlError> {
        let give_way = if on {
            *self
                .0
                .give_way_back
                .lock()
                .unwrap_or_else(|e| e.into_inner())
        } else {
            GiveWay::Off
        };
        let change = SettingsChange {
            solo_priority: None,
            give_way: Some(give_way),
        };
        self.change_live(change, by).await
    }

    /// Restarts the engine serving now (R10: running requests fail with "engine restarted",
    /// waiting ones stay queued for it). Waits for an apply in progress, so a restart never
    /// races a swap.
    pub async fn restart_engine(&self) -> Result<RestartReport, crate::service::ControlError> {
        let _one_change = self.0.changes.lock().await;
        self.service().restart_engine().await
    }

    /// Replaces the config in force of the unit serving now (its service is unchanged).
    fn update_config(&self, change: impl FnOnce(&mut Config)) {
        let now = self.unit();
        let mut config = now.config.clone();
        change(&mut config);
        self.install(Arc::new(Unit {
            service: now.service.clone(),
            prompts: now.prompts.clone(),
            config,
            generation: now.generation,
        }));
    }

    fn install(&self, unit: Arc<Unit>) {
        *self.0.current.write().unwrap_or_else(|e| e.into_inner()) = unit.clone();
        self.0.units.send_replace(unit);
    }

    /// Applies settings that need a new engine: validates and prepares them first (an invalid
    /// value or a model that cannot be read stops nothing), ends every request of the old
    /// engine with a shutdown error, starts the new one in its place (the HTTP server and its
    /// listener stay; requests meanwhile get 503 `engine_starting`), and once it is ready
    /// saves the changed settings. If the new engine fails while loading, the previous
    /// settings run again and the error says so.
    pub async fn apply(&self, patch: &SettingsPatch) -> Result<Applied, ApplyError> {
        let _one_change = self.0.changes.lock().await;
        let exe = self
            .0
            .exe
            .clone()
            .ok_or(ApplyError::Unavailable("it was given no engine binary"))?;
        let before = self.unit();
        // the live switches as the service holds them now (the snapshot may lag)
        let mut previous = before.config.clone();
        if let Ok(live) = before
            .service
            .change_settings(SettingsChange::default())
            .await
        {
            previous.scheduler.solo_priority = live.solo_priority;
            previous.scheduler.give_way = live.give_way;
        }
        let mut next = previous.patched(patch)?;
        if let Some(model) = &next.app.engine_settings.model
            && previous.app.engine_settings.model.as_ref() != Some(model)
        {
            let recent = &mut next.app.recent_models;
            recent.retain(|m| m != model);
            recent.insert(0, model.clone());
            recent.truncate(RECENT_MODELS_MAX);
        }
        // what the log names: the settings changed (the recent models follow the model)
        let mut changed = config::changed_keys(&previous, &next);
        changed.remove("recent_models");
        next.validate()?;
        let prepared = {
            let next = next.clone();
            tokio::task::spawn_blocking(move || prepare_prompts(&next))
                .await
                .unwrap_or_else(|e| Err(MakingError::Stopped(std::io::Error::other(e))))
        };
        let prompts = Arc::new(prepared.map_err(ApplyError::NotStarted)?);
        before.service.shutdown().await;
        let generation = before.generation + 1;
        // the clock, ids, events, ended requests and metrics go on from the service before
        let observation = before.service.observation();
        let started =
            spawn_service(&next, exe.clone(), observation.clone()).map_err(ApplyError::NotStarted);
        let failure = match started {
            Ok(service) => {
                self.install(Arc::new(Unit {
                    service: service.clone(),
                    prompts,
                    config: next.clone(),
                    generation,
                }));
                match ready(&service).await {
                    Ok(()) => {
                        service.note_control(Observed::Applied {
                            changed: changed.clone(),
                        });
                        let keys = config::changed_keys(&previous, &next);
                        let not_saved = self.remember(keys).err().map(|e| e.to_string());
                        return Ok(Applied { service, not_saved });
                    }
                    Err(reason) => {
                        service.shutdown().await;
                        ApplyError::EngineFailed { reason }
                    }
                }
            }
            Err(error) => error,
        };
        // the previous settings again, with their prompts
        if let Ok(service) = spawn_service(&previous, exe, observation) {
            service.note_control(Observed::ApplyFailed {
                changed,
                reason: match &failure {
                    ApplyError::EngineFailed { reason } => reason.clone(),
                    other => other.to_string(),
                },
            });
            self.install(Arc::new(Unit {
                service,
                prompts: before.prompts.clone(),
                config: previous,
                generation: generation + 1,
            }));
        }
        Err(failure)
    }

    /// Ends every request, stops the engine.
    pub async fn shutdown(&self) {
        let _one_change = self.0.changes.lock().await;
        self.service().shutdown().await;
    }
}

/// A new service (scheduler and engine worker) for `config`; its engine starts loading.
fn spawn_service(
    config: &Config,
    exe: PathBuf,
    observation: Observation,
) -> Result<ServiceHandle, MakingError> {
    let launch = worker_launch(config, exe)?;
    Ok(crate::service::spawn(ServiceOptions {
        launch,
        settings: config.scheduler.clone(),
        observation,
    })?)
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

#[cfg(test)]
mod tests {
    use super::*;

    fn defaults() -> Config {
        Config::load(None, &crate::config::Overrides::default()).unwrap()
    }

    #[test]
    fn changed_keys_name_each_engine_setting_changed_and_only_those() {
        let before = defaults();
        let mut settings = RestartSettings::of(&before);
        settings.engine.ctx_min_tokens = 98_304;
        settings.engine.gpu_memory_limit = crate::config::GpuMemoryLimit { mib: 6144 };
        settings.engine.device = "Vulkan0".to_owned();
        settings.engine.swa_full = true;
        let after = before.patched(&settings.patch()).unwrap();
        let changed = config::changed_keys(&before, &after);
        let mut keys: Vec<&str> = changed.keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(keys, ["ctx_min", "device", "gpu_memory_limit", "swa_full"]);
        assert_eq!(changed["ctx_min"], 98_304);
        assert_eq!(changed["device"], "Vulkan0");
        assert_eq!(RestartSettings::of(&after), settings);
    }
}
