//! The grammar an [`OutputPlan`] wants, built once its prompt is known to fit: bounded, cached
//! and abandoned when its client leaves.
//!
//! - Bounded: llama.cpp's converter cannot be stopped once called, so each schema's cost is
//!   estimated first (`grammar::estimate`); a request whose schemas together exceed
//!   `max_grammar_build_steps` is a 400 naming the costliest one, before any work.
//! - Cached: an agent sends the same tools on every turn, so a built grammar is kept per
//!   model, keyed by everything it is made of; the next turn builds nothing.
//! - Abandoned: between conversions the work stops when its client has left
//!   ([`super::limits::client_gone`]).

use super::ApiError;
use super::tools::{OutputPlan, OutputSpec, Wanted};
use crate::chat::ToolFormat;
use crate::config::AppSettings;
use crate::control::GrammarCache;
use crate::grammar::{self, CallForm, JsonForm, PairForm, ToolSpec};
use crate::service::Grammar;
use crate::tokenizer::Tokenizer;
use serde_json::Value;
use sha2::{Digest, Sha256};

/// How a request's grammar came to be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// It wanted none.
    None,
    /// Built for an earlier request with the same tools and formats.
    Cached,
    /// Built now.
    Built,
}

/// The model's own call form for `format` (None: the Hermes form).
fn native_form(format: ToolFormat) -> Option<CallForm> {
    match format {
        ToolFormat::Hermes | ToolFormat::Other => None,
        ToolFormat::Xml => Some(CallForm::Xml),
        ToolFormat::Harmony => Some(CallForm::Harmony),
        ToolFormat::Mistral => Some(CallForm::Mistral),
        ToolFormat::Llama3 => Some(CallForm::Llama3),
        ToolFormat::Glm => Some(CallForm::Glm),
        ToolFormat::DeepSeek => Some(CallForm::DeepSeek),
        ToolFormat::DeepSeekDsml => Some(CallForm::Dsml),
        ToolFormat::Kimi => Some(CallForm::Kimi),
        ToolFormat::Apriel => Some(CallForm::Json(JsonForm::Apriel)),
        ToolFormat::Nemotron => Some(CallForm::Json(JsonForm::Nemotron)),
        ToolFormat::Cohere => Some(CallForm::Json(JsonForm::Cohere)),
        ToolFormat::Apertus => Some(CallForm::Json(JsonForm::Apertus)),
        ToolFormat::Granite3 => Some(CallForm::Json(JsonForm::Granite3)),
        ToolFormat::MiniMaxM1 => Some(CallForm::Json(JsonForm::MiniMaxM1)),
        ToolFormat::GigaChat3 => Some(CallForm::Json(JsonForm::GigaChat3)),
        ToolFormat::GigaChat31 => Some(CallForm::Json(JsonForm::GigaChat31)),
        ToolFormat::DeepSeekR1 => Some(CallForm::DeepSeekR1),
        ToolFormat::Solar => Some(CallForm::Solar),
        ToolFormat::Functionary => Some(CallForm::Functionary),
        ToolFormat::MiniMaxM2 => Some(CallForm::Pairs(PairForm::MiniMaxM2)),
        ToolFormat::Glimmer => Some(CallForm::Pairs(PairForm::Glimmer)),
        ToolFormat::MiniCpm5 => Some(CallForm::Pairs(PairForm::MiniCpm5)),
        ToolFormat::Hy3 => Some(CallForm::Pairs(PairForm::Hy3)),
        ToolFormat::KimiK3 => Some(CallForm::Pairs(PairForm::KimiK3)),
        ToolFormat::Gemma4 => Some(CallForm::Gemma4),
        ToolFormat::Lfm2 => Some(CallForm::Lfm2),
    }
}

fn parameters_param(index: usize) -> String {
    format!("tools[{index}].function.parameters")
}

/// Everything the grammar is made of, hashed.
fn key_of(wanted: &Wanted, format: ToolFormat) -> [u8; 32] {
    let mut hash = Sha256::new();
    hash.update(format!("{format:?}\0").as_bytes());
    match wanted {
        Wanted::Nothing => hash.update(b"nothing"),
        Wanted::Calls { tools, lazy } => {
            hash.update(if *lazy { "lazy calls\0" } else { "calls\0" });
            for (_, tool) in tools {
                hash.update(tool.name.as_bytes());
                hash.update(b"\0");
                hash.update(tool.parameters.to_string().as_bytes());
                hash.update(b"\0");
            }
        }
        Wanted::Schema { schema, .. } => {
            hash.update(b"schema\0");
            hash.update(schema.to_string().as_bytes());
        }
    }
    hash.finalize().into()
}

