//! The desktop app: the service and the HTTP server on a background tokio runtime, and an
//! egui window that shows the scheduler live and steers it.
//!
//! - `app`: [`Dashboard`], the window's state and frame;
//! - `panels`: one `*_ui` function per panel, reading the snapshot;
//! - `failure`: the banner of an engine that could not start, with Retry;
//! - `history`: the scheduler's log with request ids, and the too-long-prompt banner;
//! - `cost`: what preemption cost and saved, by priority, and a line per ended request;
//! - `controls`: the Preemption and give-way switches and the expert `give_way` values;
//! - `preemption`: those switches' labels and what a click on them sends;
//! - `live`: the middle of the window: the live view first, the requests, the history;
//! - `queue`: the slots, parked and waiting columns;
//! - `units`: one way to write sizes, rates and seconds;
//! - `requests`: the requests table (one row per live request, with its "why");
//! - `settings`: the settings view (restart-only settings, the model picker);
//! - `timeline`: who held the read lane and each slot, the last minutes;
//! - `commands`: user actions, queued in a frame and drained once at its end;
//! - `startup`: the window before the server is up: the model's fetch, a failed start;
//! - `tray`: the tray icon and its menu;
//! - `window`: the window's visibility, one for the close, the tray, a second start, SIGTERM;
//! - `session_bus`: whether a tray host shows the icon, whether a file dialog can open;
//! - `pick`: the path field where no file dialog opens;
//! - `ttft`: time to first token per client, with each dot's request on hover.
//!
//! The settings, their changes and their saving belong to the control plane
//! (`crate::control`); the window and the tray only send it commands. Closing the window keeps
//! the app serving in the tray (`close_to_tray`, with a notice the first time); Quit in the
//! tray or the notice, or SIGTERM shuts the server and the engine down cleanly; where no tray
//! host shows the icon, closing minimises instead (and says why). One instance per config
//! file: a second start brings the running app's window to the front.

mod app;
mod commands;
mod controls;
mod cost;
mod failure;
mod history;
mod hub;
mod hub_commands;
mod live;
#[cfg(test)]
mod live_tests;
mod panels;
mod pick;
mod preemption;
mod queue;
mod requests;
mod session_bus;
mod settings;
mod settings_cache;
mod settings_in_force;
mod startup;
mod timeline;
mod tray;
mod ttft;
mod units;
mod window;

pub use app::{CloseAction, Dashboard, close_action};
pub use commands::{Command, CommandQueue, Outcome, TRAY, WINDOW};
pub use live::{LiveView, live_view_ui};
pub use panels::percentiles;
pub use preemption::{
    GIVE_WAY_LABEL, PREEMPTION_BATCH, PREEMPTION_OFF, PREEMPTION_ON, Preemption, give_way_click,
    preemption_click, preemption_of,
};
pub use requests::{RequestOrder, sorted_rows};
pub use startup::{App, StartEvent, Startup, start_in_background, startup_ui};
pub use timeline::{Activity, Segment, TIMELINE_SECS, Timeline};
pub use tray::{PreemptionItem, TrayState, tray_command};
pub use window::Window;

use crate::config::{Config, Renderer};
use crate::server::{Running, ServerError};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum GuiError {
    #[error(
        "no display: neither DISPLAY nor WAYLAND_DISPLAY is set; run `strata-desk --headless` to serve without a window"
    )]
    NoDisplay,
    #[error(transparent)]
    Server(#[from] ServerError),
    #[error("the window failed: {0}")]
    Window(String),
    #[error("cannot start the background runtime: {0}")]
    Runtime(std::io::Error),
    #[error(
        "this build has no wgpu renderer: use `--renderer glow`, or build with `--features wgpu`"
    )]
    NoWgpu,
}

fn renderer(chosen: Renderer) -> Result<eframe::Renderer, GuiError> {
    match chosen {
        Renderer::Glow => Ok(eframe::Renderer::Glow),
        #[cfg(feature = "wgpu")]
        Renderer::Wgpu => Ok(eframe::Renderer::Wgpu),
        #[cfg(not(feature = "wgpu"))]
        Renderer::Wgpu => Err(GuiError::NoWgpu),
    }
}

fn has_display() -> bool {
    if cfg!(target_os = "linux") {
        std::env::var_os("DISPLAY").is_some() || std::env::var_os("WAYLAND_DISPLAY").is_some()
    } else {
        true
    }
}

