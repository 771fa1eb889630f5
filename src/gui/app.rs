//! The dashboard: reads the service's snapshot each frame, queues the user's commands and
//! drains them once per frame, and keeps an event log from what changed between snapshots.

use super::commands::{CommandQueue, Outcome};
use super::controls;
use super::history::{LogFilter, length_refusal_ui, scheduler_log_ui};
use super::panels;
use super::requests::RequestsView;
use super::settings::{SettingsView, settings_ui};
use super::timeline::Timeline;
use super::tray::Tray;
use super::window::Window;
use crate::control::Control;
use crate::service::{ServiceHandle, ServiceSnapshot, SlotStatus};
use std::collections::VecDeque;
use std::net::SocketAddr;

/// What closing the window does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CloseAction {
    /// The app ends (Quit chosen, or `close_to_tray: false`).
    Quit,
    /// The window hides; the server and the engine go on in the tray.
    Hide,
    /// The first close of this run: say that the app keeps serving in the tray, and ask.
    Notice,
    /// No tray host shows the icon: each close asks whether to minimise (the app keeps
    /// serving) or quit, and says why there is no tray.
    NoTrayNotice,
}

/// What closing the window does, from whether a tray host shows the icon, the
/// `close_to_tray` key, whether Quit was chosen, and whether the notice was shown already.
pub fn close_action(
    tray_host: bool,
    close_to_tray: bool,
    quitting: bool,
    noticed: bool,
) -> CloseAction {
    if quitting || !close_to_tray {
        CloseAction::Quit
    } else if !tray_host {
        CloseAction::NoTrayNotice
    } else if noticed {
        CloseAction::Hide
    } else {
        CloseAction::Notice
    }
}

/// Whether a tray host shows the icon: asked on each close (a host may come or go), or fixed
/// (no tray icon at all, or a test).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TrayHost {
    Fixed(bool),
    Asked,
}

impl TrayHost {
    fn seen(self) -> bool {
        match self {
            Self::Fixed(seen) => seen,
            Self::Asked => super::session_bus::tray_host_seen(),
        }
    }
}

const LOG_LINES_MAX: usize = 200;

#[derive(Debug)]
pub struct Dashboard {
    service: ServiceHandle,
    /// The control plane every switch, restart and apply goes through, and the address it
    /// serves on when the dashboard runs the app's own server (then with the settings view).
    control: Control,
    addr: Option<SocketAddr>,
    /// Which of the control plane's engine units `service` is (a new one after each apply).
    generation: u64,
    /// Closing: whether a tray host shows the icon (also without a `Tray` here, for tests),
    /// the window's visibility and whether Quit was chosen, the notice showing (the action
    /// that showed it), whether the tray's notice was shown.
    tray_host: TrayHost,
    window: Window,
    close_notice: Option<CloseAction>,
    close_noticed: bool,
    /// The model path typed where no file dialog opens.
    path_entry: super::pick::PathEntry,
    settings: SettingsView,
    show_settings: bool,
    timeline: Timeline,
    tray: Option<Tray>,
    runtime: tokio::runtime::Handle,
    commands: CommandQueue,
    log: VecDeque<(f64, String)>,
    /// When the restart's question was asked (egui's clock), while it waits for an answer.
    confirm_restart: Option<f64>,
    requests_view: RequestsView,
    log_filter: LogFilter,
    /// The length refusal (its time) the user dismissed.
    refusal_dismissed_at: Option<f64>,
    /// Waiting longer than this is shown as starving.
    pub starving_secs: f64,
}

