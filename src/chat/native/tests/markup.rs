//! The families added with MiniMax-M2 and after: invokes, tags, named calls and literals,
//! each parsed whole and split at every character boundary.

use super::super::super::ToolFormat;
use super::{call, marked, options, parse, parse_with};
use serde_json::json;

#[test]
fn invoke_families_parse_each_call_with_string_and_json_values_after_content_and_reasoning() {
    let cdata = "<![CDATA[a < b\n&c]]>";
    for (format, text) in [
        (
            ToolFormat::MiniMaxM2,
            format!(
                "<think>plan</think>\n\nSure.\n{}\n<invoke name=\"get_weather\">\n<parameter name=\"city\">Paris \"centre\"</parameter>\n<parameter name=\"days\">2</parameter>\n</invoke>\n<invoke name=\"get_time\">\n<parameter name=\"tz\">CET</parameter>\n</invoke>\n{}",
                marked("<minimax:tool_call>"),
                marked("</minimax:tool_call>")
            ),
        ),
        (
            ToolFormat::Glimmer,
            "<think>plan</think>Sure.\n<atem:function_calls>\n<atem:invoke name=\"get_weather\">\n<atem:parameter name=\"city\">Paris \"centre\"</atem:parameter>\n<atem:parameter name=\"days\">2</atem:parameter>\n</atem:invoke>\n</atem:function_calls><atem:function_calls>\n<atem:invoke name=\"get_time\">\n<atem:parameter name=\"tz\">CET</atem:parameter>\n</atem:invoke>\n</atem:function_calls>".to_owned(),
        ),
        (
            ToolFormat::MiniCpm5,
            format!(
                "<think>plan</think>Sure.<function name=\"get_weather\"><param name=\"city\">Paris \"centre\"</param><param name=\"days\">2</param><param name=\"note\">{cdata}</param><param name=\"list\"><![CDATA[[1, 2]]]></param></function><function name=\"get_time\"><param name=\"tz\">CET</param></function>"
            ),
        ),
    ] {
        let p = parse(format, &text);
        assert_eq!(
            (p.reasoning.as_str(), p.content.as_str()),
            ("plan", "Sure."),
            "{format:?}: {p:?}"
        );
        let mut weather = json!({"city": "Paris \"centre\"", "days": 2});
        if format == ToolFormat::MiniCpm5 {
            // in CDATA a value is a string, whatever it looks like
            weather["note"] = json!("a < b\n&c");
            weather["list"] = json!("[1, 2]");
        }
        assert_eq!(call(&p, 0), ("get_weather", &weather), "{format:?}");
        assert_eq!(call(&p, 1), ("get_time", &json!({"tz": "CET"})), "{format:?}");
        assert!(p.ending.all_calls_closed(), "{format:?}: {p:?}");
    }
}

#[test]
fn hy3_s_tagged_pairs_after_its_own_reasoning_markers() {
    let text = format!(
        "{}plan{}Sure.{}\n{}get_weather{}\n{}city{}\n{}Paris{}\n{}days{}\n{}2{}\n{}\n{}get_time{}\n{}\n{}",
        marked("<think:opensource>"),
        marked("</think:opensource>"),
        marked("<tool_calls:opensource>"),
        marked("<tool_call:opensource>"),
        marked("<tool_sep:opensource>"),
        marked("<arg_key:opensource>"),
        marked("</arg_key:opensource>"),
        marked("<arg_value:opensource>"),
        marked("</arg_value:opensource>"),
        marked("<arg_key:opensource>"),
        marked("</arg_key:opensource>"),
        marked("<arg_value:opensource>"),
        marked("</arg_value:opensource>"),
        marked("</tool_call:opensource>"),
        marked("<tool_call:opensource>"),
        marked("<tool_sep:opensource>"),
        marked("</tool_call:opensource>"),
        marked("</tool_calls:opensource>"),
    );
    let p = parse(ToolFormat::Hy3, &text);
    assert_eq!(
        (p.reasoning.as_str(), p.content.as_str()),
        ("plan", "Sure."),
        "{p:?}"
    );
    assert_eq!(
        call(&p, 0),
        ("get_weather", &json!({"city": "Paris", "days": 2}))
    );
    assert_eq!(call(&p, 1), ("get_time", &json!({})));
    assert!(p.ending.all_calls_closed(), "{p:?}");
}

