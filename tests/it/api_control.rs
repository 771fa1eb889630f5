//! Control over HTTP with the simulated engine: where a priority comes from and its checks,
//! live settings, cancel and re-prioritise by id, engine restart, admin refusals, and a
//! conversation too big for the engine's cache.

use crate::api_fake::{Setup, chat, server, sse_data, streamed_text};
use crate::api_observe::{admin, get_json, running_id, streaming};
use serde_json::{Value, json};
use std::time::Duration;
use strata_desk::config::{ApiKeyEntry, AppSettings};
use strata_desk::engine_worker::FakeOptions;
use strata_desk::scheduler::{PriorityOrder, PriorityRange, SchedulerSettings};
use strata_desk::service::SlotStatus;

#[tokio::test]
async fn priority_comes_from_the_body_then_the_header_then_the_key_and_is_clamped() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        app: AppSettings {
            api_keys: vec![ApiKeyEntry::with_priority("k3", Some(3))],
            ..AppSettings::default()
        },
        scheduler: SchedulerSettings {
            priority_range: PriorityRange { min: -10, max: 10 },
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let client = reqwest::Client::new();
    let send = |body: Value, header: Option<&'static str>| {
        let mut request = client
            .post(format!("{}/v1/chat/completions", server.base))
            .bearer_auth("k3")
            .json(&body);
        if let Some(h) = header {
            request = request.header("x-priority", h);
        }
        tokio::spawn(request.send())
    };
    let hog = send(chat("hog", 300), None);
    server
        .until("the hog runs", |s| running_id(s).is_some())
        .await;
    let mut body_wins = chat("a", 2);
    body_wins["priority"] = json!(50);
    let cases: Vec<(Value, Option<&'static str>, i32)> = vec![
        (body_wins, Some("2"), 10),
        (chat("b", 2), Some("-40"), -10),
        (chat("c", 2), None, 3),
    ];
    let mut pending = Vec::new();
    for (i, (body, header, expected)) in cases.into_iter().enumerate() {
        pending.push(send(body, header));
        server.until("it waits", |s| s.waiting.len() == i + 1).await;
        let snapshot = server.service.snapshot();
        let newest = snapshot
            .waiting
            .iter()
            .max_by_key(|w| w.request_id)
            .unwrap();
        assert_eq!(newest.priority, expected, "case {i}");
    }
    hog.abort();
    for p in pending {
        assert_eq!(p.await.unwrap().unwrap().status(), 200);
    }
}

#[tokio::test]
async fn a_priority_that_is_not_an_integer_is_a_400_naming_its_source_in_every_api() {
    let server = server(Setup::default()).await;
    let client = reqwest::Client::new();
    let routes = [
        (
            "/v1/chat/completions",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
        ),
        (
            "/v1/responses",
            json!({"input": "x", "max_output_tokens": 2}),
        ),
        (
            "/v1/messages",
            json!({"messages": [{"role": "user", "content": "x"}], "max_tokens": 2}),
        ),
    ];
    for (route, body) in routes {
        for bad in [json!("high"), json!(1.5), json!(true)] {
            let mut body = body.clone();
            body["priority"] = bad.clone();
            let response = client
                .post(format!("{}{route}", server.base))
                .json(&body)
                .send()
                .await
                .unwrap();
            assert_eq!(response.status(), 400, "{route} {bad}");
            let text = response.text().await.unwrap();
            assert!(
                text.contains("priority") && text.contains("integer"),
                "{route}: {text}"
            );
        }
        let response = client
            .post(format!("{}{route}", server.base))
            .header("x-priority", "not a number")
            .json(&body)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 400, "{route} x-priority");
        let text = response.text().await.unwrap();
        assert!(text.contains("x-priority"), "{route}: {text}");
        // The same body with an integer priority is served.
        let mut good = body.clone();
        good["priority"] = json!(2);
        let response = client
            .post(format!("{}{route}", server.base))
            .json(&good)
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), 200, "{route}");
    }
}

