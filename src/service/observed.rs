//! The one observation stream: what happened, typed, with the ids clients see. The actor
//! emits each event once (`Actor::emit`); the log's line is its words, `/v1/scheduler/events`
//! sends it as an `observed` event, the ended requests' record (`finished[]`, the `cost` sums)
//! and `/metrics`' per-request histograms are taken from its `ended` events. No prompt text.

use super::cost::FinishedRequest;
use super::event_log::LogKind;
use crate::scheduler::{GiveWay, ParkedIn};
use serde::Serialize;

/// The request another one was paused for or gave way to, as it ranked then.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Winner {
    pub client_id: String,
    /// The priority it asked for (or was given), and the small-request boost on top (R7).
    pub priority: i32,
    pub boost: i64,
}

/// Which rule made a prompt read give way at a chunk boundary (R4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum GaveWayRule {
    HigherPriority,
    LessLeftToRead,
}

/// Why a request was parked other than for another request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ParkReason {
    /// The KV pool was full.
    KvPoolFull,
    /// It was parked already; its cells were needed, so its state moved to host RAM.
    CellsNeeded,
}

/// One event of the stream. Serialized with a `type` field (`arrived`, `paused`, ...).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Observed {
    Arrived {
        /// Who sent it (the API key's name or the User-Agent's product; may be empty).
        client: String,
        prompt_tokens: u32,
        priority: i32,
        /// The small-request boost it has on arrival (0 without).
        boost: i64,
    },
    Admitted {
        /// Prompt tokens the engine already held (a kept conversation's prefix).
        prompt_tokens_held: u32,
    },
    Paused {
        paused_for: Winner,
        parked_in: ParkedIn,
    },
    GaveWay {
        gave_way_to: Winner,
        rule: GaveWayRule,
        parked_in: ParkedIn,
    },
    Parked {
        reason: ParkReason,
        parked_in: ParkedIn,
    },
    Resumed,
    /// It ended (stopped, at its length, cancelled or failed), with its figures.
    Ended {
        figures: FinishedRequest,
        /// What failed, for `failed`.
        error: Option<String>,
    },
    Refused {
        client: String,
        error: String,
    },
    EngineStart {
        attempt: u32,
        delay_secs: f64,
    },
    /// An engine came up and serves: its model, its context and its CPU code (a fresh start
    /// said nothing in the log before, #62).
    EngineReady {
        model: String,
        context_tokens: u32,
        cpu_code: String,
    },
    /// The engine was lost: it died, broke the protocol or did not answer in time.
    EngineLost {
        reason: String,
    },
    /// A start of the engine failed (R10 retries, then the engine stays failed until a
    /// retry): why, in the worker's words.
    EngineStartFailed {
        attempt: u32,
        reason: String,
    },
    /// A live switch changed: the new values of those that changed, and who changed them.
    SettingsChanged {
        by: String,
        solo_priority: Option<bool>,
        give_way: Option<GiveWay>,
    },
    /// The control plane started this service's engine with new settings (an apply from
    /// the window): the config keys that changed, with their new values.
    Applied {
        changed: serde_json::Map<String, serde_json::Value>,
    },
    /// An apply's engine did not start, so this service runs the previous settings again:
    /// the keys that were asked for, and why they did not start.
    ApplyFailed {
        changed: serde_json::Map<String, serde_json::Value>,
        reason: String,
    },
    /// Something that should not happen and was survived.
    Diagnostic {
        message: String,
    },
}

