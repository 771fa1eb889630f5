//! `POST /v1/chat/completions`: the DTO, its translation into a [`Draft`] for the one
//! validation step, and the streaming and non-streaming answers (the [`Chat`] front end).

use super::ApiError;
use super::frontend::{Frontend, Translated};
use super::generation::{Started, split_reasoning};
use super::tools::{self, ResponseFormatDto, ToolDto};
use super::validate::{Draft, with_sampling_knobs};
use super::wire::WireWriter;
use crate::chat::{ChatMessage, Ending, Piece, ToolCall};
use crate::service::{FinishReason, Finished, Route, Usage};
use axum::response::sse::Event;
use serde::Deserialize;
use serde_json::{Value, json};

with_sampling_knobs! {
    #[derive(Debug, Deserialize)]
    pub struct ChatCompletionDto {
        #[serde(default)]
        pub model: Option<String>,
        pub messages: Vec<MessageDto>,
        #[serde(default)]
        pub stream: bool,
        #[serde(default)]
        pub stream_options: Option<StreamOptionsDto>,
        pub max_tokens: Option<u32>,
        pub max_completion_tokens: Option<u32>,
        pub stop: Option<StopDto>,
        #[serde(default)]
        pub ignore_eos: bool,
        /// Any JSON here; not an integer is a 400 naming the field (SCHEDULING.md).
        pub priority: Option<Value>,
        pub n: Option<u32>,
        #[serde(default)]
        pub tools: Option<Vec<ToolDto>>,
        #[serde(default)]
        pub tool_choice: Option<Value>,
        #[serde(default)]
        pub response_format: Option<ResponseFormatDto>,
        // `parallel_tool_calls` is accepted and ignored: a model may make several calls in one
        // answer either way.
    }
}

#[derive(Debug, Deserialize)]
pub struct StreamOptionsDto {
    #[serde(default)]
    pub include_usage: bool,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum StopDto {
    One(String),
    Many(Vec<String>),
}

impl StopDto {
    /// The stop strings, one or many.
    pub fn into_vec(self) -> Vec<String> {
        match self {
            Self::One(s) => vec![s],
            Self::Many(v) => v,
        }
    }
}

#[derive(Debug, Deserialize)]
pub struct MessageDto {
    pub role: String,
    #[serde(default)]
    pub content: Option<ContentDto>,
    #[serde(default)]
    pub tool_calls: Option<Vec<ToolCallDto>>,
    #[serde(default)]
    pub tool_call_id: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    /// A previous answer's reasoning (`reasoning` is the name some clients use).
    #[serde(default, alias = "reasoning")]
    pub reasoning_content: Option<String>,
}

#[derive(Debug, Deserialize)]
pub struct ToolCallDto {
    #[serde(default)]
    pub id: Option<String>,
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
    pub function: FunctionCallDto,
}

#[derive(Debug, Deserialize)]
pub struct FunctionCallDto {
    pub name: String,
    /// A string holding a JSON object (OpenAI's shape), or the object itself.
    pub arguments: Value,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum ContentDto {
    Text(String),
    Parts(Vec<PartDto>),
}

#[derive(Debug, Deserialize)]
pub struct PartDto {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub text: Option<String>,
}

/// Chat Completions: its body translated for the one validation step, answered in
/// `chat.completion` objects.
pub struct Chat;

/// `stream_options.include_usage`: a streamed answer ends with a usage chunk.
pub struct IncludeUsage(pub bool);

impl Frontend for Chat {
    const ROUTE: Route = Route::ChatCompletions;
    type Dto = ChatCompletionDto;
    type Extra = IncludeUsage;
    type Writer = ChatWriter;

    fn model(dto: &ChatCompletionDto) -> Option<&str> {
        dto.model.as_deref()
    }

    fn translate(dto: ChatCompletionDto) -> Result<Translated<IncludeUsage>, ApiError> {
        if dto.n.is_some_and(|n| n != 1) {
            return Err(ApiError::bad(
                "`n` must be 1: one choice per request",
                Some("n"),
            ));
        }
        let knobs = dto.knobs();
        let draft = Draft {
            tools: dto.tools,
            tool_choice: dto.tool_choice,
            format: dto.response_format,
            knobs,
            max_tokens: dto.max_completion_tokens.or(dto.max_tokens),
            stop: dto.stop.map(StopDto::into_vec).unwrap_or_default(),
            ignore_eos: dto.ignore_eos,
            priority: dto.priority,
            ..Draft::new(Route::ChatCompletions, chat_messages(dto.messages)?)
        };
        Ok(Translated {
            draft,
            stream: dto.stream,
            extra: IncludeUsage(dto.stream_options.is_some_and(|o| o.include_usage)),
        })
    }

