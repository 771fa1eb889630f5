//! The APIs' dialects: what each calls the fields they share and the shape of the
//! errors its clients read. Each API owns its dialect; the guards, the one validation step and
//! the routes answer in it.

use super::ApiError;
use axum::Json;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// Which API a request speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// OpenAI Chat Completions (and every route that is not another API's).
    Chat,
    /// OpenAI Responses.
    Responses,
    /// Anthropic Messages.
    Messages,
    /// OpenAI's legacy completions (`/v1/completions`, with a `suffix` a fill-in-the-middle
    /// request; also `/v1/fim/completions`, Mistral's and DeepSeek's name for it).
    Completions,
    /// llama.cpp's `/infill`.
    Infill,
}

impl Dialect {
    /// The dialect of a request for `path`.
    pub fn of_path(path: &str) -> Self {
        if path.starts_with("/v1/messages") {
            Self::Messages
        } else if path.starts_with("/v1/responses") {
            Self::Responses
        } else if path.starts_with("/v1/completions") || path.starts_with("/v1/fim/") {
            Self::Completions
        } else if path.starts_with("/infill") {
            Self::Infill
        } else {
            Self::Chat
        }
    }

    /// Where the conversation goes.
    pub fn messages_field(self) -> &'static str {
        match self {
            Self::Responses => "input",
            Self::Chat | Self::Messages => "messages",
            Self::Completions => "prompt",
            Self::Infill => "input_prefix",
        }
    }

    /// The output limit.
    pub fn max_tokens_field(self) -> &'static str {
        match self {
            Self::Responses => "max_output_tokens",
            Self::Chat | Self::Messages | Self::Completions => "max_tokens",
            Self::Infill => "n_predict",
        }
    }

    /// The stop strings.
    pub fn stop_field(self) -> &'static str {
        match self {
            Self::Messages => "stop_sequences",
            Self::Chat | Self::Responses | Self::Completions | Self::Infill => "stop",
        }
    }

    /// `temperature`'s upper bound: 2 in OpenAI's APIs, 1 in Anthropic's.
    pub fn temperature_max(self) -> f32 {
        match self {
            Self::Messages => 1.0,
            Self::Chat | Self::Responses | Self::Completions | Self::Infill => 2.0,
        }
    }

    /// An error about a shared field, in this API's names (a tool's `function.parameters` is
    /// Messages' `input_schema` and Responses' `parameters`; `response_format` is Responses'
    /// `text.format`).
    pub fn rename(self, error: ApiError) -> ApiError {
        let renames: &[(&str, &str)] = match self {
            Self::Chat | Self::Completions | Self::Infill => return error,
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

    /// The response this API's clients read for `error`.
    pub fn error_response(self, error: ApiError) -> Response {
        match self {
            Self::Messages => anthropic_error(error),
            // llama.cpp's errors have OpenAI's shape too
            Self::Chat | Self::Responses | Self::Completions | Self::Infill => {
                error.into_response()
            }
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
