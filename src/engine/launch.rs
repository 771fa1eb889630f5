//! How to start a worker: which executable, with which options.

use crate::protocol::WorkerOptions;
use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

#[derive(Debug, Clone)]
pub struct WorkerLaunch {
    /// This app's own binary (`std::env::current_exe()`; in tests the built binary).
    pub exe: PathBuf,
    pub options: WorkerOptions,
    /// Loading a model can take long on a slow disk; past this the start fails.
    pub handshake_timeout: Duration,
    /// Where the CPU variants that crashed on this CPU are recorded (`cpu_code::Record`);
    /// `None`: not kept (tests, one-off runs).
    pub cpu_record: Option<PathBuf>,
    /// Environment variables the worker gets beside the app's own (tests: an injected fault,
    /// `engine_worker::fault`).
    pub env: Vec<(OsString, OsString)>,
}

impl WorkerLaunch {
    pub fn new(exe: PathBuf, options: WorkerOptions) -> Self {
        Self {
            exe,
            options,
            handshake_timeout: Duration::from_secs(120),
            cpu_record: None,
            env: Vec::new(),
        }
    }

    /// The worker's arguments for the first engine generation.
    pub fn args(&self) -> Vec<OsString> {
        self.args_for(1)
    }

    /// The worker's arguments for engine generation `generation` (the simulated engine is
    /// told which it is: its message-counted faults fire in the first only): its options as
    /// one JSON object, no command line built by hand.
    pub fn args_for(&self, generation: u64) -> Vec<OsString> {
        let mut options = self.options.clone();
        options.fake.generation = generation;
        let json = serde_json::to_string(&options).unwrap_or_default();
        vec!["engine-worker".into(), "--options-json".into(), json.into()]
    }
}
