//! What the actor shows: the snapshot for `/v1/scheduler`, its event stream and the dashboard
//! (replaced every turn, watchers woken only when something besides the clock changed), the
//! engine's status in words, and the totals and levels the metrics are fed after each change.

use super::actor::Actor;
use super::snapshot::{EngineStatus, ServiceSnapshot};
use crate::metrics::{Fact, Levels};
use crate::scheduler::EngineCondition;
use std::time::Instant;

impl Actor {
    /// The engine's status, from the scheduler's view of it and the last failure.
    fn engine_status(&self, condition: EngineCondition) -> EngineStatus {
        match condition {
            EngineCondition::Ready => EngineStatus::Ready,
            EngineCondition::Starting if self.scheduler.ever_ready() => EngineStatus::Restarting,
            EngineCondition::Starting => EngineStatus::Loading,
            // Its starts ran out: it stays down until a retry (R10); requests get 503 with
            // the reason and start nothing.
            EngineCondition::Down if self.scheduler.engine_failed().is_some() => {
                EngineStatus::Failed(format!(
                    "{}; it stays down until a retry (the window's Retry, POST \
                     /v1/engine/restart, or a settings apply)",
                    self.last_failure
                        .as_deref()
                        .unwrap_or("the engine did not start")
                ))
            }
            // Down: it died with nothing waiting; the next request or a user restart starts
            // it (R10), so say why rather than `restarting`.
            EngineCondition::Down => EngineStatus::Failed(format!(
                "{}; it starts again on the next request or a restart",
                self.last_failure.as_deref().unwrap_or("the engine stopped")
            )),
        }
    }

    /// Publishes the current view. The value is always replaced; watchers are woken only
    /// when something other than the clock changed: after a tick (which may change nothing
    /// but the clock) the new view is compared with the last, ignoring the clock; any other
    /// turn (a step's tokens, a command, an engine start) wakes them without the comparison,
    /// which would copy two whole snapshots per token.
    pub(super) fn publish(&mut self, ticked: bool) {
        let now = self.now();
        let wall = Instant::now();
        let worker_rss_bytes = self.worker_rss(wall);
        let handshake = self.engine.handshake();
        let launch = &self.engine.launch().options;
        let parallel = handshake.map_or(launch.slots, |h| h.slots);
        let mut snapshot =
            ServiceSnapshot::starting(self.settings.clone(), parallel, launch.fake.enabled);
        let scheduled = self.scheduler.snapshot(now);
        snapshot.uptime_secs = now.as_secs_f64();
        snapshot.engine.status = self.engine_status(scheduled.engine);
        snapshot.engine.needs_retry = self.scheduler.engine_failed().is_some();
        snapshot.engine.model = handshake.map(|h| h.model.name.clone()).unwrap_or_default();
        snapshot.engine.context_tokens = handshake.map_or(0, |h| h.model.n_ctx);
        snapshot.engine.trained_context_tokens = handshake.map_or(0, |h| h.model.n_ctx_train);
        snapshot.engine.context_chosen_by = handshake
            .map(|h| h.model.ctx_chosen_by.clone())
            .unwrap_or_default();
        snapshot.engine.prompt_tokens_per_sec = handshake.map_or(0.0, |h| h.prompt_tokens_per_sec);
        self.model_facts(&mut snapshot, worker_rss_bytes);
        snapshot.engine.generation = self.engine.generation();
        (
            snapshot.engine.steps_ahead_taken,
            snapshot.engine.steps_ahead_rewound,
            snapshot.engine.steps_ahead_not_run,
        ) = self.engine.steps_ahead();
        snapshot.engine.kv_cells_engine = self.engine.cells_used();
        snapshot.engine.kv_pool_mismatches = self.pool_mismatches;
        snapshot.engine.scheduler_diagnostics = self.diagnostics;
        if self.scheduler.ever_ready() {
            let streams = &self.streams;
            snapshot.set_scheduler(&scheduled, |id| streams.tokens_per_sec(id, wall));
        }
        // the app's run's totals: this scheduler's on top of those before it
        let totals = super::observation::add(&self.totals_before, &scheduled.counters);
        snapshot.counters = super::snapshot::CountersView::from(&totals);
        snapshot.engine.restarts = totals.engine_restarts;
        snapshot.upstream = self.upstream.clone();
        self.observed_views(&mut snapshot, wall);
        self.record_totals(&snapshot, &totals);
        self.snapshot_tx.send_if_modified(|current| {
            let changed = !ticked || current.without_clock() != snapshot.without_clock();
            *current = snapshot;
            changed
        });
    }

