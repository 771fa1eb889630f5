//! The service actor: the one task that owns the scheduler and the engine worker.
//!
//! Each loop turn takes one input (a command from a handle, the outstanding step's reply, a
//! finished engine start, a tick), turns it into a scheduler event, executes the actions
//! that come back in order, and publishes a snapshot. The scheduler only asks for engine
//! work at a step boundary, so engine commands other than the step itself run while no step
//! is outstanding; a step is sent and its reply awaited in the loop, beside the commands.

use super::ServiceHandle;
use super::handle::{
    ControlError, Failure, Finished, Reply as ControlReply, RequestState, RestartReport,
    ServiceCommand, SettingsChange, StreamEvent, Submission, SubmitError, Usage,
};
use super::live::Live;
use super::snapshot::{EngineStatus, ServiceSnapshot, TtftSample};
use crate::engine::{EngineError, EngineProcess, WorkerLaunch};
use crate::ids::RequestId;
use crate::metrics::{Levels, Metrics};
use crate::protocol::{self, Command, Handshake, Reply};
use crate::scheduler::{
    Action, ConversationId, EngineFacts, Event, FailKind, FinishReason, NewRequest, Refusal,
    RequestStatus, Scheduler, SchedulerSettings, StepOutput,
};
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot, watch};

/// How the service starts its engine and schedules it.
#[derive(Debug, Clone)]
pub struct ServiceOptions {
    pub launch: WorkerLaunch,
    pub settings: SchedulerSettings,
}

/// A `Retry-After` for requests that arrive while the engine loads.
const STARTING_RETRY_SECS: u32 = 5;
/// Failed first starts before the service reports the engine failed (a new request retries).
const FIRST_START_ATTEMPTS: u32 = 3;
const TICK: Duration = Duration::from_millis(250);
/// First-token samples kept for the snapshot's `ttft`.
const TTFT_SAMPLES_MAX: usize = 256;

type StartResult = (u64, Result<EngineProcess, EngineError>);

/// Starts the actor on the current tokio runtime; the engine starts loading at once.
pub fn spawn(options: ServiceOptions) -> ServiceHandle {
    let (commands, rx) = mpsc::unbounded_channel();
    let (snapshot_tx, snapshots) = watch::channel(ServiceSnapshot::starting(
        options.settings.clone(),
        options.launch.options.slots,
        options.launch.options.fake.enabled,
    ));
    let metrics = Arc::new(Metrics::new());
    let (started_tx, started_rx) = mpsc::unbounded_channel();
    let mut actor = Actor {
        options,
        rx,
        snapshot_tx,
        epoch: Instant::now(),
        scheduler: None,
        engine: None,
        handshake: None,
        generation: 0,
        status: EngineStatus::Loading,
        first_start_failures: 0,
        started_tx,
        started_rx,
        live: HashMap::new(),
        open_in_engine: HashSet::new(),
        step_id: None,
        step_due: Instant::now(),
        queue: VecDeque::new(),
        next_id: 1,
        shutting_down: None,
        metrics: metrics.clone(),
        ttft: VecDeque::new(),
        cache_bytes: HashMap::new(),
        cache_hits: 0,
        cache_misses: 0,
    };
    actor.start_engine(Duration::ZERO);
    tokio::spawn(actor.run());
    ServiceHandle {
        commands,
        snapshots,
        metrics,
    }
}

