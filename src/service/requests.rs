//! The requests table of `/v1/scheduler` (`requests[]`) and the dashboard: one row per live
//! request (waiting, reading, decoding, parked) with the id its client sees, who sent it, its
//! effective priority and progress, and a plain-words `why` for where it stands. Built from
//! the published snapshot's scheduler views and what the service knows of each request; pure,
//! so its sentences are tested on made-up snapshots.

use super::handle::{RequestOrigin, Route};
use super::snapshot::{EngineStatus, ServiceSnapshot};
use crate::ids::RequestId;
use crate::scheduler::{GiveWay, Mode, ParkCause, PauseVerdict, RequestStatus, SlotStatus};
use serde::Serialize;
use std::collections::HashMap;

/// One live request as the table shows it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RequestRow {
    pub request_id: RequestId,
    /// The id its client sees (`chatcmpl-7`, `resp_7`, `msg_7`).
    pub client_id: String,
    /// The API key's `name`, else the User-Agent's product, else empty.
    pub client: String,
    pub route: Route,
    pub state: RequestStatus,
    pub priority: i32,
    /// `priority` + `boost` + `aging`.
    pub effective_priority: i64,
    pub boost: i64,
    pub aging: i64,
    /// Seconds since it arrived.
    pub elapsed_secs: f64,
    /// Seconds in its present wait (waiting or parked; 0 while it runs).
    pub waited_secs: f64,
    /// Times it was parked so far (paused, gave way, or the pool was full), and the time
    /// parked in all, the present park included.
    pub parks: u32,
    pub parked_secs: f64,
    pub prompt_tokens: u32,
    /// Prompt tokens its sequence holds so far (the whole prompt once decoding).
    pub read_tokens: u32,
    pub generated_tokens: u32,
    /// The output limit it asked for (`null`: none given).
    pub max_tokens: Option<u32>,
    pub tokens_per_sec: Option<f64>,
    /// Reading its prompt with the lane: seconds left at the engine's prompt rate.
    pub read_secs_left: Option<f64>,
    /// Decoding under `solo_priority`: seconds until a higher priority may pause it.
    pub pausable_in_secs: Option<f64>,
    /// Where it stands and why, in words, naming the other requests by their client ids.
    pub why: String,
}

/// What the service knows of a live request beside the scheduler's view.
#[derive(Debug, Clone, Default)]
pub struct LiveFacts {
    pub origin: RequestOrigin,
    pub prompt_tokens: u32,
    pub max_tokens: Option<u32>,
    pub elapsed_secs: f64,
    pub parks: u32,
    pub parked_secs: f64,
}

/// The rows, running first (slot order), then parked, then waiting (the scheduler's order).
pub fn request_rows(
    s: &ServiceSnapshot,
    facts: impl Fn(RequestId) -> Option<LiveFacts>,
) -> Vec<RequestRow> {
    let mut rows = Vec::new();
    let row = |id: RequestId, state: RequestStatus| {
        let f = facts(id).unwrap_or_default();
        RequestRow {
            request_id: id,
            client_id: f.origin.route.client_id(id),
            client: f.origin.client,
            route: f.origin.route,
            state,
            priority: 0,
            effective_priority: 0,
            boost: 0,
            aging: 0,
            elapsed_secs: f.elapsed_secs,
            waited_secs: 0.0,
            parks: f.parks,
            parked_secs: f.parked_secs,
            prompt_tokens: f.prompt_tokens,
            read_tokens: 0,
            generated_tokens: 0,
            max_tokens: f.max_tokens,
            tokens_per_sec: None,
            read_secs_left: None,
            pausable_in_secs: None,
            why: String::new(),
        }
    };
    for slot in &s.slots {
        let Some(id) = slot.request_id else { continue };
        let state = match slot.state {
            SlotStatus::Decoding => RequestStatus::Decoding,
            _ => RequestStatus::Reading,
        };
        let priority = slot.priority.unwrap_or(0);
        let effective = slot.effective_priority.unwrap_or(i64::from(priority));
        rows.push(RequestRow {
            priority,
            effective_priority: effective,
            boost: slot.boost,
            aging: effective - i64::from(priority) - slot.boost,
            prompt_tokens: slot.prompt_tokens,
            read_tokens: slot.held_tokens.min(slot.prompt_tokens),
            generated_tokens: slot.generated_tokens,
            tokens_per_sec: slot.tokens_per_sec,
            read_secs_left: (slot.has_lane && s.engine.prompt_tokens_per_sec > 0.0).then(|| {
                f64::from(slot.prompt_tokens.saturating_sub(slot.held_tokens))
                    / s.engine.prompt_tokens_per_sec
            }),
            pausable_in_secs: slot.pausable_in_secs,
            ..row(id, state)
        });
    }
    for p in &s.parked {
        rows.push(RequestRow {
            priority: p.priority,
            effective_priority: p.effective_priority,
            boost: p.boost,
            aging: p.effective_priority - i64::from(p.priority) - p.boost,
            waited_secs: p.parked_secs,
            generated_tokens: p.generated_tokens,
            // what it holds, kept while parked (regression: shown as 0)
            read_tokens: p.read_tokens,
            ..row(p.request_id, RequestStatus::Parked)
        });
    }
    for w in &s.waiting {
        let base = row(w.request_id, RequestStatus::Waiting);
        rows.push(RequestRow {
            priority: w.priority,
            effective_priority: w.effective_priority,
            boost: w.boost,
            aging: w.aging,
            waited_secs: w.waited_secs,
            read_tokens: base.prompt_tokens.saturating_sub(w.tokens_left_to_read),
            ..base
        });
    }
    let names: HashMap<RequestId, String> = rows
        .iter()
        .map(|r| (r.request_id, r.client_id.clone()))
        .collect();
    let whys: Vec<String> = rows.iter().map(|r| why(r, &rows, s, &names)).collect();
    for (r, why) in rows.iter_mut().zip(whys) {
        r.why = why;
    }
    rows
}

