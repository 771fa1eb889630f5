//! proptest strategies for JSON request bodies (the request parsers' property tests).

use proptest::prelude::*;
use serde_json::{Value, json};

/// Any JSON value, a few levels deep, with the keys request parsers look for.
pub fn value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>().prop_map(|f| json!(f)),
        ".{0,12}".prop_map(Value::from),
        prop_oneof![
            Just("user"),
            Just("assistant"),
            Just("tool"),
            Just("text"),
            Just("tool_use"),
            Just("tool_result"),
            Just("function_call"),
            Just("function_call_output"),
            Just("message"),
            Just("thinking"),
            Just("{}"),
            Just("{\"a\":1}"),
        ]
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(3, 24, 5, |inner| {
        prop_oneof![
            proptest::collection::vec(inner.clone(), 0..4).prop_map(Value::from),
            proptest::collection::vec((key(), inner), 0..5)
                .prop_map(|pairs| Value::Object(pairs.into_iter().collect())),
        ]
    })
}

fn key() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("type"),
        Just("role"),
        Just("content"),
        Just("text"),
        Just("name"),
        Just("arguments"),
        Just("call_id"),
        Just("output"),
        Just("id"),
        Just("input"),
        Just("tool_use_id"),
        Just("is_error"),
        Just("thinking"),
        Just("summary"),
    ]
    .prop_map(str::to_owned)
}

/// An input item or message: an object with a plausible `type` or `role`.
pub fn item() -> impl Strategy<Value = Value> {
    (
        prop_oneof![
            Just(json!({"type": "message"})),
            Just(json!({"type": "function_call"})),
            Just(json!({"type": "function_call_output"})),
            Just(json!({"type": "reasoning"})),
            Just(json!({"role": "user"})),
            Just(json!({"role": "assistant"})),
        ],
        proptest::collection::vec((key(), value()), 0..5),
    )
        .prop_map(|(mut base, extra)| {
            if let Value::Object(map) = &mut base {
                for (k, v) in extra {
                    map.entry(k).or_insert(v);
                }
            }
            base
        })
}
