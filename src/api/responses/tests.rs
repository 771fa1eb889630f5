use super::*;
use crate::api::body::parse_body;
use proptest::prelude::*;

#[test]
fn items_become_messages_with_calls_joined_and_reasoning_kept_with_its_turn() {
    let items = vec![
        json!({"role": "user", "content": "weather?"}),
        json!({"type": "reasoning", "summary": [{"type": "summary_text", "text": "look it up"}], "encrypted_content": "xyz"}),
        json!({"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}),
        json!({"type": "function_call", "call_id": "c2", "name": "get_time", "arguments": "{}"}),
        json!({"type": "function_call_output", "call_id": "c1", "output": "sunny"}),
        json!({"type": "function_call_output", "call_id": "c2", "output": [{"type": "input_text", "text": "noon"}]}),
        json!({"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "<think>x</think>It is sunny."}]}),
    ];
    let messages = items_to_messages(&items).unwrap();
    let roles: Vec<&str> = messages.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool", "assistant"]);
    assert_eq!(messages[1].tool_calls.len(), 2);
    assert_eq!(messages[2].name.as_deref(), Some("get_weather"));
    assert_eq!(messages[3].content, "noon");
    assert_eq!(messages[4].content, "It is sunny.");
    // reasoning goes with the turn it preceded; a `<think>` block in text likewise
    assert_eq!(messages[1].reasoning_content.as_deref(), Some("look it up"));
    assert_eq!(messages[4].reasoning_content.as_deref(), Some("x"));
    assert_eq!(messages[0].reasoning_content, None);
}

#[test]
fn bad_items_name_their_field() {
    let cases = [
        (
            json!([{"type": "function_call_output", "call_id": "nope", "output": "x"}]),
            "input[0].call_id",
        ),
        (
            json!([{"type": "function_call", "call_id": "c", "name": "f g", "arguments": "{}"}]),
            "input[0].name",
        ),
        (json!([{"role": "robot", "content": "x"}]), "input[0].role"),
        (
            json!([{"role": "user", "content": [{"type": "input_audio", "data": "x"}]}]),
            "input[0].content[0]",
        ),
    ];
    for (items, param) in cases {
        let err = items_to_messages(items.as_array().unwrap()).unwrap_err();
        assert!(
            matches!(err, ApiError::BadRequest { param: Some(ref p), .. } if p == param),
            "{err:?}"
        );
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic_the_request_parser(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(dto) = parse_body::<ResponsesDto>(&bytes)
            && let InputDto::Items(items) = &dto.input
        {
            let _ = items_to_messages(items);
        }
    }

    #[test]
    fn arbitrary_item_lists_never_panic_the_converter(items in proptest::collection::vec(crate::api::test_json::item(), 0..6)) {
        let _ = items_to_messages(&items);
        let body = json!({"input": items}).to_string();
        let _ = parse_body::<ResponsesDto>(body.as_bytes());
    }
}
