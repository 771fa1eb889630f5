//! The upstream engine's own figures for the snapshot (issue #65, "the same dashboard"): once a
//! second the app reads the upstream's `/slots` (llama-server) and `/metrics`, and
//! `/v1/scheduler` and the window show them as the upstream's (`upstream`). They are read here,
//! on the app's runtime, not in the worker, whose one thread runs the steps: a slow route of the
//! upstream never holds a step back. The worker refuses an upstream it cannot serve; the figures
//! are read whatever the kind, so that what it refused can still be seen.

use super::handle::ServiceCommand;
use crate::protocol::{UPSTREAM_API_KEY_ENV, UpstreamTarget};
use crate::upstream::{Probes, SlotState, UpstreamKind, UpstreamLoad, detect_kind, parse_slots};
use serde::Serialize;
use std::time::Duration;
use tokio::sync::mpsc;

/// How often the upstream's routes are read.
pub const UPSTREAM_POLL: Duration = Duration::from_secs(1);
/// The longest one route may take to answer before the reading says it failed.
const ROUTE_TIMEOUT: Duration = Duration::from_secs(5);

/// What the upstream says of itself, labelled as its own (not our scheduler's figures).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct UpstreamView {
    /// Its address as configured, without any user or password in it (the key is never shown).
    pub url: String,
    /// `llama-server`, `vllm` or `sglang`; `auto` until its routes have said which.
    pub kind: UpstreamKind,
    /// llama-server's slots from `/slots` (`null` for other kinds and while it does not answer).
    pub slots: Option<Vec<SlotState>>,
    /// Its queue, running requests, KV use, prefix-cache hits and preemptions, from its
    /// `/metrics` (each `null` where it does not say; llama-server answers `/metrics` only when
    /// started with `--metrics`).
    pub load: UpstreamLoad,
    /// Whether `/metrics` answered.
    pub metrics: bool,
    /// Why the last reading failed (it refused the connection, timed out, ...); `null` when it
    /// answered.
    pub error: Option<String>,
}

impl UpstreamView {
    fn unread(target: &UpstreamTarget) -> Self {
        Self {
            url: shown_url(&target.url),
            kind: kind_named(&target.kind),
            slots: None,
            load: UpstreamLoad::default(),
            metrics: false,
            error: None,
        }
    }
}

/// The kind `upstream_kind` names (`auto` for a name it does not know).
fn kind_named(name: &str) -> UpstreamKind {
    serde_json::from_value(serde_json::Value::String(name.to_owned())).unwrap_or_default()
}

/// `url` without a user or password (`http://me:secret@host` shows as `http://host/`).
fn shown_url(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut parsed) if !parsed.username().is_empty() || parsed.password().is_some() => {
            let _ = parsed.set_username("");
            let _ = parsed.set_password(None);
            parsed.to_string()
        }
        _ => url.to_owned(),
    }
}

/// The upstream's figures in words, for the window's upstream line and the headless log:
/// "llama-server at http://127.0.0.1:8080: 1 of 4 slots busy; 0 waiting, 1 running; its prefix
/// cache served 1200 prompt tokens".
pub fn upstream_words(u: &UpstreamView) -> String {
    let kind = match u.kind {
        UpstreamKind::Auto => "an upstream".to_owned(),
        kind => serde_json::to_value(kind)
            .ok()
            .and_then(|v| v.as_str().map(str::to_owned))
            .unwrap_or_default(),
    };
    let mut parts = Vec::new();
    if let Some(error) = &u.error {
        parts.push(format!("not answering ({error})"));
    }
    if let Some(slots) = &u.slots {
        let busy = slots.iter().filter(|s| s.busy).count();
        parts.push(format!("{busy} of {} slots busy", slots.len()));
    }
    let load = &u.load;
    match (load.requests_waiting, load.requests_running) {
        (Some(w), Some(r)) => parts.push(format!("{w} waiting, {r} running")),
        (Some(w), None) => parts.push(format!("{w} waiting")),
        (None, Some(r)) => parts.push(format!("{r} running")),
        (None, None) => {}
    }
    if let Some(kv) = load.kv_used_ratio {
        parts.push(format!("KV {:.0} % used", kv * 100.0));
    }
    if let Some(hits) = load.prefix_cache_hit_tokens {
        parts.push(format!("its prefix cache served {hits} prompt tokens"));
    }
    if let Some(preemptions) = load.preemptions {
        parts.push(format!("{preemptions} preemptions"));
    }
    if !u.metrics && u.error.is_none() && u.kind == UpstreamKind::LlamaServer {
        parts.push("no /metrics (start it with --metrics)".to_owned());
    }
    let head = format!("{kind} at {}", u.url);
    if parts.is_empty() {
        head
    } else {
        format!("{head}: {}", parts.join("; "))
    }
}

