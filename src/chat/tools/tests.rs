use super::super::ToolFormat;
use super::{Ending, OutputParser, ParserOptions, Piece};
use proptest::prelude::*;

const TOOLS: ParserOptions = ParserOptions {
    tools: true,
    starts_in_reasoning: false,
    format: ToolFormat::Hermes,
};
const NO_TOOLS: ParserOptions = ParserOptions {
    tools: false,
    starts_in_reasoning: false,
    format: ToolFormat::Hermes,
};

/// What a client assembles from the pieces.
#[derive(Debug, Default, PartialEq, Eq)]
struct Assembled {
    content: String,
    reasoning: String,
    /// (id, name, arguments, ended)
    calls: Vec<(String, String, String, bool)>,
    invalid: Vec<String>,
    ending: Ending,
}

fn assemble(pieces: Vec<Piece>, ending: Ending) -> Assembled {
    let mut a = Assembled {
        ending,
        ..Assembled::default()
    };
    for piece in pieces {
        match piece {
            Piece::Content(t) => a.content.push_str(&t),
            Piece::Reasoning(t) => a.reasoning.push_str(&t),
            Piece::CallStart { index, id, name } => {
                assert_eq!(index, a.calls.len(), "indices count from 0 in order");
                a.calls.push((id, name, String::new(), false));
            }
            Piece::CallArguments { index, delta } => {
                let call = &mut a.calls[index];
                assert!(!call.3, "arguments after the end");
                call.2.push_str(&delta);
            }
            Piece::CallEnd { index } => a.calls[index].3 = true,
            Piece::CallInvalid { index, raw } => {
                assert!(!a.calls[index].3);
                a.invalid.push(raw);
            }
        }
    }
    a
}

/// Feeds `text` in pieces of `size` bytes (on character boundaries).
fn parse_in(text: &str, size: usize, options: ParserOptions) -> Assembled {
    let mut parser = OutputParser::new(options, "call_7_");
    let mut pieces = Vec::new();
    let mut chunk = String::new();
    for c in text.chars() {
        chunk.push(c);
        if chunk.len() >= size {
            pieces.extend(parser.push(&std::mem::take(&mut chunk)));
        }
    }
    pieces.extend(parser.push(&chunk));
    let (rest, ending) = parser.finish();
    pieces.extend(rest);
    assemble(pieces, ending)
}

/// Parses whole and in every piece size, and checks they agree.
fn parse(text: &str, options: ParserOptions) -> Assembled {
    let whole = parse_in(text, usize::MAX, options);
    for size in 1..=text.len().min(40) {
        assert_eq!(parse_in(text, size, options), whole, "pieces of {size}");
    }
    whole
}

#[test]
fn text_without_tags_passes_through_unchanged() {
    for text in [
        "",
        "  leading space",
        "a < b and <b>bold</b>",
        "<thinking aloud",
        "<",
    ] {
        let a = parse(text, TOOLS);
        assert_eq!(a.content, text);
        assert!(a.calls.is_empty());
        assert_eq!(a.ending, Ending::default());
    }
}

#[test]
fn a_hermes_call_streams_its_name_first_then_its_arguments_and_closes() {
    let text = "Let me look.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": [1, 2]}}\n</tool_call>";
    let a = parse(text, TOOLS);
    assert_eq!(a.content, "Let me look.");
    assert_eq!(a.calls.len(), 1);
    let (id, name, args, ended) = &a.calls[0];
    assert_eq!(
        (id.as_str(), name.as_str(), *ended),
        ("call_7_0", "get_weather", true)
    );
    assert_eq!(args, "{\"city\": \"Paris\", \"days\": [1, 2]}");
    assert!(a.ending.all_calls_closed());

    // Streamed: the start comes before any argument text.
    let mut parser = OutputParser::new(TOOLS, "call_7_");
    let pieces = parser.push("<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": ");
    assert!(
        matches!(&pieces[..], [Piece::CallStart { name, .. }, Piece::CallArguments { delta, .. }] if name == "f" && delta == "{\"a\": ")
    );
}

