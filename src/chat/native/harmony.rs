//! Harmony, gpt-oss's message format, rewritten for the parser.

use super::{Body, JSON_CALL_CLOSE, Mode, NativeRewriter, json_call_open};

impl NativeRewriter {
    /// Harmony (gpt-oss): messages `<|start|>ROLE<|channel|>CHANNEL<|message|>BODY<|end|>`;
    /// `analysis` is reasoning, `final` (or `commentary` without a recipient) content, and a
    /// message to `functions.NAME` (in the role or the channel header) a call whose body is
    /// its JSON arguments, ended by `<|call|>` (end of generation).
    pub(super) fn step_harmony(&mut self, out: &mut String, _ended: bool) -> bool {
        const BETWEEN: [&str; 5] = [
            "<|channel|>",
            "<|start|>",
            "<|end|>",
            "<|call|>",
            "<|return|>",
        ];
        const BODY_END: [&str; 4] = ["<|end|>", "<|call|>", "<|return|>", "<|start|>"];
        match self.mode {
            Mode::Text => self.harmony_between(&BETWEEN),
            Mode::Header { .. } => self.harmony_header(out),
            Mode::Body(_) => self.harmony_body(out, &BODY_END),
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }

    /// Between messages: a role header up to the channel's marker, or a message's end.
    fn harmony_between(&mut self, between: &[&str; 5]) -> bool {
        match self.find(between) {
            Ok((at, i)) => {
                // text between messages: the role header (`assistant`, ` to=functions.f`)
                let header: String = self.pending.drain(..at).collect();
                self.seen = true;
                if let Some(to) = recipient(&header) {
                    self.recipient = Some(to);
                }
                self.pending.drain(..between[i].len());
                match i {
                    0 => self.mode = Mode::Header { raw: String::new() },
                    _ => self.recipient = None,
                }
                true
            }
            // text between messages is a role header, never content: kept whole until
            // its message starts (a model that ignores the format gets it at the end)
            Err(_) => false,
        }
    }

    /// A channel header up to `<|message|>`: what the message's body is (a call, reasoning or
    /// content).
    fn harmony_header(&mut self, out: &mut String) -> bool {
        // the marker may still be arriving: wait for it with the text whole
        let Ok((at, _)) = self.find(&["<|message|>"]) else {
            return false;
        };
        let mut header: String = self.pending.drain(..at).collect();
        self.pending.drain(.."<|message|>".len());
        if let Mode::Header { raw } = &self.mode {
            header.insert_str(0, raw);
        }
        let to = recipient(&header).or_else(|| self.recipient.take());
        let channel = header.split_whitespace().next().unwrap_or("");
        self.mode = Mode::Body(match to {
            Some(name) => {
                out.push_str(&json_call_open(&name));
                Body::Call {
                    json: String::new(),
                }
            }
            None if channel == "analysis" => {
                out.push_str("<think>");
                Body::Reasoning
            }
            None => Body::Content,
        });
        true
    }

    /// A message's body, passed on up to its end (a call's kept to read its JSON).
    fn harmony_body(&mut self, out: &mut String, body_end: &[&str; 4]) -> bool {
        match self.find(body_end) {
            Ok((at, i)) => {
                let text: String = self.pending.drain(..at).collect();
                self.pending.drain(..body_end[i].len());
                out.push_str(&text);
                match std::mem::replace(&mut self.mode, Mode::Text) {
                    Mode::Body(Body::Reasoning) => out.push_str("</think>"),
                    Mode::Body(Body::Call { .. }) => out.push_str(JSON_CALL_CLOSE),
                    _ => {}
                }
                self.recipient = None;
                true
            }
            Err(hold) => {
                let text = self.pass(out, hold, false);
                if let Mode::Body(Body::Call { json }) = &mut self.mode {
                    json.push_str(&text);
                }
                false
            }
        }
    }
}

/// `to=functions.NAME` in a harmony header (other recipients are not ours).
fn recipient(header: &str) -> Option<String> {
    let at = header.find("to=functions.")?;
    let name: String = header[at + "to=functions.".len()..]
        .chars()
        .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == '-')
        .collect();
    (!name.is_empty()).then_some(name)
}
