//! What a JSON schema will cost llama.cpp's converter (`json_schema_to_grammar`), estimated
//! before it runs. The converter cannot be stopped once called (C++ behind FFI, on a blocking
//! thread), and its work grows with the cube of an object's optional properties: for an
//! object with k of them (plus one for `additionalProperties`), `_build_object_rule` walks
//! every suffix of every suffix of the list, copying it each time, about k³/6 steps. The other
//! parts grow with the schema's size, and the grammar's repetitions (`minLength`, `maxItems`,
//! ...) are expanded by llama.cpp's grammar parser into one rule per repetition. So the
//! estimate counts schema nodes, k·(k+1)·(k+2)/6 per object and the repetition bounds; a
//! request whose estimate exceeds its budget is refused before any work is done.

use serde_json::Value;

/// A schema's estimated cost, and where most of it comes from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Cost {
    /// Estimated steps of the converter and of the grammar parser's expansion.
    pub steps: u64,
    /// The object with the most optional properties: its JSON pointer and that count.
    pub widest: Option<(String, u64)>,
}

impl Cost {
    fn add(&mut self, steps: u64) {
        self.steps = self.steps.saturating_add(steps);
    }
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
    walk(schema, &mut String::new(), &mut cost);
    cost
}

fn walk(node: &Value, at: &mut String, cost: &mut Cost) {
    cost.add(1);
    match node {
        Value::Object(map) => {
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
                let len = at.len();
                at.push('/');
                at.push_str(&key.replace('~', "~0").replace('/', "~1"));
                walk(child, at, cost);
                at.truncate(len);
            }
        }
        Value::Array(items) => {
            for (i, child) in items.iter().enumerate() {
                let len = at.len();
                at.push('/');
                at.push_str(&i.to_string());
                walk(child, at, cost);
                at.truncate(len);
            }
        }
        // a long string (a `const`, an `enum` value, a `pattern`) costs its length
        Value::String(s) => cost.add(s.len() as u64 / 16),
        _ => {}
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
