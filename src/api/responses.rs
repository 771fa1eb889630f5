//! `POST /v1/responses`, stateless (what Codex CLI speaks): `input` as text or items
//! (messages, `function_call`, `function_call_output`, reasoning), `instructions`, function
//! `tools` (other tool types are ignored with a warning, never a 400), `tool_choice`,
//! `max_output_tokens` (none: the rest of the context), `temperature`, `top_p`, `text.format`,
//! `stream`. Unknown fields (`store`, `include`, `reasoning`, `prompt_cache_key`, ...) are
//! ignored. Streams follow the Responses event grammar, every event with its
//! `sequence_number` and the `item_id` / `output_index` / `content_index` it belongs to, and a
//! `response.in_progress` at least every 10 s while the request waits, is parked or is read.

use super::chat::{body_bytes, parse_body};
use super::generation::{self, Generation, Next, Started, strip_reasoning};
use super::tools::{self, JsonSchemaDto, ResponseFormatDto, ToolDto};
use super::{ApiError, ApiState};
use crate::chat::{ChatMessage, Ending, Piece, ToolCall};
use crate::service::FinishReason;
use crate::service::{Finished, StreamEvent};
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;
use std::convert::Infallible;

#[derive(Debug, Deserialize)]
pub struct ResponsesDto {
    #[serde(default)]
    pub model: Option<String>,
    pub input: InputDto,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub text: Option<TextDto>,
    #[serde(default)]
    pub stream: bool,
    /// Any JSON: a value that is not an integer counts as 0.
    #[serde(default)]
    pub priority: Option<Value>,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum InputDto {
    Text(String),
    Items(Vec<Value>),
}

#[derive(Debug, Deserialize)]
pub struct TextDto {
    #[serde(default)]
    pub format: Option<FormatDto>,
}

#[derive(Debug, Deserialize)]
pub struct FormatDto {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub schema: Option<Value>,
}

/// A validated Responses request.
#[derive(Debug)]
pub struct ResponsesRequest {
    pub generation: Generation,
    pub stream: bool,
    /// Echoed in the response object.
    pub echo: Value,
}

fn bad(message: String, param: &str) -> ApiError {
    ApiError::bad(message, Some(param))
}

/// The text of a string or of an array of text parts (`input_text`, `output_text`, `text`).
fn text_of(value: &Value, param: &str) -> Result<String, ApiError> {
    match value {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(parts) => {
            let mut text = String::new();
            for (j, part) in parts.iter().enumerate() {
                match part.get("type").and_then(Value::as_str) {
                    Some("input_text" | "output_text" | "text" | "summary_text") => {
                        text.push_str(part.get("text").and_then(Value::as_str).unwrap_or(""));
                    }
                    Some("refusal") => {}
                    // An agent's history may hold screenshots: this engine reads text only.
                    Some("input_image" | "input_file") => {
                        tracing::warn!("responses: an {param} part that is not text was left out");
                        text.push_str("[image omitted]");
                    }
                    other => {
                        return Err(bad(
                            format!(
                                "`{param}[{j}]`: only text parts are supported, got {:?}",
                                other.unwrap_or("no type")
                            ),
                            &format!("{param}[{j}]"),
                        ));
                    }
                }
            }
            Ok(text)
        }
        other => Err(bad(
            format!("`{param}` must be a string or an array of parts, got {other}"),
            param,
        )),
    }
}

/// Input items → chat messages. Consecutive calls join one assistant turn; a call's output
/// names its function through the call id; reasoning items are dropped.
pub fn items_to_messages(items: &[Value]) -> Result<Vec<ChatMessage>, ApiError> {
    let mut messages: Vec<ChatMessage> = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .or_else(|| item.get("role").map(|_| "message"));
        match kind {
            Some("message") => {
                let role = match item.get("role").and_then(Value::as_str) {
                    Some("user") => "user",
                    Some("assistant") => "assistant",
                    Some("system" | "developer") => "system",
                    other => {
                        return Err(bad(
                            format!(
                                "`input[{i}].role` must be user, assistant, system or developer, got {other:?}"
                            ),
                            &format!("input[{i}].role"),
                        ));
                    }
                };
                let content = item.get("content").unwrap_or(&Value::Null);
                let mut text = text_of(content, &format!("input[{i}].content"))?;
                if role == "assistant" {
                    text = strip_reasoning(&text).to_owned();
                }
                messages.push(ChatMessage::new(role, &text));
            }
            Some("function_call") => {
                let field = |name: &str| {
                    item.get(name).and_then(Value::as_str).ok_or_else(|| {
                        bad(
                            format!("`input[{i}].{name}` must be a string"),
                            &format!("input[{i}].{name}"),
                        )
                    })
                };
                let (call_id, name, arguments) =
                    (field("call_id")?, field("name")?, field("arguments")?);
                // History is replayed as the client kept it: a call whose arguments were cut
                // (an incomplete item) must not make every later turn fail.
                let arguments: Value = serde_json::from_str(arguments)
                    .ok()
                    .filter(Value::is_object)
                    .unwrap_or_else(|| {
                        tracing::warn!(
                            "responses: input[{i}].arguments is not a JSON object; replayed as {{}}"
                        );
                        json!({})
                    });
                if !tools::valid_name(name) {
                    return Err(bad(
                        format!(
                            "`input[{i}].name` must be 1 to 64 letters, digits, _ or -, got {name:?}"
                        ),
                        &format!("input[{i}].name"),
                    ));
                }
                names.insert(call_id.to_owned(), name.to_owned());
                let call = ToolCall {
                    name: name.to_owned(),
                    arguments,
                };
                match messages.last_mut() {
                    Some(last) if last.role == "assistant" => last.tool_calls.push(call),
                    _ => {
                        let mut message = ChatMessage::new("assistant", "");
                        message.tool_calls.push(call);
                        messages.push(message);
                    }
                }
            }
            Some("function_call_output") => {
                let call_id = item.get("call_id").and_then(Value::as_str).unwrap_or("");
                let name = names.get(call_id).ok_or_else(|| {
                    bad(
                        format!("`input[{i}].call_id` {call_id:?} names no earlier function_call"),
                        &format!("input[{i}].call_id"),
                    )
                })?;
                let output = text_of(
                    item.get("output").unwrap_or(&Value::Null),
                    &format!("input[{i}].output"),
                )?;
                let mut message = ChatMessage::new("tool", &output);
                message.name = Some(name.clone());
                messages.push(message);
            }
            // Reasoning is dropped from history (its encrypted content is never asked for).
            Some("reasoning") => {}
            other => {
                tracing::warn!(
                    "responses: input item {i} of type {:?} ignored",
                    other.unwrap_or("none")
                );
            }
        }
    }
    Ok(messages)
}