/// The sentence for one row.
fn why(
    r: &RequestRow,
    rows: &[RequestRow],
    s: &ServiceSnapshot,
    names: &HashMap<RequestId, String>,
) -> String {
    // a request no longer live is named by the id its client saw (never the internal one)
    let name = |id: RequestId| {
        names.get(&id).cloned().unwrap_or_else(|| {
            s.finished
                .iter()
                .rev()
                .find(|f| f.request_id == id)
                .map_or_else(|| "an earlier request".to_owned(), |f| f.client_id.clone())
        })
    };
    match r.state {
        RequestStatus::Waiting => waiting_why(r, rows, s),
        RequestStatus::Reading => {
            let has_lane = s
                .slots
                .iter()
                .any(|x| x.request_id == Some(r.request_id) && x.has_lane);
            let lane = s
                .slots
                .iter()
                .find(|x| x.has_lane)
                .and_then(|x| x.request_id);
            match lane {
                _ if has_lane => format!(
                    "reading its prompt: {} of {} tokens{}",
                    r.read_tokens,
                    r.prompt_tokens,
                    r.read_secs_left
                        .map(|left| format!(", about {left:.1} s left"))
                        .unwrap_or_default()
                ),
                Some(reader) => format!(
                    "holds a slot, waits for the read lane: {} is reading its prompt",
                    name(reader)
                ),
                None => "holds a slot, the read lane comes next".to_owned(),
            }
        }
        RequestStatus::Decoding => decoding_why(r, rows, s),
        RequestStatus::Parked => {
            let view = s.parked.iter().find(|p| p.request_id == r.request_id);
            let by = view.and_then(|p| p.parked_for);
            let by_words = |id: RequestId| {
                let priority = rows
                    .iter()
                    .find(|x| x.request_id == id)
                    .map(|x| format!(" ({})", priority_words(x)))
                    .unwrap_or_default();
                format!("{}{priority}", name(id))
            };
            // the one it made room for no longer holds a slot: say who does now, and why
            // that one went first (recomputed from the present, never the stale name)
            let holding = |id: RequestId| {
                rows.iter().any(|x| {
                    x.request_id == id
                        && matches!(x.state, RequestStatus::Reading | RequestStatus::Decoding)
                })
            };
            if let Some(w) = by.filter(|w| !holding(*w)) {
                let gave_way = matches!(
                    view.and_then(|p| p.cause),
                    Some(ParkCause::GaveWayHigherPriority | ParkCause::GaveWayShorterLeft)
                );
                return overtaken_why(r, rows, &name(w), gave_way, s.slots.len());
            }
            match (view.and_then(|p| p.cause), by) {
                (Some(ParkCause::Paused), Some(w)) => format!(
                    "paused for {}; resumes when it is done, nothing lost",
                    by_words(w)
                ),
                (Some(ParkCause::GaveWayHigherPriority), Some(w)) => format!(
                    "gave way at a chunk boundary to {}, which ranks higher; goes on where it stopped",
                    by_words(w)
                ),
                (Some(ParkCause::GaveWayShorterLeft), Some(w)) => format!(
                    "gave way at a chunk boundary to {}, which has less left to read; goes on where it stopped",
                    by_words(w)
                ),
                (Some(ParkCause::KvPoolFull), _) => {
                    "parked in host RAM: the KV pool was full; resumes when cells are free"
                        .to_owned()
                }
                _ => "parked; resumes when the slot is free".to_owned(),
            }
        }
    }
}

