//! `tools`, `tool_choice` and `response_format` of a Chat Completions request, validated into
//! an [`OutputSpec`]: what the prompt offers, whether the output is parsed for calls, and the
//! grammar that constrains sampling. Every error names its field.

use super::ApiError;
use crate::chat::ToolFormat;
use crate::config::AppSettings;
use crate::grammar::{self, ToolSpec};
use crate::service::Grammar;
use serde::Deserialize;
use serde_json::{Value, json};

#[derive(Debug, Deserialize)]
pub struct ToolDto {
    #[serde(rename = "type")]
    pub kind: String,
    pub function: Option<FunctionDto>,
}

#[derive(Debug, Deserialize)]
pub struct FunctionDto {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

#[derive(Debug, Deserialize)]
pub struct ResponseFormatDto {
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub json_schema: Option<JsonSchemaDto>,
}

/// `name` and `strict` are accepted and ignored: the grammar enforces the schema strictly.
#[derive(Debug, Deserialize)]
pub struct JsonSchemaDto {
    #[serde(default)]
    pub schema: Option<Value>,
}

/// A tool given as one flat JSON object (`{"name", "description", SCHEMA_KEY, "strict"}`, the
/// Responses and Anthropic shapes) in Chat's shape; `tools[i]` names it in errors.
pub fn tool_from_json(i: usize, tool: &Value, schema_key: &str) -> Result<ToolDto, ApiError> {
    let name = tool.get("name").and_then(Value::as_str).ok_or_else(|| {
        bad(
            format!("`tools[{i}].name` is missing"),
            &format!("tools[{i}].name"),
        )
    })?;
    Ok(ToolDto {
        kind: "function".into(),
        function: Some(FunctionDto {
            name: name.to_owned(),
            description: tool
                .get("description")
                .and_then(Value::as_str)
                .map(str::to_owned),
            parameters: tool.get(schema_key).cloned().filter(|p| !p.is_null()),
            strict: tool.get("strict").and_then(Value::as_bool),
        }),
    })
}

/// What the request's tools and formats mean for the prompt, the sampler and the parser.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputSpec {
    /// Tools offered in the prompt, OpenAI-shaped (empty: none).
    pub tools: Vec<Value>,
    /// Parse the output for tool calls.
    pub parse_calls: bool,
    pub grammar: Option<Grammar>,
}

/// The output's tools and formats validated, before any grammar is built: what the prompt
/// offers is known (so the prompt can be tokenized and its length checked first), the
/// grammar is only described ([`super::grammars`] builds it).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputPlan {
    /// Tools offered in the prompt, OpenAI-shaped (empty: none).
    pub tools: Vec<Value>,
    /// Parse the output for tool calls.
    pub parse_calls: bool,
    pub wanted: Wanted,
}

/// The grammar a request wants.
#[derive(Debug, Clone, Default, PartialEq)]
pub enum Wanted {
    #[default]
    Nothing,
    /// Calls to `tools` (each with the index it has in the request's `tools`), from their
    /// opening marker on (`lazy`: `tool_choice: auto`) or from the first token.
    Calls {
        tools: Vec<(usize, ToolSpec)>,
        lazy: bool,
    },
    /// Output that follows a JSON schema; `param` names it in errors.
    Schema { schema: Value, param: &'static str },
}

/// How the model may use the tools.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Choice {
    None,
    Auto,
    Required,
    Named(String),
}

fn bad(message: String, param: &str) -> ApiError {
    ApiError::bad(message, Some(param))
}

/// A function name: 1 to 64 letters, digits, `_` or `-` (OpenAI's rule; it also keeps names,
/// which templates render as markup, free of special-token text).
pub use crate::chat::valid_name;

fn choice(raw: Option<&Value>, has_tools: bool) -> Result<Choice, ApiError> {
    let choice = match raw {
        None => {
            return Ok(if has_tools {
                Choice::Auto
            } else {
                Choice::None
            });
        }
        Some(Value::String(s)) => match s.as_str() {
            "none" => Choice::None,
            "auto" => Choice::Auto,
            "required" => Choice::Required,
            other => {
                return Err(bad(
                    format!(
                        "`tool_choice` must be none, auto, required or {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {other:?}"
                    ),
                    "tool_choice",
                ));
            }
        },
        Some(v) => match v.pointer("/function/name").and_then(Value::as_str) {
            Some(name) if v.get("type").and_then(Value::as_str) == Some("function") => {
                Choice::Named(name.to_owned())
            }
            _ => {
                return Err(bad(
                    format!(
                        "`tool_choice` must name a function as {{\"type\": \"function\", \"function\": {{\"name\": ...}}}}, got {v}"
                    ),
                    "tool_choice",
                ));
            }
        },
    };
    // `auto` with nothing to choose from asks for nothing (agents send it with no tools)
    if !has_tools && choice == Choice::Auto {
        return Ok(Choice::None);
    }
    if !has_tools && matches!(choice, Choice::Required | Choice::Named(_)) {
        return Err(bad(
            "`tool_choice` asks for a tool call, but no `tools` were given".into(),
            "tool_choice",
        ));
    }
    Ok(choice)
}

