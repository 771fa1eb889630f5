//! Each family's native output, parsed whole and split at every character boundary (and in
//! random pieces), gives the same reasoning, content and calls.

use super::super::control::{CLOSE, OPEN};
use super::super::{Ending, OutputParser, ParserOptions, Piece, ToolFormat};
use proptest::prelude::*;
use serde_json::{Value, json};

#[derive(Debug, Clone, Default, PartialEq)]
struct Parsed {
    content: String,
    reasoning: String,
    /// (id, name, arguments)
    calls: Vec<(String, String, Value)>,
    invalid: Vec<String>,
    ending: Ending,
}

fn options(format: ToolFormat) -> ParserOptions {
    ParserOptions {
        tools: true,
        starts_in_reasoning: false,
        format,
    }
}

fn parse_pieces(format: ToolFormat, pieces: &[&str]) -> Parsed {
    parse_with(options(format), pieces)
}

fn parse_with(options: ParserOptions, pieces: &[&str]) -> Parsed {
    let mut parser = OutputParser::new(options, "call_x_");
    let mut out: Vec<Piece> = Vec::new();
    for piece in pieces {
        out.extend(parser.push(piece));
    }
    let (rest, ending) = parser.finish();
    out.extend(rest);
    let mut parsed = Parsed {
        ending,
        ..Parsed::default()
    };
    let mut args: Vec<String> = Vec::new();
    for piece in out {
        match piece {
            Piece::Content(t) => parsed.content.push_str(&t),
            Piece::Reasoning(t) => parsed.reasoning.push_str(&t),
            Piece::CallStart { id, name, .. } => {
                parsed.calls.push((id, name, Value::Null));
                args.push(String::new());
            }
            Piece::CallArguments { index, delta } => args[index].push_str(&delta),
            Piece::CallEnd { index } => {
                parsed.calls[index].2 = serde_json::from_str(&args[index]).expect("JSON arguments");
            }
            Piece::CallInvalid { raw, .. } => parsed.invalid.push(raw),
        }
    }
    parsed
}

/// Parses whole, and split in two at every character boundary; all must agree.
fn parse(format: ToolFormat, text: &str) -> Parsed {
    let whole = parse_pieces(format, &[text]);
    for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        let split = parse_pieces(format, &[&text[..cut], &text[cut..]]);
        assert_eq!(split, whole, "split at byte {cut} of {text:?}");
    }
    let chars: Vec<String> = text.chars().map(String::from).collect();
    let by_char: Vec<&str> = chars.iter().map(String::as_str).collect();
    assert_eq!(
        parse_pieces(format, &by_char),
        whole,
        "one character at a time"
    );
    whole
}

fn marked(token: &str) -> String {
    format!("{OPEN}{token}{CLOSE}")
}

fn call(parsed: &Parsed, i: usize) -> (&str, &Value) {
    (parsed.calls[i].1.as_str(), &parsed.calls[i].2)
}

#[test]
fn harmony_analysis_is_reasoning_and_final_is_content() {
    let text = "<|channel|>analysis<|message|>I'm\nthinking<|end|><|start|>assistant<|channel|>final<|message|>Hello, world!";
    let p = parse(ToolFormat::Harmony, text);
    assert_eq!(
        (p.reasoning.as_str(), p.content.as_str()),
        ("I'm\nthinking", "Hello, world!")
    );
    assert!(p.calls.is_empty());
}

#[test]
fn harmony_a_message_to_a_function_is_a_call_in_either_header_form() {
    for text in [
        "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}".to_owned(),
        " to=functions.get_weather<|channel|>commentary json<|message|>{\"city\": \"Paris\"}".to_owned(),
        // `<|end|>` is a control token in gpt-oss's vocabulary: it arrives marked
        format!("<|channel|>analysis<|message|>Need the weather.{}<|start|>assistant to=functions.get_weather<|channel|>commentary <|constrain|>json<|message|>{{\"city\": \"Paris\"}}", marked("<|end|>")),
    ] {
        let p = parse(ToolFormat::Harmony, &text);
        assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})), "{text}");
        assert!(p.content.is_empty(), "{text}: {p:?}");
        assert!(p.ending.all_calls_closed(), "{text}: {p:?}");
    }
}