    /// The loaded model's file, size and device, from the handshake.
    fn model_facts(&mut self, snapshot: &mut ServiceSnapshot, worker_rss_bytes: Option<u64>) {
        let handshake = self.engine.handshake();
        let model_path = handshake.map_or("", |h| h.model.path.as_str());
        if model_path != self.model_file.0 {
            // a new model: its file's name and size, read once (publishing runs per token)
            let path = std::path::Path::new(model_path);
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().into_owned())
                .unwrap_or_default();
            let bytes = std::fs::metadata(path).map_or(0, |m| m.len());
            self.model_file = (model_path.to_owned(), name, bytes);
        }
        snapshot.engine.model_file = self.model_file.1.clone();
        snapshot.engine.model_id = model_id(&snapshot.engine.model, &self.model_file.1);
        snapshot.engine.model_file_bytes = self.model_file.2;
        snapshot.engine.worker_rss_bytes = worker_rss_bytes;
        if let Some(size) = handshake.map(|h| &h.model.size) {
            snapshot.engine.quantization.clone_from(&size.quantization);
            snapshot.engine.model_params = size.params;
            snapshot.engine.weights_bytes = size.weights_bytes;
            snapshot.engine.kv_pool_bytes =
                size.kv_bytes_per_cell * u64::from(handshake.map_or(0, |h| h.kv_cells));
        }
        snapshot.engine.threads = handshake.map_or(0, |h| h.threads);
        snapshot.engine.device = handshake.map(|h| h.device.clone());
        let device = handshake.map(|h| &h.device);
        snapshot.engine.cpu_code = device.map(|d| d.cpu_variant.clone()).unwrap_or_default();
        snapshot.engine.cpu_code_skipped = device
            .map(|d| d.cpu_variants_skipped.clone())
            .unwrap_or_default();
        snapshot.engine.cpu_code_words = device.map(super::cpu_code_words).unwrap_or_default();
    }

    /// What the observation of the app's run shows: the ended requests (before the rows: a
    /// why names an ended request by the id its client saw), the cost sums, the cache's hits,
    /// the first-token samples and the log.
    fn observed_views(&mut self, snapshot: &mut ServiceSnapshot, wall: Instant) {
        {
            let mut kept = self.observation.lock();
            snapshot.finished = kept.ended.finished();
            snapshot.cost = kept.ended.cost(wall);
            (
                snapshot.conversation_cache.hits,
                snapshot.conversation_cache.misses,
            ) = kept.ended.cache_hits();
            snapshot.ttft = kept.ended.ttft();
            snapshot.log = kept.log.entries();
        }
        snapshot.requests = super::requests::request_rows(snapshot, |id| {
            let live = self.streams.get(id)?;
            Some(super::requests::LiveFacts {
                origin: live.submission.origin.clone(),
                prompt_tokens: live.submission.prompt.len() as u32,
                max_tokens: live.submission.max_tokens,
                elapsed_secs: wall.duration_since(live.arrived).as_secs_f64(),
                parks: live.cost.parks,
                parked_secs: live.cost.parked_secs(wall),
            })
        });
        snapshot.conversation_cache.bytes = self.engine.cached_bytes();
        snapshot.last_length_refusal = self.last_length_refusal.clone();
    }

    /// The totals and levels after this change, to the metrics.
    fn record_totals(&self, snapshot: &ServiceSnapshot, totals: &crate::scheduler::Counters) {
        let running = snapshot
            .slots
            .iter()
            .filter(|s| s.request_id.is_some())
            .count();
        let levels = Levels {
            waiting: snapshot.waiting.len(),
            running,
            parked: snapshot.parked.len(),
            kv_cells_used: snapshot.engine.kv_cells_used,
            kv_cells_total: u64::from(snapshot.engine.kv_cells_total),
            conversation_cache_entries: snapshot.conversation_cache.entries,
            conversation_cache_bytes: snapshot.conversation_cache.bytes,
            checkpoint_bytes: snapshot.checkpoint_bytes,
            engine_up: snapshot.engine.status == EngineStatus::Ready,
            model: snapshot.engine.model.clone(),
        };
        self.observation.record(&Fact::Totals {
            counters: totals,
            levels: &levels,
        });
    }

    /// The worker's resident memory, read again at most once a second (publishing runs per
    /// token).
    fn worker_rss(&mut self, now: Instant) -> Option<u64> {
        let pid = self.engine.worker_pid()?;
        match self.worker_rss {
            Some((at, of, rss)) if of == pid && now.duration_since(at).as_secs_f64() < 1.0 => rss,
            _ => {
                let rss = rss_bytes(pid);
                self.worker_rss = Some((now, pid, rss));
                rss
            }
        }
    }
}

