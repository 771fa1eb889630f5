//! Anthropic Messages' writer: parsed pieces become content blocks and `message_start`,
//! `content_block_*`, `message_delta`, `message_stop` events.

use super::super::dialect::anthropic_error_json;
use crate::api::ApiError;
use crate::api::generation::Started;
use crate::api::wire::WireWriter;
use crate::chat::{Ending, Piece};
use crate::service::{FinishReason, Finished};
use axum::response::sse::Event;
use serde_json::{Value, json};

/// The block being written.
#[derive(Debug)]
enum Open {
    Text,
    Thinking,
    ToolUse,
}

/// Turns parsed pieces into content blocks and stream events.
#[derive(Debug)]
pub struct Writer {
    id: String,
    prompt_tokens: usize,
    model: String,
    blocks: Vec<Value>,
    open: Option<Open>,
}

fn event(kind: &str, body: Value) -> Event {
    Event::default().event(kind).data(body.to_string())
}

impl Writer {
    pub fn new(started: &Started, model: String) -> Self {
        Self {
            id: format!("msg_{}", started.id.0),
            prompt_tokens: started.prompt_tokens,
            model,
            blocks: Vec::new(),
            open: None,
        }
    }

    fn start_event(&self) -> Event {
        event(
            "message_start",
            json!({"type": "message_start", "message": {
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null,
                "usage": {"input_tokens": self.prompt_tokens, "output_tokens": 0},
            }}),
        )
    }

    fn close(&mut self) -> Vec<Event> {
        match self.open.take() {
            None => Vec::new(),
            Some(_) => vec![event(
                "content_block_stop",
                json!({"type": "content_block_stop", "index": self.blocks.len() - 1}),
            )],
        }
    }

    fn begin(&mut self, open: Open, block: Value) -> Event {
        self.open = Some(open);
        self.blocks.push(block.clone());
        event(
            "content_block_start",
            json!({"type": "content_block_start", "index": self.blocks.len() - 1, "content_block": block}),
        )
    }

    fn delta(&self, delta: Value) -> Event {
        event(
            "content_block_delta",
            json!({"type": "content_block_delta", "index": self.blocks.len() - 1, "delta": delta}),
        )
    }

    fn piece_events(&mut self, piece: Piece) -> Vec<Event> {
        let mut out = Vec::new();
        match piece {
            Piece::Content(text) => {
                if !matches!(self.open, Some(Open::Text)) {
                    out.extend(self.close());
                    out.push(self.begin(Open::Text, json!({"type": "text", "text": ""})));
                }
                if let Some(block) = self.blocks.last_mut() {
                    append(block, "text", &text);
                }
                out.push(self.delta(json!({"type": "text_delta", "text": text})));
            }
            Piece::Reasoning(text) => {
                if !matches!(self.open, Some(Open::Thinking)) {
                    out.extend(self.close());
                    out.push(self.begin(
                        Open::Thinking,
                        json!({"type": "thinking", "thinking": "", "signature": ""}),
                    ));
                }
                if let Some(block) = self.blocks.last_mut() {
                    append(block, "thinking", &text);
                }
                out.push(self.delta(json!({"type": "thinking_delta", "thinking": text})));
            }
            Piece::CallStart { id, name, .. } => {
                out.extend(self.close());
                out.push(self.begin(
                    Open::ToolUse,
                    json!({"type": "tool_use", "id": id, "name": name, "input": {}}),
                ));
                if let Some(block) = self.blocks.last_mut() {
                    block["partial_json"] = json!("");
                }
            }
            Piece::CallArguments { delta, .. } if matches!(self.open, Some(Open::ToolUse)) => {
                if let Some(block) = self.blocks.last_mut() {
                    append(block, "partial_json", &delta);
                }
                out.push(self.delta(json!({"type": "input_json_delta", "partial_json": delta})));
            }
            Piece::CallArguments { .. } => {}
            Piece::CallEnd { .. } => out.extend(self.close()),
            Piece::CallInvalid { raw, .. } => {
                out.extend(self.close());
                out.extend(self.piece_events(Piece::Content(raw)));
            }
        }
        out
    }

    /// The last events and the whole message.
    fn finish_events(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value) {
        let mut out = self.close();
        let (stop_reason, stop_sequence) = match done.reason {
            FinishReason::Length => ("max_tokens", Value::Null),
            _ if ending.all_calls_closed() => ("tool_use", Value::Null),
            _ => match &done.stop_sequence {
                Some(s) => ("stop_sequence", json!(s)),
                None => ("end_turn", Value::Null),
            },
        };
        let usage = json!({
            "input_tokens": done.usage.prompt_tokens.saturating_sub(done.usage.cached_tokens),
            "cache_read_input_tokens": done.usage.cached_tokens,
            "cache_creation_input_tokens": 0,
            "output_tokens": done.usage.completion_tokens,
        });
        out.push(event(
            "message_delta",
            json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": stop_sequence}, "usage": usage}),
        ));
        out.push(event("message_stop", json!({"type": "message_stop"})));
        // The whole message: calls carry their parsed input; a cut call is left out.
        let content: Vec<Value> = self
            .blocks
            .iter()
            .filter_map(|b| {
                let mut b = b.clone();
                if let Some(partial) = b.as_object_mut()?.remove("partial_json") {
                    let input: Value = serde_json::from_str(partial.as_str()?).ok()?;
                    b["input"] = input;
                }
                Some(b)
            })
            .collect();
        let message = json!({
            "id": self.id, "type": "message", "role": "assistant", "model": self.model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": stop_sequence,
            "usage": usage,
        });
        (out, message)
    }
}

fn append(block: &mut Value, key: &str, text: &str) {
    let mut s = block[key].as_str().unwrap_or("").to_owned();
    s.push_str(text);
    block[key] = json!(s);
}

fn error_event(error: &ApiError) -> Event {
    event("error", anthropic_error_json(error))
}

/// Anthropic's Messages events (`message_start`, content blocks, `message_delta`,
/// `message_stop`).
impl WireWriter for Writer {
    fn begin(&mut self) -> Vec<Event> {
        vec![self.start_event()]
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        self.piece_events(piece)
    }

    fn finish(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value) {
        self.finish_events(done, ending)
    }

    fn fail(&mut self, error: &ApiError) -> Vec<Event> {
        vec![error_event(error)]
    }

    /// R13 for Messages: a `ping` event.
    fn keep_alive(&mut self) -> Vec<Event> {
        vec![event("ping", json!({"type": "ping"}))]
    }
}
