//! The families whose calls are XML-like invokes with one element per argument, rewritten to
//! the key-and-value form:
//!
//! - DeepSeek V3.2's DSML (V4 names the block `tool_calls`): `<｜DSML｜invoke name="f">` opens
//!   a call, each `<｜DSML｜parameter name="k" string="true|false">v</｜DSML｜parameter>` is one
//!   argument (a string as written, else JSON);
//! - MiniMax-M2: `<minimax:tool_call>` around `<invoke name="f">` with `<parameter name="k">v
//!   </parameter>`s, and Muse Glimmer's `<atem:function_calls>` of `<atem:invoke>`s: a string
//!   as written, anything else as JSON (the parser reads a value that is JSON as JSON);
//! - MiniCPM5: `<function name="f"><param name="k">v</param></function>`, a string holding `<`,
//!   `&` or a newline wrapped in `<![CDATA[…]]>` (then it is a string, whatever it looks like);
//! - Kimi-K3's tags, `<|open|>TAG attributes<|sep|>` … `<|close|>TAG<|sep|>`: `call tool="f"`
//!   with `argument key="k" type="string|number|…"`s in a `tools` block, reasoning in `think`,
//!   content in `response`.

use super::super::template::ToolFormat;
use super::{Mode, NativeRewriter, THINK_CLOSE, THINK_OPEN};

/// How a family's argument values say what they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Typing {
    /// The parameter's `string` attribute: `"false"` means JSON, anything else a string.
    StringAttribute,
    /// The parameter's `type` attribute: `"string"` means a string, anything else JSON.
    TypeAttribute,
    /// A string as written, anything else as JSON: passed as written.
    AsWritten,
    /// As written, except that a value in `<![CDATA[…]]>` is a string.
    Cdata,
}

/// How a family writes its invokes.
#[derive(Debug)]
pub(super) struct InvokeFamily {
    /// The markers around a block of invokes: openings at even places, closings at odd ones.
    blocks: &'static [&'static str],
    /// What opens an invoke, up to its attributes (`name="f"`).
    invoke: &'static str,
    /// The attribute that names the function, and the one that names a parameter.
    name_keys: (&'static str, &'static str),
    /// What ends a tag's attributes.
    attributes_end: &'static str,
    /// Other markers in text and what they become (reasoning's open and close), or dropped.
    text: &'static [(&'static str, &'static str)],
    invoke_end: &'static str,
    /// What opens a parameter, up to its attributes.
    param: &'static str,
    param_end: &'static str,
    typing: Typing,
    /// The markers its models write as control tokens (kept for the rewriter).
    pub markers: &'static [&'static str],
}

const CDATA_OPEN: &str = "<![CDATA[";
const CDATA_CLOSE: &str = "]]>";

static DSML: InvokeFamily = InvokeFamily {
    blocks: &[
        "<｜DSML｜function_calls>",
        "</｜DSML｜function_calls>",
        "<｜DSML｜tool_calls>",
        "</｜DSML｜tool_calls>",
    ],
    invoke: "<｜DSML｜invoke ",
    name_keys: ("name", "name"),
    attributes_end: ">",
    text: &[],
    invoke_end: "</｜DSML｜invoke>",
    param: "<｜DSML｜parameter ",
    param_end: "</｜DSML｜parameter>",
    typing: Typing::StringAttribute,
    markers: &["｜DSML｜", "<think>", "</think>"],
};
static MINIMAX_M2: InvokeFamily = InvokeFamily {
    blocks: &["<minimax:tool_call>", "</minimax:tool_call>"],
    invoke: "<invoke ",
    name_keys: ("name", "name"),
    attributes_end: ">",
    text: &[],
    invoke_end: "</invoke>",
    param: "<parameter ",
    param_end: "</parameter>",
    typing: Typing::AsWritten,
    markers: &[
        "<minimax:tool_call>",
        "</minimax:tool_call>",
        "<think>",
        "</think>",
    ],
};
static GLIMMER: InvokeFamily = InvokeFamily {
    blocks: &["<atem:function_calls>", "</atem:function_calls>"],
    invoke: "<atem:invoke ",
    name_keys: ("name", "name"),
    attributes_end: ">",
    text: &[],
    invoke_end: "</atem:invoke>",
    param: "<atem:parameter ",
    param_end: "</atem:parameter>",
    typing: Typing::AsWritten,
    markers: &[],
};
static MINICPM5: InvokeFamily = InvokeFamily {
    blocks: &[],
    invoke: "<function ",
    name_keys: ("name", "name"),
    attributes_end: ">",
    text: &[],
    invoke_end: "</function>",
    param: "<param ",
    param_end: "</param>",
    typing: Typing::Cdata,
    markers: &["<think>", "</think>"],
};
static KIMI_K3: InvokeFamily = InvokeFamily {
    blocks: &["<|open|>tools<|sep|>", "<|close|>tools<|sep|>"],
    invoke: "<|open|>call ",
    name_keys: ("tool", "key"),
    attributes_end: "<|sep|>",
    text: &[
        ("<|open|>think<|sep|>", "<think>"),
        ("<|close|>think<|sep|>", "</think>"),
        ("<|open|>response<|sep|>", ""),
        ("<|close|>response<|sep|>", ""),
        ("<|close|>message<|sep|>", ""),
    ],
    invoke_end: "<|close|>call<|sep|>",
    param: "<|open|>argument ",
    param_end: "<|close|>argument<|sep|>",
    typing: Typing::TypeAttribute,
    markers: &["<|open|>", "<|close|>", "<|sep|>"],
};

