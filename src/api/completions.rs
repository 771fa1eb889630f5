//! `POST /v1/completions` (OpenAI's legacy completions; `/v1/fim/completions` is the same
//! route by Mistral's and DeepSeek's name): an editor's autocomplete. With a `suffix` it is a
//! fill-in-the-middle request built on the model's FIM tokens (`fim`); without one, the
//! `prompt` is read as written, special tokens included (an editor that renders its own FIM
//! template, as Continue does for a known model, sends the tokens' names in it). No chat
//! template, no tools; `fim_priority` unless the request names a priority.

use super::body::{body_bytes, parse_body};
use super::chat::{StopDto, StreamOptionsDto};
use super::dialect::Dialect;
use super::fim::{self, Infill};
use super::generation::{self, Prepared};
use super::validate::{Draft, Knobs, validate};
use super::wire::{self, WireWriter};
use super::{ApiError, ApiState};
use crate::chat::{Ending, Piece};
use crate::service::{FinishReason, Finished, Route, Usage};
use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::response::sse::Event;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct CompletionDto {
    #[serde(default)]
    pub model: Option<String>,
    /// A string, or an array holding one.
    pub prompt: Option<Value>,
    /// The code after the cursor: present, the request is a fill-in-the-middle one.
    #[serde(default)]
    pub suffix: Option<String>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub stream_options: Option<StreamOptionsDto>,
    pub max_tokens: Option<u32>,
    pub max_completion_tokens: Option<u32>,
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<i64>,
    pub stop: Option<StopDto>,
    #[serde(default)]
    pub ignore_eos: bool,
    /// Any JSON here; not an integer is a 400 naming the field (SCHEDULING.md).
    pub priority: Option<Value>,
    pub n: Option<u32>,
    pub best_of: Option<u32>,
    #[serde(default)]
    pub echo: bool,
    #[serde(default)]
    pub logprobs: Option<Value>,
}

/// The prompt's text: one string.
fn prompt_text(prompt: Option<Value>) -> Result<String, ApiError> {
    let bad = |what: &str| {
        ApiError::bad(
            format!("`prompt` must be a string (or an array of one string), got {what}"),
            Some("prompt"),
        )
    };
    match prompt {
        None | Some(Value::Null) => Err(ApiError::bad("`prompt` is required", Some("prompt"))),
        Some(Value::String(text)) => Ok(text),
        Some(Value::Array(items)) => match <[Value; 1]>::try_from(items) {
            Ok([Value::String(text)]) => Ok(text),
            Ok([_]) => Err(bad(
                "an array whose item is not a string (token arrays are not taken)",
            )),
            Err(items) => Err(bad(&format!(
                "an array of {}: one prompt per request",
                items.len()
            ))),
        },
        Some(other) => Err(bad(json_kind(&other))),
    }
}

fn json_kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// What the body asks for, checked where only this API has the field.
struct Asked {
    draft: Draft,
    prompt: String,
    suffix: Option<String>,
    stream: bool,
    include_usage: bool,
}

fn asked(dto: CompletionDto) -> Result<Asked, ApiError> {
    for (field, more_than_one) in [
        ("n", dto.n.is_some_and(|n| n != 1)),
        ("best_of", dto.best_of.is_some_and(|n| n != 1)),
    ] {
        if more_than_one {
            return Err(ApiError::bad(
                format!("`{field}` must be 1: one completion per request"),
                Some(field),
            ));
        }
    }
    if dto.echo {
        return Err(ApiError::bad(
            "`echo` is not supported: the answer holds the completion only",
            Some("echo"),
        ));
    }
    if dto
        .logprobs
        .as_ref()
        .is_some_and(|l| !l.is_null() && *l != json!(0) && *l != json!(false))
    {
        return Err(ApiError::bad(
            "`logprobs` is not supported",
            Some("logprobs"),
        ));
    }
    let prompt = prompt_text(dto.prompt)?;
    if prompt.is_empty() && dto.suffix.is_none() {
        return Err(ApiError::bad(
            "`prompt` must not be empty without a `suffix`",
            Some("prompt"),
        ));
    }
    let draft = Draft {
        knobs: Knobs {
            temperature: dto.temperature,
            top_p: dto.top_p,
            top_k: dto.top_k,
            min_p: dto.min_p,
            frequency_penalty: dto.frequency_penalty,
            presence_penalty: dto.presence_penalty,
            repetition_penalty: dto.repetition_penalty,
            seed: dto.seed,
        },
        max_tokens: dto.max_completion_tokens.or(dto.max_tokens),
        stop: match dto.stop {
            None => Vec::new(),
            Some(StopDto::One(s)) => vec![s],
            Some(StopDto::Many(v)) => v,
        },
        ignore_eos: dto.ignore_eos,
        priority: dto.priority,
        ..Draft::new(Dialect::Completions, Vec::new())
    };
    Ok(Asked {
        draft,
        prompt,
        suffix: dto.suffix,
        stream: dto.stream,
        include_usage: dto.stream_options.is_some_and(|o| o.include_usage),
    })
}