struct Actor {
    options: ServiceOptions,
    rx: mpsc::UnboundedReceiver<ServiceCommand>,
    snapshot_tx: watch::Sender<ServiceSnapshot>,
    epoch: Instant,
    /// Created at the first handshake.
    scheduler: Option<Scheduler>,
    engine: Option<EngineProcess>,
    handshake: Option<Handshake>,
    generation: u64,
    status: EngineStatus,
    first_start_failures: u32,
    started_tx: mpsc::UnboundedSender<StartResult>,
    started_rx: mpsc::UnboundedReceiver<StartResult>,
    live: HashMap<RequestId, Live>,
    /// Requests the engine has open (sampler and sequence or parked state).
    open_in_engine: HashSet<RequestId>,
    /// The command id of the outstanding step.
    step_id: Option<u64>,
    /// When the outstanding step's reply is overdue (the engine is then stopped as silent).
    /// Fixed when the step is sent: each loop turn waits only for what is left of it.
    step_due: Instant,
    /// Actions not executed yet, in order.
    queue: VecDeque<Action>,
    next_id: u64,
    shutting_down: Option<oneshot::Sender<()>>,
    metrics: Arc<Metrics>,
    /// The most recent first tokens, oldest first.
    ttft: VecDeque<TtftSample>,
    /// Bytes of each entry of the engine's host-RAM conversation cache.
    cache_bytes: HashMap<ConversationId, u64>,
    cache_hits: u64,
    cache_misses: u64,
}

