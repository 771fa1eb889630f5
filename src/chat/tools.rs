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
    /// The model's tool-call format (its native syntax is rewritten before parsing).
    pub format: super::ToolFormat,
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
    /// Control tokens: the format's markers kept as text, the rest dropped.
    control: super::control::ControlFilter,
    /// The model's native call syntax, rewritten into the forms parsed here.
    native: Option<super::native::NativeRewriter>,
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
            control: super::control::ControlFilter::new(super::native::NativeRewriter::markers(
                options.format,
            )),
            native: super::native::NativeRewriter::new(options.format)
                .map(|r| r.starting_in_reasoning(options.starts_in_reasoning)),
        }
    }

    /// A parser for plain text (a completion or an infill): no reasoning block, no calls;
    /// only control tokens are dropped.
    pub fn plain(id_prefix: &str) -> Self {
        let mut parser = Self::new(
            ParserOptions {
                tools: false,
                starts_in_reasoning: false,
                format: super::ToolFormat::Other,
            },
            id_prefix,
        );
        parser.state = State::Text;
        parser
    }

    pub fn push(&mut self, text: &str) -> Vec<Piece> {
        let mut text = self.control.push(text);
        if let Some(native) = &mut self.native {
            text = native.push(&text);
        }
        self.pending.push_str(&text);
        let mut out = Vec::new();
        while self.step(&mut out, false) {}
        out
    }

    /// The output ended: releases what is held and says how it ended.
    pub fn finish(&mut self) -> (Vec<Piece>, Ending) {
        self.control.finish();
        if let Some(native) = &mut self.native {
            let rest = native.finish();
            self.pending.push_str(&rest);
        }
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
        let short_ids = self.options.format == super::ToolFormat::Mistral;
        let mut start = |name: String, out: &mut Vec<Piece>| {
            start_call(next_index, id_prefix, short_ids, name, out)
        };
        if xml {
            stream_xml(call, out, &mut start);
        } else {
            stream_json(call, out, &mut start);
        }
        if closed_at.is_none() {
            return false;
        }
        self.close_call(out, close, xml);
        true
    }

    /// A call's close tag was found: the call ends, finished (its last arguments and its end),
    /// invalid, or as text when it never started and does not read as a call.
    fn close_call(&mut self, out: &mut Vec<Piece>, close: &str, xml: bool) {
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
                let short_ids = self.options.format == super::ToolFormat::Mistral;
                let index = start_call(
                    &mut self.next_index,
                    &self.id_prefix,
                    short_ids,
                    done.name,
                    out,
                );
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
    }
}

/// Starts a call under the next index, with its id (a short one where the format wants one).
fn start_call(
    next_index: &mut usize,
    id_prefix: &str,
    short_ids: bool,
    name: String,
    out: &mut Vec<Piece>,
) -> usize {
    let index = *next_index;
    *next_index += 1;
    out.push(Piece::CallStart {
        index,
        id: if short_ids {
            short_id(id_prefix, index)
        } else {
            format!("{id_prefix}{index}")
        },
        name,
    });
    index
}

/// A call id of 9 letters and digits, as Mistral's templates require of every call id they
/// render (they refuse others): a hash of the unique prefix and the index, in base 62.
fn short_id(id_prefix: &str, index: usize) -> String {
    const DIGITS: &[u8] = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ";
    // FNV-1a: stable across runs and platforms (std's hasher is not)
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in id_prefix.bytes().chain(index.to_le_bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    (0..9)
        .map(|_| {
            let digit = DIGITS[(hash % 62) as usize];
            hash /= 62;
            char::from(digit)
        })
        .collect()
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
pub(super) fn held_back(text: &str, tags: &[&str]) -> usize {
    let mut keep = 0;
    for tag in tags {
        for len in (1..tag.len()).rev() {
            if len > keep && tag.is_char_boundary(len) && text.ends_with(&tag[..len]) {
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

mod json_call;
mod xml_call;

pub use json_call::valid_name;
use json_call::{finish_json, stream_json};
use xml_call::{finish_xml, stream_xml};

#[cfg(test)]
mod tests;
