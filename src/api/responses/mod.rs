//! `POST /v1/responses`, stateless (what Codex CLI speaks): `input` as text or items
//! (messages, `function_call`, `function_call_output`, reasoning), `instructions`, function
//! `tools` (other tool types are ignored with a warning, never a 400), `tool_choice`,
//! `max_output_tokens` (none: the rest of the context), `temperature`, `top_p`, `text.format`,
//! `stream`. Unknown fields (`store`, `include`, `reasoning`, `prompt_cache_key`, ...) are
//! ignored. Streams follow the Responses event grammar, every event with its
//! `sequence_number` and the `item_id` / `output_index` / `content_index` it belongs to, and a
//! `response.in_progress` at least every 10 s while the request waits, is parked or is read.

use super::ApiError;
use super::body::bad;
use super::frontend::{Frontend, Translated};
use super::generation::{Started, split_reasoning};
use super::tools::{self, JsonSchemaDto, ResponseFormatDto, ToolDto};
use super::validate::{Draft, Knobs};
use crate::chat::{ChatMessage, ToolCall};
use crate::service::Route;
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;

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
    /// Any JSON here; not an integer is a 400 naming the field (SCHEDULING.md).
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
                        super::omitted::note("image or file part", format_args!("{param}"));
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
/// names its function through the call id; a reasoning item's text is the reasoning of the
/// assistant message or call that follows it.
pub fn items_to_messages(items: &[Value]) -> Result<Vec<ChatMessage>, ApiError> {
    let mut messages: Vec<ChatMessage> = Vec::new();
    let mut names: HashMap<String, String> = HashMap::new();
    // a reasoning item waiting for the assistant turn it belongs to
    let mut reasoning: Option<String> = None;
    for (i, item) in items.iter().enumerate() {
        let kind = item
            .get("type")
            .and_then(Value::as_str)
            .or_else(|| item.get("role").map(|_| "message"));
        match kind {
            Some("message") => {
                let (role, text) = message_item(i, item)?;
                if role == "assistant" {
                    let (in_text, rest) = split_reasoning(&text);
                    let mut message = ChatMessage::new(role, rest);
                    message.reasoning_content = reasoning.take().or(in_text);
                    messages.push(message);
                } else {
                    reasoning = None;
                    messages.push(ChatMessage::new(role, &text));
                }
            }
            Some("function_call") => {
                let call = function_call(i, item)?;
                names.insert(call.id.clone().unwrap_or_default(), call.name.clone());
                match messages.last_mut() {
                    Some(last) if last.role == "assistant" => last.tool_calls.push(call),
                    _ => {
                        let mut message = ChatMessage::new("assistant", "");
                        message.reasoning_content = reasoning.take();
                        message.tool_calls.push(call);
                        messages.push(message);
                    }
                }
            }
            Some("function_call_output") => messages.push(call_output(i, item, &names)?),
            // its summary (what this server writes) or its text; encrypted content is never
            // asked for
            Some("reasoning") => {
                let texts: Vec<&str> = ["summary", "content"]
                    .iter()
                    .filter_map(|key| item.get(*key).and_then(Value::as_array))
                    .flatten()
                    .filter_map(|part| part.get("text").and_then(Value::as_str))
                    .collect();
                if !texts.is_empty() {
                    reasoning = Some(texts.join("\n\n"));
                }
            }
            other => {
                super::omitted::note(
                    "input item of another type",
                    format_args!("input[{i}] of type {:?}", other.unwrap_or("none")),
                );
            }
        }
    }
    Ok(messages)
}

/// `input[i]`, a message: its role in the shared form and its text.
fn message_item(i: usize, item: &Value) -> Result<(&'static str, String), ApiError> {
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
    Ok((role, text_of(content, &format!("input[{i}].content"))?))
}

/// `input[i]`, a `function_call`, as a call.
fn function_call(i: usize, item: &Value) -> Result<ToolCall, ApiError> {
    let field = |name: &str| {
        item.get(name).and_then(Value::as_str).ok_or_else(|| {
            bad(
                format!("`input[{i}].{name}` must be a string"),
                &format!("input[{i}].{name}"),
            )
        })
    };
    let (call_id, name, arguments) = (field("call_id")?, field("name")?, field("arguments")?);
    // History is replayed as the client kept it: a call whose arguments were cut (an
    // incomplete item) must not make every later turn fail.
    let arguments: Value = serde_json::from_str(arguments)
        .ok()
        .filter(Value::is_object)
        .unwrap_or_else(|| {
            super::omitted::note(
                "call's arguments that are not a JSON object (replayed as {})",
                format_args!("input[{i}].arguments"),
            );
            json!({})
        });
    if !tools::valid_name(name) {
        return Err(bad(
            format!("`input[{i}].name` must be 1 to 64 letters, digits, _ or -, got {name:?}"),
            &format!("input[{i}].name"),
        ));
    }
    Ok(ToolCall {
        id: Some(call_id.to_owned()),
        name: name.to_owned(),
        arguments,
    })
}

