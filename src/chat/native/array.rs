//! The families whose calls are JSON objects after a marker, usually in an array: Apriel's
//! `<tool_calls>[…]</tool_calls>`, Nemotron Nano v2's `<TOOLCALL>[…]</TOOLCALL>`, Cohere's
//! `<|START_ACTION|>[…]<|END_ACTION|>`, Apertus' `<|tools_prefix|>[{"NAME": {…}}]
//! <|tools_suffix|>`, Granite 3's `<|tool_call|>[…]`, MiniMax-M1's `<tool_calls>` with one
//! object per line, GigaChat's single call. Each object becomes a canonical JSON call as it
//! streams (the parser reads `name` or `tool_name`, and `arguments` or `parameters`); Apertus'
//! short form, keyed by the tool's name, is rewritten once its object closes.

use super::super::template::ToolFormat;
use super::{Mode, NativeRewriter, json_end};
use serde_json::Value;

/// How a family writes its calls.
#[derive(Debug)]
pub(super) struct JsonFamily {
    /// The marker that opens a block of calls.
    pub open: &'static str,
    /// The marker that closes it; empty when the block ends with its array (or its object).
    pub close: &'static str,
    /// Other markers in text and what they become (reasoning's open and close), or dropped.
    pub text: &'static [(&'static str, &'static str)],
    /// Objects are `{"NAME": {arguments}}`.
    pub short: bool,
    /// The markers its models write as control tokens (kept for the rewriter).
    pub markers: &'static [&'static str],
}

const THINK: [(&str, &str); 2] = [("<think>", "<think>"), ("</think>", "</think>")];

static APRIEL: JsonFamily = JsonFamily {
    open: "<tool_calls>",
    close: "</tool_calls>",
    text: &[("[BEGIN FINAL RESPONSE]", "</think>")],
    short: false,
    markers: &[],
};
static NEMOTRON: JsonFamily = JsonFamily {
    open: "<TOOLCALL>",
    close: "</TOOLCALL>",
    text: &THINK,
    short: false,
    markers: &["<TOOLCALL>", "</TOOLCALL>", "<think>", "</think>"],
};
static COHERE: JsonFamily = JsonFamily {
    open: "<|START_ACTION|>",
    close: "<|END_ACTION|>",
    text: &[
        ("<|START_THINKING|>", "<think>"),
        ("<|END_THINKING|>", "</think>"),
    ],
    short: false,
    markers: &[
        "<|START_ACTION|>",
        "<|END_ACTION|>",
        "<|START_THINKING|>",
        "<|END_THINKING|>",
    ],
};
static APERTUS: JsonFamily = JsonFamily {
    open: "<|tools_prefix|>",
    close: "<|tools_suffix|>",
    text: &[
        ("<|inner_prefix|>", "<think>"),
        ("<|inner_suffix|>", "</think>"),
    ],
    short: true,
    markers: &[
        "<|tools_prefix|>",
        "<|tools_suffix|>",
        "<|inner_prefix|>",
        "<|inner_suffix|>",
    ],
};
static GRANITE3: JsonFamily = JsonFamily {
    open: "<|tool_call|>",
    close: "",
    text: &THINK,
    short: false,
    markers: &["<|tool_call|>", "<think>", "</think>"],
};
static MINIMAX_M1: JsonFamily = JsonFamily {
    open: "<tool_calls>",
    close: "</tool_calls>",
    text: &THINK,
    short: false,
    markers: &["<think>", "</think>"],
};
static GIGACHAT3: JsonFamily = JsonFamily {
    open: "function call<|role_sep|>",
    close: "",
    text: &[],
    short: false,
    markers: &["<|role_sep|>", "<|role_sep|>\n"],
};
static GIGACHAT31: JsonFamily = JsonFamily {
    open: "<|function_call|>",
    close: "",
    text: &[],
    short: false,
    markers: &["<|function_call|>"],
};