impl Dashboard {
    /// A dashboard over a control plane (its service's snapshots; its switches).
    pub fn new(control: Control, runtime: tokio::runtime::Handle) -> Self {
        Self {
            service: control.service(),
            generation: control.unit().generation,
            control,
            addr: None,
            tray_host: TrayHost::Fixed(false),
            window: Window::default(),
            close_notice: None,
            close_noticed: false,
            path_entry: super::pick::PathEntry::default(),
            settings: SettingsView::default(),
            show_settings: false,
            timeline: Timeline::default(),
            tray: None,
            runtime,
            commands: CommandQueue::default(),
            log: VecDeque::new(),
            confirm_restart: None,
            requests_view: RequestsView::default(),
            log_filter: LogFilter::default(),
            refusal_dismissed_at: None,
            starving_secs: 30.0,
        }
    }

    /// A dashboard over the app's own server (its control plane, serving on `addr`): with
    /// the settings view and model picker.
    pub fn with_control(
        control: Control,
        addr: SocketAddr,
        runtime: tokio::runtime::Handle,
    ) -> Self {
        let mut dashboard = Self::new(control, runtime);
        dashboard.addr = Some(addr);
        dashboard
    }

    /// Shows the state in a tray icon too; closing hides the window only while a tray host
    /// shows the icon (asked on each close).
    pub fn set_tray(&mut self, tray: Option<Tray>) {
        self.tray_host = if tray.is_some() {
            TrayHost::Asked
        } else {
            TrayHost::Fixed(false)
        };
        self.tray = tray;
    }

    /// Whether a tray host shows the icon (so closing the window hides it), fixed: for tests.
    pub fn set_has_tray(&mut self, has_tray: bool) {
        self.tray_host = TrayHost::Fixed(has_tray);
    }

    /// The window's visibility, shared with the tray, a second start and SIGTERM.
    pub fn window(&self) -> Window {
        self.window.clone()
    }

    /// Shares `window` (made before the dashboard: SIGTERM and a second start use it).
    pub fn set_window(&mut self, window: Window) {
        self.window = window;
    }

    /// What a close request does now, and its effect on the window.
    fn on_close_requested(&mut self, ctx: &egui::Context) {
        let close_to_tray = self.control.config().app.close_to_tray;
        let action = close_action(
            self.tray_host.seen(),
            close_to_tray,
            self.window.quitting(),
            self.close_noticed,
        );
        match action {
            CloseAction::Quit => {}
            CloseAction::Hide => {
                ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
                self.window.hide(ctx);
            }
            CloseAction::Notice | CloseAction::NoTrayNotice => {
                ctx.send_viewport_cmd(egui::ViewportCommand::CancelClose);
                self.close_notice = Some(action);
            }
        }
    }

    /// The close notice: the app keeps serving, hidden in the tray (the first close of a run)
    /// or, where no tray host shows the icon, minimised (each close).
    fn close_notice_ui(&mut self, ui: &mut egui::Ui) {
        let Some(notice) = self.close_notice else {
            return;
        };
        let in_tray = notice == CloseAction::Notice;
        let ctx = ui.ctx().clone();
        egui::Modal::new(egui::Id::unique("close-notice")).show(&ctx, |ui| {
            ui.heading("Strata Desk keeps serving");
            ui.label(if in_tray {
                "Closing the window keeps the server and the engine running in the tray, so \
                 your agents keep working. Quit from the tray icon's menu to stop them \
                 (`close_to_tray: false` in the config makes closing quit)."
            } else {
                "No tray shows Strata Desk's icon here (no tray host on the session bus: on \
                 GNOME, the AppIndicator extension adds one), so closing minimises the window \
                 instead: the server and the engine keep running for your agents. Quit here \
                 to stop them (`close_to_tray: false` in the config makes closing quit)."
            });
            ui.horizontal(|ui| {
                let keep = if in_tray { "Hide to tray" } else { "Minimise" };
                if ui.button(keep).clicked() {
                    self.close_notice = None;
                    if in_tray {
                        self.close_noticed = true;
                        self.window.hide(&ctx);
                    } else {
                        self.window.minimise(&ctx);
                    }
                }
                if ui.button("Quit now").clicked() {
                    self.close_notice = None;
                    self.window.quit(&ctx);
                }
            });
        });
    }

