//! The families whose call is a name and JSON arguments between markers, rewritten to the
//! canonical JSON form:
//!
//! - Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0
//!   <|tool_call_argument_begin|>{…}<|tool_call_end|>…<|tool_calls_section_end|>`;
//! - DeepSeek V3.1: `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{…}
//!   <｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`;
//! - DeepSeek R1 (llama.cpp's template): the same block, each call `<｜tool▁call▁begin｜>function
//!   <｜tool▁sep｜>NAME\n```json\n{…}\n```<｜tool▁call▁end｜>`;
//! - Solar Open: `<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{…}
//!   <|tool_call:end|>…<|calls|>`, reasoning `<|think|>…<|end|><|begin|>assistant`;
//! - functionary v3.1: `<function=NAME>{…}</function>`.

use super::super::template::ToolFormat;
use super::{JSON_CALL_CLOSE, Mode, NativeRewriter, json_call_open};

/// How a family writes its calls.
#[derive(Debug)]
pub(super) struct SectionFamily {
    /// Other markers in text and what they become (reasoning's open and close), or dropped.
    text: &'static [(&'static str, &'static str)],
    /// What opens a call.
    call: &'static str,
    /// What ends the call's header (its name, and what the family writes with it).
    separator: &'static str,
    /// The name follows this marker in the header (what precedes it is an id or a type).
    name_after: Option<&'static str>,
    /// What ends a call's arguments, the first found of these.
    call_end: &'static [&'static str],
    /// The markers its models write as control tokens (kept for the rewriter).
    pub markers: &'static [&'static str],
}

static KIMI: SectionFamily = SectionFamily {
    text: &[
        ("<|tool_calls_section_begin|>", ""),
        ("<|tool_calls_section_end|>", ""),
    ],
    call: "<|tool_call_begin|>",
    separator: "<|tool_call_argument_begin|>",
    name_after: None,
    call_end: &["<|tool_call_end|>"],
    markers: &[
        "<|tool_calls_section_begin|>",
        "<|tool_calls_section_end|>",
        "<|tool_call_begin|>",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<think>",
        "</think>",
    ],
};
static DEEPSEEK: SectionFamily = SectionFamily {
    text: &[("<｜tool▁calls▁begin｜>", ""), ("<｜tool▁calls▁end｜>", "")],
    call: "<｜tool▁call▁begin｜>",
    separator: "<｜tool▁sep｜>",
    name_after: None,
    call_end: &["<｜tool▁call▁end｜>"],
    markers: &[
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁calls▁end｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<think>",
        "</think>",
    ],
};
static DEEPSEEK_R1: SectionFamily = SectionFamily {
    separator: "```json",
    name_after: Some("<｜tool▁sep｜>"),
    call_end: &[
        "```<｜tool▁call▁end｜>",
        "```\n<｜tool▁call▁end｜>",
        "<｜tool▁call▁end｜>",
    ],
    ..DEEPSEEK
};
static SOLAR: SectionFamily = SectionFamily {
    text: &[
        ("<|think|>", "<think>"),
        ("<|end|><|begin|>assistant", "</think>"),
        ("<|content|>", ""),
        ("<|tool_calls|>", ""),
        ("<|calls|>", ""),
    ],
    call: "<|tool_call:begin|>",
    separator: "<|tool_call:args|>",
    name_after: Some("<|tool_call:name|>"),
    call_end: &["<|tool_call:end|>"],
    markers: &[
        "<|think|>",
        "<|end|>",
        "<|begin|>",
        "<|content|>",
        "<|tool_calls|>",
        "<|calls|>",
        "<|tool_call:begin|>",
        "<|tool_call:name|>",
        "<|tool_call:args|>",
        "<|tool_call:end|>",
    ],
};
static FUNCTIONARY: SectionFamily = SectionFamily {
    text: &[],
    call: "<function=",
    separator: ">",
    name_after: None,
    call_end: &["</function>"],
    markers: &[],
};

/// The family of `format`, if its calls are a name and JSON arguments between markers.
pub(super) fn family(format: ToolFormat) -> Option<&'static SectionFamily> {
    match format {
        ToolFormat::Kimi => Some(&KIMI),
        ToolFormat::DeepSeek => Some(&DEEPSEEK),
        ToolFormat::DeepSeekR1 => Some(&DEEPSEEK_R1),
        ToolFormat::Solar => Some(&SOLAR),
        ToolFormat::Functionary => Some(&FUNCTIONARY),
        _ => None,
    }
}

/// A call's name from its header: after `name_after`, without Kimi's `functions.` and `:INDEX`.
fn name_of(header: &str, name_after: Option<&str>) -> String {
    let name = match name_after.and_then(|m| header.rsplit_once(m)) {
        Some((_, name)) => name,
        None => header,
    };
    let name = name.trim();
    let name = name.strip_prefix("functions.").unwrap_or(name);
    let name = name.rsplit_once(':').map_or(name, |(n, i)| {
        if i.chars().all(|c| c.is_ascii_digit()) {
            n
        } else {
            name
        }
    });
    name.to_owned()
}

impl NativeRewriter {
    pub(super) fn step_sections(
        &mut self,
        out: &mut String,
        ended: bool,
        family: &SectionFamily,
    ) -> bool {
        match &mut self.mode {
            Mode::Text => match self.text_until(out, ended, family.call, family.text) {
                Some(opened) => {
                    if opened {
                        self.mode = Mode::Name { raw: String::new() };
                    }
                    true
                }
                None => false,
            },
            Mode::Name { .. } => {
                let mut markers = vec![family.separator];
                markers.extend(family.call_end);
                match self.find(&markers) {
                    Ok((at, i)) => {
                        let mut header: String = self.pending.drain(..at).collect();
                        self.pending.drain(..markers[i].len());
                        if let Mode::Name { raw } = &self.mode {
                            header.insert_str(0, raw);
                        }
                        out.push_str(&json_call_open(&name_of(&header, family.name_after)));
                        if i == 0 {
                            self.mode = Mode::Args {
                                body: String::new(),
                            };
                        } else {
                            // the call ended before its arguments began: it has none
                            out.push_str("{}");
                            out.push_str(JSON_CALL_CLOSE);
                            self.mode = Mode::Text;
                        }
                        true
                    }
                    // the marker may still be arriving: wait for it with the text whole
                    Err(_) => false,
                }
            }
            Mode::Args { .. } => match self.find(family.call_end) {
                Ok((at, i)) => {
                    let args: String = self.pending.drain(..at).collect();
                    self.pending.drain(..family.call_end[i].len());
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
}
