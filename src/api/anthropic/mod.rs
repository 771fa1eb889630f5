//! Anthropic Messages (what Claude Code speaks): `POST /v1/messages` and
//! `/v1/messages/count_tokens`. `system` as a string or text blocks, content blocks (text,
//! `tool_use`, `tool_result`, thinking), custom `tools` (server tools are ignored with a
//! warning), `tool_choice`, `stop_sequences`, `max_tokens` (clamped to the context, R11),
//! `metadata`, `thinking` and an effort setting (accepted; a model that reasons shows it as
//! thinking blocks). Errors are Anthropic-shaped (`{"type": "error", "error": {...}}`).
//!
//! Claude Code puts a per-request attribution line (`x-anthropic-billing-header: ...`) at the
//! top of its system prompt. It changes on every request, so it would make every prompt differ
//! from its first token and the prefix cache would never hit: it is removed before
//! tokenizing.

use super::body::{bad, body_bytes, parse_body};
use super::dialect::{ErrorShape, RouteApi};
use super::frontend::{Frontend, Translated};
use super::generation::{self, Started, split_reasoning};
use super::tools::{self, ToolDto};
use super::validate::{Draft, Knobs};
use super::{ApiError, ApiState};
use crate::chat::{ChatMessage, ToolCall};
use crate::service::Route;
use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};
use std::collections::HashMap;

/// The attribution line Claude Code adds to its system prompt.
const BILLING_HEADER: &str = "x-anthropic-billing-header:";

#[derive(Debug, Deserialize)]
pub struct MessagesDto {
    #[serde(default)]
    pub model: Option<String>,
    pub max_tokens: Option<u32>,
    pub messages: Vec<MessageDto>,
    #[serde(default)]
    pub system: Option<Value>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<Value>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub stream: bool,
    /// Any JSON here; not an integer is a 400 naming the field (SCHEDULING.md).
    #[serde(default)]
    pub priority: Option<Value>,
}

#[derive(Debug, Deserialize)]
pub struct MessageDto {
    pub role: String,
    pub content: Value,
}

/// `count_tokens` takes the same fields but no `max_tokens`.
#[derive(Debug, Deserialize)]
pub struct CountDto {
    pub messages: Vec<MessageDto>,
    #[serde(default)]
    pub system: Option<Value>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
}

/// An Anthropic error response for any [`ApiError`].
pub fn error_response(error: ApiError) -> Response {
    ErrorShape::Anthropic.response(error)
}

/// The system prompt's text, without Claude Code's attribution line.
fn system_text(system: Option<&Value>) -> Result<String, ApiError> {
    let text = match system {
        None | Some(Value::Null) => String::new(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(blocks)) => {
            let mut parts = Vec::new();
            for (i, block) in blocks.iter().enumerate() {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => parts.push(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    ),
                    other => {
                        return Err(bad(
                            format!("`system[{i}]` must be a text block, got {other:?}"),
                            &format!("system[{i}]"),
                        ));
                    }
                }
            }
            parts.join("\n\n")
        }
        Some(other) => {
            return Err(bad(
                format!("`system` must be a string or text blocks, got {other}"),
                "system",
            ));
        }
    };
    let kept: Vec<&str> = text
        .lines()
        .filter(|line| !line.trim_start().starts_with(BILLING_HEADER))
        .collect();
    Ok(kept.join("\n").trim_start().to_owned())
}

/// The text of a `tool_result`'s content (a string or text blocks).
fn result_text(content: Option<&Value>, param: &str) -> Result<String, ApiError> {
    match content {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(blocks)) => {
            let mut text = Vec::new();
            for (k, block) in blocks.iter().enumerate() {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => text.push(
                        block
                            .get("text")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                    ),
                    Some("image" | "document") => {
                        super::omitted::note(
                            "image or document block",
                            format_args!("{param}[{k}]"),
                        );
                        text.push("[image omitted]".to_owned());
                    }
                    other => {
                        return Err(bad(
                            format!("`{param}[{k}]`: only text is supported, got {other:?}"),
                            &format!("{param}[{k}]"),
                        ));
                    }
                }
            }
            Ok(text.join("\n"))
        }
        Some(other) => Err(bad(
            format!("`{param}` must be a string or text blocks, got {other}"),
            param,
        )),
    }
}

