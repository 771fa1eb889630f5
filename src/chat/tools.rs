//! The streaming output parser: splits a model's text, as it arrives, into content, reasoning
//! (`<think>…</think>` at the start) and tool calls in the formats open models emit:
//!
//! - Hermes / Qwen: `<tool_call>{"name": "f", "arguments": {...}}</tool_call>`;
//! - the XML form (Qwen3-Coder and others): `<tool_call><function=f><parameter=p>v</parameter>
//!   </function></tool_call>`, also without the `<tool_call>` wrapper.
//!
//! A call is announced ([`Piece::CallStart`]) once its name is known, and its arguments are
//! streamed as they arrive (the JSON text of the `arguments` object; for the XML form one
//! `"p": v` member per closed parameter). Its id is made here, once. A block that is not a
//! valid call is content, never a call; a call whose JSON breaks after it started ends with
//! [`Piece::CallInvalid`]; a call still open when the output ends is reported by
//! [`Ending::cut_call`]. The parser sees the text a client sees, above every pause and park,
//! so a call split across a pause parses the same.
//!
//! Written by hand: the formats are small, the parser must be incremental and never fail,
//! and no crate parses these tags.

use serde_json::Value;

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";
const CALL_OPEN: &str = "<tool_call>";
const CALL_CLOSE: &str = "</tool_call>";
const FUNCTION_OPEN: &str = "<function=";
const FUNCTION_CLOSE: &str = "</function>";
const PARAMETER_OPEN: &str = "<parameter=";
const PARAMETER_CLOSE: &str = "</parameter>";

/// What the parser releases, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Piece {
    Content(String),
    Reasoning(String),
    CallStart {
        index: usize,
        id: String,
        name: String,
    },
    CallArguments {
        index: usize,
        delta: String,
    },
    CallEnd {
        index: usize,
    },
    /// A started call whose text turned out not to be a valid call; `raw` is all of it.
    CallInvalid {
        index: usize,
        raw: String,
    },
}

/// How the output ended, for `finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Ending {
    /// Calls that started and closed validly.
    pub calls_closed: usize,
    /// Calls that started and did not close validly (invalid or cut).
    pub calls_broken: usize,
    /// A call was still open when the output ended (cut by `max_tokens` or a stop).
    pub cut_call: bool,
}

