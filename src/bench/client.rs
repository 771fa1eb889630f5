//! One streaming Chat Completions request, timed from the client's side: when it was sent,
//! when the first content arrived, when each later piece arrived, how it ended.

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::{Value, json};
use std::time::{Duration, Instant};

/// The target server and the bench's clock.
#[derive(Debug, Clone)]
pub struct Target {
    pub client: reqwest::Client,
    /// `http://host:port` (no `/v1`).
    pub base: String,
    pub api_key: Option<String>,
    pub model: String,
    pub ignore_eos: bool,
    /// Zero of every record's times.
    pub started: Instant,
    /// Whether the server answers `GET /v1/scheduler` (a Strata Desk server).
    pub ours: bool,
}

/// A request to send.
#[derive(Debug, Clone)]
pub struct Ask {
    /// What it is in the scenario (`long`, `short`, `b2`, `turn`, `side`, ...).
    pub label: String,
    pub messages: Vec<Value>,
    pub max_tokens: u32,
    pub priority: Option<i64>,
    /// Stop reading (and drop the connection) after this many content pieces; `Some(0)`:
    /// before the first.
    pub disconnect_after: Option<u32>,
    /// Notified when the first content piece arrives.
    pub first_token: Option<std::sync::Arc<tokio::sync::Notify>>,
}

impl Ask {
    pub fn user(label: &str, text: String, max_tokens: u32) -> Self {
        Self {
            label: label.to_owned(),
            messages: vec![json!({"role": "user", "content": text})],
            max_tokens,
            priority: None,
            disconnect_after: None,
            first_token: None,
        }
    }
}

/// What happened to one request (all times in seconds since the bench started).
#[derive(Debug, Clone, Serialize, Default)]
pub struct Record {
    pub label: String,
    /// In `agent-replay`: which agent sent it, and its turn (from 0).
    pub agent: Option<u32>,
    pub turn: Option<u32>,
    pub priority: Option<i64>,
    /// The server's `x-request-id`, when it sends one.
    pub request_id: Option<String>,
    pub sent_secs: f64,
    pub ttft_secs: Option<f64>,
    pub end_secs: f64,
    /// Content pieces received (one per token on servers that stream token by token).
    pub pieces: u32,
    /// `usage` from the final chunk, when the server sends it.
    pub prompt_tokens: Option<u64>,
    pub completion_tokens: Option<u64>,
    /// Prompt tokens the server already held (`usage.prompt_tokens_details.cached_tokens`,
    /// or llama-server's `timings.cache_n`).
    pub cached_tokens: Option<u64>,
    /// Pieces per second between the first and the last piece.
    pub tokens_per_sec: Option<f64>,
    pub finish_reason: Option<String>,
    pub status: u16,
    pub error: Option<String>,
    pub disconnected: bool,
    /// The streamed text, joined.
    pub text: String,
}

