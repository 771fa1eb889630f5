//! Room in the pool on the real engine (SmolLM2-135M, a small `--ctx` so the pool fills): the
//! audit's three scenarios, and a sweep of prompts and outputs that fill the pool to within a
//! few cells of its last, with and without a kept conversation, `solo_priority` off and on.
//! Each must show: no engine restart, every request answered, no prefix lost (a follow-up
//! keeps its conversation, `processed_prefix_losses` stays 0), no pool mismatch.

use crate::api_fake::{Server, Setup, chat, server};
use crate::support::{chat_prompt, long_text, model_path, real_model};
use serde_json::{Value, json};
use strata_desk::engine_worker::WorkerOptions;
use strata_desk::scheduler::{GiveWay, SchedulerSettings};

/// The share of output a request reserves at admission (small, so pools fill quickly).
const RESERVE: u32 = 32;

async fn real_pool(ctx_tokens: u32, settings: SchedulerSettings) -> Server {
    server(Setup {
        real: Some(WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens,
            slots: 1,
            ..strata_desk::protocol::EngineSettings::for_model(model_path())
        })),
        scheduler: SchedulerSettings {
            output_reserve_tokens: RESERVE,
            ..settings
        },
        ..Setup::default()
    })
    .await
}

/// A user text whose chat prompt is exactly `tokens` tokens (as the app tokenizes it), made
/// of `seed`'s facts then single-token filler.
fn text_of(tokens: usize, seed: usize) -> String {
    let facts = long_text(seed + tokens / 8 + 4);
    let words: Vec<&str> = facts.split(' ').skip(seed * 3).collect();
    let mut n = words.len();
    while n > 0 && chat_prompt(&words[..n].join(" ")).len() > tokens.saturating_sub(8) {
        n -= 1;
    }
    let mut text = words[..n].join(" ");
    while chat_prompt(&text).len() < tokens {
        text.push_str(" a");
    }
    assert_eq!(
        chat_prompt(&text).len(),
        tokens,
        "no text of exactly {tokens} prompt tokens"
    );
    text
}

fn usage(v: &Value, field: &str) -> u64 {
    v["usage"][field]
        .as_u64()
        .unwrap_or_else(|| panic!("no usage.{field}: {v}"))
}

fn cached(v: &Value) -> u64 {
    v["usage"]["prompt_tokens_details"]["cached_tokens"]
        .as_u64()
        .unwrap_or(0)
}

/// An answer with `max_tokens` of output, or the test fails with the server's words.
async fn answered(server: &Server, body: &Value) -> Value {
    let response = server.post(body).send().await.unwrap();
    let status = response.status().as_u16();
    let v: Value = response.json().await.unwrap();
    assert_eq!(status, 200, "{v}");
    v
}

fn whole(text: &str, max_tokens: u32) -> Value {
    let mut body = chat(text, max_tokens);
    body["ignore_eos"] = json!(true);
    body
}

/// The engine never restarted, nothing failed, no prefix was lost and the pools agreed.
fn healthy(server: &Server) {
    let s = server.service.snapshot();
    assert_eq!(
        s.engine.generation, 1,
        "the engine restarted: {:?}",
        s.engine
    );
    assert_eq!(s.counters.engine_restarts, 0);
    assert_eq!(s.counters.failed, 0, "{:?}", s.counters);
    assert_eq!(s.counters.processed_prefix_losses, 0, "{:?}", s.counters);
    assert_eq!(s.engine.kv_pool_mismatches, 0, "{:?}", s.engine);
}

async fn kept_tokens(server: &Server) -> u32 {
    server
        .until("the conversation is kept", |s| !s.conversations.is_empty())
        .await;
    server
        .service
        .snapshot()
        .conversations
        .iter()
        .map(|c| c.tokens)
        .sum()
}

