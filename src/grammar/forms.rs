//! Tool-call grammars in each family's native form (the Hermes form is `for_tool_calls`): the
//! frame of markers around each call is the family's, the arguments follow the tool's schema
//! (llama.cpp's `json_schema_to_grammar`, one converted schema per tool with its rules renamed
//! apart), and for `tool_choice: auto` the grammar waits for the family's opening marker.
//! GLM's and Qwen3-Coder's arguments are key and value pairs: a string parameter's value is
//! free text (anything but `</`), any other follows its schema as JSON.

use super::json_forms::JsonForm;
use super::pair_forms::PairForm;
use super::{GrammarError, ToolSpec, schema_gbnf};
use crate::protocol::Grammar;
use serde_json::Value;

/// A native call form with a grammar.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CallForm {
    /// `[TOOL_CALLS]NAME[ARGS]{...}`, calls one after another.
    Mistral,
    /// `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:0<|tool_call_argument_begin|>{...}<|tool_call_end|>…<|tool_calls_section_end|>`.
    Kimi,
    /// `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`.
    DeepSeek,
    /// `<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{...}`: one call
    /// (its end is `<|call|>`, an end-of-generation token).
    Harmony,
    /// `{"name": "NAME", "parameters": {...}}`, the whole output.
    Llama3,
    /// `<tool_call>\n<function=NAME>\n<parameter=K>\nV\n</parameter>\n</function>\n</tool_call>`.
    Xml,
    /// `<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value></tool_call>`.
    Glm,
    /// DeepSeek V3.2's DSML: `<｜DSML｜function_calls>` of `<｜DSML｜invoke name="NAME">` with
    /// `<｜DSML｜parameter name="K" string="true|false">V</｜DSML｜parameter>`.
    Dsml,
    /// DeepSeek R1 (llama.cpp's template): `<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function
    /// <｜tool▁sep｜>NAME\n```json\n{...}\n```<｜tool▁call▁end｜>…<｜tool▁calls▁end｜>`.
    DeepSeekR1,
    /// Solar Open: `<|tool_calls|><|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>
    /// {...}<|tool_call:end|>…<|calls|>`.
    Solar,
    /// functionary v3.1: `<function=NAME>{...}</function>`.
    Functionary,
    /// Gemma 4: `<|tool_call>call:NAME{...}<tool_call|>` (the arguments as JSON).
    Gemma4,
    /// LFM2.5: `<|tool_call_start|>[NAME(key=VALUE, ...), ...]<|tool_call_end|>`.
    Lfm2,
    /// Calls as JSON objects after a marker (Apriel, Nemotron Nano v2, Cohere, ...).
    Json(JsonForm),
    /// Invokes or tags with one element per argument (MiniMax-M2, MiniCPM5, Hy3, ...).
    Pairs(PairForm),
}

impl CallForm {
    /// Every native form, for tests that go through them all.
    pub const ALL: [CallForm; 26] = [
        CallForm::Mistral,
        CallForm::Kimi,
        CallForm::DeepSeek,
        CallForm::Harmony,
        CallForm::Llama3,
        CallForm::Xml,
        CallForm::Glm,
        CallForm::Dsml,
        CallForm::Json(JsonForm::ALL[0]),
        CallForm::Json(JsonForm::ALL[1]),
        CallForm::Json(JsonForm::ALL[2]),
        CallForm::Json(JsonForm::ALL[3]),
        CallForm::Json(JsonForm::ALL[4]),
        CallForm::Json(JsonForm::ALL[5]),
        CallForm::Json(JsonForm::ALL[6]),
        CallForm::Json(JsonForm::ALL[7]),
        CallForm::DeepSeekR1,
        CallForm::Solar,
        CallForm::Functionary,
        CallForm::Pairs(PairForm::ALL[0]),
        CallForm::Pairs(PairForm::ALL[1]),
        CallForm::Pairs(PairForm::ALL[2]),
        CallForm::Pairs(PairForm::ALL[3]),
        CallForm::Pairs(PairForm::ALL[4]),
        CallForm::Gemma4,
        CallForm::Lfm2,
    ];
}