/// The family of `format`, if its calls are invokes.
pub(super) fn family(format: ToolFormat) -> Option<&'static InvokeFamily> {
    match format {
        ToolFormat::DeepSeekDsml => Some(&DSML),
        ToolFormat::KimiK3 => Some(&KIMI_K3),
        ToolFormat::MiniMaxM2 => Some(&MINIMAX_M2),
        ToolFormat::Glimmer => Some(&GLIMMER),
        ToolFormat::MiniCpm5 => Some(&MINICPM5),
        _ => None,
    }
}

impl NativeRewriter {
    pub(super) fn step_invoke(
        &mut self,
        out: &mut String,
        ended: bool,
        family: &InvokeFamily,
    ) -> bool {
        match self.mode {
            Mode::Text => self.invoke_text(out, ended, family),
            // an invoke's or a parameter's attributes, up to `>`
            Mode::Header { .. } | Mode::Key { .. } => self.invoke_attributes(out, family),
            // MiniCPM5: whether the value is in CDATA, once its start tells
            Mode::Value => self.invoke_value_start(out, ended, family),
            Mode::Params => self.invoke_params(out, family),
            Mode::Quoted { quoted, close } => self.invoke_quoted(out, quoted, close, family),
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }

    /// Text between calls: a block's marker, an invoke's opening, or a text marker rewritten.
    fn invoke_text(&mut self, out: &mut String, ended: bool, family: &InvokeFamily) -> bool {
        let blocks = family.blocks.len();
        let mut markers: Vec<&str> = family.blocks.to_vec();
        markers.extend([family.invoke, THINK_OPEN, THINK_CLOSE]);
        markers.extend(family.text.iter().map(|(m, _)| *m));
        let (at, i) = match self.find(&markers) {
            Ok(found) => found,
            Err(hold) => {
                self.pass(out, hold, ended);
                return false;
            }
        };
        let marker = markers[i];
        // a block or an invoke in reasoning, or an invoke outside its family's
        // block, is the model writing about calls: text
        let as_text =
            (self.in_reasoning && i <= blocks) || (i == blocks && blocks > 0 && !self.in_block);
        if as_text || i > blocks {
            out.push_str(&self.pending[..at]);
            self.pending.drain(..at + marker.len());
            let becomes = if as_text || i <= blocks + 2 {
                marker
            } else {
                family.text[i - blocks - 3].1
            };
            self.follow_reasoning(becomes);
            out.push_str(becomes);
            return true;
        }
        // text before a block's opening is content; newlines around tags are not
        let before: String = self.pending.drain(..at).collect();
        let before = if before.trim().is_empty() {
            ""
        } else if i % 2 == 1 && i < blocks {
            before.as_str()
        } else {
            before.trim_end()
        };
        out.push_str(before);
        self.pending.drain(..marker.len());
        if i < blocks {
            self.in_block = i % 2 == 0;
        } else {
            self.mode = Mode::Header { raw: String::new() };
        }
        true
    }

    /// An invoke's or a parameter's attributes, once their end is in: the call's or the
    /// parameter's opening written.
    fn invoke_attributes(&mut self, out: &mut String, family: &InvokeFamily) -> bool {
        let Some(at) = self.pending.find(family.attributes_end) else {
            return false;
        };
        let attributes: String = self.pending.drain(..at).collect();
        self.pending.drain(..family.attributes_end.len());
        let (function_key, parameter_key) = family.name_keys;
        let is_call = matches!(self.mode, Mode::Header { .. });
        let key = if is_call { function_key } else { parameter_key };
        let name = attribute(&attributes, key).unwrap_or_default();
        if is_call {
            out.push_str(&format!("<tool_call><function={name}>"));
            self.mode = Mode::Params;
        } else {
            out.push_str(&format!("<parameter={name}>"));
            self.mode = parameter_mode(out, &attributes, family);
        }
        true
    }

    /// MiniCPM5: whether the value is in CDATA, once its start tells.
    fn invoke_value_start(&mut self, out: &mut String, ended: bool, family: &InvokeFamily) -> bool {
        let close = family.param_end;
        if self.pending.starts_with(CDATA_OPEN) {
            self.pending.drain(..CDATA_OPEN.len());
            out.push('"');
            self.mode = Mode::Quoted {
                quoted: true,
                close: "]]>",
            };
            true
        } else if CDATA_OPEN.starts_with(self.pending.as_str()) && !ended {
            false
        } else {
            self.mode = Mode::Quoted {
                quoted: false,
                close,
            };
            true
        }
    }

    /// Inside a call, between parameters: the next parameter's opening or the call's end.
    fn invoke_params(&mut self, out: &mut String, family: &InvokeFamily) -> bool {
        match self.find(&[family.param, family.invoke_end]) {
            Ok((at, i)) => {
                self.pending.drain(..at);
                if i == 0 {
                    self.pending.drain(..family.param.len());
                    self.mode = Mode::Key { raw: String::new() };
                } else {
                    self.pending.drain(..family.invoke_end.len());
                    out.push_str("</function></tool_call>");
                    self.mode = Mode::Text;
                }
                true
            }
            Err(hold) => {
                self.take_unheld(hold);
                false
            }
        }
    }

    /// A parameter's value up to `close`, JSON-escaped when it is a string.
    fn invoke_quoted(
        &mut self,
        out: &mut String,
        quoted: bool,
        close: &'static str,
        family: &InvokeFamily,
    ) -> bool {
        let (text, done) = match self.find(&[close]) {
            Ok((at, _)) => {
                let text: String = self.pending.drain(..at).collect();
                self.pending.drain(..close.len());
                (text, true)
            }
            Err(hold) => (self.take_unheld(hold), false),
        };
        if quoted {
            // a string argument: JSON-escaped, so the parser keeps it a string
            let escaped = serde_json::Value::from(text).to_string();
            out.push_str(&escaped[1..escaped.len() - 1]);
        } else {
            out.push_str(&text);
        }
        if done {
            if quoted {
                out.push('"');
            }
            if close == CDATA_CLOSE {
                // the CDATA is closed: its parameter's end follows
                self.mode = Mode::Quoted {
                    quoted: false,
                    close: family.param_end,
                };
            } else {
                out.push_str("</parameter>");
                self.mode = Mode::Params;
            }
        }
        done
    }
}

/// How a parameter's value is read, by its family's typing and its attributes (a string's
/// opening quote written).
fn parameter_mode(out: &mut String, attributes: &str, family: &InvokeFamily) -> Mode {
    let quoted = match family.typing {
        Typing::StringAttribute => attribute(attributes, "string").as_deref() != Some("false"),
        Typing::TypeAttribute => attribute(attributes, "type").as_deref() == Some("string"),
        Typing::AsWritten => false,
        Typing::Cdata => return Mode::Value,
    };
    if quoted {
        out.push('"');
    }
    Mode::Quoted {
        quoted,
        close: family.param_end,
    }
}

/// `key="value"` among a tag's attributes (`&quot;` and `&amp;` in it unescaped).
fn attribute(attributes: &str, key: &str) -> Option<String> {
    // a space before the key, so `key` is not found inside `tool_key`
    let attributes = format!(" {attributes}");
    let at = attributes.find(&format!(" {key}=\""))? + key.len() + 3;
    let end = attributes[at..].find('"')?;
    Some(
        attributes[at..at + end]
            .replace("&quot;", "\"")
            .replace("&amp;", "&"),
    )
}
