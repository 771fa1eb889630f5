//! The Responses API's writer: parsed pieces become output items and the sequence-numbered
//! `response.*` events.

use crate::api::ApiError;
use crate::api::generation::Started;
use crate::api::wire::WireWriter;
use crate::chat::{Ending, Piece};
use crate::service::{FinishReason, Finished};
use axum::response::sse::Event;
use serde_json::{Value, json};

/// The item being written.
#[derive(Debug)]
enum Open {
    Message {
        id: String,
        text: String,
    },
    Reasoning {
        id: String,
        text: String,
    },
    Call {
        id: String,
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// Turns parsed pieces into output items and stream events.
#[derive(Debug)]
pub struct Writer {
    id: String,
    model: String,
    created: u64,
    echo: Value,
    sequence: u64,
    items: Vec<Value>,
    open: Option<Open>,
    next_item: usize,
}

impl Writer {
    pub fn new(started: &Started, model: String, echo: Value) -> Self {
        Self {
            id: format!("resp_{}", started.id.0),
            model,
            created: started.created,
            echo,
            sequence: 0,
            items: Vec::new(),
            open: None,
            next_item: 0,
        }
    }

    fn event(&mut self, kind: &str, mut body: Value) -> Event {
        body["type"] = json!(kind);
        body["sequence_number"] = json!(self.sequence);
        self.sequence += 1;
        Event::default().event(kind).data(body.to_string())
    }

    fn item_id(&mut self, prefix: &str) -> String {
        self.next_item += 1;
        format!(
            "{prefix}_{}_{}",
            self.id.trim_start_matches("resp_"),
            self.next_item
        )
    }

    /// The response object (`status`: in_progress, completed, incomplete, failed).
    fn response(&self, status: &str, extra: Value) -> Value {
        let mut r = json!({
            "id": self.id,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "model": self.model,
            "output": self.items,
            "error": null,
            "incomplete_details": null,
            "metadata": {},
            "usage": null,
        });
        if let (Some(r), Some(echo)) = (r.as_object_mut(), self.echo.as_object()) {
            for (k, v) in echo {
                r.insert(k.clone(), v.clone());
            }
        }
        if let (Some(r), Some(extra)) = (r.as_object_mut(), extra.as_object()) {
            for (k, v) in extra {
                r.insert(k.clone(), v.clone());
            }
        }
        r
    }

    fn output_index(&self) -> usize {
        self.items.len()
    }

    fn begin_events(&mut self) -> Vec<Event> {
        let created = self.response("in_progress", json!({}));
        vec![
            self.event("response.created", json!({"response": created})),
            self.event("response.in_progress", json!({"response": created})),
        ]
    }

    fn in_progress(&mut self) -> Event {
        let r = self.response("in_progress", json!({}));
        self.event("response.in_progress", json!({"response": r}))
    }

    /// Ends the open item (`complete`: a call that closed; else it is `incomplete`).
    fn close(&mut self, complete: bool) -> Vec<Event> {
        let index = self.output_index();
        let mut out = Vec::new();
        match self.open.take() {
            None => {}
            Some(Open::Message { id, text }) => {
                let part = json!({"type": "output_text", "text": text, "annotations": []});
                out.push(self.event("response.output_text.done", json!({"item_id": id, "output_index": index, "content_index": 0, "text": text, "logprobs": []})));
                out.push(self.event(
                    "response.content_part.done",
                    json!({"item_id": id, "output_index": index, "content_index": 0, "part": part}),
                ));
                let item = json!({"type": "message", "id": id, "status": "completed", "role": "assistant", "content": [part]});
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.items.push(item);
            }
            Some(Open::Reasoning { id, text }) => {
                let part = json!({"type": "summary_text", "text": text});
                out.push(self.event(
                    "response.reasoning_summary_text.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "text": text}),
                ));
                out.push(self.event(
                    "response.reasoning_summary_part.done",
                    json!({"item_id": id, "output_index": index, "summary_index": 0, "part": part}),
                ));
                let item = json!({"type": "reasoning", "id": id, "summary": [part]});
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.items.push(item);
            }
            Some(Open::Call {
                id,
                call_id,
                name,
                arguments,
            }) => {
                let status = if complete { "completed" } else { "incomplete" };
                if complete {
                    out.push(self.event("response.function_call_arguments.done", json!({"item_id": id, "output_index": index, "name": name, "arguments": arguments})));
                }
                let item = json!({"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": arguments, "status": status});
                out.push(self.event(
                    "response.output_item.done",
                    json!({"output_index": index, "item": item}),
                ));
                self.items.push(item);
            }
        }
        out
    }

    fn piece_events(&mut self, piece: Piece) -> Vec<Event> {
        let mut out = Vec::new();
        match piece {
            Piece::Content(text) => {
                if !matches!(self.open, Some(Open::Message { .. })) {
                    out.extend(self.close(false));
                    let id = self.item_id("msg");
                    let index = self.output_index();
                    out.push(self.event("response.output_item.added", json!({"output_index": index, "item": {"type": "message", "id": id, "status": "in_progress", "role": "assistant", "content": []}})));
                    out.push(self.event("response.content_part.added", json!({"item_id": id, "output_index": index, "content_index": 0, "part": {"type": "output_text", "text": "", "annotations": []}})));
                    self.open = Some(Open::Message {
                        id,
                        text: String::new(),
                    });
                }
                let index = self.output_index();
                if let Some(Open::Message { id, text: all }) = &mut self.open {
                    all.push_str(&text);
                    let id = id.clone();
                    out.push(self.event("response.output_text.delta", json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text, "logprobs": []})));
                }
            }
            Piece::Reasoning(text) => {
                if !matches!(self.open, Some(Open::Reasoning { .. })) {
                    out.extend(self.close(false));
                    let id = self.item_id("rs");
                    let index = self.output_index();
                    out.push(self.event("response.output_item.added", json!({"output_index": index, "item": {"type": "reasoning", "id": id, "summary": []}})));
                    out.push(self.event("response.reasoning_summary_part.added", json!({"item_id": id, "output_index": index, "summary_index": 0, "part": {"type": "summary_text", "text": ""}})));
                    self.open = Some(Open::Reasoning {
                        id,
                        text: String::new(),
                    });
                }
                let index = self.output_index();
                if let Some(Open::Reasoning { id, text: all }) = &mut self.open {
                    all.push_str(&text);
                    let id = id.clone();
                    out.push(self.event("response.reasoning_summary_text.delta", json!({"item_id": id, "output_index": index, "summary_index": 0, "delta": text})));
                }
            }
            Piece::CallStart {
                id: call_id, name, ..
            } => {
                out.extend(self.close(false));
                let id = self.item_id("fc");
                let index = self.output_index();
                out.push(self.event("response.output_item.added", json!({"output_index": index, "item": {"type": "function_call", "id": id, "call_id": call_id, "name": name, "arguments": "", "status": "in_progress"}})));
                self.open = Some(Open::Call {
                    id,
                    call_id,
                    name,
                    arguments: String::new(),
                });
            }
            Piece::CallArguments { delta, .. } => {
                let index = self.output_index();
                if let Some(Open::Call { id, arguments, .. }) = &mut self.open {
                    arguments.push_str(&delta);
                    let id = id.clone();
                    out.push(self.event(
                        "response.function_call_arguments.delta",
                        json!({"item_id": id, "output_index": index, "delta": delta}),
                    ));
                }
            }
            Piece::CallEnd { .. } => out.extend(self.close(true)),
            Piece::CallInvalid { raw, .. } => {
                out.extend(self.close(false));
                out.extend(self.piece_events(Piece::Content(raw)));
            }
        }
        out
    }

