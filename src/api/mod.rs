//! The HTTP API (axum): OpenAI Chat Completions and Responses, Anthropic Messages, models,
//! health; an editor's autocomplete (`completions`, llama.cpp's `infill`, both on `fim`); the scheduler's snapshot, its event stream and Prometheus metrics (`observe`);
//! control routes (`admin`). One request function (`frontend::generate`): each API is a
//! `Frontend` that only translates its body into a draft (`chat`, `responses`, `anthropic`,
//! `completions`, `infill`), one step checks it (`validate`), and generation (`generation`)
//! tokenizes, submits and streams it back through the API's writer. Each API's field names
//! are its route's (`dialect`); its error shape is the router's that mounts it; [`ApiError`]
//! maps every error to a status in one place. `serve(listener, state, shutdown)` takes its edges from the caller, so tests
//! bind 127.0.0.1:0.

mod admin;
mod anthropic;
mod auth;
mod body;
mod browser;
mod chat;
mod completions;
mod dialect;
mod error;
mod fim;
mod frontend;
mod generation;
mod grammars;
mod infill;
mod limits;
mod observe;
mod omitted;
mod owners;
mod prompts;
mod responses;
#[cfg(test)]
mod router_tests;
mod serve;
#[cfg(test)]
mod test_json;
mod tools;
mod validate;
mod wire;

pub use admin::{Access, admin_access, admin_allowed};
pub use limits::Limits;
pub use observe::EVENTS_PER_SEC_MAX;
pub use owners::Owners;

use dialect::ErrorShape;
pub use error::ApiError;
use frontend::generate;
pub use prompts::{Prompt, Prompts};

use crate::config::AppSettings;
use crate::control::{Control, Unit};
use crate::service::SchedulerSettings;
use crate::service::{EngineStatus, ServiceHandle};
use axum::extract::{DefaultBodyLimit, State};
use axum::handler::Handler;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{delete, get, patch, post};
use axum::{Json, Router};
use serde_json::json;
use std::future::Future;
use std::sync::Arc;

/// The response header that carries the request's id (as `/v1/scheduler` and
/// `DELETE /v1/requests/{id}` name it).
pub const REQUEST_ID_HEADER: &str = "x-request-id";

/// What every handler shares.
#[derive(Debug, Clone)]
pub struct ApiState {
    /// The control plane: the engine unit serving now (its service and its model's prompts),
    /// the settings in force and how they change.
    pub control: Control,
    /// A request's own unit, fixed when it begins ([`ApiState::pinned`]): its prompt is
    /// tokenized by the model that will serve it, even across an engine swap.
    pinned: Option<Arc<Unit>>,
    /// The HTTP server's settings (keys, hosts, bounds): fixed while it serves.
    pub app: Arc<AppSettings>,
    /// Which API key sent each live request (a key without `admin` may cancel or
    /// re-prioritise only its own).
    pub owners: owners::Owners,
    /// Bounds on request preparation and event-stream clients.
    pub limits: Limits,
}

impl ApiState {
    /// The state for a control plane (the HTTP settings and bounds taken from its config).
    pub fn new(control: Control) -> Self {
        let app = Arc::new(control.config().app);
        Self {
            limits: Limits::new(&app),
            control,
            pinned: None,
            app,
            owners: Default::default(),
        }
    }

    /// The same state with the unit serving now fixed for one request's life.
    pub fn pinned(&self) -> Self {
        Self {
            pinned: Some(self.control.unit()),
            ..self.clone()
        }
    }

    /// The engine unit: this request's, else the one serving now.
    pub fn unit(&self) -> Arc<Unit> {
        self.pinned.clone().unwrap_or_else(|| self.control.unit())
    }

    pub fn service(&self) -> ServiceHandle {
        self.unit().service.clone()
    }

    /// The model's tokenizer, chat template and tool-call format.
    pub fn prompts(&self) -> Arc<Prompts> {
        self.unit().prompts.clone()
    }

