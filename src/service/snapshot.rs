//! The service's published view: what `/v1/scheduler`, its event stream and the dashboard
//! show. Plain data with stable field names (the API's contract), built from the scheduler's
//! snapshot and what the service measures itself (token rates, TTFT, the conversation cache).
//! No prompt text.

use crate::ids::RequestId;
use crate::scheduler::{
    self, ConversationView, GiveWay, Mode, ParkedView, SchedulerSettings, SlotStatus, WaitingView,
};
use serde::Serialize;

#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "snake_case", tag = "state", content = "reason")]
pub enum EngineStatus {
    Loading,
    Ready,
    Restarting,
    Failed(String),
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct EngineView {
    /// `state` (`loading`, `ready`, `restarting`, `failed`) and, when failed, `reason`.
    #[serde(flatten)]
    pub status: EngineStatus,
    /// The model's name as its header gives it (`general.name`), for people.
    pub model: String,
    /// The id clients send and `/v1/models` lists: the file's stem, no spaces
    /// (`SmolLM2-135M-Instruct.Q4_1`); the engine's name for the simulated engine.
    pub model_id: String,
    /// The model's file name and its size in bytes (empty and 0 for the simulated engine and
    /// before the first handshake).
    pub model_file: String,
    pub model_file_bytes: u64,
    /// The model's quantization (its GGUF header's file type: `Q4_1`, `Q4_K_M`, ...; empty
    /// when unknown and for the simulated engine), parameters, and its weights' bytes.
    pub quantization: String,
    pub model_params: u64,
    pub weights_bytes: u64,
    /// The KV pool's bytes: its cells times the bytes a cell takes at the cache's type, from
    /// the model's shape (0 when not known).
    pub kv_pool_bytes: u64,
    /// The engine worker's resident memory (its process's RSS, read at most once a second;
    /// `null` where the system does not say: only Linux's `/proc` is read).
    pub worker_rss_bytes: Option<u64>,
    /// Prompt tokens the engine reads per second, as it measured at load (0 before).
    pub prompt_tokens_per_sec: f64,
    /// Times an engine came up again after a death or a restart.
    pub restarts: u64,
    /// `restart_attempts_max` starts failed in a row: the engine stays `failed` until a retry
    /// (the window's Retry, `POST /v1/engine/restart`, a settings apply); requests meanwhile
    /// get a 503 with the reason and start nothing (R10).
    pub needs_retry: bool,
    pub simulated: bool,
    pub kv_cells_total: u32,
    pub kv_cells_used: u64,
    /// Context tokens of the loaded engine (0 before the first handshake).
    /// The context the model was trained for (its GGUF's `context_length`; 0 before the
    /// first engine and for the simulated one).
    pub trained_context_tokens: u32,
    pub context_tokens: u32,
    /// How the context was chosen: `set` (the `ctx` setting), `trained` (the model's trained
    /// context fits), `fit` (shrunk by llama.cpp's fitting to fit the memory), `floor` (at
    /// `ctx_min`); empty before the first handshake.
    pub context_chosen_by: String,
    /// Engine sequences over the pool, and how many hold nothing.
    pub kv_sequences: u32,
    pub kv_sequences_free: u32,
    /// Slots (sequences served at once).
    pub parallel: u32,
    /// Engine processes started so far (each start attempt is one).
    pub generation: u64,
    /// The loaded engine's CPU threads (0 before the first handshake).
    pub threads: u32,
    /// What the engine runs on: the device, layers on the GPU and its memory, `vram_low`
    /// when free memory is under the margin (null before the first handshake).
    pub device: Option<crate::protocol::DeviceFacts>,
    /// llama.cpp's CPU code the engine runs (`zen4`; `built-in` for a build without variants;
    /// empty before the first handshake and for the simulated engine).
    pub cpu_code: String,
    /// The CPU variants passed over because they crashed on this CPU, best first, with why.
    pub cpu_code_skipped: Vec<crate::protocol::gpu::SkippedCpuCode>,
    /// Both in words: "CPU code zen4 (of 14 variants); the sapphirerapids CPU code crashed on
    /// this CPU (illegal instruction, SIGILL) while the engine warmed up; using zen4".
    pub cpu_code_words: String,
    /// Decode steps sent ahead (before the last step's reply, so the engine never waits for
    /// the app between steps) that became the next step, and those rewound because the
    /// scheduler asked for another step (a finish, a pause, a new read), since the app started.
    pub steps_ahead_taken: u64,
    pub steps_ahead_rewound: u64,
    /// Steps ahead the worker did not run (the pool had no room for them at its last cells):
    /// the step was then sent as itself. Harmless.
    pub steps_ahead_not_run: u64,
    /// The cells the worker reported in use after its last step (each shared cell once),
    /// and the times that differed from the scheduler's count (0 when healthy: a mismatch is
    /// logged and counted, and never stops the engine).
    pub kv_cells_engine: Option<u32>,
    pub kv_pool_mismatches: u64,
    /// The scheduler's diagnostics since this engine unit started, each a WARN line in the
    /// log (an event it did not expect, such as a step's end with no step outstanding): 0 in a
    /// healthy run.
    pub scheduler_diagnostics: u64,
}

/// A slot as the scheduler shows it, with what the service measures beside it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SlotView {
    #[serde(flatten)]
    pub slot: scheduler::SlotView,
    /// Output tokens per second over the last few tokens (decoding only).
    pub tokens_per_sec: Option<f64>,
}