#[tokio::test]
async fn with_lower_first_order_a_smaller_priority_number_ranks_higher() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 20.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            priority_order: PriorityOrder::LowerFirst,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let hog = tokio::spawn(server.post(&chat("hog", 300)).send());
    server
        .until("the hog runs", |s| running_id(s).is_some())
        .await;
    let mut urgent = chat("urgent", 2);
    urgent["priority"] = json!(-4);
    let urgent = tokio::spawn(server.post(&urgent).send());
    server.until("it waits", |s| s.waiting.len() == 1).await;
    assert_eq!(server.service.snapshot().waiting[0].priority, 4);
    hog.abort();
    assert_eq!(urgent.await.unwrap().unwrap().status(), 200);
}

#[tokio::test]
async fn solo_priority_and_give_way_change_live_and_turning_preemption_off_loses_nothing() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        scheduler: SchedulerSettings {
            min_run_quantum_secs: 0.2,
            ..SchedulerSettings::default()
        },
        ..Setup::default()
    })
    .await;
    let alone: Value = server
        .post(&chat("the long one", 120))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        server.service.snapshot().mode,
        strata_desk::scheduler::Mode::Solo
    );

    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        "/v1/settings",
        Some(json!({"solo_priority": true, "give_way": "whole"})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["settings"]["solo_priority"], true);
    assert_eq!(body["settings"]["give_way"], "whole");
    let v = get_json(&server, "/v1/scheduler").await;
    assert_eq!(
        (&v["mode"], &v["solo_priority"], &v["give_way"]),
        (&json!("solo_priority"), &json!(true), &json!("whole"))
    );

    let long = server
        .post(&streaming("the long one", 120))
        .send()
        .await
        .unwrap();
    server
        .until("the long one decodes", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let mut short = chat("short", 60);
    short["priority"] = json!(5);
    let short = tokio::spawn(server.post(&short).send());
    server
        .until("the long one is paused", |s| s.parked.len() == 1)
        .await;
    // Rollback while it is parked: no new pauses, the parked stream resumes, nothing lost.
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        "/v1/settings",
        Some(json!({"solo_priority": false})),
    )
    .await;
    assert_eq!(
        (status, &body["settings"]["solo_priority"]),
        (200, &json!(false))
    );
    assert_eq!(short.await.unwrap().unwrap().status(), 200);
    let text = long.text().await.unwrap();
    assert_eq!(
        streamed_text(&sse_data(&text)),
        alone["choices"][0]["message"]["content"].as_str().unwrap()
    );
    let after = server.service.snapshot();
    assert_eq!(after.counters.pauses, 1);
    assert_eq!(after.counters.resumes, 1);
    assert!(after.parked.is_empty());

    // Bad changes are 400s that name what is wrong.
    let cases = [
        (json!({"give_way": "sideways"}), "give_way"),
        // a regression (#61 item 8): this was "the body is not valid JSON", no field named
        (
            json!({"give_way": true}),
            "`give_way`: takes \"left\", \"whole\" or \"off\", got true",
        ),
        (json!({"solo_priority": "yes"}), "solo_priority"),
        // every key may be patched now (#63); an unknown one is named
        (json!({"paralel": 2}), "unknown key `paralel`"),
    ];
    for (patch, needle) in cases {
        let (status, body) =
            admin(&server, reqwest::Method::PATCH, "/v1/settings", Some(patch)).await;
        assert_eq!(status, 400, "{body}");
        let message = body["error"]["message"].as_str().unwrap();
        assert!(message.contains(needle), "{message}");
    }
}