/// The id clients send for a model: its file's stem (the name without `.gguf`), whitespace
/// turned into `-`; the engine's name when there is no file (the simulated engine).
pub(crate) fn model_id(name: &str, file_name: &str) -> String {
    let stem = file_name.strip_suffix(".gguf").unwrap_or(file_name);
    let id = if stem.is_empty() { name } else { stem };
    id.split_whitespace().collect::<Vec<_>>().join("-")
}

/// A process's resident memory from Linux's `/proc/<pid>/status` (`VmRSS:  123456 kB`);
/// `None` where there is no such file.
#[cfg(not(windows))]
fn rss_bytes(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// A process's resident memory on Windows: its working set (`GetProcessMemoryInfo`, which
/// Task Manager's "Memory" column shows).
#[cfg(windows)]
#[allow(unsafe_code)]
fn rss_bytes(pid: u32) -> Option<u64> {
    use windows_sys::Win32::Foundation::CloseHandle;
    use windows_sys::Win32::System::ProcessStatus::{
        GetProcessMemoryInfo, PROCESS_MEMORY_COUNTERS,
    };
    use windows_sys::Win32::System::Threading::{OpenProcess, PROCESS_QUERY_LIMITED_INFORMATION};
    let size = std::mem::size_of::<PROCESS_MEMORY_COUNTERS>() as u32;
    // SAFETY: the handle is checked before use and closed once; the counters are a zeroed
    // PROCESS_MEMORY_COUNTERS whose `cb` and the size passed are its size, as the call requires.
    unsafe {
        let handle = OpenProcess(PROCESS_QUERY_LIMITED_INFORMATION, 0, pid);
        if handle.is_null() {
            return None;
        }
        let mut counters: PROCESS_MEMORY_COUNTERS = std::mem::zeroed();
        counters.cb = size;
        let ok = GetProcessMemoryInfo(handle, &mut counters, size);
        CloseHandle(handle);
        (ok != 0).then_some(counters.WorkingSetSize as u64)
    }
}

#[cfg(test)]
mod tests {
    use super::model_id;

    #[test]
    fn a_model_id_is_the_file_stem_without_spaces_or_the_engine_name() {
        assert_eq!(
            model_id(
                "Smollm2 135M 8k Lc100K Mix1 Ep2",
                "SmolLM2-135M-Instruct.Q4_1.gguf"
            ),
            "SmolLM2-135M-Instruct.Q4_1"
        );
        assert_eq!(model_id("x", "my model  v2.gguf"), "my-model-v2");
        assert_eq!(model_id("simulated", ""), "simulated");
    }
}
