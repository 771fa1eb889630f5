//! The scenarios of the seeds, each a function from its parameters to a report.

use super::client::{Ask, Record, Target};
use super::prompts::text;
use super::report::{Line, Report, percentile};
use clap::Args;
use serde::Serialize;
use serde_json::{Value, json};
use std::time::Duration;

/// A long streaming generation, then a short request after `--delay-secs`.
#[derive(Debug, Clone, Args, Serialize)]
pub struct SoloLongShort {
    #[arg(long, default_value_t = 1024)]
    pub long_prompt_tokens: u32,
    #[arg(long, default_value_t = 256)]
    pub long_max_tokens: u32,
    #[arg(long, default_value_t = 24)]
    pub short_prompt_tokens: u32,
    #[arg(long, default_value_t = 16)]
    pub short_max_tokens: u32,
    /// Seconds between the long request (`--phase read`) or the long's first token
    /// (`--phase decode`) and the short request.
    #[arg(long, default_value_t = 2.0)]
    pub delay_secs: f64,
    /// When the short request is sent: during the long's prompt read or during its decode.
    #[arg(long, value_enum, default_value_t = Phase::Read)]
    pub phase: Phase,
    /// The short request's `priority` [default: none sent].
    #[arg(long)]
    pub short_priority: Option<i64>,
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    Read,
    Decode,
}

/// Conversation B's follow-up against a fresh long prompt A.
#[derive(Debug, Clone, Args, Serialize)]
pub struct FollowupVsFresh {
    /// B's first turn (longer than A's prompt, so that `give_way: whole` ranks B2 behind A
    /// while `left` ranks it ahead: the case of the seed #1288).
    #[arg(long, default_value_t = 2048)]
    pub history_tokens: u32,
    /// A's prompt.
    #[arg(long, default_value_t = 1024)]
    pub fresh_prompt_tokens: u32,
    /// B's new turn.
    #[arg(long, default_value_t = 40)]
    pub followup_tokens: u32,
    #[arg(long, default_value_t = 32)]
    pub max_tokens: u32,
    /// Seconds between A and B's second turn.
    #[arg(long, default_value_t = 1.0)]
    pub gap_secs: f64,
    #[arg(long, default_value_t = 2)]
    pub rounds: u32,
}

/// K long generations fill the slots, M more wait, then a higher-priority request arrives.
#[derive(Debug, Clone, Args, Serialize)]
pub struct BurstPriority {
    /// K: long generations (one per slot).
    #[arg(long, default_value_t = 1)]
    pub long_count: u32,
    /// M: more long generations that wait.
    #[arg(long, default_value_t = 2)]
    pub waiting: u32,
    #[arg(long, default_value_t = 256)]
    pub long_prompt_tokens: u32,
    #[arg(long, default_value_t = 128)]
    pub long_max_tokens: u32,
    /// The late request's `priority`; 0 sends none (the "no priority" baseline).
    #[arg(long, default_value_t = 10)]
    pub priority: i64,
    #[arg(long, default_value_t = 24)]
    pub priority_prompt_tokens: u32,
    #[arg(long, default_value_t = 16)]
    pub priority_max_tokens: u32,
    /// Seconds after the burst before the late request.
    #[arg(long, default_value_t = 2.0)]
    pub settle_secs: f64,
}

/// Simulated coding agents sharing a long system prompt.
#[derive(Debug, Clone, Args, Serialize)]
pub struct AgentReplay {
    #[arg(long, default_value_t = 3)]
    pub agents: u32,
    #[arg(long, default_value_t = 4)]
    pub turns: u32,
    #[arg(long, default_value_t = 768)]
    pub system_tokens: u32,
    #[arg(long, default_value_t = 48)]
    pub turn_tokens: u32,
    #[arg(long, default_value_t = 48)]
    pub max_tokens: u32,
    /// An agent's pause between its turns.
    #[arg(long, default_value_t = 1.0)]
    pub think_secs: f64,
    /// Every this many turns an agent also sends a side request (0: none).
    #[arg(long, default_value_t = 3)]
    pub side_every: u32,
    /// The side requests' `priority` [default: none sent].
    #[arg(long)]
    pub side_priority: Option<i64>,
}

/// A mix of all of the above with client disconnects, for minutes.
#[derive(Debug, Clone, Args, Serialize)]
pub struct Soak {
    #[arg(long, default_value_t = 10.0)]
    pub minutes: f64,
    /// Clients at once.
    #[arg(long, default_value_t = 3)]
    pub concurrency: u32,
    /// The share of requests the client drops on purpose (before the first token or after a
    /// few).
    #[arg(long, default_value_t = 0.2)]
    pub disconnect_share: f64,
    /// Ask a Strata Desk server for one engine restart halfway.
    #[arg(long)]
    pub restart: bool,
    /// Stop after this many requests even if time is left.
    #[arg(long, default_value_t = 10_000)]
    pub max_requests: u32,
}