/// `input[i]`, a `function_call_output`, as a tool message named by its call.
fn call_output(
    i: usize,
    item: &Value,
    names: &HashMap<String, String>,
) -> Result<ChatMessage, ApiError> {
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
    Ok(message)
}

/// The Responses tool shape (`{"type": "function", "name", "parameters", ...}`) as Chat's.
/// The functions inside a `namespace` tool (Codex's MCP tools) are offered under their own
/// names; other types (web search, ...) are left out with a warning. With each, its place in
/// the body (`tools[i]`, `tools[i].tools[j]` in a namespace).
fn function_tools(tools: Vec<Value>) -> Result<(Vec<ToolDto>, Vec<String>), ApiError> {
    let mut flat = Vec::new();
    for (i, tool) in tools.into_iter().enumerate() {
        match tool.get("type").and_then(Value::as_str) {
            Some("namespace") => {
                for (j, inner) in tool
                    .get("tools")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .enumerate()
                {
                    flat.push((i, format!("tools[{i}].tools[{j}]"), inner.clone()));
                }
            }
            _ => flat.push((i, format!("tools[{i}]"), tool)),
        }
    }
    let mut out = Vec::new();
    let mut paths = Vec::new();
    for (i, path, tool) in flat {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("");
        if kind != "function" {
            super::omitted::note(
                "tool of another type",
                format_args!("tools[{i}] of type {kind:?}"),
            );
            continue;
        }
        out.push(tools::tool_from_json(i, &tool, "parameters")?);
        paths.push(path);
    }
    Ok((out, paths))
}

/// `tool_choice` in Chat's shape; a hosted tool's choice counts as `auto`.
/// Responses' `tool_choice` in Chat's shape: a string as it is, `{"type": "function",
/// "name"}` as Chat's named function; anything else (a number, another object) is a 400
/// naming the field (it was once taken as `auto`, and then failed on the grammar).
fn chat_tool_choice(choice: Option<Value>) -> Result<Option<Value>, ApiError> {
    let Some(choice) = choice else {
        return Ok(None);
    };
    match choice {
        Value::String(s) => Ok(Some(Value::String(s))),
        v if v.get("type").and_then(Value::as_str) == Some("function") => Ok(Some(
            json!({"type": "function", "function": {"name": v.get("name")}}),
        )),
        other => Err(bad(
            format!(
                "`tool_choice` must be none, auto, required or {{\"type\": \"function\", \
                 \"name\": ...}}, got {other}"
            ),
            "tool_choice",
        )),
    }
}

/// OpenAI Responses, stateless: answered in `response.*` events or one `response` object.
pub struct Responses;

/// The request's settings as the response object echoes them.
pub struct Echo(Value);

impl Frontend for Responses {
    const ROUTE: Route = Route::Responses;
    type Dto = ResponsesDto;
    type Extra = Echo;
    type Writer = Writer;

    fn model(dto: &ResponsesDto) -> Option<&str> {
        dto.model.as_deref()
    }

    fn translate(dto: ResponsesDto) -> Result<Translated<Echo>, ApiError> {
        let mut messages = Vec::new();
        if let Some(instructions) = &dto.instructions {
            messages.push(ChatMessage::new("system", instructions));
        }
        match &dto.input {
            InputDto::Text(text) => messages.push(ChatMessage::new("user", text)),
            InputDto::Items(items) => messages.extend(items_to_messages(items)?),
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
        let (offered, tool_paths) = function_tools(tools_given.clone())?;
        let draft = Draft {
            tools: Some(offered),
            tool_paths,
            tool_choice: chat_tool_choice(dto.tool_choice.clone())?,
            format,
            knobs: Knobs {
                temperature: dto.temperature,
                top_p: dto.top_p,
                ..Knobs::default()
            },
            max_tokens: dto.max_output_tokens,
            priority: dto.priority.clone(),
            ..Draft::new(Route::Responses, messages)
        };
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
        Ok(Translated {
            draft,
            stream: dto.stream,
            extra: Echo(echo),
        })
    }

    fn writer(started: &Started, model: String, echo: Echo) -> Writer {
        Writer::new(started, model, echo.0)
    }
}

#[cfg(test)]
mod tests;
mod writer;

use writer::Writer;
