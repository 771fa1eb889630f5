//! The service actor: the one task that owns the scheduler, the engine link and the clients'
//! streams.
//!
//! Each loop turn takes one input (a command from a handle, the outstanding step's reply, a
//! finished engine start, a tick), turns it into a scheduler event, executes the actions that
//! come back in order (`execute`), and publishes a snapshot (`publish`). The scheduler only
//! asks for engine work at a step boundary, so engine commands other than the step itself run
//! while no step is outstanding; a step is sent and its reply awaited in the loop, beside the
//! commands. Every start and retry of the engine is the scheduler's (R10), the first included.

use super::ServiceHandle;
use super::engine_link::{EngineLink, StartResult};
use super::handle::{
    ControlError, Reply as ControlReply, RequestState, RestartReport, ServiceCommand,
    SettingsChange, StreamEvent, Submission, SubmitError,
};
use super::snapshot::ServiceSnapshot;
use super::streams::Streams;
use crate::engine::WorkerLaunch;
use crate::ids::RequestId;
use crate::protocol::Handshake;
use crate::scheduler::{
    Action, Checkpoint, ConfigError, EngineFacts, Event, NewRequest, Refusal, Refused,
    RequestStatus, Scheduler, SchedulerSettings,
};
use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// How the service starts its engine and schedules it.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub launch: WorkerLaunch,
    pub settings: SchedulerSettings,
    /// What goes on across services (the clock, request ids, the event stream and its `seq`,
    /// the ended requests, the metrics): the control plane makes one for the app's run and
    /// hands it to every service it starts, so an apply resets none of them.
    pub observation: super::Observation,
}

/// Request ids for a run of the app, one counter across every service the control plane
/// starts (an apply, a fallback): a client never sees the same `chatcmpl-N` twice. Cheap to
/// clone (the clones share the counter).
#[derive(Debug, Clone)]
pub struct RequestIds(Arc<std::sync::atomic::AtomicU64>);

impl Default for RequestIds {
    fn default() -> Self {
        Self(Arc::new(std::sync::atomic::AtomicU64::new(1)))
    }
}

impl RequestIds {
    pub(super) fn next(&self) -> RequestId {
        RequestId(self.0.fetch_add(1, std::sync::atomic::Ordering::Relaxed))
    }
}

const TICK: Duration = Duration::from_millis(250);

/// Starts the actor on the current tokio runtime; the engine starts loading at once.
/// Settings that cannot run on the configured engine (`solo_priority` with `parallel` 2 or
/// more) are refused here.
pub fn spawn(options: ServiceOptions) -> Result<ServiceHandle, ConfigError> {
    let slots = options.launch.options.slots;
    let scheduler = Scheduler::starting(options.settings.clone(), slots)?;
    let (commands, rx) = mpsc::unbounded_channel();
    let (snapshot_tx, snapshots) = watch::channel(ServiceSnapshot::starting(
        options.settings.clone(),
        slots,
        options.launch.options.fake.enabled,
    ));
    let observation = options.observation;
    let epoch = observation.epoch();
    let totals_before = observation.lock().totals_before.clone();
    if let Some(target) = &options.launch.options.upstream {
        super::upstream_watch::spawn_watch(target, &options.launch.env, commands.downgrade());
    }
    let (mut engine, started_rx) = EngineLink::new(options.launch.clone());
    // The first start (attempt 1) is the caller's, as `Scheduler::starting` says.
    engine.start(Duration::ZERO);
    let actor = Actor {
        settings: options.settings,
        rx,
        snapshot_tx,
        epoch,
        scheduler,
        engine,
        started_rx,
        streams: Streams::new(observation.clone()),
        queue: VecDeque::new(),
        shutting_down: None,
        observation: observation.clone(),
        totals_before,
        last_failure: None,
        start_failures: 0,
        expected_read: None,
        last_length_refusal: None,
        pool_mismatches: 0,
        diagnostics: 0,
        model_file: Default::default(),
        worker_rss: None,
        upstream: None,
    };
    tokio::spawn(actor.run());
    Ok(ServiceHandle {
        commands,
        snapshots,
        observation,
    })
}

