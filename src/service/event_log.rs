//! The scheduler's history with request ids: arrivals, admissions, pauses and give-ways (who
//! for whom), resumes, finishes (with TTFT), cancellations, failures, refusals (with the reason
//! and its numbers) and engine restarts; the last [`LOG_ENTRIES_MAX`] are in the snapshot's
//! `log[]` (so `/v1/scheduler`, its event stream and the dashboard have them). No prompt text.

use crate::ids::RequestId;
use serde::Serialize;
use std::sync::Arc;

/// Entries kept (older ones leave first).
pub const LOG_ENTRIES_MAX: usize = 200;

/// What happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LogKind {
    Arrived,
    Admitted,
    Paused,
    GaveWay,
    Parked,
    Resumed,
    Finished,
    Cancelled,
    Failed,
    Refused,
    EngineRestart,
    /// A live switch changed (`solo_priority`, `give_way`), naming who changed it.
    SettingsChanged,
    /// Something that should not happen and was survived (the engine's pool differing from
    /// the scheduler's, say).
    Diagnostic,
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// Seconds since the service started (the clock of `uptime_secs`).
    pub at_secs: f64,
    pub kind: LogKind,
    /// The request it is about (none for engine restarts and refusals before an id).
    pub request_id: Option<RequestId>,
    /// Its id as its client sees it (`chatcmpl-7`).
    pub client_id: Option<String>,
    /// The line in words, naming requests by their client ids.
    pub text: String,
}

/// The last prompt refused as longer than the context: what the dashboard's banner says.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LengthRefusal {
    pub at_secs: f64,
    /// Who sent it (the API key's name or the User-Agent's product; may be empty).
    pub client: String,
    pub route: super::handle::Route,
    pub prompt_tokens: u32,
    pub max_context_tokens: u32,
}

/// The log's entries as published, oldest first: shared, so the snapshot built after every
/// step copies a pointer, not up to 200 lines (a new list is made only when an entry comes).
#[derive(Debug, Clone, Default)]
pub struct SharedLog(Arc<Vec<LogEntry>>);

impl SharedLog {
    pub fn iter(&self) -> std::slice::Iter<'_, LogEntry> {
        self.0.iter()
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn as_slice(&self) -> &[LogEntry] {
        &self.0
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

impl FromIterator<LogEntry> for SharedLog {
    fn from_iter<I: IntoIterator<Item = LogEntry>>(entries: I) -> Self {
        Self(Arc::new(entries.into_iter().collect()))
    }
}

impl PartialEq for SharedLog {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || self.0 == other.0
    }
}

impl Serialize for SharedLog {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

/// The bounded log: the published list is the only copy (each entry makes a new one, the
/// oldest left out once there are `LOG_ENTRIES_MAX`).
#[derive(Debug, Default)]
pub struct EventLog {
    published: SharedLog,
}

impl EventLog {
    pub fn push(&mut self, entry: LogEntry) {
        let old = &self.published.0;
        let dropped = (old.len() + 1).saturating_sub(LOG_ENTRIES_MAX);
        let mut entries = Vec::with_capacity(old.len() + 1 - dropped);
        entries.extend(old.iter().skip(dropped).cloned());
        entries.push(entry);
        self.published = SharedLog(Arc::new(entries));
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> SharedLog {
        self.published.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_the_last_entries_oldest_first() {
        let mut log = EventLog::default();
        for i in 0..LOG_ENTRIES_MAX + 5 {
            log.push(LogEntry {
                at_secs: i as f64,
                kind: LogKind::Arrived,
                request_id: Some(RequestId(i as u64)),
                client_id: None,
                text: String::new(),
            });
        }
        let entries: Vec<LogEntry> = log.entries().iter().cloned().collect();
        assert_eq!(entries.len(), LOG_ENTRIES_MAX);
        assert_eq!(entries[0].request_id, Some(RequestId(5)));
        assert_eq!(
            entries.last().unwrap().request_id,
            Some(RequestId(LOG_ENTRIES_MAX as u64 + 4))
        );
    }
}
