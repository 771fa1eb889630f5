//! An editor's autocomplete: `/v1/completions` (and `/v1/fim/completions`) with a `suffix`,
//! and llama.cpp's `/infill`, on the simulated engine's fill-in-the-middle tokens (a script
//! answers only when the prompt holds them in prefix-suffix-middle order), at `fim_priority`;
//! the real test model, which has no such tokens, refuses them by name.

use crate::api_fake::{Server, Setup, error_of, server, sse_data};
use crate::support::script;
use futures_util::StreamExt;
use serde_json::{Value, json};
use strata_desk::config::AppSettings;
use strata_desk::engine_worker::{FakeOptions, WorkerOptions};
use strata_desk::service::SlotStatus;

/// What the simulated model writes when, and only when, its prompt holds the FIM tokens
/// (as the fake engine's script names them) laid out as a real FIM model reads them.
const ADD_TOKENS: &str =
    "<<FIM_PRE>>def add(a, b):\n    <<FIM_SUF>>\n\nprint(add(1, 2))\n<<FIM_MID>>";
/// The same prompt as text with the tokens' names, as an editor that renders the template
/// itself sends it.
const ADD_PROMPT: &str =
    "<|fim_prefix|>def add(a, b):\n    <|fim_suffix|>\n\nprint(add(1, 2))\n<|fim_middle|>";
const ADD_ANSWER: &str = "return a + b";

fn scripted(rules: &[(&str, &str)]) -> Setup {
    Setup {
        fake: FakeOptions {
            script: Some(script(rules)),
            ..Setup::default().fake
        },
        ..Setup::default()
    }
}

async fn post(server: &Server, path: &str, body: &Value) -> reqwest::Response {
    reqwest::Client::new()
        .post(format!("{}{path}", server.base))
        .json(body)
        .send()
        .await
        .unwrap()
}

/// Continue's request (`@continuedev/openai-adapters` 1.37.0, captured in
/// `tests/fixtures/agents/continue-fim-completions.json`).
fn continue_request() -> (String, Value) {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/agents/continue-fim-completions.json"
    );
    let fixture: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    (
        fixture["path"].as_str().unwrap().to_owned(),
        fixture["body"].clone(),
    )
}

#[tokio::test]
async fn continue_s_fim_request_is_answered_from_the_model_s_fim_tokens_in_order() {
    let server = server(scripted(&[(ADD_TOKENS, ADD_ANSWER)])).await;
    let (path, body) = continue_request();
    assert_eq!(path, "/v1/fim/completions");
    for path in ["/v1/fim/completions", "/v1/completions"] {
        let response = post(&server, path, &body).await;
        assert_eq!(response.status(), 200, "{path}");
        let events = sse_data(&response.text().await.unwrap());
        assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{path}");
        let chunks: Vec<Value> = events[..events.len() - 1]
            .iter()
            .map(|e| serde_json::from_str(e).unwrap())
            .collect();
        let text: String = chunks
            .iter()
            .filter_map(|c| c["choices"][0]["text"].as_str())
            .collect();
        assert_eq!(text, ADD_ANSWER, "{path}");
        assert!(chunks.iter().all(|c| c["object"] == "text_completion"));
        assert!(
            chunks
                .iter()
                .all(|c| c["id"].as_str().unwrap().starts_with("cmpl-"))
        );
        assert_eq!(
            chunks.last().unwrap()["choices"][0]["finish_reason"],
            "stop"
        );
    }
}