pub async fn completions(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, axum::extract::rejection::BytesRejection>,
) -> Result<Response, ApiError> {
    let state = state.pinned();
    let body = body_bytes(&state, body)?;
    let prep = state.clone();
    let (prepared, model, stream, include_usage) = state
        .limits
        .prepare(move || {
            let dto: CompletionDto = parse_body(&body)?;
            let model = prep.model_name(dto.model.as_deref());
            let asked = asked(dto)?;
            let generation = validate(asked.draft, &prep)?;
            let prompts = prep.prompts();
            let tokenizer = prompts.tokenizer();
            let tokens = match &asked.suffix {
                Some(suffix) => {
                    let tokens = fim::fim_tokens(tokenizer, &model, "suffix")?;
                    let infill = Infill {
                        prefix: &asked.prompt,
                        suffix,
                        ..Infill::default()
                    };
                    fim::prompt(tokenizer, tokens, &infill)
                }
                None => {
                    // the model's BOS first, unless the prompt wrote it
                    let text = tokenizer.tokenize_markup(&asked.prompt);
                    let bos = tokenizer.bos_to_add().filter(|b| text.first() != Some(b));
                    bos.into_iter().chain(text).collect()
                }
            };
            let prepared = Prepared::autocomplete(generation, tokens);
            Ok((prepared, model, asked.stream, asked.include_usage))
        })
        .await?;
    let started =
        generation::submit(&state, &headers, prepared, Route::Completions, "call_").await?;
    let writer = CompletionWriter {
        id: Route::Completions.client_id(started.id),
        model,
        created: started.created,
        include_usage,
        text: String::new(),
    };
    wire::respond(started, writer, stream).await
}

/// `finish_reason` of a completion.
fn finish_reason(reason: FinishReason) -> &'static str {
    match reason {
        FinishReason::Length => "length",
        FinishReason::Cancelled => "cancelled",
        FinishReason::Stop => "stop",
    }
}

fn usage_json(usage: &Usage) -> Value {
    json!({
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
    })
}

/// The legacy wire format: `text_completion` objects, streamed with `text` deltas, then
/// `[DONE]`.
struct CompletionWriter {
    id: String,
    model: String,
    created: u64,
    include_usage: bool,
    /// The whole completion so far (the non-streamed body).
    text: String,
}

impl CompletionWriter {
    fn object(&self, text: &str, finish: Option<&str>) -> Value {
        json!({
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"text": text, "index": 0, "logprobs": null, "finish_reason": finish}],
        })
    }
}

impl WireWriter for CompletionWriter {
    fn begin(&mut self) -> Vec<Event> {
        Vec::new()
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        // a plain parser yields content only
        let (Piece::Content(text) | Piece::CallInvalid { raw: text, .. }) = piece else {
            return Vec::new();
        };
        self.text.push_str(&text);
        vec![data(&self.object(&text, None))]
    }

    fn finish(&mut self, done: &Finished, _ending: &Ending) -> (Vec<Event>, Value) {
        let reason = finish_reason(done.reason);
        let mut events = vec![data(&self.object("", Some(reason)))];
        if self.include_usage {
            let mut usage = self.object("", None);
            usage["choices"] = json!([]);
            usage["usage"] = usage_json(&done.usage);
            events.push(data(&usage));
        }
        events.push(Event::default().data("[DONE]"));
        let mut whole = self.object(&self.text, Some(reason));
        whole["usage"] = usage_json(&done.usage);
        (events, whole)
    }

    fn fail(&mut self, error: &ApiError) -> Vec<Event> {
        vec![data(&error.body()), Event::default().data("[DONE]")]
    }

    fn keep_alive(&mut self) -> Vec<Event> {
        Vec::new()
    }
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}
