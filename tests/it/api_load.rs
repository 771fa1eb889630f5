//! Load (hardening item 10): the headless server on the real model, 64 concurrent streaming
//! clients of mixed priorities for a fixed time, a quarter of their requests dropped mid-way.
//! Every answer is a complete stream, a 429 (the queue is bounded by design: `queue_max` 24),
//! or one the client dropped itself; `/health` answers throughout; the server's memory stays
//! bounded (its peak RSS and its worker's are printed).

use crate::support::{model_path, real_model, worker_exe};
use futures_util::StreamExt;
use serde_json::json;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

const CLIENTS: usize = 64;
const LOAD: Duration = Duration::from_secs(30);

/// Resident memory of a process, and the most it ever had (`VmRSS`, `VmHWM`), in KiB.
fn rss_kib(pid: u32) -> Option<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.split_whitespace().next()?.parse().ok())
    };
    Some((field("VmRSS:")?, field("VmHWM:")?))
}

/// The engine worker: the server's child process (spawned by any of its threads).
fn child_of(pid: u32) -> Option<u32> {
    std::fs::read_dir(format!("/proc/{pid}/task"))
        .ok()?
        .flatten()
        .filter_map(|task| std::fs::read_to_string(task.path().join("children")).ok())
        .find_map(|children| children.split_whitespace().next()?.parse().ok())
}

#[derive(Debug, Default)]
struct Tally {
    completed: AtomicU64,
    refused_429: AtomicU64,
    dropped: AtomicU64,
    tokens: AtomicU64,
}