/// Messages and their blocks → chat messages (tool results become tool messages, thinking
/// blocks are dropped).
pub fn to_messages(
    system: Option<&Value>,
    messages: &[MessageDto],
) -> Result<Vec<ChatMessage>, ApiError> {
    let mut out = Vec::new();
    let system = system_text(system)?;
    if !system.is_empty() {
        out.push(ChatMessage::new("system", &system));
    }
    // tool_use ids seen so far → their tools' names (a tool_result names its call by id)
    let mut names: HashMap<String, String> = HashMap::new();
    for (i, m) in messages.iter().enumerate() {
        let role = match m.role.as_str() {
            "user" => "user",
            "assistant" => "assistant",
            // Claude Code sends one after the user's first turn (its environment notes); it
            // is folded as other APIs' late system messages are (`generation::normalize`).
            "system" => "system",
            other => {
                return Err(bad(
                    format!(
                        "`messages[{i}].role` must be user, assistant or system, got {other:?}"
                    ),
                    &format!("messages[{i}].role"),
                ));
            }
        };
        let blocks = match &m.content {
            Value::String(s) => vec![json!({"type": "text", "text": s})],
            Value::Array(blocks) => blocks.clone(),
            other => {
                return Err(bad(
                    format!("`messages[{i}].content` must be a string or blocks, got {other}"),
                    &format!("messages[{i}].content"),
                ));
            }
        };
        let mut turn = Turn::default();
        for (j, block) in blocks.iter().enumerate() {
            let param = format!("messages[{i}].content[{j}]");
            turn.read(block, &param, role, &mut names, &mut out)?;
        }
        turn.push_to(role, &mut out);
    }
    Ok(out)
}

/// One message's blocks as read so far.
#[derive(Default)]
struct Turn {
    texts: Vec<String>,
    thinking: Vec<String>,
    calls: Vec<ToolCall>,
}

impl Turn {
    /// Takes one block (`param` names it); a tool result goes to `out` as a tool message.
    fn read(
        &mut self,
        block: &Value,
        param: &str,
        role: &str,
        names: &mut HashMap<String, String>,
        out: &mut Vec<ChatMessage>,
    ) -> Result<(), ApiError> {
        match block.get("type").and_then(Value::as_str) {
            Some("text") => self.texts.push(
                block
                    .get("text")
                    .and_then(Value::as_str)
                    .unwrap_or("")
                    .to_owned(),
            ),
            Some("thinking") => {
                if let Some(t) = block.get("thinking").and_then(Value::as_str) {
                    self.thinking.push(t.to_owned());
                }
            }
            // encrypted: nothing a local model can read
            Some("redacted_thinking") => {}
            // A screenshot in an agent's history: this engine reads text only.
            Some("image" | "document") => {
                super::omitted::note("image or document block", format_args!("{param}"));
                self.texts.push("[image omitted]".into());
            }
            Some("tool_use") if role == "assistant" => {
                let call = tool_use(block, param)?;
                let id = call.id.clone().unwrap_or_default();
                names.insert(id, call.name.clone());
                self.calls.push(call);
            }
            Some("tool_result") if role == "user" => out.push(tool_result(block, param, names)?),
            other => {
                return Err(bad(
                    format!(
                        "`{param}`: blocks of type {:?} are not supported in a {role} message",
                        other.unwrap_or("none")
                    ),
                    param,
                ));
            }
        }
        Ok(())
    }

    /// The message itself, after the tool results it held.
    fn push_to(self, role: &str, out: &mut Vec<ChatMessage>) {
        // Separate blocks stay separate paragraphs.
        let text = self.texts.join("\n\n");
        if role == "system" {
            out.push(ChatMessage::new("system", &text));
        } else if role == "assistant" {
            let (in_text, rest) = split_reasoning(&text);
            let mut message = ChatMessage::new("assistant", rest);
            message.reasoning_content = (!self.thinking.is_empty())
                .then(|| self.thinking.join("\n\n"))
                .or(in_text);
            message.tool_calls = self.calls;
            out.push(message);
        } else if !text.is_empty() || out.last().is_none_or(|m| m.role != "tool") {
            out.push(ChatMessage::new("user", &text));
        }
    }
}

/// A `tool_use` block as a call: a valid name, an object as input.
fn tool_use(block: &Value, param: &str) -> Result<ToolCall, ApiError> {
    let id = block.get("id").and_then(Value::as_str).unwrap_or("");
    let name = block
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| tools::valid_name(n))
        .ok_or_else(|| {
            bad(
                format!("`{param}.name` must be 1 to 64 letters, digits, _ or -"),
                &format!("{param}.name"),
            )
        })?;
    let input = block
        .get("input")
        .cloned()
        .filter(Value::is_object)
        .ok_or_else(|| {
            bad(
                format!("`{param}.input` must be an object"),
                &format!("{param}.input"),
            )
        })?;
    Ok(ToolCall {
        id: Some(id.to_owned()),
        name: name.to_owned(),
        arguments: input,
    })
}

