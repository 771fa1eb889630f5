//! Grammars that constrain sampling, as llama.cpp GBNF: a JSON schema's (`response_format`)
//! and the tool-call grammar (`<tool_call>{"name": ..., "arguments": ...}</tool_call>` for the
//! offered tools). JSON schemas become GBNF with llama.cpp's own `json_schema_to_grammar`, the
//! converter its server uses. [uses llama-cpp-2's `common` functions only, no model]

use crate::protocol::Grammar;
use serde_json::{Value, json};

mod cost;
mod forms;
mod json_forms;
mod literal_forms;
mod pair_forms;
mod pattern_cost;
mod refs;
pub use cost::{Cost, estimate};
pub use forms::{CallForm, for_native_calls};
pub use json_forms::JsonForm;
pub use pair_forms::PairForm;
pub use pattern_cost::{PATTERN_LIVE_MAX, PatternCost, pattern_cost};
pub use refs::remote_ref;

/// What opens a Hermes tool call (the lazy grammar's trigger).
pub const TOOL_CALL_TRIGGER: &str = "<tool_call>";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the JSON schema cannot be turned into a grammar: {0}")]
pub struct GrammarError(pub String);

/// The grammar of JSON text that follows `schema`.
pub fn for_json_schema(schema: &Value) -> Result<Grammar, GrammarError> {
    Ok(Grammar {
        gbnf: schema_gbnf(schema)?,
        lazy_trigger: None,
        lazy_pattern: None,
    })
}

/// One tool as the grammar sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSpec {
    pub name: String,
    /// The arguments' JSON schema (an object schema).
    pub parameters: Value,
}

/// A Hermes tool call to one of `tools`: `<tool_call>` + `{"name": N, "arguments": A}` +
/// `</tool_call>`, where A follows N's parameters. `lazy`: free text until `<tool_call>`
/// appears (for `tool_choice: auto`); else the output must be a call (`required`, a named
/// function).
pub fn for_tool_calls(tools: &[ToolSpec], lazy: bool) -> Result<Grammar, GrammarError> {
    let one = tools.len() == 1;
    let calls: Vec<Value> = tools
        .iter()
        .enumerate()
        .map(|(i, t)| {
            // where the arguments' schema sits in the whole: its local refs are read there
            let at = if one {
                "/properties/arguments".to_owned()
            } else {
                format!("/oneOf/{i}/properties/arguments")
            };
            json!({
                "type": "object",
                "properties": {
                    "name": {"const": t.name},
                    "arguments": refs::rebased(&t.parameters, &at),
                },
                "required": ["name", "arguments"],
                "additionalProperties": false,
            })
        })
        .collect();
    let schema = match calls.len() {
        1 => calls.into_iter().next().unwrap_or_default(),
        _ => json!({"oneOf": calls}),
    };
    let call = schema_gbnf(&schema)?;
    // The schema's start rule becomes `tool-call`; the new root wraps it in the tags.
    let mut renamed = String::with_capacity(call.len() + 64);
    for line in call.lines() {
        match line.strip_prefix("root ::=") {
            Some(rest) => renamed.push_str(&format!("tool-call ::={rest}")),
            None => renamed.push_str(line),
        }
        renamed.push('\n');
    }
    // One call or several (parallel calls), each in its tags.
    renamed.push_str(&format!(
        "tool-call-block ::= \"{TOOL_CALL_TRIGGER}\" \"\\n\"? tool-call \"\\n\"? \"</tool_call>\"\n\
         root ::= tool-call-block (\"\\n\"? tool-call-block)*\n"
    ));
    Ok(Grammar {
        gbnf: renamed,
        lazy_trigger: lazy.then(|| TOOL_CALL_TRIGGER.to_owned()),
        lazy_pattern: None,
    })
}