/// The scheduler's fields, read through the wrapper (`slot.state`, `slot.request_id`, ...).
impl std::ops::Deref for SlotView {
    type Target = scheduler::SlotView;

    fn deref(&self) -> &scheduler::SlotView {
        &self.slot
    }
}

/// The engine's host-RAM conversation cache.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ConversationCacheView {
    pub entries: usize,
    pub bytes: u64,
    /// Requests admitted that reused a held or cached conversation prefix.
    pub hits: u64,
    /// Requests admitted that read their whole prompt.
    pub misses: u64,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CountersView {
    /// Prompt reads that gave way at a chunk boundary: the sum of the next two.
    pub give_ways: u64,
    pub give_ways_higher_priority: u64,
    pub give_ways_shorter_left: u64,
    /// Decoding requests paused for a higher priority (R7).
    pub pauses: u64,
    pub resumes: u64,
    /// Prompt tokens read a second time (0 when healthy).
    pub processed_prefix_losses: u64,
    /// Cancelled requests: the sum over `cancellations_by_state`.
    pub cancellations: u64,
    pub cancellations_by_state: scheduler::Cancellations,
    pub engine_restarts: u64,
    pub read_parks: u64,
    pub read_restores: u64,
    /// Parks that kept the sequence and its cells in the pool (no copy), and those saved to
    /// host RAM because the cells were needed.
    pub parks_in_pool: u64,
    pub parks_to_host: u64,
    pub kv_parks: u64,
    pub refusals: u64,
    pub finished: u64,
    pub failed: u64,
    /// Requests that ended at a limit `max_output_tokens_cap` had lowered.
    pub output_cap_cuts: u64,
    /// Continuations cut back to a checkpoint, and the prompt tokens they kept.
    pub checkpoint_restores: u64,
    pub checkpoint_tokens_saved: u64,
}

impl From<&scheduler::Counters> for CountersView {
    fn from(c: &scheduler::Counters) -> Self {
        let by_state = &c.cancellations;
        Self {
            give_ways: c.give_ways_higher_priority + c.give_ways_shorter_left,
            give_ways_higher_priority: c.give_ways_higher_priority,
            give_ways_shorter_left: c.give_ways_shorter_left,
            pauses: c.pauses,
            resumes: c.resumes,
            processed_prefix_losses: c.processed_prefix_losses,
            cancellations: by_state.waiting
                + by_state.reading
                + by_state.decoding
                + by_state.parked,
            cancellations_by_state: by_state.clone(),
            engine_restarts: c.engine_restarts,
            read_parks: c.read_parks,
            read_restores: c.read_restores,
            parks_in_pool: c.parks_in_pool,
            parks_to_host: c.parks_to_host,
            kv_parks: c.kv_parks,
            refusals: c.refusals,
            finished: c.finished,
            failed: c.failed,
            output_cap_cuts: c.output_cap_cuts,
            checkpoint_restores: c.checkpoint_restores,
            checkpoint_tokens_saved: c.checkpoint_tokens_saved,
        }
    }
}