/// The Responses tool shape (`{"type": "function", "name", "parameters", ...}`) as Chat's.
/// The functions inside a `namespace` tool (Codex's MCP tools) are offered under their own
/// names; other types (web search, ...) are left out with a warning.
fn function_tools(tools: Vec<Value>) -> Result<Vec<ToolDto>, ApiError> {
    let mut flat = Vec::new();
    for (i, tool) in tools.into_iter().enumerate() {
        match tool.get("type").and_then(Value::as_str) {
            Some("namespace") => {
                for inner in tool
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                {
                    flat.push((i, inner.clone()));
                }
            }
            _ => flat.push((i, tool)),
        }
    }
    let mut out = Vec::new();
    for (i, tool) in flat {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            tracing::warn!("responses: tools[{i}] of type {kind:?} ignored");
            continue;
        }
        out.push(tools::tool_from_json(i, &tool, "parameters")?);
    }
    Ok(out)
}

/// `tool_choice` in Chat's shape; a hosted tool's choice counts as `auto`.
fn chat_tool_choice(choice: Option<Value>) -> Option<Value> {
    match choice? {
        Value::String(s) => Some(Value::String(s)),
        v if v.get("type").and_then(Value::as_str) == Some("function") => {
            Some(json!({"type": "function", "function": {"name": v.get("name")}}))
        }
        other => {
            tracing::warn!("responses: tool_choice {other} taken as auto");
            Some(json!("auto"))
        }
    }
}