/// Starts reading the upstream of `target` (with the key the worker gets, if any) once every
/// [`UPSTREAM_POLL`], sending each reading that differs from the last to the actor; it stops
/// when the actor is gone. It holds the actor's channel weakly: the actor ends when its last
/// handle is dropped, whatever the watch is doing.
pub(super) fn spawn_watch(
    target: &UpstreamTarget,
    env: &[(std::ffi::OsString, std::ffi::OsString)],
    commands: mpsc::WeakUnboundedSender<ServiceCommand>,
) {
    let key = env
        .iter()
        .find(|(name, _)| name == UPSTREAM_API_KEY_ENV)
        .and_then(|(_, value)| value.to_str().map(str::to_owned));
    let Ok(client) = reqwest::Client::builder().timeout(ROUTE_TIMEOUT).build() else {
        return; // no TLS backend: the worker says the same when it starts
    };
    let routes = Routes {
        client,
        base: target.url.trim_end_matches('/').to_owned(),
        key,
    };
    let mut last = UpstreamView::unread(target);
    tokio::spawn(async move {
        let mut every = tokio::time::interval(UPSTREAM_POLL);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            if commands.strong_count() == 0 {
                return;
            }
            let reading = routes.read(&last).await;
            if reading != last {
                last = reading.clone();
                let sent = commands
                    .upgrade()
                    .is_some_and(|c| c.send(ServiceCommand::Upstream(reading)).is_ok());
                if !sent {
                    return;
                }
            }
        }
    });
}

/// The upstream's routes, read with the key.
struct Routes {
    client: reqwest::Client,
    base: String,
    key: Option<String>,
}

/// What one route answered: its body when 200, `None` for another status.
type Answer = Result<Option<String>, String>;

impl Routes {
    async fn get(&self, path: &str) -> Answer {
        let mut request = self.client.get(format!("{}{path}", self.base));
        if let Some(key) = &self.key {
            request = request.bearer_auth(key);
        }
        let response = request.send().await.map_err(|e| transport_words(&e))?;
        if response.status() != reqwest::StatusCode::OK {
            return Ok(None);
        }
        response
            .text()
            .await
            .map(Some)
            .map_err(|e| transport_words(&e))
    }

    async fn json(&self, path: &str) -> Result<Option<serde_json::Value>, String> {
        Ok(self
            .get(path)
            .await?
            .and_then(|body| serde_json::from_str(&body).ok()))
    }

    /// A new reading: the kind first, while it is not known, then its slots and metrics.
    async fn read(&self, last: &UpstreamView) -> UpstreamView {
        let mut view = UpstreamView {
            error: None,
            ..last.clone()
        };
        match self.read_into(&mut view).await {
            Ok(()) => view,
            Err(error) => UpstreamView {
                error: Some(error),
                slots: None,
                load: UpstreamLoad::default(),
                metrics: false,
                ..view
            },
        }
    }

    async fn read_into(&self, view: &mut UpstreamView) -> Result<(), String> {
        if view.kind == UpstreamKind::Auto {
            let probes = Probes {
                props: self.json("/props").await?,
                server_info: self.json("/server_info").await?,
                version: self.json("/version").await?,
                models: self.json("/v1/models").await?,
            };
            view.kind = detect_kind(&probes).unwrap_or(UpstreamKind::Auto);
        }
        view.slots = match view.kind {
            UpstreamKind::LlamaServer => self.json("/slots").await?.as_ref().and_then(parse_slots),
            _ => None,
        };
        let metrics = self.get("/metrics").await?;
        view.metrics = metrics.is_some();
        view.load = metrics.map_or_else(UpstreamLoad::default, |text| {
            UpstreamLoad::from_metrics(view.kind, &text)
        });
        Ok(())
    }
}

/// A transport error in words, without the URL reqwest puts in them (it may hold a password).
fn transport_words(e: &reqwest::Error) -> String {
    let what = if e.is_timeout() {
        "timed out"
    } else if e.is_connect() {
        "the connection failed"
    } else {
        "the answer was cut short"
    };
    let mut source = std::error::Error::source(e);
    let mut deepest = None;
    while let Some(s) = source {
        deepest = Some(s.to_string());
        source = s.source();
    }
    match deepest {
        Some(cause) => format!("{what}: {cause}"),
        None => what.to_owned(),
    }
}

#[cfg(test)]
#[path = "upstream_watch_tests.rs"]
mod tests;