/// One client: requests back to back until `until`; returns the first unexpected answer.
async fn client(base: String, seed: u64, until: Instant, tally: Arc<Tally>) -> Result<(), String> {
    let mut rng = fastrand::Rng::with_seed(seed);
    let http = reqwest::Client::new();
    while Instant::now() < until {
        let priority = rng.i64(-5..=5);
        let max_tokens = rng.u32(4..=24);
        let drop_after_chunks = (rng.u8(0..4) == 0).then_some(rng.usize(0..6));
        let body = json!({
            "model": "m",
            "messages": [{"role": "user", "content": format!("Say something about the number {}.", rng.u32(0..1000))}],
            "max_tokens": max_tokens,
            "stream": true,
            "priority": priority,
        });
        let response = http
            .post(format!("{base}/v1/chat/completions"))
            .json(&body)
            .send()
            .await
            .map_err(|e| format!("send: {e}"))?;
        match response.status().as_u16() {
            200 => {}
            429 => {
                tally.refused_429.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(rng.u64(100..500))).await;
                continue;
            }
            other => {
                return Err(format!(
                    "status {other}: {}",
                    response.text().await.unwrap_or_default()
                ));
            }
        }
        let mut chunks = response.bytes_stream();
        let mut seen = String::new();
        let mut count = 0usize;
        let mut dropped = false;
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(|e| format!("stream: {e}"))?;
            seen.push_str(&String::from_utf8_lossy(&chunk));
            count += 1;
            if drop_after_chunks.is_some_and(|n| count > n) {
                dropped = true;
                break;
            }
        }
        if dropped {
            tally.dropped.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        if !seen.trim_end().ends_with("data: [DONE]") || seen.contains("\"error\"") {
            return Err(format!("an incomplete or failed stream: {seen}"));
        }
        let tokens = seen
            .lines()
            .filter(|l| l.starts_with("data: {") && l.contains("\"content\""))
            .count();
        tally.tokens.fetch_add(tokens as u64, Ordering::Relaxed);
        tally.completed.fetch_add(1, Ordering::Relaxed);
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sixty_four_streaming_clients_with_disconnects_get_only_429s_by_design_and_memory_stays_bounded()
 {
    let _serial = real_model();
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config.json");
    std::fs::write(
        &config,
        json!({"queue_max": 24, "conversation_cache_mib": 64, "parallel": 2, "ctx": 4096, "threads": 1})
            .to_string(),
    )
    .unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut server = tokio::process::Command::new(worker_exe())
        .arg("--headless")
        .arg("--config")
        .arg(&config)
        .arg("--model")
        .arg(model_path())
        .args(["--port", &port.to_string()])
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = server.id().unwrap();
    let base = format!("http://127.0.0.1:{port}");
    let started = Instant::now();
    while !reqwest::get(format!("{base}/health"))
        .await
        .is_ok_and(|r| r.status() == 200)
    {
        assert!(started.elapsed() < Duration::from_secs(60), "never ready");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let worker = child_of(pid).expect("the engine worker");
    let (server_ready_kib, _) = rss_kib(pid).unwrap();
    let (worker_ready_kib, _) = rss_kib(worker).unwrap();

    let done = Arc::new(AtomicBool::new(false));
    let health = {
        let (base, done) = (base.clone(), done.clone());
        tokio::spawn(async move {
            let http = reqwest::Client::builder()
                .timeout(Duration::from_secs(5))
                .build()
                .unwrap();
            let (mut answered, mut slowest) = (0u32, Duration::ZERO);
            while !done.load(Ordering::Relaxed) {
                let asked = Instant::now();
                let status = http
                    .get(format!("{base}/health"))
                    .send()
                    .await
                    .map(|r| r.status().as_u16())
                    .map_err(|e| e.to_string());
                if status != Ok(200) {
                    return Err(format!("/health answered {status:?} under load"));
                }
                answered += 1;
                slowest = slowest.max(asked.elapsed());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Ok((answered, slowest))
        })
    };
    let memory = {
        let done = done.clone();
        tokio::spawn(async move {
            let mut samples = Vec::new();
            while !done.load(Ordering::Relaxed) {
                if let (Some((s, _)), Some((w, _))) = (rss_kib(pid), rss_kib(worker)) {
                    samples.push((s, w));
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            samples
        })
    };

    let tally = Arc::new(Tally::default());
    let until = Instant::now() + LOAD;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| tokio::spawn(client(base.clone(), i as u64 + 1, until, tally.clone())))
        .collect();
    let mut failures = Vec::new();
    for c in clients {
        if let Err(e) = c.await.unwrap() {
            failures.push(e);
        }
    }
    done.store(true, Ordering::Relaxed);
    let (answered, slowest) = health.await.unwrap().expect("health under load");
    let samples = memory.await.unwrap();
    let (_, server_peak_kib) = rss_kib(pid).unwrap();
    let (_, worker_peak_kib) = rss_kib(worker).unwrap();
    let _ = server.start_kill();

    let load = |f: &AtomicU64| f.load(Ordering::Relaxed);
    println!(
        "load: {} s, {CLIENTS} clients: {} complete streams ({} tokens), {} refused with 429, {} dropped by the client; \
         /health answered {answered} times, slowest {} ms; \
         server RSS {} MiB when ready, peak {} MiB; worker RSS {} MiB when ready, peak {} MiB",
        LOAD.as_secs(),
        load(&tally.completed),
        load(&tally.tokens),
        load(&tally.refused_429),
        load(&tally.dropped),
        slowest.as_millis(),
        server_ready_kib / 1024,
        server_peak_kib / 1024,
        worker_ready_kib / 1024,
        worker_peak_kib / 1024,
    );
    assert!(failures.is_empty(), "unexpected answers: {failures:#?}");
    assert!(load(&tally.completed) > 0 && load(&tally.dropped) > 0);
    assert!(
        load(&tally.refused_429) > 0,
        "64 clients over a 24-deep queue were never refused: the bound was not reached"
    );
    // Bounded: the second half of the run holds no more than the first half's peak plus a
    // margin (a leak per request would grow through the run), and the server stays within
    // 512 MiB of where it started.
    let half = samples.len() / 2;
    let peak = |s: &[(u64, u64)], f: fn(&(u64, u64)) -> u64| s.iter().map(f).max().unwrap_or(0);
    for (name, f) in [
        ("server", (|s: &(u64, u64)| s.0) as fn(&(u64, u64)) -> u64),
        ("worker", |s: &(u64, u64)| s.1),
    ] {
        let (first, second) = (peak(&samples[..half], f), peak(&samples[half..], f));
        assert!(
            second <= first + first / 4 + 32 * 1024,
            "the {name}'s memory grew through the run: {first} KiB at most in the first half, {second} KiB in the second"
        );
    }
    assert!(
        server_peak_kib < server_ready_kib + 512 * 1024,
        "server peak {server_peak_kib} KiB"
    );
}