pub(super) fn params(p: &impl Serialize) -> Value {
    serde_json::to_value(p).unwrap_or(Value::Null)
}

pub(super) fn report(target: &Target, scenario: &str, parameters: Value) -> Report {
    Report {
        scenario: scenario.to_owned(),
        label: None,
        base_url: target.base.clone(),
        parameters,
        summary: Vec::new(),
        notes: Vec::new(),
        records: Vec::new(),
    }
}

pub(super) fn ttfts<'a>(records: impl Iterator<Item = &'a Record>) -> Vec<f64> {
    records.filter_map(|r| r.ttft_secs).collect()
}

pub(super) fn failures(records: &[Record]) -> Vec<String> {
    records
        .iter()
        .filter(|r| !r.disconnected && (r.error.is_some() || r.finish_reason.is_none()))
        .map(|r| {
            format!(
                "{} (status {}) failed: {}",
                r.label,
                r.status,
                r.error.clone().unwrap_or_else(|| "no finish_reason".into())
            )
        })
        .collect()
}

/// What the only request in flight is doing (a Strata Desk server's snapshot).
pub(super) async fn state_in_flight(target: &Target) -> String {
    let Some(s) = target.get_json("/v1/scheduler").await else {
        return "unknown (not a Strata Desk server)".into();
    };
    let busy = s["slots"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|slot| !slot["request_id"].is_null())
        .map(|slot| slot["state"].as_str().unwrap_or("?").to_owned())
        .next();
    busy.or_else(|| {
        (!s["parked"].as_array().is_none_or(Vec::is_empty)).then(|| "parked".to_owned())
    })
    .or_else(|| (!s["waiting"].as_array().is_none_or(Vec::is_empty)).then(|| "waiting".to_owned()))
    .unwrap_or_else(|| "done".to_owned())
}

