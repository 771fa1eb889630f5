//! Mistral's `[TOOL_CALLS]` forms, rewritten for the parser.

use super::{JSON_CALL_CLOSE, Mode, NativeRewriter, json_call_open, json_end};

impl NativeRewriter {
    /// Mistral: `[TOOL_CALLS]name[ARGS]{...}` (Devstral, Ministral), with `[CALL_ID]id` before
    /// `[ARGS]` (Small 3.2), or `[TOOL_CALLS][{"name", "arguments", "id"}, ...]` (Nemo);
    /// `[THINK]…[/THINK]` is reasoning.
    pub(super) fn step_mistral(&mut self, out: &mut String, ended: bool) -> bool {
        const MARKERS: [&str; 3] = ["[TOOL_CALLS]", "[THINK]", "[/THINK]"];
        match &mut self.mode {
            Mode::Text => self.mistral_text(out, ended, &MARKERS),
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
                match stream_array(&rest, element, depth, out) {
                    Some(after) => {
                        self.pending = rest[after..].to_owned();
                        self.mode = Mode::Text;
                        true
                    }
                    None => false,
                }
            }
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }

    /// Text between calls: the calls' marker, or reasoning's rewritten.
    fn mistral_text(&mut self, out: &mut String, ended: bool, markers: &[&str; 3]) -> bool {
        match self.find(markers) {
            Ok((at, i)) => {
                out.push_str(&self.pending[..at]);
                self.pending.drain(..at + markers[i].len());
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
        }
    }
}

/// Nemo's array of calls: each object passed on as a call as it streams; where the array
/// closes in `rest`, the place after its `]`.
fn stream_array(
    rest: &str,
    element: &mut String,
    depth: &mut u32,
    out: &mut String,
) -> Option<usize> {
    for (i, c) in rest.char_indices() {
        if *depth == 0 {
            match c {
                '{' => {
                    *depth = 1;
                    element.clear();
                    element.push(c);
                    out.push_str("<tool_call>{");
                }
                ']' => return Some(i + 1),
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
    None
}