#[tokio::test]
async fn a_request_is_cancelled_or_reprioritised_by_id_and_unknown_ids_are_404() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let hog = tokio::spawn(server.post(&chat("hog", 60)).send());
    server
        .until("the hog runs", |s| running_id(s).is_some())
        .await;
    let hog_id = running_id(&server.service.snapshot()).unwrap();
    let first = tokio::spawn(server.post(&chat("first", 3)).send());
    server.until("one waits", |s| s.waiting.len() == 1).await;
    let second = tokio::spawn(server.post(&chat("second", 40)).send());
    server.until("two wait", |s| s.waiting.len() == 2).await;
    let ids: Vec<u64> = server
        .service
        .snapshot()
        .waiting
        .iter()
        .map(|w| w.request_id.0)
        .collect();
    let (first_id, second_id) = (ids[0], ids[1]);

    // The later arrival is raised (as `chatcmpl-N`, the id a response carries).
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        &format!("/v1/requests/chatcmpl-{second_id}"),
        Some(json!({"priority": 500})),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["state"], "waiting");
    assert_eq!(body["priority"], 100, "clamped to priority_range");
    let hog = hog.await.unwrap().unwrap();
    assert_eq!(hog.status(), 200);
    assert_eq!(hog.headers()["x-request-id"], hog_id.to_string());
    server
        .until("the next one runs", |s| {
            running_id(s).is_some_and(|id| id != hog_id)
        })
        .await;
    assert_eq!(running_id(&server.service.snapshot()), Some(second_id));

    // The earlier one is cancelled while it waits: its client hears so.
    let (status, body) = admin(
        &server,
        reqwest::Method::DELETE,
        &format!("/v1/requests/{first_id}"),
        None,
    )
    .await;
    assert_eq!((status, &body["state"]), (200, &json!("waiting")), "{body}");
    let first: Value = first.await.unwrap().unwrap().json().await.unwrap();
    assert_eq!(first["choices"][0]["finish_reason"], "cancelled");
    assert_eq!(second.await.unwrap().unwrap().status(), 200);
    assert_eq!(
        server
            .service
            .snapshot()
            .counters
            .cancellations_by_state
            .waiting,
        1
    );

    for method in [reqwest::Method::DELETE, reqwest::Method::PATCH] {
        let (status, body) = admin(
            &server,
            method,
            "/v1/requests/999",
            Some(json!({"priority": 1})),
        )
        .await;
        assert_eq!(status, 404, "{body}");
        assert_eq!(body["error"]["code"], "not_found");
    }
    let (status, body) = admin(
        &server,
        reqwest::Method::PATCH,
        &format!("/v1/requests/{first_id}"),
        Some(json!({"priority": "high"})),
    )
    .await;
    assert_eq!(status, 400);
    assert_eq!(body["error"]["param"], "priority");
}

#[tokio::test]
async fn a_user_restart_fails_what_runs_with_engine_restarted_and_keeps_the_waiting() {
    let server = server(Setup {
        fake: FakeOptions {
            decode_steps_per_sec: 40.0,
            ..FakeOptions::instant()
        },
        ..Setup::default()
    })
    .await;
    let running = server.post(&streaming("runs", 400)).send().await.unwrap();
    server
        .until("one runs", |s| {
            s.slots
                .iter()
                .any(|slot| slot.state == SlotStatus::Decoding)
        })
        .await;
    let running_id = running_id(&server.service.snapshot()).unwrap();
    let waiting = tokio::spawn(server.post(&chat("waits", 5)).send());
    server.until("one waits", |s| s.waiting.len() == 1).await;
    let waiting_id = server.service.snapshot().waiting[0].request_id.0;

    let (status, body) = admin(&server, reqwest::Method::POST, "/v1/engine/restart", None).await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["failed_requests"], json!([running_id]));
    assert_eq!(body["waiting_requests"], json!([waiting_id]));
    let text = running.text().await.unwrap();
    let events = sse_data(&text);
    let error: Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert!(
        error["error"]["message"]
            .as_str()
            .unwrap()
            .contains("engine restarted"),
        "{error}"
    );
    assert_eq!(waiting.await.unwrap().unwrap().status(), 200);
    let after = server.service.snapshot();
    assert_eq!(after.counters.engine_restarts, 1);
    assert_eq!(after.engine.restarts, 1);
    assert!(after.engine.generation >= 2);
    // a regression (#62 item 7): the replaced engine's step ended into a scheduler that had
    // forgotten it ("step done with no step outstanding", a WARN after every such restart)
    assert_eq!(after.engine.scheduler_diagnostics, 0);
}