impl Target {
    pub fn now_secs(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    fn authorised(&self, request: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.api_key {
            Some(key) => request.bearer_auth(key),
            None => request,
        }
    }

    /// A successful GET's response, or `None` (unreachable, error status).
    async fn get(&self, path: &str) -> Option<reqwest::Response> {
        let response = self
            .authorised(self.client.get(self.url(path)))
            .timeout(Duration::from_secs(10))
            .send()
            .await
            .ok()?;
        response.status().is_success().then_some(response)
    }

    pub async fn get_json(&self, path: &str) -> Option<Value> {
        self.get(path).await?.json().await.ok()
    }

    pub async fn get_text(&self, path: &str) -> Option<String> {
        self.get(path).await?.text().await.ok()
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Result<Value, String> {
        let response = self
            .authorised(self.client.post(self.url(path)))
            .json(body)
            .timeout(Duration::from_secs(600))
            .send()
            .await
            .map_err(|e| e.to_string())?;
        let status = response.status();
        let value: Value = response.json().await.map_err(|e| e.to_string())?;
        if status.is_success() {
            Ok(value)
        } else {
            Err(format!("{status}: {value}"))
        }
    }

    /// Sends `ask` as a streaming chat completion and reads it to the end (or to the
    /// disconnect point).
    pub async fn stream(&self, ask: &Ask) -> Record {
        let body = self.stream_body(ask);
        let mut record = Record {
            label: ask.label.clone(),
            priority: ask.priority,
            sent_secs: self.now_secs(),
            ..Record::default()
        };
        let sent = self
            .authorised(self.client.post(self.url("/v1/chat/completions")))
            .json(&body)
            .timeout(Duration::from_secs(1800))
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(e) => {
                record.error = Some(e.to_string());
                record.end_secs = self.now_secs();
                return record;
            }
        };
        record.status = response.status().as_u16();
        record.request_id = response
            .headers()
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        if !response.status().is_success() {
            record.error = Some(response.text().await.unwrap_or_default());
            record.end_secs = self.now_secs();
            return record;
        }
        if ask.disconnect_after == Some(0) {
            record.disconnected = true;
            record.end_secs = self.now_secs();
            return record;
        }
        let mut times = PieceTimes::default();
        self.read_events(response, ask, &mut record, &mut times)
            .await;
        record.end_secs = self.now_secs();
        record.ttft_secs = times.first.map(|f| f - record.sent_secs);
        if let (Some(f), Some(l)) = (times.first, times.last)
            && record.pieces > 1
            && l > f
        {
            record.tokens_per_sec = Some(f64::from(record.pieces - 1) / (l - f));
        }
        record
    }

    /// The streaming request's body for `ask`.
    fn stream_body(&self, ask: &Ask) -> Value {
        let mut body = json!({
            "model": self.model,
            "messages": ask.messages,
            "max_tokens": ask.max_tokens,
            "temperature": 0,
            "stream": true,
            "stream_options": {"include_usage": true},
        });
        if self.ignore_eos {
            body["ignore_eos"] = json!(true);
        }
        if let Some(p) = ask.priority {
            body["priority"] = json!(p);
        }
        body
    }

    /// Reads the response's server-sent events into `record` until `[DONE]`, the stream's
    /// end or error, or the disconnect point.
    async fn read_events(
        &self,
        response: reqwest::Response,
        ask: &Ask,
        record: &mut Record,
        times: &mut PieceTimes,
    ) {
        let mut bytes = response.bytes_stream();
        let mut pending = String::new();
        while let Some(chunk) = bytes.next().await {
            let chunk = match chunk {
                Ok(chunk) => chunk,
                Err(e) => {
                    record.error = Some(e.to_string());
                    break;
                }
            };
            pending.push_str(&String::from_utf8_lossy(&chunk));
            while let Some(end) = pending.find("\n\n") {
                let event: String = pending.drain(..end + 2).collect();
                for line in event.lines() {
                    let Some(data) = line.strip_prefix("data: ") else {
                        continue;
                    };
                    if data == "[DONE]" || self.read_data(data, ask, record, times) {
                        return;
                    }
                }
            }
        }
    }

    /// One event's data into `record`; whether the reading stops here (the disconnect point).
    fn read_data(
        &self,
        data: &str,
        ask: &Ask,
        record: &mut Record,
        times: &mut PieceTimes,
    ) -> bool {
        let Ok(value) = serde_json::from_str::<Value>(data) else {
            record.error = Some(format!("not JSON: {data}"));
            return false;
        };
        if let Some(error) = value.get("error") {
            record.error = Some(error.to_string());
        }
        record_usage(record, &value);
        let Some(choice) = value["choices"].get(0) else {
            return false;
        };
        if let Some(reason) = choice["finish_reason"].as_str() {
            record.finish_reason = Some(reason.to_owned());
        }
        if let Some(piece) = choice["delta"]["content"].as_str()
            && !piece.is_empty()
        {
            let now = self.now_secs();
            if times.first.is_none()
                && let Some(notify) = &ask.first_token
            {
                notify.notify_one();
            }
            times.first.get_or_insert(now);
            times.last = Some(now);
            record.pieces += 1;
            record.text.push_str(piece);
            if ask.disconnect_after == Some(record.pieces) {
                record.disconnected = true;
                return true;
            }
        }
        false
    }
}

/// When the first and the last content pieces arrived, in the bench's seconds.
#[derive(Debug, Default)]
struct PieceTimes {
    first: Option<f64>,
    last: Option<f64>,
}

/// The tokens an event's `usage` (or llama-server's `timings`) counts, into `record`.
fn record_usage(record: &mut Record, value: &Value) {
    if let Some(usage) = value.get("usage").filter(|u| !u.is_null()) {
        record.prompt_tokens = usage["prompt_tokens"].as_u64();
        record.completion_tokens = usage["completion_tokens"].as_u64();
        if let Some(cached) = usage["prompt_tokens_details"]["cached_tokens"].as_u64() {
            record.cached_tokens = Some(cached);
        }
    }
    if let Some(cached) = value["timings"]["cache_n"].as_u64() {
        record.cached_tokens = Some(cached);
    }
}
