//! `bench single-stream`: one request at a time, a long prompt then a fixed number of tokens:
//! prompt and decode tokens/s of one stream, comparable across servers (run it against each
//! with the same model, threads and flags; `--ignore-eos` makes every request decode
//! `--max-tokens`).

use super::client::{Ask, Record, Target};
use super::prompts::text;
use super::report::{Line, Report, percentile};
use super::scenarios::{failures, median, params, report, until_idle};
use clap::Args;
use serde::Serialize;

#[derive(Debug, Clone, Args, Serialize)]
pub struct SingleStream {
    /// The prompt's length in tokens (approximate: the server's count is reported).
    #[arg(long, default_value_t = 1500)]
    pub prompt_tokens: u32,
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
    /// Requests, one after another, each with a new prompt (no prompt cache helps).
    #[arg(long, default_value_t = 3)]
    pub rounds: u32,
}

/// Prompt tokens/s of one request: its prompt over its time to first token, which also holds
/// the request's overhead, as every client sees it. `None` without the server's count.
pub fn prompt_rate(record: &Record) -> Option<f64> {
    let ttft = record.ttft_secs?;
    let tokens = record.prompt_tokens? as f64;
    (ttft > 0.0).then(|| tokens / ttft)
}

pub async fn single_stream(target: &Target, p: &SingleStream, seed: u64) -> Report {
    let mut out = report(target, "single-stream", params(p));
    for round in 0..p.rounds {
        until_idle(target).await;
        let ask = Ask::user(
            "single",
            text(seed + u64::from(round) * 10, p.prompt_tokens),
            p.max_tokens,
        );
        let record = target.stream(&ask).await;
        out.notes.push(format!(
            "round {}: {} prompt tokens at {:.1} tokens/s, {} generated at {:.1} tokens/s",
            round + 1,
            record.prompt_tokens.unwrap_or_default(),
            prompt_rate(&record).unwrap_or(f64::NAN),
            record.pieces,
            record.tokens_per_sec.unwrap_or(f64::NAN),
        ));
        out.records.push(record);
    }
    let prompt: Vec<f64> = out.records.iter().filter_map(prompt_rate).collect();
    let decode: Vec<f64> = out
        .records
        .iter()
        .filter_map(|r| r.tokens_per_sec)
        .collect();
    out.summary = vec![
        Line::new("prompt tokens/s, median", median(&prompt), "tokens/s"),
        Line::new("prompt tokens/s, min", percentile(&prompt, 0.0), "tokens/s"),
        Line::new(
            "prompt tokens/s, max",
            percentile(&prompt, 100.0),
            "tokens/s",
        ),
        Line::new("decode tokens/s, median", median(&decode), "tokens/s"),
        Line::new("decode tokens/s, min", percentile(&decode, 0.0), "tokens/s"),
        Line::new(
            "decode tokens/s, max",
            percentile(&decode, 100.0),
            "tokens/s",
        ),
    ];
    out.notes.extend(failures(&out.records));
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_prompt_rate_is_the_servers_prompt_count_over_the_time_to_first_token() {
        let record = Record {
            sent_secs: 10.0,
            ttft_secs: Some(2.0),
            prompt_tokens: Some(1500),
            ..Record::default()
        };
        assert_eq!(prompt_rate(&record), Some(750.0));
        let uncounted = Record {
            prompt_tokens: None,
            ..record.clone()
        };
        assert_eq!(prompt_rate(&uncounted), None);
    }
}