#[test]
fn harmony_a_call_cut_by_the_token_limit_is_reported_cut() {
    let p = parse(
        ToolFormat::Harmony,
        "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Pa",
    );
    assert!(p.ending.cut_call && !p.ending.all_calls_closed(), "{p:?}");
}

#[test]
fn mistral_calls_with_and_without_call_ids_and_content_before_them() {
    let p = parse(
        ToolFormat::Mistral,
        &format!(
            "Let me check.{}get_weather{}{{\"city\": \"Paris\"}}{}get_time[CALL_ID]000000002[ARGS]{{\"tz\": \"CET\", \"nested\": {{\"a\": [1, \"}}\"]}}}}",
            marked("[TOOL_CALLS]"),
            marked("[ARGS]"),
            marked("[TOOL_CALLS]")
        ),
    );
    assert_eq!(p.content, "Let me check.");
    assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
    assert_eq!(
        call(&p, 1),
        ("get_time", &json!({"tz": "CET", "nested": {"a": [1, "}"]}}))
    );
    assert!(p.ending.all_calls_closed());
    for (id, _, _) in &p.calls {
        assert!(
            id.len() == 9 && id.chars().all(|c| c.is_ascii_alphanumeric()),
            "Mistral's templates take only 9 letters and digits: {id}"
        );
    }
    assert_ne!(p.calls[0].0, p.calls[1].0);
}

#[test]
fn mistral_nemo_s_json_array_of_calls_and_think_blocks() {
    let p = parse(
        ToolFormat::Mistral,
        "[THINK]plan[/THINK][TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}, \"id\": \"abc123def\"}, {\"name\": \"f\", \"arguments\": {}, \"id\": \"x\"}]",
    );
    assert_eq!(p.reasoning, "plan");
    assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
    assert_eq!(call(&p, 1), ("f", &json!({})));
    assert!(p.ending.all_calls_closed());
}

#[test]
fn llama3_a_json_object_output_is_a_call_and_text_is_content() {
    let p = parse(
        ToolFormat::Llama3,
        "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}",
    );
    assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
    assert!(p.ending.all_calls_closed());
    let p = parse(ToolFormat::Llama3, "It is {sunny} today.");
    assert_eq!(p.content, "It is {sunny} today.");
    assert!(p.calls.is_empty());
}

#[test]
fn kimi_k2_sections_of_calls_after_reasoning() {
    let text = "<think>two calls</think><|tool_calls_section_begin|><|tool_call_begin|>functions.get_weather:0<|tool_call_argument_begin|>{\"city\": \"Paris\"}<|tool_call_end|><|tool_call_begin|>functions.get_time:1<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>";
    let p = parse(ToolFormat::Kimi, text);
    assert_eq!(p.reasoning, "two calls");
    assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
    assert_eq!(call(&p, 1), ("get_time", &json!({})));
    assert!(p.content.is_empty() && p.ending.all_calls_closed(), "{p:?}");
}

#[test]
fn deepseek_v3_1_calls_after_content() {
    let text = "Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{\"city\": \"Paris\"}<｜tool▁call▁end｜><｜tool▁call▁begin｜>get_time<｜tool▁sep｜>{\"tz\": \"CET\"}<｜tool▁call▁end｜><｜tool▁calls▁end｜>";
    let p = parse(ToolFormat::DeepSeek, text);
    assert_eq!(p.content, "Sure.");
    assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
    assert_eq!(call(&p, 1), ("get_time", &json!({"tz": "CET"})));
    assert!(p.ending.all_calls_closed());
}

