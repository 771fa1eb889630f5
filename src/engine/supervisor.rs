//! Keeps one worker running: starts it, notices its death, restarts it with backoff.

use super::{EngineError, EngineProcess, WorkerLaunch};
use std::time::Duration;

/// Failed starts in a row before the supervisor gives up (the caller fails what waits with
/// the worker's last stderr lines; the next request tries again).
pub const START_ATTEMPTS: u32 = 3;
const FIRST_BACKOFF: Duration = Duration::from_millis(250);

#[derive(Debug)]
pub struct EngineSupervisor {
    launch: WorkerLaunch,
    current: Option<EngineProcess>,
    generation: u64,
    restarts: u64,
}

impl EngineSupervisor {
    pub fn new(launch: WorkerLaunch) -> Self {
        Self {
            launch,
            current: None,
            generation: 0,
            restarts: 0,
        }
    }

    pub fn launch(&self) -> &WorkerLaunch {
        &self.launch
    }

    /// Settings that need a new engine (model, slots, context) take effect at the next start.
    pub fn set_launch(&mut self, launch: WorkerLaunch) {
        self.launch = launch;
    }

    /// Times a worker was started after the first.
    pub fn restarts(&self) -> u64 {
        self.restarts
    }

    /// The running worker, if it is alive.
    pub fn engine(&mut self) -> Option<&mut EngineProcess> {
        self.current.as_mut().filter(|p| p.death().is_none())
    }

    /// The running worker, starting one (with retries) if none is alive.
    pub async fn ensure_running(&mut self) -> Result<&mut EngineProcess, EngineError> {
        if self.current.as_ref().is_none_or(|p| p.death().is_some()) {
            self.start().await?;
        }
        self.current.as_mut().ok_or(EngineError::NotRunning)
    }

    /// Stops any worker and starts a new generation: up to [`START_ATTEMPTS`] tries with
    /// doubling backoff; the last error (with the worker's stderr) when all fail.
    pub async fn start(&mut self) -> Result<(), EngineError> {
        if let Some(old) = self.current.take() {
            old.shutdown().await;
        }
        let mut backoff = FIRST_BACKOFF;
        let mut last_error = EngineError::NotRunning;
        for attempt in 1..=START_ATTEMPTS {
            if self.generation > 0 {
                self.restarts += 1;
            }
            self.generation += 1;
            match EngineProcess::start(&self.launch, self.generation).await {
                Ok(process) => {
                    self.current = Some(process);
                    return Ok(());
                }
                Err(e) => {
                    tracing::warn!(attempt, "engine worker failed to start: {e}");
                    last_error = e;
                    if attempt < START_ATTEMPTS {
                        tokio::time::sleep(backoff).await;
                        backoff *= 2;
                    }
                }
            }
        }
        Err(last_error)
    }

    /// Stops the worker: stdin closed, a grace period, then kill.
    pub async fn stop(&mut self) {
        if let Some(old) = self.current.take() {
            old.shutdown().await;
        }
    }
}