impl ResponsesRequest {
    pub fn parse(dto: ResponsesDto, state: &ApiState) -> Result<Self, ApiError> {
        let mut messages = Vec::new();
        if let Some(instructions) = &dto.instructions {
            messages.push(ChatMessage::new("system", instructions));
        }
        match &dto.input {
            InputDto::Text(text) => messages.push(ChatMessage::new("user", text)),
            InputDto::Items(items) => messages.extend(items_to_messages(items)?),
        }
        if !messages.iter().any(|m| m.role != "system") {
            return Err(bad("`input` has no message".into(), "input"));
        }
        if let Some(t) = dto.temperature
            && !(t.is_finite() && (0.0..=2.0).contains(&t))
        {
            return Err(bad(
                format!("`temperature` must be between 0 and 2, got {t}"),
                "temperature",
            ));
        }
        if let Some(p) = dto.top_p
            && !(p.is_finite() && (0.0..=1.0).contains(&p))
        {
            return Err(bad(
                format!("`top_p` must be between 0 and 1, got {p}"),
                "top_p",
            ));
        }
        if dto.max_output_tokens == Some(0) {
            return Err(bad(
                "`max_output_tokens` must be at least 1, got 0".into(),
                "max_output_tokens",
            ));
        }
        let format = dto
            .text
            .as_ref()
            .and_then(|t| t.format.as_ref())
            .map(|f| ResponseFormatDto {
                kind: f.kind.clone(),
                json_schema: Some(JsonSchemaDto {
                    schema: f.schema.clone(),
                }),
            });
        let tools_given = dto.tools.clone().unwrap_or_default();
        let tools = function_tools(tools_given.clone())?;
        let choice = chat_tool_choice(dto.tool_choice.clone());
        let output = tools::output_spec(
            Some(tools),
            choice.as_ref(),
            format,
            state.prompts.tokenizer(),
            state.prompts.tool_format(),
        )
        .map_err(|e| rename_param(e, "response_format", "text.format"))?;
        let echo = json!({
            "instructions": dto.instructions,
            "max_output_tokens": dto.max_output_tokens,
            "temperature": dto.temperature.unwrap_or(1.0),
            "top_p": dto.top_p.unwrap_or(1.0),
            "tools": tools_given,
            "tool_choice": dto.tool_choice.unwrap_or(json!("auto")),
            "text": {"format": dto.text.and_then(|t| t.format).map_or(json!({"type": "text"}), |f| json!({"type": f.kind}))},
            "parallel_tool_calls": true,
        });
        Ok(Self {
            generation: Generation {
                messages,
                output,
                sampling: generation::sampling(dto.temperature, dto.top_p, None, None),
                max_tokens: dto.max_output_tokens,
                stop: Vec::new(),
                ignore_eos: false,
                priority: dto.priority.as_ref().map(|p| p.as_i64().unwrap_or(0)),
            },
            stream: dto.stream,
            echo,
        })
    }
}

/// Errors about `response_format` are about `text.format` here.
fn rename_param(e: ApiError, from: &str, to: &str) -> ApiError {
    match e {
        ApiError::BadRequest { message, param } => ApiError::BadRequest {
            message: message.replace(from, to),
            param: param.map(|p| p.replace(from, to)),
        },
        other => other,
    }
}

