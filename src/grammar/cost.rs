//! What a JSON schema will cost llama.cpp's converter (`json_schema_to_grammar`), estimated
//! before it runs. The converter cannot be stopped once called (C++ behind FFI, on a blocking
//! thread), and its work grows with the cube of an object's optional properties: for an
//! object with k of them (plus one for `additionalProperties`), `_build_object_rule` walks
//! every suffix of every suffix of the list, copying it each time, about k³/6 steps. The other
//! parts grow with the schema's size, and the grammar's repetitions (`minLength`, `maxItems`,
//! ...) are expanded by llama.cpp's grammar parser into one rule per repetition. So the
//! estimate counts schema nodes, k·(k+1)·(k+2)/6 per object and the repetition bounds; a
//! request whose estimate exceeds its budget is refused before any work is done.
//!
//! A string `pattern` costs little to build but can cost a great deal at every token: its
//! live parse stacks are counted apart ([`super::pattern_cost`]), and the worst pattern is
//! named by where it sits.

use super::pattern_cost::{PatternCost, pattern_cost};
use serde_json::Value;

/// A schema's estimated cost, and where most of it comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cost {
    /// Estimated steps of the converter and of the grammar parser's expansion.
    pub steps: u64,
    /// The object with the most optional properties: its JSON pointer and that count.
    pub widest: Option<(String, u64)>,
    /// The costliest `pattern` (a repetition of what can match empty first, then the most
    /// live stacks): its path in the schema as a request names it (`properties.x.pattern`).
    pub worst_pattern: Option<(String, PatternCost)>,
}

impl Cost {
    fn add(&mut self, steps: u64) {
        self.steps = self.steps.saturating_add(steps);
    }

    fn pattern(&mut self, path: String, cost: PatternCost) {
        let rank = |c: &PatternCost| match c {
            PatternCost::NotConverted => 0,
            PatternCost::Live(n) => n.saturating_add(1),
            PatternCost::EmptyRepeated(_) => u64::MAX,
        };
        if self
            .worst_pattern
            .as_ref()
            .is_none_or(|(_, worst)| rank(&cost) > rank(worst))
        {
            self.worst_pattern = Some((path, cost));
        }
    }
}

/// Where a node sits: a schema, a map of names to schemas (`properties`), or a value
/// (`const`, `enum`, ...) that holds no schema.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Position {
    Schema,
    Names,
    Value,
}

fn child_position(parent: Position, key: &str) -> Position {
    match parent {
        Position::Value => Position::Value,
        Position::Names => Position::Schema,
        Position::Schema => {
            match key {
                "properties" | "$defs" | "definitions" | "patternProperties"
                | "dependentSchemas" => Position::Names,
                "const" | "enum" | "default" | "examples" | "required" | "description"
                | "title" => Position::Value,
                _ => Position::Schema,
            }
        }
    }
}

/// One step of a path: a key or an index.
enum Step {
    Key(String),
    Index(usize),
}