/// Validates the tools, the choice and the format (no grammar is built: that is
/// [`super::grammars::build`], after the prompt's length is checked).
/// Calls are constrained by a grammar in the model's own call form (Hermes, or a native form
/// of `grammar::CallForm`); a form no parser reads (`Other`) is neither parsed nor enforced.
pub fn output_plan(
    tools: Option<Vec<ToolDto>>,
    tool_choice: Option<&Value>,
    response_format: Option<ResponseFormatDto>,
    format: ToolFormat,
    app: &AppSettings,
) -> Result<OutputPlan, ApiError> {
    let (offered, specs) = offered_tools(tools.unwrap_or_default(), app)?;
    let choice = choice(tool_choice, !specs.is_empty())?;
    let format_schema = match response_format {
        None => None,
        Some(f) => format_schema(f, app)?,
    };
    let wanted = wanted(&choice, format_schema, specs, format)?;
    let parse_calls = choice != Choice::None;
    Ok(OutputPlan {
        tools: if parse_calls { offered } else { Vec::new() },
        parse_calls,
        wanted,
    })
}

/// The tools checked: each as the prompt offers it (OpenAI-shaped), and as the grammar
/// constrains it (with its index in `tools`).
type OfferedTools = (Vec<Value>, Vec<(usize, ToolSpec)>);

/// The tools a request offers, checked (see [`OfferedTools`]).
fn offered_tools(tools: Vec<ToolDto>, app: &AppSettings) -> Result<OfferedTools, ApiError> {
    if tools.len() > app.max_tools as usize {
        return Err(bad(
            format!(
                "`tools` takes at most {} tools (`max_tools`), got {}",
                app.max_tools,
                tools.len()
            ),
            "tools",
        ));
    }
    // names seen so far: a set, so many tools cost no more than their count
    let mut names = std::collections::HashSet::with_capacity(tools.len());
    let mut specs: Vec<(usize, ToolSpec)> = Vec::with_capacity(tools.len());
    let mut offered = Vec::with_capacity(tools.len());
    for (i, tool) in tools.into_iter().enumerate() {
        let mut f = function_of(i, tool)?;
        if !names.insert(f.name.clone()) {
            return Err(bad(
                format!("`tools[{i}].function.name` {:?} is given twice", f.name),
                &format!("tools[{i}].function.name"),
            ));
        }
        let parameters = tool_parameters(i, &f.name, f.parameters.take(), app)?;
        let mut function = json!({"name": f.name, "parameters": parameters});
        if let Some(d) = f.description {
            function["description"] = json!(d);
        }
        if let Some(strict) = f.strict {
            function["strict"] = json!(strict);
        }
        offered.push(json!({"type": "function", "function": function}));
        specs.push((
            i,
            ToolSpec {
                name: f.name,
                parameters,
            },
        ));
    }
    Ok((offered, specs))
}

/// `tools[i]`'s function, of type `function` and with a valid name.
fn function_of(i: usize, tool: ToolDto) -> Result<FunctionDto, ApiError> {
    if tool.kind != "function" {
        return Err(bad(
            format!(
                "`tools[{i}].type` must be \"function\", got {:?}",
                tool.kind
            ),
            &format!("tools[{i}].type"),
        ));
    }
    let Some(f) = tool.function else {
        return Err(bad(
            format!("`tools[{i}].function` is missing"),
            &format!("tools[{i}].function"),
        ));
    };
    if !valid_name(&f.name) {
        return Err(bad(
            format!(
                "`tools[{i}].function.name` must be 1 to 64 letters, digits, _ or -, got {:?}",
                f.name
            ),
            &format!("tools[{i}].function.name"),
        ));
    }
    Ok(f)
}

