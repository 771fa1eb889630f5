use super::*;
use proptest::prelude::*;

fn message(role: &str, content: Value) -> MessageDto {
    MessageDto {
        role: role.into(),
        content,
    }
}

#[test]
fn blocks_become_messages_and_the_billing_line_leaves_the_system_prompt() {
    let system = json!([
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.3; cch=8f2a;"},
        {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}},
    ]);
    let messages = [
        message("user", json!("list files")),
        message(
            "assistant",
            json!([
                {"type": "thinking", "thinking": "use ls", "signature": "s"},
                {"type": "text", "text": "Running ls."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
            ]),
        ),
        message(
            "user",
            json!([
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "a.rs"}]},
            ]),
        ),
    ];
    let out = to_messages(Some(&system), &messages).unwrap();
    let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "assistant", "tool"]);
    assert_eq!(out[0].content, "You are Claude Code.");
    assert_eq!(out[2].content, "Running ls.");
    assert_eq!(out[2].tool_calls[0].arguments, json!({"command": "ls"}));
    assert_eq!(out[3].name.as_deref(), Some("Bash"));
    assert_eq!(out[3].content, "a.rs");
}

#[test]
fn bad_blocks_name_their_field() {
    let cases = [
        (
            message(
                "user",
                json!([{"type": "tool_result", "tool_use_id": "x", "content": "r"}]),
            ),
            "messages[0].content[0].tool_use_id",
        ),
        (
            message(
                "user",
                json!([{"type": "container_upload", "file_id": "f"}]),
            ),
            "messages[0].content[0]",
        ),
        (message("robot", json!("hi")), "messages[0].role"),
        (
            message(
                "assistant",
                json!([{"type": "tool_use", "id": "t", "name": "bad name", "input": {}}]),
            ),
            "messages[0].content[0].name",
        ),
    ];
    for (m, param) in cases {
        let err = to_messages(None, &[m]).unwrap_err();
        assert!(
            matches!(err, ApiError::BadRequest { param: Some(ref p), .. } if p == param),
            "{err:?}"
        );
    }
}

#[test]
fn a_context_error_reads_as_anthropics() {
    let response = error_response(ApiError::ContextLengthExceeded {
        prompt_tokens: 9000,
        max_context_tokens: 8191,
    });
    assert_eq!(response.status(), 400);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn arbitrary_bytes_never_panic_the_request_parser(bytes in proptest::collection::vec(any::<u8>(), 0..300)) {
        if let Ok(dto) = parse_body::<MessagesDto>(&bytes) {
            let _ = to_messages(dto.system.as_ref(), &dto.messages);
        }
    }

    #[test]
    fn arbitrary_messages_never_panic_the_converter(
        items in proptest::collection::vec(crate::api::test_json::item(), 0..6),
        system in crate::api::test_json::value(),
    ) {
        let body = json!({"max_tokens": 5, "messages": items, "system": system}).to_string();
        if let Ok(dto) = parse_body::<MessagesDto>(body.as_bytes()) {
            let _ = to_messages(dto.system.as_ref(), &dto.messages);
        }
    }
}

/// Regression: Claude Code's first request carries a system message after the user's first
/// turn (its environment notes), and was refused with a 400.
#[test]
fn a_system_message_inside_messages_is_taken_and_folded_as_a_late_system_message() {
    let messages = [
        message(
            "user",
            json!([
                {"type": "text", "text": "<system-reminder>notes</system-reminder>"},
                {"type": "text", "text": "Create hello.txt"},
            ]),
        ),
        message(
            "system",
            json!([{"type": "text", "text": "# Environment", "cache_control": {"type": "ephemeral"}}]),
        ),
    ];
    let out = to_messages(Some(&json!("You are Claude Code.")), &messages).unwrap();
    let roles: Vec<&str> = out.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "system"]);
    let folded = crate::api::generation::normalize(out);
    let roles: Vec<&str> = folded.iter().map(|m| m.role.as_str()).collect();
    assert_eq!(roles, ["system", "user", "user"]);
    assert_eq!(folded[2].content, "# Environment");
    // a string works as well as blocks
    let out = to_messages(None, &[message("system", json!("be brief"))]).unwrap();
    assert_eq!(out[0].content, "be brief");
}