impl Observed {
    /// The log's kind of line.
    pub fn kind(&self) -> LogKind {
        match self {
            Self::Arrived { .. } => LogKind::Arrived,
            Self::Admitted { .. } => LogKind::Admitted,
            Self::Paused { .. } => LogKind::Paused,
            Self::GaveWay { .. } => LogKind::GaveWay,
            Self::Parked { .. } => LogKind::Parked,
            Self::Resumed => LogKind::Resumed,
            Self::Ended { figures, .. } => match figures.outcome {
                "cancelled" => LogKind::Cancelled,
                "failed" => LogKind::Failed,
                _ => LogKind::Finished,
            },
            Self::Refused { .. } => LogKind::Refused,
            Self::EngineStart { .. } | Self::EngineReady { .. } => LogKind::EngineRestart,
            Self::EngineLost { .. } | Self::EngineStartFailed { .. } => LogKind::EngineLost,
            Self::SettingsChanged { .. } | Self::Applied { .. } | Self::ApplyFailed { .. } => {
                LogKind::SettingsChanged
            }
            Self::Diagnostic { .. } => LogKind::Diagnostic,
        }
    }

    /// The log's line: `name` is the client id of the request it is about.
    pub fn words(&self, name: &str) -> String {
        match self {
            Self::Arrived {
                client,
                prompt_tokens,
                priority,
                boost,
            } => format!(
                "{name} arrived{}: {prompt_tokens} prompt tokens, {}",
                from(client),
                priority_words(*priority, *boost)
            ),
            Self::Admitted { prompt_tokens_held } => {
                let kept = if *prompt_tokens_held > 0 {
                    format!(", {prompt_tokens_held} prompt tokens already held")
                } else {
                    String::new()
                };
                format!("{name} got a slot{kept}")
            }
            Self::Paused {
                paused_for,
                parked_in,
            } => format!(
                "{name} was paused for {} ({})",
                winner_words(paused_for),
                place(*parked_in)
            ),
            Self::GaveWay {
                gave_way_to,
                rule,
                parked_in,
            } => format!(
                "{name} gave way to {} at a chunk boundary: {} ({})",
                winner_words(gave_way_to),
                match rule {
                    GaveWayRule::HigherPriority => "higher priority",
                    GaveWayRule::LessLeftToRead => "less left to read",
                },
                place(*parked_in)
            ),
            Self::Parked {
                reason: ParkReason::KvPoolFull,
                parked_in,
            } => format!(
                "{name} was parked: the KV pool was full ({})",
                place(*parked_in)
            ),
            Self::Parked {
                reason: ParkReason::CellsNeeded,
                ..
            } => format!("{name}, parked, was moved to host RAM: its cells were needed"),
            Self::Resumed => format!("{name} resumed where it stopped, nothing lost"),
            Self::Ended { figures, error } => {
                let tokens = figures.output_tokens;
                match figures.outcome {
                    "cancelled" => format!("{name} was cancelled after {tokens} tokens"),
                    "failed" => format!("{name} failed: {}", error.as_deref().unwrap_or("?")),
                    outcome => {
                        let ttft = figures
                            .ttft_secs
                            .map_or(String::new(), |t| format!(", first token after {t:.2} s"));
                        format!("{name} finished ({outcome}): {tokens} tokens{ttft}")
                    }
                }
            }
            Self::Refused { client, error } => {
                format!("refused a request{}: {error}", from(client))
            }
            Self::EngineStart {
                attempt,
                delay_secs,
            } => format!("engine start, attempt {attempt}, in {delay_secs:.0} s"),
            Self::EngineReady {
                model,
                context_tokens,
                cpu_code,
            } => {
                let cpu = if cpu_code.is_empty() {
                    String::new()
                } else {
                    format!(", {cpu_code}")
                };
                format!("engine ready: {model}, context {context_tokens} tokens{cpu}")
            }
            Self::EngineLost { reason } => format!("engine lost: {reason}"),
            Self::EngineStartFailed { attempt, reason } => {
                format!("engine start failed (attempt {attempt}): {reason}")
            }
            Self::SettingsChanged {
                by,
                solo_priority,
                give_way,
            } => {
                let mut what = Vec::new();
                if let Some(on) = solo_priority {
                    what.push(format!(
                        "preemption (solo_priority) {}",
                        if *on { "on" } else { "off" }
                    ));
                }
                if let Some(give_way) = give_way {
                    what.push(format!(
                        "give_way {}",
                        serde_json::json!(give_way).as_str().unwrap_or("?")
                    ));
                }
                format!("{} by {by}", what.join(", "))
            }
            Self::Applied { changed } => {
                format!(
                    "settings applied with a new engine: {}",
                    keys_words(changed)
                )
            }
            Self::ApplyFailed { changed, reason } => format!(
                "the settings asked ({}) did not start, so the previous settings run again: \
                 {reason}",
                keys_words(changed)
            ),
            Self::Diagnostic { message } => message.clone(),
        }
    }
}

