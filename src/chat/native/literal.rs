//! The families whose calls are written as literals rather than JSON, read whole at their
//! closing marker and rewritten to canonical JSON calls:
//!
//! - Gemma 4: `<|tool_call>call:NAME{key:<|"|>text<|"|>,n:2}<tool_call|>` (keys bare, strings
//!   between `<|"|>` marks and never escaped), reasoning in `<|channel>thought…<channel|>`;
//! - LFM2.5: `<|tool_call_start|>[f(a='x', n=2), g()]<|tool_call_end|>`, Python calls with
//!   Python literals (`'…'` strings, `True`, `None`, lists and dicts).
//!
//! JSON is read too (a grammar writes the arguments as JSON). A block that is no literal the
//! reader knows passes as content. Calls arrive when their block closes; a block cut by the
//! end of the output is reported cut.
//!
//! Written by hand: no crate reads Gemma's marks, and these literals are a small subset of
//! Python's.

use super::super::template::ToolFormat;
use super::{Mode, NativeRewriter, json_call_open};
use serde_json::{Map, Value};

/// How a family writes its calls.
#[derive(Debug)]
pub(super) struct LiteralFamily {
    open: &'static str,
    close: &'static str,
    syntax: Syntax,
    /// Other markers in text and what they become (reasoning's open and close).
    text: &'static [(&'static str, &'static str)],
    /// The markers its models write as control tokens (kept for the rewriter).
    pub markers: &'static [&'static str],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Syntax {
    /// `call:NAME{…}`, one call per block.
    Gemma,
    /// `[NAME(k=v, …), …]`.
    Python,
}

const GEMMA_QUOTE: &str = "<|\"|>";

/// The family of `format`, if its calls are literals.
pub(super) fn family(format: ToolFormat) -> Option<&'static LiteralFamily> {
    static GEMMA4: LiteralFamily = LiteralFamily {
        open: "<|tool_call>",
        close: "<tool_call|>",
        syntax: Syntax::Gemma,
        text: &[("<|channel>thought", "<think>"), ("<channel|>", "</think>")],
        markers: &[
            "<|tool_call>",
            "<tool_call|>",
            GEMMA_QUOTE,
            "<|channel>",
            "<channel|>",
        ],
    };
    static LFM2: LiteralFamily = LiteralFamily {
        open: "<|tool_call_start|>",
        close: "<|tool_call_end|>",
        syntax: Syntax::Python,
        text: &[],
        markers: &[
            "<|tool_call_start|>",
            "<|tool_call_end|>",
            "<think>",
            "</think>",
        ],
    };
    match format {
        ToolFormat::Gemma4 => Some(&GEMMA4),
        ToolFormat::Lfm2 => Some(&LFM2),
        _ => None,
    }
}

impl NativeRewriter {
    pub(super) fn step_literal(
        &mut self,
        out: &mut String,
        ended: bool,
        family: &LiteralFamily,
    ) -> bool {
        match &mut self.mode {
            Mode::Text => match self.text_until(out, ended, family.open, family.text) {
                Some(opened) => {
                    if opened {
                        self.mode = Mode::Literal {
                            body: String::new(),
                        };
                    }
                    true
                }
                None => false,
            },
            Mode::Literal { body } => {
                let Some(at) = self.pending.find(family.close) else {
                    return false;
                };
                body.push_str(&self.pending[..at]);
                let body = std::mem::take(body);
                self.pending.drain(..at + family.close.len());
                match calls(&body, family.syntax) {
                    Some(calls) => {
                        for (name, arguments) in calls {
                            out.push_str(&format!(
                                "<tool_call>{}</tool_call>",
                                serde_json::json!({"name": name, "arguments": arguments})
                            ));
                        }
                    }
                    // not a call: the text as it was written
                    None => {
                        out.push_str(family.open);
                        out.push_str(&body);
                        out.push_str(family.close);
                    }
                }
                self.mode = Mode::Text;
                true
            }
            _ => {
                self.mode = Mode::Text;
                true
            }
        }
    }
}

/// What a block cut by the end of the output becomes: its first call left open when its
/// name was written (the parser reports the call cut), else the text as written.
pub(super) fn cut_block(format: ToolFormat, body: &str) -> String {
    let Some(family) = family(format) else {
        return body.to_owned();
    };
    let trimmed = body.trim_start();
    let head = match family.syntax {
        Syntax::Gemma => trimmed
            .strip_prefix("call:")
            .and_then(|r| r.split_once('{')),
        Syntax::Python => trimmed.strip_prefix('[').and_then(|r| r.split_once('(')),
    };
    match head.map(|(name, _)| name.trim()) {
        // its arguments opened, so the parser has started the call
        Some(name) if super::super::valid_name(name) => json_call_open(name) + "{",
        _ => format!("{}{body}", family.open),
    }
}