/// `tools[i]`'s parameter schema: an object (none: no parameters), within
/// `max_tool_schema_kib`, its refs inside itself.
fn tool_parameters(
    i: usize,
    name: &str,
    parameters: Option<Value>,
    app: &AppSettings,
) -> Result<Value, ApiError> {
    let param = format!("tools[{i}].function.parameters");
    let parameters = match parameters {
        None => json!({"type": "object", "properties": {}}),
        Some(p @ Value::Object(_)) => p,
        Some(other) => {
            return Err(bad(
                format!("`{param}` must be a JSON schema object, got {other}"),
                &param,
            ));
        }
    };
    let schema_bytes = parameters.to_string().len();
    if schema_bytes > app.max_tool_schema_kib as usize * 1024 {
        return Err(bad(
            format!(
                "`{param}` is {schema_bytes} bytes of JSON; a tool's schema may be at most {} KiB (`max_tool_schema_kib`)",
                app.max_tool_schema_kib
            ),
            &param,
        ));
    }
    if let Some(remote) = grammar::remote_ref(&parameters) {
        return Err(bad(
            format!(
                "`{param}` of the tool {:?} refers to {remote:?}, another document: only \
                 refs within the schema (`#/$defs/...`, `#/definitions/...`) are resolved",
                name
            ),
            &param,
        ));
    }
    Ok(parameters)
}

/// The schema `response_format` asks the output to follow, with the field that holds it;
/// none for `text`.
fn format_schema(
    f: ResponseFormatDto,
    app: &AppSettings,
) -> Result<Option<(Value, &'static str)>, ApiError> {
    match f.kind.as_str() {
        "text" => Ok(None),
        "json_object" => Ok(Some((json!({"type": "object"}), "response_format"))),
        "json_schema" => {
            let param = "response_format.json_schema.schema";
            let schema = f
                .json_schema
                .and_then(|j| j.schema)
                .ok_or_else(|| bad(format!("`{param}` is missing"), param))?;
            if !schema.is_object() {
                return Err(bad(
                    format!("`{param}` must be a JSON schema object"),
                    param,
                ));
            }
            let schema_bytes = schema.to_string().len();
            if schema_bytes > app.max_tool_schema_kib as usize * 1024 {
                return Err(bad(
                    format!(
                        "`{param}` is {schema_bytes} bytes of JSON; a schema may be at most {} KiB (`max_tool_schema_kib`)",
                        app.max_tool_schema_kib
                    ),
                    param,
                ));
            }
            if let Some(remote) = grammar::remote_ref(&schema) {
                return Err(bad(
                    format!(
                        "`{param}` refers to {remote:?}, another document: only refs \
                         within the schema are resolved"
                    ),
                    param,
                ));
            }
            Ok(Some((schema, param)))
        }
        other => Err(bad(
            format!(
                "`response_format.type` must be text, json_object or json_schema, got {other:?}"
            ),
            "response_format.type",
        )),
    }
}

