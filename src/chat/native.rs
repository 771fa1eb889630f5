//! Native tool-call and reasoning syntaxes, rewritten as they stream into the canonical form
//! the output parser reads: `<think>…</think>` for reasoning, `<tool_call>{"name": N,
//! "arguments": A}</tool_call>` for a JSON call, and `<tool_call><function=N><parameter=K>V
//! </parameter></function></tool_call>` for a call whose arguments come as key and value. The
//! parser then streams calls, checks them and reports how the output ended, the same for every
//! family. Each rewriter holds back the end of its input that could be the start of a marker,
//! so text split anywhere rewrites the same.
//!
//! Written by hand, as the parser is: the formats are small, the rewriting must be incremental
//! and never fail, and no crate knows these formats.

use super::template::ToolFormat;
use serde_json::Value;

/// What a rewriter is doing with the text it is given.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Mode {
    /// Text between calls: passes (reasoning markers rewritten).
    Text,
    /// Collecting a call's name (and whatever the format puts with it) up to `until`.
    Name { raw: String },
    /// A call's JSON arguments, passed on; `body` is kept to tell when it is complete.
    Args { body: String },
    /// Mistral Nemo: `[TOOL_CALLS][{...}, {...}]`, one call per array element.
    Array { element: String, depth: u32 },
    /// GLM: inside a call, between parameters.
    Params,
    /// GLM: a parameter's key.
    Key { raw: String },
    /// GLM: a parameter's value.
    Value,
    /// Harmony: a message header after `<|channel|>`, up to `<|message|>`.
    Header { raw: String },
    /// Harmony: a message's body.
    Body(Body),
    /// An invoke's parameter value up to `close` (a string argument is JSON-escaped on its
    /// way).
    Quoted { quoted: bool, close: &'static str },
    /// Llama 3: nothing but whitespace yet (a call is the whole output).
    Start,
    /// Gemma 4, LFM2.5: a block of calls as literals, read whole at its close.
    Literal { body: String },
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    Call { json: String },
}

