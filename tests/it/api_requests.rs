//! `/v1/scheduler`'s `requests[]`: one row per live request with the id its client sees, who
//! sent it (the User-Agent's product here), and why it waits or is parked, in words.

use crate::api_fake::{Setup, chat, server};
use crate::api_observe::{get_json, preempting_server, streaming};
use serde_json::{Value, json};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::service::SlotStatus;

fn row<'a>(v: &'a Value, client_id: &str) -> &'a Value {
    v["requests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["client_id"] == client_id)
        .unwrap_or_else(|| panic!("no row {client_id}: {v}"))
}

#[tokio::test]
async fn a_waiting_request_is_told_when_the_stream_may_be_paused_and_the_paused_stream_for_whom() {
    let server = preempting_server(1.5).await;
    let long = server
        .post(&streaming("a long story", 400))
        .header("user-agent", "claude-cli/2.0.1 (external, cli)")
        .send()
        .await
        .unwrap();
    server
        .until("the long one decodes", |s| {
            s.slots.iter().any(|x| x.state == SlotStatus::Decoding)
        })
        .await;
    let mut short = chat("a quick question", 200);
    short["priority"] = json!(5);
    let short = tokio::spawn(
        server
            .post(&short)
            .header("user-agent", "codex_cli_rs/0.42.0")
            .send(),
    );
    server
        .until("the short one waits", |s| s.waiting.len() == 1)
        .await;
    let v = get_json(&server, "/v1/scheduler").await;
    let stream = row(&v, "chatcmpl-1");
    assert_eq!(stream["state"], "decoding", "{v}");
    assert_eq!(stream["client"], "claude-cli");
    assert_eq!(stream["route"], "chat_completions");
    assert_eq!(stream["max_tokens"], 400);
    let waiter = row(&v, "chatcmpl-2");
    assert_eq!(waiter["client"], "codex_cli_rs");
    assert_eq!(waiter["effective_priority"], 5);
    let why = waiter["why"].as_str().unwrap();
    assert!(
        why.starts_with("waits for the slot: chatcmpl-1 decoding, may be paused in "),
        "{why}"
    );

    // the short one may still be reading its prompt when the long one is parked: wait for both
    server
        .until("the long one is parked and the short one decodes", |s| {
            s.parked.len() == 1 && s.slots.iter().any(|x| x.state == SlotStatus::Decoding)
        })
        .await;
    let v = get_json(&server, "/v1/scheduler").await;
    assert_eq!(
        row(&v, "chatcmpl-1")["why"],
        "paused for chatcmpl-2 (priority 5); resumes when it is done, nothing lost",
        "{v}"
    );
    assert_eq!(row(&v, "chatcmpl-1")["state"], "parked");
    assert_eq!(row(&v, "chatcmpl-2")["state"], "decoding");

    // the log names the ids: arrivals with their client, the pause with whom it was for
    let lines: Vec<(String, String)> = v["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            (
                e["kind"].as_str().unwrap().to_owned(),
                e["text"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let has = |kind: &str, start: &str| {
        lines
            .iter()
            .any(|(k, text)| k == kind && text.starts_with(start))
    };
    assert!(
        has("arrived", "chatcmpl-1 arrived from claude-cli:"),
        "{lines:?}"
    );
    assert!(
        has("arrived", "chatcmpl-2 arrived from codex_cli_rs:"),
        "{lines:?}"
    );
    assert!(has("admitted", "chatcmpl-1 got a slot"), "{lines:?}");
    assert!(
        has("paused", "chatcmpl-1 was paused for chatcmpl-2"),
        "{lines:?}"
    );
    drop(long);
    short.abort();
}

#[tokio::test]
async fn a_prompt_longer_than_the_context_is_logged_as_a_refusal_with_its_numbers() {
    let server = server(Setup {
        fake: FakeOptions {
            kv_cells: 64,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let long = "many words ".repeat(40);
    let answer = server.post(&chat(&long, 4)).send().await.unwrap();
    assert_eq!(answer.status(), 400);
    let v = get_json(&server, "/v1/scheduler").await;
    let refused = v["log"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["kind"] == "refused")
        .unwrap_or_else(|| panic!("no refusal logged: {v}"));
    let text = refused["text"].as_str().unwrap();
    assert!(
        text.starts_with("refused a request: the prompt has ")
            && text.contains("tokens; this model's context allows"),
        "{text}"
    );
    assert_eq!(v["counters"]["refusals"], 1);
    let banner = &v["last_length_refusal"];
    assert!(banner["prompt_tokens"].as_u64().unwrap() > 64, "{banner}");
    assert_eq!(banner["max_context_tokens"], refused_limit(text));
    assert_eq!(banner["route"], "chat_completions");
}

/// The context limit a refusal's words give.
fn refused_limit(text: &str) -> u64 {
    text.rsplit(' ').next().unwrap().parse().unwrap()
}

#[tokio::test]
async fn a_pause_won_by_the_small_request_boost_names_the_boost_in_the_log_and_the_why() {
    let server = preempting_server(0.3).await;
    // the agent's stream gives its priority (0: no boost); a bare request gives none
    let mut long = streaming("a long story", 400);
    long["priority"] = json!(0);
    let long = server.post(&long).send().await.unwrap();
    server
        .until("the long one decodes", |s| {
            s.slots.iter().any(|x| x.state == SlotStatus::Decoding)
        })
        .await;
    let short = tokio::spawn(server.post(&chat("a quick question", 200)).send());
    server
        .until("the long one is parked", |s| s.parked.len() == 1)
        .await;
    let v = get_json(&server, "/v1/scheduler").await;
    assert_eq!(
        row(&v, "chatcmpl-1")["why"],
        "paused for chatcmpl-2 (priority 1: 0 + 1 small-request boost); resumes when it is \
         done, nothing lost",
        "{v}"
    );
    let short_row = row(&v, "chatcmpl-2");
    assert_eq!(
        (short_row["boost"].as_i64(), short_row["aging"].as_i64()),
        (Some(1), Some(0))
    );
    let texts: Vec<&str> = v["log"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["text"].as_str().unwrap())
        .collect();
    assert!(
        texts.iter().any(|t| t.starts_with("chatcmpl-2 arrived")
            && t.ends_with("priority 1: 0 + 1 small-request boost")),
        "{texts:?}"
    );
    assert!(
        texts.iter().any(|t| t.starts_with(
            "chatcmpl-1 was paused for chatcmpl-2 (priority 1: 0 + 1 small-request boost)"
        )),
        "{texts:?}"
    );
    drop(long);
    short.abort();
}