    /// The last events: the open item closed, then `response.completed` (or `.incomplete`
    /// when the token limit cut the output).
    fn finish_events(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value) {
        let mut out = self.close(false);
        let usage = json!({
            "input_tokens": done.usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": done.usage.cached_tokens},
            "output_tokens": done.usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": done.usage.prompt_tokens + done.usage.completion_tokens,
        });
        let cut = done.reason == FinishReason::Length || ending.cut_call;
        let (status, kind) = if cut {
            ("incomplete", "response.incomplete")
        } else {
            ("completed", "response.completed")
        };
        let details = if cut {
            json!({"reason": "max_output_tokens"})
        } else {
            Value::Null
        };
        let response = self.response(
            status,
            json!({"usage": usage, "incomplete_details": details}),
        );
        out.push(self.event(kind, json!({"response": response})));
        (out, response)
    }

    fn failed(&mut self, error: &ApiError) -> Event {
        let body = error.body();
        let response = self.response(
            "failed",
            json!({"error": {"code": body["error"]["code"].as_str().unwrap_or("server_error"), "message": error.to_string()}}),
        );
        self.event("response.failed", json!({"response": response}))
    }
}

/// The Responses API's event grammar (sequence-numbered `response.*` events).
impl WireWriter for Writer {
    fn begin(&mut self) -> Vec<Event> {
        self.begin_events()
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        self.piece_events(piece)
    }

    fn finish(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value) {
        self.finish_events(done, ending)
    }

    fn fail(&mut self, error: &ApiError) -> Vec<Event> {
        vec![self.failed(error)]
    }

    /// R13 for the Responses API: a `response.in_progress` event.
    fn keep_alive(&mut self) -> Vec<Event> {
        vec![self.in_progress()]
    }
}
