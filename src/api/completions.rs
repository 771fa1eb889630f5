//! `POST /v1/completions` (OpenAI's legacy completions; `/v1/fim/completions` is the same
//! route by Mistral's and DeepSeek's name): an editor's autocomplete. With a `suffix` it is a
//! fill-in-the-middle request built on the model's FIM tokens (`fim`); without one, the
//! `prompt` is read as written, special tokens included (an editor that renders its own FIM
//! template, as Continue does for a known model, sends the tokens' names in it). No chat
//! template, no tools; `fim_priority` unless the request names a priority.

use super::chat::{StopDto, StreamOptionsDto};
use super::fim::{self, Infill};
use super::frontend::{Frontend, Translated};
use super::generation::{Generation, Prepared, Started};
use super::validate::{Draft, with_sampling_knobs};
use super::wire::WireWriter;
use super::{ApiError, ApiState};
use crate::chat::{Ending, Piece};
use crate::service::{FinishReason, Finished, Route, Usage};
use axum::response::sse::Event;
use serde::Deserialize;
use serde_json::{Value, json};

with_sampling_knobs! {
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

/// OpenAI's legacy completions: an editor's autocomplete, answered in `text_completion`
/// objects.
pub struct Completions;

/// What the prompt and the answer need besides the draft.
pub struct Asked {
    prompt: String,
    suffix: Option<String>,
    include_usage: bool,
}

impl Frontend for Completions {
    const ROUTE: Route = Route::Completions;
    type Dto = CompletionDto;
    type Extra = Asked;
    type Writer = CompletionWriter;

    fn model(dto: &CompletionDto) -> Option<&str> {
        dto.model.as_deref()
    }

    /// Checked where only this API has the field.
    fn translate(dto: CompletionDto) -> Result<Translated<Asked>, ApiError> {
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
        let knobs = dto.knobs();
        let prompt = prompt_text(dto.prompt)?;
        if prompt.is_empty() && dto.suffix.is_none() {
            return Err(ApiError::bad(
                "`prompt` must not be empty without a `suffix`",
                Some("prompt"),
            ));
        }
        let draft = Draft {
            knobs,
            max_tokens: dto.max_completion_tokens.or(dto.max_tokens),
            stop: dto.stop.map(StopDto::into_vec).unwrap_or_default(),
            ignore_eos: dto.ignore_eos,
            priority: dto.priority,
            ..Draft::new(Route::Completions, Vec::new())
        };
        Ok(Translated {
            draft,
            stream: dto.stream,
            extra: Asked {
                prompt,
                suffix: dto.suffix,
                include_usage: dto.stream_options.is_some_and(|o| o.include_usage),
            },
        })
    }

    /// With a suffix, the fill-in-the-middle form; without one, the prompt as written.
    fn prompt(
        state: &ApiState,
        generation: Generation,
        model: &str,
        asked: &Asked,
    ) -> Result<Prepared, ApiError> {
        let prompts = state.prompts();
        let tokenizer = prompts.tokenizer();
        let tokens = match &asked.suffix {
            Some(suffix) => {
                let tokens = fim::fim_tokens(tokenizer, model, "suffix")?;
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
        Ok(Prepared::autocomplete(generation, tokens))
    }

    fn writer(started: &Started, model: String, asked: Asked) -> CompletionWriter {
        CompletionWriter {
            id: Route::Completions.client_id(started.id),
            model,
            created: started.created,
            include_usage: asked.include_usage,
            text: String::new(),
        }
    }
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
pub struct CompletionWriter {
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