/// The path as a request's `param` names it: `properties.x.pattern`, `anyOf[1].pattern`.
fn dotted(path: &[Step]) -> String {
    let mut out = String::new();
    for step in path {
        match step {
            Step::Key(k) => {
                if !out.is_empty() {
                    out.push('.');
                }
                out.push_str(k);
            }
            Step::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

/// Steps of `_build_object_rule` for an object with `k` optional properties.
fn object_steps(k: u64) -> u64 {
    k.saturating_mul(k + 1)
        .saturating_mul(k + 2)
        .checked_div(6)
        .unwrap_or(u64::MAX)
}

/// The repetition bounds the grammar parser expands (one rule per repetition).
const REPEAT_KEYS: [&str; 6] = [
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
];

/// The estimated cost of turning `schema` into a grammar.
pub fn estimate(schema: &Value) -> Cost {
    let mut cost = Cost::default();
    let mut walk = Walk {
        at: String::new(),
        path: Vec::new(),
        cost: &mut cost,
    };
    walk.node(schema, Position::Schema);
    cost
}

struct Walk<'a> {
    /// JSON pointer of the node.
    at: String,
    path: Vec<Step>,
    cost: &'a mut Cost,
}

impl Walk<'_> {
    fn node(&mut self, node: &Value, position: Position) {
        let (at, cost) = (&mut self.at, &mut *self.cost);
        cost.add(1);
        match node {
            Value::Object(map) => {
                if position == Position::Schema
                    && let Some(Value::String(pattern)) = map.get("pattern")
                {
                    self.path.push(Step::Key("pattern".to_owned()));
                    cost.pattern(dotted(&self.path), pattern_cost(pattern));
                    self.path.pop();
                }
                let optional = optional_properties(map);
                if optional > 0 {
                    cost.add(object_steps(optional));
                    if cost.widest.as_ref().is_none_or(|(_, k)| optional > *k) {
                        let here = if at.is_empty() { "/" } else { at.as_str() };
                        cost.widest = Some((here.to_owned(), optional));
                    }
                }
                for key in REPEAT_KEYS {
                    if let Some(n) = map.get(key).and_then(Value::as_u64) {
                        cost.add(n);
                    }
                }
                for (key, child) in map {
                    let len = self.at.len();
                    self.at.push('/');
                    self.at.push_str(&key.replace('~', "~0").replace('/', "~1"));
                    self.path.push(Step::Key(key.clone()));
                    self.node(child, child_position(position, key));
                    self.path.pop();
                    self.at.truncate(len);
                }
            }
            Value::Array(items) => {
                for (i, child) in items.iter().enumerate() {
                    let len = self.at.len();
                    self.at.push('/');
                    self.at.push_str(&i.to_string());
                    self.path.push(Step::Index(i));
                    // the items of `anyOf`, `allOf`, `prefixItems`, ... are schemas
                    self.node(child, position);
                    self.path.pop();
                    self.at.truncate(len);
                }
            }
            // a long string (a `const`, an `enum` value, a `pattern`) costs its length
            Value::String(s) => cost.add(s.len() as u64 / 16),
            _ => {}
        }
    }
}

/// The properties of an object schema that are not `required`, plus one when
/// `additionalProperties` admits more (as llama.cpp counts them); 0 for anything else.
fn optional_properties(map: &serde_json::Map<String, Value>) -> u64 {
    let Some(Value::Object(properties)) = map.get("properties") else {
        return 0;
    };
    let required: std::collections::HashSet<&str> = map
        .get("required")
        .and_then(Value::as_array)
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let optional = properties
        .keys()
        .filter(|k| !required.contains(k.as_str()))
        .count() as u64;
    let more = match map.get("additionalProperties") {
        Some(Value::Bool(b)) => u64::from(*b),
        Some(Value::Object(_)) => 1,
        _ => 0,
    };
    optional + more
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn object(optional: usize, required: usize) -> Value {
        let mut properties = serde_json::Map::new();
        let mut names = Vec::new();
        for i in 0..optional + required {
            properties.insert(format!("p{i}"), json!({"type": "string"}));
            if i >= optional {
                names.push(json!(format!("p{i}")));
            }
        }
        json!({"type": "object", "properties": properties, "required": names})
    }

    #[test]
    fn optional_properties_cost_the_cube_of_their_count_and_required_ones_do_not() {
        let small = estimate(&object(10, 0)).steps;
        let large = estimate(&object(100, 0)).steps;
        // ten times the properties, about a thousand times the work
        assert!(large > 900 * small / 2, "{small} {large}");
        assert!(large >= object_steps(100));
        let required = estimate(&object(0, 100)).steps;
        assert!(required < 1_000, "{required}");
    }

    #[test]
    fn the_widest_object_is_named_by_its_pointer() {
        let schema = json!({
            "type": "object",
            "properties": {"a/b": object(3, 0), "c": object(40, 1)},
            "$defs": {"d": object(7, 0)},
        });
        let cost = estimate(&schema);
        assert_eq!(cost.widest, Some(("/properties/c".to_owned(), 40)));
        let escaped = estimate(&json!({"properties": {"a/b": object(3, 0)}}));
        assert_eq!(escaped.widest, Some(("/properties/a~1b".to_owned(), 3)));
    }

    /// What a step costs on this machine: `cargo test --lib grammar_build_calibration --
    /// --ignored --nocapture` (docs/BENCHMARKS.md, "Grammars: building one").
    #[test]
    #[ignore = "a measurement, run by hand"]
    fn grammar_build_calibration() {
        for optional in [100, 400, 1000, 2000] {
            let schema = object(optional, 5);
            let steps = estimate(&schema).steps;
            let started = std::time::Instant::now();
            let gbnf = crate::grammar::for_json_schema(&schema).unwrap();
            let secs = started.elapsed().as_secs_f64();
            println!(
                "{optional} optional properties, {} bytes: {steps} steps, {secs:.3} s, {:.1} ns/step, {} bytes of grammar",
                schema.to_string().len(),
                secs * 1e9 / steps as f64,
                gbnf.gbnf.len()
            );
        }
    }

    #[test]
    fn repetition_bounds_count_as_the_rules_they_expand_to() {
        let cost = estimate(&json!({"type": "string", "maxLength": 1_000_000}));
        assert!(cost.steps >= 1_000_000, "{cost:?}");
    }
}
