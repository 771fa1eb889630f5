//! Control-token text in a model's output. The worker marks a sampled control token's text
//! (`protocol::control_text`); here a marked token that is one of the loaded format's markers
//! (`[TOOL_CALLS]`, `<|channel|>`, ...) becomes its plain text for the format's parser, and any
//! other control token is dropped, so clients never see one in content. A mark that has not
//! closed yet (text may arrive split anywhere) is held back until it does.

/// Opens a control token's text: the mark the worker writes (`protocol::control_text`, the
/// same characters; chat imports nothing of the app, and `tests/it/engine_fake.rs` checks
/// the two agree).
pub const OPEN: char = '\u{F8F4}';
/// Closes it.
pub const CLOSE: char = '\u{F8F5}';

#[derive(Debug, Clone, Default)]
pub struct ControlFilter {
    /// The format's markers: kept, as plain text.
    keep: &'static [&'static str],
    /// An open mark and what followed it, waiting for its close.
    held: String,
}

impl ControlFilter {
    pub fn new(keep: &'static [&'static str]) -> Self {
        Self {
            keep,
            held: String::new(),
        }
    }

    /// `text` with marked control tokens resolved: kept markers as plain text, others gone.
    pub fn push(&mut self, text: &str) -> String {
        if self.held.is_empty() && !text.contains(OPEN) {
            return text.to_owned();
        }
        self.held.push_str(text);
        let mut out = String::with_capacity(self.held.len());
        let mut rest = self.held.as_str();
        while let Some(open) = rest.find(OPEN) {
            out.push_str(&rest[..open]);
            let inner_at = open + OPEN.len_utf8();
            let Some(close) = rest[inner_at..].find(CLOSE) else {
                rest = &rest[open..];
                let held = rest.to_owned();
                self.held = held;
                return out;
            };
            let inner = &rest[inner_at..inner_at + close];
            if self.keep.contains(&inner) {
                out.push_str(inner);
            }
            rest = &rest[inner_at + close + CLOSE.len_utf8()..];
        }
        out.push_str(rest);
        self.held.clear();
        out
    }

    /// The output ended: an unclosed mark is dropped (a control token's text never reaches
    /// content).
    pub fn finish(&mut self) {
        self.held.clear();
    }
}

/// `text` with the marks removed and every control token's text kept (for raw output such as
/// `strata-desk generate`).
pub fn unmarked(text: &str) -> String {
    text.chars().filter(|c| *c != OPEN && *c != CLOSE).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn marked(token: &str) -> String {
        format!("{OPEN}{token}{CLOSE}")
    }

    #[test]
    fn a_format_marker_becomes_plain_text_and_other_control_tokens_vanish() {
        let mut filter = ControlFilter::new(&["[TOOL_CALLS]"]);
        let text = format!("a{}b{}c", marked("[TOOL_CALLS]"), marked("<|im_start|>"));
        assert_eq!(filter.push(&text), "a[TOOL_CALLS]bc");
    }

    #[test]
    fn a_mark_split_anywhere_gives_the_same_text() {
        let text = format!("x{}y{}z", marked("<|channel|>"), marked("<|junk|>"));
        let whole = ControlFilter::new(&["<|channel|>"]).push(&text);
        assert_eq!(whole, "x<|channel|>yz");
        for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            let mut filter = ControlFilter::new(&["<|channel|>"]);
            let mut out = filter.push(&text[..cut]);
            out.push_str(&filter.push(&text[cut..]));
            assert_eq!(out, whole, "split at {cut}");
        }
    }

    #[test]
    fn an_unclosed_mark_at_the_end_never_reaches_content() {
        let mut filter = ControlFilter::new(&[]);
        assert_eq!(filter.push(&format!("ok{OPEN}<|partial")), "ok");
        filter.finish();
        assert_eq!(filter.push("next"), "next");
    }

    #[test]
    fn raw_output_keeps_every_control_token_s_text() {
        assert_eq!(
            unmarked(&format!("a{}b", marked("<|im_end|>"))),
            "a<|im_end|>b"
        );
    }
}