/// Waits until a Strata Desk server holds no request (at most a minute); others: a second.
pub(super) async fn until_idle(target: &Target) {
    if !target.ours {
        tokio::time::sleep(Duration::from_secs(1)).await;
        return;
    }
    for _ in 0..600 {
        if let Some(s) = target.get_json("/v1/scheduler").await {
            let empty = |key: &str| s[key].as_array().is_none_or(Vec::is_empty);
            let running = s["slots"]
                .as_array()
                .into_iter()
                .flatten()
                .any(|slot| !slot["request_id"].is_null());
            if !running && empty("waiting") && empty("parked") {
                return;
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub(super) fn median(values: &[f64]) -> Option<f64> {
    percentile(values, 50.0)
}

pub async fn solo_long_short(target: &Target, p: &SoloLongShort, seed: u64) -> Report {
    let mut out = report(target, "solo-long-short", params(p));
    let (mut during_read, mut during_decode) = (Vec::new(), Vec::new());
    for round in 0..p.rounds {
        until_idle(target).await;
        let seed = seed + u64::from(round) * 10;
        let mut long = Ask::user("long", text(seed, p.long_prompt_tokens), p.long_max_tokens);
        let first_token = std::sync::Arc::new(tokio::sync::Notify::new());
        long.first_token = Some(first_token.clone());
        let long_task = {
            let target = target.clone();
            tokio::spawn(async move { target.stream(&long).await })
        };
        if p.phase == Phase::Decode {
            first_token.notified().await;
        }
        tokio::time::sleep(Duration::from_secs_f64(p.delay_secs)).await;
        let state = state_in_flight(target).await;
        let mut short = Ask::user(
            "short",
            text(seed + 1, p.short_prompt_tokens),
            p.short_max_tokens,
        );
        short.priority = p.short_priority;
        let short = target.stream(&short).await;
        let long = long_task.await.unwrap_or_default();
        if let Some(t) = short.ttft_secs {
            match state.as_str() {
                "reading" => during_read.push(t),
                "decoding" => during_decode.push(t),
                _ => {}
            }
        }
        out.notes.push(format!(
            "round {}: the long request was {state} when the short one was sent; short TTFT {:.3} s, long {:.1} tokens/s",
            round + 1,
            short.ttft_secs.unwrap_or(f64::NAN),
            long.tokens_per_sec.unwrap_or(f64::NAN)
        ));
        out.records.push(long);
        out.records.push(short);
    }
    let records = std::mem::take(&mut out.records);
    let of = |label: &'static str| records.iter().filter(move |r| r.label == label);
    let long_rates: Vec<f64> = of("long").filter_map(|r| r.tokens_per_sec).collect();
    let long_totals: Vec<f64> = of("long").map(|r| r.end_secs - r.sent_secs).collect();
    out.summary = vec![
        Line::new("short TTFT, median", median(&ttfts(of("short"))), "s"),
        Line::new(
            "short TTFT, max",
            percentile(&ttfts(of("short")), 100.0),
            "s",
        ),
        Line::new(
            "short TTFT sent during the long read, median",
            median(&during_read),
            "s",
        ),
        Line::new(
            "short TTFT sent during the long decode, median",
            median(&during_decode),
            "s",
        ),
        Line::new("long TTFT, median", median(&ttfts(of("long"))), "s"),
        Line::new("long tokens/s, median", median(&long_rates), "tokens/s"),
        Line::new("long total, median", median(&long_totals), "s"),
    ];
    out.records = records;
    out.notes.extend(failures(&out.records));
    out
}

pub async fn followup_vs_fresh(target: &Target, p: &FollowupVsFresh, seed: u64) -> Report {
    let mut out = report(target, "followup-vs-fresh", params(p));
    for round in 0..p.rounds {
        until_idle(target).await;
        let seed = seed + u64::from(round) * 10;
        let first_turn = text(seed, p.history_tokens);
        let b1 = target
            .stream(&Ask::user("b1", first_turn.clone(), p.max_tokens))
            .await;
        let fresh = Ask::user("a", text(seed + 1, p.fresh_prompt_tokens), p.max_tokens);
        let a_task = {
            let target = target.clone();
            tokio::spawn(async move { target.stream(&fresh).await })
        };
        tokio::time::sleep(Duration::from_secs_f64(p.gap_secs)).await;
        let b2 = Ask {
            label: "b2".into(),
            messages: vec![
                json!({"role": "user", "content": first_turn}),
                json!({"role": "assistant", "content": b1.text}),
                json!({"role": "user", "content": text(seed + 2, p.followup_tokens)}),
            ],
            max_tokens: p.max_tokens,
            priority: None,
            disconnect_after: None,
            first_token: None,
        };
        let b2 = target.stream(&b2).await;
        let a = a_task.await.unwrap_or_default();
        out.records.extend([b1, a, b2]);
    }
    let of = |label: &str| ttfts(out.records.iter().filter(|r| r.label == label));
    let b2_cached_share: Vec<f64> = out
        .records
        .iter()
        .filter(|r| r.label == "b2")
        .filter_map(|r| Some(r.cached_tokens? as f64 / r.prompt_tokens?.max(1) as f64))
        .collect();
    let totals: Vec<f64> = out
        .records
        .iter()
        .filter(|r| r.label == "a" && r.error.is_none())
        .map(|r| r.end_secs - r.sent_secs)
        .collect();
    out.summary = vec![
        Line::new("B2 TTFT, median", median(&of("b2")), "s"),
        Line::new(
            "B2 cached share of its prompt, median",
            median(&b2_cached_share).map(|s| 100.0 * s),
            "%",
        ),
        Line::new("A TTFT, median", median(&of("a")), "s"),
        Line::new("A total, median", median(&totals), "s"),
        Line::new("B1 TTFT, median", median(&of("b1")), "s"),
    ];
    out.notes.extend(failures(&out.records));
    out
}

pub async fn burst_priority(target: &Target, p: &BurstPriority, seed: u64) -> Report {
    let mut out = report(target, "burst-priority", params(p));
    until_idle(target).await;
    let mut tasks = Vec::new();
    for i in 0..p.long_count + p.waiting {
        let ask = Ask::user(
            if i < p.long_count { "long" } else { "queued" },
            text(seed + u64::from(i), p.long_prompt_tokens),
            p.long_max_tokens,
        );
        let target = target.clone();
        tasks.push(tokio::spawn(async move { target.stream(&ask).await }));
        // In order, so the first K take the slots.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::time::sleep(Duration::from_secs_f64(p.settle_secs)).await;
    let mut late = Ask::user(
        "priority",
        text(seed + 999, p.priority_prompt_tokens),
        p.priority_max_tokens,
    );
    late.priority = (p.priority != 0).then_some(p.priority);
    let late = target.stream(&late).await;
    for task in tasks {
        out.records.push(task.await.unwrap_or_default());
    }
    let first_free = out
        .records
        .iter()
        .filter(|r| r.label == "long")
        .map(|r| r.end_secs)
        .fold(f64::INFINITY, f64::min);
    let first_free_after = first_free
        .is_finite()
        .then_some(first_free - late.sent_secs);
    out.summary = vec![
        Line::new("late request TTFT", late.ttft_secs, "s"),
        Line::new("first slot freed after it was sent", first_free_after, "s"),
        Line::new(
            "queued requests' TTFT, median",
            median(&ttfts(out.records.iter().filter(|r| r.label == "queued"))),
            "s",
        ),
    ];
    out.records.push(late);
    out.notes.extend(failures(&out.records));
    out
}
