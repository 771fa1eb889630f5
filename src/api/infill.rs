//! `POST /infill`, llama.cpp's fill-in-the-middle route (llama.vim, llama.vscode and the
//! editors built on them): `input_prefix`, `input_suffix`, the other files in `input_extra`
//! and the line up to the cursor in `prompt`, answered in llama.cpp's own shape (`content`, `stop`,
//! the token counts; streamed as `data:` events with no `[DONE]`). Options of llama.cpp's
//! that steer its own slots and timers (`cache_prompt`, `id_slot`, `t_max_prompt_ms`,
//! `t_max_predict_ms`, `samplers`, `n_indent`, `response_fields`) are accepted and not read:
//! this server keeps conversations and orders requests itself.

use super::fim::{self, ExtraFile};
use super::frontend::{Frontend, Translated};
use super::generation::{Generation, Prepared, Started};
use super::validate::{Draft, Knobs};
use super::wire::WireWriter;
use super::{ApiError, ApiState};
use crate::chat::{Ending, Piece};
use crate::service::{FinishReason, Finished, Route};
use axum::response::sse::Event;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct InfillDto {
    #[serde(default)]
    pub model: Option<String>,
    #[serde(default)]
    pub input_prefix: String,
    #[serde(default)]
    pub input_suffix: String,
    #[serde(default)]
    pub input_extra: Vec<ExtraFile>,
    /// The current line up to the cursor: the end of the prefix.
    #[serde(default)]
    pub prompt: String,
    /// At most this many tokens; -1 (or any negative): until the model stops.
    pub n_predict: Option<i64>,
    #[serde(default)]
    pub stream: bool,
    pub temperature: Option<f32>,
    pub top_k: Option<i32>,
    pub top_p: Option<f32>,
    pub min_p: Option<f32>,
    pub repeat_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub frequency_penalty: Option<f32>,
    /// -1 (or any negative): a random seed, as in llama.cpp.
    pub seed: Option<i64>,
    #[serde(default)]
    pub stop: Vec<String>,
    #[serde(default)]
    pub ignore_eos: bool,
    /// Any JSON here; not an integer is a 400 naming the field (SCHEDULING.md).
    pub priority: Option<Value>,
}

/// llama.cpp's `/infill`, answered in llama.cpp's completion shape.
pub struct Infill;

/// The code around the cursor: what the prompt is made of.
pub struct Code {
    prefix: String,
    suffix: String,
    extra: Vec<ExtraFile>,
    prefix_tail: String,
}

impl Frontend for Infill {
    const ROUTE: Route = Route::Infill;
    type Dto = InfillDto;
    type Extra = Code;
    type Writer = InfillWriter;

    fn model(dto: &InfillDto) -> Option<&str> {
        dto.model.as_deref()
    }

    fn translate(dto: InfillDto) -> Result<Translated<Code>, ApiError> {
        let draft = Draft {
            knobs: Knobs {
                temperature: dto.temperature,
                top_p: dto.top_p,
                top_k: dto.top_k,
                min_p: dto.min_p,
                frequency_penalty: dto.frequency_penalty,
                presence_penalty: dto.presence_penalty,
                repetition_penalty: dto.repeat_penalty,
                seed: dto.seed.filter(|s| *s >= 0),
            },
            max_tokens: dto
                .n_predict
                .filter(|n| *n >= 0)
                .map(|n| u32::try_from(n).unwrap_or(u32::MAX)),
            stop: dto.stop,
            ignore_eos: dto.ignore_eos,
            priority: dto.priority,
            ..Draft::new(Route::Infill, Vec::new())
        };
        Ok(Translated {
            draft,
            stream: dto.stream,
            extra: Code {
                prefix: dto.input_prefix,
                suffix: dto.input_suffix,
                extra: dto.input_extra,
                prefix_tail: dto.prompt,
            },
        })
    }

    fn prompt(
        state: &ApiState,
        generation: Generation,
        model: &str,
        code: &Code,
    ) -> Result<Prepared, ApiError> {
        let prompts = state.prompts();
        let tokenizer = prompts.tokenizer();
        let fim_tokens = fim::fim_tokens(tokenizer, model, "input_prefix")?;
        let infill = fim::Infill {
            prefix: &code.prefix,
            suffix: &code.suffix,
            extra: &code.extra,
            prefix_tail: &code.prefix_tail,
        };
        let tokens = fim::prompt(tokenizer, fim_tokens, &infill);
        Ok(Prepared::autocomplete(generation, tokens))
    }

    fn writer(started: &Started, model: String, _code: Code) -> InfillWriter {
        InfillWriter {
            id: Route::Infill.client_id(started.id),
            model,
            content: String::new(),
        }
    }
}

/// llama.cpp's `stop_type`: `eos` (the model or a stop string ended it: `word`), `limit`.
fn stop_type(done: &Finished) -> &'static str {
    match done.reason {
        FinishReason::Length => "limit",
        FinishReason::Cancelled => "none",
        FinishReason::Stop if done.stop_sequence.is_some() => "word",
        FinishReason::Stop => "eos",
    }
}

/// llama.cpp's completion shape.
pub struct InfillWriter {
    id: String,
    model: String,
    /// The whole answer so far (the non-streamed body).
    content: String,
}

impl WireWriter for InfillWriter {
    fn begin(&mut self) -> Vec<Event> {
        Vec::new()
    }

    fn piece(&mut self, piece: Piece) -> Vec<Event> {
        // a plain parser yields content only
        let (Piece::Content(text) | Piece::CallInvalid { raw: text, .. }) = piece else {
            return Vec::new();
        };
        self.content.push_str(&text);
        vec![data(&json!({"index": 0, "content": text, "stop": false}))]
    }

    /// The last event carries no text, only `stop: true` and the figures.
    fn finish(&mut self, done: &Finished, _ending: &Ending) -> (Vec<Event>, Value) {
        let whole = |content: &str| {
            json!({
                "index": 0,
                "id": self.id,
                "content": content,
                "stop": true,
                "model": self.model,
                "stop_type": stop_type(done),
                "stopping_word": done.stop_sequence.clone().unwrap_or_default(),
                "tokens_predicted": done.usage.completion_tokens,
                "tokens_evaluated": done.usage.prompt_tokens,
                "tokens_cached": done.usage.cached_tokens,
                "truncated": false,
            })
        };
        (vec![data(&whole(""))], whole(&self.content))
    }

    fn fail(&mut self, error: &ApiError) -> Vec<Event> {
        vec![data(&error.body())]
    }

    fn keep_alive(&mut self) -> Vec<Event> {
        Vec::new()
    }
}

fn data(value: &Value) -> Event {
    Event::default().data(value.to_string())
}
