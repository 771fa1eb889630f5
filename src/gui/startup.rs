//! The window from the first frame: it opens before the server is up, shows the default
//! model's fetch as it goes, shows a start that fails (a bad config, a port in use, a model
//! file missing or not a GGUF) in words with what to do, and becomes the dashboard once the
//! server serves. A Start-menu program has no terminal: the window is where the user reads.

use super::app::Dashboard;
use crate::config::{Config, ConfigError, EngineKind};
use crate::models::FetchStage;
use crate::server::{Running, ServerError, start_on};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, mpsc};
use std::time::Instant;

/// What the start is doing, as the window shows it.
#[derive(Debug)]
pub enum Startup {
    /// Fetching the default model (this stage, since then).
    Fetching { stage: FetchStage, since: Instant },
    /// Starting the server and the engine.
    Starting,
    /// The start failed: what happened, in words.
    Failed(String),
}

/// A step of the start, sent from its thread.
#[derive(Debug)]
pub enum StartEvent {
    Fetching(FetchStage),
    Starting,
    Failed(String),
    Started(Box<Running>, SocketAddr),
}

/// Why the app could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error(transparent)]
    Model(#[from] crate::models::ModelFetchError),
}

/// Starts the server for `config` on the background runtime, saying each step on `events`:
/// the default model's fetch if it is missing, the bind, the control plane.
pub fn start_in_background(
    config: Result<Config, ConfigError>,
    config_path: Option<PathBuf>,
    exe: PathBuf,
    runtime: tokio::runtime::Handle,
    events: mpsc::Sender<StartEvent>,
    repaint: impl Fn() + Send + 'static,
) {
    std::thread::spawn(move || {
        let send = |event: StartEvent| {
            let _ = events.send(event);
            repaint();
        };
        let started = (|| -> Result<(Running, SocketAddr), StartError> {
            let config = config?;
            let needs_default = config.app.engine == EngineKind::Llama
                && config.app.engine_settings.model.is_none()
                && !crate::models::default_model_present();
            if needs_default {
                crate::models::ensure_default_model_reporting(&|stage| {
                    send(StartEvent::Fetching(stage));
                })?;
            }
            send(StartEvent::Starting);
            let addr = SocketAddr::new(config.app.host, config.app.port);
            let listener = runtime
                .block_on(tokio::net::TcpListener::bind(addr))
                .map_err(|source| ServerError::Bind {
                    addr: addr.to_string(),
                    source,
                })?;
            let _enter = runtime.enter();
            let running = start_on(listener, &config, config_path, exe)?;
            Ok((running, addr))
        })();
        match started {
            Ok((running, addr)) => send(StartEvent::Started(Box::new(running), addr)),
            Err(e) => send(StartEvent::Failed(e.to_string())),
        }
    });
}

impl Startup {
    /// Takes a step of the start.
    pub fn step(&mut self, event: &StartEvent) {
        *self = match event {
            StartEvent::Fetching(stage) => Startup::Fetching {
                stage: *stage,
                since: match self {
                    Startup::Fetching { since, .. } => *since,
                    _ => Instant::now(),
                },
            },
            StartEvent::Starting | StartEvent::Started(..) => Startup::Starting,
            StartEvent::Failed(message) => Startup::Failed(message.clone()),
        };
    }
}

/// The window while the server is not up: the fetch's progress, or why the start failed and
/// what to do.
pub fn startup_ui(ui: &mut egui::Ui, startup: &Startup, quit: &mut bool) {
    ui.heading("Strata Desk");
    match startup {
        Startup::Fetching { stage, since } => {
            ui.label(format!(
                "Fetching the default model (SmolLM2-135M-Instruct, {}), once: {} ({:.0} s)",
                super::units::bytes_words(crate::models::DEFAULT_MODEL_BYTES),
                stage.words(),
                since.elapsed().as_secs_f64()
            ));
            ui.add(egui::Spinner::new());
            ui.weak("the window shows the scheduler as soon as the model is ready");
        }
        Startup::Starting => {
            ui.label("Starting the server and the engine...");
            ui.add(egui::Spinner::new());
        }
        Startup::Failed(message) => {
            ui.colored_label(
                egui::Color32::from_rgb(220, 60, 40),
                "Strata Desk could not start",
            );
            ui.label(message);
            ui.label(what_to_do(message));
            if ui.button("Quit").clicked() {
                *quit = true;
            }
        }
    }
}

/// The advice for a failed start.
fn what_to_do(message: &str) -> &'static str {
    if message.contains("cannot listen on") {
        "Another program uses this port (perhaps Strata Desk itself): close it, or set another \
         `port` in the config file."
    } else if message.contains("config file") {
        "Fix the config file as the message says (or move it away to start with the defaults)."
    } else if message.contains("model") {
        "Set `model` in the config file to a .gguf file, or remove it to use the default model."
    } else {
        "The message says what failed; the log (STRATA_LOG=info) says more."
    }
}

/// What the caller does with the dashboard once the server is up.
type OnStarted = Box<dyn FnMut(&mut Dashboard, &Running)>;

/// The app's window: the start, then the dashboard.
pub struct App {
    startup: Startup,
    events: mpsc::Receiver<StartEvent>,
    /// Once started: the dashboard, and the server it runs (in the slot the caller stops at
    /// the end).
    pub dashboard: Option<Dashboard>,
    running: Arc<Mutex<Option<Running>>>,
    runtime: tokio::runtime::Handle,
    /// Called with the dashboard when the server is up (the tray, the repaint watcher).
    on_started: OnStarted,
    quit: bool,
}

impl std::fmt::Debug for App {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("App")
            .field("startup", &self.startup)
            .finish_non_exhaustive()
    }
}

impl App {
    pub fn new(
        events: mpsc::Receiver<StartEvent>,
        runtime: tokio::runtime::Handle,
        running: Arc<Mutex<Option<Running>>>,
        on_started: impl FnMut(&mut Dashboard, &Running) + 'static,
    ) -> Self {
        Self {
            startup: Startup::Starting,
            events,
            dashboard: None,
            running,
            runtime,
            on_started: Box::new(on_started),
            quit: false,
        }
    }

    /// What the start is doing (before the dashboard).
    pub fn startup(&self) -> &Startup {
        &self.startup
    }

    /// Takes the start's steps that arrived.
    fn take_events(&mut self) {
        while let Ok(event) = self.events.try_recv() {
            self.startup.step(&event);
            if let StartEvent::Started(running, addr) = event {
                let mut dashboard =
                    Dashboard::with_control(running.control.clone(), addr, self.runtime.clone());
                (self.on_started)(&mut dashboard, &running);
                self.dashboard = Some(dashboard);
                if let Ok(mut slot) = self.running.lock() {
                    *slot = Some(*running);
                }
            }
        }
    }

    /// The whole window.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        self.take_events();
        match &mut self.dashboard {
            Some(dashboard) => dashboard.ui(ui),
            None => {
                if matches!(self.startup, Startup::Fetching { .. } | Startup::Starting) {
                    ui.ctx()
                        .request_repaint_after(std::time::Duration::from_millis(500));
                }
                egui::CentralPanel::default().show(ui, |ui| {
                    startup_ui(ui, &self.startup, &mut self.quit);
                });
                if self.quit {
                    ui.ctx().send_viewport_cmd(egui::ViewportCommand::Close);
                }
            }
        }
    }
}

impl eframe::App for App {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.take_events();
        if let Some(dashboard) = &mut self.dashboard {
            dashboard.tick(ctx);
        }
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        App::ui(self, ui);
    }
}
