//! The dashboard: reads the service's snapshot each frame, queues the user's commands and
//! drains them once per frame, and keeps an event log from what changed between snapshots.

use super::commands::CommandQueue;
use super::panels;
use crate::service::{CountersView, ServiceHandle, ServiceSnapshot};
use std::collections::VecDeque;

const LOG_LINES_MAX: usize = 200;

#[derive(Debug)]
pub struct Dashboard {
    service: ServiceHandle,
    runtime: tokio::runtime::Handle,
    commands: CommandQueue,
    log: VecDeque<(f64, String)>,
    last_counters: Option<CountersView>,
    confirm_restart: bool,
    /// Waiting longer than this is shown as starving.
    pub starving_secs: f64,
}

impl Dashboard {
    pub fn new(service: ServiceHandle, runtime: tokio::runtime::Handle) -> Self {
        Self {
            service,
            runtime,
            commands: CommandQueue::default(),
            log: VecDeque::new(),
            last_counters: None,
            confirm_restart: false,
            starving_secs: 30.0,
        }
    }

    /// The whole window's content.
    pub fn ui(&mut self, ui: &mut egui::Ui) {
        let s = self.service.snapshot();
        self.note_events(&s);
        // Ages and parked times move with the clock alone: keep them (and the starving
        // highlight) current while anyone waits or is parked.
        if !s.waiting.is_empty() || !s.parked.is_empty() {
            ui.ctx()
                .request_repaint_after(std::time::Duration::from_millis(500));
        }
        egui::Panel::top("engine").show(ui, |ui| {
            panels::engine_ui(ui, &s, &mut self.confirm_restart, &mut self.commands);
            panels::controls_ui(ui, &s, &mut self.commands);
        });
        egui::Panel::bottom("events").show(ui, |ui| panels::log_ui(ui, &self.log));
        egui::CentralPanel::default().show(ui, |ui| {
            egui::ScrollArea::vertical().show(ui, |ui| {
                ui.columns(2, |columns| {
                    panels::slots_ui(&mut columns[0], &s);
                    panels::parked_ui(&mut columns[0], &s);
                    panels::waiting_ui(&mut columns[0], &s, self.starving_secs, &mut self.commands);
                    panels::counters_ui(&mut columns[1], &s);
                    panels::ttft_ui(&mut columns[1], &s);
                });
            });
        });
        self.commands.drain(&self.service, &self.runtime);
        for line in self.commands.outcomes() {
            self.push(s.uptime_secs, line);
        }
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
    fn ui(&mut self, ui: &mut egui::Ui, _frame: &mut eframe::Frame) {
        Dashboard::ui(self, ui);
    }
}