/// The families whose syntax is a table of markers read by one shared rewriter.
#[derive(Debug, Clone, Copy)]
enum Table {
    Array(&'static array::JsonFamily),
    Invoke(&'static invoke::InvokeFamily),
    Tags(&'static glm::TagFamily),
    Sections(&'static sections::SectionFamily),
    Literal(&'static literal::LiteralFamily),
}

impl Table {
    fn of(format: ToolFormat) -> Option<Self> {
        array::family(format)
            .map(Self::Array)
            .or_else(|| invoke::family(format).map(Self::Invoke))
            .or_else(|| glm::family(format).map(Self::Tags))
            .or_else(|| sections::family(format).map(Self::Sections))
            .or_else(|| literal::family(format).map(Self::Literal))
    }

    fn markers(self) -> &'static [&'static str] {
        match self {
            Self::Array(family) => family.markers,
            Self::Invoke(family) => family.markers,
            Self::Tags(family) => family.markers,
            Self::Sections(family) => family.markers,
            Self::Literal(family) => family.markers,
        }
    }
}

#[derive(Debug, Clone)]
pub struct NativeRewriter {
    format: ToolFormat,
    mode: Mode,
    pending: String,
    /// Harmony: a recipient named in the role header (`<|start|>assistant to=functions.f`).
    recipient: Option<String>,
    /// Harmony: a message marker was seen (text outside messages is then a role header).
    seen: bool,
    /// Inside the model's reasoning: call markers there are text (the model thinking about a
    /// call), for the families whose text mode knows it.
    in_reasoning: bool,
    /// Inside a block of calls (the invoke families: an invoke outside one is text).
    in_block: bool,
}

const THINK_OPEN: &str = "<think>";
const THINK_CLOSE: &str = "</think>";

/// The call header of the canonical JSON form, up to where the arguments go.
fn json_call_open(name: &str) -> String {
    format!(
        "<tool_call>{{\"name\": {}, \"arguments\": ",
        Value::from(name.trim())
    )
}

const JSON_CALL_CLOSE: &str = "}</tool_call>";

/// Whether `body` holds one whole JSON value (a call's arguments are complete).
fn complete_json(body: &str) -> bool {
    serde_json::from_str::<Value>(body.trim()).is_ok()
}

impl NativeRewriter {
    /// A rewriter for `format`, or `None` when the parser reads the format as it is.
    pub fn new(format: ToolFormat) -> Option<Self> {
        let mode = match format {
            ToolFormat::Harmony | ToolFormat::Mistral => Mode::Text,
            ToolFormat::Llama3 => Mode::Start,
            f if Table::of(f).is_some() => Mode::Text,
            _ => return None,
        };
        Some(Self {
            format,
            mode,
            pending: String::new(),
            recipient: None,
            seen: false,
            in_reasoning: false,
            in_block: false,
        })
    }

    /// The same, for output that starts inside the model's reasoning (the prompt opened it).
    pub fn starting_in_reasoning(mut self, in_reasoning: bool) -> Self {
        self.in_reasoning = in_reasoning;
        self
    }

    /// The markers of `format` that models write as control tokens (kept for the rewriter).
    pub fn markers(format: ToolFormat) -> &'static [&'static str] {
        match format {
            ToolFormat::Harmony => &[
                "<|start|>",
                "<|end|>",
                "<|message|>",
                "<|channel|>",
                "<|constrain|>",
                "<|call|>",
                "<|return|>",
            ],
            ToolFormat::Mistral => &["[TOOL_CALLS]", "[ARGS]", "[CALL_ID]", "[THINK]", "[/THINK]"],
            ToolFormat::Llama3 => &["<|python_tag|>"],
            ToolFormat::Hermes | ToolFormat::Xml => {
                &["<tool_call>", "</tool_call>", "<think>", "</think>"]
            }
            f => Table::of(f).map_or(&[], Table::markers),
        }
    }

    pub fn push(&mut self, text: &str) -> String {
        self.pending.push_str(text);
        let mut out = String::new();
        while self.step(&mut out, false) {}
        out
    }

    /// The output ended: what is held is released; a call whose arguments are complete is
    /// closed (its closing marker may have been an end-of-generation token, never delivered),
    /// one still open stays open, so the parser reports it cut.
    pub fn finish(&mut self) -> String {
        let mut out = String::new();
        while self.step(&mut out, true) {}
        let rest = std::mem::take(&mut self.pending);
        match std::mem::replace(&mut self.mode, Mode::Text) {
            Mode::Args { mut body } => {
                body.push_str(&rest);
                out.push_str(&rest);
                if complete_json(&body) {
                    out.push_str(JSON_CALL_CLOSE);
                }
            }
            Mode::Body(Body::Call { mut json }) => {
                json.push_str(&rest);
                out.push_str(&rest);
                if complete_json(&json) {
                    out.push_str(JSON_CALL_CLOSE);
                }
            }
            Mode::Body(Body::Reasoning) => {
                out.push_str(&rest);
                out.push_str("</think>");
            }
            Mode::Text if self.format == ToolFormat::Harmony && self.seen => {}
            // a block of literal calls cut: its call left open, so the parser reports it cut
            Mode::Literal { mut body } => {
                body.push_str(&rest);
                out.push_str(&literal::cut_block(self.format, &body));
            }
            Mode::Text | Mode::Body(Body::Content) | Mode::Start => out.push_str(&rest),
            // a call cut inside its name or parameters: left open
            _ => {}
        }
        out
    }

    /// The earliest of `markers` in the pending text, else how much of its end to hold back.
    fn find(&self, markers: &[&str]) -> Result<(usize, usize), usize> {
        let found = markers
            .iter()
            .enumerate()
            .filter_map(|(i, m)| self.pending.find(m).map(|at| (at, i)))
            .min();
        found.ok_or_else(|| super::tools::held_back(&self.pending, markers))
    }

    /// Passes the pending text (all of it once `ended`, else all but a possible marker start).
    fn pass(&mut self, out: &mut String, hold: usize, ended: bool) -> String {
        let cut = if ended {
            self.pending.len()
        } else {
            self.pending.len() - hold
        };
        let text: String = self.pending.drain(..cut).collect();
        out.push_str(&text);
        text
    }

    /// Text between calls: passes, `text`'s markers rewritten, reasoning followed. Some(true)
    /// once `open` was found outside reasoning (and dropped), Some(false) after another
    /// marker, None: more text is needed.
    fn text_until(
        &mut self,
        out: &mut String,
        ended: bool,
        open: &str,
        text: &[(&str, &str)],
    ) -> Option<bool> {
        let mut markers = vec![open, THINK_OPEN, THINK_CLOSE];
        markers.extend(text.iter().map(|(m, _)| *m));
        match self.find(&markers) {
            Ok((at, i)) => {
                out.push_str(&self.pending[..at]);
                let marker = markers[i];
                self.pending.drain(..at + marker.len());
                if i == 0 && !self.in_reasoning {
                    return Some(true);
                }
                let becomes = if i < 3 { marker } else { text[i - 3].1 };
                self.follow_reasoning(becomes);
                out.push_str(becomes);
                Some(false)
            }
            Err(hold) => {
                self.pass(out, hold, ended);
                None
            }
        }
    }

    /// Follows the reasoning a marker that becomes `becomes` opens or closes.
    fn follow_reasoning(&mut self, becomes: &str) {
        if becomes == THINK_OPEN {
            self.in_reasoning = true;
        } else if becomes == THINK_CLOSE {
            self.in_reasoning = false;
        }
    }

    /// Takes the pending text but a possible marker start (its last `hold` bytes).
    fn take_unheld(&mut self, hold: usize) -> String {
        let cut = self.pending.len() - hold;
        self.pending.drain(..cut).collect()
    }

    /// One move; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut String, ended: bool) -> bool {
        match self.format {
            ToolFormat::Harmony => self.step_harmony(out, ended),
            ToolFormat::Mistral => self.step_mistral(out, ended),
            ToolFormat::Llama3 => self.step_llama(out, ended),
            f => match Table::of(f) {
                Some(Table::Array(family)) => self.step_json_family(out, ended, family),
                Some(Table::Invoke(family)) => self.step_invoke(out, ended, family),
                Some(Table::Tags(family)) => self.step_tags(out, ended, family),
                Some(Table::Sections(family)) => self.step_sections(out, ended, family),
                Some(Table::Literal(family)) => self.step_literal(out, ended, family),
                None => {
                    self.pass(out, 0, true);
                    false
                }
            },
        }
    }

    /// Arguments with no closing marker (Mistral, Llama 3): passed on until their JSON object
    /// closes, then `close`; what follows is text again.
    fn args_to_json_end(&mut self, out: &mut String, close: &str) -> bool {
        let Mode::Args { body } = &mut self.mode else {
            return false;
        };
        let start = body.len();
        body.push_str(&std::mem::take(&mut self.pending));
        match json_end(body) {
            Some(end) => {
                out.push_str(&body[start..end]);
                out.push_str(close);
                self.pending = body[end..].to_owned();
                self.mode = Mode::Text;
                true
            }
            None => {
                out.push_str(&body[start..]);
                false
            }
        }
    }

    /// Llama 3.x: a call is the whole output, `{"name": N, "parameters": {...}}`
    /// (`<|python_tag|>` before it is dropped).
    fn step_llama(&mut self, out: &mut String, ended: bool) -> bool {
        match &mut self.mode {
            Mode::Start => {
                if let Some(rest) = self.pending.trim_start().strip_prefix("<|python_tag|>") {
                    self.pending = rest.to_owned();
                }
                let trimmed = self.pending.trim_start();
                if trimmed.starts_with('{') {
                    self.pending = trimmed.to_owned();
                    out.push_str("<tool_call>");
                    self.mode = Mode::Args {
                        body: String::new(),
                    };
                    true
                } else if !ended && (trimmed.is_empty() || "<|python_tag|>".starts_with(trimmed)) {
                    false
                } else {
                    self.mode = Mode::Text;
                    true
                }
            }
            Mode::Args { .. } => self.args_to_json_end(out, "</tool_call>"),
            _ => {
                self.pass(out, 0, true);
                false
            }
        }
    }
}

/// Where the JSON value at the start of `text` (after whitespace) ends, once it has.
fn json_end(text: &str) -> Option<usize> {
    let start = text.len() - text.trim_start().len();
    let mut depth = 0u32;
    let mut in_string = false;
    let mut escaped = false;
    for (i, c) in text[start..].char_indices() {
        if in_string {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' | '[' => depth += 1,
            '}' | ']' => {
                depth = depth.checked_sub(1)?;
                if depth == 0 {
                    return Some(start + i + 1);
                }
            }
            _ if depth == 0 => return None,
            _ => {}
        }
    }
    None
}

mod array;
mod glm;
mod harmony;
mod invoke;
mod literal;
mod mistral;
mod sections;

#[cfg(test)]
mod tests;