impl Actor {
    async fn run(mut self) {
        let mut tick = tokio::time::interval(TICK);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let step_left = self.step_due.saturating_duration_since(Instant::now());
            tokio::select! {
                command = self.rx.recv() => match command {
                    Some(command) => self.on_command(command),
                    None => break,
                },
                reply = recv_step(self.engine.as_mut(), step_left), if self.step_id.is_some() => {
                    self.on_step_reply(reply);
                }
                Some((generation, started)) = self.started_rx.recv() => {
                    self.on_started(generation, started);
                }
                _ = tick.tick() => self.feed(Event::Tick),
            }
            self.execute().await;
            self.publish();
            if let Some(done) = self.shutting_down.take() {
                self.stop_everything().await;
                let _ = done.send(());
                return;
            }
        }
        self.stop_everything().await;
    }

    fn now(&self) -> Duration {
        self.epoch.elapsed()
    }

    fn feed(&mut self, event: Event) {
        let now = self.now();
        let Some(scheduler) = self.scheduler.as_mut() else {
            return;
        };
        let outcome = scheduler.handle(event, now);
        for diagnostic in outcome.diagnostics {
            tracing::warn!("scheduler: {diagnostic}");
        }
        self.queue.extend(outcome.actions);
    }

    fn on_command(&mut self, command: ServiceCommand) {
        match command {
            ServiceCommand::Submit { submission, reply } => self.on_submit(submission, reply),
            ServiceCommand::Cancel(id) => {
                if self.live.contains_key(&id) {
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
                    self.feed(Event::Reprioritised {
                        request: id,
                        priority,
                    });
                    if let Some(live) = self.live.get_mut(&id) {
                        // Later TTFT and queue-time samples count under the new priority.
                        live.submission.priority = priority;
                    }
                }
                let _ = reply.send(state);
            }
            ServiceCommand::ChangeSettings { change, reply } => {
                let _ = reply.send(self.change_settings(change));
            }
            ServiceCommand::RestartEngine { reply } => self.user_restart(reply),
            ServiceCommand::Shutdown(done) => self.shutting_down = Some(done),
        }
    }

    fn request_state(&self, id: RequestId) -> Result<RequestState, ControlError> {
        self.scheduler
            .as_ref()
            .and_then(|s| s.request_state(id))
            .filter(|_| self.live.contains_key(&id))
            .ok_or(ControlError::UnknownRequest(id))
    }

    /// R12: the new settings apply at once; the scheduler checks them against the engine.
    fn change_settings(
        &mut self,
        change: SettingsChange,
    ) -> Result<SchedulerSettings, ControlError> {
        let mut settings = match &self.scheduler {
            Some(s) => s.settings().clone(),
            None => self.options.settings.clone(),
        };
        if let Some(on) = change.solo_priority {
            settings.solo_priority = on;
        }
        if let Some(give_way) = change.give_way {
            settings.give_way = give_way;
        }
        let invalid =
            |e: crate::scheduler::ConfigError| ControlError::InvalidSettings(e.to_string());
        let now = self.now();
        match self.scheduler.as_mut() {
            Some(scheduler) => {
                let outcome = scheduler
                    .set_settings(settings.clone(), now)
                    .map_err(invalid)?;
                for diagnostic in outcome.diagnostics {
                    tracing::warn!("scheduler: {diagnostic}");
                }
                self.queue.extend(outcome.actions);
            }
            None => settings
                .validate_for(self.options.launch.options.slots)
                .map_err(invalid)?,
        }
        tracing::info!(
            "settings changed: solo_priority {}, give_way {:?}",
            settings.solo_priority,
            settings.give_way
        );
        self.options.settings = settings.clone();
        Ok(settings)
    }

    /// R10's user restart: what the engine holds fails with "engine restarted", waiting
    /// requests stay queued for the new engine.
    fn user_restart(&mut self, reply: ControlReply<RestartReport>) {
        let mut report = RestartReport::default();
        let Some(scheduler) = self.scheduler.as_ref() else {
            // No engine ever came up. After failed starts, try again now; while the first
            // start is under way, let it finish (two loads at once may not fit in memory).
            if let EngineStatus::Failed(_) = self.status {
                self.first_start_failures = 0;
                self.status = EngineStatus::Loading;
                self.start_engine(Duration::ZERO);
            } else {
                report.note = Some(crate::scheduler::RESTART_DURING_START.to_owned());
            }
            let _ = reply.send(Ok(report));
            return;
        };
        let mut ids: Vec<RequestId> = self.live.keys().copied().collect();
        ids.sort();
        for id in ids {
            match scheduler.request_state(id) {
                Some(RequestStatus::Waiting) => report.waiting_requests.push(id),
                Some(_) => report.failed_requests.push(id),
                None => {}
            }
        }
        let now = self.now();
        if let Some(scheduler) = self.scheduler.as_mut() {
            let outcome = scheduler.handle(Event::RestartRequested, now);
            report.note = outcome.diagnostics.first().cloned();
            self.queue.extend(outcome.actions);
        }
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
        if self.scheduler.is_none() {
            let error = match self.status.clone() {
                EngineStatus::Failed(reason) => {
                    // The next request tries again.
                    self.first_start_failures = 0;
                    self.status = EngineStatus::Loading;
                    self.start_engine(Duration::ZERO);
                    SubmitError::EngineFailed(reason)
                }
                _ => SubmitError::EngineStarting {
                    retry_after_secs: STARTING_RETRY_SECS,
                },
            };
            let _ = reply.send(Err(error));
            return;
        }
        let id = RequestId(self.next_id);
        self.next_id += 1;
        let new = NewRequest {
            id,
            prompt: submission.prompt.clone(),
            priority: submission.priority,
            priority_given: submission.priority_given,
            max_tokens: submission.max_tokens,
        };
        let before = self.queue.len();
        self.feed(Event::Arrived(new));
        let refused = self.queue.iter().skip(before).find_map(|a| match a {
            Action::Refuse { request, refusal } if *request == id => Some(refusal.clone()),
            _ => None,
        });
        if let Some(refusal) = refused {
            self.queue
                .retain(|a| !matches!(a, Action::Refuse { request, .. } if *request == id));
            let _ = reply.send(Err(submit_error(refusal)));
            return;
        }
        let (events, rx) = mpsc::unbounded_channel();
        self.live.insert(id, Live::new(submission, events));
        if reply.send(Ok((id, rx))).is_err() {
            // The client left before it got its stream: nothing else would ever cancel it.
            self.feed(Event::Cancelled(id));
        }
    }

    fn on_started(&mut self, generation: u64, started: Result<EngineProcess, EngineError>) {
        if generation != self.generation {
            return; // a start that was superseded
        }
        match started {
            Ok(engine) => {
                let handshake = engine.handshake().clone();
                let facts = engine_facts(&handshake, &self.options.settings);
                self.engine = Some(engine);
                self.handshake = Some(handshake);
                self.status = EngineStatus::Ready;
                self.first_start_failures = 0;
                match &mut self.scheduler {
                    None => match Scheduler::new(self.options.settings.clone(), facts) {
                        Ok(scheduler) => self.scheduler = Some(scheduler),
                        Err(e) => self.status = EngineStatus::Failed(e.to_string()),
                    },
                    Some(_) => self.feed(Event::EngineReady(facts)),
                }
            }
            Err(error) => {
                let reason = describe(&error);
                tracing::warn!("engine start failed: {reason}");
                if self.scheduler.is_some() {
                    self.status = EngineStatus::Restarting;
                    self.feed(Event::EngineStartFailed {
                        stderr_tail: reason.clone(),
                    });
                    self.note_engine_down(&reason);
                } else {
                    self.first_start_failures += 1;
                    if self.first_start_failures < FIRST_START_ATTEMPTS {
                        let backoff = Duration::from_millis(500 << self.first_start_failures);
                        self.start_engine(backoff);
                    } else {
                        self.status = EngineStatus::Failed(reason);
                    }
                }
            }
        }
    }

    fn on_step_reply(&mut self, reply: Result<protocol::ReplyLine, EngineError>) {
        let expected = self.step_id.take();
        let done = match reply {
            Ok(line) if line.id == expected => match line.reply {
                Reply::StepDone(done) => done,
                other => {
                    self.engine_lost(format!("the engine refused a step: {other:?}"));
                    return;
                }
            },
            Ok(line) => {
                self.engine_lost(format!("reply {:?} to step {expected:?}", line.id));
                return;
            }
            Err(error) => {
                self.engine_lost(describe(&error));
                return;
            }
        };
        let mut outputs = Vec::with_capacity(done.sampled.len());
        for sampled in done.sampled {
            let Some(live) = self.live.get_mut(&sampled.request) else {
                continue;
            };
            let stopped = live.sampled(&sampled.bytes);
            let eog = sampled.eog && !live.submission.ignore_eos;
            outputs.push(StepOutput {
                request: sampled.request,
                token: Some(sampled.token),
                finished: (eog || stopped).then_some(FinishReason::Stop),
            });
        }
        self.feed(Event::StepDone(outputs));
    }

    /// The engine is gone: stop it for good, and let the scheduler fail what it held.
    fn engine_lost(&mut self, reason: String) {
        let Some(mut engine) = self.engine.take() else {
            return; // already reported
        };
        tracing::warn!("engine lost: {reason}");
        engine.kill();
        self.open_in_engine.clear();
        self.cache_bytes.clear();
        self.step_id = None;
        self.status = EngineStatus::Restarting;
        self.feed(Event::EngineDied);
        self.note_engine_down(&reason);
    }

    /// After a death or a failed restart the scheduler restarts the engine only when work
    /// waits (R10). When it did not, say the engine is down and why, rather than leave
    /// `restarting` showing for an engine that nothing is starting.
    fn note_engine_down(&mut self, reason: &str) {
        if self.scheduler.as_ref().is_some_and(Scheduler::engine_down) {
            self.status = EngineStatus::Failed(format!(
                "{reason}; it starts again on the next request or a restart"
            ));
        }
    }

    fn start_engine(&mut self, delay: Duration) {
        self.generation += 1;
        let generation = self.generation;
        let launch = self.options.launch.clone();
        let tx = self.started_tx.clone();
        tokio::spawn(async move {
            tokio::time::sleep(delay).await;
            let started = EngineProcess::start(&launch, generation).await;
            let _ = tx.send((generation, started));
        });
    }

    /// Executes queued actions in order; engine work waits while a step is outstanding.
    async fn execute(&mut self) {
        while let Some(action) = self.queue.pop_front() {
            if self.step_id.is_some() && needs_engine(&action) {
                self.queue.push_front(action);
                return;
            }
            if self.engine.is_none() && engine_only(&action) {
                // What it would act on died with the engine process.
                continue;
            }
            if let Err(error) = self.execute_one(action).await {
                self.engine_lost(describe(&error));
            }
        }
    }

    async fn execute_one(&mut self, action: Action) -> Result<(), EngineError> {
        match action {
            Action::Refuse { request, .. } => {
                self.live.remove(&request);
            }
            Action::Deliver { request, .. } => {
                if let Some(live) = self.live.get_mut(&request) {
                    live.deliver();
                    let now = Instant::now();
                    if let Some(ttft) = live.note_delivery(now) {
                        let priority = live.submission.priority;
                        self.metrics.observe_ttft(priority, ttft.as_secs_f64());
                        if self.ttft.len() == TTFT_SAMPLES_MAX {
                            self.ttft.pop_front();
                        }
                        self.ttft.push_back(TtftSample {
                            request_id: request,
                            priority,
                            ttft_secs: ttft.as_secs_f64(),
                            at_secs: now.duration_since(self.epoch).as_secs_f64(),
                        });
                    }
                    if live.events.is_closed() {
                        // Its stream is gone without a cancel (a backstop for R9).
                        self.feed(Event::Cancelled(request));
                    }
                }
            }
            Action::Finish {
                request,
                reason,
                output_tokens,
                stats,
            } => {
                self.close_in_engine(request).await?;
                self.request_ended(request, Some(reason), &stats);
                if let Some(mut live) = self.live.remove(&request) {
                    if reason != FinishReason::Cancelled {
                        live.flush();
                    }
                    let usage = Usage {
                        prompt_tokens: live.submission.prompt.len() as u32,
                        completion_tokens: output_tokens,
                        cached_tokens: stats.prompt_tokens_held,
                    };
                    let stop_sequence = live.matched_stop();
                    let _ = live.events.send(StreamEvent::Done(Finished {
                        reason,
                        usage,
                        stop_sequence,
                    }));
                }
            }
            Action::Fail {
                request,
                error,
                stats,
            } => {
                self.close_in_engine(request).await?;
                self.request_ended(request, None, &stats);
                if let Some(live) = self.live.remove(&request) {
                    let _ = live.events.send(StreamEvent::Failed(failure(&error)));
                }
            }
            Action::RestartEngine { delay_secs, .. } => {
                if let Some(engine) = self.engine.take() {
                    engine.shutdown().await;
                }
                self.open_in_engine.clear();
                self.cache_bytes.clear();
                self.status = EngineStatus::Restarting;
                self.start_engine(Duration::from_secs_f64(delay_secs.max(0.0)));
            }
            Action::Step(step) => {
                let chunk = step.chunk.map(|c| {
                    let prompt = self.live.get(&c.request).map(|l| &l.submission.prompt);
                    let tokens = prompt.map_or_else(Vec::new, |p| {
                        p[c.tokens.start as usize..c.tokens.end as usize].to_vec()
                    });
                    protocol::Chunk {
                        request: c.request,
                        tokens,
                        last: c.is_last,
                    }
                });
                let decode: Vec<RequestId> = step.decode.iter().map(|(id, _)| *id).collect();
                let engine = self.engine.as_mut().ok_or(EngineError::NotRunning)?;
                let chunk_tokens = chunk.as_ref().map_or(0, |c| c.tokens.len());
                self.step_due = Instant::now() + engine.step_deadline(chunk_tokens, decode.len());
                self.step_id = Some(engine.send(Command::Step { chunk, decode })?);
            }
            Action::Assign {
                request,
                seq,
                keep_tokens,
            } => {
                let sampling = self
                    .live
                    .get(&request)
                    .map(|l| l.submission.sampling.clone())
                    .unwrap_or_default();
                let opened = self
                    .call(Command::Open {
                        request,
                        seq,
                        keep_tokens,
                        sampling,
                    })
                    .await?;
                self.open_in_engine.insert(request);
                let kept_tokens = match opened {
                    Reply::Opened { kept_tokens, .. } => kept_tokens,
                    _ => keep_tokens,
                };
                if let Some(live) = self.live.get_mut(&request)
                    && !live.admitted
                {
                    live.admitted = true;
                    self.metrics.admitted(kept_tokens);
                    if kept_tokens > 0 {
                        self.cache_hits += 1;
                    } else {
                        self.cache_misses += 1;
                    }
                }
            }
            Action::Release {
                request,
                seq,
                keep_as_conversation,
            } => {
                self.close_in_engine(request).await?;
                if !keep_as_conversation {
                    self.call(Command::Trim {
                        seq,
                        keep_tokens: 0,
                    })
                    .await?;
                }
            }
            Action::Park { request, .. } => {
                self.call(Command::Park { request }).await?;
            }
            Action::Restore {
                request, into_seq, ..
            } => {
                self.call(Command::Restore {
                    request,
                    seq: into_seq,
                })
                .await?;
            }
            Action::DropParked { request, .. } => self.close_in_engine(request).await?,
            Action::EvictConversation {
                seq,
                to_cache: Some(conversation),
            } => {
                // Conversations this batch is about to load must survive the save.
                let keep = self
                    .queue
                    .iter()
                    .filter_map(|a| match a {
                        Action::RestoreConversation { conversation, .. } => Some(conversation.0),
                        _ => None,
                    })
                    .collect();
                let reply = self
                    .call(Command::SaveConversation {
                        seq,
                        key: conversation.0,
                        keep,
                    })
                    .await?;
                if let Reply::ConversationSaved { moved, evicted, .. } = reply {
                    self.cache_bytes.insert(conversation, moved.bytes);
                    let evicted: Vec<ConversationId> =
                        evicted.into_iter().map(ConversationId).collect();
                    for key in &evicted {
                        self.cache_bytes.remove(key);
                    }
                    if !evicted.is_empty() {
                        // The engine's byte bound is tighter than the scheduler's count.
                        self.feed(Event::ConversationsEvicted(evicted));
                    }
                }
            }
            Action::EvictConversation {
                seq,
                to_cache: None,
            } => {
                self.call(Command::Trim {
                    seq,
                    keep_tokens: 0,
                })
                .await?;
            }
            Action::RestoreConversation {
                conversation,
                into_seq,
            } => {
                self.cache_bytes.remove(&conversation);
                self.call(Command::LoadConversation {
                    key: conversation.0,
                    seq: into_seq,
                    take: true,
                })
                .await?;
            }
            Action::DropConversation { conversation } => {
                self.cache_bytes.remove(&conversation);
                self.call(Command::DropConversation {
                    key: conversation.0,
                })
                .await?;
            }
        }
        Ok(())
    }

    /// One engine command and its reply. A refusal here means host and engine disagree about
    /// the engine's state: the engine is treated as lost (the scheduler fails what it held).
    async fn call(&mut self, command: Command) -> Result<Reply, EngineError> {
        let engine = self.engine.as_mut().ok_or(EngineError::NotRunning)?;
        let deadline = engine.step_deadline(0, 1);
        engine.call(command, deadline).await
    }

    async fn close_in_engine(&mut self, request: RequestId) -> Result<(), EngineError> {
        if self.open_in_engine.remove(&request) && self.engine.is_some() {
            self.call(Command::Close { request }).await?;
        }
        Ok(())
    }

    /// A request ended: its metrics.
    fn request_ended(
        &self,
        request: RequestId,
        reason: Option<FinishReason>,
        stats: &crate::scheduler::RequestStats,
    ) {
        let Some(live) = self.live.get(&request) else {
            return;
        };
        if let Some(wait) = stats.queue_wait_secs {
            self.metrics
                .observe_queue_time(live.submission.priority, wait);
        }
        self.metrics.request_ended(
            reason,
            stats.prompt_tokens_read,
            stats.prompt_tokens_held,
            stats.output_tokens,
        );
    }

    /// Publishes the current view. The value is always replaced; watchers are woken only
    /// when something other than the clock changed.
    fn publish(&mut self) {
        let now = self.now();
        let wall = Instant::now();
        let handshake = self.handshake.as_ref();
        let parallel = handshake.map_or(self.options.launch.options.slots, |h| h.slots);
        let mut snapshot = ServiceSnapshot::starting(
            self.options.settings.clone(),
            parallel,
            self.options.launch.options.fake.enabled,
        );
        snapshot.uptime_secs = now.as_secs_f64();
        snapshot.engine.status = self.status.clone();
        snapshot.engine.model = handshake.map(|h| h.model.name.clone()).unwrap_or_default();
        snapshot.engine.context_tokens = handshake.map_or(0, |h| h.model.n_ctx);
        snapshot.engine.generation = self.generation;
        let scheduled = self.scheduler.as_ref().map(|s| s.snapshot(now));
        if let Some(scheduled) = &scheduled {
            let live = &self.live;
            snapshot.set_scheduler(scheduled, |id| {
                live.get(&id).and_then(|l| l.tokens_per_sec(wall))
            });
        }
        snapshot.conversation_cache.bytes = self.cache_bytes.values().sum();
        snapshot.conversation_cache.hits = self.cache_hits;
        snapshot.conversation_cache.misses = self.cache_misses;
        snapshot.ttft = self.ttft.iter().cloned().collect();
        let running = snapshot
            .slots
            .iter()
            .filter(|s| s.request_id.is_some())
            .count();
        self.metrics.sync(
            &scheduled.map(|s| s.counters).unwrap_or_default(),
            &Levels {
                waiting: snapshot.waiting.len(),
                running,
                parked: snapshot.parked.len(),
                kv_cells_used: snapshot.engine.kv_cells_used,
                kv_cells_total: u64::from(snapshot.engine.kv_cells_total),
                conversation_cache_entries: snapshot.conversation_cache.entries,
                conversation_cache_bytes: snapshot.conversation_cache.bytes,
                engine_up: snapshot.engine.status == EngineStatus::Ready,
                model: snapshot.engine.model.clone(),
            },
        );
        self.snapshot_tx.send_if_modified(|current| {
            let changed = current.without_clock() != snapshot.without_clock();
            *current = snapshot;
            changed
        });
    }

    async fn stop_everything(&mut self) {
        for (_, live) in self.live.drain() {
            let _ = live.events.send(StreamEvent::Failed(Failure::ShuttingDown));
        }
        if let Some(engine) = self.engine.take() {
            engine.shutdown().await;
        }
    }
}

