//! Control routes: `POST /v1/engine/restart`, `PATCH /v1/settings`, `DELETE` and `PATCH
//! /v1/requests/{id}`.
//!
//! They change what other clients get, so [`guard`] lets a request through only when it comes
//! from a loopback address or carries a valid API key, says `Content-Type: application/json`
//! (a web page cannot send that cross-origin without a CORS preflight, which these routes
//! never grant), and carries no `Origin` other than a configured CORS origin: a page the user
//! happens to visit must not be able to restart the engine.

use super::body::{body_bytes, parse_body};
use super::{ApiError, ApiState, auth, browser};
use crate::config::{AppSettings, ConfigError, SettingsPatch};
use crate::control::ApplyError;
use crate::ids::RequestId;
use crate::service::GiveWay;
use crate::service::SettingsChange;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{ConnectInfo, Path, Request, State};
use axum::http::HeaderMap;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::{Extension, Json};
use serde::Deserialize;
use serde_json::{Value, json};
use std::net::SocketAddr;

/// Whether an admin request may go on: see the module's account.
/// What a caller of the control routes may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Everything: a loopback caller when no keys are configured, or an admin key.
    Admin,
    /// Cancel or re-prioritise only the requests this key (its index in `api_keys`) sent.
    OwnRequests(usize),
}

/// Whether an admin request may go on with every control route: see the module's account.
pub fn admin_allowed(
    app: &AppSettings,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    match admin_access(app, peer, headers)? {
        Access::Admin => Ok(()),
        Access::OwnRequests(_) => Err(not_admin()),
    }
}

fn not_admin() -> ApiError {
    ApiError::Forbidden(
        "this API key is not an admin key (`admin: false`): it may cancel or re-prioritise \
         only its own requests"
            .into(),
    )
}

/// Who is calling a control route, and so what it may do (see the module's account).
pub fn admin_access(
    app: &AppSettings,
    peer: Option<SocketAddr>,
    headers: &HeaderMap,
) -> Result<Access, ApiError> {
    if let Some(origin) = browser::foreign_origin(app, headers) {
        return Err(ApiError::Forbidden(format!(
            "admin routes refuse requests from the web origin {origin:?} (add it to \
             `cors_origins` to allow it)"
        )));
    }
    // every method, DELETE included: a stricter rule than the public routes'
    browser::json_content_type(headers)?;
    // Behind a local reverse proxy every client looks local: a forwarded request needs a key.
    let forwarded = headers.contains_key("forwarded") || headers.contains_key("x-forwarded-for");
    let loopback = !forwarded && peer.is_some_and(|p| p.ip().to_canonical().is_loopback());
    // a key says who calls (from loopback too): its `admin` decides
    if let Some((index, entry)) = auth::presented_entry(app, headers) {
        return Ok(if entry.admin() {
            Access::Admin
        } else {
            Access::OwnRequests(index)
        });
    }
    if loopback {
        Ok(Access::Admin)
    } else {
        Err(ApiError::Forbidden(
            "admin routes answer only on a loopback address or with an API key".into(),
        ))
    }
}

pub async fn guard(State(state): State<ApiState>, request: Request, next: Next) -> Response {
    let peer = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0);
    match admin_access(&state.app, peer, request.headers()) {
        Ok(Access::OwnRequests(_)) if !request.uri().path().starts_with("/v1/requests/") => {
            not_admin().into_response()
        }
        Ok(access) => {
            let mut request = request;
            request.extensions_mut().insert(access);
            next.run(request).await
        }
        Err(e) => e.into_response(),
    }
}

/// A key that is not an admin key acts only on the requests it sent (while they live).
fn may_act_on(state: &ApiState, access: Access, id: RequestId) -> Result<(), ApiError> {
    match access {
        Access::Admin => Ok(()),
        Access::OwnRequests(key) if state.owners.of(id) == Some(key) => Ok(()),
        Access::OwnRequests(_) => Err(ApiError::Forbidden(format!(
            "request {id} was not sent with this API key, which is not an admin key: it may \
             cancel or re-prioritise only its own requests"
        ))),
    }
}

