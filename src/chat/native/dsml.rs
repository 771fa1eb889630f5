//! DeepSeek V3.2's DSML calls (V4 names the block `tool_calls`), rewritten to the key-and-value
//! form: `<｜DSML｜invoke name="f">` opens a call, each `<｜DSML｜parameter name="k"
//! string="true|false">v</｜DSML｜parameter>` is one argument (a string as written, else JSON).

use super::{Mode, NativeRewriter};

const DSML: &str = "｜DSML｜";

impl NativeRewriter {
    pub(super) fn step_dsml(&mut self, out: &mut String, ended: bool) -> bool {
        let invoke = format!("<{DSML}invoke ");
        let invoke_end = format!("</{DSML}invoke>");
        let param = format!("<{DSML}parameter ");
        let param_end = format!("</{DSML}parameter>");
        let blocks = [
            format!("<{DSML}function_calls>"),
            format!("</{DSML}function_calls>"),
            format!("<{DSML}tool_calls>"),
            format!("</{DSML}tool_calls>"),
        ];
        match &mut self.mode {
            Mode::Text => {
                let mut markers: Vec<&str> = blocks.iter().map(String::as_str).collect();
                markers.push(&invoke);
                match self.find(&markers) {
                    Ok((at, i)) => {
                        // text before a block's opening is content; newlines around tags are not
                        let before: String = self.pending.drain(..at).collect();
                        let before = if before.trim().is_empty() {
                            ""
                        } else if i == 1 || i == 3 {
                            before.as_str()
                        } else {
                            before.trim_end()
                        };
                        out.push_str(before);
                        self.pending.drain(..markers[i].len());
                        if i == 4 {
                            self.mode = Mode::Header { raw: String::new() };
                        }
                        true
                    }
                    Err(hold) => {
                        self.pass(out, hold, ended);
                        false
                    }
                }
            }
            // an invoke's or a parameter's attributes, up to `>`
            Mode::Header { .. } | Mode::Key { .. } => {
                let Some(at) = self.pending.find('>') else {
                    return false;
                };
                let attributes: String = self.pending.drain(..=at).collect();
                let name = attribute(&attributes, "name").unwrap_or_default();
                if matches!(self.mode, Mode::Header { .. }) {
                    out.push_str(&format!("<tool_call><function={name}>"));
                    self.mode = Mode::Params;
                } else {
                    out.push_str(&format!("<parameter={name}>"));
                    let quoted = attribute(&attributes, "string").as_deref() != Some("false");
                    if quoted {
                        out.push('"');
                    }
                    self.mode = Mode::Quoted { quoted };
                }
                true
            }
            Mode::Params => match self.find(&[&param, &invoke_end]) {
                Ok((at, i)) => {
                    self.pending.drain(..at);
                    if i == 0 {
                        self.pending.drain(..param.len());
                        self.mode = Mode::Key { raw: String::new() };
                    } else {
                        self.pending.drain(..invoke_end.len());
                        out.push_str("</function></tool_call>");
                        self.mode = Mode::Text;
                    }
                    true
                }
                Err(hold) => {
                    let cut = self.pending.len() - hold;
                    self.pending.drain(..cut);
                    false
                }
            },
            Mode::Quoted { quoted } => {
                let quoted = *quoted;
                let (text, done) = match self.find(&[&param_end]) {
                    Ok((at, _)) => {
                        let text: String = self.pending.drain(..at).collect();
                        self.pending.drain(..param_end.len());
                        (text, true)
                    }
                    Err(hold) => {
                        let cut = self.pending.len() - hold;
                        (self.pending.drain(..cut).collect(), false)
                    }
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
                    out.push_str("</parameter>");
                    self.mode = Mode::Params;
                }
                done
            }
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }
}

/// `key="value"` among a tag's attributes.
fn attribute(attributes: &str, key: &str) -> Option<String> {
    let at = attributes.find(&format!("{key}=\""))? + key.len() + 2;
    let end = attributes[at..].find('"')?;
    Some(attributes[at..at + end].to_owned())
}