    /// The scheduler settings in force (priority range and order).
    pub fn scheduler(&self) -> SchedulerSettings {
        self.unit().config.scheduler.clone()
    }
}

impl ApiState {
    /// The name a response reports: the alias the client used, else the loaded model's.
    fn model_name(&self, asked: Option<&str>) -> String {
        match asked {
            Some(name) if self.app.model_aliases.contains_key(name) => name.to_owned(),
            _ => {
                let loaded = self.service().snapshot().engine.model_id;
                if loaded.is_empty() {
                    asked.unwrap_or("strata-desk").to_owned()
                } else {
                    loaded
                }
            }
        }
    }

    /// The default priority of the API key the request carries.
    fn key_priority(&self, headers: &HeaderMap) -> Option<i64> {
        auth::presented_entry(&self.app, headers)?.1.priority()
    }

    /// `raw` clamped and put in scheduler order, then held under the presented API key's
    /// `max_priority` (in scheduler order, so it caps urgency under `lower_first` too): the
    /// one place a request's priority is resolved, for generation and for `PATCH`.
    fn capped_priority(&self, headers: &HeaderMap, raw: Option<i64>) -> i32 {
        let scheduler = self.scheduler();
        let priority = crate::service::resolve_priority(raw, &scheduler);
        match auth::presented_entry(&self.app, headers).and_then(|(_, k)| k.max_priority()) {
            Some(max) => priority.min(crate::service::resolve_priority(Some(max), &scheduler)),
            None => priority,
        }
    }
}

pub fn router(state: ApiState) -> Router {
    let limit = usize::try_from(state.app.body_limit_mib * 1024 * 1024).unwrap_or(usize::MAX);
    let body_secs = state.app.body_read_timeout_secs;
    let origins: Vec<HeaderValue> = state
        .app
        .cors_origins
        .iter()
        .filter_map(|o| HeaderValue::from_str(o).ok())
        .collect();
    let admin_guard = axum::middleware::from_fn_with_state(state.clone(), admin::guard);
    let admin = Router::new()
        .route("/v1/engine/restart", post(admin::restart_engine))
        .route(
            "/v1/requests/{id}",
            delete(admin::cancel_request).patch(admin::patch_request),
        )
        .route_layer(admin_guard.clone());
    let openai_routes = Router::new()
        .route("/v1/chat/completions", post(generate::<chat::Chat>))
        .route("/v1/responses", post(generate::<responses::Responses>))
        .route(
            "/v1/completions",
            post(generate::<completions::Completions>),
        )
        .route(
            "/v1/fim/completions",
            post(generate::<completions::Completions>),
        )
        .route("/infill", post(generate::<infill::Infill>))
        .route("/", get(root))
        .route("/v1/models", get(models))
        .route("/v1/scheduler", get(observe::scheduler))
        .route("/v1/scheduler/events", get(observe::scheduler_events))
        .route("/metrics", get(observe::metrics))
        .route("/health", get(health))
        // a read, guarded like /v1/scheduler; the change beside it is a control route
        .route(
            "/v1/settings",
            get(observe::settings).merge(patch(admin::patch_settings).layer(admin_guard)),
        );
    let anthropic_routes = Router::new()
        .route("/v1/messages", post(generate::<anthropic::Messages>))
        .route("/v1/messages/count_tokens", post(anthropic::count_tokens));
    // each router answers its guards' refusals in its clients' error shape
    let openai = web(openai_routes, &state, ErrorShape::OpenAi).merge(admin);
    let openai = mounted(openai, &state, ErrorShape::OpenAi);
    let anthropic = web(anthropic_routes, &state, ErrorShape::Anthropic);
    let anthropic = mounted(anthropic, &state, ErrorShape::Anthropic);
    let key_check =
        axum::middleware::from_fn_with_state(Guarded::new(&state, ErrorShape::OpenAi), auth::guard);
    let router = openai
        .merge(anthropic)
        // a path no front end mounts: the app's own shape
        .fallback(not_found.layer(key_check))
        .layer(DefaultBodyLimit::max(limit))
        .layer(axum::middleware::from_fn(move |request, next| {
            limits::body_deadline(body_secs, request, next)
        }))
        .with_state(state);
    // No CORS unless configured: a web page may not read answers from another origin.
    if origins.is_empty() {
        return router;
    }
    router.layer(
        tower_http::cors::CorsLayer::new()
            .allow_origin(origins)
            .allow_methods(tower_http::cors::Any)
            .allow_headers(tower_http::cors::Any),
    )
}