pub async fn responses(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(&state, body)?;
    let dto: ResponsesDto = parse_body(&body)?;
    let model = state.model_name(dto.model.as_deref());
    let request = ResponsesRequest::parse(dto, &state)?;
    let started = generation::start(&state, &headers, request.generation, "call_").await?;
    let id = started.id;
    let writer = Writer::new(&started, model, request.echo);
    let mut response = if request.stream {
        stream(started, writer).into_response()
    } else {
        collect(started, writer).await?
    };
    response.headers_mut().insert(
        super::REQUEST_ID_HEADER,
        axum::http::HeaderValue::from(id.0),
    );
    Ok(response)
}

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
struct Writer {
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
    fn new(started: &Started, model: String, echo: Value) -> Self {
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

    fn begin(&mut self) -> Vec<Event> {
        let created = self.response("in_progress", json!({}));
        vec![
            self.event("response.created", json!({"response": created})),
            self.event("response.in_progress", json!({"response": created})),
        ]
    }

    fn keep_alive(&mut self) -> Event {
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

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
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
                out.extend(self.piece(Piece::Content(raw)));
            }
        }
        out
    }

    /// The last events: the open item closed, then `response.completed` (or `.incomplete`
    /// when the token limit cut the output).
    fn finish(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value) {
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

async fn collect(mut started: Started, mut writer: Writer) -> Result<Response, ApiError> {
    loop {
        match started.next_or_idle().await {
            Next::Idle => {}
            Next::Gone => {
                return Err(ApiError::Internal(
                    "the request ended without an answer".into(),
                ));
            }
            Next::Event(StreamEvent::Text(text)) => {
                let pieces = started.parser.push(&text);
                for piece in pieces {
                    writer.piece(piece);
                }
            }
            Next::Event(StreamEvent::Done(done)) => {
                let (rest, ending) = started.parser.finish();
                for piece in rest {
                    writer.piece(piece);
                }
                let (_, response) = writer.finish(&done, &ending);
                return Ok(Json(response).into_response());
            }
            Next::Event(StreamEvent::Failed(failure)) => return Err(ApiError::from(failure)),
        }
    }
}

fn stream(
    started: Started,
    writer: Writer,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>>> {
    let events = futures_util::stream::unfold(
        (started, writer, 0u8),
        |(mut started, mut writer, stage)| async move {
            // stage: 0 begin, 1 streaming, 2 done
            let events = match stage {
                0 => {
                    let events = writer.begin();
                    return Some((events, (started, writer, 1)));
                }
                1 => match started.next_or_idle().await {
                    Next::Idle => {
                        let event = writer.keep_alive();
                        return Some((vec![event], (started, writer, 1)));
                    }
                    Next::Event(StreamEvent::Text(text)) => {
                        let pieces = started.parser.push(&text);
                        let events = pieces.into_iter().flat_map(|p| writer.piece(p)).collect();
                        return Some((events, (started, writer, 1)));
                    }
                    Next::Event(StreamEvent::Done(done)) => {
                        let (rest, ending) = started.parser.finish();
                        let mut events: Vec<Event> =
                            rest.into_iter().flat_map(|p| writer.piece(p)).collect();
                        events.extend(writer.finish(&done, &ending).0);
                        events
                    }
                    Next::Event(StreamEvent::Failed(failure)) => {
                        vec![writer.failed(&ApiError::from(failure))]
                    }
                    Next::Gone => vec![writer.failed(&ApiError::Internal(
                        "the request ended without an answer".into(),
                    ))],
                },
                _ => return None,
            };
            Some((events, (started, writer, 2)))
        },
    );
    let flat = futures_util::StreamExt::flat_map(events, |batch| {
        futures_util::stream::iter(batch.into_iter().map(Ok))
    });
    Sse::new(flat).keep_alive(KeepAlive::new().interval(generation::KEEP_ALIVE))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn items_become_messages_with_calls_joined_and_reasoning_dropped() {
        let items = vec![
            json!({"role": "user", "content": "weather?"}),
            json!({"type": "reasoning", "summary": [], "encrypted_content": "xyz"}),
            json!({"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
            json!({"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"}),
            json!({"type": "function_call_output", "call_id": "c1", "output": "sunny"}),
            json!({"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]}),
            json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "<think>x</think>It is sunny."}]}),
        ];
        let messages = items_to_messages(&items).unwrap();
        let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
        assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
        assert_eq!(messages[1].tool_calls.len(), 2);
        assert_eq!(messages[2].name.as_deref(), Some("get_weather"));
        assert_eq!(messages[3].content, "noon");
        assert_eq!(messages[4].content, "It is sunny.");
    }

    #[test]
    fn bad_items_name_their_field() {
        let cases = [
            (
                json!([{"type": "function_call_output", "call_id": "nope", "output": "x"}]),
                "input[0].call_id",
            ),
            (
                json!([{"type": "function_call", "call_id": "c", "name": "f g", "arguments": "{}"}]),
                "input[0].name",
            ),
            (json!([{"role": "robot", "content": "x"}]), "input[0].role"),
            (
                json!([{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]),
                "input[0].content[0]",
            ),
        ];
        for (items, param) in cases {
            let err = items_to_messages(items.as_array().unwrap()).unwrap_err();
            assert!(
                matches!(err, ApiError::BadRequest { param: Some(ref p), .. } if p == param),
                "{err:?}"
            );
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2000))]

        #[test]
        fn arbitrary_bytes_never_panic_the_request_parser(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
            if let Ok(dto) = parse_body::<ResponsesDto>(&bytes)
                && let InputDto::Items(items) = &dto.input
            {
                let _ = items_to_messages(items);
            }
        }

        #[test]
        fn arbitrary_item_lists_never_panic_the_converter(items in proptest::collection::vec(crate::api::test_json::item(), 0..6)) {
            let _ = items_to_messages(&items);
            let body = json!({"input": items}).to_string();
            let _ = parse_body::<ResponsesDto>(body.as_bytes());
        }
    }
}