pub(super) struct Actor {
    /// The settings asked for (the scheduler's are in force).
    pub(super) settings: SchedulerSettings,
    rx: mpsc::UnboundedReceiver<ServiceCommand>,
    pub(super) snapshot_tx: watch::Sender<ServiceSnapshot>,
    pub(super) epoch: Instant,
    pub(super) scheduler: Scheduler,
    pub(super) engine: EngineLink,
    started_rx: mpsc::UnboundedReceiver<StartResult>,
    pub(super) streams: Streams,
    /// Actions not executed yet, in order.
    pub(super) queue: VecDeque<Action>,
    shutting_down: Option<oneshot::Sender<()>>,
    /// The observation kept for the app's run (the log, the ended requests, the metrics).
    pub(super) observation: super::Observation,
    /// The scheduler totals of the services before this one (this one's are added to them).
    pub(super) totals_before: crate::scheduler::Counters,
    /// Why the engine last failed to start or died (shown while it is down).
    pub(super) last_failure: Option<String>,
    /// Failed engine starts in a row (the log's attempt number).
    start_failures: u32,
    /// The outstanding step's chunk: its request and the tokens its sequence must then hold.
    pub(super) expected_read: Option<(RequestId, u32)>,
    pub(super) last_length_refusal: Option<super::event_log::LengthRefusal>,
    /// Steps after which the engine's pool differed from the scheduler's.
    pub(super) pool_mismatches: u64,
    /// The scheduler's diagnostics so far (each a WARN line in the log).
    pub(super) diagnostics: u64,
    /// The loaded model's path, file name and size, read once per model (not per publish).
    pub(super) model_file: (String, String, u64),
    /// The worker's resident memory, read at most once a second: when, of which process.
    pub(super) worker_rss: Option<(Instant, u32, Option<u64>)>,
    /// The upstream engine's last reading (`engine: upstream` only).
    pub(super) upstream: Option<super::upstream_watch::UpstreamView>,
}