/// One request's time to first token.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TtftSample {
    pub request_id: RequestId,
    /// The id its client saw, and who sent it (the API key's name, else the User-Agent's
    /// product, else empty).
    pub client_id: String,
    pub client: String,
    pub priority: i32,
    pub ttft_secs: f64,
    /// When the first token went out, in seconds since the service started.
    pub at_secs: f64,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ServiceSnapshot {
    /// `solo`, `solo_priority` or `batch`.
    pub mode: Mode,
    pub solo_priority: bool,
    pub give_way: GiveWay,
    /// Seconds since the service started (the clock of `ttft[].at_secs`).
    pub uptime_secs: f64,
    pub engine: EngineView,
    /// The prompt read chunk for reads that start now (0 before the first handshake).
    pub chunk_tokens: u32,
    pub slots: Vec<SlotView>,
    pub parked: Vec<ParkedView>,
    pub waiting: Vec<WaitingView>,
    /// R7's outlook for the one slot's holder, as the scheduler will act on it (the whys of
    /// the holder and the first in line are read from it).
    pub pause_outlook: Option<crate::scheduler::PauseOutlookView>,
    /// Every live request, one row each: running (slot order), parked, then waiting, with
    /// the id its client sees, who sent it and why it stands where it does.
    pub requests: Vec<super::requests::RequestRow>,
    /// The last scheduler events with request ids, oldest first.
    pub log: super::event_log::SharedLog,
    /// The last prompt refused as too long for the context (`null` if none).
    pub last_length_refusal: Option<super::event_log::LengthRefusal>,
    /// Kept conversations (no text): in the pool least recently used first, then in host RAM.
    pub conversations: Vec<ConversationView>,
    pub conversation_cache: ConversationCacheView,
    /// Bytes of the context checkpoints the engine keeps (a model whose cache cannot be cut
    /// at any token), in host RAM.
    pub checkpoint_bytes: u64,
    pub counters: CountersView,
    /// The most recent first tokens, oldest first.
    pub ttft: super::shared::Shared<TtftSample>,
    /// The latest ended requests (up to 50), oldest first: what each waited, was parked and
    /// took end to end.
    pub finished: super::shared::Shared<super::cost::FinishedRequest>,
    /// What parks cost and pauses saved over the last ten minutes, by priority.
    pub cost: super::cost::CostView,
    /// Every scheduler setting in force.
    pub settings: SchedulerSettings,
    /// The upstream engine's own figures (its slots or queue, KV use, prefix-cache hits),
    /// read once a second from its `/slots` and `/metrics`; `null` unless `engine` is
    /// `upstream` (and before the first reading).
    pub upstream: Option<super::upstream_watch::UpstreamView>,
}

/// llama.cpp's CPU code the engine runs (`DeviceFacts::cpu_variant`), in words for the
/// window's device line and the ready line: `CPU code zen4 (of 14 variants)`; empty before a
/// real engine's handshake.
pub fn cpu_code_words(d: &crate::protocol::DeviceFacts) -> String {
    let words = match (d.cpu_variant.as_str(), d.cpu_variants.len()) {
        ("", _) => return String::new(),
        (variant, 0) => format!("CPU code {variant}"),
        (variant, n) => format!("CPU code {variant} (of {n} variants)"),
    };
    match crate::engine::cpu_code::skipped_words(&d.cpu_variants_skipped, &d.cpu_variant) {
        skipped if skipped.is_empty() => words,
        skipped => format!("{words}; {skipped}"),
    }
}

/// Who chose the layers on the GPU (`DeviceFacts::chosen_by`), in words: the window's device
/// line and the headless ready line.
pub fn chosen_by_words(chosen_by: &str) -> &str {
    match chosen_by {
        "auto" => "gpu_layers auto: fitted into free GPU memory by llama.cpp",
        "auto-no-gpu" => "gpu_layers auto: no GPU found",
        "auto-fit-failed" => "gpu_layers auto: the fitting failed, see the log",
        "set" => "gpu_layers set in the config",
        "device-cpu" => "device cpu: no layer on a GPU",
        other => other,
    }
}

/// How the engine's context was chosen, in words (`EngineView::context_chosen_by`), with
/// its leading separator; empty when unknown.
pub fn context_words(chosen_by: &str) -> &str {
    match chosen_by {
        "set" => " (ctx set in the config)",
        "trained" => " (the model's trained context: it fits)",
        "fit" => " (the largest that fits in memory)",
        "floor" => " (ctx_min: the floor of the fitted context)",
        _ => "",
    }
}