/// A request's effective priority in words, naming what it adds to the one it was given:
/// "priority 5", "priority 1: 0 + 1 small-request boost".
pub fn priority_words(r: &RequestRow) -> String {
    effective_priority_words(r.priority, r.effective_priority, r.boost, r.aging)
}

/// The same from its parts (the window's Waiting section says it so too).
pub fn effective_priority_words(priority: i32, effective: i64, boost: i64, aging: i64) -> String {
    let mut added = Vec::new();
    if boost > 0 {
        added.push(format!("{boost} small-request boost"));
    }
    if aging > 0 {
        added.push(format!("{aging} aging"));
    }
    if added.is_empty() {
        format!("priority {effective}")
    } else {
        format!("priority {effective}: {priority} + {}", added.join(" + "))
    }
}

/// A parked request whose request it made room for (`gone`) holds no slot any more: who holds
/// the slot now, and by which rule that one went first.
/// `gave_way`: it was a read that gave way (its place among equals was renewed, R4).
/// With several slots no one holder is "who overtook it": it says what it waits for.
fn overtaken_why(
    r: &RequestRow,
    rows: &[RequestRow],
    gone: &str,
    gave_way: bool,
    slots: usize,
) -> String {
    let earlier = format!("made room for {gone}, which no longer holds a slot");
    if slots > 1 {
        let what = if gave_way {
            "a slot and the read lane are"
        } else {
            "a slot is"
        };
        return format!("{earlier}; resumes when {what} free, nothing lost");
    }
    let Some(h) = rows.iter().find(|x| {
        x.request_id != r.request_id
            && matches!(x.state, RequestStatus::Reading | RequestStatus::Decoding)
    }) else {
        return format!("{earlier}; resumes at the next step, nothing lost");
    };
    let rule = if h.effective_priority > r.effective_priority {
        if h.boost > 0 && h.effective_priority - h.boost <= r.effective_priority {
            format!(
                "ranks higher by the small-request boost ({})",
                priority_words(h)
            )
        } else {
            format!("ranks higher ({})", priority_words(h))
        }
    } else if h.effective_priority == r.effective_priority
        && h.elapsed_secs < r.elapsed_secs
        && gave_way
    {
        "arrived later at the same priority and went first: a read that gives way goes \
         behind its equals that were waiting (R4's new ticket)"
            .to_owned()
    } else if h.effective_priority == r.effective_priority {
        "went first at the same priority".to_owned()
    } else {
        "took the slot first".to_owned()
    };
    format!(
        "{earlier}; now overtaken by {}, which {rule}; resumes when the slot is free, nothing lost",
        h.client_id
    )
}

/// Why the request decoding in the slot runs on, or when it will be paused: R7's outlook
/// (solo with `solo_priority`), as the scheduler will act on it.
fn decoding_why(r: &RequestRow, rows: &[RequestRow], s: &ServiceSnapshot) -> String {
    let outlook = s
        .pause_outlook
        .as_ref()
        .filter(|o| o.holder == r.request_id);
    let Some(o) = outlook else {
        return match r.pausable_in_secs {
            Some(left) if left > 0.0 => {
                format!("decoding; a higher priority may pause it in {left:.1} s")
            }
            Some(_) => "decoding; a higher priority would pause it at the next token".to_owned(),
            None => "decoding".to_owned(),
        };
    };
    let waiter = rows.iter().find(|x| x.request_id == o.waiter).map_or_else(
        || "the next request".to_owned(),
        |w| format!("{} ({})", w.client_id, priority_words(w)),
    );
    match o.verdict {
        PauseVerdict::PausedAtNextToken => {
            format!("decoding; to be paused at the next token for {waiter}")
        }
        PauseVerdict::MayPauseLater => format!(
            "decoding; {waiter} ranks higher and may pause it in {:.1} s",
            o.in_secs.unwrap_or(0.0)
        ),
        PauseVerdict::SameClass => format!(
            "decoding; {waiter} waits for it to finish: same priority, and aging does not \
             pause a stream"
        ),
        PauseVerdict::RanksLower => {
            format!("decoding; {waiter} ranks lower: only a higher priority pauses it")
        }
        PauseVerdict::NoRoom => {
            format!("decoding; {waiter} ranks higher, but the KV pool cannot hold both: it runs on")
        }
    }
}