/// The API's public routes under the web-page rule (`browser`), refused in `shape`; only on
/// the routes: an unknown path is a 404 and a wrong method a 405, not a complaint about its
/// Content-Type or Origin.
fn web(routes: Router<ApiState>, state: &ApiState, shape: ErrorShape) -> Router<ApiState> {
    let web_check =
        axum::middleware::from_fn_with_state(Guarded::new(state, shape), browser::guard);
    routes.route_layer(web_check)
}

/// A router's routes mounted answering in `shape` (each front end's clients read their own
/// error shape, Anthropic's theirs): the key and Host check before everything else, on a
/// method a route does not take too (its 405 itself stays OpenAI-shaped, as the app's own
/// answer).
fn mounted(routes: Router<ApiState>, state: &ApiState, shape: ErrorShape) -> Router<ApiState> {
    let key_check = axum::middleware::from_fn_with_state(Guarded::new(state, shape), auth::guard);
    routes
        .route_layer(key_check.clone())
        .method_not_allowed_fallback(method_not_allowed.layer(key_check))
}

/// What a route guard needs: the state, and the error shape of the router that mounts it.
#[derive(Debug, Clone)]
pub(crate) struct Guarded {
    pub(crate) state: ApiState,
    pub(crate) shape: ErrorShape,
}

impl Guarded {
    fn new(state: &ApiState, shape: ErrorShape) -> Self {
        Self {
            state: state.clone(),
            shape,
        }
    }
}

/// Serves until `shutdown` resolves, then stops accepting and lets open responses finish.
/// Each request knows its peer's address (admin routes answer loopback peers).
pub async fn serve(
    listener: tokio::net::TcpListener,
    state: ApiState,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let header_read_timeout =
        std::time::Duration::from_secs(u64::from(state.app.header_read_timeout_secs));
    serve::serve_router(listener, router(state), header_read_timeout, shutdown).await
}

async fn models(State(state): State<ApiState>) -> Json<serde_json::Value> {
    let engine = state.service().snapshot().engine;
    let entry = |id: &str| {
        json!({
            "id": id,
            "object": "model",
            "created": 0,
            "owned_by": "strata-desk",
            "name": engine.model,
            "context_length": engine.context_tokens,
            "simulated": engine.simulated,
        })
    };
    let mut data = vec![entry(&engine.model_id)];
    data.extend(state.app.model_aliases.keys().map(|alias| entry(alias)));
    Json(json!({"object": "list", "data": data}))
}

/// Any path no route serves: 404 in the OpenAI error shape.
async fn not_found(uri: axum::http::Uri) -> ApiError {
    ApiError::NotFound(format!("no route serves {}", uri.path()))
}

/// A route asked with a method it does not take: 405.
async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> ApiError {
    ApiError::MethodNotAllowed {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}

/// `GET /` and `HEAD /` (Claude Code probes it before its first request).
async fn root() -> Json<serde_json::Value> {
    Json(json!({"name": "strata-desk", "version": env!("CARGO_PKG_VERSION")}))
}

async fn health(State(state): State<ApiState>) -> Response {
    let engine = state.service().snapshot().engine;
    let status = match engine.status {
        EngineStatus::Ready => StatusCode::OK,
        _ => StatusCode::SERVICE_UNAVAILABLE,
    };
    // `engine.status` ({state, reason}) is the shape /health had first; `engine.state` and
    // `engine.reason` are the snapshot's.
    let mut body = json!({"engine": engine});
    body["engine"]["status"] = json!(engine.status);
    (status, Json(body)).into_response()
}
