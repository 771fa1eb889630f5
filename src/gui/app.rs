//! The dashboard: reads the service's snapshot each frame, queues the user's commands and
//! drains them once per frame, and keeps an event log from what changed between snapshots.

use super::commands::{CommandQueue, Outcome};
use super::history::{LogFilter, length_refusal_ui, scheduler_log_ui};
use super::host::ServerHost;
use super::panels;
use super::preemption::GiveWayMemory;
use super::requests::{RequestOrder, requests_ui};
use super::settings::{SettingsView, settings_ui};
use super::timeline::{Timeline, timeline_ui};
use super::tray::Tray;
use crate::service::{CountersView, ServiceHandle, ServiceSnapshot, SlotStatus};
use std::collections::VecDeque;

const LOG_LINES_MAX: usize = 200;

#[derive(Debug)]
pub struct Dashboard {
    service: ServiceHandle,
    /// The app's own server, when the dashboard runs it (the settings view needs it).
    host: Option<ServerHost>,
    /// Which of the host's servers `service` is (a new one after each apply).
    generation: u64,
    settings: SettingsView,
    show_settings: bool,
    timeline: Timeline,
    tray: Option<Tray>,
    runtime: tokio::runtime::Handle,
    commands: CommandQueue,
    log: VecDeque<(f64, String)>,
    last_counters: Option<CountersView>,
    confirm_restart: bool,
    /// The `give_way` the Preemption switch puts back.
    give_way_memory: GiveWayMemory,
    request_order: RequestOrder,
    log_filter: LogFilter,
    /// The length refusal (its time) the user dismissed.
    refusal_dismissed_at: Option<f64>,
    /// Waiting longer than this is shown as starving.
    pub starving_secs: f64,
}

impl Dashboard {
    pub fn new(service: ServiceHandle, runtime: tokio::runtime::Handle) -> Self {
        Self {
            service,
            host: None,
            generation: 0,
            settings: SettingsView::default(),
            show_settings: false,
            timeline: Timeline::default(),
            tray: None,
            runtime,
            commands: CommandQueue::default(),
            log: VecDeque::new(),
            last_counters: None,
            confirm_restart: false,
            give_way_memory: GiveWayMemory::default(),
            request_order: RequestOrder::default(),
            log_filter: LogFilter::default(),
            refusal_dismissed_at: None,
            starving_secs: 30.0,
        }
    }

    /// A dashboard over the app's own server: with the settings view and model picker.
    pub fn with_host(host: ServerHost, runtime: tokio::runtime::Handle) -> Self {
        let mut dashboard = Self::new(host.service(), runtime);
        dashboard.generation = host.generation();
        dashboard.host = Some(host);
        dashboard
    }

    /// Shows the state in a tray icon too.
    pub fn set_tray(&mut self, tray: Option<Tray>) {
        self.tray = tray;
    }

    /// The frame's work that does not draw: follow a restarted server, note events, sample
    /// the timeline, update the tray, take the commands' outcomes. eframe calls it even while
    /// the window is hidden (when it draws nothing), so the tray stays current.
    pub fn tick(&mut self, ctx: &egui::Context) -> ServiceSnapshot {
        if let Some(host) = &self.host
            && host.generation() != self.generation
        {
            // The settings view restarted the server: follow the new service.
            self.generation = host.generation();
            self.service = host.service();
            self.last_counters = None;
            self.timeline = Timeline::default();
        }
        let s = self.service.snapshot();
        self.note_events(&s);
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
                Outcome::Models(found) => {
                    self.settings.scanning = false;
                    self.push(
                        now_secs,
                        format!("found {} model(s) on this machine", found.len()),
                    );
                    self.settings.found = Some(found);
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
        let s = self.tick(ui.ctx());
        egui::Panel::top("engine").show(ui, |ui| {
            panels::engine_ui(ui, &s, &mut self.confirm_restart, &mut self.commands);
            length_refusal_ui(ui, &s, &mut self.refusal_dismissed_at);
            self.give_way_memory.observe(&s);
            panels::controls_ui(ui, &s, self.give_way_memory, &mut self.commands);
            if let Some(host) = &self.host {
                ui.horizontal(|ui| {
                    let settings =
                        egui::Button::new("Settings and model").selected(self.show_settings);
                    if ui
                        .add(settings)
                        .on_hover_text("the model, context, threads and other restart settings")
                        .clicked()
                    {
                        self.show_settings = !self.show_settings;
                    }
                    ui.label(format!("serving on http://{}", host.addr()));
                    if let Some(path) = host.config_path() {
                        ui.weak(format!("config: {}", path.display()));
                    }
                });
                if self.show_settings {
                    let in_flight = s.slots.iter().filter(|x| x.request_id.is_some()).count()
                        + s.parked.len()
                        + s.waiting.len();
                    settings_ui(
                        ui,
                        &mut self.settings,
                        &host.config(),
                        in_flight,
                        &mut self.commands,
                    );
                }
            }
        });
        // the logs' height is the user's: drag the panel's top edge
        egui::Panel::bottom("events")
            .resizable(true)
            .default_size(190.0)
            .size_range(90.0..=700.0)
            .show(ui, |ui| {
                ui.columns(2, |columns| {
                    scheduler_log_ui(&mut columns[0], &s, &mut self.log_filter);
                    panels::log_ui(&mut columns[1], &self.log);
                });
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
                requests_ui(ui, &s, &mut self.request_order, &mut self.commands);
                ui.separator();
                panels::slots_ui(ui, &s);
                panels::parked_ui(ui, &s);
                panels::waiting_ui(ui, &s, self.starving_secs);
                ui.separator();
                panels::ttft_ui(ui, &s);
                ui.separator();
                timeline_ui(ui, &self.timeline);
            });
        });
        self.commands
            .drain(&self.service, self.host.as_ref(), &self.runtime);
    }

    fn push(&mut self, at: f64, line: String) {
        if self.log.len() == LOG_LINES_MAX {
            self.log.pop_front();
        }
        self.log.push_back((at, line));
    }

    /// Log lines for what the counters say happened since the last frame.
    fn note_events(&mut self, s: &ServiceSnapshot) {
        let now = &s.counters;
        if let Some(before) = self.last_counters.take() {
            let events = [
                (
                    now.give_ways_higher_priority,
                    before.give_ways_higher_priority,
                    "a read gave way to a higher priority",
                ),
                (
                    now.give_ways_shorter_left,
                    before.give_ways_shorter_left,
                    "a read gave way to a shorter one",
                ),
                (
                    now.pauses,
                    before.pauses,
                    "a stream was paused for a higher priority",
                ),
                (now.resumes, before.resumes, "a paused stream resumed"),
                (
                    now.cancellations,
                    before.cancellations,
                    "a request was cancelled",
                ),
                (
                    now.engine_restarts,
                    before.engine_restarts,
                    "the engine restarted",
                ),
            ];
            for (after, was, what) in events {
                for _ in was..after {
                    self.push(s.uptime_secs, what.to_owned());
                }
            }
        }
        self.last_counters = Some(now.clone());
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