/// "priority 1: 0 + 1 small-request boost" with a boost, else "priority 0" (the words of the
/// requests table's why).
pub fn priority_words(priority: i32, boost: i64) -> String {
    let priority = i64::from(priority);
    if boost > 0 {
        format!(
            "priority {}: {priority} + {boost} small-request boost",
            priority + boost
        )
    } else {
        format!("priority {priority}")
    }
}

/// The winner named with its boost where it has one (the boost is why it ranks higher).
fn winner_words(w: &Winner) -> String {
    if w.boost > 0 {
        format!("{} ({})", w.client_id, priority_words(w.priority, w.boost))
    } else {
        w.client_id.clone()
    }
}

/// "model /m/b.gguf, ctx 4096", in the order given (strings without their quotes).
fn keys_words(changed: &serde_json::Map<String, serde_json::Value>) -> String {
    if changed.is_empty() {
        return "nothing changed".to_owned();
    }
    let pairs: Vec<String> = changed
        .iter()
        .map(|(key, value)| match value {
            serde_json::Value::String(s) => format!("{key} {s}"),
            other => format!("{key} {other}"),
        })
        .collect();
    pairs.join(", ")
}

fn from(client: &str) -> String {
    if client.is_empty() {
        String::new()
    } else {
        format!(" from {client}")
    }
}

fn place(parked_in: ParkedIn) -> &'static str {
    match parked_in {
        ParkedIn::Spare => "its cells kept in the pool",
        ParkedIn::HostRam => "saved to host RAM",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pause_names_its_winner_with_the_boost_that_made_it_rank_higher() {
        let paused = Observed::Paused {
            paused_for: Winner {
                client_id: "chatcmpl-9".into(),
                priority: 0,
                boost: 1,
            },
            parked_in: ParkedIn::Spare,
        };
        assert_eq!(
            paused.words("chatcmpl-3"),
            "chatcmpl-3 was paused for chatcmpl-9 (priority 1: 0 + 1 small-request boost) \
             (its cells kept in the pool)"
        );
        assert_eq!(paused.kind(), LogKind::Paused);
        let json = serde_json::to_value(&paused).unwrap();
        assert_eq!(json["type"], "paused");
        assert_eq!(json["paused_for"]["client_id"], "chatcmpl-9");
        assert_eq!(json["parked_in"], "spare");
    }

    #[test]
    fn a_settings_change_names_only_what_changed_and_who() {
        let changed = Observed::SettingsChanged {
            by: "the dashboard".into(),
            solo_priority: Some(true),
            give_way: None,
        };
        assert_eq!(
            changed.words(""),
            "preemption (solo_priority) on by the dashboard"
        );
    }

    #[test]
    fn an_apply_names_the_keys_it_changed_and_a_failed_one_why() {
        let mut changed = serde_json::Map::new();
        changed.insert("model".into(), serde_json::json!("/m/b.gguf"));
        changed.insert("ctx".into(), serde_json::json!(4096));
        let applied = Observed::Applied {
            changed: changed.clone(),
        };
        assert_eq!(
            applied.words(""),
            "settings applied with a new engine: model /m/b.gguf, ctx 4096"
        );
        let failed = Observed::ApplyFailed {
            changed,
            reason: "it could not load the model".into(),
        };
        assert!(
            failed
                .words("")
                .ends_with("run again: it could not load the model"),
            "{}",
            failed.words("")
        );
        assert_eq!(
            serde_json::to_value(&failed).unwrap()["type"],
            "apply_failed"
        );
    }
}