#[tokio::test]
async fn a_whole_completion_reads_special_tokens_in_its_prompt_and_text_in_its_suffix() {
    let server = server(scripted(&[
        ("<<FIM_PRE>><|fim_prefix|>def add", "names stayed text"),
        (ADD_TOKENS, ADD_ANSWER),
        ("<think>", "<think>not reasoning</think>plain"),
    ]))
    .await;
    // an editor that renders the FIM template itself (Continue for a model it knows)
    let body = json!({"prompt": ADD_PROMPT, "max_tokens": 32});
    let answer: Value = post(&server, "/v1/completions", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["object"], "text_completion");
    assert_eq!(answer["choices"][0]["text"], ADD_ANSWER);
    assert_eq!(answer["choices"][0]["finish_reason"], "stop");
    assert!(answer["usage"]["prompt_tokens"].as_u64().unwrap() > 0);
    // with a suffix, the prompt's names are text after the real prefix token
    let body = json!({"prompt": ADD_PROMPT, "suffix": "", "max_tokens": 32});
    let answer: Value = post(&server, "/v1/completions", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(answer["choices"][0]["text"], "names stayed text");
    // a completion is text: a `<think>` it writes is not taken for reasoning
    let body = json!({"prompt": "<think>", "suffix": "", "max_tokens": 64});
    let answer: Value = post(&server, "/v1/completions", &body)
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        answer["choices"][0]["text"],
        "<think>not reasoning</think>plain"
    );
}

#[tokio::test]
async fn infill_reads_the_other_files_first_and_answers_in_llama_cpp_s_shape() {
    let expected = "<<FIM_REP>>project\n<<FIM_SEP>>util.py\ndef helper(): pass\
                    <<FIM_SEP>>filename\n<<FIM_PRE>>x = hel<<FIM_SUF>>\n<<FIM_MID>>";
    let server = server(scripted(&[(expected, "per()")])).await;
    // llama.vscode's fields (its options for llama.cpp's slots and timers are accepted)
    let body = json!({
        "input_prefix": "x = ", "input_suffix": "\n", "prompt": "hel",
        "input_extra": [{"filename": "util.py", "text": "def helper(): pass"}],
        "n_predict": 16, "top_k": 40, "top_p": 0.99, "stream": false,
        "samplers": ["top_k", "top_p", "infill"], "cache_prompt": true,
        "t_max_prompt_ms": 500, "t_max_predict_ms": 1000, "n_indent": 0,
    });
    let response = post(&server, "/infill", &body).await;
    assert_eq!(response.status(), 200);
    let answer: Value = response.json().await.unwrap();
    assert_eq!(answer["content"], "per()", "{answer}");
    assert_eq!(answer["stop"], true);
    assert_eq!(answer["stop_type"], "eos");
    assert_eq!(answer["tokens_predicted"], 6);
    assert!(answer["tokens_evaluated"].as_u64().unwrap() > 20);

    let mut body = body;
    body["stream"] = json!(true);
    let text = post(&server, "/infill", &body).await.text().await.unwrap();
    let events: Vec<Value> = sse_data(&text)
        .iter()
        .map(|e| serde_json::from_str(e).unwrap())
        .collect();
    let content: String = events
        .iter()
        .filter_map(|e| e["content"].as_str())
        .collect();
    assert_eq!(content, "per()");
    let last = events.last().unwrap();
    assert_eq!(
        (last["stop"].clone(), last["content"].clone()),
        (json!(true), json!(""))
    );
    assert!(
        events[..events.len() - 1]
            .iter()
            .all(|e| e["stop"] == false)
    );
}

