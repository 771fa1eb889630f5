//! The one place errors become HTTP: status, OpenAI-shaped body, `Retry-After`.

use crate::service::{ControlError, Failure, SubmitError};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// Malformed JSON, a wrong type, a value out of bounds: names the field.
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
    },
    #[error(
        "This model's maximum context length is {max_context_tokens} tokens. However, your messages resulted in {prompt_tokens} tokens."
    )]
    ContextLengthExceeded {
        prompt_tokens: u32,
        max_context_tokens: u32,
    },
    #[error("the request body is larger than the {limit_mib} MiB limit")]
    PayloadTooLarge { limit_mib: u64 },
    #[error("the waiting queue is full; retry after {retry_after_secs} s")]
    QueueFull { retry_after_secs: u32 },
    /// A bounded place is full (request preparation, event-stream clients).
    #[error("{what}: all {limit} places are taken (`{key}`); retry after {retry_after_secs} s")]
    Busy {
        what: &'static str,
        key: &'static str,
        limit: u32,
        retry_after_secs: u32,
    },
    #[error("the request body did not arrive within {secs} s (`body_read_timeout_secs`)")]
    BodyTimeout { secs: u32 },
    #[error("the engine is loading; retry after {retry_after_secs} s")]
    EngineStarting { retry_after_secs: u32 },
    #[error("the engine is unavailable: {0}")]
    EngineUnavailable(String),
    #[error("a valid API key is required (Authorization: Bearer KEY, or x-api-key)")]
    Unauthorized,
    #[error("the Host header {0:?} is not allowed")]
    HostNotAllowed(String),
    /// An admin route refused (foreign Origin, not loopback and no key).
    #[error("{0}")]
    Forbidden(String),
    /// A request from a web page whose `Origin` is not in `cors_origins` (any route).
    #[error(
        "requests from the web origin {0:?} are refused (add it to `cors_origins` to allow it)"
    )]
    OriginNotAllowed(String),
    #[error("{0}")]
    NotFound(String),
    #[error("{path} does not take {method}")]
    MethodNotAllowed { method: String, path: String },
    #[error("this route takes `Content-Type: application/json`, got {0:?}")]
    UnsupportedMediaType(String),
    #[error("{0}")]
    Internal(String),
    /// The engine failed this request alone (it is up and serving others).
    #[error("{0}")]
    RequestFailed(String),
    /// The client left while its request was prepared (the work stopped; nobody reads this).
    #[error("the client closed the connection while its request was prepared")]
    ClientGone,
}

impl ApiError {
    pub fn bad(message: impl Into<String>, param: Option<&str>) -> Self {
        Self::BadRequest {
            message: message.into(),
            param: param.map(str::to_owned),
        }
    }

    pub fn status(&self) -> StatusCode {
        match self {
            Self::BadRequest { .. } | Self::ContextLengthExceeded { .. } => StatusCode::BAD_REQUEST,
            Self::PayloadTooLarge { .. } => StatusCode::PAYLOAD_TOO_LARGE,
            Self::QueueFull { .. } | Self::Busy { .. } => StatusCode::TOO_MANY_REQUESTS,
            Self::BodyTimeout { .. } => StatusCode::REQUEST_TIMEOUT,
            Self::EngineStarting { .. } | Self::EngineUnavailable(_) => {
                StatusCode::SERVICE_UNAVAILABLE
            }
            Self::Unauthorized => StatusCode::UNAUTHORIZED,
            Self::HostNotAllowed(_) | Self::Forbidden(_) | Self::OriginNotAllowed(_) => {
                StatusCode::FORBIDDEN
            }
            Self::NotFound(_) => StatusCode::NOT_FOUND,
            Self::MethodNotAllowed { .. } => StatusCode::METHOD_NOT_ALLOWED,
            Self::UnsupportedMediaType(_) => StatusCode::UNSUPPORTED_MEDIA_TYPE,
            Self::Internal(_) | Self::RequestFailed(_) => StatusCode::INTERNAL_SERVER_ERROR,
            // nginx's "client closed request": logged, never read
            Self::ClientGone => StatusCode::from_u16(499).unwrap_or(StatusCode::BAD_REQUEST),
        }
    }

