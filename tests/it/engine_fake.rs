//! The simulated engine as a real child process (`engine-worker --fake`): each injected fault
//! produces the engine host's documented outcome, and a new worker serves again.

use crate::support::worker_exe;
use std::time::{Duration, Instant};
use strata_desk::engine::{EngineError, EngineProcess, WorkerExit, WorkerLaunch};
use strata_desk::engine_worker::{FakeOptions, WorkerOptions};
use strata_desk::ids::{RequestId, SeqId};
use strata_desk::protocol::{Chunk, Command, Reply, Sampling};

fn launch(faults: &[&str]) -> WorkerLaunch {
    let fake = FakeOptions {
        faults: faults.iter().map(|f| f.to_string()).collect(),
        ..FakeOptions::instant()
    };
    WorkerLaunch::new(worker_exe(), WorkerOptions::simulated(fake))
}

const DEADLINE: Duration = Duration::from_secs(5);

fn open() -> Command {
    Command::Open {
        request: RequestId(1),
        seq: SeqId(0),
        keep_tokens: 0,
        sampling: Sampling::default(),
    }
}

fn read() -> Command {
    Command::Step {
        chunk: Some(Chunk {
            request: RequestId(1),
            start: 0,
            tokens: b"hello there".iter().map(|b| i32::from(*b)).collect(),
            last: true,
            prompt_tokens: 0,
        }),
        decode: vec![],
    }
}

fn decode() -> Command {
    Command::Step {
        chunk: None,
        decode: vec![RequestId(1)],
    }
}

async fn start(launch: WorkerLaunch) -> EngineProcess {
    EngineProcess::start(&launch, 1)
        .await
        .expect("the worker starts")
}

/// After a fault a new generation (without the fault) starts and serves.
async fn restarted_worker_serves(dead_generation: u64) {
    let mut engine = EngineProcess::start(&launch(&[]), dead_generation + 1)
        .await
        .expect("a new worker starts");
    assert!(engine.generation() > dead_generation);
    engine.call(open(), DEADLINE).await.unwrap();
    let reply = engine.call(read(), DEADLINE).await.unwrap();
    assert!(
        matches!(reply, Reply::StepDone(ref d) if d.sampled.len() == 1),
        "{reply:?}"
    );
}

#[tokio::test]
async fn the_simulated_engine_says_so_in_its_handshake() {
    let engine = start(launch(&[])).await;
    assert!(engine.handshake().simulated);
    assert_eq!(engine.handshake().model.name, "simulated");
    assert_eq!(engine.handshake().kv_cells, 16_384);
}

#[tokio::test]
async fn an_engine_that_dies_at_a_step_fails_that_call_with_its_exit_status_and_last_words() {
    let mut engine = start(launch(&["die:2"])).await;
    let generation = engine.generation();
    engine.call(open(), DEADLINE).await.unwrap();
    engine.call(read(), DEADLINE).await.unwrap();
    let started = Instant::now();
    let error = engine.call(decode(), DEADLINE).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
    match &error {
        EngineError::Died { exit, stderr_tail } => {
            assert_eq!(*exit, WorkerExit::Code(3));
            assert!(
                stderr_tail.iter().any(|l| l.contains("injected fault")),
                "{stderr_tail:?}"
            );
        }
        other => panic!("expected a death, got {other:?}"),
    }
    assert!(error.is_fatal());
    // Every later call on the dead generation fails the same way, at once.
    assert!(matches!(
        engine.call(Command::Stats, DEADLINE).await,
        Err(EngineError::Died { .. })
    ));
    restarted_worker_serves(generation).await;
}

#[tokio::test]
async fn an_engine_that_stops_answering_is_stopped_at_the_deadline() {
    let mut engine = start(launch(&["hang:1"])).await;
    let generation = engine.generation();
    let pid = engine.pid();
    engine.call(open(), DEADLINE).await.unwrap();
    let deadline = Duration::from_millis(400);
    let started = Instant::now();
    let error = engine.call(read(), deadline).await.unwrap_err();
    assert!(
        matches!(error, EngineError::Unresponsive(d) if d == deadline),
        "{error:?}"
    );
    assert!(started.elapsed() < deadline + Duration::from_secs(1));
    let alive = std::process::Command::new("kill")
        .args(["-0", &pid.to_string()])
        .stderr(std::process::Stdio::null())
        .status()
        .unwrap();
    assert!(!alive.success(), "the hung worker was not stopped");
    restarted_worker_serves(generation).await;
}

#[tokio::test]
async fn an_engine_that_breaks_the_protocol_is_stopped_and_replaced() {
    let mut engine = start(launch(&["malformed:1"])).await;
    let generation = engine.generation();
    engine.call(open(), DEADLINE).await.unwrap();
    let error = engine.call(read(), DEADLINE).await.unwrap_err();
    assert!(
        matches!(error, EngineError::Protocol(ref m) if m.contains("not a reply") || m.contains("no reply")),
        "{error:?}"
    );
    assert!(
        engine.death().is_some(),
        "a worker that broke the protocol is stopped"
    );
    restarted_worker_serves(generation).await;
}

#[tokio::test]
async fn a_slow_chunk_within_its_deadline_is_only_late() {
    let mut engine = start(launch(&["slow:1:300"])).await;
    engine.call(open(), DEADLINE).await.unwrap();
    let started = Instant::now();
    let reply = engine.call(read(), DEADLINE).await.unwrap();
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert!(matches!(reply, Reply::StepDone(_)));
    assert!(engine.death().is_none());
}

#[tokio::test]
async fn a_worker_that_cannot_start_reports_why() {
    let mut options = WorkerOptions::simulated(FakeOptions::instant());
    options.fake.faults = vec!["nonsense".into()];
    let error = EngineProcess::start(&WorkerLaunch::new(worker_exe(), options), 1)
        .await
        .unwrap_err();
    match error {
        EngineError::Died { stderr_tail, .. } => {
            assert!(
                stderr_tail.iter().any(|l| l.contains("--fake-fault")),
                "{stderr_tail:?}"
            );
        }
        other => panic!("expected the worker's own error, got {other:?}"),
    }
}

#[test]
fn the_worker_marks_control_tokens_with_the_characters_the_output_parser_reads() {
    use strata_desk::protocol::control_text;
    assert_eq!(control_text::OPEN, strata_desk::chat::CONTROL_OPEN);
    assert_eq!(control_text::CLOSE, strata_desk::chat::CONTROL_CLOSE);
    let marked = String::from_utf8(control_text::wrap(b"[TOOL_CALLS]")).unwrap();
    assert_eq!(
        strata_desk::chat::ControlFilter::new(&["[TOOL_CALLS]"]).push(&marked),
        "[TOOL_CALLS]"
    );
}
