//! Grammars of the families whose calls are literals (their rewriter is
//! `chat/native/literal.rs`): Gemma 4's frame around arguments written as JSON (the rewriter
//! reads JSON as well as Gemma's marks), and LFM2.5's Python calls whose keyword arguments are
//! JSON values (which Python reads the same).

use super::forms::{json_rule, lit};
use super::{GrammarError, ToolSpec};
use serde_json::Value;

/// LFM2.5's keyword arguments of `tool`: the required ones in the schema's order, then each
/// optional one or none; with nothing required, any of them, comma-separated.
pub(super) fn kwargs_rule(
    tool: &ToolSpec,
    prefix: &str,
    rules: &mut String,
) -> Result<String, GrammarError> {
    let required = super::forms::required_of(tool);
    let mut firsts = Vec::new();
    let mut optional = Vec::new();
    if let Some(properties) = tool.parameters.get("properties").and_then(Value::as_object) {
        for (j, (key, schema)) in properties.iter().enumerate() {
            let schema = super::refs::with_defs_of(schema, &tool.parameters);
            let (start, value_rules) = json_rule(&schema, &format!("{prefix}k{j}-"))?;
            rules.push_str(&value_rules);
            rules.push('\n');
            let pair = format!("{} {start}", lit(&format!("{key}=")));
            if required.contains(&key.as_str()) {
                firsts.push(pair);
            } else {
                optional.push(pair);
            }
        }
    }
    Ok(if !firsts.is_empty() {
        let mut parts = vec![firsts.join(" \", \" ")];
        parts.extend(optional.iter().map(|pair| format!("( \", \" {pair} )?")));
        parts.join(" ")
    } else if !optional.is_empty() {
        let any = format!("( {} )", optional.join(" | "));
        format!("( {any} ( \", \" {any} )* )?")
    } else {
        "\"\"".to_owned()
    })
}