#[test]
fn deepseek_dsml_invokes_with_string_and_json_parameters_after_reasoning() {
    let text = format!(
        "Let me check the time</think>\n\n<{d}function_calls>\n<{d}invoke name=\"get_time\">\n<{d}parameter name=\"city\" string=\"true\">Tokyo \"east\" 42</{d}parameter>\n<{d}parameter name=\"days\" string=\"false\">2</{d}parameter>\n</{d}invoke>\n<{d}invoke name=\"ping\">\n</{d}invoke>\n</{d}function_calls>",
        d = marked("｜DSML｜")
    );
    let mut opened = options(ToolFormat::DeepSeekDsml);
    opened.starts_in_reasoning = true;
    let whole = parse_with(opened, &[&text]);
    assert_eq!(whole.reasoning, "Let me check the time");
    assert_eq!(
        call(&whole, 0),
        ("get_time", &json!({"city": "Tokyo \"east\" 42", "days": 2}))
    );
    assert_eq!(call(&whole, 1), ("ping", &json!({})));
    assert!(
        whole.content.is_empty() && whole.ending.all_calls_closed(),
        "{whole:?}"
    );
    for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        assert_eq!(
            parse_with(opened, &[&text[..cut], &text[cut..]]),
            whole,
            "split at {cut}"
        );
    }
}

#[test]
fn glm_key_and_value_pairs_with_typed_values_and_a_call_without_arguments() {
    let text = "<think>x</think>\n<tool_call>get_weather\n<arg_key>city</arg_key>\n<arg_value>Paris</arg_value>\n<arg_key>days</arg_key>\n<arg_value>2</arg_value>\n</tool_call><tool_call>read_file_diff_md</tool_call>";
    let p = parse(ToolFormat::Glm, text);
    assert_eq!(p.reasoning, "x");
    assert_eq!(
        call(&p, 0),
        ("get_weather", &json!({"city": "Paris", "days": 2}))
    );
    assert_eq!(call(&p, 1), ("read_file_diff_md", &json!({})));
    assert!(p.content.is_empty() && p.ending.all_calls_closed(), "{p:?}");
}

#[test]
fn a_control_token_outside_the_format_never_reaches_content() {
    let text = format!("Hi{} there", marked("<|im_start|>"));
    for format in [ToolFormat::Hermes, ToolFormat::Mistral, ToolFormat::Kimi] {
        assert_eq!(parse(format, &text).content, "Hi there");
    }
}

proptest! {
    #[test]
    fn every_family_parses_the_same_in_random_pieces(cuts in proptest::collection::vec(0usize..400, 0..6)) {
        let samples = [
            (ToolFormat::Harmony, "<|channel|>analysis<|message|>Need it.<|end|><|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"city\": \"Paris\"}"),
            (ToolFormat::Mistral, "ok[TOOL_CALLS]a[ARGS]{\"x\": \"]\"}[TOOL_CALLS]b[CALL_ID]123456789[ARGS]{}"),
            (ToolFormat::Kimi, "<|tool_calls_section_begin|><|tool_call_begin|>functions.a:0<|tool_call_argument_begin|>{\"x\": 1}<|tool_call_end|><|tool_calls_section_end|>"),
            (ToolFormat::Glm, "<tool_call>a<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>"),
            (ToolFormat::DeepSeek, "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>a<｜tool▁sep｜>{\"x\": [1]}<｜tool▁call▁end｜><｜tool▁calls▁end｜>"),
            (ToolFormat::Llama3, "{\"name\": \"a\", \"parameters\": {\"x\": \"{\"}}"),
        ];
        for (format, text) in samples {
            let mut at: Vec<usize> = cuts.iter().map(|c| c % (text.len() + 1)).filter(|&c| text.is_char_boundary(c)).collect();
            at.sort_unstable();
            at.dedup();
            let mut pieces = Vec::new();
            let mut from = 0;
            for c in at {
                pieces.push(&text[from..c]);
                from = c;
            }
            pieces.push(&text[from..]);
            let whole = parse_pieces(format, &[text]);
            prop_assert_eq!(parse_pieces(format, &pieces), whole.clone());
            prop_assert_eq!(whole.calls.len() , 1 + usize::from(format == ToolFormat::Mistral));
        }
    }
}