impl Ending {
    /// `finish_reason: tool_calls` only when calls were made and every started one closed.
    pub fn all_calls_closed(&self) -> bool {
        self.calls_closed > 0 && self.calls_broken == 0 && !self.cut_call
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ParserOptions {
    /// Parse tool calls (tools were offered and `tool_choice` is not `none`).
    pub tools: bool,
    /// The prompt ended inside an open `<think>`: the output starts as reasoning.
    pub starts_in_reasoning: bool,
}

#[derive(Debug)]
enum State {
    /// Nothing but whitespace yet: a `<think>` may still open.
    Start,
    Text,
    Reasoning,
    /// Inside `<tool_call>` (or a bare `<function=`), collecting `raw`.
    Call(Call),
}

#[derive(Debug, Default)]
struct Call {
    raw: String,
    /// Opened by a bare `<function=` (ends at `</function>`), not `<tool_call>`.
    bare: bool,
    /// The call's index once started.
    index: Option<usize>,
    /// Where the JSON arguments value starts in `raw`, fixed when the call started.
    args_at: Option<usize>,
    /// Bytes of the JSON arguments text already streamed.
    args_sent: usize,
    /// XML form: parameters already streamed.
    params_sent: usize,
}

#[derive(Debug)]
pub struct OutputParser {
    options: ParserOptions,
    state: State,
    /// Text not yet released (a tag may be starting at its end).
    pending: String,
    id_prefix: String,
    next_index: usize,
    ending: Ending,
    /// A reasoning block ended and no content followed yet: leading whitespace is dropped.
    after_reasoning: bool,
    /// Trailing whitespace of the content so far: released with the next text, dropped
    /// before a call (so whitespace between calls is no content), kept at the end when no
    /// call was made.
    held_ws: String,
}

impl OutputParser {
    /// Call ids are `{id_prefix}{index}` (the prefix makes them unique).
    pub fn new(options: ParserOptions, id_prefix: &str) -> Self {
        Self {
            state: if options.starts_in_reasoning {
                State::Reasoning
            } else {
                State::Start
            },
            options,
            pending: String::new(),
            id_prefix: id_prefix.to_owned(),
            next_index: 0,
            ending: Ending::default(),
            after_reasoning: false,
            held_ws: String::new(),
        }
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        self.pending.push_str(text);
        let mut out = Vec::new();
        while self.step(&mut out, false) {}
        out
    }

    /// The output ended: releases what is held and says how it ended.
    pub fn finish(&mut self) -> (Vec<Piece>, Ending) {
        let mut out = Vec::new();
        while self.step(&mut out, true) {}
        match std::mem::replace(&mut self.state, State::Text) {
            State::Call(call) => {
                self.ending.cut_call = true;
                if call.index.is_some() {
                    self.ending.calls_broken += 1;
                } else {
                    let opener = if call.bare { "" } else { CALL_OPEN };
                    self.content(&mut out, format!("{opener}{}", call.raw));
                }
            }
            State::Reasoning => {
                let rest = std::mem::take(&mut self.pending);
                push_reasoning(&mut out, rest);
            }
            State::Start | State::Text => {
                let rest = std::mem::take(&mut self.pending);
                self.content(&mut out, rest);
            }
        }
        let tail = std::mem::take(&mut self.held_ws);
        if self.next_index == 0 && !tail.is_empty() && !self.after_reasoning {
            match out.last_mut() {
                Some(Piece::Content(last)) => last.push_str(&tail),
                _ => out.push(Piece::Content(tail)),
            }
        }
        (out, self.ending)
    }

    /// One move; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut Vec<Piece>, ended: bool) -> bool {
        match &mut self.state {
            State::Start => {
                let trimmed = self.pending.trim_start();
                if let Some(rest) = trimmed.strip_prefix(THINK_OPEN) {
                    self.pending = rest.to_owned();
                    self.state = State::Reasoning;
                    true
                } else if !ended && THINK_OPEN.starts_with(trimmed) {
                    false // empty or a partial `<think>`
                } else {
                    self.state = State::Text;
                    true
                }
            }
            State::Reasoning => {
                if let Some(at) = self.pending.find(THINK_CLOSE) {
                    let reasoning = self.pending[..at].to_owned();
                    self.pending = self.pending[at + THINK_CLOSE.len()..]
                        .trim_start()
                        .to_owned();
                    push_reasoning(out, reasoning);
                    self.state = State::Text;
                    self.after_reasoning = true;
                    true
                } else {
                    let keep = held_back(&self.pending, &[THINK_CLOSE]);
                    let cut = self.pending.len() - keep;
                    let reasoning: String = self.pending.drain(..cut).collect();
                    push_reasoning(out, reasoning);
                    false
                }
            }
            State::Text => {
                let tags: &[&str] = if self.options.tools {
                    &[CALL_OPEN, FUNCTION_OPEN]
                } else {
                    &[]
                };
                let found = tags
                    .iter()
                    .filter_map(|t| self.pending.find(t).map(|at| (at, *t)))
                    .min();
                if let Some((at, tag)) = found {
                    let before = self.pending[..at].to_owned();
                    let bare = tag == FUNCTION_OPEN;
                    // A bare `<function=` keeps its opener in `raw`; `<tool_call>` does not.
                    let skip = if bare { at } else { at + tag.len() };
                    self.pending.drain(..skip);
                    self.content(out, before);
                    self.held_ws.clear();
                    self.state = State::Call(Call {
                        bare,
                        ..Call::default()
                    });
                    true
                } else {
                    let keep = if ended {
                        0
                    } else {
                        held_back(&self.pending, tags)
                    };
                    let cut = self.pending.len() - keep;
                    let text: String = self.pending.drain(..cut).collect();
                    self.content(out, text);
                    false
                }
            }
            State::Call(_) => self.step_call(out, ended),
        }
    }

    fn content(&mut self, out: &mut Vec<Piece>, text: String) {
        // The whitespace that separates a reasoning block from the answer is not content.
        let text = if self.after_reasoning {
            text.trim_start().to_owned()
        } else {
            text
        };
        let body_end = text.trim_end().len();
        if body_end == 0 {
            self.held_ws.push_str(&text);
            return;
        }
        self.after_reasoning = false;
        let mut emit = std::mem::take(&mut self.held_ws);
        emit.push_str(&text[..body_end]);
        self.held_ws = text[body_end..].to_owned();
        match out.last_mut() {
            Some(Piece::Content(last)) => last.push_str(&emit),
            _ => out.push(Piece::Content(emit)),
        }
    }

    fn step_call(&mut self, out: &mut Vec<Piece>, ended: bool) -> bool {
        let State::Call(call) = &mut self.state else {
            return false;
        };
        let close = if call.bare {
            FUNCTION_CLOSE
        } else {
            CALL_CLOSE
        };
        // Everything so far joins `raw`; the close tag is looked for where it can close the
        // call (not inside a JSON string, not inside an XML parameter), and what follows it,
        // or a partial tag at the end, goes back to `pending`.
        call.raw.push_str(&std::mem::take(&mut self.pending));
        let xml = call.raw.trim_start().starts_with(FUNCTION_OPEN);
        let closed_at = find_close(&call.raw, close, xml);
        let keep_from = match closed_at {
            Some(at) => at,
            None if ended => call.raw.len(),
            None => call.raw.len() - held_back(&call.raw, &[close]),
        };
        self.pending = call.raw.split_off(keep_from);
        let next_index = &mut self.next_index;
        let id_prefix = &self.id_prefix;
        let mut start = |name: String, out: &mut Vec<Piece>| {
            let index = *next_index;
            *next_index += 1;
            out.push(Piece::CallStart {
                index,
                id: format!("{id_prefix}{index}"),
                name,
            });
            index
        };
        if xml {
            stream_xml(call, out, &mut start);
        } else {
            stream_json(call, out, &mut start);
        }
        if closed_at.is_none() {
            return false;
        }
        // The call closed.
        self.pending.drain(..close.len());
        let State::Call(mut call) = std::mem::replace(&mut self.state, State::Text) else {
            unreachable!("in a call")
        };
        if call.bare {
            call.raw.push_str(FUNCTION_CLOSE);
        }
        let finished = if xml {
            finish_xml(&call.raw)
        } else {
            finish_json(&call.raw)
        };
        match (finished, call.index) {
            (Some(done), Some(index)) => {
                let rest = done.arguments.get(call.args_sent..).unwrap_or("");
                if !rest.is_empty() && !xml {
                    out.push(Piece::CallArguments {
                        index,
                        delta: rest.to_owned(),
                    });
                } else if xml {
                    out.push(Piece::CallArguments {
                        index,
                        delta: if call.params_sent == 0 { "{}" } else { "}" }.to_owned(),
                    });
                }
                out.push(Piece::CallEnd { index });
                self.ending.calls_closed += 1;
            }
            (Some(done), None) => {
                let index = start(done.name, out);
                out.push(Piece::CallArguments {
                    index,
                    delta: done.arguments,
                });
                out.push(Piece::CallEnd { index });
                self.ending.calls_closed += 1;
            }
            (None, Some(index)) => {
                self.ending.calls_broken += 1;
                let raw = if call.bare {
                    call.raw
                } else {
                    format!("{CALL_OPEN}{}{CALL_CLOSE}", call.raw)
                };
                out.push(Piece::CallInvalid { index, raw });
            }
            (None, None) => {
                let text = if call.bare {
                    call.raw
                } else {
                    format!("{CALL_OPEN}{}{CALL_CLOSE}", call.raw)
                };
                self.content(out, text);
            }
        }
        true
    }
}

fn push_reasoning(out: &mut Vec<Piece>, text: String) {
    if text.is_empty() {
        return;
    }
    match out.last_mut() {
        Some(Piece::Reasoning(last)) => last.push_str(&text),
        _ => out.push(Piece::Reasoning(text)),
    }
}

/// Where `close` ends the call in `raw`: for the XML form, the first `close` at or after the
/// first `</function>` (a parameter value may hold any text); for JSON, the first `close`
/// outside a JSON string.
fn find_close(raw: &str, close: &str, xml: bool) -> Option<usize> {
    if xml {
        let function_end = raw.find(FUNCTION_CLOSE)?;
        return raw[function_end..].find(close).map(|at| function_end + at);
    }
    let bytes = raw.as_bytes();
    let mut in_string = false;
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'\\' if in_string => i += 1,
            b'"' => in_string = !in_string,
            b'<' if !in_string && raw[i..].starts_with(close) => return Some(i),
            _ => {}
        }
        i += 1;
    }
    None
}

/// How many bytes at the end of `text` could be the start of one of `tags`.
fn held_back(text: &str, tags: &[&str]) -> usize {
    let mut keep = 0;
    for tag in tags {
        for len in (1..tag.len()).rev() {
            if len > keep && text.ends_with(&tag[..len]) {
                keep = len;
                break;
            }
        }
    }
    keep
}

/// A call that closed validly: its name and the JSON text of its arguments object.
#[derive(Debug)]
struct Finished {
    name: String,
    arguments: String,
}

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
fn stream_json(
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

/// Scans the top level of a JSON object for `name` and `arguments` (or `parameters`).
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
            Some("name") => {
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
fn finish_json(raw: &str) -> Option<Finished> {
    let value: Value = serde_json::from_str(raw.trim()).ok()?;
    let name = value.get("name")?.as_str()?.to_owned();
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

/// Streams an XML-form call: starts it at `<function=NAME>`, then one member per closed
/// `<parameter=P>…</parameter>`.
fn stream_xml(
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

fn finish_xml(raw: &str) -> Option<Finished> {
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

#[cfg(test)]
mod tests;
