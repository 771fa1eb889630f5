//! The long scenarios: agent replay (several agents' conversations, turn after turn, with
//! side requests) and soak (a steady mixed load for a fixed time).

use super::client::{Ask, Record, Target};
use super::prompts::{Prng, text};
use super::report::{Line, Report, percentile};
use super::scenarios::{AgentReplay, Soak, failures, params, report, ttfts, until_idle};
use serde_json::json;
use std::time::Duration;

/// Sums every sample of the named metric families in Prometheus text.
fn metric_sums(text: &str, names: &[&str]) -> Vec<f64> {
    names
        .iter()
        .map(|name| {
            text.lines()
                .filter(|line| {
                    line.strip_prefix(name)
                        .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
                })
                .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
                .sum()
        })
        .collect()
}

const AGENT_METRICS: [&str; 3] = [
    "strata_give_ways_total",
    "strata_preemptions_total",
    "strata_conversation_cache_hits_total",
];

pub async fn agent_replay(target: &Target, p: &AgentReplay, seed: u64) -> Report {
    let mut out = report(target, "agent-replay", params(p));
    until_idle(target).await;
    let before = match target.ours {
        true => target.get_text("/metrics").await,
        false => None,
    };
    let system = text(seed, p.system_tokens);
    let started = target.now_secs();
    let mut agents = Vec::new();
    for agent in 0..p.agents {
        let (target, p, system) = (target.clone(), p.clone(), system.clone());
        agents.push(tokio::spawn(agent_turns(target, p, system, agent, seed)));
    }
    for agent in agents {
        out.records.extend(agent.await.unwrap_or_default());
    }
    let wall = target.now_secs() - started;
    for class in ["turn", "side"] {
        let t = ttfts(out.records.iter().filter(|r| r.label == class));
        for (name, p) in [("p50", 50.0), ("p90", 90.0), ("p95", 95.0), ("max", 100.0)] {
            out.summary.push(Line::new(
                format!("{class} TTFT {name}"),
                percentile(&t, p),
                "s",
            ));
        }
    }
    let (later, continued) = continued_turns(&out.records);
    out.summary
        .push(Line::new("later turns", Some(later as f64), ""));
    out.summary.push(Line::new(
        "later turns that continued their conversation",
        Some(continued as f64),
        "",
    ));
    let pieces: u32 = out.records.iter().map(|r| r.pieces).sum();
    out.summary.push(Line::new(
        "aggregate tokens/s",
        (wall > 0.0).then(|| f64::from(pieces) / wall),
        "tokens/s",
    ));
    if let (Some(before), Some(after)) = (before, target.get_text("/metrics").await) {
        let (b, a) = (
            metric_sums(&before, &AGENT_METRICS),
            metric_sums(&after, &AGENT_METRICS),
        );
        for ((name, b), a) in AGENT_METRICS.iter().zip(b).zip(a) {
            out.summary
                .push(Line::new(*name, Some(a - b), "during the run"));
        }
    }
    out.notes.extend(failures(&out.records));
    out
}

/// One agent's conversation, turn after turn (with a side request every `side_every` turns),
/// thinking between turns.
async fn agent_turns(
    target: Target,
    p: AgentReplay,
    system: String,
    agent: u32,
    seed: u64,
) -> Vec<Record> {
    let mut records = Vec::new();
    let mut history = vec![json!({"role": "system", "content": system})];
    for turn in 0..p.turns {
        let turn_seed = seed + 1000 * u64::from(agent + 1) + u64::from(turn);
        history.push(json!({"role": "user", "content": text(turn_seed, p.turn_tokens)}));
        let ask = Ask {
            label: "turn".into(),
            messages: history.clone(),
            max_tokens: p.max_tokens,
            priority: None,
            disconnect_after: None,
            first_token: None,
        };
        let mut record = target.stream(&ask).await;
        history.push(json!({"role": "assistant", "content": record.text}));
        record.agent = Some(agent);
        record.turn = Some(turn);
        records.push(record);
        if p.side_every > 0 && turn % p.side_every == p.side_every - 1 {
            let mut side = Ask::user(
                "side",
                text(turn_seed + 500_000, p.turn_tokens),
                p.max_tokens,
            );
            side.priority = p.side_priority;
            records.push(target.stream(&side).await);
        }
        tokio::time::sleep(Duration::from_secs_f64(p.think_secs)).await;
    }
    records
}

/// How many turns came after an agent's first, and how many of those continued their
/// conversation: the server already held at least the previous turn's whole prompt.
fn continued_turns(records: &[Record]) -> (usize, usize) {
    let turns: Vec<&Record> = records.iter().filter(|r| r.label == "turn").collect();
    let later: Vec<&&Record> = turns.iter().filter(|r| r.turn > Some(0)).collect();
    let continued = later
        .iter()
        .filter(|r| {
            let previous = turns
                .iter()
                .find(|p| p.agent == r.agent && p.turn.map(|t| t + 1) == r.turn);
            match (previous.and_then(|p| p.prompt_tokens), r.cached_tokens) {
                (Some(before), Some(cached)) => cached >= before,
                _ => false,
            }
        })
        .count();
    (later.len(), continued)
}

