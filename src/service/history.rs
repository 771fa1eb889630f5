//! What the actor writes into the event log: each scheduler action as it is decided, each
//! arrival and refusal as it is answered, named by the ids clients see.

use super::actor::Actor;
use super::event_log::{LengthRefusal, LogEntry, LogKind};
use super::handle::{RequestOrigin, SubmitError};
use crate::ids::RequestId;
use crate::scheduler::{Action, FinishReason, ParkCause, ParkPlace};

impl Actor {
    /// The id `id`'s client sees (its route's form; `chatcmpl-N` once it is gone).
    pub(super) fn client_id(&self, id: RequestId) -> String {
        self.streams
            .get(id)
            .map_or(super::Route::ChatCompletions, |l| l.submission.origin.route)
            .client_id(id)
    }

    pub(super) fn note(&mut self, kind: LogKind, request: Option<RequestId>, text: String) {
        let entry = LogEntry {
            at_secs: self.now().as_secs_f64(),
            kind,
            request_id: request,
            client_id: request.map(|id| self.client_id(id)),
            text,
        };
        self.log.push(entry);
    }

    /// A live switch changed, and who changed it (one event per change).
    pub(super) fn note_settings_change(
        &mut self,
        before: &crate::scheduler::SchedulerSettings,
        after: &crate::scheduler::SchedulerSettings,
        by: &str,
    ) {
        let mut what = Vec::new();
        if before.solo_priority != after.solo_priority {
            what.push(format!(
                "preemption (solo_priority) {}",
                if after.solo_priority { "on" } else { "off" }
            ));
        }
        if before.give_way != after.give_way {
            what.push(format!(
                "give_way {}",
                serde_json::json!(after.give_way).as_str().unwrap_or("?")
            ));
        }
        let text = format!("{} by {by}", what.join(", "));
        tracing::info!("settings: {text}");
        self.note(LogKind::SettingsChanged, None, text);
    }

    /// An arrival that was queued.
    pub(super) fn note_arrival(&mut self, id: RequestId) {
        let Some(live) = self.streams.get(id) else {
            return;
        };
        let origin = &live.submission.origin;
        let from = if origin.client.is_empty() {
            String::new()
        } else {
            format!(" from {}", origin.client)
        };
        let priority = self
            .boosted_priority_words(id)
            .unwrap_or_else(|| format!("priority {}", live.submission.priority));
        let text = format!(
            "{} arrived{from}: {} prompt tokens, {priority}",
            self.client_id(id),
            live.submission.prompt.len(),
        );
        self.note(LogKind::Arrived, Some(id), text);
    }

    /// "priority 1: 0 + 1 small-request boost" for a request that has the boost now (the
    /// words of the requests table's why), else `None`.
    fn boosted_priority_words(&self, id: RequestId) -> Option<String> {
        let boost = self.scheduler.boost_of(id);
        let priority = i64::from(self.streams.get(id)?.submission.priority);
        (boost > 0).then(|| {
            format!(
                "priority {}: {priority} + {boost} small-request boost",
                priority + boost
            )
        })
    }

    /// A submission refused before it was queued; a prompt too long for the context is
    /// kept for the dashboard's banner.
    pub(super) fn note_refusal(&mut self, error: &SubmitError, origin: &RequestOrigin) {
        let from = if origin.client.is_empty() {
            String::new()
        } else {
            format!(" from {}", origin.client)
        };
        self.note(
            LogKind::Refused,
            None,
            format!("refused a request{from}: {error}"),
        );
        if let SubmitError::PromptTooLong {
            prompt_tokens,
            max_context_tokens,
        } = *error
        {
            self.last_length_refusal = Some(LengthRefusal {
                at_secs: self.now().as_secs_f64(),
                client: origin.client.clone(),
                route: origin.route,
                prompt_tokens,
                max_context_tokens,
            });
        }
    }

