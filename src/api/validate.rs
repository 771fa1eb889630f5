//! The one validation step every API's request passes (TGI's `router/src/validation.rs` is
//! the model). Each front end only translates its body into a [`Draft`]: the conversation in
//! the shared form and the knobs as sent. [`validate`] then checks what they share, the same
//! for all, in the words of the caller's [`Route`]: sampling ranges (each API's own where they differ),
//! the output limit, stop strings, tools, tool choice and output format, the priority. A fix
//! here is made once for every API.

use super::body::{body_priority, check_stops};
use super::dialect::RouteApi;
use super::generation::{Generation, rand_seed};
use super::tools::{self, ResponseFormatDto, ToolDto};
use super::{ApiError, ApiState};
use crate::chat::ChatMessage;
use crate::service::{Route, Sampling};
use serde_json::Value;

/// A request translated by its front end, not yet validated.
#[derive(Debug)]
pub struct Draft {
    /// The API it came in: errors name its fields.
    pub route: Route,
    pub messages: Vec<ChatMessage>,
    /// The tools offered (`None`: the API has no field for them or the body gave none).
    pub tools: Option<Vec<ToolDto>>,
    /// Each offered tool's place in the body, when it is not `tools[i]` of the offered list (a
    /// front end that leaves some out or takes them from inside others); empty: the same.
    pub tool_paths: Vec<String>,
    /// `tool_choice` in Chat Completions' form (each front end translates its own).
    pub tool_choice: Option<Value>,
    /// The output format in Chat Completions' `response_format` form.
    pub format: Option<ResponseFormatDto>,
    pub knobs: Knobs,
    pub max_tokens: Option<u32>,
    pub stop: Vec<String>,
    pub ignore_eos: bool,
    /// The body's `priority`, as sent.
    pub priority: Option<Value>,
}

impl Draft {
    /// A draft of `messages` that came in on `route`, nothing else set.
    pub fn new(route: Route, messages: Vec<ChatMessage>) -> Self {
        Self {
            route,
            messages,
            tools: None,
            tool_paths: Vec::new(),
            tool_choice: None,
            format: None,
            knobs: Knobs::default(),
            max_tokens: None,
            stop: Vec::new(),
            ignore_eos: false,
            priority: None,
        }
    }
}

/// The sampling knobs as sent; an API without one leaves it `None`.
#[derive(Debug, Default)]
pub struct Knobs {
    pub temperature: Option<f32>,
    pub top_p: Option<f32>,
    pub top_k: Option<i32>,
    pub min_p: Option<f32>,
    pub frequency_penalty: Option<f32>,
    pub presence_penalty: Option<f32>,
    pub repetition_penalty: Option<f32>,
    pub seed: Option<i64>,
}