fn schema_gbnf(schema: &Value) -> Result<String, GrammarError> {
    llama_cpp_2::json_schema_to_grammar(&schema.to_string())
        .map_err(|e| GrammarError(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_schema_becomes_a_grammar_with_a_root_rule() {
        let g =
            for_json_schema(&json!({"type": "object", "properties": {"a": {"type": "integer"}}}))
                .unwrap();
        assert!(
            g.gbnf.lines().any(|l| l.starts_with("root ::=")),
            "{}",
            g.gbnf
        );
        assert!(g.lazy_trigger.is_none());
    }

    #[test]
    fn the_tool_call_grammar_wraps_the_calls_in_their_tags() {
        let tools = [
            ToolSpec {
                name: "a".into(),
                parameters: json!({"type": "object", "properties": {"x": {"type": "string"}}}),
            },
            ToolSpec {
                name: "b".into(),
                parameters: json!({"type": "object"}),
            },
        ];
        let g = for_tool_calls(&tools, true).unwrap();
        let roots: Vec<&str> = g
            .gbnf
            .lines()
            .filter(|l| l.starts_with("root ::="))
            .collect();
        assert_eq!(roots.len(), 1, "{}", g.gbnf);
        assert!(
            g.gbnf.contains("tool-call-block ::= \"<tool_call>\""),
            "{}",
            g.gbnf
        );
        // The name comes before the arguments, as models write calls.
        let name = g.gbnf.find("name").unwrap();
        let arguments = g.gbnf.find("arguments").unwrap();
        assert!(name < arguments, "{}", g.gbnf);
        assert!(g.gbnf.lines().any(|l| l.starts_with("tool-call ::=")));
        assert_eq!(g.lazy_trigger.as_deref(), Some("<tool_call>"));
    }

    #[test]
    fn after_an_open_reasoning_block_the_grammar_waits_for_its_end() {
        let tools = [ToolSpec {
            name: "a".into(),
            parameters: json!({"type": "object"}),
        }];
        let mut lazy = for_tool_calls(&tools, true).unwrap();
        lazy.after_reasoning();
        assert_eq!(lazy.lazy_trigger, None);
        assert_eq!(
            lazy.lazy_pattern.as_deref(),
            Some("[\\s\\S]*?</think>[\\s\\S]*?(<tool_call>[\\s\\S]*)")
        );
        let mut strict = for_json_schema(&json!({"type": "object"})).unwrap();
        strict.after_reasoning();
        assert_eq!(
            strict.lazy_pattern.as_deref(),
            Some("[\\s\\S]*?</think>\\s*([\\s\\S]*)")
        );
    }

    #[test]
    fn a_schema_llama_cpp_cannot_convert_is_an_error() {
        let err =
            for_json_schema(&json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}));
        assert!(err.is_err(), "{err:?}");
    }
}

#[cfg(test)]
mod ref_tests {
    use super::*;

    /// The tool an MCP server made with the official Python SDK lists (a capture:
    /// tests/fixtures/schemas/make-mcp-tool.py): Pydantic's `$defs` and `#/$defs/...` refs,
    /// one of them recursive.
    fn mcp_tool() -> ToolSpec {
        let text = include_str!("../../tests/fixtures/schemas/mcp-create-issue-tool.json");
        let tool: Value = serde_json::from_str(text).unwrap();
        ToolSpec {
            name: tool["name"].as_str().unwrap().to_owned(),
            parameters: tool["inputSchema"].clone(),
        }
    }

    #[test]
    fn a_pydantic_tool_with_defs_and_refs_gets_a_call_grammar_in_every_form() {
        let other = ToolSpec {
            name: "read_file".into(),
            parameters: json!({"type": "object", "properties": {"path": {"type": "string"}}}),
        };
        // alone and beside another tool (its refs then sit under `oneOf`)
        for tools in [vec![mcp_tool()], vec![other.clone(), mcp_tool()]] {
            for lazy in [true, false] {
                let g = for_tool_calls(&tools, lazy);
                assert!(g.is_ok(), "{} tool(s): {g:?}", tools.len());
            }
            for form in CallForm::ALL {
                let g = for_native_calls(form, &tools, false);
                assert!(g.is_ok(), "{form:?}: {g:?}");
            }
        }
    }
}