#[test]
fn parallel_calls_get_their_own_index_and_id() {
    let text = "<tool_call>{\"name\":\"a\",\"arguments\":{}}</tool_call>\n<tool_call>{\"name\":\"b\",\"arguments\":{\"x\":1}}</tool_call>";
    let a = parse(text, TOOLS);
    let calls: Vec<(&str, &str, &str)> = a
        .calls
        .iter()
        .map(|c| (c.0.as_str(), c.1.as_str(), c.2.as_str()))
        .collect();
    assert_eq!(
        calls,
        [("call_7_0", "a", "{}"), ("call_7_1", "b", "{\"x\":1}")]
    );
    // Whitespace between calls is no content.
    assert_eq!(a.content, "");
    assert_eq!(a.ending.calls_closed, 2);
}

#[test]
fn a_block_that_is_not_a_call_is_content() {
    for text in [
        "<tool_call>not json</tool_call>",
        "<tool_call>{\"arguments\": {}}</tool_call>",
        "<tool_call>{\"name\": 3}</tool_call>",
        "<tool_call>{\"name\": \"get weather\", \"arguments\": {}}</tool_call>",
    ] {
        let a = parse(text, TOOLS);
        assert_eq!(a.content, text);
        assert!(a.calls.is_empty());
        assert!(!a.ending.all_calls_closed());
    }
}

#[test]
fn a_close_tag_inside_a_json_string_or_an_xml_parameter_does_not_end_the_call() {
    let text = "<tool_call>{\"name\": \"write\", \"arguments\": {\"text\": \"a </tool_call> b\"}}</tool_call>after";
    let a = parse(text, TOOLS);
    assert_eq!(a.calls.len(), 1);
    assert_eq!(a.calls[0].2, "{\"text\": \"a </tool_call> b\"}");
    assert!(a.ending.all_calls_closed());
    assert_eq!(a.content, "after");
    let xml = "<tool_call><function=write><parameter=text>\n</tool_call>\n</parameter></function></tool_call>";
    let a = parse(xml, TOOLS);
    assert_eq!(a.calls.len(), 1);
    assert_eq!(a.calls[0].2, "{\"text\":\"</tool_call>\"}");
}

#[test]
fn a_duplicate_arguments_key_with_wide_characters_never_panics() {
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"€\": 1}, \"arguments\": {\"x€€\": 2}}</tool_call>";
    let a = parse(text, TOOLS);
    assert_eq!(a.calls.len(), 1);
}

#[test]
fn a_call_that_breaks_after_it_started_is_reported_invalid() {
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": 1}, oops</tool_call>";
    let a = parse(text, TOOLS);
    assert_eq!(a.calls.len(), 1);
    assert!(!a.calls[0].3);
    assert_eq!(a.invalid.len(), 1);
    assert_eq!(a.ending.calls_broken, 1);
    assert!(!a.ending.all_calls_closed());
}

#[test]
fn a_call_cut_by_the_token_limit_is_reported_cut_never_closed() {
    let a = parse(
        "<tool_call>{\"name\": \"f\", \"arguments\": {\"a\": [1, 2",
        TOOLS,
    );
    assert_eq!(a.calls.len(), 1);
    assert!(!a.calls[0].3, "a cut call never ends");
    assert!(a.ending.cut_call);
    assert!(!a.ending.all_calls_closed());
    // Cut before its name: nothing was announced; the text stays content.
    let a = parse("<tool_call>{\"na", TOOLS);
    assert!(a.calls.is_empty());
    assert_eq!(a.content, "<tool_call>{\"na");
    assert!(a.ending.cut_call);
}

#[test]
fn arguments_sent_as_a_json_string_are_decoded() {
    let a = parse(
        "<tool_call>{\"name\": \"f\", \"arguments\": \"{\\\"a\\\": 1}\"}</tool_call>",
        TOOLS,
    );
    assert_eq!(a.calls[0].2, "{\"a\":1}");
    assert!(a.ending.all_calls_closed());
}