    fn kind(&self) -> (&'static str, Option<&'static str>) {
        match self {
            Self::BadRequest { .. } => ("invalid_request_error", None),
            Self::ContextLengthExceeded { .. } => {
                ("invalid_request_error", Some("context_length_exceeded"))
            }
            Self::PayloadTooLarge { .. } => ("invalid_request_error", Some("payload_too_large")),
            Self::QueueFull { .. } => ("rate_limit_error", Some("queue_full")),
            Self::Busy { .. } => ("rate_limit_error", Some("server_busy")),
            Self::BodyTimeout { .. } => ("invalid_request_error", Some("request_timeout")),
            Self::EngineStarting { .. } => ("server_error", Some("engine_starting")),
            Self::EngineUnavailable(_) => ("server_error", Some("engine_unavailable")),
            Self::Unauthorized => ("authentication_error", Some("invalid_api_key")),
            Self::HostNotAllowed(_) => ("permission_error", Some("host_not_allowed")),
            Self::Forbidden(_) => ("permission_error", Some("admin_forbidden")),
            Self::OriginNotAllowed(_) => ("permission_error", Some("origin_not_allowed")),
            Self::NotFound(_) => ("invalid_request_error", Some("not_found")),
            Self::MethodNotAllowed { .. } => ("invalid_request_error", Some("method_not_allowed")),
            Self::UnsupportedMediaType(_) => {
                ("invalid_request_error", Some("unsupported_media_type"))
            }
            Self::Internal(_) => ("server_error", None),
            Self::RequestFailed(_) => ("server_error", Some("request_failed")),
            Self::ClientGone => ("invalid_request_error", Some("client_closed_request")),
        }
    }

    /// The OpenAI error object (also sent as an event when a stream fails).
    pub fn body(&self) -> serde_json::Value {
        let (kind, code) = self.kind();
        let param = match self {
            Self::BadRequest { param, .. } => param.clone(),
            Self::ContextLengthExceeded { .. } => Some("messages".into()),
            _ => None,
        };
        json!({"error": {"message": self.to_string(), "type": kind, "param": param, "code": code}})
    }

    fn retry_after_secs(&self) -> Option<u32> {
        match self {
            Self::QueueFull { retry_after_secs }
            | Self::EngineStarting { retry_after_secs }
            | Self::Busy {
                retry_after_secs, ..
            } => Some(*retry_after_secs),
            _ => None,
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), axum::Json(self.body())).into_response();
        if let Some(value) = self
            .retry_after_secs()
            .and_then(|secs| HeaderValue::from_str(&secs.to_string()).ok())
        {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        response
    }
}

impl From<Failure> for ApiError {
    fn from(failure: Failure) -> Self {
        match failure {
            Failure::PromptTooLong {
                prompt_tokens,
                max_context_tokens,
            } => Self::ContextLengthExceeded {
                prompt_tokens,
                max_context_tokens,
            },
            failure @ Failure::Request(_) => Self::RequestFailed(failure.to_string()),
            other => Self::EngineUnavailable(other.to_string()),
        }
    }
}

impl From<SubmitError> for ApiError {
    fn from(error: SubmitError) -> Self {
        match error {
            SubmitError::QueueFull { retry_after_secs } => Self::QueueFull { retry_after_secs },
            SubmitError::PromptTooLong {
                prompt_tokens,
                max_context_tokens,
            } => Self::ContextLengthExceeded {
                prompt_tokens,
                max_context_tokens,
            },
            SubmitError::MaxTokensOverContext {
                max_tokens,
                room_tokens,
            } => Self::bad(
                format!(
                    "max_tokens is {max_tokens}, but only {room_tokens} tokens are left in the context"
                ),
                Some("max_tokens"),
            ),
            SubmitError::EmptyPrompt => Self::bad("the prompt is empty", Some("messages")),
            SubmitError::EngineStarting { retry_after_secs } => {
                Self::EngineStarting { retry_after_secs }
            }
            SubmitError::EngineFailed(reason) => Self::EngineUnavailable(reason),
            SubmitError::ShuttingDown => {
                Self::EngineUnavailable("the server is shutting down".into())
            }
        }
    }
}

impl From<ControlError> for ApiError {
    fn from(error: ControlError) -> Self {
        match error {
            ControlError::UnknownRequest(_) => Self::NotFound(error.to_string()),
            ControlError::InvalidSettings(message) => Self::bad(message, None),
            ControlError::ShuttingDown => Self::EngineUnavailable(error.to_string()),
        }
    }
}
