//! The scheduler's history with request ids, one line per event of the observation stream
//! (`observed`): arrivals, admissions, pauses and give-ways (who for whom), resumes, ends
//! (with TTFT), refusals (with the reason and its numbers), engine starts and settings
//! changes; the last [`LOG_ENTRIES_MAX`] are in the snapshot's `log[]` (so `/v1/scheduler`,
//! its event stream and the dashboard have them). No prompt text.

use super::observed::Observed;
use crate::ids::RequestId;
use serde::Serialize;

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
    /// The engine was lost (it died, broke the protocol or did not answer in time), and why.
    EngineLost,
    /// A live switch changed (`solo_priority`, `give_way`), naming who changed it.
    SettingsChanged,
    /// Something that should not happen and was survived (the engine's pool differing from
    /// the scheduler's, say).
    Diagnostic,
}

impl LogKind {
    /// What interrupted, refused or changed someone's run (not an arrival, a slot or a finish,
    /// which every request has): the log's "interruptions only" and the timeline's marks.
    pub fn interrupts(self) -> bool {
        matches!(
            self,
            Self::Paused
                | Self::GaveWay
                | Self::Parked
                | Self::Resumed
                | Self::Cancelled
                | Self::Failed
                | Self::Refused
                | Self::EngineRestart
                | Self::EngineLost
                | Self::SettingsChanged
                | Self::Diagnostic
        )
    }
}

/// One line of the log.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LogEntry {
    /// Seconds since the app's service started (the clock of `uptime_secs`, which runs on
    /// across engines).
    pub at_secs: f64,
    pub kind: LogKind,
    /// The request it is about (none for engine restarts and refusals before an id).
    pub request_id: Option<RequestId>,
    /// Its id as its client sees it (`chatcmpl-7`).
    pub client_id: Option<String>,
    /// The line in words, naming requests by their client ids (the event's words).
    pub text: String,
    /// Its place in the stream, from 0 for the app's run: an apply that starts a new engine
    /// does not number again (a client that follows `/v1/scheduler/events` knows what it has
    /// seen).
    pub seq: u64,
    /// What happened, typed: `{"type": "paused", "paused_for": {...}, ...}`.
    pub event: Observed,
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
pub type SharedLog = super::shared::Shared<LogEntry>;

/// The bounded log: the published list is the only copy.
#[derive(Debug)]
pub struct EventLog {
    entries: super::shared::Bounded<LogEntry>,
    /// The next entry's `seq`.
    next_seq: u64,
}

impl Default for EventLog {
    fn default() -> Self {
        Self {
            entries: super::shared::Bounded::new(LOG_ENTRIES_MAX),
            next_seq: 0,
        }
    }
}

impl EventLog {
    /// Adds an event as a line (its `seq` is given here); the line as logged.
    pub fn push(&mut self, mut entry: LogEntry) -> LogEntry {
        entry.seq = self.next_seq;
        self.next_seq += 1;
        self.entries.push(entry.clone());
        entry
    }

    /// The entries, oldest first.
    pub fn entries(&self) -> SharedLog {
        self.entries.shared()
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
                seq: 0,
                event: Observed::Resumed,
            });
        }
        let entries: Vec<LogEntry> = log.entries().iter().cloned().collect();
        assert_eq!(entries.len(), LOG_ENTRIES_MAX);
        assert_eq!(entries[0].request_id, Some(RequestId(5)));
        assert_eq!(entries[0].seq, 5, "each entry is numbered in order");
        assert_eq!(
            entries.last().unwrap().request_id,
            Some(RequestId(LOG_ENTRIES_MAX as u64 + 4))
        );
    }
}