#[test]
fn the_xml_form_parses_with_and_without_the_wrapper() {
    let body = "<function=run>\n<parameter=cmd>\nls -la\n</parameter>\n<parameter=timeout>\n30\n</parameter>\n</function>";
    for text in [
        format!("<tool_call>\n{body}\n</tool_call>"),
        body.to_owned(),
    ] {
        let a = parse(&text, TOOLS);
        assert_eq!(a.calls.len(), 1, "{text}");
        assert_eq!(a.calls[0].1, "run");
        assert_eq!(a.calls[0].2, "{\"cmd\":\"ls -la\",\"timeout\":30}");
        let parsed: serde_json::Value = serde_json::from_str(&a.calls[0].2).unwrap();
        assert_eq!(parsed["timeout"], 30);
        assert!(a.ending.all_calls_closed());
    }
    let a = parse("<function=noargs>\n</function>", TOOLS);
    assert_eq!(a.calls[0].2, "{}");
}

#[test]
fn tags_are_plain_text_when_no_tools_were_offered() {
    let text = "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call>";
    let a = parse(text, NO_TOOLS);
    assert_eq!(a.content, text);
    assert!(a.calls.is_empty());
}

#[test]
fn a_leading_think_block_is_reasoning_and_kept_out_of_the_content() {
    let a = parse("<think>\nplan it\n</think>\n\nThe answer.", NO_TOOLS);
    assert_eq!(a.reasoning, "\nplan it\n");
    assert_eq!(a.content, "The answer.");
    let opened = ParserOptions {
        tools: true,
        starts_in_reasoning: true,
        format: ToolFormat::Hermes,
    };
    let a = parse(
        "hmm</think><tool_call>{\"name\":\"f\",\"arguments\":{}}</tool_call>",
        opened,
    );
    assert_eq!(a.reasoning, "hmm");
    assert_eq!(a.calls.len(), 1);
    // A think tag later in the text is only text.
    let a = parse("Answer: <think>x</think>", NO_TOOLS);
    assert_eq!(a.content, "Answer: <think>x</think>");
    // Cut inside the reasoning: all of it is reasoning.
    let a = parse("<think>still thinking", NO_TOOLS);
    assert_eq!(
        (a.reasoning.as_str(), a.content.as_str()),
        ("still thinking", "")
    );
}

/// Cases the property tests run (reported in the notes).
const PROPTEST_CASES: u32 = 2000;

proptest! {
    #![proptest_config(ProptestConfig::with_cases(PROPTEST_CASES))]

    #[test]
    fn arbitrary_bytes_never_panic_and_any_split_parses_the_same(
        bytes in proptest::collection::vec(any::<u8>(), 0..200),
        cuts in proptest::collection::vec(0usize..200, 0..10),
        tools in any::<bool>(),
    ) {
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let options = ParserOptions { tools, starts_in_reasoning: false, format: ToolFormat::Hermes };
        let whole = parse_in(&text, usize::MAX, options);
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (text.len() + 1)).filter(|c| text.is_char_boundary(*c)).collect();
        cuts.sort_unstable();
        let mut parser = OutputParser::new(options, "call_7_");
        let mut pieces = Vec::new();
        let mut start = 0;
        for cut in cuts.into_iter().chain([text.len()]) {
            pieces.extend(parser.push(&text[start..cut]));
            start = cut;
        }
        let (rest, ending) = parser.finish();
        pieces.extend(rest);
        prop_assert_eq!(assemble(pieces, ending), whole);
    }

    #[test]
    fn tag_soup_never_panics_and_every_closed_call_has_json_object_arguments(
        parts in proptest::collection::vec(prop_oneof![
            Just("<tool_call>"), Just("</tool_call>"), Just("<think>"), Just("</think>"),
            Just("<function=f>"), Just("</function>"), Just("<parameter=p>"), Just("</parameter>"),
            Just("{\"name\": \"g\", \"arguments\": {"), Just("}"), Just("\"a\": [1, \"}\"]"),
            Just(" "), Just("x"), Just("\n"), Just("\""), Just(","),
        ], 0..30),
        size in 1usize..12,
    ) {
        let text: String = parts.concat();
        let a = parse_in(&text, size, TOOLS);
        for (_, _, args, ended) in &a.calls {
            if *ended {
                let value: serde_json::Value = serde_json::from_str(args).map_err(|e| TestCaseError::fail(format!("{args}: {e}")))?;
                prop_assert!(value.is_object());
            }
        }
        prop_assert_eq!(&a, &parse_in(&text, usize::MAX, TOOLS));
    }
}