#[tokio::test]
async fn the_three_room_scenarios_on_the_real_engine_keep_the_engine_and_every_prefix() {
    let _serial = real_model();

    // 1. A kept conversation, then a prompt whose first share of output takes the last cell:
    // the step ahead after it does not fit and is not run; the next share evicts the kept one.
    let ctx = 1024;
    let server = real_pool(ctx, SchedulerSettings::default()).await;
    answered(&server, &whole("Say hello.", 20)).await;
    let kept = kept_tokens(&server).await;
    let prompt = ctx - RESERVE - kept;
    let second = answered(&server, &whole(&text_of(prompt as usize, 1), 50)).await;
    assert_eq!(usage(&second, "prompt_tokens"), u64::from(prompt));
    assert_eq!(usage(&second, "completion_tokens"), 50);
    let engine = server.service.snapshot().engine;
    assert!(engine.steps_ahead_not_run >= 1, "{engine:?}");
    healthy(&server);
    drop(server);

    // 2. A request sharing only a system prompt with a longer conversation in host RAM: room
    // is made for the whole conversation (it is loaded whole, then cut), and the shared part
    // is kept, not read again. (It waits for the long one: no give-way.)
    let ctx = 2048;
    let no_give_way = SchedulerSettings {
        give_way: GiveWay::Off,
        ..SchedulerSettings::default()
    };
    let server = real_pool(ctx, no_give_way).await;
    let system = text_of(300, 2);
    let with_system = |question: &str, max_tokens: u32| {
        json!({"messages": [
            {"role": "system", "content": system},
            {"role": "user", "content": question},
        ], "max_tokens": max_tokens, "temperature": 0, "ignore_eos": true})
    };
    answered(&server, &with_system("Name three towns.", 60)).await;
    let long_one = kept_tokens(&server).await;
    // it needs the first conversation's cells: that one goes to host RAM; its own
    // conversation then leaves fewer cells free than the first one holds
    let other = ctx - RESERVE - long_one + 20;
    let b = {
        let body = whole(&text_of(other as usize, 3), 20);
        let request = server.post(&body);
        tokio::spawn(async move { request.send().await.unwrap().json::<Value>().await })
    };
    server
        .until("the first conversation is in host RAM", |s| {
            s.conversation_cache.entries == 1 && !s.slots.iter().all(|s| s.request_id.is_none())
        })
        .await;
    let shared = answered(&server, &with_system("Name one good.", 5)).await;
    b.await.unwrap().unwrap();
    // only the new question is read: the system prompt came back from host RAM
    assert!(
        cached(&shared) + 15 >= usage(&shared, "prompt_tokens"),
        "the system prompt was read again: {shared}"
    );
    healthy(&server);
    drop(server);

    // 3. The follow-up of the oldest of two cached conversations, with the room for it made
    // by caching a third: the one being restored is not pushed out of the full cache.
    let ctx = 1024;
    let server = real_pool(
        ctx,
        SchedulerSettings {
            host_cache_conversations_max: 2,
            ..SchedulerSettings::default()
        },
    )
    .await;
    let question = text_of(600, 4);
    let x = answered(&server, &whole(&question, 20)).await;
    let x_answer = x["choices"][0]["message"]["content"].as_str().unwrap();
    answered(&server, &whole(&text_of(600, 5), 20)).await; // X to host RAM
    answered(&server, &whole(&text_of(600, 6), 20)).await; // Y to host RAM
    let follow_up = json!({"messages": [
        {"role": "user", "content": question},
        {"role": "assistant", "content": x_answer},
        {"role": "user", "content": "And then?"},
    ], "max_tokens": 5, "temperature": 0, "ignore_eos": true});
    let f = answered(&server, &follow_up).await;
    assert!(
        cached(&f) >= 600,
        "the follow-up read its conversation again: {f}"
    );
    healthy(&server);
}

/// The sweep: a prompt and its first share of output that fill a 512-cell pool to its last
/// cell and to within one, two and three cells of it, alone (its output then clamped to the
/// context) and beside a kept conversation (moved out when the output needs its next share,
/// the pool's last cell used first), with `solo_priority`
/// off and on (a fresh engine each, so every case starts from the pool it names; with
/// `solo_priority` on a short high-priority request arrives while the long one decodes, so it
/// is paused too). Every request completes; nothing restarts or is lost.
#[tokio::test]
async fn a_small_pool_filled_to_its_last_cells_never_restarts_the_engine() {
    let _serial = real_model();
    let ctx = 512;
    let output = 40;
    let mut not_run = 0;
    for solo_priority in [false, true] {
        for with_kept in [false, true] {
            for short_of_full in 0..4u32 {
                let case = format!(
                    "solo_priority {solo_priority}, kept {with_kept}, {short_of_full} short"
                );
                let server = real_pool(
                    ctx,
                    SchedulerSettings {
                        solo_priority,
                        min_run_quantum_secs: 0.1,
                        ..SchedulerSettings::default()
                    },
                )
                .await;
                let kept = if with_kept {
                    answered(&server, &whole("Say hi.", 10)).await;
                    kept_tokens(&server).await
                } else {
                    0
                };
                // the prompt and its first share of output leave `short_of_full` cells free
                let prompt = ctx - kept - RESERVE - short_of_full;
                let seed = 7 + short_of_full as usize;
                let body = whole(&text_of(prompt as usize, seed), output);
                let long = {
                    let request = server.post(&body);
                    tokio::spawn(async move {
                        let r = request.send().await.unwrap();
                        (r.status().as_u16(), r.json::<Value>().await.unwrap())
                    })
                };
                if solo_priority {
                    server
                        .until("it decodes", |s| {
                            s.slots.iter().any(|slot| slot.generated_tokens > 2)
                        })
                        .await;
                    let mut short = whole("Quick: 2 + 2?", 4);
                    short["priority"] = json!(5);
                    answered(&server, &short).await;
                }
                let (status, v) = long.await.unwrap();
                assert_eq!(status, 200, "{case}: {v}");
                assert_eq!(usage(&v, "prompt_tokens"), u64::from(prompt), "{case}");
                // alone, its output is clamped to the room the context leaves it
                let room = ctx - prompt;
                let expected = output.min(room);
                assert_eq!(
                    usage(&v, "completion_tokens"),
                    u64::from(expected),
                    "{case}"
                );
                healthy(&server);
                let snapshot = server.service.snapshot();
                not_run += snapshot.engine.steps_ahead_not_run;
                if solo_priority {
                    assert!(snapshot.counters.pauses > 0, "{case}: no pause");
                }
            }
        }
    }
    // the cases at the last cell reach it (the step ahead after it is not run)
    assert!(not_run > 0, "no case filled the pool to its last cell");
}