#[tokio::test]
async fn an_autocomplete_goes_before_chat_at_fim_priority_unless_it_names_one() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..Setup::default().fake
        },
        app: AppSettings {
            fim_priority: Some(7),
            ..AppSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let chat =
        |text: &str| json!({"messages": [{"role": "user", "content": text}], "max_tokens": 30});
    let base = server.base.clone();
    let send = move |path: &'static str, body: Value, header: Option<&'static str>| {
        let base = base.clone();
        tokio::spawn(async move {
            let mut request = reqwest::Client::new()
                .post(format!("{base}{path}"))
                .json(&body);
            if let Some(priority) = header {
                request = request.header("x-priority", priority);
            }
            let response = request.send().await.unwrap();
            let _ = response.text().await;
            std::time::Instant::now()
        })
    };
    let running = send("/v1/chat/completions", chat("first"), None);
    server
        .until("one decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    let chat_waits = send("/v1/chat/completions", chat("second"), None);
    server.until("chat waits", |s| s.waiting.len() == 1).await;
    let fim = json!({"prompt": "a", "suffix": "b", "max_tokens": 4});
    let fim_waits = send("/v1/completions", fim.clone(), None);
    let named = send(
        "/infill",
        json!({"input_prefix": "a", "n_predict": 4}),
        Some("-2"),
    );
    server.until("three wait", |s| s.waiting.len() == 3).await;
    let snapshot = server.service.snapshot();
    let mut priorities: Vec<i32> = snapshot.waiting.iter().map(|w| w.priority).collect();
    priorities.sort_unstable();
    assert_eq!(priorities, vec![-2, 0, 7]);
    let rows: Vec<(String, String)> = snapshot
        .requests
        .iter()
        .map(|r| (format!("{:?}", r.route), r.client_id.clone()))
        .collect();
    assert!(
        rows.iter()
            .any(|(route, id)| route == "Completions" && id.starts_with("cmpl-")),
        "{rows:?}"
    );
    assert!(
        rows.iter()
            .any(|(route, id)| route == "Infill" && id.starts_with("infill-")),
        "{rows:?}"
    );
    let fim_done = fim_waits.await.unwrap();
    let chat_done = chat_waits.await.unwrap();
    let named_done = named.await.unwrap();
    running.await.unwrap();
    assert!(
        fim_done < chat_done,
        "the autocomplete finished after the chat request"
    );
    assert!(
        chat_done < named_done,
        "a named priority of -2 went before chat"
    );
}

#[tokio::test]
async fn under_lower_first_the_default_autocomplete_priority_still_goes_before_chat() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..Setup::default().fake
        },
        scheduler: strata_desk::scheduler::SchedulerSettings {
            priority_order: strata_desk::scheduler::PriorityOrder::LowerFirst,
            ..Default::default()
        },
        ..Setup::default()
    })
    .await;
    let base = server.base.clone();
    let running = tokio::spawn(async move {
        let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 40});
        let client = reqwest::Client::new();
        let response = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send();
        response.await.unwrap().text().await.unwrap()
    });
    server
        .until("one decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    let base = server.base.clone();
    let fim = tokio::spawn(async move {
        let body = json!({"prompt": "a", "suffix": "b", "max_tokens": 2});
        let client = reqwest::Client::new();
        let response = client
            .post(format!("{base}/v1/completions"))
            .json(&body)
            .send();
        response.await.unwrap().status()
    });
    server.until("it waits", |s| s.waiting.len() == 1).await;
    // in scheduler order (higher first): 5 ahead of chat's 0
    assert_eq!(server.service.snapshot().waiting[0].priority, 5);
    assert_eq!(fim.await.unwrap(), 200);
    running.await.unwrap();
}

#[tokio::test]
async fn an_autocomplete_gets_no_small_request_boost_its_route_default_counts_as_given() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..Setup::default().fake
        },
        scheduler: strata_desk::scheduler::SchedulerSettings {
            solo_priority: true,
            min_run_quantum_secs: 3600.0,
            ..Default::default()
        },
        ..Setup::default()
    })
    .await;
    let base = server.base.clone();
    let running = tokio::spawn(async move {
        let body = json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 40});
        let client = reqwest::Client::new();
        let response = client
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send();
        response.await.unwrap().text().await.unwrap()
    });
    server
        .until("one decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    let base = server.base.clone();
    let fim = tokio::spawn(async move {
        let body = json!({"prompt": "a", "suffix": "b", "max_tokens": 2});
        let client = reqwest::Client::new();
        let response = client
            .post(format!("{base}/v1/completions"))
            .json(&body)
            .send();
        response.await.unwrap().status()
    });
    server.until("it waits", |s| s.waiting.len() == 1).await;
    let waiting = server.service.snapshot().waiting[0].clone();
    // small and unranked by its client, but ranked by its route: 5, no +1
    assert_eq!((waiting.priority, waiting.boost), (5, 0), "{waiting:?}");
    assert_eq!(fim.await.unwrap(), 200);
    running.await.unwrap();
}