pub async fn soak(target: &Target, p: &Soak, seed: u64) -> Report {
    let mut out = report(target, "soak", params(p));
    let deadline = target.now_secs() + p.minutes * 60.0;
    let sent = std::sync::Arc::new(std::sync::atomic::AtomicU32::new(0));
    let mut clients = Vec::new();
    for client in 0..p.concurrency {
        let (target, p, sent) = (target.clone(), p.clone(), sent.clone());
        clients.push(tokio::spawn(soak_client(
            target, p, sent, client, seed, deadline,
        )));
    }
    if p.restart && target.ours {
        tokio::time::sleep(Duration::from_secs_f64(p.minutes * 30.0)).await;
        match target.post_json("/v1/engine/restart", &json!({})).await {
            Ok(answer) => out.notes.push(format!("engine restart halfway: {answer}")),
            Err(e) => out.notes.push(format!("engine restart refused: {e}")),
        }
    }
    for client in clients {
        out.records.extend(client.await.unwrap_or_default());
    }
    until_idle(target).await;
    let failed = soak_summary(&mut out);
    if target.ours
        && let Some(s) = target.get_json("/v1/scheduler").await
    {
        let count = |key: &str| s[key].as_array().map_or(0, Vec::len) as f64;
        out.summary.extend([
            Line::new(
                "processed-prefix losses",
                s["counters"]["processed_prefix_losses"].as_f64(),
                "",
            ),
            Line::new("left waiting", Some(count("waiting")), ""),
            Line::new("left parked", Some(count("parked")), ""),
            Line::new(
                "engine restarts",
                s["counters"]["engine_restarts"].as_f64(),
                "",
            ),
        ]);
    }
    out.notes.extend(failed);
    out
}

/// One soak client: a random mix of requests, one after another, until the deadline or the
/// run's request budget.
async fn soak_client(
    target: Target,
    p: Soak,
    sent: std::sync::Arc<std::sync::atomic::AtomicU32>,
    client: u32,
    seed: u64,
    deadline: f64,
) -> Vec<Record> {
    let mut rng = Prng::new(seed ^ (u64::from(client) << 32));
    let mut records = Vec::new();
    while target.now_secs() < deadline
        && sent.fetch_add(1, std::sync::atomic::Ordering::Relaxed) < p.max_requests
    {
        let n = rng.next_u64();
        let (label, prompt, max_tokens) = match rng.below(3) {
            0 => ("long", 512, 128),
            1 => ("short", 24, 16),
            _ => ("medium", 128, 48),
        };
        let mut ask = Ask::user(label, text(n, prompt), max_tokens);
        if rng.below(4) == 0 {
            ask.priority = Some(5);
        }
        if rng.unit() < p.disconnect_share {
            ask.disconnect_after = Some(rng.below(8) as u32);
        }
        records.push(target.stream(&ask).await);
    }
    records
}

/// The soak's counts of how its requests ended; the failures other than the engine
/// restart's (what the restart ended is expected: R10 fails what the engine held).
fn soak_summary(out: &mut Report) -> Vec<String> {
    let finished = out
        .records
        .iter()
        .filter(|r| !r.disconnected && r.error.is_none() && r.finish_reason.is_some())
        .count();
    let dropped = out.records.iter().filter(|r| r.disconnected).count();
    let (restarted, failed): (Vec<String>, Vec<String>) = failures(&out.records)
        .into_iter()
        .partition(|f| f.contains("restart"));
    out.summary = vec![
        Line::new("requests", Some(out.records.len() as f64), ""),
        Line::new("complete and valid", Some(finished as f64), ""),
        Line::new("dropped by the client on purpose", Some(dropped as f64), ""),
        Line::new(
            "ended by the engine restart",
            Some(restarted.len() as f64),
            "",
        ),
        Line::new("failed otherwise", Some(failed.len() as f64), ""),
    ];
    failed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_sums_add_every_labelled_sample_of_a_family_and_only_that_family() {
        let text = "# TYPE strata_give_ways counter\n\
                    strata_give_ways_total{reason=\"higher_priority\"} 2\n\
                    strata_give_ways_total{reason=\"shorter_left\"} 3\n\
                    strata_give_ways_total_other 100\n\
                    strata_preemptions_total 4\n";
        assert_eq!(
            metric_sums(
                text,
                &["strata_give_ways_total", "strata_preemptions_total"]
            ),
            [5.0, 4.0]
        );
    }
}
