//! The APIs' dialects: what each calls the fields they share and the shape of the errors its
//! clients read. An API is the service's [`Route`] (one enum for the route a request came in
//! and the words it speaks); [`RouteApi`] adds the words. The error shape is the mounting
//! router's ([`ErrorShape`]): the routes' guards, their fallbacks and each front end answer
//! in it.

use super::ApiError;
use crate::service::Route;
use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// The shape of the errors a router's clients read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ErrorShape {
    /// OpenAI's `{"error": {"message", "type", "param", "code"}}` (llama.cpp's errors have it
    /// too), the app's own.
    #[default]
    OpenAi,
    /// Anthropic's `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
}

impl ErrorShape {
    /// The response this shape's clients read for `error`.
    pub fn response(self, error: ApiError) -> Response {
        match self {
            Self::Anthropic => anthropic_error(error),
            Self::OpenAi => error.into_response(),
        }
    }
}

/// What each API calls the fields the APIs share, and its own bounds.
pub trait RouteApi: Copy {
    /// Where the conversation goes.
    fn messages_field(self) -> &'static str;
    /// The output limit.
    fn max_tokens_field(self) -> &'static str;
    /// The stop strings.
    fn stop_field(self) -> &'static str;
    /// `temperature`'s upper bound: 2 in OpenAI's APIs, 1 in Anthropic's.
    fn temperature_max(self) -> f32;
    /// The error shape its clients read.
    fn error_shape(self) -> ErrorShape;
    /// An error about a shared field, in this API's names (a tool's `function.parameters` is
    /// Messages' `input_schema` and Responses' `parameters`; `response_format` is Responses'
    /// `text.format`).
    fn rename(self, error: ApiError) -> ApiError;
}

impl RouteApi for Route {
    fn messages_field(self) -> &'static str {
        match self {
            Self::Responses => "input",
            Self::ChatCompletions | Self::Messages => "messages",
            Self::Completions => "prompt",
            Self::Infill => "input_prefix",
        }
    }

    fn max_tokens_field(self) -> &'static str {
        match self {
            Self::Responses => "max_output_tokens",
            Self::ChatCompletions | Self::Messages | Self::Completions => "max_tokens",
            Self::Infill => "n_predict",
        }
    }

    fn stop_field(self) -> &'static str {
        match self {
            Self::Messages => "stop_sequences",
            Self::ChatCompletions | Self::Responses | Self::Completions | Self::Infill => "stop",
        }
    }

    fn temperature_max(self) -> f32 {
        match self {
            Self::Messages => 1.0,
            Self::ChatCompletions | Self::Responses | Self::Completions | Self::Infill => 2.0,
        }
    }

    fn error_shape(self) -> ErrorShape {
        match self {
            Self::Messages => ErrorShape::Anthropic,
            Self::ChatCompletions | Self::Responses | Self::Completions | Self::Infill => {
                ErrorShape::OpenAi
            }
        }
    }

    fn rename(self, error: ApiError) -> ApiError {
        let renames: &[(&str, &str)] = match self {
            Self::ChatCompletions | Self::Completions | Self::Infill => return error,
            // a function tool's fields sit on the tool itself
            Self::Responses => &[
                // `text.format` holds its schema itself
                ("response_format.json_schema.schema", "text.format.schema"),
                ("response_format", "text.format"),
                (".function.parameters", ".parameters"),
                (".function.name", ".name"),
            ],
            Self::Messages => &[
                (".function.parameters", ".input_schema"),
                (".function.name", ".name"),
            ],
        };
        match error {
            ApiError::BadRequest { message, param } => {
                let fix = |mut s: String| {
                    for (from, to) in renames {
                        s = s.replace(from, to);
                    }
                    s
                };
                ApiError::BadRequest {
                    message: fix(message),
                    param: param.map(fix),
                }
            }
            other => other,
        }
    }
}

/// Anthropic's error type for an [`ApiError`].
fn anthropic_kind(error: &ApiError) -> &'static str {
    match error {
        ApiError::BadRequest { .. }
        | ApiError::ContextLengthExceeded { .. }
        | ApiError::UnsupportedMediaType(_)
        | ApiError::MethodNotAllowed { .. }
        | ApiError::BodyTimeout { .. }
        | ApiError::ClientGone => "invalid_request_error",
        ApiError::PayloadTooLarge { .. } => "request_too_large",
        ApiError::QueueFull { .. } | ApiError::Busy { .. } => "rate_limit_error",
        ApiError::EngineStarting { .. } | ApiError::EngineUnavailable(_) => "overloaded_error",
        ApiError::Unauthorized => "authentication_error",
        ApiError::HostNotAllowed(_) | ApiError::Forbidden(_) | ApiError::OriginNotAllowed(_) => {
            "permission_error"
        }
        ApiError::NotFound(_) => "not_found_error",
        ApiError::Internal(_) | ApiError::RequestFailed(_) => "api_error",
    }
}

/// Anthropic's error object (`{"type": "error", "error": {...}}`, also a stream's `error`
/// event), the message in Anthropic's words where clients match on them.
pub fn anthropic_error_json(error: &ApiError) -> Value {
    let message = match error {
        ApiError::ContextLengthExceeded {
            prompt_tokens,
            max_context_tokens,
        } => format!("prompt is too long: {prompt_tokens} tokens > {max_context_tokens} maximum"),
        other => other.to_string(),
    };
    json!({"type": "error", "error": {"type": anthropic_kind(error), "message": message}})
}

/// An Anthropic error response.
fn anthropic_error(error: ApiError) -> Response {
    let status = error.status();
    let mut response = (status, Json(anthropic_error_json(&error))).into_response();
    // Keep Retry-After from the OpenAI-shaped answer.
    if let Some(retry) = error.into_response().headers().get("retry-after").cloned() {
        response.headers_mut().insert("retry-after", retry);
    }
    response
}