#[tokio::test]
async fn an_autocomplete_whose_client_left_is_cancelled() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..Setup::default().fake
        },
        ..Setup::default()
    })
    .await;
    for (path, body) in [
        (
            "/v1/completions",
            json!({"prompt": "a", "suffix": "b", "max_tokens": 400, "stream": true}),
        ),
        (
            "/infill",
            json!({"input_prefix": "a", "n_predict": 400, "stream": true}),
        ),
    ] {
        let response = post(&server, path, &body).await;
        let mut stream = response.bytes_stream();
        stream.next().await.unwrap().unwrap();
        drop(stream);
        server
            .until("nothing runs", |s| {
                s.slots.iter().all(|slot| slot.request_id.is_none())
            })
            .await;
    }
    let cancelled = server.service.snapshot().counters.cancellations_by_state;
    assert_eq!(cancelled.decoding, 2, "{cancelled:?}");
}

#[tokio::test]
async fn bad_autocomplete_bodies_are_400s_naming_the_field() {
    let server = server(Setup::default()).await;
    for (path, body, param) in [
        ("/v1/completions", json!({"suffix": "x"}), "prompt"),
        ("/v1/completions", json!({"prompt": 5}), "prompt"),
        ("/v1/completions", json!({"prompt": ["a", "b"]}), "prompt"),
        ("/v1/completions", json!({"prompt": ""}), "prompt"),
        ("/v1/completions", json!({"prompt": "a", "n": 2}), "n"),
        (
            "/v1/completions",
            json!({"prompt": "a", "echo": true}),
            "echo",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "logprobs": 3}),
            "logprobs",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "max_tokens": 0}),
            "max_tokens",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "temperature": 3}),
            "temperature",
        ),
        (
            "/v1/completions",
            json!({"prompt": "a", "priority": "high"}),
            "priority",
        ),
        ("/infill", json!({"input_prefix": 5}), "input_prefix"),
        (
            "/infill",
            json!({"input_extra": [{"text": 1}]}),
            "input_extra[0].text",
        ),
        ("/infill", json!({"n_predict": 0}), "n_predict"),
        ("/infill", json!({"stop": "x"}), "stop"),
    ] {
        let (status, error) = error_of(post(&server, path, &body).await).await;
        assert_eq!(status, 400, "{path} {body}: {error}");
        assert_eq!(error["error"]["param"], param, "{path} {body}: {error}");
    }
    // and the server still answers
    let ok = post(
        &server,
        "/v1/completions",
        &json!({"prompt": "a", "max_tokens": 2}),
    )
    .await;
    assert_eq!(ok.status(), 200);
}

#[tokio::test]
async fn the_test_model_has_no_fim_tokens_and_refuses_an_infill_by_name_but_completes_text() {
    let _serial = crate::support::real_model();
    let server = server(Setup {
        real: Some(WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 2048,
            threads: 1,
            ..strata_desk::protocol::EngineSettings::for_model(crate::support::model_path())
        })),
        ..Setup::default()
    })
    .await;
    for (path, body, param) in [
        (
            "/v1/completions",
            json!({"prompt": "def f(", "suffix": ")"}),
            "suffix",
        ),
        (
            "/infill",
            json!({"input_prefix": "def f(", "input_suffix": ")"}),
            "input_prefix",
        ),
    ] {
        let (status, error) = error_of(post(&server, path, &body).await).await;
        assert_eq!(status, 400, "{path}: {error}");
        assert_eq!(error["error"]["param"], param);
        let message = error["error"]["message"].as_str().unwrap();
        // the model's name, from its GGUF (`general.name`)
        assert!(message.to_lowercase().contains("smollm2"), "{message}");
        assert!(
            message.contains("no fill-in-the-middle tokens"),
            "{message}"
        );
    }
    let body = json!({"prompt": "The capital of France is", "max_tokens": 8, "temperature": 0});
    let answer: Value = post(&server, "/v1/completions", &body)
        .await
        .json()
        .await
        .unwrap();
    let text = answer["choices"][0]["text"].as_str().unwrap();
    assert!(!text.is_empty(), "{answer}");
    assert_eq!(answer["usage"]["completion_tokens"], 8, "{answer}");
}