/// `{id}` as the scheduler counts it (`7`) or as a response names it (`chatcmpl-7`, `resp_7`,
/// `msg_7`).
fn request_id(raw: &str) -> Result<RequestId, ApiError> {
    // digits, bare or after the prefix of the id a response carries; `-1` is no id (it once
    // read as 1)
    let digits = ["chatcmpl-", "resp_", "msg_"]
        .iter()
        .find_map(|prefix| raw.strip_prefix(prefix))
        .unwrap_or(raw);
    let parsed = (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
        .then(|| digits.parse().ok())
        .flatten();
    parsed.map(RequestId).ok_or_else(|| {
        ApiError::bad(
            format!("`id` must be a request id such as 7 or chatcmpl-7, got {raw:?}"),
            Some("id"),
        )
    })
}

pub async fn restart_engine(State(state): State<ApiState>) -> Result<Json<Value>, ApiError> {
    let report = state.control.restart_engine().await?;
    Ok(Json(json!({
        "restarting": true,
        "failed_requests": report.failed_requests,
        "waiting_requests": report.waiting_requests,
        "note": report.note,
    })))
}

/// The live switches (R12) as a body names them; the other keys of a `PATCH /v1/settings`
/// body are sorted out before this is read.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct SettingsPatchDto {
    solo_priority: Option<bool>,
    #[serde(default, deserialize_with = "give_way_by_name")]
    give_way: Option<GiveWay>,
}

/// `give_way` by its name; anything else (`true`, 2, a list) is refused with the names it
/// takes (serde's own message for an enum given a boolean names neither field nor values).
fn give_way_by_name<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<GiveWay>, D::Error> {
    use serde::de::Error;
    const NAMES: &str = "\"left\", \"whole\" or \"off\"";
    match Option::<Value>::deserialize(d)? {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(name)) => serde_json::from_value(Value::String(name.clone()))
            .map(Some)
            .map_err(|_| D::Error::custom(format!("takes {NAMES}, got {name:?}"))),
        Some(other) => Err(D::Error::custom(format!("takes {NAMES}, got {other}"))),
    }
}

/// `PATCH /v1/settings`: any config key, each taking effect as its schema entry says, through
/// the control plane (saved to the config file, as from the window and the tray). The live
/// switches change at once (logged as made by the caller's key or address); the keys of a new
/// engine start one in place of this one (with rollback: if it fails, the previous settings
/// run again and the answer says why); keys that apply only when the app starts again (`host`,
/// `port`, `engine`, `api_keys`, ...) are saved and named in `applies_at_restart`. The whole
/// body is validated over the settings in force before anything changes.
pub async fn patch_settings(
    State(state): State<ApiState>,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let body = body_bytes(&state, body)?;
    let patch: SettingsPatch = parse_body(&body)?;
    let parts = SortedPatch::of(patch)?;
    let dto: SettingsPatchDto =
        parse_body(&serde_json::to_vec(&parts.switches).unwrap_or_default())?;
    let by = match auth::presented_entry(&state.app, &headers) {
        Some((index, key)) => format!("HTTP ({})", key.display_name(index)),
        None => "HTTP (loopback)".to_owned(),
    };
    let mut all = parts.switches.clone();
    all.extend(parts.engine.clone());
    all.extend(parts.saved.clone());
    let next = state.control.config().patched(&all).map_err(config_error)?;
    next.validate().map_err(config_error)?;

    let mut not_saved = Vec::new();
    let change = SettingsChange {
        solo_priority: dto.solo_priority,
        give_way: dto.give_way,
    };
    let mut settings = state.control.config().scheduler;
    if change != SettingsChange::default() {
        let changed = state.control.change_live(change, &by).await?;
        not_saved.extend(changed.not_saved);
        settings = changed.settings;
    }
    if !parts.engine.is_empty() {
        let applied = state
            .control
            .apply(&parts.engine)
            .await
            .map_err(apply_error)?;
        not_saved.extend(applied.not_saved);
        settings = state.control.config().scheduler;
    }
    if !parts.saved.is_empty() {
        not_saved.extend(
            state
                .control
                .save_for_restart(&parts.saved)
                .map_err(config_error)?,
        );
    }
    Ok(Json(json!({
        "settings": settings,
        "saved": not_saved.is_empty(),
        "not_saved": not_saved.first(),
        "applied": parts.engine.keys().collect::<Vec<_>>(),
        "applies_at_restart": parts.at_restart,
    })))
}

/// A `PATCH /v1/settings` body sorted by when each key takes effect.
struct SortedPatch {
    /// The service's live switches (`solo_priority`, `give_way`).
    switches: SettingsPatch,
    /// Keys that need a new engine.
    engine: SettingsPatch,
    /// Keys only saved: those that apply when the app starts again, and live preferences
    /// the service does not hold (`recent_models`).
    saved: SettingsPatch,
    /// The names of the keys that apply at the app's restart.
    at_restart: Vec<String>,
}

