//! The engine's events (R10): ready (the handshake's facts), death or a user restart, a failed
//! start, and the refusals while no engine can take an arrival (the first is starting, or the
//! starts failed).

use crate::ids::RequestId;

use super::lifecycle::Phase;
use super::types::{Action, EngineFacts, FailKind, ParkPlace, Refusal};
use super::{EngineState, Scheduler};

/// The `Retry-After` of a request refused while the first engine loads.
pub const ENGINE_STARTING_RETRY_SECS: u32 = 5;

/// The diagnostic for a user restart while a start is under way (ignored: the start stands).
pub const RESTART_DURING_START: &str =
    "restart requested while the engine is starting; the start under way stands";

/// The diagnostic for an engine death while the engine is failed (no engine runs: nothing
/// starts).
pub const DIED_WHILE_FAILED: &str =
    "engine died while failed, but none was running; it starts on a user restart";

impl Scheduler {
    /// The refusal of an arrival no engine can take, checked before anything else (R10):
    /// after `restart_attempts_max` failed starts the reason, and nothing starts or queues
    /// (a retrying client would otherwise start a failing engine again and again); before the
    /// first engine came up nothing can be checked against a context, so `engine_starting`.
    pub(crate) fn refusal_without_engine(&self) -> Option<Refusal> {
        if let EngineState::Failed { reason } = &self.engine {
            return Some(Refusal::EngineUnavailable {
                stderr_tail: reason.clone(),
            });
        }
        (!self.ever_ready).then_some(Refusal::EngineStarting {
            retry_after_secs: ENGINE_STARTING_RETRY_SECS,
        })
    }

    /// A new start, the first of a new run of attempts.
    pub(crate) fn start_again(&mut self) {
        self.engine = EngineState::Starting { attempt: 1 };
        self.out.actions.push(Action::RestartEngine {
            attempt: 1,
            delay_secs: 0.0,
        });
    }

    /// R10: engine death or a user restart. Everything the engine held fails; waiting requests
    /// stay queued; parked state is never restored into a new engine.
    pub(crate) fn on_engine_lost(&mut self, kind: FailKind) {
        let user = kind == FailKind::EngineRestarted;
        match self.engine {
            EngineState::Starting { .. } => {
                // nothing is in an engine that is still starting
                if user {
                    self.diag(RESTART_DURING_START.to_string());
                } else {
                    self.on_start_failed("the engine died while starting".to_string());
                }
                return;
            }
            EngineState::Failed { .. } => {
                // no engine runs and nothing waits (the failure failed the waiting): the
                // user's retry is the one thing that starts a new run of attempts
                if user {
                    self.start_again();
                } else {
                    self.diag(DIED_WHILE_FAILED.to_string());
                }
                return;
            }
            EngineState::Ready | EngineState::Down => {}
        }
        self.outstanding = None;
        self.lane = None;
        let held: Vec<RequestId> = self
            .requests
            .values()
            .filter(|r| r.phase != Phase::Waiting)
            .map(|r| r.id)
            .collect();
        for id in held {
            // a request parked in its sequence went with the engine's pool
            if let Some(Phase::Parked {
                place: ParkPlace::HostRam,
                ..
            }) = self.requests.get(&id).map(|r| &r.phase)
            {
                self.out.actions.push(Action::DropParked {
                    request: id,
                    place: ParkPlace::HostRam,
                });
            }
            self.fail(id, kind.clone());
        }
        for (cid, _) in std::mem::take(&mut self.host_cache) {
            self.out
                .actions
                .push(Action::DropConversation { conversation: cid });
        }
        self.rebuild_slots();
        if self.engine == EngineState::Ready || user {
            if user || !self.waiting.is_empty() {
                self.start_again();
            } else {
                self.engine = EngineState::Down;
            }
        }
    }

    pub(crate) fn on_start_failed(&mut self, stderr_tail: String) {
        let EngineState::Starting { attempt } = self.engine else {
            self.diag("engine start failed, but no start was under way".to_string());
            return;
        };
        if attempt >= self.settings.restart_attempts_max {
            // Failed, not Down: the next arrival must not start it again (R10), so an agent
            // retrying on 503 does not pay for a failing start each time.
            for id in self.waiting.clone() {
                self.fail(
                    id,
                    FailKind::EngineUnavailable {
                        stderr_tail: stderr_tail.clone(),
                    },
                );
            }
            self.engine = EngineState::Failed {
                reason: stderr_tail,
            };
        } else {
            let next = attempt + 1;
            self.engine = EngineState::Starting { attempt: next };
            let delay =
                self.settings.restart_backoff_secs * f64::from(1u32 << (attempt - 1).min(10));
            self.out.actions.push(Action::RestartEngine {
                attempt: next,
                delay_secs: delay,
            });
        }
    }

    pub(crate) fn on_ready(&mut self, facts: EngineFacts) {
        if self.requests.values().any(|r| r.phase != Phase::Waiting) {
            self.diag("engine ready while requests are in the engine; facts ignored".to_string());
            self.engine = EngineState::Ready;
            return;
        }
        if !self.ever_ready {
            // The first engine: its facts replace the placeholders, or it counts as a failed
            // start (there are no earlier facts to keep).
            if let Err(e) = super::validate_facts(&facts) {
                self.on_start_failed(format!("the engine's facts were refused: {e}"));
                return;
            }
        } else if self.engine != EngineState::Ready {
            self.counters.engine_restarts += 1;
        }
        self.ever_ready = true;
        match super::validate_facts(&facts) {
            Ok(()) => {
                if self.settings.solo_priority && facts.parallel >= 2 {
                    self.diag(format!(
                        "solo_priority turned off: the engine came up with parallel: {}",
                        facts.parallel
                    ));
                    self.settings.solo_priority = false;
                }
                self.facts = facts;
            }
            Err(e) => self.diag(format!("engine facts refused, keeping the old ones: {e}")),
        }
        self.rebuild_slots();
        self.engine = EngineState::Ready;
        self.recheck_waiting();
    }

    /// R11's arrival checks again for the waiting, against the context now in force (a new
    /// handshake may bring a smaller one): a prompt that no longer fits fails with the
    /// context-length error, a `max_tokens` over the new room is clamped to it.
    pub(crate) fn recheck_waiting(&mut self) {
        let ctx = self.context_tokens();
        for id in self.waiting.clone() {
            let Some(r) = self.requests.get_mut(&id) else {
                continue;
            };
            let len = r.prompt_len();
            if len >= ctx {
                self.fail(
                    id,
                    FailKind::PromptTooLong {
                        prompt_tokens: len,
                        max_context_tokens: ctx - 1,
                    },
                );
                continue;
            }
            r.max_tokens = r.max_tokens.min(ctx - len);
        }
    }
}
