//! `strata-desk bench SCENARIO --base-url URL`: a streaming load client for the seeds'
//! scenarios, against any OpenAI-compatible server. It sends only to the URL given (loopback
//! unless `--allow-remote`), seeded deterministic prompts, bounded in count and time, and
//! prints a table plus, with `--json FILE`, every request's record.
//!
//! - `client`: one timed streaming request;
//! - `prompts`: seeded prompt text;
//! - `scenarios`: every scenario's parameters; solo-long-short, followup-vs-fresh, burst-priority;
//! - `replay`: agent-replay and soak;
//! - `single`: single-stream, prompt and decode tokens/s of one request;
//! - `report`: percentiles, the table, the JSON document.

mod client;
mod prompts;
mod replay;
mod report;
mod scenarios;
mod single;

pub use client::{Ask, Record, Target};
pub use report::{Report, percentile};
pub use scenarios::{AgentReplay, BurstPriority, FollowupVsFresh, Soak, SoloLongShort};

use clap::{Args, Subcommand};
use std::path::PathBuf;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Args)]
pub struct BenchArgs {
    #[command(subcommand)]
    pub scenario: Scenario,
    /// The server, e.g. http://127.0.0.1:8080 (a trailing /v1 is fine) [required].
    #[arg(long, global = true)]
    pub base_url: Option<String>,
    /// Allow a server that is not on this machine [default: off: loopback only].
    #[arg(long, global = true)]
    pub allow_remote: bool,
    /// The model name sent (`--model` is the app's own flag, a GGUF path) [default: default].
    #[arg(
        long = "model-name",
        id = "bench_model",
        global = true,
        default_value = "default"
    )]
    pub model: String,
    /// A bearer token for servers that need one [default: none].
    #[arg(long, global = true)]
    pub api_key: Option<String>,
    /// Ask the server to ignore end-of-generation tokens, so every request runs to its
    /// max_tokens [default: off].
    #[arg(long, global = true)]
    pub ignore_eos: bool,
    /// The prompts' seed.
    #[arg(long, global = true, default_value_t = 1)]
    pub seed: u64,
    /// Stop the whole run after this many seconds [default: 1800].
    #[arg(long, global = true, default_value_t = 1800)]
    pub max_secs: u64,
    /// Write the report with every request's record as JSON to this file [default: none].
    #[arg(long, global = true)]
    pub json: Option<PathBuf>,
    /// A name for this run in the table and the JSON (e.g. "solo on") [default: none].
    #[arg(long, global = true)]
    pub label: Option<String>,
}

#[derive(Debug, Clone, Subcommand)]
pub enum Scenario {
    /// A long streaming generation, then a short request after --delay-secs.
    SoloLongShort(SoloLongShort),
    /// Conversation B's follow-up turn against a fresh long prompt A.
    FollowupVsFresh(FollowupVsFresh),
    /// K long generations fill the slots, M more wait, then a priority request arrives.
    BurstPriority(BurstPriority),
    /// Simulated agents sharing a long system prompt, with think time and side requests.
    AgentReplay(AgentReplay),
    /// A mix with client disconnects for --minutes; checks nothing is lost.
    Soak(Soak),
    /// One request at a time, a long prompt then --max-tokens: prompt and decode tokens/s.
    SingleStream(single::SingleStream),
}

#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    #[error("--base-url is required (e.g. --base-url http://127.0.0.1:8080)")]
    NoBaseUrl,
    #[error("--base-url {0:?} is not an http:// URL with a host")]
    BadUrl(String),
    #[error("{0} is not this machine; the bench sends load only to loopback unless --allow-remote")]
    Remote(String),
    #[error("the run took longer than --max-secs {0}")]
    TimedOut(u64),
    #[error("cannot write {path}: {message}")]
    Write { path: String, message: String },
    #[error("cannot make the HTTP client: {0}")]
    Client(String),
}

/// `http://host:port` from what the user typed, or why not.
pub fn normalise_base(url: &str, allow_remote: bool) -> Result<String, BenchError> {
    let trimmed = url.trim().trim_end_matches('/');
    let trimmed = trimmed.strip_suffix("/v1").unwrap_or(trimmed);
    let rest = trimmed
        .strip_prefix("http://")
        .ok_or_else(|| BenchError::BadUrl(url.to_owned()))?;
    let authority = rest.split('/').next().unwrap_or_default();
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or_default(),
        None => authority.split(':').next().unwrap_or_default(),
    };
    if host.is_empty() {
        return Err(BenchError::BadUrl(url.to_owned()));
    }
    let loopback = host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback());
    if !loopback && !allow_remote {
        return Err(BenchError::Remote(host.to_owned()));
    }
    Ok(trimmed.to_owned())
}

/// Runs the scenario and prints its table; writes the JSON when asked.
pub async fn run(args: &BenchArgs) -> Result<Report, BenchError> {
    let base = normalise_base(
        args.base_url.as_deref().ok_or(BenchError::NoBaseUrl)?,
        args.allow_remote,
    )?;
    let client = reqwest::Client::builder()
        .build()
        .map_err(|e| BenchError::Client(e.to_string()))?;
    let mut target = Target {
        client,
        base,
        api_key: args.api_key.clone(),
        model: args.model.clone(),
        ignore_eos: args.ignore_eos,
        started: Instant::now(),
        ours: false,
    };
    target.ours = target.get_json("/v1/scheduler").await.is_some();
    let seed = args.seed;
    let work = async {
        match &args.scenario {
            Scenario::SoloLongShort(p) => scenarios::solo_long_short(&target, p, seed).await,
            Scenario::FollowupVsFresh(p) => scenarios::followup_vs_fresh(&target, p, seed).await,
            Scenario::BurstPriority(p) => scenarios::burst_priority(&target, p, seed).await,
            Scenario::AgentReplay(p) => replay::agent_replay(&target, p, seed).await,
            Scenario::Soak(p) => replay::soak(&target, p, seed).await,
            Scenario::SingleStream(p) => single::single_stream(&target, p, seed).await,
        }
    };
    let mut report = tokio::time::timeout(Duration::from_secs(args.max_secs), work)
        .await
        .map_err(|_| BenchError::TimedOut(args.max_secs))?;
    report.label.clone_from(&args.label);
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&report).unwrap_or_default();
        std::fs::write(path, text).map_err(|e| BenchError::Write {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_loopback_url_is_normalised_and_a_remote_one_needs_allow_remote() {
        assert_eq!(
            normalise_base("http://127.0.0.1:8080/v1/", false).unwrap(),
            "http://127.0.0.1:8080"
        );
        assert_eq!(
            normalise_base("http://localhost:9000", false).unwrap(),
            "http://localhost:9000"
        );
        assert_eq!(
            normalise_base("http://[::1]:8080", false).unwrap(),
            "http://[::1]:8080"
        );
        assert!(matches!(
            normalise_base("http://10.0.0.5:8080", false),
            Err(BenchError::Remote(_))
        ));
        assert!(normalise_base("http://10.0.0.5:8080", true).is_ok());
        assert!(matches!(
            normalise_base("https://example.com", true),
            Err(BenchError::BadUrl(_))
        ));
    }
}
