//! The families whose calls name their arguments with key and value tags, rewritten to the
//! key-and-value form: GLM 4.x's `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>…
//! </tool_call>`, and Hy3's, whose tags carry `:opensource` (`<tool_call:opensource>NAME
//! <tool_sep:opensource>…`) inside a `<tool_calls:opensource>` block. Whitespace between the
//! tags is ignored; a value passes as written (the parser reads one that is JSON as JSON).

use super::super::template::ToolFormat;
use super::{Mode, NativeRewriter};

/// A family's tags.
#[derive(Debug)]
pub(super) struct TagFamily {
    call: &'static str,
    call_end: &'static str,
    /// What ends a call's name when its first key does not (Hy3's separator).
    name_end: Option<&'static str>,
    key: &'static str,
    key_end: &'static str,
    value: &'static str,
    value_end: &'static str,
    /// Other markers in text and what they become (reasoning's open and close), or dropped.
    text: &'static [(&'static str, &'static str)],
    /// The markers its models write as control tokens (kept for the rewriter).
    pub markers: &'static [&'static str],
}

/// The family of `format`, if its calls are key and value tags.
pub(super) fn family(format: ToolFormat) -> Option<&'static TagFamily> {
    static GLM: TagFamily = TagFamily {
        call: "<tool_call>",
        call_end: "</tool_call>",
        name_end: None,
        key: "<arg_key>",
        key_end: "</arg_key>",
        value: "<arg_value>",
        value_end: "</arg_value>",
        text: &[],
        markers: &[
            "<tool_call>",
            "</tool_call>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
            "<think>",
            "</think>",
        ],
    };
    static HY3: TagFamily = TagFamily {
        call: "<tool_call:opensource>",
        call_end: "</tool_call:opensource>",
        name_end: Some("<tool_sep:opensource>"),
        key: "<arg_key:opensource>",
        key_end: "</arg_key:opensource>",
        value: "<arg_value:opensource>",
        value_end: "</arg_value:opensource>",
        text: &[
            ("<think:opensource>", "<think>"),
            ("</think:opensource>", "</think>"),
            ("<tool_calls:opensource>", ""),
            ("</tool_calls:opensource>", ""),
        ],
        markers: &[
            "<tool_calls:opensource>",
            "</tool_calls:opensource>",
            "<tool_call:opensource>",
            "</tool_call:opensource>",
            "<tool_sep:opensource>",
            "<arg_key:opensource>",
            "</arg_key:opensource>",
            "<arg_value:opensource>",
            "</arg_value:opensource>",
            "<think:opensource>",
            "</think:opensource>",
        ],
    };
    match format {
        ToolFormat::Glm => Some(&GLM),
        ToolFormat::Hy3 => Some(&HY3),
        _ => None,
    }
}

impl NativeRewriter {
    pub(super) fn step_tags(&mut self, out: &mut String, ended: bool, tags: &TagFamily) -> bool {
        match self.mode {
            Mode::Text => self.tags_text(out, ended, tags),
            Mode::Name { .. } => self.tags_name(out, tags),
            Mode::Key { .. } => self.tags_key(out, tags),
            // between a key and its value, or after a value: tags decide, whitespace is dropped
            Mode::Params => self.tags_params(out, tags),
            Mode::Value => self.tags_value(out, tags),
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }

    /// Text between calls: a call's opening, or a text marker rewritten.
    fn tags_text(&mut self, out: &mut String, ended: bool, tags: &TagFamily) -> bool {
        let mut markers = vec![tags.call];
        markers.extend(tags.text.iter().map(|(m, _)| *m));
        match self.find(&markers) {
            Ok((at, i)) => {
                let before: String = self.pending.drain(..at).collect();
                self.pending.drain(..markers[i].len());
                if i == 0 {
                    out.push_str(&before);
                    self.mode = Mode::Name { raw: String::new() };
                } else {
                    let becomes = tags.text[i - 1].1;
                    // a dropped block marker takes the newlines around it along
                    out.push_str(if becomes.is_empty() {
                        before.trim_end_matches('\n')
                    } else {
                        &before
                    });
                    out.push_str(becomes);
                }
                true
            }
            Err(hold) => {
                self.pass(out, hold, ended);
                false
            }
        }
    }

    /// A call's name, up to its first key, its end, or the family's separator.
    fn tags_name(&mut self, out: &mut String, tags: &TagFamily) -> bool {
        let mut markers = vec![tags.key, tags.call_end];
        markers.extend(tags.name_end);
        // the marker may still be arriving: wait for it with the text whole
        let Ok((at, i)) = self.find(&markers) else {
            return false;
        };
        let mut name: String = self.pending.drain(..at).collect();
        self.pending.drain(..markers[i].len());
        if let Mode::Name { raw } = &self.mode {
            name.insert_str(0, raw);
        }
        out.push_str(&format!("<tool_call><function={}>", name.trim()));
        self.mode = match i {
            0 => Mode::Key { raw: String::new() },
            1 => {
                out.push_str("</function></tool_call>");
                Mode::Text
            }
            _ => Mode::Params,
        };
        true
    }

    /// A parameter's key, up to its end.
    fn tags_key(&mut self, out: &mut String, tags: &TagFamily) -> bool {
        match self.find(&[tags.key_end]) {
            Ok((at, _)) => {
                let mut key: String = self.pending.drain(..at).collect();
                self.pending.drain(..tags.key_end.len());
                if let Mode::Key { raw } = &self.mode {
                    key.insert_str(0, raw);
                }
                out.push_str(&format!("<parameter={}>", key.trim()));
                self.mode = Mode::Params;
                true
            }
            // the marker may still be arriving: wait for it with the text whole
            Err(_) => false,
        }
    }

    /// Between a key and its value, or after a value: a value, a key, or the call's end.
    fn tags_params(&mut self, out: &mut String, tags: &TagFamily) -> bool {
        match self.find(&[tags.value, tags.key, tags.call_end]) {
            Ok((at, i)) => {
                self.pending.drain(..at);
                match i {
                    0 => {
                        self.pending.drain(..tags.value.len());
                        self.mode = Mode::Value;
                    }
                    1 => {
                        self.pending.drain(..tags.key.len());
                        self.mode = Mode::Key { raw: String::new() };
                    }
                    _ => {
                        self.pending.drain(..tags.call_end.len());
                        out.push_str("</function></tool_call>");
                        self.mode = Mode::Text;
                    }
                }
                true
            }
            Err(hold) => {
                self.take_unheld(hold);
                false
            }
        }
    }

    /// A parameter's value, passed as written up to its end.
    fn tags_value(&mut self, out: &mut String, tags: &TagFamily) -> bool {
        match self.find(&[tags.value_end]) {
            Ok((at, _)) => {
                out.push_str(&self.pending[..at]);
                self.pending.drain(..at + tags.value_end.len());
                out.push_str("</parameter>");
                self.mode = Mode::Params;
                true
            }
            Err(hold) => {
                self.pass(out, hold, false);
                false
            }
        }
    }
}
