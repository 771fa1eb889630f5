//! The Hermes / Qwen call form, `{"name": "f", "arguments": {...}}` inside `<tool_call>`:
//! scanned incrementally so the arguments stream as they arrive, and checked whole at the end.

use super::{Call, Finished, Piece};
use serde_json::Value;

/// What a partial `{"name": ..., "arguments": ...}` shows so far.
#[derive(Debug, Default)]
struct JsonScan {
    name: Option<String>,
    /// Byte range of the arguments value in the raw text; `end` once it closed.
    args_start: Option<usize>,
    args_end: Option<usize>,
}

/// Streams a Hermes call: starts it once the name is known and the arguments object opened,
/// then sends the arguments text as it arrives.
pub(super) fn stream_json(
    call: &mut Call,
    out: &mut Vec<Piece>,
    start: &mut impl FnMut(String, &mut Vec<Piece>) -> usize,
) {
    let scan = scan_json(&call.raw);
    let (Some(name), Some(found_at)) = (scan.name, scan.args_start) else {
        return;
    };
    if !valid_name(&name) {
        return;
    }
    // A later duplicate `arguments` key does not move what is being streamed.
    let args_start = *call.args_at.get_or_insert(found_at);
    if args_start != found_at || !call.raw[args_start..].starts_with('{') {
        return; // a string-encoded object or a moved key: sent whole at the end
    }
    let index = match call.index {
        Some(index) => index,
        None => {
            let index = start(name, out);
            call.index = Some(index);
            index
        }
    };
    let end = scan.args_end.unwrap_or(call.raw.len());
    let from = args_start + call.args_sent;
    if end > from {
        out.push(Piece::CallArguments {
            index,
            delta: call.raw[from..end].to_owned(),
        });
        call.args_sent = end - args_start;
    }
}

/// A function name: 1 to 64 letters, digits, `_` or `-` (OpenAI's rule). A call with any
/// other name is not a call: its text is content, and it never reaches a client's history
/// (where a replay would be refused), nor a template (which renders names as markup).
pub fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

/// Scans the top level of a JSON object for `name` (or `tool_name`) and `arguments` (or
/// `parameters`).
fn scan_json(raw: &str) -> JsonScan {
    let bytes = raw.as_bytes();
    let mut scan = JsonScan::default();
    let mut i = skip_ws(bytes, 0);
    if bytes.get(i) != Some(&b'{') {
        return scan;
    }
    i += 1;
    loop {
        i = skip_ws(bytes, i);
        if bytes.get(i) == Some(&b',') {
            i = skip_ws(bytes, i + 1);
        }
        let Some(key_end) = string_end(bytes, i) else {
            return scan;
        };
        let key: Option<String> = serde_json::from_str(&raw[i..key_end]).ok();
        i = skip_ws(bytes, key_end);
        if bytes.get(i) != Some(&b':') {
            return scan;
        }
        i = skip_ws(bytes, i + 1);
        if i >= bytes.len() {
            return scan;
        }
        let value_end = value_end(bytes, i);
        match key.as_deref() {
            // Cohere's calls name the tool `tool_name`
            Some("name" | "tool_name") => {
                if let Some(end) = value_end {
                    scan.name = serde_json::from_str(&raw[i..end]).ok();
                }
            }
            // The first arguments key counts (a later duplicate never moves it).
            Some("arguments" | "parameters") if scan.args_start.is_none() => {
                scan.args_start = Some(i);
                scan.args_end = value_end;
            }
            _ => {}
        }
        match value_end {
            Some(end) => i = end,
            None => return scan,
        }
    }
}

fn skip_ws(bytes: &[u8], mut i: usize) -> usize {
    while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
        i += 1;
    }
    i
}

/// The end (exclusive) of the JSON string starting at `i`, if it is complete.
fn string_end(bytes: &[u8], i: usize) -> Option<usize> {
    if bytes.get(i) != Some(&b'"') {
        return None;
    }
    let mut j = i + 1;
    while j < bytes.len() {
        match bytes[j] {
            b'\\' => j += 2,
            b'"' => return Some(j + 1),
            _ => j += 1,
        }
    }
    None
}

/// The end (exclusive) of the JSON value starting at `i`, if it is complete.
fn value_end(bytes: &[u8], i: usize) -> Option<usize> {
    match bytes.get(i)? {
        b'"' => string_end(bytes, i),
        b'{' | b'[' => {
            let mut depth = 0usize;
            let mut j = i;
            while j < bytes.len() {
                match bytes[j] {
                    b'"' => {
                        j = string_end(bytes, j)?;
                        continue;
                    }
                    b'{' | b'[' => depth += 1,
                    b'}' | b']' => {
                        depth -= 1;
                        if depth == 0 {
                            return Some(j + 1);
                        }
                    }
                    _ => {}
                }
                j += 1;
            }
            None
        }
        _ => {
            // A number, true, false or null: ends at a delimiter.
            let mut j = i;
            while j < bytes.len() && !matches!(bytes[j], b',' | b'}' | b']') {
                j += 1;
            }
            (j < bytes.len()).then_some(j)
        }
    }
}

/// A closed Hermes block: valid only as an object with a string `name` and an object
/// `arguments` (or a string that holds one).
pub(super) fn finish_json(raw: &str) -> Option<Finished> {
    let value: Value = serde_json::from_str(raw.trim()).ok()?;
    let name = value
        .get("name")
        .or_else(|| value.get("tool_name"))?
        .as_str()?
        .to_owned();
    if !valid_name(&name) {
        return None;
    }
    // The first arguments value, as the model wrote it (what was streamed).
    let scan = scan_json(raw);
    let arguments = match (scan.args_start, scan.args_end) {
        (None, _) => "{}".to_owned(),
        (Some(s), Some(e)) => match serde_json::from_str::<Value>(raw.get(s..e)?).ok()? {
            Value::Object(_) => raw[s..e].to_owned(),
            Value::String(inner) => {
                let inner: Value = serde_json::from_str(&inner).ok()?;
                inner.is_object().then(|| inner.to_string())?
            }
            _ => return None,
        },
        (Some(_), None) => return None,
    };
    Some(Finished { name, arguments })
}
