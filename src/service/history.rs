//! What the actor emits into the observation stream (`observed`): each scheduler action as it
//! is decided, each arrival and refusal as it is answered, named by the ids clients see.

use super::actor::Actor;
use super::event_log::{LengthRefusal, LogEntry};
use super::handle::{RequestOrigin, SubmitError};
use super::observed::{GaveWayRule, Observed, ParkReason, Winner};
use crate::ids::RequestId;
use crate::scheduler::{Action, FinishReason, ParkCause, ParkPlace, ParkedIn, RequestStats};

impl Actor {
    /// The id `id`'s client sees (its route's form; `chatcmpl-N` once it is gone).
    pub(super) fn client_id(&self, id: RequestId) -> String {
        self.streams
            .get(id)
            .map_or(super::Route::ChatCompletions, |l| l.submission.origin.route)
            .client_id(id)
    }

    /// The one place an event is emitted: its line in the log of the app's run, which takes
    /// the views from it (an ended request's record for `finished[]` and the `cost` sums, the
    /// cache's hits) and feeds the metrics.
    pub(super) fn emit(&mut self, request: Option<RequestId>, event: Observed) {
        let client_id = request.map(|id| self.client_id(id));
        let entry = LogEntry {
            at_secs: self.now().as_secs_f64(),
            kind: event.kind(),
            request_id: request,
            text: event.words(client_id.as_deref().unwrap_or_default()),
            client_id,
            seq: 0,
            event,
        };
        self.observation.emit(entry);
    }

    /// A live switch changed, and who changed it (one event per change).
    pub(super) fn note_settings_change(
        &mut self,
        before: &crate::scheduler::SchedulerSettings,
        after: &crate::scheduler::SchedulerSettings,
        by: &str,
    ) {
        let event = Observed::SettingsChanged {
            by: by.to_owned(),
            solo_priority: (before.solo_priority != after.solo_priority)
                .then_some(after.solo_priority),
            give_way: (before.give_way != after.give_way).then_some(after.give_way),
        };
        tracing::info!("settings: {}", event.words(""));
        self.emit(None, event);
    }

    /// An arrival that was queued.
    pub(super) fn note_arrival(&mut self, id: RequestId) {
        let Some(live) = self.streams.get(id) else {
            return;
        };
        let event = Observed::Arrived {
            client: live.submission.origin.client.clone(),
            prompt_tokens: live.submission.prompt.len() as u32,
            priority: live.submission.priority,
            boost: self.scheduler.boost_of(id),
        };
        self.emit(Some(id), event);
    }

    /// `id` as it ranks now (its priority and small-request boost), named by its client id.
    fn winner(&self, id: RequestId) -> Winner {
        Winner {
            client_id: self.client_id(id),
            priority: self.streams.get(id).map_or(0, |l| l.submission.priority),
            boost: self.scheduler.boost_of(id),
        }
    }

    /// A submission refused before it was queued; a prompt too long for the context is
    /// kept for the dashboard's banner.
    pub(super) fn note_refusal(&mut self, error: &SubmitError, origin: &RequestOrigin) {
        let event = Observed::Refused {
            client: origin.client.clone(),
            error: error.to_string(),
        };
        self.emit(None, event);
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
                    let event = Observed::Admitted {
                        prompt_tokens_held: *keep_tokens,
                    };
                    self.emit(Some(*request), event);
                }
                Action::Park { request, to, .. } => self.note_park(*request, *to),
                Action::Restore { request, .. } => {
                    self.streams.resumed(*request);
                    self.emit(Some(*request), Observed::Resumed);
                }
                Action::Finish {
                    request,
                    reason,
                    stats,
                    ..
                } => self.note_end(*request, Some(*reason), stats, None),
                Action::Fail {
                    request,
                    error,
                    stats,
                } => {
                    let error = super::streams::failure(error).to_string();
                    self.note_end(*request, None, stats, Some(error));
                }
                Action::RestartEngine {
                    attempt,
                    delay_secs,
                } => {
                    let event = Observed::EngineStart {
                        attempt: *attempt,
                        delay_secs: *delay_secs,
                    };
                    self.emit(None, event);
                }
                _ => {}
            }
        }
    }

    /// A request ended (`None`: it failed): its figures, as the stream closes.
    fn note_end(
        &mut self,
        request: RequestId,
        reason: Option<FinishReason>,
        stats: &RequestStats,
        error: Option<String>,
    ) {
        if let Some(figures) = self.streams.figures(request, reason, stats) {
            self.emit(Some(request), Observed::Ended { figures, error });
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
        let parked_in = match to {
            ParkPlace::Pool(_) => ParkedIn::Spare,
            ParkPlace::HostRam => ParkedIn::HostRam,
        };
        let by = view.as_ref().and_then(|v| v.parked_for);
        let cause = view.and_then(|v| v.cause);
        // its cost ledger, and the wait the pause saved the one it was paused for
        let paused = cause == Some(ParkCause::Paused);
        if !self.streams.parked(request, by.filter(|_| paused)) {
            // parked already: its cells were needed, so its state moved to host RAM
            if to == ParkPlace::HostRam {
                let event = Observed::Parked {
                    reason: ParkReason::CellsNeeded,
                    parked_in,
                };
                self.emit(Some(request), event);
            }
            return;
        }
        let winner = || by.map(|w| self.winner(w));
        let event = match (cause, winner()) {
            (Some(ParkCause::Paused), Some(paused_for)) => Observed::Paused {
                paused_for,
                parked_in,
            },
            (Some(ParkCause::GaveWayHigherPriority), Some(gave_way_to)) => Observed::GaveWay {
                gave_way_to,
                rule: GaveWayRule::HigherPriority,
                parked_in,
            },
            (Some(ParkCause::GaveWayShorterLeft), Some(gave_way_to)) => Observed::GaveWay {
                gave_way_to,
                rule: GaveWayRule::LessLeftToRead,
                parked_in,
            },
            _ => Observed::Parked {
                reason: ParkReason::KvPoolFull,
                parked_in,
            },
        };
        self.emit(Some(request), event);
    }
}
