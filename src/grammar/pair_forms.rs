//! Grammars of the families whose calls are invokes or tags with one element per argument
//! (their rewriters are `chat/native/invoke.rs` and `chat/native/glm.rs`): a string
//! argument's value is free text, any other follows its schema as JSON.

use super::forms::lit;
use serde_json::Value;

/// A family whose calls name each argument in a tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PairForm {
    /// `<minimax:tool_call>\n<invoke name="N">\n<parameter name="K">V</parameter>\n…</invoke>\n
    /// </minimax:tool_call>`.
    MiniMaxM2,
    /// `<atem:function_calls>\n<atem:invoke name="N">\n<atem:parameter name="K">V
    /// </atem:parameter>\n…</atem:invoke>\n</atem:function_calls>`.
    Glimmer,
    /// `<function name="N"><param name="K">V</param>…</function>`.
    MiniCpm5,
    /// `<tool_calls:opensource>\n<tool_call:opensource>N<tool_sep:opensource>\n
    /// <arg_key:opensource>K</arg_key:opensource>\n<arg_value:opensource>V
    /// </arg_value:opensource>\n…</tool_call:opensource>\n</tool_calls:opensource>`.
    Hy3,
    /// `<|open|>tools<|sep|><|open|>call tool="N" index="1"<|sep|><|open|>argument key="K"
    /// type="T"<|sep|>V<|close|>argument<|sep|>…<|close|>call<|sep|><|close|>tools<|sep|>`.
    KimiK3,
}

impl PairForm {
    pub const ALL: [PairForm; 5] = [
        PairForm::MiniMaxM2,
        PairForm::Glimmer,
        PairForm::MiniCpm5,
        PairForm::Hy3,
        PairForm::KimiK3,
    ];

    /// (opening of a block of calls, closing); empty: calls stand alone.
    fn block(self) -> (&'static str, &'static str) {
        match self {
            PairForm::MiniMaxM2 => ("<minimax:tool_call>\n", "</minimax:tool_call>"),
            PairForm::Glimmer => ("<atem:function_calls>\n", "</atem:function_calls>"),
            PairForm::MiniCpm5 => ("", ""),
            PairForm::Hy3 => ("<tool_calls:opensource>\n", "</tool_calls:opensource>"),
            PairForm::KimiK3 => ("<|open|>tools<|sep|>", "<|close|>tools<|sep|>"),
        }
    }

    /// What opens a block of calls (the lazy grammar's trigger).
    pub fn trigger(self) -> &'static str {
        match self {
            PairForm::MiniMaxM2 => "<minimax:tool_call>",
            PairForm::Glimmer => "<atem:function_calls>",
            PairForm::MiniCpm5 => "<function name=",
            PairForm::Hy3 => "<tool_calls:opensource>",
            PairForm::KimiK3 => "<|open|>tools<|sep|>",
        }
    }

    /// One argument `key` whose value is the rule `value`, following `schema`.
    pub(super) fn pair(self, key: &str, value: &str, schema: &Value) -> String {
        let (open, close) = match self {
            PairForm::KimiK3 => {
                // the value's type as its template writes it; `string` only for a value that is
                // free text (the rewriter takes that type's value as a string, any other as
                // JSON), so a value of no single type is named by a JSON one
                let kind = match schema.get("type").and_then(Value::as_str) {
                    Some("string") if value.ends_with("text") => lit("string"),
                    Some("integer") => lit("number"),
                    Some(kind @ ("number" | "boolean" | "null" | "object" | "array")) => lit(kind),
                    _ => "( \"number\" | \"boolean\" | \"null\" | \"object\" | \"array\" )"
                        .to_owned(),
                };
                let open = lit(&format!("<|open|>argument key=\"{key}\" type=\""));
                return format!(
                    "{open} {kind} {} {value} {}",
                    lit("\"<|sep|>"),
                    lit("<|close|>argument<|sep|>")
                );
            }
            PairForm::MiniMaxM2 => (
                format!("<parameter name=\"{key}\">"),
                "</parameter>\n".to_owned(),
            ),
            PairForm::Glimmer => (
                format!("<atem:parameter name=\"{key}\">"),
                "</atem:parameter>\n".to_owned(),
            ),
            PairForm::MiniCpm5 => (format!("<param name=\"{key}\">"), "</param>".to_owned()),
            PairForm::Hy3 => (
                format!("<arg_key:opensource>{key}</arg_key:opensource>\n<arg_value:opensource>"),
                "</arg_value:opensource>\n".to_owned(),
            ),
        };
        format!("{} {value} {}", lit(&open), lit(&close))
    }

    /// One call to `name` whose arguments are the rule sequence `args`.
    pub(super) fn call(self, name: &str, args: &str) -> String {
        let (open, close) = match self {
            PairForm::MiniMaxM2 => (format!("<invoke name=\"{name}\">\n"), "</invoke>\n"),
            PairForm::Glimmer => (
                format!("<atem:invoke name=\"{name}\">\n"),
                "</atem:invoke>\n",
            ),
            PairForm::MiniCpm5 => (format!("<function name=\"{name}\">"), "</function>"),
            PairForm::Hy3 => (
                format!("<tool_call:opensource>{name}<tool_sep:opensource>\n"),
                "</tool_call:opensource>\n",
            ),
            PairForm::KimiK3 => {
                return format!(
                    "{} [0-9]{{1,3}} {} {args} {}",
                    lit(&format!("<|open|>call tool=\"{name}\" index=\"")),
                    lit("\"<|sep|>"),
                    lit("<|close|>call<|sep|>")
                );
            }
        };
        format!("{} {args} {}", lit(&open), lit(close))
    }

    /// The grammar's root for `call`, the alternatives of one call.
    pub(super) fn root(self, call: &str) -> String {
        let (open, close) = self.block();
        if open.is_empty() {
            format!("root ::= call+\ncall ::= {call}")
        } else {
            format!(
                "root ::= {} call+ {}\ncall ::= {call}",
                lit(open),
                lit(close)
            )
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::forms::CallForm;
    use super::super::{ToolSpec, for_native_calls};
    use super::PairForm;
    use serde_json::json;

    #[test]
    fn kimi_k3_names_a_value_a_string_only_where_the_value_is_free_text() {
        let tool = ToolSpec {
            name: "pick".into(),
            parameters: json!({"type": "object", "properties": {
                "name": {"type": "string"},
                "mode": {"enum": ["fast", "slow"]},
                "n": {"type": "integer"}
            }}),
        };
        let g = for_native_calls(CallForm::Pairs(PairForm::KimiK3), &[tool], false).unwrap();
        // each argument's part of the call rule, up to its close
        let line = |key: &str| {
            g.gbnf
                .split("<|open|>argument key=")
                .find(|part| part.starts_with(&format!("\\\"{key}\\\"")))
                .and_then(|part| part.split("<|close|>argument").next())
                .unwrap_or_else(|| panic!("{key}: {}", g.gbnf))
                .to_owned()
        };
        assert!(line("name").contains("\"string\""), "{}", line("name"));
        // regression: an enum without a type could be labelled `string` and written as JSON
        assert!(!line("mode").contains("\"string\""), "{}", line("mode"));
        assert!(line("n").contains("\"number\""), "{}", line("n"));
    }
}