/// Refuses, before any work, schemas whose conversion would cost more than the budget.
fn check_cost(wanted: &Wanted, app: &AppSettings) -> Result<(), ApiError> {
    let schemas: Vec<(String, &Value)> = match wanted {
        Wanted::Nothing => return Ok(()),
        Wanted::Calls { tools, .. } => tools
            .iter()
            .map(|(i, t)| (parameters_param(*i), &t.parameters))
            .collect(),
        Wanted::Schema { schema, param } => vec![((*param).to_owned(), schema)],
    };
    let costs: Vec<(String, grammar::Cost)> = schemas
        .into_iter()
        .map(|(param, schema)| (param, grammar::estimate(schema)))
        .collect();
    check_patterns(&costs)?;
    let total = costs
        .iter()
        .fold(0u64, |sum, (_, c)| sum.saturating_add(c.steps));
    let max = u64::from(app.max_grammar_build_steps);
    if total <= max {
        return Ok(());
    }
    let Some((param, cost)) = costs.iter().max_by_key(|(_, c)| c.steps) else {
        return Ok(());
    };
    let widest = cost.widest.as_ref().map_or_else(String::new, |(at, k)| {
        format!(" (the object at `{at}` has {k} optional properties, and the work grows with the cube of that count)")
    });
    Err(ApiError::bad(
        format!(
            "`{param}` would take about {} steps to turn into a grammar{widest}; a request's \
             schemas may take at most {max} (`max_grammar_build_steps`), these take {total}: \
             mark properties `required`, or split the schema",
            cost.steps
        ),
        Some(param),
    ))
}

/// Refuses a `pattern` that would slow every token: a repetition of what can match empty, or
/// more live parse stacks than [`grammar::PATTERN_LIVE_MAX`]; `param` is the pattern's path.
fn check_patterns(costs: &[(String, grammar::Cost)]) -> Result<(), ApiError> {
    for (param, cost) in costs {
        let Some((at, pattern)) = &cost.worst_pattern else {
            continue;
        };
        let param = format!("{param}.{at}");
        let message = match pattern {
            grammar::PatternCost::EmptyRepeated(part) => format!(
                "`{param}` repeats `{part}`, which can match the empty string: the text then \
                 matches in so many ways that every token would take seconds to check. Repeat \
                 a part that always takes at least one character (`(a?){{0,12}}` is `a{{0,12}}`)"
            ),
            grammar::PatternCost::Live(live) if *live > grammar::PATTERN_LIVE_MAX => format!(
                "`{param}` nests repetitions of parts of varying length: up to {live} ways to \
                 read the text so far are kept at every token, and a pattern may keep at most \
                 {}; nest fewer repetitions, or give the repeated parts one length",
                grammar::PATTERN_LIVE_MAX
            ),
            _ => continue,
        };
        return Err(ApiError::bad(message, Some(&param)));
    }
    Ok(())
}

fn gone_check() -> Result<(), ApiError> {
    if super::limits::client_gone() {
        Err(ApiError::ClientGone)
    } else {
        Ok(())
    }
}

/// The grammar of calls to `tools`; when llama.cpp cannot convert it, each tool's schema
/// alone, so the error names the one it cannot take.
fn calls_grammar(
    tools: &[(usize, ToolSpec)],
    lazy: bool,
    format: ToolFormat,
) -> Result<Grammar, ApiError> {
    let specs: Vec<ToolSpec> = tools.iter().map(|(_, t)| t.clone()).collect();
    let whole = match native_form(format) {
        Some(form) => grammar::for_native_calls(form, &specs, lazy),
        None => grammar::for_tool_calls(&specs, lazy),
    };
    whole.or_else(|whole_error| {
        for (i, tool) in tools {
            gone_check()?;
            if let Err(e) = grammar::for_json_schema(&tool.parameters) {
                let param = parameters_param(*i);
                return Err(ApiError::bad(format!("`{param}`: {e}"), Some(&param)));
            }
        }
        Err(ApiError::bad(whole_error.to_string(), Some("tools")))
    })
}