/// Runs the window until the app ends; the server runs meanwhile on `config`'s address. The
/// window opens at once: it shows the default model's fetch, or why the start failed (a bad
/// config, a port in use, a bad model file), then the dashboard. Closing it keeps serving in
/// the tray (`close_to_tray`); Quit in the tray ends the app.
pub fn run(
    config: Result<Config, crate::config::ConfigError>,
    config_path: Option<PathBuf>,
    exe: PathBuf,
) -> Result<(), GuiError> {
    let Some(lock) = claim_instance(config_path.as_deref()) else {
        return Ok(());
    };
    let lock_error = lock.as_ref().err().map(ToString::to_string);
    if let Some(e) = &lock_error {
        eprintln!("strata-desk: {e}");
    }
    if !has_display() {
        return Err(GuiError::NoDisplay);
    }
    let chosen = config.as_ref().map_or(Renderer::Glow, |c| c.app.renderer);
    let renderer = renderer(chosen)?;
    let runtime = tokio::runtime::Runtime::new().map_err(GuiError::Runtime)?;
    let options = eframe::NativeOptions {
        renderer,
        viewport: egui::ViewportBuilder::default()
            .with_title("Strata Desk")
            .with_inner_size([1100.0, 720.0]),
        ..Default::default()
    };
    let (events_tx, events) = std::sync::mpsc::channel();
    // the server once it runs, stopped when the window ends
    let running_slot: Arc<Mutex<Option<Running>>> = Arc::default();
    let launch = Launch {
        config,
        config_path,
        exe,
        lock_error,
        handle: runtime.handle().clone(),
        events_tx,
        events,
        slot: running_slot.clone(),
        // the window's one visibility: the close, the tray, a second start and SIGTERM use it
        window: Window::default(),
        shown_ctx: Arc::default(),
    };
    if let Ok(lock) = &lock {
        show_on_request(lock, launch.window.clone(), launch.shown_ctx.clone());
    }
    let result = eframe::run_native(
        "Strata Desk",
        options,
        Box::new(move |cc| Ok(Box::new(launch.app(cc)) as Box<dyn eframe::App>)),
    );
    if let Err(e) = &result {
        // no window at all: on Windows a program started from the Start menu has no terminal
        // either, so the user sees a message box
        native_message_box(&format!("Strata Desk could not open its window: {e}"));
    }
    stop_server(&runtime, &running_slot);
    runtime.shutdown_timeout(Duration::from_secs(2));
    drop(lock);
    result.map_err(|e| GuiError::Window(e.to_string()))
}

/// One instance per config file, held until the app ends: a second start brings the running
/// app's window to the front and ends (`None`); where it cannot, it says who holds the lock,
/// in its window and on stderr (the window stays open to say it; a start from a terminal or
/// a script sees why there is no server).
fn claim_instance(
    config_path: Option<&std::path::Path>,
) -> Option<Result<crate::control::InstanceLock, crate::control::LockError>> {
    let lock = crate::control::lock_instance(config_path);
    if let Err(held @ crate::control::LockError::AlreadyRunning { pid, .. }) = &lock {
        match held.ask_holder_to_show() {
            Ok(()) => {
                eprintln!(
                    "strata-desk: Strata Desk is already running with this config (process \
                     {pid}): its window was brought to the front"
                );
                return None;
            }
            Err(why) => tracing::info!("the running app's window was not shown: {why}"),
        }
    }
    Some(lock)
}

/// A second start's request to show the window shows it, once the window has a context.
fn show_on_request(
    lock: &crate::control::InstanceLock,
    window: Window,
    shown_ctx: Arc<std::sync::OnceLock<egui::Context>>,
) {
    let served = lock.serve_show_requests(move || {
        if let Some(ctx) = shown_ctx.get() {
            window.show(ctx);
        }
    });
    if let Err(e) = served {
        tracing::warn!("a second start cannot bring this window to the front: {e}");
    }
}

/// What the window needs when it opens: the start to run (or the lock's error to show), the
/// runtime, the start's events and the server's slot, and the window's visibility.
struct Launch {
    config: Result<Config, crate::config::ConfigError>,
    config_path: Option<PathBuf>,
    exe: PathBuf,
    lock_error: Option<String>,
    handle: tokio::runtime::Handle,
    events_tx: std::sync::mpsc::Sender<StartEvent>,
    events: std::sync::mpsc::Receiver<StartEvent>,
    slot: Arc<Mutex<Option<Running>>>,
    window: Window,
    shown_ctx: Arc<std::sync::OnceLock<egui::Context>>,
}