/// A GBNF string literal of `text`.
pub(super) fn lit(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            _ => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `gbnf`'s rules renamed with `prefix` (its `root` becomes `{prefix}root`), so grammars of
/// several schemas can sit in one file. Rule names are the identifiers outside string
/// literals, character classes and repetition counts.
pub(super) fn prefixed(gbnf: &str, prefix: &str) -> String {
    let mut out = String::with_capacity(gbnf.len() * 2);
    let mut chars = gbnf.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '"' | '[' | '{' => {
                let close = match c {
                    '"' => '"',
                    '[' => ']',
                    _ => '}',
                };
                out.push(c);
                while let Some(d) = chars.next() {
                    out.push(d);
                    if d == '\\' {
                        if let Some(e) = chars.next() {
                            out.push(e);
                        }
                    } else if d == close {
                        break;
                    }
                }
            }
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => {
                let mut ident = String::from(c);
                while let Some(&d) = chars.peek() {
                    if d.is_ascii_alphanumeric() || d == '-' || d == '_' {
                        ident.push(d);
                        chars.next();
                    } else {
                        break;
                    }
                }
                out.push_str(prefix);
                out.push_str(&ident);
            }
            _ => out.push(c),
        }
    }
    out
}

/// The rules of a JSON value following `schema`, named apart; returns (start rule, rules).
pub(super) fn json_rule(schema: &Value, prefix: &str) -> Result<(String, String), GrammarError> {
    Ok((
        format!("{prefix}root"),
        prefixed(&schema_gbnf(schema)?, prefix),
    ))
}