impl Actor {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let stepping = self.engine.step_outstanding();
            let mut ticked = false;
            tokio::select! {
                command = self.rx.recv() => match command {
                    Some(command) => self.on_command(command),
                    None => break,
                },
                reply = self.engine.step_reply(), if stepping => self.on_step_reply(reply),
                Some((generation, started)) = self.started_rx.recv() => {
                    self.on_started(generation, started);
                }
                _ = tick.tick() => {
                    ticked = true;
                    self.feed(Event::Tick);
                }
            }
            self.execute().await;
            self.publish(ticked);
            if let Some(done) = self.shutting_down.take() {
                self.stop_everything().await;
                let _ = done.send(());
                return;
            }
        }
        self.stop_everything().await;
    }

    pub(super) fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    /// One event to the scheduler; its actions join the queue.
    pub(super) fn feed(&mut self, event: Event) {
        let now = self.now();
        let outcome = self.scheduler.handle(event, now);
        self.take(outcome);
    }

    fn take(&mut self, outcome: crate::scheduler::Outcome) {
        for diagnostic in outcome.diagnostics {
            tracing::warn!("scheduler: {diagnostic}");
            self.diagnostics += 1;
        }
        self.note_actions(&outcome.actions);
        self.queue.extend(outcome.actions);
    }

    fn on_command(&mut self, command: ServiceCommand) {
        match command {
            ServiceCommand::Submit { submission, reply } => self.on_submit(submission, reply),
            ServiceCommand::Cancel(id) => {
                if self.streams.contains(id) {
                    self.feed(Event::Cancelled(id));
                }
            }
            ServiceCommand::CancelRequest { id, reply } => {
                let state = self.request_state(id);
                if state.is_ok() {
                    self.feed(Event::Cancelled(id));
                }
                let _ = reply.send(state);
            }
            ServiceCommand::SetPriority {
                id,
                priority,
                reply,
            } => {
                let state = self.request_state(id);
                if state.is_ok() {
                    // kept as the scheduler keeps it (the dashboard's +1 past the range
                    // would otherwise label its TTFT and metrics with a value it never had)
                    let priority = self.scheduler.clamp_priority(priority);
                    self.feed(Event::Reprioritised {
                        request: id,
                        priority,
                    });
                    self.streams.set_priority(id, priority);
                }
                let _ = reply.send(state);
            }
            ServiceCommand::ChangeSettings { change, by, reply } => {
                let _ = reply.send(self.change_settings(change, by.as_deref()));
            }
            ServiceCommand::RestartEngine { reply } => self.user_restart(reply),
            ServiceCommand::Observe(event) => self.emit(None, event),
            ServiceCommand::Upstream(reading) => self.upstream = Some(reading),
            ServiceCommand::Shutdown(done) => self.shutting_down = Some(done),
        }
    }

    fn request_state(&self, id: RequestId) -> Result<RequestState, ControlError> {
        self.scheduler
            .request_state(id)
            .filter(|_| self.streams.contains(id))
            .ok_or(ControlError::UnknownRequest(id))
    }

    /// R12: the new settings apply at once; the scheduler checks them against the engine.
    fn change_settings(
        &mut self,
        change: SettingsChange,
        by: Option<&str>,
    ) -> Result<SchedulerSettings, ControlError> {
        let before = self.scheduler.settings().clone();
        let mut settings = before.clone();
        if let Some(on) = change.solo_priority {
            settings.solo_priority = on;
        }
        if let Some(give_way) = change.give_way {
            settings.give_way = give_way;
        }
        let now = self.now();
        let outcome = self
            .scheduler
            .set_settings(settings.clone(), now)
            .map_err(|e| ControlError::InvalidSettings(e.to_string()))?;
        self.take(outcome);
        if let Some(by) = by
            && settings != before
        {
            self.note_settings_change(&before, &settings, by);
        }
        self.settings = settings.clone();
        Ok(settings)
    }

    /// R10's user restart: what the engine holds fails with "engine restarted", waiting
    /// requests stay queued for the new engine.
    fn user_restart(&mut self, reply: ControlReply<RestartReport>) {
        let mut report = RestartReport::default();
        for id in self.streams.ids() {
            match self.scheduler.request_state(id) {
                Some(RequestStatus::Waiting) => report.waiting_requests.push(id),
                Some(_) => report.failed_requests.push(id),
                None => {}
            }
        }
        let now = self.now();
        let outcome = self.scheduler.handle(Event::RestartRequested, now);
        // The step under way belongs to the engine being replaced, and the scheduler has
        // forgotten it: stop that engine now, so its end never reaches the scheduler (it was
        // logged as "step done with no step outstanding" after every restart with a stream
        // running), and the restart does not wait for the step first.
        if outcome
            .actions
            .iter()
            .any(|a| matches!(a, Action::RestartEngine { .. }))
        {
            self.engine.kill();
        }
        report.note = outcome.diagnostics.first().cloned();
        self.take(outcome);
        if report.note.is_some() {
            report.failed_requests.clear();
        }
        tracing::info!(
            "engine restart asked: {} in flight fail, {} waiting stay",
            report.failed_requests.len(),
            report.waiting_requests.len()
        );
        let _ = reply.send(Ok(report));
    }

    fn on_submit(
        &mut self,
        submission: Submission,
        reply: oneshot::Sender<
            Result<(RequestId, mpsc::UnboundedReceiver<StreamEvent>), SubmitError>,
        >,
    ) {
        let id = self.observation.ids().next();
        let new = NewRequest {
            id,
            prompt: submission.prompt.clone(),
            priority: submission.priority,
            priority_given: submission.priority_given,
            max_tokens: submission.max_tokens,
        };
        let now = self.now();
        match self.scheduler.admit(new, now) {
            Ok(outcome) => {
                // The stream exists before any action of this outcome runs.
                let rx = self.streams.open(id, submission);
                self.note_arrival(id);
                self.take(outcome);
                if reply.send(Ok((id, rx))).is_err() {
                    // The client left before it got its stream: nothing else would cancel it.
                    self.feed(Event::Cancelled(id));
                }
            }
            Err(Refused { refusal, outcome }) => {
                self.take(outcome);
                let error = self.submit_error(refusal);
                self.note_refusal(&error, &submission.origin);
                let _ = reply.send(Err(error));
            }
        }
    }

    fn submit_error(&self, refusal: Refusal) -> SubmitError {
        match refusal {
            Refusal::QueueFull { retry_after_secs } => SubmitError::QueueFull { retry_after_secs },
            Refusal::PromptTooLong {
                prompt_tokens,
                max_context_tokens,
            } => SubmitError::PromptTooLong {
                prompt_tokens,
                max_context_tokens,
            },
            Refusal::MaxTokensOverContext {
                max_tokens,
                room_tokens,
            } => SubmitError::MaxTokensOverContext {
                max_tokens,
                room_tokens,
            },
            Refusal::EmptyPrompt | Refusal::DuplicateId => SubmitError::EmptyPrompt,
            Refusal::EngineStarting { retry_after_secs } => {
                SubmitError::EngineStarting { retry_after_secs }
            }
            Refusal::EngineUnavailable { stderr_tail } => SubmitError::EngineFailed(stderr_tail),
        }
    }

    fn on_started(
        &mut self,
        generation: u64,
        started: Result<crate::engine::EngineProcess, crate::engine::EngineError>,
    ) {
        match self.engine.started(generation, started) {
            None => {} // a start that was superseded
            Some(Ok(handshake)) => {
                self.start_failures = 0;
                let model = &handshake.model;
                if model.n_ctx > model.n_ctx_train && model.n_ctx_train > 0 {
                    tracing::warn!(
                        "the context ({} tokens) is larger than the model was trained on ({}); \
                         it works, but answers that far in may lose their way",
                        model.n_ctx,
                        model.n_ctx_train
                    );
                }
                let facts = engine_facts(&handshake, self.scheduler.settings());
                let ready = super::observed::Observed::EngineReady {
                    model: model.name.clone(),
                    context_tokens: model.n_ctx,
                    cpu_code: super::cpu_code_words(&handshake.device),
                };
                self.feed(Event::EngineReady(facts));
                self.emit(None, ready);
            }
            Some(Err(reason)) => {
                tracing::warn!("engine start failed: {reason}");
                self.start_failures += 1;
                self.emit(
                    None,
                    super::observed::Observed::EngineStartFailed {
                        attempt: self.start_failures,
                        reason: reason.clone(),
                    },
                );
                self.last_failure = Some(reason.clone());
                self.feed(Event::EngineStartFailed {
                    stderr_tail: reason,
                });
            }
        }
    }

    fn on_step_reply(&mut self, reply: Result<crate::protocol::StepDone, String>) {
        let expected = self.expected_read.take();
        let done = match reply {
            Ok(done) => done,
            Err(reason) => return self.engine_lost(reason),
        };
        // Requests the engine failed in this step, and a read whose count disagrees (R8's
        // drift check): each fails alone; the rest of the step counts.
        let mut failed: Vec<(RequestId, String, u32)> = done
            .failed
            .iter()
            .map(|f| (f.request, f.message.clone(), 0))
            .collect();
        if let Some((request, end)) = expected
            && !failed.iter().any(|(id, ..)| *id == request)
        {
            let held = done
                .read
                .as_ref()
                .filter(|r| r.request == request)
                .map(|r| r.held_tokens);
            if held != Some(end) {
                let lost = end.saturating_sub(held.unwrap_or(0));
                failed.push((
                    request,
                    format!(
                        "the engine holds {} of {request}'s prompt tokens after its chunk, {end} \
                         were counted",
                        held.map_or("none".to_owned(), |h| h.to_string())
                    ),
                    lost,
                ));
            }
        }
        let failed_ids: Vec<RequestId> = failed.iter().map(|(id, ..)| *id).collect();
        self.check_pool(done.kv_cells_used, &failed_ids);
        for (request, message, lost_tokens) in failed {
            tracing::warn!("{request} failed in the engine: {message}");
            self.feed(Event::RequestFailed {
                request,
                message,
                lost_tokens,
            });
        }
        if !done.checkpoints.is_empty() {
            let reports = done
                .checkpoints
                .into_iter()
                .map(|c| {
                    let list = c.checkpoints.iter();
                    (
                        c.seq,
                        list.map(|k| Checkpoint::new(k.tokens, k.bytes)).collect(),
                    )
                })
                .collect();
            self.feed(Event::CheckpointsChanged(reports));
        }
        let outputs = self.streams.sampled(done.sampled);
        self.feed(Event::StepDone(outputs));
    }

    /// The pool-wide check after a step: the cells the worker holds against the scheduler's
    /// count with the step's part. Compared only when no other engine command is pending (what
    /// the scheduler counted is then all the engine was asked to do) and no request failed in
    /// the step (a refused command leaves its sequence unknown until it is released; the next
    /// step compares again). A mismatch is a diagnostic and a counter, never an engine kill.
    fn check_pool(&mut self, reported: Option<u32>, failed: &[RequestId]) {
        if !failed.is_empty() || self.pending_engine_work() {
            return;
        }
        let (Some(reported), Some(expected)) = (reported, self.scheduler.cells_after_step()) else {
            return;
        };
        if u64::from(reported) == expected {
            return;
        }
        self.pool_mismatches += 1;
        self.observation.record(&crate::metrics::Fact::PoolMismatch);
        let message = format!(
            "the engine holds {reported} KV cells after the step, the scheduler counts \
             {expected}: they disagree (a bug; the engine keeps running)"
        );
        tracing::warn!("{message}");
        self.emit(None, super::observed::Observed::Diagnostic { message });
    }

    /// The engine is gone: stop it for good, and let the scheduler fail what it held.
    pub(super) fn engine_lost(&mut self, reason: String) {
        self.engine.blame_cpu_code();
        if !self.engine.kill() {
            return; // already reported
        }
        tracing::warn!("engine lost: {reason}");
        self.emit(
            None,
            super::observed::Observed::EngineLost {
                reason: reason.clone(),
            },
        );
        self.last_failure = Some(reason);
        self.feed(Event::EngineDied);
    }

    /// Ends every stream, stops the engine, and leaves this scheduler's totals to the
    /// service that takes its place.
    async fn stop_everything(&mut self) {
        self.streams.shut_down();
        self.engine.shutdown().await;
        let counters = self.scheduler.snapshot(self.now()).counters;
        let mut kept = self.observation.lock();
        kept.totals_before = super::observation::add(&self.totals_before, &counters);
    }
}

fn engine_facts(handshake: &Handshake, settings: &SchedulerSettings) -> EngineFacts {
    EngineFacts {
        parallel: handshake.slots,
        sequences: handshake.sequences,
        kv_cells_total: handshake.kv_cells,
        context_tokens: handshake.model.n_ctx,
        chunk_tokens: settings.chunk_tokens.unwrap_or(handshake.chunk_tokens),
        trims_at_any_token: handshake.model.trims_at_any_token,
        rewindable_tokens: handshake.model.rewindable_tokens,
    }
}
