//! The worker's HTTP to an upstream engine: JSON requests answered whole, and token streams
//! read on a runtime of their own while the worker's loop goes on (the worker is synchronous:
//! it blocks on a stream's next event only when a step asks for that request's token).
//!
//! Transport failures (the upstream went away, a connection reset, a stream that ends without
//! its last event) are [`Transport`] errors, which the engine turns into the worker's exit: the
//! host then sees an engine failure exactly as a worker crash. An answer with an error status
//! is the request's own failure.

use crate::ids::TokenId;
use serde_json::Value;
use std::time::Duration;
use tokio::sync::mpsc;

/// The upstream did not answer as a server does (unreachable, reset, cut short).
#[derive(Debug)]
pub(super) struct Transport(pub String);

/// One event of a token stream.
#[derive(Debug)]
pub(super) enum StreamEvent {
    /// Tokens sampled (usually one; more where the server held back an incomplete character).
    Tokens(Vec<TokenId>),
    /// The last event: llama-server's `stop_type` (`eos`, `limit`, `word`).
    End { stop_type: String },
    /// An error status with its body (the request's own failure).
    Refused { status: u16, body: String },
    /// The stream broke off.
    Lost(String),
}

pub(super) struct Http {
    runtime: tokio::runtime::Runtime,
    client: reqwest::Client,
    base: String,
    key: Option<String>,
}

/// A token stream being read; dropping it aborts the read, which closes the connection (the
/// upstream then stops generating for it).
pub(super) struct Stream {
    events: mpsc::UnboundedReceiver<StreamEvent>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Http {
    pub fn new(url: &str, key: Option<String>) -> Result<Self, String> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("upstream-http")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the HTTP runtime: {e}"))?;
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .build()
            .map_err(|e| format!("cannot build the HTTP client: {e}"))?;
        Ok(Self {
            runtime,
            client,
            base: url.trim_end_matches('/').to_owned(),
            key,
        })
    }

    pub fn base(&self) -> &str {
        &self.base
    }

    fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, format!("{}{path}", self.base));
        match &self.key {
            Some(key) => builder.bearer_auth(key),
            None => builder,
        }
    }

    /// `GET path`: its JSON body when it answers 200 with JSON, `None` for any other answer.
    pub fn get_json(&self, path: &str) -> Result<Option<Value>, Transport> {
        let request = self
            .request(reqwest::Method::GET, path)
            .timeout(Duration::from_secs(30));
        self.runtime.block_on(async move {
            let response = request.send().await.map_err(|e| Transport(e.to_string()))?;
            if response.status() != reqwest::StatusCode::OK {
                return Ok(None);
            }
            Ok(response.json::<Value>().await.ok())
        })
    }

    /// `POST path` with a JSON body, answered whole: the status and the body (JSON, else the
    /// text as a JSON string).
    pub fn post_json(&self, path: &str, body: &Value) -> Result<(u16, Value), Transport> {
        let request = self.request(reqwest::Method::POST, path).json(body);
        self.runtime.block_on(async move {
            let response = request.send().await.map_err(|e| Transport(e.to_string()))?;
            let status = response.status().as_u16();
            let text = response
                .text()
                .await
                .map_err(|e| Transport(e.to_string()))?;
            let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
            Ok((status, body))
        })
    }

    /// Starts a streamed `POST path` (llama-server's server-sent events, `return_tokens` on).
    pub fn stream(&self, path: &str, body: &Value) -> Stream {
        let (sender, events) = mpsc::unbounded_channel();
        let request = self.request(reqwest::Method::POST, path).json(body);
        let task = self.runtime.spawn(read_stream(request, sender));
        Stream { events, task }
    }

    /// The stream's next event, waiting for it.
    pub fn next_event(&self, stream: &mut Stream) -> StreamEvent {
        self.runtime
            .block_on(stream.events.recv())
            .unwrap_or_else(|| StreamEvent::Lost("the stream's reader stopped".into()))
    }
}

async fn read_stream(request: reqwest::RequestBuilder, sender: mpsc::UnboundedSender<StreamEvent>) {
    let event = match read_events(request, &sender).await {
        Ok(None) => StreamEvent::Lost("the stream ended without its last event".into()),
        Ok(Some(last)) => last,
        Err(e) => StreamEvent::Lost(e),
    };
    let _ = sender.send(event);
}

/// Reads the events, sending the tokens; returns the last event (`None`: the body ended before
/// one).
async fn read_events(
    request: reqwest::RequestBuilder,
    sender: &mpsc::UnboundedSender<StreamEvent>,
) -> Result<Option<StreamEvent>, String> {
    let mut response = request.send().await.map_err(|e| e.to_string())?;
    let status = response.status().as_u16();
    if status != 200 {
        let body = response.text().await.unwrap_or_default();
        return Ok(Some(StreamEvent::Refused { status, body }));
    }
    let mut pending = Vec::new();
    while let Some(bytes) = response.chunk().await.map_err(|e| e.to_string())? {
        pending.extend_from_slice(&bytes);
        while let Some(end) = pending.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = pending.drain(..=end).collect();
            let Some(data) = line.strip_prefix(b"data: ") else {
                continue;
            };
            let Ok(event) = serde_json::from_slice::<Value>(data) else {
                continue;
            };
            if let Some(last) = stream_event(&event, sender) {
                return Ok(Some(last));
            }
        }
    }
    Ok(None)
}

/// Sends one event's tokens; returns the last event if this is it.
fn stream_event(event: &Value, sender: &mpsc::UnboundedSender<StreamEvent>) -> Option<StreamEvent> {
    if let Some(error) = event.get("error") {
        return Some(StreamEvent::Refused {
            status: error.get("code").and_then(Value::as_u64).unwrap_or(500) as u16,
            body: error.to_string(),
        });
    }
    let tokens: Vec<TokenId> = event
        .get("tokens")
        .and_then(Value::as_array)
        .map(|ids| {
            ids.iter()
                .filter_map(|t| t.as_i64().map(|t| t as TokenId))
                .collect()
        })
        .unwrap_or_default();
    if !tokens.is_empty() {
        let _ = sender.send(StreamEvent::Tokens(tokens));
    }
    if event.get("stop").and_then(Value::as_bool) == Some(true) {
        return Some(StreamEvent::End {
            stop_type: event
                .get("stop_type")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
        });
    }
    None
}
