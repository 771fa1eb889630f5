//! What a web page may do. A page the user visits can send requests to a loopback server
//! without a CORS preflight when they look like a form post (`text/plain`, form encodings) and
//! can always attach its `Origin`; agents send no `Origin` and always send JSON. So every route
//! refuses an `Origin` outside `cors_origins` (403 `origin_not_allowed`), and every request
//! with a body must say `Content-Type: application/json` (415), which a page cannot send
//! cross-origin without a preflight that is granted only to `cors_origins`.

use super::ApiError;
use crate::config::AppSettings;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, Method, header};
use axum::middleware::Next;
use axum::response::Response;

/// The request's `Origin` when it is there and not a configured CORS origin.
pub fn foreign_origin<'a>(app: &AppSettings, headers: &'a HeaderMap) -> Option<&'a str> {
    let origin = headers.get(header::ORIGIN)?;
    let origin = origin.to_str().unwrap_or("(not ASCII)");
    (!app.cors_origins.iter().any(|o| o == origin)).then_some(origin)
}

/// `Ok` when the `Content-Type` is `application/json` (any parameters).
pub fn json_content_type(headers: &HeaderMap) -> Result<(), ApiError> {
    let content_type = headers
        .get(header::CONTENT_TYPE)
        .map(|v| v.to_str().unwrap_or("(not ASCII)"))
        .unwrap_or("none");
    let essence = content_type.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        Ok(())
    } else {
        Err(ApiError::UnsupportedMediaType(content_type.to_owned()))
    }
}

/// The rule of the module for the public routes (the control routes have their own, stricter
/// guard in admin.rs).
pub fn web_request_allowed(
    app: &AppSettings,
    method: &Method,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    if let Some(origin) = foreign_origin(app, headers) {
        return Err(ApiError::OriginNotAllowed(origin.to_owned()));
    }
    if [Method::POST, Method::PUT, Method::PATCH].contains(method) {
        json_content_type(headers)?;
    }
    Ok(())
}

/// Refuses in the error shape of the router that mounts the route.
pub async fn guard(
    State(super::Guarded { state, shape }): State<super::Guarded>,
    request: Request,
    next: Next,
) -> Response {
    match web_request_allowed(&state.app, request.method(), request.headers()) {
        Ok(()) => next.run(request).await,
        Err(e) => shape.response(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        pairs
            .iter()
            .map(|(k, v)| {
                (
                    header::HeaderName::from_static(k),
                    HeaderValue::from_static(v),
                )
            })
            .collect()
    }

    #[test]
    fn a_foreign_origin_is_refused_on_any_method_and_a_body_must_be_json() {
        let mut app = AppSettings::default();
        let json = ("content-type", "application/json; charset=utf-8");
        let page = ("origin", "https://evil.example");
        let allowed = |m: Method, h: &[(&'static str, &'static str)], app: &AppSettings| {
            web_request_allowed(app, &m, &headers(h))
        };
        assert_eq!(allowed(Method::POST, &[json], &app), Ok(()));
        assert_eq!(allowed(Method::GET, &[], &app), Ok(()));
        assert!(matches!(
            allowed(Method::GET, &[page], &app),
            Err(ApiError::OriginNotAllowed(o)) if o == "https://evil.example"
        ));
        assert!(matches!(
            allowed(Method::POST, &[json, page], &app),
            Err(ApiError::OriginNotAllowed(_))
        ));
        for body_type in [
            "text/plain",
            "application/x-www-form-urlencoded",
            "multipart/form-data",
        ] {
            assert!(matches!(
                web_request_allowed(&app, &Method::POST, &headers(&[("content-type", body_type)])),
                Err(ApiError::UnsupportedMediaType(t)) if t == body_type
            ));
        }
        assert!(matches!(
            allowed(Method::POST, &[], &app),
            Err(ApiError::UnsupportedMediaType(t)) if t == "none"
        ));
        app.cors_origins = vec!["https://evil.example".into()];
        assert_eq!(allowed(Method::POST, &[json, page], &app), Ok(()));
    }
}
