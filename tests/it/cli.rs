//! The binary as a user runs it.

use crate::support::{real_model, worker_exe};
use std::process::Command;

#[test]
fn generate_streams_text_from_the_default_model() {
    let _serial = real_model();
    // The default model path is used unless --model is given; the test suite's setup fetched it.
    let mut command = Command::new(worker_exe());
    command.args([
        "generate",
        "--max-tokens",
        "24",
        "--threads",
        "1",
        "Name a color.",
    ]);
    if let Some(model) = std::env::var_os("STRATA_TEST_MODEL") {
        command.arg("--model").arg(model);
    }
    let output = command.output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "stderr: {stderr}");
    assert!(
        stdout.trim().len() >= 2,
        "no text streamed: {stdout:?} / {stderr}"
    );
    assert!(stderr.contains("generated"), "no summary line: {stderr}");
}

#[test]
fn an_unknown_subcommand_is_a_usage_error() {
    let output = Command::new(worker_exe()).arg("fly").output().unwrap();
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("unrecognized subcommand"));
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = taken.local_addr().unwrap().port().to_string();
    let output = Command::new(worker_exe())
        .args(["--headless", "--engine", "sim", "--port", &port])
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&format!("cannot listen on 127.0.0.1:{port}")),
        "{stderr}"
    );
    assert!(stderr.contains("--port"), "{stderr}");
}

#[test]
fn sigterm_stops_the_headless_server_and_its_worker_and_exits_zero() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut server = Command::new(worker_exe())
        .args(["--headless", "--engine", "sim", "--port", &port.to_string()])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    wait_listening(port);
    std::thread::sleep(std::time::Duration::from_millis(500)); // the worker is up
    let out = Command::new("pgrep")
        .args(["-P", &server.id().to_string()])
        .output()
        .unwrap();
    let workers: Vec<String> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_owned)
        .collect();
    assert_eq!(workers.len(), 1, "one engine worker: {workers:?}");
    let status = Command::new("kill")
        .args(["-TERM", &server.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let exit = server.wait().unwrap();
    assert_eq!(exit.code(), Some(0));
    let worker_alive = Command::new("kill")
        .args(["-0", &workers[0]])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap()
        .success();
    assert!(!worker_alive, "the engine worker outlived the server");
}

#[test]
fn without_a_display_the_app_says_so_and_suggests_headless() {
    let output = Command::new(worker_exe())
        .args(["--engine", "sim", "--port", "18431"])
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("no display"), "{stderr}");
    assert!(stderr.contains("--headless"), "{stderr}");
}

/// Regression: a second start on a config another app holds said so only in its window, and
/// printed nothing: a start from a terminal or a script (the Windows check's second start) could
/// not tell why no server came up.
#[test]
fn a_second_start_on_a_held_config_says_on_stderr_which_process_holds_it() {
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "{}").unwrap();
    let _held = strata_desk::control::lock_instance(Some(config.path())).unwrap();
    let output = Command::new(worker_exe())
        .args(["--engine", "sim", "--port", "18432"])
        .arg("--config")
        .arg(config.path())
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    let holder = format!("another Strata Desk (process {})", std::process::id());
    assert!(stderr.contains(&holder), "{stderr}");
    assert!(stderr.contains("is running with this config"), "{stderr}");
}

/// Regression: `arg_required_else_help` made a bare `strata-desk` (the desktop entry's `Exec`
/// and the README's `cargo run --release`) print the help and exit instead of opening the app.
#[test]
fn with_no_arguments_the_app_starts_rather_than_printing_help() {
    let output = Command::new(worker_exe())
        .env_remove("DISPLAY")
        .env_remove("WAYLAND_DISPLAY")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    // Without a display the window cannot open, so it reaches the display check: that shows
    // the app started; help would print `Usage:` instead.
    assert!(stderr.contains("no display"), "{stderr}");
    assert!(!stderr.contains("Usage:"), "{stderr}");
}

/// `--headless` says, at the default log level, when the engine is ready (model, context,
/// device, URL) and when a prompt was refused as longer than the context (and what to do).
#[tokio::test]
async fn headless_prints_a_ready_line_and_a_line_for_a_prompt_too_long() {
    use std::io::{BufRead, BufReader};
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let mut server = Command::new(worker_exe())
        .args(["--headless", "--engine", "sim", "--ctx", "256"])
        .args(["--port", &port.to_string()])
        .env_remove("STRATA_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let (lines_tx, lines) = std::sync::mpsc::channel();
    let stderr = server.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            let _ = lines_tx.send(line);
        }
    });
    let wait_for = |what: &str| {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            match lines.recv_timeout(left) {
                Ok(line) if line.contains(what) => return line,
                Ok(_) => {}
                Err(_) => panic!("no line with {what:?}"),
            }
        }
    };
    let ready = wait_for("ready on");
    assert!(
        ready.contains(&format!("http://127.0.0.1:{port}")) && ready.contains("context 256 tokens"),
        "{ready}"
    );
    let body = serde_json::json!({
        "messages": [{"role": "user", "content": "word ".repeat(400)}],
        "max_tokens": 4
    });
    let status = reqwest::Client::new()
        .post(format!("http://127.0.0.1:{port}/v1/chat/completions"))
        .json(&body)
        .send()
        .await
        .map(|r| r.status().as_u16());
    assert_eq!(status.ok(), Some(400));
    let refused = wait_for("refused a");
    assert!(
        refused.contains("the context holds 255 tokens"),
        "{refused}"
    );
    let _ = Command::new("kill").arg(server.id().to_string()).status();
    let _ = server.wait();
}

/// WSL2 in NAT mode reaches the server from outside loopback: `--host 0.0.0.0` with a key from
/// the environment needs no config file, and the key is asked for.
#[tokio::test]
async fn a_key_from_the_environment_lets_the_headless_server_listen_beyond_loopback() {
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let config = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(config.path(), "{}").unwrap();
    let args = |command: &mut Command| {
        command
            .args(["--headless", "--engine", "sim", "--host", "0.0.0.0"])
            .args(["--port", &port.to_string()])
            .arg("--config")
            .arg(config.path())
            .stderr(std::process::Stdio::piped());
    };
    let mut refused = Command::new(worker_exe());
    args(&mut refused);
    let output = refused.env_remove("STRATA_API_KEY").output().unwrap();
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("STRATA_API_KEY"),
        "{stderr}"
    );
    let mut command = Command::new(worker_exe());
    args(&mut command);
    let mut server = command
        .env("STRATA_API_KEY", "wsl-key-123456")
        .spawn()
        .unwrap();
    wait_listening(port);
    let url = format!("http://127.0.0.1:{port}/v1/models");
    let client = reqwest::Client::new();
    let without = client.get(&url).send().await.unwrap().status();
    let with = client
        .get(&url)
        .bearer_auth("wsl-key-123456")
        .send()
        .await
        .unwrap()
        .status();
    let _ = server.kill();
    let _ = server.wait();
    assert_eq!((without.as_u16(), with.as_u16()), (401, 200));
}

/// Waits until the server listens on `port` (at most 20 s).
fn wait_listening(port: u16) {
    let started = std::time::Instant::now();
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            started.elapsed() < std::time::Duration::from_secs(20),
            "never listened"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
}