/// The calls (name, arguments object) a block holds, or None when it is not calls.
fn calls(body: &str, syntax: Syntax) -> Option<Vec<(String, Value)>> {
    let mut reader = Reader {
        text: body.trim(),
        at: 0,
        syntax,
    };
    let calls = match syntax {
        Syntax::Gemma => {
            reader.expect("call:")?;
            let name = reader.name()?;
            let arguments = reader.value()?;
            arguments.is_object().then_some(vec![(name, arguments)])?
        }
        Syntax::Python => {
            reader.expect("[")?;
            let mut calls = Vec::new();
            while !reader.next_is("]") {
                if !calls.is_empty() {
                    reader.expect(",")?;
                }
                calls.push(reader.python_call()?);
            }
            reader.expect("]")?;
            calls
        }
    };
    reader.skip_space();
    (reader.at == reader.text.len() && !calls.is_empty()).then_some(calls)
}

struct Reader<'a> {
    text: &'a str,
    at: usize,
    syntax: Syntax,
}

impl<'a> Reader<'a> {
    fn rest(&self) -> &'a str {
        &self.text[self.at..]
    }

    fn skip_space(&mut self) {
        let rest = self.rest();
        self.at += rest.len() - rest.trim_start().len();
    }

    /// Whether `token` comes next (after whitespace).
    fn next_is(&mut self, token: &str) -> bool {
        self.skip_space();
        self.rest().starts_with(token)
    }

    fn expect(&mut self, token: &str) -> Option<()> {
        self.next_is(token).then(|| self.at += token.len())
    }

    /// A name: letters, digits, `_`, `-` and `.`.
    fn name(&mut self) -> Option<String> {
        self.skip_space();
        let rest = self.rest();
        let len = rest
            .find(|c: char| !(c.is_alphanumeric() || "_-.".contains(c)))
            .unwrap_or(rest.len());
        self.at += len;
        (len > 0).then(|| rest[..len].to_owned())
    }

    /// `NAME(key=value, …)`.
    fn python_call(&mut self) -> Option<(String, Value)> {
        let name = self.name()?;
        self.expect("(")?;
        let mut arguments = Map::new();
        while !self.next_is(")") {
            if !arguments.is_empty() {
                self.expect(",")?;
                if self.next_is(")") {
                    break;
                }
            }
            let key = self.name()?;
            self.expect("=")?;
            arguments.insert(key, self.value()?);
        }
        self.expect(")")?;
        Some((name, Value::Object(arguments)))
    }

    fn value(&mut self) -> Option<Value> {
        self.skip_space();
        let rest = self.rest();
        if self.syntax == Syntax::Gemma && rest.starts_with(GEMMA_QUOTE) {
            let end = rest[GEMMA_QUOTE.len()..].find(GEMMA_QUOTE)?;
            self.at += end + 2 * GEMMA_QUOTE.len();
            return Some(Value::from(
                &rest[GEMMA_QUOTE.len()..GEMMA_QUOTE.len() + end],
            ));
        }
        match rest.chars().next()? {
            '"' => self.json_string().map(Value::from),
            '\'' if self.syntax == Syntax::Python => self.quoted('\'').map(Value::from),
            '{' => self.object(),
            '[' | '(' => self.array(),
            _ => self.scalar(),
        }
    }

    /// A JSON string (what a grammar writes), read by serde_json: every escape, surrogate
    /// pairs included.
    fn json_string(&mut self) -> Option<String> {
        let rest = self.rest();
        let mut escaped = false;
        let end = rest.char_indices().skip(1).find_map(|(i, c)| match c {
            _ if escaped => {
                escaped = false;
                None
            }
            '\\' => {
                escaped = true;
                None
            }
            '"' => Some(i),
            _ => None,
        })?;
        let text = serde_json::from_str(&rest[..=end]).ok()?;
        self.at += end + 1;
        Some(text)
    }

    /// A Python string between `quote`s, with backslash escapes.
    fn quoted(&mut self, quote: char) -> Option<String> {
        let mut out = String::new();
        let mut chars = self.rest().char_indices().skip(1);
        while let Some((i, c)) = chars.next() {
            match c {
                c if c == quote => {
                    self.at += i + 1;
                    return Some(out);
                }
                '\\' => {
                    let (_, e) = chars.next()?;
                    match e {
                        'n' => out.push('\n'),
                        't' => out.push('\t'),
                        'r' => out.push('\r'),
                        'b' => out.push('\u{8}'),
                        'f' => out.push('\u{c}'),
                        'u' => {
                            let hex: String = (0..4)
                                .filter_map(|_| chars.next())
                                .map(|(_, h)| h)
                                .collect();
                            out.push(char::from_u32(u32::from_str_radix(&hex, 16).ok()?)?);
                        }
                        other => out.push(other),
                    }
                }
                c => out.push(c),
            }
        }
        None
    }

    /// `{key: value, …}`: keys quoted, or bare in Gemma's form.
    fn object(&mut self) -> Option<Value> {
        self.expect("{")?;
        let mut object = Map::new();
        while !self.next_is("}") {
            if !object.is_empty() {
                self.expect(",")?;
            }
            let key = match self.value_if_string() {
                Some(key) => key,
                None if self.syntax == Syntax::Gemma => self.name()?,
                None => return None,
            };
            self.expect(":")?;
            object.insert(key, self.value()?);
        }
        self.expect("}")?;
        Some(Value::Object(object))
    }

    fn value_if_string(&mut self) -> Option<String> {
        self.skip_space();
        let rest = self.rest();
        let quoted = rest.starts_with('"')
            || rest.starts_with(GEMMA_QUOTE) && self.syntax == Syntax::Gemma
            || rest.starts_with('\'') && self.syntax == Syntax::Python;
        match quoted.then(|| self.value())?? {
            Value::String(s) => Some(s),
            _ => None,
        }
    }

    /// `[value, …]` (a Python tuple's parentheses too).
    fn array(&mut self) -> Option<Value> {
        let close = if self.next_is("(") { ")" } else { "]" };
        self.at += 1;
        let mut items = Vec::new();
        while !self.next_is(close) {
            if !items.is_empty() {
                self.expect(",")?;
                if self.next_is(close) {
                    break;
                }
            }
            items.push(self.value()?);
        }
        self.expect(close)?;
        Some(Value::Array(items))
    }

    /// A number, a boolean or null (Python's spellings too).
    fn scalar(&mut self) -> Option<Value> {
        let rest = self.rest();
        let len = rest
            .find(|c: char| c.is_whitespace() || ",:}])".contains(c))
            .unwrap_or(rest.len());
        let word = &rest[..len];
        let value = match word {
            "true" | "True" => Value::Bool(true),
            "false" | "False" => Value::Bool(false),
            "null" | "None" => Value::Null,
            _ => Value::Number(word.parse().ok()?),
        };
        self.at += len;
        Some(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn gemma_s_marks_bare_keys_and_nested_values_read_as_json() {
        let body =
            "call:edit{path:<|\"|>a \"b\".rs<|\"|>,lines:[1,2],opts:{dry:true,note:null},n:-2.5}";
        assert_eq!(
            calls(body, Syntax::Gemma),
            Some(vec![(
                "edit".to_owned(),
                json!({"path": "a \"b\".rs", "lines": [1, 2], "opts": {"dry": true, "note": null}, "n": -2.5})
            )])
        );
        // the JSON a grammar writes reads the same
        assert_eq!(
            calls("call:f{\"x\": \"y\"}", Syntax::Gemma),
            Some(vec![("f".to_owned(), json!({"x": "y"}))])
        );
        // every JSON escape, an emoji as a surrogate pair too
        assert_eq!(
            calls("call:f{\"x\": \"a\\bb\\f\\ud83d\\ude00\"}", Syntax::Gemma),
            Some(vec![(
                "f".to_owned(),
                json!({"x": "a\u{8}b\u{c}\u{1F600}"})
            )])
        );
        assert_eq!(calls("call:f{x:<|\"|>open", Syntax::Gemma), None);
        assert_eq!(calls("not a call", Syntax::Gemma), None);
    }

    #[test]
    fn python_calls_with_python_literals_read_as_json() {
        let body = "[get_weather(city='Paris \\'centre\\'', days=2, exact=True, tags=['a', \"b\"], extra=None), ping()]";
        assert_eq!(
            calls(body, Syntax::Python),
            Some(vec![
                (
                    "get_weather".to_owned(),
                    json!({"city": "Paris 'centre'", "days": 2, "exact": true, "tags": ["a", "b"], "extra": null})
                ),
                ("ping".to_owned(), json!({}))
            ])
        );
        assert_eq!(
            calls("[f(x=1,)]", Syntax::Python),
            Some(vec![("f".to_owned(), json!({"x": 1}))])
        );
        assert_eq!(calls("[f(x=undefined)]", Syntax::Python), None);
        assert_eq!(calls("[]", Syntax::Python), None);
    }
}
