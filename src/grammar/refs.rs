//! `$ref`s of a tool's schema. Pydantic v2 and many MCP servers put shared shapes under
//! `$defs` and point at them with root-relative refs (`#/$defs/Address`); once the schema is
//! nested inside a call's grammar (under `arguments`), those refs must be read from where the
//! schema now sits, or llama.cpp's converter fails on them. A ref to another document (a URL,
//! a file) cannot be resolved here: it is refused by name. Written here rather than taken
//! from a crate: it is a walk over one JSON value rewriting one kind of string.

use serde_json::Value;

/// The first `$ref` in `schema` that is not local to it (does not start with `#`).
pub fn remote_ref(schema: &Value) -> Option<String> {
    match schema {
        Value::Object(map) => map
            .iter()
            .find_map(|(key, value)| match (key.as_str(), value) {
                ("$ref", Value::String(r)) if !r.starts_with('#') => Some(r.clone()),
                _ => remote_ref(value),
            }),
        Value::Array(items) => items.iter().find_map(remote_ref),
        _ => None,
    }
}

/// `schema` with each local `$ref` rewritten as read from a root where `schema` sits at the
/// JSON pointer `at` (`/properties/arguments`): `#/$defs/X` becomes `#{at}/$defs/X`, `#` becomes
/// `#{at}`. Remote refs are left as they are (see [`remote_ref`]).
pub fn rebased(schema: &Value, at: &str) -> Value {
    match schema {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(key, value)| {
                    let value = match (key.as_str(), value) {
                        ("$ref", Value::String(r)) if r.starts_with('#') => {
                            Value::String(format!("#{at}{}", &r[1..]))
                        }
                        _ => rebased(value, at),
                    };
                    (key.clone(), value)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(|v| rebased(v, at)).collect()),
        other => other.clone(),
    }
}

/// A part of `root` converted on its own (one property of a tool's arguments), with the
/// root's `$defs` and `definitions` beside it, so the refs into them still resolve.
pub fn with_defs_of(part: &Value, root: &Value) -> Value {
    let mut part = part.clone();
    if let Value::Object(map) = &mut part {
        for key in ["$defs", "definitions"] {
            if let Some(defs) = root.get(key)
                && !map.contains_key(key)
            {
                map.insert(key.to_owned(), defs.clone());
            }
        }
    }
    part
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn local_refs_are_read_from_where_the_schema_now_sits_and_remote_ones_are_named() {
        let schema = json!({
            "$defs": {"Address": {"type": "object", "properties": {
                "next": {"$ref": "#/$defs/Address"}}}},
            "properties": {"home": {"$ref": "#/$defs/Address"}, "me": {"$ref": "#"},
                           "list": {"items": [{"$ref": "#/definitions/Tag"}]}},
        });
        let moved = rebased(&schema, "/properties/arguments");
        assert_eq!(
            moved["properties"]["home"]["$ref"],
            "#/properties/arguments/$defs/Address"
        );
        assert_eq!(
            moved["$defs"]["Address"]["properties"]["next"]["$ref"],
            "#/properties/arguments/$defs/Address"
        );
        assert_eq!(moved["properties"]["me"]["$ref"], "#/properties/arguments");
        assert_eq!(
            moved["properties"]["list"]["items"][0]["$ref"],
            "#/properties/arguments/definitions/Tag"
        );
        assert_eq!(remote_ref(&schema), None);
        let remote = json!({"properties": {"a": {"$ref": "https://example.com/a.json#/x"}}});
        assert_eq!(
            remote_ref(&remote).as_deref(),
            Some("https://example.com/a.json#/x")
        );
    }
}
