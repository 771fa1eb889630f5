//! What every route does with a request before its own parsing: read the body (a 413 that says
//! the limit), parse JSON into its DTO (malformed JSON and wrong types name the field), and the
//! request's priority from the body or the `x-priority` header (a value that is not an integer
//! is a 400 that names where it came from, SCHEDULING.md).

use super::{ApiError, ApiState};
use crate::config::AppSettings;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::http::HeaderMap;
use serde_json::Value;

/// The body as read by axum: a body over the limit is a 413 that says the limit.
pub fn body_bytes(
    state: &ApiState,
    body: Result<Bytes, BytesRejection>,
) -> Result<Bytes, ApiError> {
    body.map_err(|e| match e.status() {
        axum::http::StatusCode::PAYLOAD_TOO_LARGE => ApiError::PayloadTooLarge {
            limit_mib: state.app.body_limit_mib,
        },
        _ if super::limits::timed_out(&e) => ApiError::BodyTimeout {
            secs: state.app.body_read_timeout_secs,
        },
        _ => ApiError::bad(e.body_text(), None),
    })
}

/// Parses the body: malformed JSON and wrong types name the field.
pub fn parse_body<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        let valid_json = (inner.is_syntax() || inner.is_eof())
            && serde_json::from_slice::<serde::de::IgnoredAny>(body).is_ok();
        if (inner.is_syntax() || inner.is_eof()) && !valid_json {
            ApiError::bad(format!("the body is not valid JSON: {inner}"), None)
        } else if valid_json {
            // serde_json reports a value of the wrong kind for an enum (`true` where a name is
            // expected) as a syntax error at its position; the body is valid JSON, so it is the
            // field's type that is wrong: name the field
            ApiError::bad(
                format!("`{path}` has a value of the wrong type (JSON parser: {inner})"),
                Some(&path),
            )
        } else if path == "." {
            ApiError::bad(format!("the body is not a valid request: {inner}"), None)
        } else {
            ApiError::bad(format!("`{path}`: {inner}"), Some(&path))
        }
    })?;
    // one JSON value and nothing after it but whitespace
    de.end()
        .map_err(|e| ApiError::bad(format!("the body is not valid JSON: {e}"), None))?;
    Ok(value)
}

/// Stop strings within `max_stop_strings` and `max_stop_string_bytes` (each is matched
/// against every token's text, so their size is work per token); `field` names them.
pub fn check_stops(field: &str, stops: &[String], app: &AppSettings) -> Result<(), ApiError> {
    if stops.len() > app.max_stop_strings as usize {
        return Err(bad(
            format!(
                "`{field}` takes at most {} strings (`max_stop_strings`), got {}",
                app.max_stop_strings,
                stops.len()
            ),
            field,
        ));
    }
    if let Some((i, long)) = stops
        .iter()
        .enumerate()
        .find(|(_, s)| s.len() > app.max_stop_string_bytes as usize)
    {
        return Err(bad(
            format!(
                "`{field}[{i}]` is {} bytes; a stop string may be at most {} (`max_stop_string_bytes`)",
                long.len(),
                app.max_stop_string_bytes
            ),
            &format!("{field}[{i}]"),
        ));
    }
    Ok(())
}

/// A 400 about one field.
pub fn bad(message: impl Into<String>, param: &str) -> ApiError {
    ApiError::bad(message, Some(param))
}

/// The body's `priority`: absent or null is none; an integer is taken; anything else (a
/// string such as "high", 1.5, true) is a 400 naming the field.
pub fn body_priority(value: Option<&Value>) -> Result<Option<i64>, ApiError> {
    match value {
        None | Some(Value::Null) => Ok(None),
        Some(v) => v.as_i64().map(Some).ok_or_else(|| {
            bad(
                format!("`priority` must be an integer, got {v}"),
                "priority",
            )
        }),
    }
}

/// The `x-priority` header: absent is none; an integer (spaces around it allowed) is taken;
/// anything else is a 400 naming the header.
pub fn header_priority(headers: &HeaderMap) -> Result<Option<i64>, ApiError> {
    let Some(value) = headers.get("x-priority") else {
        return Ok(None);
    };
    let text = String::from_utf8_lossy(value.as_bytes());
    text.trim().parse().map(Some).map_err(|_| {
        bad(
            format!("the `x-priority` header must be an integer, got {text:?}"),
            "x-priority",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_body_priority_that_is_not_an_integer_is_a_400_naming_the_field() {
        assert_eq!(body_priority(None).unwrap(), None);
        assert_eq!(body_priority(Some(&Value::Null)).unwrap(), None);
        assert_eq!(body_priority(Some(&json!(-7))).unwrap(), Some(-7));
        for v in [
            json!("high"),
            json!(1.5),
            json!(true),
            json!([1]),
            json!("3"),
        ] {
            let err = body_priority(Some(&v)).unwrap_err();
            assert!(
                matches!(&err, ApiError::BadRequest { param: Some(p), message } if p == "priority" && message.contains(&v.to_string())),
                "{v}: {err:?}"
            );
        }
    }

    #[test]
    fn a_value_of_the_wrong_kind_for_an_enum_names_its_field_and_not_the_json() {
        #[derive(Debug, serde::Deserialize)]
        #[allow(dead_code)]
        struct Dto {
            give_way: Option<crate::service::GiveWay>,
        }
        let err = parse_body::<Dto>(br#"{"give_way": true}"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::BadRequest { param: Some(p), message } if p == "give_way" && !message.contains("not valid JSON")),
            "{err:?}"
        );
        let err = parse_body::<Dto>(br#"{"give_way": tru"#).unwrap_err();
        assert!(
            matches!(&err, ApiError::BadRequest { param: None, message } if message.contains("not valid JSON")),
            "{err:?}"
        );
    }

    #[test]
    fn bytes_after_the_json_body_are_a_400_and_whitespace_is_not() {
        let ok: Value = parse_body(b"{\"a\": 1}\n  ").unwrap();
        assert_eq!(ok, json!({"a": 1}));
        for trailing in [&b"{\"a\": 1}x"[..], b"{\"a\": 1}{\"b\": 2}", b"{} []"] {
            let err = parse_body::<Value>(trailing).unwrap_err();
            assert!(
                matches!(&err, ApiError::BadRequest { message, .. } if message.contains("trailing")),
                "{err:?}"
            );
        }
    }

    #[test]
    fn an_x_priority_header_that_is_not_an_integer_is_a_400_naming_the_header() {
        let mut headers = HeaderMap::new();
        assert_eq!(header_priority(&headers).unwrap(), None);
        headers.insert("x-priority", " 4 ".parse().unwrap());
        assert_eq!(header_priority(&headers).unwrap(), Some(4));
        for v in ["high", "1.5", "", "9999999999999999999999"] {
            headers.insert("x-priority", v.parse().unwrap());
            let err = header_priority(&headers).unwrap_err();
            assert!(
                matches!(&err, ApiError::BadRequest { param: Some(p), .. } if p == "x-priority"),
                "{v}: {err:?}"
            );
        }
    }
}
