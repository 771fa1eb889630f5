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
    /// DSML: a parameter's value (a string argument is JSON-escaped on its way).
    Quoted { quoted: bool },
    /// Llama 3: nothing but whitespace yet (a call is the whole output).
    Start,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Body {
    Reasoning,
    Content,
    Call { json: String },
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
}

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
            ToolFormat::Harmony
            | ToolFormat::Mistral
            | ToolFormat::Kimi
            | ToolFormat::DeepSeek
            | ToolFormat::DeepSeekDsml
            | ToolFormat::Glm => Mode::Text,
            ToolFormat::Llama3 => Mode::Start,
            f if array::family(f).is_some() => Mode::Text,
            _ => return None,
        };
        Some(Self {
            format,
            mode,
            pending: String::new(),
            recipient: None,
            seen: false,
        })
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
            ToolFormat::Kimi => &[
                "<|tool_calls_section_begin|>",
                "<|tool_calls_section_end|>",
                "<|tool_call_begin|>",
                "<|tool_call_argument_begin|>",
                "<|tool_call_end|>",
                "<think>",
                "</think>",
            ],
            ToolFormat::DeepSeek => &[
                "<｜tool▁calls▁begin｜>",
                "<｜tool▁calls▁end｜>",
                "<｜tool▁call▁begin｜>",
                "<｜tool▁sep｜>",
                "<｜tool▁call▁end｜>",
                "<think>",
                "</think>",
            ],
            ToolFormat::Glm => &[
                "<tool_call>",
                "</tool_call>",
                "<arg_key>",
                "</arg_key>",
                "<arg_value>",
                "</arg_value>",
                "<think>",
                "</think>",
            ],
            ToolFormat::DeepSeekDsml => &["｜DSML｜", "<think>", "</think>"],
            ToolFormat::Llama3 => &["<|python_tag|>"],
            ToolFormat::Hermes | ToolFormat::Xml => {
                &["<tool_call>", "</tool_call>", "<think>", "</think>"]
            }
            f => array::family(f).map_or(&[], |family| family.markers),
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

    /// One move; false when nothing more can be decided without more text.
    fn step(&mut self, out: &mut String, ended: bool) -> bool {
        match self.format {
            ToolFormat::Harmony => self.step_harmony(out, ended),
            ToolFormat::Mistral => self.step_mistral(out, ended),
            ToolFormat::Kimi => self.step_sections(
                out,
                ended,
                &[
                    "<|tool_calls_section_begin|>",
                    "<|tool_calls_section_end|>",
                    "<|tool_call_begin|>",
                ],
                "<|tool_call_argument_begin|>",
                "<|tool_call_end|>",
            ),
            ToolFormat::DeepSeek => self.step_sections(
                out,
                ended,
                &[
                    "<｜tool▁calls▁begin｜>",
                    "<｜tool▁calls▁end｜>",
                    "<｜tool▁call▁begin｜>",
                ],
                "<｜tool▁sep｜>",
                "<｜tool▁call▁end｜>",
            ),
            ToolFormat::Glm => self.step_glm(out, ended),
            ToolFormat::DeepSeekDsml => self.step_dsml(out, ended),
            ToolFormat::Llama3 => self.step_llama(out, ended),
            f => match array::family(f) {
                Some(family) => self.step_json_family(out, ended, family),
                None => {
                    self.pass(out, 0, true);
                    false
                }
            },
        }
    }

    /// Kimi K2 and DeepSeek V3.1: `SECTION_BEGIN (CALL_BEGIN name SEP {args} CALL_END)*
    /// SECTION_END`. `text_markers` are the section begin and end (dropped) and the call begin.
    fn step_sections(
        &mut self,
        out: &mut String,
        ended: bool,
        text_markers: &[&str; 3],
        separator: &str,
        call_end: &str,
    ) -> bool {
        match &mut self.mode {
            Mode::Text => match self.find(text_markers) {
                Ok((at, i)) => {
                    out.push_str(&self.pending[..at]);
                    self.pending.drain(..at + text_markers[i].len());
                    if i == 2 {
                        self.mode = Mode::Name { raw: String::new() };
                    }
                    true
                }
                Err(hold) => {
                    self.pass(out, hold, ended);
                    false
                }
            },
            Mode::Name { .. } => match self.find(&[separator]) {
                Ok((at, _)) => {
                    let mut name: String = self.pending.drain(..at).collect();
                    self.pending.drain(..separator.len());
                    if let Mode::Name { raw } = &self.mode {
                        name.insert_str(0, raw);
                    }
                    // Kimi names a call `functions.NAME:INDEX`
                    let name = name.trim();
                    let name = name.strip_prefix("functions.").unwrap_or(name);
                    let name = name.rsplit_once(':').map_or(name, |(n, i)| {
                        if i.chars().all(|c| c.is_ascii_digit()) {
                            n
                        } else {
                            name
                        }
                    });
                    out.push_str(&json_call_open(name));
                    self.mode = Mode::Args {
                        body: String::new(),
                    };
                    true
                }
                // the marker may still be arriving: wait for it with the text whole
                Err(_) => false,
            },
            Mode::Args { .. } => match self.find(&[call_end]) {
                Ok((at, _)) => {
                    let args: String = self.pending.drain(..at).collect();
                    self.pending.drain(..call_end.len());
                    out.push_str(args.trim_end());
                    out.push_str(JSON_CALL_CLOSE);
                    self.mode = Mode::Text;
                    true
                }
                Err(hold) => {
                    let text = self.pass(out, hold, false);
                    if let Mode::Args { body } = &mut self.mode {
                        body.push_str(&text);
                    }
                    false
                }
            },
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }

    /// GLM 4.x: `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…</tool_call>`
    /// (whitespace between the tags ignored), rewritten to the key-and-value form.
    fn step_glm(&mut self, out: &mut String, ended: bool) -> bool {
        match &mut self.mode {
            Mode::Text => match self.find(&["<tool_call>"]) {
                Ok((at, _)) => {
                    out.push_str(&self.pending[..at]);
                    self.pending.drain(..at + "<tool_call>".len());
                    self.mode = Mode::Name { raw: String::new() };
                    true
                }
                Err(hold) => {
                    self.pass(out, hold, ended);
                    false
                }
            },
            Mode::Name { .. } => match self.find(&["<arg_key>", "</tool_call>"]) {
                Ok((at, i)) => {
                    let mut name: String = self.pending.drain(..at).collect();
                    if let Mode::Name { raw } = &self.mode {
                        name.insert_str(0, raw);
                    }
                    out.push_str(&format!("<tool_call><function={}>", name.trim()));
                    if i == 0 {
                        self.pending.drain(.."<arg_key>".len());
                        self.mode = Mode::Key { raw: String::new() };
                    } else {
                        self.pending.drain(.."</tool_call>".len());
                        out.push_str("</function></tool_call>");
                        self.mode = Mode::Text;
                    }
                    true
                }
                // the marker may still be arriving: wait for it with the text whole
                Err(_) => false,
            },
            Mode::Key { .. } => match self.find(&["</arg_key>"]) {
                Ok((at, _)) => {
                    let mut key: String = self.pending.drain(..at).collect();
                    self.pending.drain(.."</arg_key>".len());
                    if let Mode::Key { raw } = &self.mode {
                        key.insert_str(0, raw);
                    }
                    out.push_str(&format!("<parameter={}>", key.trim()));
                    self.mode = Mode::Params;
                    true
                }
                // the marker may still be arriving: wait for it with the text whole
                Err(_) => false,
            },
            // between a key and its value, or after a value: tags decide, whitespace is dropped
            Mode::Params => match self.find(&["<arg_value>", "<arg_key>", "</tool_call>"]) {
                Ok((at, i)) => {
                    self.pending.drain(..at);
                    match i {
                        0 => {
                            self.pending.drain(.."<arg_value>".len());
                            self.mode = Mode::Value;
                        }
                        1 => {
                            self.pending.drain(.."<arg_key>".len());
                            self.mode = Mode::Key { raw: String::new() };
                        }
                        _ => {
                            self.pending.drain(.."</tool_call>".len());
                            out.push_str("</function></tool_call>");
                            self.mode = Mode::Text;
                        }
                    }
                    true
                }
                Err(hold) => {
                    let cut = self.pending.len() - hold;
                    self.pending.drain(..cut);
                    false
                }
            },
            Mode::Value => match self.find(&["</arg_value>"]) {
                Ok((at, _)) => {
                    out.push_str(&self.pending[..at]);
                    self.pending.drain(..at + "</arg_value>".len());
                    out.push_str("</parameter>");
                    self.mode = Mode::Params;
                    true
                }
                Err(hold) => {
                    self.pass(out, hold, false);
                    false
                }
            },
            _ => {
                self.mode = Mode::Text;
                true
            }
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
mod dsml;
mod harmony;
mod mistral;

#[cfg(test)]
mod tests;
