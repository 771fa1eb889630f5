//! The bounds on work before the queue (hardening item 2), over the simulated engine: each
//! refused request gets its 4xx and the server goes on serving the next one.

use crate::api_fake::{Setup, chat, error_of, server};
use serde_json::{Value, json};
use std::time::{Duration, Instant};
use strata_desk::config::AppSettings;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

fn tool(name: &str, parameters: Value) -> Value {
    json!({"type": "function", "function": {"name": name, "parameters": parameters}})
}

fn bounded(app: AppSettings) -> Setup {
    Setup {
        app,
        ..Setup::default()
    }
}

#[tokio::test]
async fn a_request_offering_more_tools_than_max_tools_is_a_400_and_the_next_is_served() {
    let server = server(bounded(AppSettings {
        max_tools: 3,
        ..AppSettings::default()
    }))
    .await;
    let mut body = chat("hello", 2);
    body["tools"] = (0..4)
        .map(|i| tool(&format!("t{i}"), json!({"type": "object"})))
        .collect();
    let (status, error) = error_of(server.post(&body).send().await.unwrap()).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "tools");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("at most 3") && message.contains("max_tools") && message.contains("got 4"),
        "{message}"
    );
    body["tools"].as_array_mut().unwrap().pop();
    assert_eq!(server.post(&body).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn a_tool_schema_over_max_tool_schema_kib_is_a_400_naming_the_tool() {
    let server = server(bounded(AppSettings {
        max_tool_schema_kib: 1,
        ..AppSettings::default()
    }))
    .await;
    let big = json!({"type": "object", "properties": {"x": {"type": "string", "description": "d".repeat(1100)}}});
    let mut body = chat("hello", 2);
    body["tools"] = json!([tool("small", json!({"type": "object"})), tool("big", big)]);
    let (status, error) = error_of(server.post(&body).send().await.unwrap()).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "tools[1].function.parameters");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_tool_schema_kib"),
        "{error}"
    );
    body["tools"] = json!([tool("small", json!({"type": "object"}))]);
    assert_eq!(server.post(&body).send().await.unwrap().status(), 200);
}

#[tokio::test]
async fn many_tools_with_one_name_given_twice_are_refused_naming_the_second() {
    let server = server(Setup::default()).await;
    let mut tools: Vec<Value> = (0..200)
        .map(|i| tool(&format!("t{i}"), json!({"type": "object"})))
        .collect();
    tools.push(tool("t17", json!({"type": "object"})));
    let mut body = chat("hello", 2);
    body["tools"] = json!(tools);
    let (status, error) = error_of(server.post(&body).send().await.unwrap()).await;
    assert_eq!(status, 400, "{error}");
    assert_eq!(error["error"]["param"], "tools[200].function.name");
}

#[tokio::test]
async fn stop_strings_over_the_count_or_length_caps_are_400s_naming_the_field() {
    let server = server(bounded(AppSettings {
        max_stop_strings: 2,
        max_stop_string_bytes: 8,
        ..AppSettings::default()
    }))
    .await;
    let client = reqwest::Client::new();
    let mut body = chat("hello", 2);
    body["stop"] = json!(["a", "b", "c"]);
    let (status, error) = error_of(server.post(&body).send().await.unwrap()).await;
    assert_eq!((status, &error["error"]["param"]), (400, &json!("stop")));
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_stop_strings")
    );
    body["stop"] = json!(["a", "123456789"]);
    let (status, error) = error_of(server.post(&body).send().await.unwrap()).await;
    assert_eq!((status, &error["error"]["param"]), (400, &json!("stop[1]")));
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("max_stop_string_bytes")
    );
    body["stop"] = json!(["a", "12345678"]);
    assert_eq!(server.post(&body).send().await.unwrap().status(), 200);

    let anthropic = json!({"model": "m", "max_tokens": 2, "stop_sequences": ["x", "y", "z"],
        "messages": [{"role": "user", "content": "hello"}]});
    let response = client
        .post(format!("{}/v1/messages", server.base))
        .json(&anthropic)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 400);
    let error: Value = response.json().await.unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("`stop_sequences` takes at most 2"),
        "{error}"
    );
}

/// Opens a raw connection and sends `head` (a request cut short).
async fn send_raw(base: &str, head: &str) -> tokio::net::TcpStream {
    let addr = base.trim_start_matches("http://");
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    stream
}

#[tokio::test]
async fn a_body_that_does_not_arrive_within_body_read_timeout_secs_is_a_408_and_others_are_served()
{
    let server = server(bounded(AppSettings {
        body_read_timeout_secs: 1,
        ..AppSettings::default()
    }))
    .await;
    let mut slow = send_raw(
        &server.base,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"messages\":",
    )
    .await;
    // while it dawdles, others are served
    assert_eq!(
        server.post(&chat("hi", 2)).send().await.unwrap().status(),
        200
    );
    let started = Instant::now();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut answer))
        .await
        .expect("the server never answered the slow body")
        .unwrap();
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(answer.contains("request_timeout") && answer.contains("body_read_timeout_secs"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test]
async fn a_client_that_does_not_finish_its_headers_in_time_is_disconnected() {
    let server = server(bounded(AppSettings {
        header_read_timeout_secs: 1,
        ..AppSettings::default()
    }))
    .await;
    let mut slow = send_raw(
        &server.base,
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n",
    )
    .await;
    assert_eq!(
        server.post(&chat("hi", 2)).send().await.unwrap().status(),
        200
    );
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), slow.read_to_end(&mut rest))
        .await
        .expect("the connection was never closed")
        .ok();
    assert!(
        !String::from_utf8_lossy(&rest).contains(" 200 "),
        "a request with unfinished headers was answered"
    );
}

#[tokio::test]
async fn event_stream_clients_beyond_event_subscribers_max_get_a_429_until_one_leaves() {
    let server = server(bounded(AppSettings {
        event_subscribers_max: 1,
        ..AppSettings::default()
    }))
    .await;
    let url = format!("{}/v1/scheduler/events", server.base);
    let first = reqwest::get(&url).await.unwrap();
    assert_eq!(first.status(), 200);
    let (status, error) = error_of(reqwest::get(&url).await.unwrap()).await;
    assert_eq!(status, 429, "{error}");
    assert_eq!(error["error"]["code"], "server_busy");
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("event_subscribers_max")
    );
    drop(first);
    // the place comes back once the server notices the client left: at its next write,
    // which a request's changes to the snapshot cause
    assert_eq!(
        server.post(&chat("hi", 4)).send().await.unwrap().status(),
        200
    );
    let started = Instant::now();
    loop {
        let again = reqwest::get(&url).await.unwrap();
        if again.status() == 200 {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(15),
            "the place never came back"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn concurrent_count_tokens_requests_all_answer_through_one_preparation_place() {
    let server = server(bounded(AppSettings {
        prepare_concurrency: 1,
        ..AppSettings::default()
    }))
    .await;
    let client = reqwest::Client::new();
    let body = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});
    let answers = futures_util::future::join_all((0..8).map(|_| {
        client
            .post(format!("{}/v1/messages/count_tokens", server.base))
            .json(&body)
            .send()
    }))
    .await;
    for answer in answers {
        let answer = answer.unwrap();
        assert_eq!(answer.status(), 200);
        let counted: Value = answer.json().await.unwrap();
        assert!(counted["input_tokens"].as_u64().unwrap() > 0);
    }
}