#[test]
fn named_call_families_parse_json_arguments_between_their_markers() {
    let args = "{\"city\": \"Paris\"}";
    let time = "{\"tz\": \"CET\"}";
    // (reasoning, content) expected
    for (format, text, said) in [
        (
            ToolFormat::DeepSeekR1,
            format!(
                "<think>plan</think>Sure.<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather\n```json\n{args}\n```<｜tool▁call▁end｜>\n<｜tool▁call▁begin｜>function<｜tool▁sep｜>get_time\n```json\n{time}\n```\n<｜tool▁call▁end｜><｜tool▁calls▁end｜>"
            ),
            ("plan", "Sure."),
        ),
        (
            ToolFormat::Solar,
            format!(
                "{}plan{}{}assistant{}{}call_1{}get_weather{}{args}{}{}7{}get_time{}{time}{}{}",
                marked("<|think|>"),
                marked("<|end|>"),
                marked("<|begin|>"),
                marked("<|tool_calls|>"),
                marked("<|tool_call:begin|>"),
                marked("<|tool_call:name|>"),
                marked("<|tool_call:args|>"),
                marked("<|tool_call:end|>"),
                marked("<|tool_call:begin|>"),
                marked("<|tool_call:name|>"),
                marked("<|tool_call:args|>"),
                marked("<|tool_call:end|>"),
                marked("<|calls|>"),
            ),
            ("plan", ""),
        ),
        (
            ToolFormat::Functionary,
            format!(
                "Sure.<function=get_weather>{args}</function>\n<function=get_time>{time}</function>"
            ),
            ("", "Sure."),
        ),
    ] {
        let p = parse(format, &text);
        assert_eq!(
            (p.reasoning.as_str(), p.content.trim_end()),
            said,
            "{format:?}: {p:?}"
        );
        assert_eq!(
            call(&p, 0),
            ("get_weather", &json!({"city": "Paris"})),
            "{format:?}"
        );
        assert_eq!(
            call(&p, 1),
            ("get_time", &json!({"tz": "CET"})),
            "{format:?}"
        );
        assert!(p.ending.all_calls_closed(), "{format:?}: {p:?}");
    }
}

#[test]
fn llm_jp_s_harmony_parallel_calls_each_in_its_own_message() {
    let text = format!(
        "{s}analysis{m}plan{e}{s}assistant to=functions.get_weather{c}commentary {k} json{m}{{\"city\": \"Paris\"}}{e}{s}assistant to=functions.get_time{c}commentary {k} json{m}{{\"tz\": \"CET\"}}{call}",
        s = format!("{}assistant{}", marked("<|start|>"), marked("<|channel|>")),
        m = marked("<|message|>"),
        e = marked("<|end|>"),
        c = marked("<|channel|>"),
        k = marked("<|constrain|>"),
        call = marked("<|call|>"),
    );
    let p = parse(ToolFormat::Harmony, &text);
    assert_eq!(p.reasoning, "plan", "{p:?}");
    assert_eq!(call(&p, 0), ("get_weather", &json!({"city": "Paris"})));
    assert_eq!(call(&p, 1), ("get_time", &json!({"tz": "CET"})));
    assert!(p.content.is_empty() && p.ending.all_calls_closed(), "{p:?}");
}

#[test]
fn kimi_k3_s_tags_give_reasoning_content_and_calls_typed_by_their_type_attribute() {
    let (open, close, sep) = (marked("<|open|>"), marked("<|close|>"), marked("<|sep|>"));
    let tag = |t: &str| format!("{open}{t}{sep}");
    let end = |t: &str| format!("{close}{t}{sep}");
    let text = format!(
        "plan{}{}Sure.{}{}{}{}\"42\"{}{}2{}{}{}{}{}",
        end("think"),
        tag("response"),
        end("response"),
        tag("tools"),
        tag("call tool=\"get_weather\" index=\"1\""),
        tag("argument key=\"city\" type=\"string\""),
        end("argument"),
        tag("argument key=\"days\" type=\"number\""),
        end("argument"),
        end("call"),
        tag("call tool=\"get_time\" index=\"2\""),
        end("call"),
        end("tools"),
    );
    let mut opened = options(ToolFormat::KimiK3);
    opened.starts_in_reasoning = true;
    let whole = parse_with(opened, &[&text]);
    for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        assert_eq!(
            parse_with(opened, &[&text[..cut], &text[cut..]]),
            whole,
            "split at {cut}"
        );
    }
    assert_eq!(
        (whole.reasoning.as_str(), whole.content.as_str()),
        ("plan", "Sure."),
        "{whole:?}"
    );
    // a string that looks like JSON stays a string: its type says so
    assert_eq!(
        call(&whole, 0),
        ("get_weather", &json!({"city": "\"42\"", "days": 2}))
    );
    assert_eq!(call(&whole, 1), ("get_time", &json!({})));
    assert!(whole.ending.all_calls_closed(), "{whole:?}");
}