    /// The frame's work that does not draw: follow a restarted server, note events, sample
    /// the timeline, update the tray, take the commands' outcomes. eframe calls it even while
    /// the window is hidden (when it draws nothing), so the tray stays current.
    pub fn tick(&mut self, ctx: &egui::Context) -> ServiceSnapshot {
        let unit = self.control.unit();
        if unit.generation != self.generation {
            // A new engine serves (an apply): follow the new service and mark the restart.
            // The log, samples, counters and clock are the app's run's and go on.
            let old = self.service.snapshot();
            self.timeline.mark_restart(old.uptime_secs);
            self.generation = unit.generation;
            self.service = unit.service.clone();
        }
        let s = self.service.snapshot();
        self.timeline.record(&s);
        if let Some(tray) = &mut self.tray {
            tray.update(&s);
        }
        if !s.waiting.is_empty() || !s.parked.is_empty() {
            // Ages and parked times move with the clock alone: keep them (and the starving
            // highlight) current while anyone waits or is parked.
            ctx.request_repaint_after(std::time::Duration::from_millis(500));
        } else if s.slots.iter().any(|slot| slot.state != SlotStatus::Empty) {
            // Keep the timeline's axis moving while anything is held.
            ctx.request_repaint_after(std::time::Duration::from_secs(1));
        }
        self.take_outcomes(s.uptime_secs);
        s
    }

    fn take_outcomes(&mut self, now_secs: f64) {
        for outcome in self.commands.outcomes() {
            match outcome {
                Outcome::Line(line) => self.push(now_secs, line),
                Outcome::Picked(path) => self.settings.picked(path),
                Outcome::NoFileDialog(why) => {
                    self.push(now_secs, format!("Open GGUF...: {why}"));
                    self.path_entry.no_dialog(why);
                }
                Outcome::Models(found) => {
                    self.settings.scanning = false;
                    self.push(
                        now_secs,
                        format!("found {} model(s) on this machine", found.len()),
                    );
                    self.settings.found = Some(found);
                }
                Outcome::HubListed { repo, listing } => {
                    if let Err(e) = &listing {
                        // the detail the window folds away stays whole in the log
                        self.push(now_secs, format!("could not list {repo}: {}", e.whole()));
                    }
                    self.settings.hub.listed(repo, listing);
                }
                Outcome::HubProgress { key, progress } => {
                    self.settings.hub.progressed(&key, progress);
                }
                Outcome::HubDownloaded { key, result } => {
                    self.push(
                        now_secs,
                        match &result {
                            Ok(path) => format!("downloaded {key} to {}", path.display()),
                            Err(e) => format!("{key}: {}", e.whole()),
                        },
                    );
                    self.settings.hub.finished(key, result);
                }
                Outcome::Applied(result) => {
                    self.settings.applying = false;
                    let line = match &result {
                        Ok(line) => {
                            self.settings.reset();
                            line.clone()
                        }
                        Err(e) => format!("settings not applied: {e}"),
                    };
                    self.push(now_secs, line);
                    self.settings.last_result = Some(result);
                }
            }
        }
    }

