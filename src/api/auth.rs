//! API keys (constant-time comparison) and the Host allow-list against DNS rebinding.

use super::{ApiError, ApiState};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;
use subtle::ConstantTimeEq;

pub fn presented_key(headers: &HeaderMap) -> Option<&str> {
    // the scheme is case-insensitive (RFC 9110 §11.1): `bearer KEY` is a key too
    if let Some(bearer) = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim_start().split_once(' '))
        .and_then(|(scheme, key)| scheme.eq_ignore_ascii_case("bearer").then_some(key))
    {
        return Some(bearer.trim());
    }
    headers
        .get("x-api-key")
        .and_then(|v| v.to_str().ok())
        .map(str::trim)
}

/// The configured key the request presents, with its place in `api_keys`.
pub fn presented_entry<'a>(
    app: &'a crate::config::AppSettings,
    headers: &HeaderMap,
) -> Option<(usize, &'a crate::config::ApiKeyEntry)> {
    let key = presented_key(headers)?;
    app.api_keys
        .iter()
        .enumerate()
        .find(|(_, k)| same_key(k.key(), key))
}

pub fn same_key(expected: &str, presented: &str) -> bool {
    expected.as_bytes().ct_eq(presented.as_bytes()).into()
}

fn host_allowed(state: &ApiState, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(value) = headers.get(header::HOST) else {
        return Ok(()); // HTTP/1.0 clients send none; nothing to rebind
    };
    // a name with bytes outside visible ASCII is no loopback name nor an allowed one
    let Ok(host) = value.to_str() else {
        return Err(ApiError::HostNotAllowed(
            String::from_utf8_lossy(value.as_bytes()).into_owned(),
        ));
    };
    let name = match host.rsplit_once(':') {
        Some((name, port)) if port.chars().all(|c| c.is_ascii_digit()) => name,
        _ => host,
    };
    let name = name.trim_start_matches('[').trim_end_matches(']');
    let bound = state.app.host.to_string();
    let allowed = ["localhost", "127.0.0.1", "::1"].contains(&name)
        || name == bound
        || state
            .app
            .allowed_hosts
            .iter()
            .any(|h| h.eq_ignore_ascii_case(name))
        || (state.app.host.is_unspecified() && !state.app.api_keys.is_empty());
    if allowed {
        Ok(())
    } else {
        Err(ApiError::HostNotAllowed(host.to_owned()))
    }
}

/// Refuses in the error shape of the router that mounts the route (each API's clients read
/// their own, Anthropic's theirs).
pub async fn guard(
    State(super::Guarded { state, shape }): State<super::Guarded>,
    request: Request,
    next: Next,
) -> Response {
    let refuse = |e: ApiError| shape.response(e);
    if let Err(e) = host_allowed(&state, request.headers()) {
        return refuse(e);
    }
    if !state.app.api_keys.is_empty() && request.uri().path() != "/health" {
        let ok = presented_key(request.headers())
            .is_some_and(|key| state.app.api_keys.iter().any(|k| same_key(k.key(), key)));
        if !ok {
            return refuse(ApiError::Unauthorized);
        }
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::presented_key;
    use axum::http::{HeaderMap, HeaderValue, header};

    #[test]
    fn the_bearer_scheme_is_read_in_any_case() {
        for value in ["Bearer k1", "bearer k1", "BEARER  k1 ", " Bearer k1"] {
            let mut headers = HeaderMap::new();
            headers.insert(header::AUTHORIZATION, HeaderValue::from_static(value));
            assert_eq!(presented_key(&headers), Some("k1"), "{value:?}");
        }
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic k1"));
        assert_eq!(presented_key(&headers), None);
    }
}