#[test]
fn json_array_families_parse_each_call_after_content_and_reasoning() {
    let two = "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}, {\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}";
    for (format, text) in [
        (
            ToolFormat::Apriel,
            format!("Here is my plan.[BEGIN FINAL RESPONSE]Sure.\n<tool_calls>[{two}]</tool_calls>"),
        ),
        (
            ToolFormat::Nemotron,
            format!(
                "<think>plan</think>Sure.\n{}[{two}]{}",
                marked("<TOOLCALL>"),
                marked("</TOOLCALL>")
            ),
        ),
        (
            ToolFormat::Cohere,
            format!(
                "{}plan{}Sure.{}[\n    {{\"tool_call_id\": \"0\", \"tool_name\": \"get_weather\", \"parameters\": {{\"city\": \"Paris\"}}}},\n    {{\"tool_call_id\": \"1\", \"tool_name\": \"get_time\", \"parameters\": {{\"tz\": \"CET\"}}}}\n]{}",
                marked("<|START_THINKING|>"),
                marked("<|END_THINKING|>"),
                marked("<|START_ACTION|>"),
                marked("<|END_ACTION|>")
            ),
        ),
        (
            ToolFormat::Apertus,
            format!(
                "{}plan{}Sure.{}[{{\"get_weather\": {{\"city\": \"Paris\"}}}}, {{\"get_time\": {{\"tz\": \"CET\"}}}}]{}",
                marked("<|inner_prefix|>"),
                marked("<|inner_suffix|>"),
                marked("<|tools_prefix|>"),
                marked("<|tools_suffix|>")
            ),
        ),
        (
            ToolFormat::Granite3,
            format!("<think>plan</think>Sure.{}[{two}]", marked("<|tool_call|>")),
        ),
        (
            ToolFormat::MiniMaxM1,
            "<think>plan</think>Sure.\n<tool_calls>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n{\"name\": \"get_time\", \"arguments\": {\"tz\": \"CET\"}}\n</tool_calls>".to_owned(),
        ),
    ] {
        let mut options = options(format);
        options.starts_in_reasoning = format == ToolFormat::Apriel;
        let whole = parse_with(options, &[&text]);
        for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
            assert_eq!(
                parse_with(options, &[&text[..cut], &text[cut..]]),
                whole,
                "{format:?} split at {cut}"
            );
        }
        assert_eq!(
            (whole.reasoning.as_str(), whole.content.as_str()),
            (if format == ToolFormat::Apriel { "Here is my plan." } else { "plan" }, "Sure."),
            "{format:?}: {whole:?}"
        );
        assert_eq!(call(&whole, 0), ("get_weather", &json!({"city": "Paris"})), "{format:?}");
        assert_eq!(call(&whole, 1), ("get_time", &json!({"tz": "CET"})), "{format:?}");
        assert!(whole.ending.all_calls_closed(), "{format:?}: {whole:?}");
    }
}

#[test]
fn gigachat_s_single_call_in_both_versions_and_text_after_a_marker_that_opens_no_call() {
    for (format, text) in [
        (
            ToolFormat::GigaChat3,
            format!(
                "Sure.{}\n\nfunction call{}{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}",
                marked("<|message_sep|>\n\n"),
                marked("<|role_sep|>\n")
            ),
        ),
        (
            ToolFormat::GigaChat31,
            format!(
                "Sure.{}{{\"name\": \"get_weather\", \"arguments\": {{\"city\": \"Paris\"}}}}",
                marked("<|function_call|>")
            ),
        ),
    ] {
        let p = parse(format, &text);
        assert_eq!(p.content, "Sure.", "{format:?}: {p:?}");
        assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
        assert!(p.ending.all_calls_closed(), "{format:?}: {p:?}");
    }
    // a block marker followed by prose: the prose is content, no call
    let p = parse(ToolFormat::Granite3, "<|tool_call|> I cannot call tools.");
    assert!(p.calls.is_empty(), "{p:?}");
    assert_eq!(p.content, "I cannot call tools.");
    // cut inside a call: reported cut
    let p = parse(
        ToolFormat::Nemotron,
        "<TOOLCALL>[{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Pa",
    );
    assert!(p.ending.cut_call && !p.ending.all_calls_closed(), "{p:?}");
}

mod markup;