    /// The whole window's content.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        if ui.ctx().input(|i| i.viewport().close_requested()) {
            self.on_close_requested(&ui.ctx().clone());
        }
        self.close_notice_ui(ui);
        let s = self.tick(ui.ctx());
        egui::Panel::top("engine").show(ui, |ui| self.top_panel_ui(ui, &s));
        // the logs' height is the user's: drag the panel's top edge
        egui::Panel::bottom("events")
            .resizable(true)
            .default_size(190.0)
            .size_range(90.0..=700.0)
            .show(ui, |ui| {
                scheduler_log_ui(ui, &s, &mut self.log_filter, &self.log);
            });
        // the totals at the side, as wide as the user drags them; the live view has the rest
        egui::Panel::right("totals")
            .resizable(true)
            .default_size(250.0)
            .size_range(200.0..=700.0)
            .show(ui, |ui| {
                egui::ScrollArea::vertical()
                    .id_salt("totals")
                    .show(ui, |ui| {
                        panels::counters_ui(ui, &s);
                        ui.separator();
                        panels::conversations_ui(ui, &s);
                    });
            });
        egui::CentralPanel::default().show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                // the live sections first, the requests table, then the history (#62)
                let live = super::live::LiveView {
                    snapshot: &s,
                    timeline: &self.timeline,
                    starving_secs: self.starving_secs,
                };
                super::live::live_view_ui(ui, &live, &mut self.requests_view, &mut self.commands);
            });
        });
        self.commands
            .drain(&self.service, &self.control, &self.runtime);
    }

    /// The top panel: the engine, its failure, a too-long prompt's refusal, the switches,
    /// and where the server serves with the settings view's button (and the view when open).
    fn top_panel_ui(&mut self, ui: &mut egui::Ui, s: &ServiceSnapshot) {
        panels::engine_ui(ui, s, &mut self.confirm_restart, &mut self.commands);
        // the setting in force (the unit's config, an Arc: nothing copied per frame)
        let unit = self.control.unit();
        let cpu_code = unit.config.app.engine_settings.cpu_code.as_str();
        super::failure::engine_failure_ui(ui, s, cpu_code, &mut self.commands);
        length_refusal_ui(ui, s, &mut self.refusal_dismissed_at);
        controls::controls_ui(ui, s, &mut self.commands);
        if self.addr.is_some() {
            let control = &self.control;
            ui.horizontal(|ui| {
                let settings = egui::Button::new("Settings and model").selected(self.show_settings);
                if ui
                    .add(settings)
                    .on_hover_text("the model, context, threads and other restart settings")
                    .clicked()
                {
                    self.show_settings = !self.show_settings;
                }
                if let Some(addr) = self.addr {
                    ui.label(format!("serving on http://{addr}"));
                }
                if let Some(path) = control.config_path() {
                    ui.weak(format!("config: {}", path.display()));
                }
            });
            if self.show_settings {
                self.settings_view_ui(ui, s);
            }
        }
    }

    /// The settings view, in a scroll area of at most a little over half the window.
    fn settings_view_ui(&mut self, ui: &mut egui::Ui, s: &ServiceSnapshot) {
        // what the engine offers and uses (devices, CPU variants, the values
        // in force), copied only when it changed
        self.settings.observe(s);
        let in_flight = s.slots.iter().filter(|x| x.request_id.is_some()).count()
            + s.parked.len()
            + s.waiting.len();
        // at most a little over half the window: the live view stays in sight below
        let max_height = ui.ctx().content_rect().height() * 0.55;
        let control = &self.control;
        egui::ScrollArea::vertical()
            .max_height(max_height)
            // a top panel offers a scroll area little height of its own
            .min_scrolled_height(max_height)
            .show(ui, |ui| {
                if let Some(path) = self.path_entry.ui(ui) {
                    self.settings.picked(path);
                }
                settings_ui(
                    ui,
                    &mut self.settings,
                    &control.config(),
                    in_flight,
                    &mut self.commands,
                );
            });
    }

    fn push(&mut self, at: f64, line: String) {
        if self.log.len() == LOG_LINES_MAX {
            self.log.pop_front();
        }
        self.log.push_back((at, line));
    }

    /// The event log, oldest first.
    pub fn log(&self) -> impl Iterator<Item = &str> {
        self.log.iter().map(|(_, line)| line.as_str())
    }
}

impl eframe::App for Dashboard {
    fn logic(&mut self, ctx: &egui::Context, _frame: &mut eframe::Frame) {
        self.tick(ctx);
    }

    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        Dashboard::ui(self, ui);
    }
}