    fn writer(started: &Started, model: String, extra: IncludeUsage) -> ChatWriter {
        ChatWriter {
            id: format!("chatcmpl-{}", started.id.0),
            model,
            created: started.created,
            include_usage: extra.0,
            assembled: Assembled::default(),
        }
    }
}

/// Call ids seen so far → function names (a tool result names its function by id).
type CallNames = std::collections::HashMap<String, String>;

/// The messages in the shared form: roles checked, text parts joined, an assistant turn's
/// reasoning and calls taken apart, a tool result named by its call.
fn chat_messages(dtos: Vec<MessageDto>) -> Result<Vec<ChatMessage>, ApiError> {
    let mut messages = Vec::with_capacity(dtos.len());
    let mut call_names = CallNames::default();
    for (i, m) in dtos.into_iter().enumerate() {
        let role = role_of(i, &m.role)?;
        let content = content_text(i, m.content)?;
        let mut message = ChatMessage::new(role, &content);
        if role == "assistant" {
            // reasoning goes to the template, which decides which turns keep it
            let (in_content, rest) = split_reasoning(&message.content);
            message.content = rest.to_owned();
            message.reasoning_content =
                m.reasoning_content.filter(|r| !r.is_empty()).or(in_content);
            message.tool_calls = calls_of(i, m.tool_calls.unwrap_or_default(), &mut call_names)?;
        } else if role == "tool" {
            let param = format!("messages[{i}].tool_call_id");
            let by_id = m.tool_call_id.as_ref().and_then(|id| call_names.get(id));
            let name = m.name.or_else(|| by_id.cloned()).ok_or_else(|| {
                ApiError::bad(
                    format!(
                        "`{param}` {:?} names no earlier assistant tool call",
                        m.tool_call_id.as_deref().unwrap_or("")
                    ),
                    Some(&param),
                )
            })?;
            message.name = Some(name);
            message.tool_call_id = m.tool_call_id;
        }
        messages.push(message);
    }
    Ok(messages)
}

/// `messages[i].role` in the shared form (`developer` is a system message).
fn role_of(i: usize, role: &str) -> Result<&'static str, ApiError> {
    Ok(match role {
        "system" | "developer" => "system",
        "user" => "user",
        "assistant" => "assistant",
        "tool" => "tool",
        other => {
            return Err(ApiError::bad(
                format!(
                    "`messages[{i}].role` {other:?} is not one of system, developer, user, assistant, tool"
                ),
                Some(&format!("messages[{i}].role")),
            ));
        }
    })
}

/// `messages[i].content`'s text: a string, or text parts joined.
fn content_text(i: usize, content: Option<ContentDto>) -> Result<String, ApiError> {
    match content {
        None => Ok(String::new()),
        Some(ContentDto::Text(text)) => Ok(text),
        Some(ContentDto::Parts(parts)) => {
            let mut text = String::new();
            for (j, part) in parts.into_iter().enumerate() {
                match (part.kind.as_str(), part.text) {
                    ("text", Some(t)) => text.push_str(&t),
                    (kind, _) => {
                        return Err(ApiError::bad(
                            format!(
                                "`messages[{i}].content[{j}]`: only text parts are supported, got {kind:?}"
                            ),
                            Some(&format!("messages[{i}].content[{j}]")),
                        ));
                    }
                }
            }
            Ok(text)
        }
    }
}

/// An assistant turn's tool calls, checked, their ids remembered for the results that follow.
fn calls_of(
    i: usize,
    calls: Vec<ToolCallDto>,
    call_names: &mut CallNames,
) -> Result<Vec<ToolCall>, ApiError> {
    let mut out = Vec::with_capacity(calls.len());
    for (j, call) in calls.into_iter().enumerate() {
        if let Some(kind) = call.kind.as_deref().filter(|k| *k != "function") {
            let param = format!("messages[{i}].tool_calls[{j}].type");
            return Err(ApiError::bad(
                format!("`{param}` must be \"function\", got {kind:?}"),
                Some(&param),
            ));
        }
        if !tools::valid_name(&call.function.name) {
            let param = format!("messages[{i}].tool_calls[{j}].function.name");
            return Err(ApiError::bad(
                format!(
                    "`{param}` must be 1 to 64 letters, digits, _ or -, got {:?}",
                    call.function.name
                ),
                Some(&param),
            ));
        }
        let param = format!("messages[{i}].tool_calls[{j}].function.arguments");
        let arguments = match call.function.arguments {
            Value::String(s) => serde_json::from_str::<Value>(&s).ok(),
            other => Some(other),
        }
        .filter(Value::is_object)
        .ok_or_else(|| ApiError::bad(format!("`{param}` must be a JSON object"), Some(&param)))?;
        if let Some(id) = &call.id {
            call_names.insert(id.clone(), call.function.name.clone());
        }
        out.push(ToolCall {
            id: call.id,
            name: call.function.name,
            arguments,
        });
    }
    Ok(out)
}

/// `finish_reason`: `tool_calls` only when calls were made and every started one closed; a
/// call cut by the token limit is `length`, never a call.
fn finish_reason(reason: FinishReason, ending: &Ending) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Stop if ending.all_calls_closed() => "tool_calls",
        FinishReason::Stop => "stop",
    }
}

fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    })
}

/// Chat Completions' wire format: `chat.completion.chunk`s, then `[DONE]`; or one
/// `chat.completion`.
pub struct ChatWriter {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    /// The whole answer so far (the non-streamed body).
    assembled: Assembled,
}

/// A whole answer assembled from the parser's pieces.
#[derive(Default)]
struct Assembled {
    content: String,
    reasoning: String,
    /// (id, name, arguments, closed)
    calls: Vec<(String, String, String, bool)>,
}

impl Assembled {
    fn add(&mut self, piece: Piece) {
        {
            match piece {
                Piece::Content(t) => self.content.push_str(&t),
                Piece::Reasoning(t) => self.reasoning.push_str(&t),
                Piece::CallStart { id, name, .. } => {
                    self.calls.push((id, name, String::new(), false));
                }
                Piece::CallArguments { index, delta } => {
                    if let Some(call) = self.calls.get_mut(index) {
                        call.2.push_str(&delta);
                    }
                }
                Piece::CallEnd { index } => {
                    if let Some(call) = self.calls.get_mut(index) {
                        call.3 = true;
                    }
                }
                // Not a call after all: its text is content.
                Piece::CallInvalid { raw, .. } => self.content.push_str(&raw),
            }
        }
    }
}

impl ChatWriter {
    fn chunk(&self, delta: Value, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
        })
    }

    /// The whole answer: only closed calls are calls (a cut one is reported by `length`).
    fn completion(&self, reason: &str, usage: &Usage) -> Value {
        let assembled = &self.assembled;
        let calls: Vec<Value> = assembled
            .calls
            .iter()
            .filter(|c| c.3)
            .map(|(id, name, arguments, _)| {
                json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        let mut message = json!({
            "role": "assistant",
            "content": if assembled.content.trim().is_empty() && !calls.is_empty() {
                Value::Null
            } else {
                json!(assembled.content)
            },
        });
        if !calls.is_empty() {
            message["tool_calls"] = json!(calls);
        }
        if !assembled.reasoning.is_empty() {
            message["reasoning_content"] = json!(assembled.reasoning);
        }
        json!({
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{
                "index": 0,
                "message": message,
                "finish_reason": reason,
            }],
            "usage": usage_json(usage),
        })
    }
}

impl WireWriter for ChatWriter {
    fn begin(&mut self) -> Vec<Event> {
        vec![data(
            &self.chunk(json!({"role": "assistant", "content": ""}), None),
        )]
    }

    /// One chunk per piece (a call's end has none of its own).
    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        self.assembled.add(piece.clone());
        let delta = match piece {
            Piece::Content(text) => json!({"content": text}),
            Piece::Reasoning(text) => json!({"reasoning_content": text}),
            Piece::CallStart { index, id, name } => json!({"tool_calls": [{
                "index": index, "id": id, "type": "function",
                "function": {"name": name, "arguments": ""},
            }]}),
            Piece::CallArguments { index, delta } => json!({"tool_calls": [{
                "index": index, "function": {"arguments": delta},
            }]}),
            Piece::CallEnd { .. } => return Vec::new(),
            Piece::CallInvalid { raw, .. } => json!({"content": raw}),
        };
        vec![data(&self.chunk(delta, None))]
    }

    fn finish(&mut self, done: &Finished, ending: &Ending) -> (Vec<Event>, Value) {
        let reason = finish_reason(done.reason, ending);
        let mut out = Vec::new();
        let mut last = self.chunk(json!({}), Some(reason));
        if self.include_usage {
            last["usage"] = Value::Null;
            out.push(data(&last));
            let mut usage = self.chunk(json!({}), None);
            usage["choices"] = json!([]);
            usage["usage"] = usage_json(&done.usage);
            out.push(data(&usage));
        } else {
            out.push(data(&last));
        }
        out.push(Event::default().data("[DONE]"));
        (out, self.completion(reason, &done.usage))
    }

    fn fail(&mut self, error: &ApiError) -> Vec<Event> {
        vec![data(&error.body()), Event::default().data("[DONE]")]
    }

    /// The SSE comment alone.
    fn keep_alive(&mut self) -> Vec<Event> {
        Vec::new()
    }
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}