impl SortedPatch {
    fn of(patch: SettingsPatch) -> Result<Self, ApiError> {
        use crate::config::schema::{Applies, find};
        let switches_known = crate::config::flat(&SettingsChange {
            solo_priority: Some(false),
            give_way: Some(GiveWay::Left),
        });
        let mut sorted = Self {
            switches: SettingsPatch::new(),
            engine: SettingsPatch::new(),
            saved: SettingsPatch::new(),
            at_restart: Vec::new(),
        };
        for (key, value) in patch {
            match find(&key).map(|k| k.applies) {
                Some(Applies::Live) if switches_known.contains_key(&key) => {
                    sorted.switches.insert(key, value);
                }
                Some(Applies::Live) => {
                    sorted.saved.insert(key, value);
                }
                Some(Applies::NewEngine) => {
                    sorted.engine.insert(key, value);
                }
                Some(Applies::Restart) => {
                    sorted.at_restart.push(key.clone());
                    sorted.saved.insert(key, value);
                }
                None => {
                    return Err(ApiError::bad(
                        format!(
                            "unknown key `{key}`: `GET /v1/settings` lists the keys and when \
                             each takes effect"
                        ),
                        Some(&key),
                    ));
                }
            }
        }
        Ok(sorted)
    }
}

/// A setting refused: a 400 naming its key where the error does.
fn config_error(error: ConfigError) -> ApiError {
    let param = match &error {
        ConfigError::OutOfBounds { key, .. } | ConfigError::OutOfRange { key, .. } => {
            Some((*key).to_owned())
        }
        ConfigError::UnknownSetting { key } => Some(key.clone()),
        ConfigError::UnknownCpuCode { .. } => Some("cpu_code".to_owned()),
        _ => None,
    };
    ApiError::BadRequest {
        message: error.to_string(),
        param,
    }
}

/// An apply that did not take: refused settings are a 400 (nothing was stopped); a new engine
/// that failed is a 503 saying the previous settings run again.
fn apply_error(error: ApplyError) -> ApiError {
    match error {
        ApplyError::Invalid(error) => config_error(error),
        ApplyError::NotStarted(_) => ApiError::bad(error.to_string(), None),
        ApplyError::EngineFailed { .. } | ApplyError::Unavailable(_) => {
            ApiError::EngineUnavailable(error.to_string())
        }
    }
}