/// The family of `format`, if its calls are JSON objects after a marker.
pub(super) fn family(format: ToolFormat) -> Option<&'static JsonFamily> {
    Some(match format {
        ToolFormat::Apriel => &APRIEL,
        ToolFormat::Nemotron => &NEMOTRON,
        ToolFormat::Cohere => &COHERE,
        ToolFormat::Apertus => &APERTUS,
        ToolFormat::Granite3 => &GRANITE3,
        ToolFormat::MiniMaxM1 => &MINIMAX_M1,
        ToolFormat::GigaChat3 => &GIGACHAT3,
        ToolFormat::GigaChat31 => &GIGACHAT31,
        _ => return None,
    })
}

/// Apertus' `{"NAME": {arguments}}` as the canonical call, or `None` when it is not one.
fn short_call(element: &str) -> Option<String> {
    let Value::Object(map) = serde_json::from_str::<Value>(element).ok()? else {
        return None;
    };
    let mut entries = map.into_iter();
    let (name, arguments) = entries.next()?;
    if entries.next().is_some() || !arguments.is_object() {
        return None;
    }
    let call = serde_json::json!({"name": name, "arguments": arguments});
    Some(format!("<tool_call>{call}</tool_call>"))
}

impl NativeRewriter {
    pub(super) fn step_json_family(
        &mut self,
        out: &mut String,
        ended: bool,
        family: &JsonFamily,
    ) -> bool {
        match &mut self.mode {
            Mode::Text => self.json_text(out, ended, family),
            Mode::Array { element, depth } => {
                let rest = std::mem::take(&mut self.pending);
                for (i, c) in rest.char_indices() {
                    if *depth > 0 {
                        push_element_char(out, element, depth, c, family);
                        continue;
                    }
                    match c {
                        '{' => {
                            *depth = 1;
                            element.clear();
                            element.push(c);
                            if !family.short {
                                out.push_str("<tool_call>{");
                            }
                        }
                        '[' | ',' => {}
                        c if c.is_whitespace() => {}
                        ']' if family.close.is_empty() => {
                            self.pending = rest[i + 1..].to_owned();
                            self.mode = Mode::Text;
                            return true;
                        }
                        ']' => {}
                        _ => return self.leave_array(&rest[i..], ended, family),
                    }
                }
                false
            }
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }

    /// Text between blocks: a block's opening, or a text marker rewritten.
    fn json_text(&mut self, out: &mut String, ended: bool, family: &JsonFamily) -> bool {
        let mut markers = vec![family.open];
        markers.extend(family.text.iter().map(|(m, _)| *m));
        match self.find(&markers) {
            Ok((at, i)) => {
                let before: String = self.pending.drain(..at).collect();
                self.pending.drain(..markers[i].len());
                if i == 0 {
                    out.push_str(before.trim_end());
                    self.mode = Mode::Array {
                        element: String::new(),
                        depth: 0,
                    };
                } else {
                    out.push_str(&before);
                    out.push_str(family.text[i - 1].1);
                }
                true
            }
            Err(hold) => {
                self.pass(out, hold, ended);
                false
            }
        }
    }

    /// Something other than an object, a separator or the array's end between calls: the
    /// block's closing marker (or its start, held), or text again.
    fn leave_array(&mut self, tail: &str, ended: bool, family: &JsonFamily) -> bool {
        if !family.close.is_empty() && tail.starts_with(family.close) {
            self.pending = tail[family.close.len()..].to_owned();
        } else if !ended && !family.close.is_empty() && family.close.starts_with(tail) {
            // the closing marker may be arriving
            self.pending = tail.to_owned();
            return false;
        } else {
            // not a call: text again
            self.pending = tail.to_owned();
        }
        self.mode = Mode::Text;
        true
    }
}

/// One character of a call's object: kept, passed on (unless the family's calls are short
/// and rewritten whole), and the call closed when it closes the object.
fn push_element_char(
    out: &mut String,
    element: &mut String,
    depth: &mut u32,
    c: char,
    family: &JsonFamily,
) {
    element.push(c);
    if !family.short {
        out.push(c);
    }
    // only a closing bracket can end it: the scan is not rerun per character
    if matches!(c, '}' | ']') && json_end(element).is_some() {
        *depth = 0;
        if !family.short {
            out.push_str("</tool_call>");
        } else if let Some(call) = short_call(element) {
            out.push_str(&call);
        } else {
            out.push_str(element);
        }
    }
}
