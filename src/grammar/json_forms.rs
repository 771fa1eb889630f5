//! Grammars of the families whose calls are JSON objects after a marker (their rewriter is
//! `chat/native/array.rs`): the block's markers and separators are the family's, each call's
//! arguments follow its tool's schema.

use super::forms::lit;

/// A family whose calls are JSON objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JsonForm {
    /// `<tool_calls>[{"name": N, "arguments": A}, ...]</tool_calls>`.
    Apriel,
    /// `<TOOLCALL>[{"name": N, "arguments": A}, ...]</TOOLCALL>`.
    Nemotron,
    /// `<|START_ACTION|>[{"tool_call_id": "0", "tool_name": N, "parameters": A}, ...]
    /// <|END_ACTION|>`.
    Cohere,
    /// `<|tools_prefix|>[{N: A}, ...]<|tools_suffix|>`.
    Apertus,
    /// `<|tool_call|>[{"name": N, "arguments": A}, ...]`.
    Granite3,
    /// `<tool_calls>\n{"name": N, "arguments": A}\n...\n</tool_calls>`.
    MiniMaxM1,
    /// `function call<|role_sep|>\n{"name": N, "arguments": A}`: one call.
    GigaChat3,
    /// `<|function_call|>{"name": N, "arguments": A}`: one call.
    GigaChat31,
}

impl JsonForm {
    pub const ALL: [JsonForm; 8] = [
        JsonForm::Apriel,
        JsonForm::Nemotron,
        JsonForm::Cohere,
        JsonForm::Apertus,
        JsonForm::Granite3,
        JsonForm::MiniMaxM1,
        JsonForm::GigaChat3,
        JsonForm::GigaChat31,
    ];

    /// (opening, separator between calls, closing); no separator: one call.
    fn frame(self) -> (&'static str, &'static str, &'static str) {
        match self {
            JsonForm::Apriel => ("<tool_calls>[", ", ", "]</tool_calls>"),
            JsonForm::Nemotron => ("<TOOLCALL>[", ", ", "]</TOOLCALL>"),
            JsonForm::Cohere => ("<|START_ACTION|>[\n    ", ",\n    ", "\n]<|END_ACTION|>"),
            JsonForm::Apertus => ("<|tools_prefix|>[", ", ", "]<|tools_suffix|>"),
            JsonForm::Granite3 => ("<|tool_call|>[", ", ", "]"),
            JsonForm::MiniMaxM1 => ("<tool_calls>\n", "\n", "\n</tool_calls>"),
            JsonForm::GigaChat3 => ("function call<|role_sep|>\n", "", ""),
            JsonForm::GigaChat31 => ("<|function_call|>", "", ""),
        }
    }

    /// What opens a block of calls (the lazy grammar's trigger).
    pub fn trigger(self) -> &'static str {
        match self {
            JsonForm::Apriel | JsonForm::MiniMaxM1 => "<tool_calls>",
            JsonForm::Nemotron => "<TOOLCALL>",
            JsonForm::Cohere => "<|START_ACTION|>",
            JsonForm::Apertus => "<|tools_prefix|>",
            JsonForm::Granite3 => "<|tool_call|>",
            JsonForm::GigaChat3 => "function call<|role_sep|>",
            JsonForm::GigaChat31 => "<|function_call|>",
        }
    }

    /// One call to `name` whose arguments are the rule `args`.
    pub(super) fn call(self, name: &str, args: &str) -> String {
        let quoted = serde_json::Value::from(name).to_string();
        match self {
            JsonForm::Cohere => format!(
                "\"{{\\\"tool_call_id\\\": \\\"\" [0-9]{{1,3}} {} {args} \"}}\"",
                lit(&format!("\", \"tool_name\": {quoted}, \"parameters\": "))
            ),
            JsonForm::Apertus => format!("{} {args} \"}}\"", lit(&format!("{{{quoted}: "))),
            _ => format!(
                "{} {args} \"}}\"",
                lit(&format!("{{\"name\": {quoted}, \"arguments\": "))
            ),
        }
    }

    /// The grammar's root for `call`, the alternatives of one call.
    pub(super) fn root(self, call: &str) -> String {
        let (open, separator, close) = self.frame();
        let many = if separator.is_empty() {
            String::new()
        } else {
            format!("( {} call )*", lit(separator))
        };
        let close = if close.is_empty() {
            String::new()
        } else {
            lit(close)
        };
        format!(
            "root ::= {} call {many} {close}\ncall ::= {call}",
            lit(open)
        )
    }
}