/// Why a waiting request has no slot yet.
fn waiting_why(r: &RequestRow, rows: &[RequestRow], s: &ServiceSnapshot) -> String {
    match &s.engine.status {
        EngineStatus::Ready => {}
        EngineStatus::Loading => return "waits for the engine to load".to_owned(),
        EngineStatus::Restarting => return "waits for the engine to restart".to_owned(),
        EngineStatus::Failed(reason) => return format!("waits for the engine: {reason}"),
    }
    // requests that go first: parked ones and waiting ones that rank higher
    let ahead: Vec<&RequestRow> = rows
        .iter()
        .filter(|x| {
            x.request_id != r.request_id
                && matches!(x.state, RequestStatus::Waiting | RequestStatus::Parked)
                && (x.effective_priority > r.effective_priority
                    || (x.effective_priority == r.effective_priority
                        && x.waited_secs > r.waited_secs))
        })
        .collect();
    let holders: Vec<&RequestRow> = rows
        .iter()
        .filter(|x| matches!(x.state, RequestStatus::Reading | RequestStatus::Decoding))
        .collect();
    let queue = match ahead.first() {
        Some(first) => format!(
            "; {} ahead of it ({} first, {})",
            ahead.len(),
            first.client_id,
            priority_words(first)
        ),
        None => String::new(),
    };
    if holders.len() < s.slots.len() {
        return if ahead.is_empty() {
            "next for a free slot".to_owned()
        } else {
            format!("waits for a free slot{queue}")
        };
    }
    if s.mode == Mode::Batch {
        let ids: Vec<&str> = holders.iter().map(|h| h.client_id.as_str()).collect();
        return format!(
            "waits for a free slot: all {} are busy ({}); batch mode pauses no one{queue}",
            s.slots.len(),
            ids.join(", ")
        );
    }
    let Some(h) = holders.first() else {
        return format!("waits for the slot{queue}");
    };
    let outranks = r.effective_priority > h.effective_priority && ahead.is_empty();
    // R7's outlook for this holder, and whether this request is the one it is about
    let outlook = s
        .pause_outlook
        .as_ref()
        .filter(|o| o.holder == h.request_id);
    let first_in_line = outlook.is_some_and(|o| o.waiter == r.request_id);
    // it outranks the holder only by the small-request boost: say so
    let by_boost = if r.boost > 0 && r.effective_priority - r.boost <= h.effective_priority {
        " (this one ranks higher by the small-request boost)"
    } else {
        ""
    };
    let holder = match h.state {
        RequestStatus::Reading if outranks && s.give_way != GiveWay::Off => format!(
            "{} is reading its prompt and gives way at the next chunk boundary",
            h.client_id
        ),
        RequestStatus::Reading => format!(
            "{} is reading its prompt ({} of {})",
            h.client_id, h.read_tokens, h.prompt_tokens
        ),
        _ if !s.solo_priority => format!(
            "{} decoding until it finishes (preemption is off)",
            h.client_id
        ),
        // the first in line: what R7 will do, as the scheduler decided it (its outlook)
        _ if first_in_line => match outlook.map(|o| (o.verdict, o.in_secs)) {
            Some((PauseVerdict::PausedAtNextToken, _)) => format!(
                "{} decoding, to be paused at the next token{by_boost}",
                h.client_id
            ),
            Some((PauseVerdict::MayPauseLater, left)) => format!(
                "{} decoding, may be paused in {:.1} s{by_boost}",
                h.client_id,
                left.unwrap_or(0.0)
            ),
            Some((PauseVerdict::SameClass, _)) => {
                return format!(
                    "waits for {} to finish: same priority; aging moves it up the queue but \
                     does not pause a stream{queue}",
                    h.client_id
                );
            }
            Some((PauseVerdict::NoRoom, _)) => {
                return format!(
                    "waits for {} to finish: it ranks higher, but the KV pool cannot hold \
                     both{queue}",
                    h.client_id
                );
            }
            _ => format!(
                "{} decoding (priority {}, not below this one's {}: only a higher priority \
                 pauses it)",
                h.client_id, h.effective_priority, r.effective_priority
            ),
        },
        // it outranks the holder, but waits behind the first in line
        _ if r.effective_priority > h.effective_priority => match outlook {
            Some(o) if o.verdict == PauseVerdict::PausedAtNextToken => format!(
                "{} decoding (priority {}, below this one's {}: it is paused for the first of \
                 those ahead)",
                h.client_id, h.effective_priority, r.effective_priority
            ),
            _ => format!(
                "{} decoding (priority {}, below this one's {}, but those ahead go first)",
                h.client_id, h.effective_priority, r.effective_priority
            ),
        },
        _ => format!(
            "{} decoding (priority {}, not below this one's {}: only a higher priority pauses it)",
            h.client_id, h.effective_priority, r.effective_priority
        ),
    };
    format!("waits for the slot: {holder}{queue}")
}

#[cfg(test)]
#[path = "requests_tests.rs"]
mod tests;