impl ServiceSnapshot {
    /// The view before the first engine handshake.
    pub fn starting(settings: SchedulerSettings, parallel: u32, simulated: bool) -> Self {
        Self {
            mode: mode_for(&settings, parallel),
            solo_priority: settings.solo_priority,
            give_way: settings.give_way,
            uptime_secs: 0.0,
            engine: EngineView {
                status: EngineStatus::Loading,
                model: String::new(),
                model_file: String::new(),
                model_id: String::new(),
                model_file_bytes: 0,
                quantization: String::new(),
                model_params: 0,
                weights_bytes: 0,
                kv_pool_bytes: 0,
                worker_rss_bytes: None,
                prompt_tokens_per_sec: 0.0,
                restarts: 0,
                needs_retry: false,
                simulated,
                kv_cells_total: 0,
                kv_cells_used: 0,
                trained_context_tokens: 0,
                context_tokens: 0,
                context_chosen_by: String::new(),
                kv_sequences: 0,
                kv_sequences_free: 0,
                parallel,
                generation: 0,
                threads: 0,
                device: None,
                cpu_code: String::new(),
                cpu_code_skipped: Vec::new(),
                cpu_code_words: String::new(),
                steps_ahead_taken: 0,
                steps_ahead_rewound: 0,
                steps_ahead_not_run: 0,
                kv_cells_engine: None,
                kv_pool_mismatches: 0,
                scheduler_diagnostics: 0,
            },
            chunk_tokens: 0,
            slots: Vec::new(),
            parked: Vec::new(),
            waiting: Vec::new(),
            pause_outlook: None,
            requests: Vec::new(),
            log: Default::default(),
            last_length_refusal: None,
            conversations: Vec::new(),
            conversation_cache: ConversationCacheView::default(),
            checkpoint_bytes: 0,
            counters: CountersView::default(),
            ttft: Default::default(),
            finished: Default::default(),
            cost: super::cost::CostView {
                window_secs: super::cost::COST_WINDOW_SECS,
                by_priority: Vec::new(),
            },
            settings,
            upstream: None,
        }
    }

    /// Fills the scheduler's part in from its snapshot; `rate` gives a request's output rate.
    pub(super) fn set_scheduler(
        &mut self,
        s: &scheduler::Snapshot,
        rate: impl Fn(RequestId) -> Option<f64>,
    ) {
        self.mode = s.mode;
        self.solo_priority = s.settings.solo_priority;
        self.give_way = s.settings.give_way;
        self.settings = s.settings.clone();
        self.chunk_tokens = s.chunk_tokens;
        self.engine.kv_cells_total = s.kv_cells_total;
        self.engine.kv_cells_used = s.kv_cells_used;
        self.engine.kv_sequences = s.kv_sequences;
        self.engine.kv_sequences_free = s.kv_sequences_free;
        self.conversations = s.conversations.clone();
        self.checkpoint_bytes = s.checkpoint_bytes;
        self.engine.restarts = s.counters.engine_restarts;
        self.engine.parallel = s.slots.len() as u32;
        self.conversation_cache.entries = s.host_cached_conversations;
        self.counters = CountersView::from(&s.counters);
        self.slots = s
            .slots
            .iter()
            .map(|v| SlotView {
                slot: v.clone(),
                tokens_per_sec: v
                    .request_id
                    .filter(|_| v.state == SlotStatus::Decoding)
                    .and_then(&rate),
            })
            .collect();
        self.parked = s.parked.clone();
        self.waiting = s.waiting.clone();
        self.pause_outlook = s.pause_outlook.clone();
    }

    /// The same view with every value that moves only with the clock set to zero: two
    /// snapshots that differ only there show no change (no event, no repaint).
    pub fn without_clock(&self) -> Self {
        let mut s = self.clone();
        s.uptime_secs = 0.0;
        // it is read with the clock (once a second) and moves by itself
        s.engine.worker_rss_bytes = None;
        for w in &mut s.waiting {
            w.waited_secs = 0.0;
        }
        for p in &mut s.parked {
            p.parked_secs = 0.0;
        }
        for c in &mut s.conversations {
            c.idle_secs = None;
        }
        if let Some(o) = &mut s.pause_outlook {
            o.in_secs = o.in_secs.map(|_| 0.0);
        }
        for slot in &mut s.slots {
            slot.tokens_per_sec = None;
            slot.slot.run_secs = 0.0;
            slot.slot.pausable_in_secs = slot.slot.pausable_in_secs.map(|_| 0.0);
        }
        for r in &mut s.requests {
            r.elapsed_secs = 0.0;
            r.waited_secs = 0.0;
            r.tokens_per_sec = None;
            r.pausable_in_secs = r.pausable_in_secs.map(|_| 0.0);
            r.parked_secs = 0.0;
            // its counts move with the clock ("may be paused in 2.1 s"); its causes show in
            // the other fields
            r.why.clear();
        }
        s
    }
}

/// The mode a configuration runs in.
pub fn mode_for(settings: &SchedulerSettings, parallel: u32) -> Mode {
    if parallel >= 2 {
        Mode::Batch
    } else if settings.solo_priority {
        Mode::SoloPriority
    } else {
        Mode::Solo
    }
}
