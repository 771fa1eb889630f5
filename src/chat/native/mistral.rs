//! Mistral's `[TOOL_CALLS]` forms, rewritten for the parser.

use super::{JSON_CALL_CLOSE, Mode, NativeRewriter, json_call_open, json_end};

impl NativeRewriter {
    /// Mistral: `[TOOL_CALLS]name[ARGS]{...}` (Devstral, Ministral), with `[CALL_ID]id` before
    /// `[ARGS]` (Small 3.2), or `[TOOL_CALLS][{"name", "arguments", "id"}, ...]` (Nemo);
    /// `[THINK]…[/THINK]` is reasoning.
    pub(super) fn step_mistral(&mut self, out: &mut String, ended: bool) -> bool {
        const MARKERS: [&str; 3] = ["[TOOL_CALLS]", "[THINK]", "[/THINK]"];
        match &mut self.mode {
            Mode::Text => match self.find(&MARKERS) {
                Ok((at, i)) => {
                    out.push_str(&self.pending[..at]);
                    self.pending.drain(..at + MARKERS[i].len());
                    match i {
                        0 => self.mode = Mode::Name { raw: String::new() },
                        1 => out.push_str("<think>"),
                        _ => out.push_str("</think>"),
                    }
                    true
                }
                Err(hold) => {
                    self.pass(out, hold, ended);
                    false
                }
            },
            Mode::Name { raw } => {
                raw.push_str(&std::mem::take(&mut self.pending));
                if raw.trim_start().starts_with('[') {
                    let element = raw.trim_start()[1..].to_owned();
                    self.mode = Mode::Array {
                        element: String::new(),
                        depth: 0,
                    };
                    self.pending = element;
                    return true;
                }
                let Some(args_at) = raw.find("[ARGS]") else {
                    return false;
                };
                let name = raw[..args_at]
                    .split("[CALL_ID]")
                    .next()
                    .unwrap_or("")
                    .to_owned();
                self.pending = raw[args_at + "[ARGS]".len()..].to_owned();
                out.push_str(&json_call_open(&name));
                self.mode = Mode::Args {
                    body: String::new(),
                };
                true
            }
            // the arguments end where their JSON object closes
            Mode::Args { .. } => self.args_to_json_end(out, JSON_CALL_CLOSE),
            Mode::Array { element, depth } => {
                let rest = std::mem::take(&mut self.pending);
                for (i, c) in rest.char_indices() {
                    if *depth == 0 {
                        match c {
                            '{' => {
                                *depth = 1;
                                element.clear();
                                element.push(c);
                                out.push_str("<tool_call>{");
                            }
                            ']' => {
                                self.pending = rest[i + 1..].to_owned();
                                self.mode = Mode::Text;
                                return true;
                            }
                            _ => {} // commas and whitespace between calls
                        }
                        continue;
                    }
                    element.push(c);
                    out.push(c);
                    // only a closing bracket can end it: the scan is not rerun per character
                    if matches!(c, '}' | ']') && json_end(element).is_some() {
                        *depth = 0;
                        out.push_str("</tool_call>");
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
}