/// A `tool_result` block as a tool message, named by the earlier `tool_use` it answers.
fn tool_result(
    block: &Value,
    param: &str,
    names: &HashMap<String, String>,
) -> Result<ChatMessage, ApiError> {
    let id = block
        .get("tool_use_id")
        .and_then(Value::as_str)
        .unwrap_or("");
    let name = names.get(id).cloned().ok_or_else(|| {
        bad(
            format!("`{param}.tool_use_id` {id:?} names no earlier tool_use"),
            &format!("{param}.tool_use_id"),
        )
    })?;
    let mut result = result_text(block.get("content"), &format!("{param}.content"))?;
    if block.get("is_error").and_then(Value::as_bool) == Some(true) {
        result = format!("Error: {result}");
    }
    let mut message = ChatMessage::new("tool", &result);
    message.name = Some(name);
    message.tool_call_id = Some(id.to_owned());
    Ok(message)
}

/// Custom tools (`{"name", "description", "input_schema"}`) in Chat's shape; server tools
/// (those with another `type`) are left out with a warning. With each, its place in the body.
fn custom_tools(tools: Vec<Value>) -> Result<(Vec<ToolDto>, Vec<String>), ApiError> {
    let mut out = Vec::new();
    let mut paths = Vec::new();
    for (i, tool) in tools.into_iter().enumerate() {
        let kind = tool.get("type").and_then(Value::as_str).unwrap_or("custom");
        if kind != "custom" {
            super::omitted::note("server tool", format_args!("tools[{i}] of type {kind:?}"));
            continue;
        }
        out.push(tools::tool_from_json(i, &tool, "input_schema")?);
        paths.push(format!("tools[{i}]"));
    }
    Ok((out, paths))
}

/// `tool_choice` in Chat's shape.
fn chat_tool_choice(choice: Option<&Value>) -> Result<Option<Value>, ApiError> {
    let Some(choice) = choice else {
        return Ok(None);
    };
    Ok(Some(match choice.get("type").and_then(Value::as_str) {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => json!({"type": "function", "function": {"name": choice.get("name")}}),
        other => {
            return Err(bad(
                format!("`tool_choice.type` must be auto, any, tool or none, got {other:?}"),
                "tool_choice.type",
            ));
        }
    }))
}

/// Anthropic Messages: answered in content blocks and `message_*` events, errors in
/// Anthropic's shape.
pub struct Messages;

impl Frontend for Messages {
    const ROUTE: Route = Route::Messages;
    const CALL_ID_PREFIX: &'static str = "toolu_";
    type Dto = MessagesDto;
    type Extra = ();
    type Writer = Writer;

    fn model(dto: &MessagesDto) -> Option<&str> {
        dto.model.as_deref()
    }

    fn translate(dto: MessagesDto) -> Result<Translated<()>, ApiError> {
        let (offered, tool_paths) = custom_tools(dto.tools.unwrap_or_default())?;
        let draft = Draft {
            tools: Some(offered),
            tool_paths,
            tool_choice: chat_tool_choice(dto.tool_choice.as_ref())?,
            knobs: Knobs {
                temperature: dto.temperature,
                top_p: dto.top_p,
                top_k: dto.top_k,
                ..Knobs::default()
            },
            max_tokens: dto.max_tokens,
            stop: dto.stop_sequences.unwrap_or_default(),
            priority: dto.priority,
            ..Draft::new(
                Route::Messages,
                to_messages(dto.system.as_ref(), &dto.messages)?,
            )
        };
        Ok(Translated {
            draft,
            stream: dto.stream,
            extra: (),
        })
    }

    fn writer(started: &Started, model: String, _: ()) -> Writer {
        Writer::new(started, model)
    }
}

/// `POST /v1/messages/count_tokens`: the prompt's tokens, no generation.
pub async fn count_tokens(
    State(state): State<ApiState>,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let result = async {
        let body = body_bytes(&state, body)?;
        let prep = state.clone();
        let n = state
            .limits
            .prepare(move || {
                let dto: CountDto = parse_body(&body)?;
                let messages = to_messages(dto.system.as_ref(), &dto.messages)?;
                let (tools, _) = custom_tools(dto.tools.unwrap_or_default())?;
                // the tools as the prompt offers them; no grammar is built to count tokens
                let output = tools::output_plan(
                    Some(tools),
                    None,
                    None,
                    prep.prompts().tool_format(),
                    &prep.app,
                )
                .map_err(|e| Route::Messages.rename(e))?;
                generation::count_tokens(&prep, messages, &output.tools)
            })
            .await?;
        Ok::<_, ApiError>(Json(json!({"input_tokens": n})).into_response())
    }
    .await;
    result.unwrap_or_else(error_response)
}

#[cfg(test)]
mod tests;
mod writer;

use writer::Writer;
