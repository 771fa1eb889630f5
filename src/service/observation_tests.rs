//! The observation of the app's run goes on across services: two services started one after
//! the other with the same [`Observation`] (as an apply starts them) count, number and keep
//! as one.

use super::observation::Observation;
use super::{RequestOrigin, ServiceHandle, ServiceOptions, Submission, SubmitError, spawn};
use crate::engine::WorkerLaunch;
use crate::protocol::{FakeOptions, Sampling, WorkerOptions};
use crate::scheduler::SchedulerSettings;

/// A service whose worker cannot start (no binary there): it refuses every request while its
/// engine starts, and the scheduler counts each refusal.
fn service(observation: &Observation) -> ServiceHandle {
    let options = WorkerOptions::simulated(FakeOptions::default());
    let launch = WorkerLaunch::new("/nonexistent/strata-worker".into(), options);
    spawn(ServiceOptions {
        launch,
        settings: SchedulerSettings::default(),
        observation: observation.clone(),
    })
    .unwrap()
}

async fn refused(service: &ServiceHandle) {
    let submission = Submission {
        prompt: vec![1, 2],
        sampling: Sampling::default(),
        max_tokens: Some(4),
        stop: Vec::new(),
        ignore_eos: false,
        priority: 0,
        priority_given: false,
        origin: RequestOrigin::default(),
    };
    let answer = service.submit(submission).await;
    assert!(
        matches!(
            answer,
            Err(SubmitError::EngineStarting { .. } | SubmitError::EngineFailed(_))
        ),
        "{answer:?}"
    );
}

#[tokio::test]
async fn a_service_that_takes_anothers_place_continues_its_counters_seq_and_log() {
    let observation = Observation::default();
    let (_, mut stream) = observation.subscribe();
    let first = service(&observation);
    refused(&first).await;
    first.shutdown().await;
    let before = first.snapshot();
    assert_eq!(before.counters.refusals, 1);
    assert!(
        first
            .metrics()
            .encode()
            .contains("strata_requests_refused_total 1\n")
    );

    let second = service(&observation);
    refused(&second).await;
    second.shutdown().await;
    let after = second.snapshot();

    // the totals go on: the snapshot's and /metrics'
    assert_eq!(after.counters.refusals, 2, "the counters started again");
    let text = second.metrics().encode();
    assert!(
        text.contains("strata_requests_refused_total 2\n"),
        "the registry started again: {text}"
    );
    // one log, numbered once: the second service's entries follow the first's
    let seqs: Vec<u64> = after.log.iter().map(|e| e.seq).collect();
    let expected: Vec<u64> = (0..seqs.len() as u64).collect();
    assert_eq!(seqs, expected, "the seq started again");
    assert!(
        after.log.len() > before.log.len(),
        "the log lost the first's"
    );
    assert!(
        after.uptime_secs >= before.uptime_secs,
        "the clock went back"
    );
    // and the broadcast carried every entry once, in order, across both
    let mut sent = Vec::new();
    while let Ok(entry) = stream.try_recv() {
        sent.push(entry.seq);
    }
    assert_eq!(sent, expected);
}
