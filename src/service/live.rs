//! One live request's response side: the channel to its client, its UTF-8 decoder and stop
//! matcher (the same objects across every pause), its prompt and sampling.

use super::handle::{StreamEvent, Submission};
use crate::chat::{StopMatcher, Utf8Stream};
use std::collections::VecDeque;
use tokio::sync::mpsc;

#[derive(Debug)]
pub(super) struct Live {
    pub submission: Submission,
    pub events: mpsc::UnboundedSender<StreamEvent>,
    utf8: Utf8Stream,
    stop: StopMatcher,
    /// Text of sampled tokens not yet delivered, in order.
    pending: VecDeque<String>,
    pub stopped: bool,
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
        }
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