#[test]
fn literal_families_give_their_calls_when_the_block_closes_and_a_cut_block_is_reported_cut() {
    let q = marked("<|\"|>");
    for (format, text) in [
        (
            ToolFormat::Gemma4,
            format!(
                "{}thought\nplan{}Sure.{}call:get_weather{{city:{q}Paris, \"centre\"{q},days:2}}{}{}call:get_time{{tz:{q}CET{q}}}{}",
                marked("<|channel>"),
                marked("<channel|>"),
                marked("<|tool_call>"),
                marked("<tool_call|>"),
                marked("<|tool_call>"),
                marked("<tool_call|>"),
            ),
        ),
        (
            ToolFormat::Lfm2,
            format!(
                "<think>plan</think>Sure.{}[get_weather(city='Paris, \"centre\"', days=2), get_time(tz='CET')]{}",
                marked("<|tool_call_start|>"),
                marked("<|tool_call_end|>"),
            ),
        ),
    ] {
        let p = parse(format, &text);
        assert_eq!(
            (p.reasoning.trim(), p.content.as_str()),
            ("plan", "Sure."),
            "{format:?}: {p:?}"
        );
        assert_eq!(
            call(&p, 0),
            (
                "get_weather",
                &json!({"city": "Paris, \"centre\"", "days": 2})
            ),
            "{format:?}"
        );
        assert_eq!(
            call(&p, 1),
            ("get_time", &json!({"tz": "CET"})),
            "{format:?}"
        );
        assert!(p.ending.all_calls_closed(), "{format:?}: {p:?}");
    }
    // a block cut after its call's name: the call is reported cut, nothing reaches content
    // (regression: a bare `<tool_call>` was left as content)
    for (format, text) in [
        (
            ToolFormat::Lfm2,
            "Sure.<|tool_call_start|>[get_weather(city='Pa",
        ),
        (
            ToolFormat::Gemma4,
            "Sure.<|tool_call>call:get_weather{city:<|\"|>Pa",
        ),
    ] {
        let p = parse(format, text);
        assert!(p.ending.cut_call, "{format:?}: {p:?}");
        assert_eq!(p.content, "Sure.", "{format:?}: {p:?}");
    }
    // a block that holds no call is the text the model wrote
    let p = parse(
        ToolFormat::Lfm2,
        "<|tool_call_start|>no call<|tool_call_end|>",
    );
    assert!(p.calls.is_empty(), "{p:?}");
    assert_eq!(p.content, "<|tool_call_start|>no call<|tool_call_end|>");
}

#[test]
fn a_call_tag_the_model_writes_about_in_its_reasoning_or_outside_a_block_stays_text() {
    // regression: the invoke opened a call and everything after it was dropped
    let p = parse(
        ToolFormat::MiniMaxM2,
        "<think>I will call <invoke name=\"get_weather\"> next.</think>\n\nIt is sunny.",
    );
    assert_eq!(
        (p.reasoning.as_str(), p.content.trim()),
        (
            "I will call <invoke name=\"get_weather\"> next.",
            "It is sunny."
        ),
        "{p:?}"
    );
    assert!(p.calls.is_empty(), "{p:?}");
    // Glimmer's invoke outside its block is prose
    let p = parse(
        ToolFormat::Glimmer,
        "Write <atem:invoke name=\"f\"> inside a block.",
    );
    assert_eq!(p.content, "Write <atem:invoke name=\"f\"> inside a block.");
    assert!(p.calls.is_empty(), "{p:?}");
    // MiniCPM5 (no block) and functionary, in reasoning the prompt opened
    for (format, text) in [
        (
            ToolFormat::MiniCpm5,
            "maybe <function name=\"f\"><param name=\"x\">1</param></function></think>Done.",
        ),
        (
            ToolFormat::Functionary,
            "maybe <function=f>{\"x\": 1}</function></think>Done.",
        ),
    ] {
        let mut opened = options(format);
        opened.starts_in_reasoning = true;
        let p = parse_with(opened, &[text]);
        assert!(p.calls.is_empty(), "{format:?}: {p:?}");
        assert!(
            p.reasoning.starts_with("maybe <function"),
            "{format:?}: {p:?}"
        );
        assert_eq!(p.content, "Done.", "{format:?}: {p:?}");
    }
}

#[test]
fn a_named_call_that_ends_before_its_arguments_has_none() {
    // regression: DeepSeek R1's rewriter waited for a JSON fence that never came
    let p = parse(
        ToolFormat::DeepSeekR1,
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>ping<｜tool▁call▁end｜><｜tool▁calls▁end｜>After.",
    );
    assert_eq!(call(&p, 0), ("ping", &json!({})));
    assert_eq!(p.content, "After.");
}