/// The [`OutputSpec`] of `plan`: its grammar from `cache` or built now (within the budget),
/// checked against the engine's vocabulary.
pub fn build(
    plan: OutputPlan,
    tokenizer: &Tokenizer,
    format: ToolFormat,
    app: &AppSettings,
    cache: Option<&GrammarCache>,
) -> Result<(OutputSpec, Source), ApiError> {
    let OutputPlan {
        tools,
        parse_calls,
        wanted,
    } = plan;
    let spec = |grammar| OutputSpec {
        tools,
        parse_calls,
        grammar,
    };
    if wanted == Wanted::Nothing {
        return Ok((spec(None), Source::None));
    }
    let key = key_of(&wanted, format);
    if let Some(grammar) = cache.and_then(|c| c.get(&key)) {
        return Ok((spec(Some(grammar)), Source::Cached));
    }
    check_cost(&wanted, app)?;
    gone_check()?;
    let (grammar, param) = match &wanted {
        Wanted::Nothing => unreachable!("returned above"),
        Wanted::Calls { tools, lazy } => (calls_grammar(tools, *lazy, format)?, "tools"),
        Wanted::Schema { schema, param } => (
            grammar::for_json_schema(schema)
                .map_err(|e| ApiError::bad(format!("`{param}`: {e}"), Some(param)))?,
            *param,
        ),
    };
    gone_check()?;
    tokenizer.check_grammar(&grammar.gbnf).map_err(|e| {
        ApiError::bad(
            format!("the engine refuses the grammar of `{param}`: {e}"),
            Some(param),
        )
    })?;
    if let Some(cache) = cache {
        cache.put(key, grammar.clone());
    }
    Ok((spec(Some(grammar)), Source::Built))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn plan(tools: Vec<(usize, ToolSpec)>) -> OutputPlan {
        OutputPlan {
            tools: Vec::new(),
            parse_calls: true,
            wanted: Wanted::Calls { tools, lazy: true },
        }
    }

    fn tool(name: &str, parameters: Value) -> ToolSpec {
        ToolSpec {
            name: name.into(),
            parameters,
        }
    }

    fn wide_object(optional: usize) -> Value {
        let properties: serde_json::Map<String, Value> = (0..optional)
            .map(|i| (format!("p{i}"), json!({"type": "string"})))
            .collect();
        json!({"type": "object", "properties": properties})
    }

    fn build_with(plan: OutputPlan, cache: &GrammarCache) -> Result<Source, ApiError> {
        build(
            plan,
            &Tokenizer::simulated(),
            ToolFormat::Hermes,
            &AppSettings::default(),
            Some(cache),
        )
        .map(|(_, source)| source)
    }

    #[test]
    fn the_same_tools_again_are_served_from_the_cache_and_other_tools_are_built() {
        let cache = GrammarCache::default();
        let a = || plan(vec![(0, tool("a", json!({"type": "object"})))]);
        assert_eq!(build_with(a(), &cache).unwrap(), Source::Built);
        assert_eq!(build_with(a(), &cache).unwrap(), Source::Cached);
        let b = plan(vec![(0, tool("b", json!({"type": "object"})))]);
        assert_eq!(build_with(b, &cache).unwrap(), Source::Built);
    }

    #[test]
    fn a_schema_over_the_budget_is_refused_naming_the_tool_and_its_widest_object() {
        let cache = GrammarCache::default();
        let tools = vec![
            (0, tool("small", wide_object(3))),
            (
                1,
                tool(
                    "wide",
                    json!({"type": "object", "properties": {"opts": wide_object(700)}}),
                ),
            ),
        ];
        let started = std::time::Instant::now();
        let err = build_with(plan(tools), &cache).unwrap_err();
        match err {
            ApiError::BadRequest { message, param } => {
                assert_eq!(param.as_deref(), Some("tools[1].function.parameters"));
                assert!(message.contains("/properties/opts"), "{message}");
                assert!(message.contains("max_grammar_build_steps"), "{message}");
            }
            other => panic!("{other:?}"),
        }
        // refused by the estimate, not after the work
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }

    #[test]
    fn a_tool_the_converter_cannot_take_is_named_among_others() {
        let cache = GrammarCache::default();
        let tools = vec![
            (0, tool("fine", json!({"type": "object"}))),
            (
                4,
                tool(
                    "broken",
                    json!({"type": "object", "properties": {"a": {"$ref": "#/nowhere"}}}),
                ),
            ),
        ];
        match build_with(plan(tools), &cache).unwrap_err() {
            ApiError::BadRequest { param, .. } => {
                assert_eq!(param.as_deref(), Some("tools[4].function.parameters"));
            }
            other => panic!("{other:?}"),
        }
    }
}