/// The names of `tool`'s required parameters.
pub(super) fn required_of(tool: &ToolSpec) -> Vec<&str> {
    tool.parameters
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Key-and-value arguments: each property in the schema's order, required ones always,
/// others optionally.
fn pairs_rule(
    tool: &ToolSpec,
    prefix: &str,
    form: CallForm,
    rules: &mut String,
) -> Result<String, GrammarError> {
    let required = required_of(tool);
    let mut parts = Vec::new();
    if let Some(properties) = tool.parameters.get("properties").and_then(Value::as_object) {
        for (j, (key, schema)) in properties.iter().enumerate() {
            let value = if schema.get("type").and_then(Value::as_str) == Some("string") {
                // free text, within the schema's `maxLength` when it gives one
                match schema.get("maxLength").and_then(Value::as_u64) {
                    Some(max) => {
                        let rule = format!("{prefix}p{j}-text");
                        rules.push_str(&format!("{rule} ::= [^<]{{0,{max}}}\n"));
                        rule
                    }
                    None => "free-text".to_owned(),
                }
            } else {
                // converted on its own: the tool's `$defs` go with it
                let schema = super::refs::with_defs_of(schema, &tool.parameters);
                let (start, value_rules) = json_rule(&schema, &format!("{prefix}p{j}-"))?;
                rules.push_str(&value_rules);
                rules.push('\n');
                start
            };
            let is_string = value.ends_with("text");
            let pair = match form {
                CallForm::Pairs(pairs) => pairs.pair(key, &value, schema),
                CallForm::Dsml => format!(
                    "{} {value} {}",
                    lit(&format!(
                        "<｜DSML｜parameter name=\"{key}\" string=\"{is_string}\">"
                    )),
                    lit("</｜DSML｜parameter>\n")
                ),
                CallForm::Glm => format!(
                    "{} {value} {}",
                    lit(&format!("<arg_key>{key}</arg_key><arg_value>")),
                    lit("</arg_value>")
                ),
                _ => format!(
                    "{} {value} {}",
                    lit(&format!("<parameter={key}>\n")),
                    lit("\n</parameter>\n")
                ),
            };
            let optional = if required.contains(&key.as_str()) {
                ""
            } else {
                "?"
            };
            parts.push(format!("({pair}){optional}"));
        }
    }
    Ok(if parts.is_empty() {
        "\"\"".to_owned()
    } else {
        parts.join(" ")
    })
}

/// A grammar for calls to `tools` in `form`; `lazy`: free text until the form's opening
/// marker (for `tool_choice: auto`), else the output is calls.
pub fn for_native_calls(
    form: CallForm,
    tools: &[ToolSpec],
    lazy: bool,
) -> Result<Grammar, GrammarError> {
    let mut rules = String::new();
    let mut calls = Vec::new();
    for (i, tool) in tools.iter().enumerate() {
        let prefix = format!("t{i}-");
        let call = match form {
            CallForm::Xml | CallForm::Glm | CallForm::Dsml | CallForm::Pairs(_) => {
                let args = pairs_rule(tool, &prefix, form, &mut rules)?;
                pairs_call(form, &tool.name, &args)
            }
            CallForm::Lfm2 => {
                let args = super::literal_forms::kwargs_rule(tool, &prefix, &mut rules)?;
                format!("{} {args} \")\"", lit(&format!("{}(", tool.name)))
            }
            _ => {
                let (args, arg_rules) = json_rule(&tool.parameters, &prefix)?;
                rules.push_str(&arg_rules);
                rules.push('\n');
                json_call(form, &tool.name, &args)
            }
        };
        calls.push(format!("( {call} )"));
    }
    let (root, trigger) = root_and_trigger(form, &calls.join(" | "));
    let gbnf = format!("{root}\nfree-text ::= ([^<] | \"<\" [^/])*\n{rules}");
    Ok(Grammar {
        gbnf,
        lazy_trigger: lazy.then(|| trigger.to_owned()),
        lazy_pattern: None,
    })
}

/// One call in a form whose arguments are key and value pairs, around its `args` rule.
fn pairs_call(form: CallForm, name: &str, args: &str) -> String {
    match form {
        CallForm::Pairs(pairs) => pairs.call(name, args),
        CallForm::Dsml => format!(
            "{} {args} {}",
            lit(&format!("<｜DSML｜invoke name=\"{name}\">\n")),
            lit("</｜DSML｜invoke>\n")
        ),
        CallForm::Glm => format!(
            "{} {args} {}",
            lit(&format!("<tool_call>{name}")),
            lit("</tool_call>")
        ),
        _ => format!(
            "{} {args} {}",
            lit(&format!("<tool_call>\n<function={name}>\n")),
            lit("</function>\n</tool_call>")
        ),
    }
}

/// One call in a form whose arguments are a JSON object, around its `args` rule.
fn json_call(form: CallForm, name: &str, args: &str) -> String {
    if let CallForm::Json(json) = form {
        return json.call(name, args);
    }
    let (open, close) = match form {
        CallForm::Mistral => (format!("[TOOL_CALLS]{name}[ARGS]"), String::new()),
        CallForm::Kimi => (
            format!("<|tool_call_begin|>functions.{name}:0<|tool_call_argument_begin|>"),
            "<|tool_call_end|>".to_owned(),
        ),
        CallForm::DeepSeek => (
            format!("<｜tool▁call▁begin｜>{name}<｜tool▁sep｜>"),
            "<｜tool▁call▁end｜>".to_owned(),
        ),
        CallForm::Harmony => (
            format!("<|channel|>commentary to=functions.{name} <|constrain|>json<|message|>"),
            String::new(),
        ),
        CallForm::DeepSeekR1 => (
            format!("<｜tool▁call▁begin｜>function<｜tool▁sep｜>{name}\n```json\n"),
            "\n```<｜tool▁call▁end｜>".to_owned(),
        ),
        CallForm::Functionary => (format!("<function={name}>"), "</function>".to_owned()),
        CallForm::Gemma4 => (
            format!("<|tool_call>call:{name}"),
            "<tool_call|>".to_owned(),
        ),
        CallForm::Solar => {
            // the call's id, which the model makes up, before its name
            let open = format!("<|tool_call:name|>{name}<|tool_call:args|>");
            return format!(
                "\"<|tool_call:begin|>\" [a-zA-Z0-9_-]{{1,40}} {} {args} {}",
                lit(&open),
                lit("<|tool_call:end|>")
            );
        }
        _ => (
            format!("{{\"name\": \"{name}\", \"parameters\": "),
            "}".to_owned(),
        ),
    };
    let close = if close.is_empty() {
        String::new()
    } else {
        lit(&close)
    };
    format!("{} {args} {close}", lit(&open))
}

/// The grammar's root for `form` around the alternatives of `call`, and the marker that
/// opens its calls (a lazy grammar's trigger).
fn root_and_trigger(form: CallForm, call: &str) -> (String, &'static str) {
    match form {
        CallForm::Mistral => (format!("root ::= call+\ncall ::= {call}"), "[TOOL_CALLS]"),
        CallForm::Kimi => (
            format!(
                "root ::= \"<|tool_calls_section_begin|>\" call+ \"<|tool_calls_section_end|>\"\ncall ::= {call}"
            ),
            "<|tool_calls_section_begin|>",
        ),
        CallForm::DeepSeek => (
            format!(
                "root ::= \"<｜tool▁calls▁begin｜>\" call+ \"<｜tool▁calls▁end｜>\"\ncall ::= {call}"
            ),
            "<｜tool▁calls▁begin｜>",
        ),
        CallForm::Harmony => (format!("root ::= {call}"), "<|channel|>commentary to="),
        CallForm::Llama3 => (format!("root ::= {call}"), "{\"name\""),
        CallForm::Xml => (
            format!("root ::= call (\"\\n\" call)*\ncall ::= {call}"),
            "<tool_call>",
        ),
        CallForm::Glm => (format!("root ::= call+\ncall ::= {call}"), "<tool_call>"),
        CallForm::Dsml => (
            format!(
                "root ::= \"<｜DSML｜function_calls>\\n\" call+ \"</｜DSML｜function_calls>\"\ncall ::= {call}"
            ),
            "<｜DSML｜function_calls>",
        ),
        CallForm::DeepSeekR1 => (
            format!(
                "root ::= \"<｜tool▁calls▁begin｜>\" call (\"\\n\" call)* \"<｜tool▁calls▁end｜>\"\ncall ::= {call}"
            ),
            "<｜tool▁calls▁begin｜>",
        ),
        CallForm::Solar => (
            format!("root ::= \"<|tool_calls|>\" call+ \"<|calls|>\"\ncall ::= {call}"),
            "<|tool_calls|>",
        ),
        CallForm::Functionary => (format!("root ::= call+\ncall ::= {call}"), "<function="),
        CallForm::Gemma4 => (format!("root ::= call+\ncall ::= {call}"), "<|tool_call>"),
        CallForm::Lfm2 => (
            format!(
                "root ::= \"<|tool_call_start|>[\" call (\", \" call)* \"]<|tool_call_end|>\"\ncall ::= {call}"
            ),
            "<|tool_call_start|>",
        ),
        CallForm::Json(json) => (json.root(call), json.trigger()),
        CallForm::Pairs(pairs) => (pairs.root(call), pairs.trigger()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tools() -> Vec<ToolSpec> {
        vec![
            ToolSpec {
                name: "get_weather".into(),
                parameters: json!({"type": "object", "properties": {
                    "city": {"type": "string"}, "days": {"type": "integer"}
                }, "required": ["city"]}),
            },
            ToolSpec {
                name: "ping".into(),
                parameters: json!({"type": "object"}),
            },
        ]
    }

    #[test]
    fn renaming_leaves_literals_classes_and_counts_alone() {
        let g = "root ::= \"a-b\" [a-z]{1,3} space\nspace ::= \" \"?";
        assert_eq!(
            prefixed(g, "t0-"),
            "t0-root ::= \"a-b\" [a-z]{1,3} t0-space\nt0-space ::= \" \"?"
        );
    }

    #[test]
    fn each_form_frames_every_tool_and_names_its_trigger() {
        for (form, frame, trigger) in [
            (
                CallForm::Mistral,
                "\"[TOOL_CALLS]get_weather[ARGS]\"",
                "[TOOL_CALLS]",
            ),
            (
                CallForm::Kimi,
                "functions.get_weather:0",
                "<|tool_calls_section_begin|>",
            ),
            (
                CallForm::DeepSeek,
                "<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>",
                "<｜tool▁calls▁begin｜>",
            ),
            (
                CallForm::Harmony,
                "to=functions.get_weather <|constrain|>json<|message|>",
                "<|channel|>commentary to=",
            ),
            (
                CallForm::Llama3,
                "{\\\"name\\\": \\\"get_weather\\\", \\\"parameters\\\": ",
                "{\"name\"",
            ),
            (
                CallForm::Xml,
                "<parameter=city>\\n\" free-text",
                "<tool_call>",
            ),
            (
                CallForm::Glm,
                "<arg_key>days</arg_key><arg_value>\" t0-p1-root",
                "<tool_call>",
            ),
        ] {
            let g = for_native_calls(form, &tools(), true).unwrap();
            assert!(g.gbnf.contains(frame), "{form:?}: {}", g.gbnf);
            assert!(g.gbnf.contains("ping"), "{form:?}");
            assert_eq!(g.lazy_trigger.as_deref(), Some(trigger));
            assert_eq!(
                g.gbnf.lines().filter(|l| l.starts_with("root ::=")).count(),
                1
            );
            let strict = for_native_calls(form, &tools(), false).unwrap();
            assert_eq!(strict.lazy_trigger, None);
        }
    }
}