/// The grammar the choice and the format ask for together.
fn wanted(
    choice: &Choice,
    format_schema: Option<(Value, &'static str)>,
    specs: Vec<(usize, ToolSpec)>,
    format: ToolFormat,
) -> Result<Wanted, ApiError> {
    Ok(match (choice, format_schema) {
        (Choice::Required | Choice::Named(_), Some(_)) => {
            return Err(bad(
                "`response_format` and a required tool call cannot both constrain the output"
                    .into(),
                "response_format",
            ));
        }
        (_, Some((schema, param))) => Wanted::Schema { schema, param },
        (Choice::None, None) => Wanted::Nothing,
        // a form no parser reads is not enforced either
        (_, None) if format == ToolFormat::Other => Wanted::Nothing,
        (Choice::Auto, None) => Wanted::Calls {
            tools: specs,
            lazy: true,
        },
        (Choice::Required, None) => Wanted::Calls {
            tools: specs,
            lazy: false,
        },
        (Choice::Named(name), None) => {
            let Some(named) = specs.into_iter().find(|(_, s)| &s.name == name) else {
                return Err(bad(
                    format!("`tool_choice.function.name` {name:?} is not one of the `tools`"),
                    "tool_choice.function.name",
                ));
            };
            Wanted::Calls {
                tools: vec![named],
                lazy: false,
            }
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tokenizer::Tokenizer;

    /// The plan and its grammar, as a request gets them.
    fn output_spec(
        tools: Option<Vec<ToolDto>>,
        tool_choice: Option<&Value>,
        response_format: Option<ResponseFormatDto>,
        tokenizer: &Tokenizer,
        format: ToolFormat,
        app: &AppSettings,
    ) -> Result<OutputSpec, ApiError> {
        let plan = output_plan(tools, tool_choice, response_format, format, app)?;
        super::super::grammars::build(plan, tokenizer, format, app, None).map(|(spec, _)| spec)
    }

    fn tool(name: &str, parameters: Value) -> ToolDto {
        ToolDto {
            kind: "function".into(),
            function: Some(FunctionDto {
                name: name.into(),
                description: None,
                parameters: Some(parameters),
                strict: None,
            }),
        }
    }

    fn spec(
        tools: Vec<ToolDto>,
        choice: Option<Value>,
        format: Option<ResponseFormatDto>,
    ) -> Result<OutputSpec, ApiError> {
        output_spec(
            Some(tools),
            choice.as_ref(),
            format,
            &Tokenizer::simulated(),
            ToolFormat::Hermes,
            &AppSettings::default(),
        )
    }

    fn param_of(e: ApiError) -> String {
        match e {
            ApiError::BadRequest { param, .. } => param.unwrap_or_default(),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn auto_parses_calls_under_a_lazy_grammar_and_none_offers_nothing() {
        let auto = spec(vec![tool("f", json!({"type": "object"}))], None, None).unwrap();
        assert!(auto.parse_calls && auto.tools.len() == 1);
        assert!(auto.grammar.unwrap().lazy_trigger.is_some());
        let none = spec(
            vec![tool("f", json!({"type": "object"}))],
            Some(json!("none")),
            None,
        )
        .unwrap();
        assert_eq!(none, OutputSpec::default());
    }

    #[test]
    fn calls_are_constrained_in_the_model_s_own_form_and_not_at_all_in_an_unknown_one() {
        let required = json!("required");
        let spec_in = |format| {
            output_spec(
                Some(vec![tool("f", json!({"type": "object"}))]),
                Some(&required),
                None,
                &Tokenizer::simulated(),
                format,
                &AppSettings::default(),
            )
            .unwrap()
        };
        let xml = spec_in(ToolFormat::Xml);
        assert!(xml.parse_calls);
        assert!(xml.grammar.unwrap().gbnf.contains("<function=f>"));
        let mistral = spec_in(ToolFormat::Mistral);
        assert!(
            mistral
                .grammar
                .unwrap()
                .gbnf
                .contains("[TOOL_CALLS]f[ARGS]")
        );
        let other = spec_in(ToolFormat::Other);
        assert!(other.grammar.is_none());
    }

    #[test]
    fn required_and_named_choices_constrain_from_the_first_token() {
        let tools = || vec![tool("f", json!({"type": "object"})), tool("g", json!({}))];
        let required = spec(tools(), Some(json!("required")), None).unwrap();
        assert!(required.grammar.unwrap().lazy_trigger.is_none());
        let named = spec(
            tools(),
            Some(json!({"type": "function", "function": {"name": "g"}})),
            None,
        )
        .unwrap();
        assert!(named.grammar.is_some());
        let unknown = spec(
            tools(),
            Some(json!({"type": "function", "function": {"name": "h"}})),
            None,
        );
        assert_eq!(param_of(unknown.unwrap_err()), "tool_choice.function.name");
    }

    #[test]
    fn broken_tools_and_formats_name_their_field() {
        type Case = (
            Vec<ToolDto>,
            Option<Value>,
            Option<ResponseFormatDto>,
            &'static str,
        );
        let cases: Vec<Case> = vec![
            (
                vec![tool("no spaces", json!({}))],
                None,
                None,
                "tools[0].function.name",
            ),
            (
                vec![tool("f", json!("object"))],
                None,
                None,
                "tools[0].function.parameters",
            ),
            (
                vec![tool(
                    "f",
                    json!({"type": "object", "properties": {"a": {"$ref": "#/x"}}}),
                )],
                None,
                None,
                "tools[0].function.parameters",
            ),
            (
                vec![tool("f", json!({})), tool("f", json!({}))],
                None,
                None,
                "tools[1].function.name",
            ),
            (vec![], Some(json!("required")), None, "tool_choice"),
            (vec![], Some(json!("sometimes")), None, "tool_choice"),
            (
                vec![],
                None,
                Some(ResponseFormatDto {
                    kind: "json_schema".into(),
                    json_schema: None,
                }),
                "response_format.json_schema.schema",
            ),
            (
                vec![],
                None,
                Some(ResponseFormatDto {
                    kind: "yaml".into(),
                    json_schema: None,
                }),
                "response_format.type",
            ),
        ];
        for (tools, choice, format, param) in cases {
            assert_eq!(param_of(spec(tools, choice, format).unwrap_err()), param);
        }
    }
}
