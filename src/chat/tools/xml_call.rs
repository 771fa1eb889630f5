//! The XML call form (Qwen3-Coder and others): `<function=f><parameter=p>v</parameter>
//! </function>`, one arguments member streamed per closed parameter.

use super::{
    Call, FUNCTION_CLOSE, FUNCTION_OPEN, Finished, PARAMETER_CLOSE, PARAMETER_OPEN, Piece,
    valid_name,
};
use serde_json::Value;

/// Streams an XML-form call: starts it at `<function=NAME>`, then one member per closed
/// `<parameter=P>…</parameter>`.
pub(super) fn stream_xml(
    call: &mut Call,
    out: &mut Vec<Piece>,
    start: &mut impl FnMut(String, &mut Vec<Piece>) -> usize,
) {
    let body = call.raw.trim_start();
    let Some(after) = body.strip_prefix(FUNCTION_OPEN) else {
        return;
    };
    let Some(name_end) = after.find('>') else {
        return;
    };
    let name = after[..name_end].trim().to_owned();
    if !valid_name(&name) {
        return;
    }
    let index = match call.index {
        Some(index) => index,
        None => {
            let index = start(name, out);
            call.index = Some(index);
            index
        }
    };
    let params = xml_params(&after[name_end + 1..]);
    for (n, (key, value)) in params.iter().enumerate().skip(call.params_sent) {
        out.push(Piece::CallArguments {
            index,
            delta: xml_member(n, key, value),
        });
        call.params_sent = n + 1;
    }
}

/// The closed `<parameter=…>…</parameter>` pairs of an XML call body, in order.
fn xml_params(mut body: &str) -> Vec<(String, String)> {
    let mut params = Vec::new();
    while let Some(open) = body.find(PARAMETER_OPEN) {
        let after = &body[open + PARAMETER_OPEN.len()..];
        let Some(key_end) = after.find('>') else {
            break;
        };
        let value_start = &after[key_end + 1..];
        let Some(close) = value_start.find(PARAMETER_CLOSE) else {
            break;
        };
        let value = value_start[..close]
            .strip_prefix('\n')
            .unwrap_or(&value_start[..close]);
        let value = value.strip_suffix('\n').unwrap_or(value);
        params.push((after[..key_end].trim().to_owned(), value.to_owned()));
        body = &value_start[close + PARAMETER_CLOSE.len()..];
    }
    params
}

/// A parameter's value as JSON: itself when it is JSON, else a string.
fn xml_value(value: &str) -> String {
    match serde_json::from_str::<Value>(value.trim()) {
        Ok(v) => v.to_string(),
        Err(_) => Value::from(value).to_string(),
    }
}

/// The `n`th member of an XML call's arguments object, with what opens or separates it: the
/// members and a closing brace concatenate to the arguments' JSON text.
fn xml_member(n: usize, key: &str, value: &str) -> String {
    let lead = if n == 0 { "{" } else { "," };
    format!("{lead}{}:{}", Value::from(key), xml_value(value))
}

pub(super) fn finish_xml(raw: &str) -> Option<Finished> {
    let body = raw.trim();
    let after = body.strip_prefix(FUNCTION_OPEN)?;
    let name_end = after.find('>')?;
    let name = after[..name_end].trim().to_owned();
    if !valid_name(&name) || !body.ends_with(FUNCTION_CLOSE) {
        return None;
    }
    let params = xml_params(&after[name_end + 1..]);
    let mut arguments: String = params
        .iter()
        .enumerate()
        .map(|(n, (key, value))| xml_member(n, key, value))
        .collect();
    arguments.push_str(if params.is_empty() { "{}" } else { "}" });
    Some(Finished { name, arguments })
}