impl Launch {
    /// The window's app: the start runs in the background (or its failure is shown), and once
    /// the server runs the dashboard gets the window, the tray and repaints on changes.
    fn app(self, cc: &eframe::CreationContext<'_>) -> App {
        let ctx = cc.egui_ctx.clone();
        let _ = self.shown_ctx.set(ctx.clone());
        self.handle
            .spawn(close_on_signal(ctx.clone(), self.window.clone()));
        let repainted = ctx.clone();
        let repaint = move || repainted.request_repaint();
        match self.lock_error {
            None => startup::start_in_background(
                self.config,
                self.config_path,
                self.exe,
                self.handle.clone(),
                self.events_tx,
                repaint,
            ),
            Some(e) => {
                let _ = self.events_tx.send(startup::StartEvent::Failed(e));
            }
        }
        let (spawner, window) = (self.handle.clone(), self.window);
        startup::App::new(
            self.events,
            self.handle,
            self.slot,
            move |dashboard, running| {
                let control = running.control.clone();
                // repaint on the changes of each engine unit's service, at most five times a
                // second; a new unit (an apply) is followed
                spawner.spawn(repaint_on_units(control.clone(), ctx.clone()));
                dashboard.set_window(window.clone());
                let tray = tray::Tray::start(ctx.clone(), control, spawner.clone(), window.clone());
                if running.control.config().app.close_to_tray && !session_bus::tray_host_seen() {
                    eprintln!(
                        "strata-desk: no tray host shows the icon here: closing the window \
                     minimises it (or quits, as chosen)"
                    );
                }
                dashboard.set_tray(tray);
            },
        )
    }
}

/// Stops the server if it runs, waiting at most 15 s (an apply in progress holds the control
/// plane: do not wait on it for ever).
fn stop_server(runtime: &tokio::runtime::Runtime, running_slot: &Mutex<Option<Running>>) {
    let running = running_slot.lock().ok().and_then(|mut r| r.take());
    if let Some(running) = running {
        let stopped = runtime.block_on(async {
            tokio::time::timeout(Duration::from_secs(15), running.stop()).await
        });
        if stopped.is_err() {
            tracing::warn!("the server did not stop within 15 s; exiting anyway");
        }
    }
}

/// A native message box where no window could open (Windows: the program has no console).
fn native_message_box(message: &str) {
    #[cfg(windows)]
    {
        let _ = rfd::MessageDialog::new()
            .set_title("Strata Desk")
            .set_description(message)
            .set_level(rfd::MessageLevel::Error)
            .show();
    }
    #[cfg(not(windows))]
    eprintln!("strata-desk: {message}");
}

/// Repaints the window on each change of the serving unit's snapshot, following a new unit
/// after an apply; at most five frames a second.
async fn repaint_on_units(control: crate::control::Control, ctx: egui::Context) {
    let mut units = control.watch_units();
    loop {
        let snapshots = units.borrow_and_update().service.watch();
        tokio::select! {
            () = repaint_on_change(snapshots, ctx.clone()) => {
                if units.changed().await.is_err() {
                    return;
                }
            }
            changed = units.changed() => {
                if changed.is_err() {
                    return;
                }
            }
        }
        ctx.request_repaint();
    }
}

/// The least time between two frames drawn for snapshot changes.
const REPAINT_GAP_MILLIS: u64 = 200;

async fn repaint_on_change(
    mut snapshots: tokio::sync::watch::Receiver<crate::service::ServiceSnapshot>,
    ctx: egui::Context,
) {
    // Ends when its service stops (after an apply, a new one is watched). At most 5 frames a
    // second: a stream publishes a snapshot per token, and under software rendering a frame
    // of this window costs tens of ms of CPU (docs/BENCHMARKS.md).
    while snapshots.changed().await.is_ok() {
        ctx.request_repaint();
        tokio::time::sleep(Duration::from_millis(REPAINT_GAP_MILLIS)).await;
    }
}

/// SIGTERM (Ctrl-C elsewhere) ends the app: a close that quits, not one that hides.
async fn close_on_signal(ctx: egui::Context, window: Window) {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
        window.quit(&ctx);
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        window.quit(&ctx);
    }
}