#[tokio::test]
async fn admin_routes_refuse_a_foreign_origin_and_a_body_that_is_not_json() {
    let server = server(Setup::default()).await;
    let client = reqwest::Client::new();
    let url = format!("{}/v1/engine/restart", server.base);
    let page = client
        .post(&url)
        .header("content-type", "application/json")
        .header("origin", "https://some.page.example")
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 403);
    let body: Value = page.json().await.unwrap();
    assert_eq!(body["error"]["code"], "admin_forbidden");
    // A form post (what a page can send without a preflight) is refused.
    let form = client
        .post(&url)
        .header("content-type", "application/x-www-form-urlencoded")
        .body("a=1")
        .send()
        .await
        .unwrap();
    assert_eq!(form.status(), 415);
    let bare = client
        .delete(format!("{}/v1/requests/1", server.base))
        .send()
        .await
        .unwrap();
    assert_eq!(bare.status(), 415);
    // Nothing was restarted.
    assert_eq!(server.service.snapshot().engine.generation, 1);
    // Reads refuse a page too (api_access.rs has the public routes' rule).
    let read = client
        .get(format!("{}/v1/scheduler", server.base))
        .header("origin", "https://some.page.example")
        .send()
        .await
        .unwrap();
    assert_eq!(read.status(), 403);
}

#[tokio::test]
async fn a_conversation_too_big_for_the_engines_cache_is_read_again_not_restored() {
    // The simulated engine keeps 1 KiB of state per token and its cache holds 1 MiB: a
    // 1,100-token conversation saved there is dropped at once. Its follow-up must read the
    // prompt again; asking the engine to restore it failed the engine before.
    let server = server(Setup {
        fake: FakeOptions {
            kv_cells: 3000,
            ..FakeOptions::instant()
        },
        worker: |w| {
            w.slots = 2;
            w.conversation_cache_mib = 1;
        },
        ..Setup::default()
    })
    .await;
    let topic = "t".repeat(1100);
    let first: Value = server
        .post(&chat(&topic, 5))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let answer = first["choices"][0]["message"]["content"].clone();
    // A long prompt needs the cells: the idle conversation goes to the host-RAM cache.
    let big = server
        .post(&chat(&"b".repeat(2400), 5))
        .send()
        .await
        .unwrap();
    assert_eq!(big.status(), 200);
    let follow_up = json!({"messages": [
        {"role": "user", "content": topic},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "and then?"},
    ], "max_tokens": 5});
    let response = server.post(&follow_up).send().await.unwrap();
    assert_eq!(response.status(), 200, "{}", response.text().await.unwrap());
    let after = server.service.snapshot();
    assert_eq!(after.engine.restarts, 0, "the engine was lost");
    assert_eq!(after.conversation_cache.entries, 0);
    assert_eq!(after.conversation_cache.bytes, 0);
}

/// One memory of the `give_way` to put back, in the control plane: giving way turned off from
/// the tray comes back from the window as it was (it was kept twice, in the window and the
/// tray, each seeing only its own snapshots).
#[tokio::test]
async fn giving_way_comes_back_as_it_was_whoever_turned_it_off() {
    use strata_desk::service::{GiveWay, SettingsChange};
    let server = server(Setup::default()).await;
    let control = &server.control;
    let whole = SettingsChange {
        solo_priority: None,
        give_way: Some(GiveWay::Whole),
    };
    control.change_live(whole, "HTTP (loopback)").await.unwrap();
    let off = control.set_giving_way(false, "the tray").await.unwrap();
    assert_eq!(off.settings.give_way, GiveWay::Off);
    let back = control.set_giving_way(true, "the window").await.unwrap();
    assert_eq!(back.settings.give_way, GiveWay::Whole);
    assert_eq!(server.service.snapshot().settings.give_way, GiveWay::Whole);
}