async fn recv_step(
    engine: Option<&mut EngineProcess>,
    deadline: Duration,
) -> Result<protocol::ReplyLine, EngineError> {
    match engine {
        Some(engine) => engine.recv(deadline).await,
        None => Err(EngineError::NotRunning),
    }
}

/// Actions that act only on the engine's state (nothing to do without an engine).
fn engine_only(action: &Action) -> bool {
    !matches!(
        action,
        Action::Refuse { .. }
            | Action::Deliver { .. }
            | Action::RestartEngine { .. }
            | Action::Finish { .. }
            | Action::Fail { .. }
    )
}

/// Actions that may talk to the engine (so wait while a step is outstanding).
fn needs_engine(action: &Action) -> bool {
    !matches!(
        action,
        Action::Refuse { .. } | Action::Deliver { .. } | Action::RestartEngine { .. }
    )
}

fn engine_facts(handshake: &Handshake, settings: &SchedulerSettings) -> EngineFacts {
    EngineFacts {
        parallel: handshake.slots,
        // The worker parks to host RAM; it keeps no spare sequences.
        spare_seqs: 0,
        kv_cells_total: handshake.kv_cells,
        context_tokens: handshake.model.n_ctx,
        chunk_tokens: settings.chunk_tokens.unwrap_or(handshake.chunk_tokens),
        trims_at_any_token: handshake.model.trims_at_any_token,
        turn_token: handshake.model.turn_token,
    }
}

fn describe(error: &EngineError) -> String {
    error.to_string()
}

fn submit_error(refusal: Refusal) -> SubmitError {
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
    }
}

fn failure(error: &FailKind) -> Failure {
    match error {
        FailKind::EngineDied => {
            Failure::Engine("the engine worker died while serving this request".into())
        }
        FailKind::EngineRestarted => Failure::Engine("engine restarted".into()),
        FailKind::EngineUnavailable { stderr_tail } => {
            Failure::Engine(format!("the engine could not be started: {stderr_tail}"))
        }
        FailKind::EngineProtocol => Failure::Engine("the engine broke the protocol".into()),
        FailKind::PromptTooLong {
            prompt_tokens,
            max_context_tokens,
        } => Failure::PromptTooLong {
            prompt_tokens: *prompt_tokens,
            max_context_tokens: *max_context_tokens,
        },
    }
}