pub async fn cancel_request(
    State(state): State<ApiState>,
    Extension(access): Extension<Access>,
    Path(raw): Path<String>,
) -> Result<Json<Value>, ApiError> {
    let id = request_id(&raw)?;
    may_act_on(&state, access, id)?;
    let was = state.service().cancel_request(id).await?;
    Ok(Json(json!({"id": id, "cancelled": true, "state": was})))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RequestPatchDto {
    priority: i64,
}

pub async fn patch_request(
    State(state): State<ApiState>,
    Extension(access): Extension<Access>,
    headers: HeaderMap,
    Path(raw): Path<String>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Json<Value>, ApiError> {
    let id = request_id(&raw)?;
    may_act_on(&state, access, id)?;
    let body = body_bytes(&state, body)?;
    let dto: RequestPatchDto = parse_body(&body)?;
    // the key's cap holds here too: a key cannot raise its request past what it may ask
    let priority = state.capped_priority(&headers, Some(dto.priority));
    let state_now = state.service().set_priority(id, priority).await?;
    Ok(Json(
        json!({"id": id, "priority": priority, "state": state_now}),
    ))
}

#[cfg(test)]
mod tests {
    /// The schema's live keys are the service's switches and the window's recent models
    /// (those `PATCH /v1/settings` saves without a new engine).
    #[test]
    fn the_live_keys_of_the_schema_are_the_service_s_switches_and_the_recent_models() {
        use crate::config::schema::{Applies, keys};
        let mut live: Vec<&str> = keys()
            .iter()
            .filter(|k| k.applies == Applies::Live)
            .map(|k| k.name)
            .collect();
        live.sort_unstable();
        let switches = crate::config::flat(&super::SettingsChange {
            solo_priority: Some(false),
            give_way: Some(super::GiveWay::Left),
        });
        let mut expected: Vec<&str> = switches.keys().map(String::as_str).collect();
        expected.push("recent_models");
        expected.sort_unstable();
        assert_eq!(live, expected);
    }

    use super::{Access, admin_access, admin_allowed, request_id};
    use crate::api::ApiError;
    use crate::config::{ApiKeyEntry, AppSettings};
    use crate::ids::RequestId;
    use axum::http::{HeaderMap, HeaderValue, header};

    fn headers(pairs: &[(header::HeaderName, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| (k.clone(), HeaderValue::from_static(v)))
            .collect()
    }

    #[test]
    fn a_key_s_admin_field_decides_its_access_and_an_old_entry_is_an_admin() {
        let json = (header::CONTENT_TYPE, "application/json");
        let local = Some("127.0.0.1:5000".parse().unwrap());
        let mut app = AppSettings::default();
        assert_eq!(
            admin_access(&app, local, &headers(std::slice::from_ref(&json))),
            Ok(Access::Admin)
        );
        app.api_keys = serde_json::from_str(
            r#"["plain", {"key": "old", "priority": 3},
                {"key": "agent", "name": "codex", "max_priority": 5, "admin": false}]"#,
        )
        .unwrap();
        let with = |key: &'static str| headers(&[json.clone(), (header::AUTHORIZATION, key)]);
        assert_eq!(
            admin_access(&app, local, &with("Bearer plain")),
            Ok(Access::Admin)
        );
        assert_eq!(
            admin_access(&app, local, &with("Bearer old")),
            Ok(Access::Admin)
        );
        // from loopback too: the key says who calls
        assert_eq!(
            admin_access(&app, local, &with("Bearer agent")),
            Ok(Access::OwnRequests(2))
        );
        assert!(matches!(
            admin_allowed(&app, local, &with("Bearer agent")),
            Err(ApiError::Forbidden(_))
        ));
        assert_eq!(app.api_keys[2].display_name(2), "codex");
        assert_eq!(app.api_keys[0].display_name(0), "key 1");
        assert_eq!(app.api_keys[2].max_priority(), Some(5));
        // a misspelt field is refused, never read as an admin key
        let typo = serde_json::from_str::<Vec<ApiKeyEntry>>(r#"[{"key": "x", "Admin": false}]"#);
        assert!(typo.is_err(), "{typo:?}");
    }

    #[test]
    fn admin_routes_need_loopback_or_a_key_json_and_no_foreign_origin() {
        let json = (header::CONTENT_TYPE, "application/json; charset=utf-8");
        let local = Some("127.0.0.1:5000".parse().unwrap());
        let remote = Some("192.168.1.20:5000".parse().unwrap());
        let mut app = AppSettings::default();
        assert_eq!(
            admin_allowed(&app, local, &headers(std::slice::from_ref(&json))),
            Ok(())
        );
        let forbidden = |r: Result<(), ApiError>| matches!(r, Err(ApiError::Forbidden(_)));
        assert!(forbidden(admin_allowed(
            &app,
            remote,
            &headers(std::slice::from_ref(&json))
        )));
        assert!(forbidden(admin_allowed(
            &app,
            None,
            &headers(std::slice::from_ref(&json))
        )));
        assert!(matches!(
            admin_allowed(&app, local, &headers(&[])),
            Err(ApiError::UnsupportedMediaType(_))
        ));
        assert!(matches!(
            admin_allowed(
                &app,
                local,
                &headers(&[(header::CONTENT_TYPE, "text/plain")])
            ),
            Err(ApiError::UnsupportedMediaType(_))
        ));
        let page = (header::ORIGIN, "https://evil.example");
        assert!(forbidden(admin_allowed(
            &app,
            local,
            &headers(&[json.clone(), page.clone()])
        )));
        app.cors_origins = vec!["https://evil.example".into()];
        assert_eq!(
            admin_allowed(&app, local, &headers(&[json.clone(), page])),
            Ok(())
        );
        app.api_keys = vec![ApiKeyEntry::Plain("k1".into())];
        let keyed = headers(&[json.clone(), (header::AUTHORIZATION, "Bearer k1")]);
        assert_eq!(admin_allowed(&app, remote, &keyed), Ok(()));
        let wrong = headers(&[json.clone(), (header::AUTHORIZATION, "Bearer k2")]);
        assert!(forbidden(admin_allowed(&app, remote, &wrong)));
        // A dual-stack bind shows local IPv4 peers as mapped addresses.
        let mapped = Some("[::ffff:127.0.0.1]:5000".parse().unwrap());
        let plain = headers(std::slice::from_ref(&json));
        assert_eq!(admin_allowed(&app, mapped, &plain), Ok(()));
        // A request a local proxy forwarded is not local.
        let proxied = headers(&[
            json,
            (
                header::HeaderName::from_static("x-forwarded-for"),
                "203.0.113.9",
            ),
        ]);
        assert!(forbidden(admin_allowed(&app, local, &proxied)));
    }

    #[test]
    fn a_request_id_is_taken_bare_or_as_a_response_names_it() {
        assert_eq!(request_id("7").unwrap(), RequestId(7));
        assert_eq!(request_id("chatcmpl-12").unwrap(), RequestId(12));
        assert_eq!(request_id("resp_3").unwrap(), RequestId(3));
        assert_eq!(request_id("msg_4").unwrap(), RequestId(4));
        for bad in ["chatcmpl-", "abc", "-1", "+1", "x-1", "1-", ""] {
            assert!(request_id(bad).is_err(), "{bad:?}");
        }
    }
}