/// Declares a request DTO with the sampling knobs Chat Completions and the legacy
/// completions both take (the eight of [`Knobs`], by the same names) as fields of its own, and
/// its `knobs()`. Not a `#[serde(flatten)]`ed struct: serde buffers a flattened struct's
/// fields and reads them apart from the body, so a knob of the wrong type
/// (`"temperature": "hot"`) would be reported as the whole body's fault, without its field in
/// `param` and without the JSON parser's position (a test below holds the message). Other
/// APIs take fewer knobs or other names (Responses two, Messages three, `/infill` llama.cpp's
/// `repeat_penalty`) and declare their own.
macro_rules! with_sampling_knobs {
    (
        $(#[$meta:meta])*
        pub struct $name:ident {
            $($(#[$field_meta:meta])* pub $field:ident: $ty:ty,)*
        }
    ) => {
        $(#[$meta])*
        pub struct $name {
            $($(#[$field_meta])* pub $field: $ty,)*
            pub temperature: Option<f32>,
            pub top_p: Option<f32>,
            pub top_k: Option<i32>,
            pub min_p: Option<f32>,
            pub frequency_penalty: Option<f32>,
            pub presence_penalty: Option<f32>,
            pub repetition_penalty: Option<f32>,
            pub seed: Option<i64>,
        }

        impl $name {
            /// The sampling knobs as sent.
            pub fn knobs(&self) -> $crate::api::validate::Knobs {
                $crate::api::validate::Knobs {
                    temperature: self.temperature,
                    top_p: self.top_p,
                    top_k: self.top_k,
                    min_p: self.min_p,
                    frequency_penalty: self.frequency_penalty,
                    presence_penalty: self.presence_penalty,
                    repetition_penalty: self.repetition_penalty,
                    seed: self.seed,
                }
            }
        }
    };
}
pub(crate) use with_sampling_knobs;

/// The draft checked and put in the terms generation takes; errors name the field as the
/// caller's API does.
pub fn validate(draft: Draft, state: &ApiState) -> Result<Generation, ApiError> {
    let route = draft.route;
    let paths = draft.tool_paths.clone();
    checked(draft, state).map_err(|e| route.rename(at_body_places(e, &paths)))
}

/// An error naming `tools[k]` of the offered list names the tool's place in the body.
fn at_body_places(error: ApiError, paths: &[String]) -> ApiError {
    if paths.is_empty() {
        return error;
    }
    let place = |text: String| {
        let mut out = String::with_capacity(text.len());
        let mut rest = text.as_str();
        while let Some(at) = rest.find("tools[") {
            out.push_str(&rest[..at]);
            let after = &rest[at + "tools[".len()..];
            let digits = after.len() - after.trim_start_matches(|c: char| c.is_ascii_digit()).len();
            let index = after[..digits].parse::<usize>().ok();
            match (
                index.and_then(|k| paths.get(k)),
                after[digits..].strip_prefix(']'),
            ) {
                (Some(path), Some(tail)) => {
                    out.push_str(path);
                    rest = tail;
                }
                _ => {
                    out.push_str("tools[");
                    rest = after;
                }
            }
        }
        out.push_str(rest);
        out
    };
    match error {
        ApiError::BadRequest { message, param } => ApiError::BadRequest {
            message: place(message),
            param: param.map(place),
        },
        other => other,
    }
}

fn checked(draft: Draft, state: &ApiState) -> Result<Generation, ApiError> {
    let route = draft.route;
    let messages_field = route.messages_field();
    // Chat Completions takes any message; the others need one that is not the system prompt;
    // a completion or an infill has text, not messages (its front end checks it)
    let has_conversation = match route {
        Route::ChatCompletions => !draft.messages.is_empty(),
        Route::Responses | Route::Messages => draft.messages.iter().any(|m| m.role != "system"),
        Route::Completions | Route::Infill => true,
    };
    if !has_conversation {
        let message = match route {
            Route::Responses => format!("`{messages_field}` has no message"),
            _ => format!("`{messages_field}` must not be empty"),
        };
        return Err(ApiError::bad(message, Some(messages_field)));
    }
    let knobs = &draft.knobs;
    in_range(
        "temperature",
        knobs.temperature,
        0.0,
        route.temperature_max(),
    )?;
    in_range("top_p", knobs.top_p, 0.0, 1.0)?;
    in_range("min_p", knobs.min_p, 0.0, 1.0)?;
    in_range("frequency_penalty", knobs.frequency_penalty, -2.0, 2.0)?;
    in_range("presence_penalty", knobs.presence_penalty, -2.0, 2.0)?;
    in_range("repetition_penalty", knobs.repetition_penalty, 0.01, 10.0)?;
    let max_field = route.max_tokens_field();
    match draft.max_tokens {
        None if route == Route::Messages => {
            return Err(ApiError::bad(
                format!("`{max_field}` is required"),
                Some(max_field),
            ));
        }
        Some(0) => {
            return Err(ApiError::bad(
                format!("`{max_field}` must be at least 1, got 0"),
                Some(max_field),
            ));
        }
        _ => {}
    }
    check_stops(route.stop_field(), &draft.stop, &state.app)?;
    let output = tools::output_plan(
        draft.tools,
        draft.tool_choice.as_ref(),
        draft.format,
        state.prompts().tool_format(),
        &state.app,
    )?;
    Ok(Generation {
        messages: draft.messages,
        output,
        sampling: sampling(knobs),
        max_tokens: draft.max_tokens,
        stop: draft.stop,
        ignore_eos: draft.ignore_eos,
        priority: body_priority(draft.priority.as_ref())?,
        route,
    })
}

fn in_range(name: &str, value: Option<f32>, lo: f32, hi: f32) -> Result<(), ApiError> {
    match value {
        Some(v) if !(v.is_finite() && (lo..=hi).contains(&v)) => Err(ApiError::bad(
            format!("`{name}` must be between {lo} and {hi}, got {v}"),
            Some(name),
        )),
        _ => Ok(()),
    }
}

/// Sampling from the knobs; unset ones take the defaults (temperature 1, no penalties).
fn sampling(knobs: &Knobs) -> Sampling {
    let defaults = Sampling::default();
    Sampling {
        temperature: knobs.temperature.unwrap_or(1.0),
        top_k: knobs.top_k.unwrap_or(defaults.top_k),
        top_p: knobs.top_p.unwrap_or(defaults.top_p),
        min_p: knobs.min_p.unwrap_or(defaults.min_p),
        seed: knobs.seed.map_or_else(rand_seed, |s| s as u32),
        repeat_penalty: knobs.repetition_penalty.unwrap_or(1.0),
        frequency_penalty: knobs.frequency_penalty.unwrap_or(0.0),
        presence_penalty: knobs.presence_penalty.unwrap_or(0.0),
        ..defaults
    }
}

#[cfg(test)]
mod tests {
    use super::super::body::parse_body;
    use super::super::chat::ChatCompletionDto;
    use super::super::completions::CompletionDto;
    use super::*;

    #[test]
    fn a_knob_of_the_wrong_type_names_its_field_and_where_the_parser_stopped() {
        let body = br#"{"messages": [], "temperature": "hot"}"#;
        let chat = parse_body::<ChatCompletionDto>(body).unwrap_err();
        let completion = parse_body::<CompletionDto>(body).unwrap_err();
        let expected = ApiError::bad(
            "`temperature`: invalid type: string \"hot\", expected f32 at line 1 column 37",
            Some("temperature"),
        );
        assert_eq!(chat, expected);
        assert_eq!(completion, expected);
        // why the knobs are not a `#[serde(flatten)]`ed struct: the field and place are lost
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Flat {
            messages: Vec<Value>,
            #[serde(flatten)]
            knobs: FlatKnobs,
        }
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct FlatKnobs {
            temperature: Option<f32>,
        }
        let flat = parse_body::<Flat>(body).unwrap_err();
        assert!(
            matches!(&flat, ApiError::BadRequest { param: None, message } if message.starts_with("the body is not a valid request")),
            "{flat:?}"
        );
    }
}
