//! The engine's events (R10): ready (the handshake's facts), death or a user restart, a failed
//! start, and the refusals while no engine has come up yet.

use crate::ids::RequestId;

use super::lifecycle::Phase;
use super::types::{Action, EngineFacts, FailKind, ParkPlace, Refusal};
use super::{EngineState, Scheduler};

/// The `Retry-After` of a request refused while the first engine loads.
pub const ENGINE_STARTING_RETRY_SECS: u32 = 5;

/// The diagnostic for a user restart while a start is under way (ignored: the start stands).
pub const RESTART_DURING_START: &str =
    "restart requested while the engine is starting; the start under way stands";

impl Scheduler {
    /// Before the first engine came up nothing can be checked against a context: an arrival
    /// is refused while the first start is under way, and after it failed for good the
    /// refusal carries the worker's last words and the engine starts again (R10).
    pub(crate) fn refuse_before_first_start(&mut self) -> Refusal {
        match self.engine {
            EngineState::Down => {
                self.start_again();
                Refusal::EngineUnavailable {
                    stderr_tail: self.last_start_failure.clone().unwrap_or_default(),
                }
            }
            EngineState::Starting { .. } | EngineState::Ready => Refusal::EngineStarting {
                retry_after_secs: ENGINE_STARTING_RETRY_SECS,
            },
        }
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
        if let EngineState::Starting { .. } = self.engine {
            // nothing is in an engine that is still starting
            if user {
                self.diag(RESTART_DURING_START.to_string());
            } else {
                self.on_start_failed("the engine died while starting".to_string());
            }
            return;
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
        self.last_start_failure = Some(stderr_tail.clone());
        if attempt >= self.settings.restart_attempts_max {
            self.engine = EngineState::Down;
            for id in self.waiting.clone() {
                self.fail(
                    id,
                    FailKind::EngineUnavailable {
                        stderr_tail: stderr_tail.clone(),
                    },
                );
            }
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
        self.last_start_failure = None;
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