    /// The actions one scheduler call decided, before they run.
    pub(super) fn note_actions(&mut self, actions: &[Action]) {
        for action in actions {
            match action {
                Action::Assign {
                    request,
                    keep_tokens,
                    ..
                } => {
                    let kept = if *keep_tokens > 0 {
                        format!(", {keep_tokens} prompt tokens already held")
                    } else {
                        String::new()
                    };
                    let text = format!("{} got a slot{kept}", self.client_id(*request));
                    self.note(LogKind::Admitted, Some(*request), text);
                }
                Action::Park { request, to, .. } => self.note_park(*request, *to),
                Action::Restore { request, .. } => {
                    self.streams.resumed(*request);
                    let text = format!(
                        "{} resumed where it stopped, nothing lost",
                        self.client_id(*request)
                    );
                    self.note(LogKind::Resumed, Some(*request), text);
                }
                Action::Finish {
                    request,
                    reason,
                    output_tokens,
                    ..
                } => {
                    let name = self.client_id(*request);
                    let ttft = self
                        .streams
                        .get(*request)
                        .and_then(|l| l.ttft_secs())
                        .map_or(String::new(), |t| format!(", first token after {t:.2} s"));
                    let (kind, text) = match reason {
                        FinishReason::Cancelled => (
                            LogKind::Cancelled,
                            format!("{name} was cancelled after {output_tokens} tokens"),
                        ),
                        FinishReason::Stop | FinishReason::Length => (
                            LogKind::Finished,
                            format!(
                                "{name} finished ({}): {output_tokens} tokens{ttft}",
                                if *reason == FinishReason::Stop {
                                    "stop"
                                } else {
                                    "length"
                                }
                            ),
                        ),
                    };
                    self.note(kind, Some(*request), text);
                }
                Action::Fail { request, error, .. } => {
                    let text = format!(
                        "{} failed: {}",
                        self.client_id(*request),
                        super::streams::failure(error)
                    );
                    self.note(LogKind::Failed, Some(*request), text);
                }
                Action::RestartEngine {
                    attempt,
                    delay_secs,
                } => {
                    let text = format!("engine start, attempt {attempt}, in {delay_secs:.0} s");
                    self.note(LogKind::EngineRestart, None, text);
                }
                _ => {}
            }
        }
    }

    /// A park, with why and for whom (the scheduler has just recorded both).
    fn note_park(&mut self, request: RequestId, to: ParkPlace) {
        let view = self
            .scheduler
            .snapshot(self.now())
            .parked
            .into_iter()
            .find(|p| p.request_id == request);
        let name = self.client_id(request);
        let place = match to {
            ParkPlace::Pool(_) => "its cells kept in the pool",
            ParkPlace::HostRam => "saved to host RAM",
        };
        let by = view.as_ref().and_then(|v| v.parked_for);
        let paused = view.as_ref().and_then(|v| v.cause) == Some(ParkCause::Paused);
        // its cost ledger, and the wait the pause saved the one it was paused for
        if !self.streams.parked(request, by.filter(|_| paused)) {
            // parked already: its cells were needed, so its state moved to host RAM
            if to == ParkPlace::HostRam {
                let text = format!("{name}, parked, was moved to host RAM: its cells were needed");
                self.note(LogKind::Parked, Some(request), text);
            }
            return;
        }
        // the boost named where it is why the other one ranks higher
        let by_name = by
            .map(|w| match self.boosted_priority_words(w) {
                Some(words) => format!("{} ({words})", self.client_id(w)),
                None => self.client_id(w),
            })
            .unwrap_or_default();
        let (kind, text) = match view.and_then(|v| v.cause) {
            Some(ParkCause::Paused) => (
                LogKind::Paused,
                format!("{name} was paused for {by_name} ({place})"),
            ),
            Some(ParkCause::GaveWayHigherPriority) => (
                LogKind::GaveWay,
                format!(
                    "{name} gave way to {by_name} at a chunk boundary: higher priority ({place})"
                ),
            ),
            Some(ParkCause::GaveWayShorterLeft) => (
                LogKind::GaveWay,
                format!(
                    "{name} gave way to {by_name} at a chunk boundary: less left to read ({place})"
                ),
            ),
            Some(ParkCause::KvPoolFull) | None => (
                LogKind::Parked,
                format!("{name} was parked: the KV pool was full ({place})"),
            ),
        };
        self.note(kind, Some(request), text);
    }
}
