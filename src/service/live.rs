//! One live request's response side: the channel to its client, its UTF-8 decoder and stop
//! matcher (the same objects across every pause), its prompt and sampling.

use super::handle::{StreamEvent, Submission};
use crate::chat::{StopMatcher, Utf8Stream};
use std::collections::VecDeque;
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Deliveries kept for the output rate.
const RATE_WINDOW_TOKENS: usize = 32;

#[derive(Debug)]
pub(super) struct Live {
    pub submission: Submission,
    pub events: mpsc::UnboundedSender<StreamEvent>,
    utf8: Utf8Stream,
    stop: StopMatcher,
    /// Text of sampled tokens not yet delivered, in order.
    pending: VecDeque<String>,
    pub stopped: bool,
    pub arrived: Instant,
    /// When the last few tokens went out (the first one is the TTFT).
    sent_at: VecDeque<Instant>,
    tokens_sent: u64,
    first_token_at: Option<Instant>,
    /// What parks cost it and what its pauses of others saved it.
    pub cost: super::cost::Ledger,
}

impl Live {
    pub fn new(submission: Submission, events: mpsc::UnboundedSender<StreamEvent>) -> Self {
        let stop = StopMatcher::new(submission.stop.clone());
        Self {
            submission,
            events,
            utf8: Utf8Stream::new(),
            stop,
            pending: VecDeque::new(),
            stopped: false,
            arrived: Instant::now(),
            sent_at: VecDeque::new(),
            tokens_sent: 0,
            first_token_at: None,
            cost: super::cost::Ledger::default(),
        }
    }

    /// Notes a delivered token at `now`; returns the time to first token for the first one.
    pub fn note_delivery(&mut self, now: Instant) -> Option<Duration> {
        self.tokens_sent += 1;
        if self.sent_at.len() == RATE_WINDOW_TOKENS {
            self.sent_at.pop_front();
        }
        self.sent_at.push_back(now);
        if self.tokens_sent == 1 {
            self.first_token_at = Some(now);
        }
        (self.tokens_sent == 1).then(|| now.duration_since(self.arrived))
    }

    /// Tokens delivered so far.
    pub fn tokens_sent(&self) -> u64 {
        self.tokens_sent
    }

    /// Seconds from arrival to the first token, once it went out.
    pub fn ttft_secs(&self) -> Option<f64> {
        self.first_token_at
            .map(|first| first.duration_since(self.arrived).as_secs_f64())
    }

    /// Output tokens per second over the last deliveries, up to `now` (so a stall lowers it).
    pub fn tokens_per_sec(&self, now: Instant) -> Option<f64> {
        let first = *self.sent_at.front()?;
        let secs = now.duration_since(first).as_secs_f64();
        (self.sent_at.len() >= 2 && secs > 0.0).then(|| (self.sent_at.len() - 1) as f64 / secs)
    }

    /// Decodes a sampled token's bytes; returns whether a stop string ended the output.
    pub fn sampled(&mut self, bytes: &[u8]) -> bool {
        let text = self.utf8.push(bytes);
        let released = self.stop.push(&text);
        self.pending.push_back(released.text);
        self.stopped |= released.stopped;
        released.stopped
    }

    /// The scheduler delivered the next token: its text goes out.
    pub fn deliver(&mut self) {
        if let Some(text) = self.pending.pop_front() {
            self.send_text(text);
        }
    }

    /// The stop string that ended the output, if one did.
    pub fn matched_stop(&self) -> Option<String> {
        self.stop.matched().map(str::to_owned)
    }

    /// The end: what the decoder and matcher still hold is text (unless a stop matched).
    pub fn flush(&mut self) {
        if self.stopped {
            return;
        }
        let tail = self.utf8.finish();
        let mut text = self.stop.push(&tail).text;
        text.push_str(&self.stop.finish());
        self.send_text(text);
    }

    fn send_text(&self, text: String) {
        if !text.is_empty() {
            let _ = self.events.send(StreamEvent::Text(text));
        }
    }
}
