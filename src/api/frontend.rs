//! One request function for every generation route (mistral.rs's one `add_request` with the
//! API kind as data, TGI's one `generate_stream`). Each API is a [`Frontend`]: its body's DTO,
//! its translation into a [`Draft`], its prompt when it is not the chat template's, and its
//! wire writer; [`generate`] does the rest once: read the body, parse it, translate, validate,
//! tokenize, submit, and answer streamed or whole, every error in the API's shape.

use super::body::{body_bytes, parse_body};
use super::dialect::RouteApi;
use super::generation::{self, Generation, Prepared, Started};
use super::validate::{Draft, validate};
use super::wire::{self, WireWriter};
use super::{ApiError, ApiState};
use crate::service::Route;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use axum::response::Response;
use serde::de::DeserializeOwned;

/// A body translated by its front end: the draft for the one validation step, whether to
/// stream, and what else the prompt or the answer needs from it.
pub struct Translated<E> {
    pub draft: Draft,
    pub stream: bool,
    pub extra: E,
}

/// An API served on a generation route.
pub trait Frontend: 'static {
    /// The route it comes in on: its field names, error shape and ids.
    const ROUTE: Route;
    /// Its tool calls' ids begin with this.
    const CALL_ID_PREFIX: &'static str = "call_";
    /// The body as parsed (malformed JSON and wrong types name the field).
    type Dto: DeserializeOwned;
    /// What the body holds besides the draft that the prompt or the answer needs.
    type Extra: Send + 'static;
    /// Its wire format.
    type Writer: WireWriter;

    /// The model the body names (a response reports an alias it used).
    fn model(dto: &Self::Dto) -> Option<&str>;

    /// The body in the shared terms, checked where only this API has the field.
    fn translate(dto: Self::Dto) -> Result<Translated<Self::Extra>, ApiError>;

    /// The validated generation with its prompt as tokens: the chat template's unless the
    /// API writes its own (an autocomplete). CPU work, on a preparation place.
    fn prompt(
        state: &ApiState,
        generation: Generation,
        _model: &str,
        _extra: &Self::Extra,
    ) -> Result<Prepared, ApiError> {
        generation::tokenize(state, generation)
    }

    /// The writer for a submitted request's answer.
    fn writer(started: &Started, model: String, extra: Self::Extra) -> Self::Writer;
}

/// Every generation route's handler: the answer, or the error in the API's shape.
pub async fn generate<F: Frontend>(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    // one engine unit for the whole request: tokenized by the model that serves it
    let state = state.pinned();
    answer::<F>(state, headers, body)
        .await
        .unwrap_or_else(|e| F::ROUTE.error_shape().response(e))
}

async fn answer<F: Frontend>(
    state: ApiState,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = body_bytes(&state, body)?;
    let prep = state.clone();
    let (prepared, model, stream, extra) = state
        .limits
        .prepare(move || {
            let dto: F::Dto = parse_body(&body)?;
            let model = prep.model_name(F::model(&dto));
            let Translated {
                draft,
                stream,
                extra,
            } = F::translate(dto)?;
            let generation = validate(draft, &prep)?;
            let prepared = F::prompt(&prep, generation, &model, &extra)?;
            Ok((prepared, model, stream, extra))
        })
        .await?;
    let started =
        generation::submit(&state, &headers, prepared, F::ROUTE, F::CALL_ID_PREFIX).await?;
    let writer = F::writer(&started, model, extra);
    wire::respond(started, writer, stream).await
}
