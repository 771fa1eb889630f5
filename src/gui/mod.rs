//! The desktop app: the service and the HTTP server on a background tokio runtime, and an
//! egui window that shows the scheduler live and steers it.
//!
//! - `app`: [`Dashboard`], the window's state and frame;
//! - `panels`: one `*_ui` function per panel, reading the snapshot;
//! - `history`: the scheduler's log with request ids, and the too-long-prompt banner;
//! - `preemption`: the one Preemption switch over `solo_priority` and `give_way`;
//! - `requests`: the requests table (one row per live request, with its "why");
//! - `settings`: the settings view (restart-only settings, the model picker);
//! - `timeline`: who held the read lane and each slot, the last minutes;
//! - `commands`: user actions, queued in a frame and drained once at its end;
//! - `host`: the app's own server, which the settings view restarts;
//! - `tray`: the tray icon and its menu.
//!
//! Closing the window (or Quit in the tray, or SIGTERM, which closes it) shuts the server and
//! the engine down cleanly. One instance per config file: a second start names the process
//! that holds it.

mod app;
mod commands;
mod history;
mod host;
mod panels;
mod preemption;
mod requests;
mod settings;
mod timeline;
mod tray;

pub use app::Dashboard;
pub use commands::{Command, CommandQueue, Outcome};
pub use host::{HostError, RestartSettings, ServerHost};
pub use panels::percentiles;
pub use preemption::{GiveWayMemory, Preemption, preemption_change, preemption_of};
pub use requests::{RequestOrder, sorted_rows};
pub use timeline::{Activity, Segment, TIMELINE_SECS, Timeline};
pub use tray::{PreemptionItem, TrayState};

use crate::config::{Config, Renderer};
use crate::server::ServerError;
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum GuiError {
    #[error(
        "no display: neither DISPLAY nor WAYLAND_DISPLAY is set; run `strata-desk --headless` to serve without a window"
    )]
    NoDisplay,
    #[error(
        "another Strata Desk (process {pid}) is running with this config ({path}); close it first"
    )]
    AlreadyRunning { pid: String, path: String },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: String,
        source: std::io::Error,
    },
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

/// Holds the instance lock for a config while the app runs.
struct InstanceLock {
    _file: std::fs::File,
}

fn lock_instance(config_path: Option<&Path>) -> Result<InstanceLock, GuiError> {
    let key = config_path.map_or_else(|| "default".to_owned(), |p| p.display().to_string());
    let digest = {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(key.as_bytes());
        hash.iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let dir = crate::models::project_dirs()
        .map_or_else(std::env::temp_dir, |d| d.data_local_dir().to_path_buf());
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("instance-{digest}.lock"));
    let lock_err = |source| GuiError::Lock {
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lock_err)?;
    if file.try_lock().is_err() {
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(GuiError::AlreadyRunning {
            pid: pid.trim().to_owned(),
            path: key,
        });
    }
    use std::io::Write;
    file.set_len(0).map_err(lock_err)?;
    write!(file, "{}", std::process::id()).map_err(lock_err)?;
    Ok(InstanceLock { _file: file })
}

/// Runs the window until it is closed; the server runs meanwhile on `config`'s address.
pub fn run(config: Config, config_path: Option<PathBuf>, exe: PathBuf) -> Result<(), GuiError> {
    if !has_display() {
        return Err(GuiError::NoDisplay);
    }
    let renderer = renderer(config.app.renderer)?;
    let _lock = lock_instance(config_path.as_deref())?;
    let runtime = tokio::runtime::Runtime::new().map_err(GuiError::Runtime)?;
    let addr = std::net::SocketAddr::new(config.app.host, config.app.port);
    let listener = runtime
        .block_on(tokio::net::TcpListener::bind(addr))
        .map_err(|source| ServerError::Bind {
            addr: addr.to_string(),
            source,
        })?;
    let host = {
        let _enter = runtime.enter();
        ServerHost::start(listener, config, config_path, exe)?
    };
    eprintln!("strata-desk: serving on http://{addr}; the window shows the scheduler");
    let options = eframe::NativeOptions {
        renderer,
        viewport: egui::ViewportBuilder::default()
            .with_title("Strata Desk")
            .with_inner_size([1100.0, 720.0]),
        ..Default::default()
    };
    let handle = runtime.handle().clone();
    let served = host.clone();
    let result = eframe::run_native(
        "Strata Desk",
        options,
        Box::new(move |cc| {
            let ctx = cc.egui_ctx.clone();
            // Repaint on change (of each service the host starts), at most ten times a
            // second; SIGTERM closes the window.
            let (spawner, repainted) = (handle.clone(), ctx.clone());
            served.on_start(move |service| {
                spawner.spawn(repaint_on_change(service.watch(), repainted.clone()));
            });
            handle.spawn(close_on_signal(ctx.clone()));
            let tray = tray::Tray::start(ctx, served.clone(), handle.clone());
            let mut dashboard = Dashboard::with_host(served, handle);
            dashboard.set_tray(tray);
            Ok(Box::new(dashboard))
        }),
    );
    // An apply in progress holds the host; do not wait on it for ever.
    let stopped = runtime
        .block_on(async { tokio::time::timeout(Duration::from_secs(15), host.shutdown()).await });
    if stopped.is_err() {
        tracing::warn!("the server did not stop within 15 s; exiting anyway");
    }
    runtime.shutdown_timeout(Duration::from_secs(2));
    result.map_err(|e| GuiError::Window(e.to_string()))
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

async fn close_on_signal(ctx: egui::Context) {
    #[cfg(unix)]
    if let Ok(mut term) = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
    {
        term.recv().await;
        ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        ctx.request_repaint();
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
        ctx.send_viewport_cmd(egui::ViewportCommand::Close);
        ctx.request_repaint();
    }
}
