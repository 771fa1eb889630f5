//! Tool calls in each family's native form on the real test model: the family forced by
//! `tool_call_format`, `tool_choice: required` constrains the output to that form's grammar
//! (which compiles against the model's vocabulary), and the family's parser returns the call.

use crate::api_fake::{Setup, chat, server};
use crate::support::{model_path, real_model, tokenizer};
use serde_json::{Value, json};
use strata_desk::config::{AppSettings, ToolCallFormat};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::grammar::{CallForm, ToolSpec, for_native_calls};

fn weather() -> Value {
    json!({"type": "object", "properties": {
        "city": {"type": "string", "maxLength": 20},
        "days": {"type": "integer", "minimum": 1, "maximum": 7}
    }, "required": ["city", "days"]})
}

#[test]
fn every_native_call_grammar_compiles_against_the_test_model_s_vocabulary() {
    let tools = [ToolSpec {
        name: "get_weather".into(),
        parameters: weather(),
    }];
    for form in CallForm::ALL {
        for lazy in [true, false] {
            let grammar = for_native_calls(form, &tools, lazy).unwrap();
            tokenizer()
                .check_grammar(&grammar.gbnf)
                .unwrap_or_else(|e| panic!("{form:?}: {e}\n{}", grammar.gbnf));
        }
    }
}

#[tokio::test]
async fn a_required_call_on_the_real_model_comes_back_as_a_call_in_every_forced_family() {
    let _serial = real_model();
    for format in [
        ToolCallFormat::Mistral,
        ToolCallFormat::KimiK2,
        ToolCallFormat::DeepseekV3,
        ToolCallFormat::Harmony,
        ToolCallFormat::Llama3,
        ToolCallFormat::Qwen3Coder,
        ToolCallFormat::Glm4,
        ToolCallFormat::DeepseekV32,
        ToolCallFormat::Apriel,
        ToolCallFormat::NemotronV2,
        ToolCallFormat::Cohere,
        ToolCallFormat::Apertus,
        ToolCallFormat::Granite3,
        ToolCallFormat::MinimaxM1,
        ToolCallFormat::Gigachat3,
        ToolCallFormat::Gigachat31,
        ToolCallFormat::DeepseekR1,
        ToolCallFormat::SolarOpen,
        ToolCallFormat::FunctionaryV31,
        ToolCallFormat::MinimaxM2,
        ToolCallFormat::MuseGlimmer,
        ToolCallFormat::MiniCpm5,
        ToolCallFormat::Hy3,
        ToolCallFormat::KimiK3,
        ToolCallFormat::Gemma4,
        ToolCallFormat::Lfm2,
    ] {
        let server = server(Setup {
            real: Some(WorkerOptions::of(strata_desk::protocol::EngineSettings {
                ctx_tokens: 4096,
                threads: 1,
                ..strata_desk::protocol::EngineSettings::for_model(model_path())
            })),
            app: AppSettings {
                tool_call_format: format,
                ..AppSettings::default()
            },
            ..Setup::default()
        })
        .await;
        let mut body = chat("What is the weather in Paris for the next 3 days?", 200);
        body["tools"] = json!([{"type": "function", "function": {
            "name": "get_weather", "parameters": weather(),
        }}]);
        body["tool_choice"] = json!("required");
        let answer: Value = server
            .post(&body)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let choice = &answer["choices"][0];
        // a grammar that allows several calls may let this small model call again until
        // the token limit: the calls that closed are returned either way
        let finish = choice["finish_reason"].as_str().unwrap_or("");
        assert!(
            finish == "tool_calls" || finish == "length",
            "{format:?}: {answer}"
        );
        let call = &choice["message"]["tool_calls"][0]["function"];
        assert_eq!(call["name"], "get_weather", "{format:?}: {answer}");
        let args: Value = serde_json::from_str(call["arguments"].as_str().unwrap()).unwrap();
        assert!(args["city"].is_string(), "{format:?}: {args}");
        assert!(args["days"].is_u64(), "{format:?}: {args}");
        // a clean end leaves no text beside the calls (a cut one may leave its start)
        let content = choice["message"]["content"].as_str().unwrap_or("");
        assert!(
            finish == "length" || content.is_empty(),
            "{format:?}: no marker leaks into content: {answer}"
        );
        assert!(
            !content.contains(['\u{F8F4}', '\u{F8F5}']),
            "{format:?}: no control mark reaches a client: {answer}"
        );
    }
}
