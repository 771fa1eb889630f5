//! The dashboard's panels: each a `*_ui` function that reads the snapshot and queues
//! commands; none waits on anything.

use super::commands::{Command, CommandQueue};
use super::queue::STARVING;
pub use super::queue::{parked_ui, slots_ui, waiting_ui};
pub use super::units::bytes_words;
use crate::service::{DeviceFacts, EngineStatus, ServiceSnapshot, UpstreamView, upstream_words};
use egui::{Color32, Ui};

/// Model, state, KV use and the Restart button (which first says what a restart does to the
/// requests in flight, R10).
/// How long the restart's question waits for an answer before it closes (no restart).
pub const CONFIRM_SECS: f64 = 30.0;

pub fn engine_ui(
    ui: &mut Ui,
    s: &ServiceSnapshot,
    confirm_restart: &mut Option<f64>,
    q: &mut CommandQueue,
) {
    // egui's clock: a question nobody answers closes by itself (#62: it stayed for minutes)
    let now = ui.input(|i| i.time);
    // wrapped: a real model's file, sizes and context are wider than the window
    ui.horizontal_wrapped(|ui| {
        ui.strong("Engine");
        ui.label(format!("{} - {}", display_model(s), engine_state_words(s)))
            .on_hover_text(format!("its GGUF title: {}", s.engine.model));
        if !s.engine.model_file.is_empty() {
            ui.weak(model_words(s)).on_hover_text(
                "the model's file and size, its quantization and parameters; the memory of its \
                 weights, of the KV pool (its cells at the cache's type), of the conversations \
                 kept in host RAM, and the engine process's resident memory",
            );
        }
        if s.engine.simulated {
            ui.colored_label(Color32::YELLOW, "SIMULATED engine");
        }
        context_line_ui(ui, s);
        pool_mismatches_ui(ui, s.engine.kv_pool_mismatches);
        restart_button_ui(ui, s, now, confirm_restart, q);
    });
    if let Some(device) = s.engine.device.as_ref().filter(|_| !s.engine.simulated) {
        ui.horizontal_wrapped(|ui| device_ui(ui, device, s.engine.threads));
    }
    if let Some(upstream) = &s.upstream {
        ui.horizontal_wrapped(|ui| upstream_ui(ui, upstream));
    }
    if confirm_restart.is_some_and(|asked| now - asked > CONFIRM_SECS) {
        *confirm_restart = None;
    }
    if let Some(asked) = *confirm_restart {
        confirm_restart_ui(ui, s, now - asked, confirm_restart, q);
    }
}

/// The upstream engine's own figures (`engine: upstream`), labelled as its own: the slots and
/// queue above are our scheduler's.
fn upstream_ui(ui: &mut Ui, u: &UpstreamView) {
    ui.strong("Upstream (its own figures)");
    let words = upstream_words(u);
    let label = match u.error {
        Some(_) => ui.colored_label(Color32::LIGHT_RED, words),
        None => ui.label(words),
    };
    label.on_hover_text(
        "what the upstream engine says of itself, read once a second from its /slots and \
         /metrics: its slots, its own queue, its KV use and what its prefix cache served. The \
         slots, queue and counters elsewhere in this window are Strata Desk's scheduler's",
    );
}

/// The engine's state in words.
fn engine_state_words(s: &ServiceSnapshot) -> String {
    match &s.engine.status {
        EngineStatus::Loading => "loading".to_owned(),
        EngineStatus::Ready => "ready".to_owned(),
        EngineStatus::Restarting => "restarting".to_owned(),
        // the banner below says why, with Retry
        EngineStatus::Failed(_) if s.engine.needs_retry => "failed (see below)".to_owned(),
        EngineStatus::Failed(reason) => format!("failed: {reason}"),
    }
}

/// The context (and what chose it), the KV pool's use, the slots and the chunk size.
fn context_line_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    let chosen = &s.engine.context_chosen_by;
    ui.label(format!(
        "context {} tokens{}, KV {} / {} cells, {} slot(s), chunk {} tokens",
        s.engine.context_tokens,
        if chosen.is_empty() {
            String::new()
        } else {
            format!(" ({chosen})")
        },
        s.engine.kv_cells_used,
        s.engine.kv_cells_total,
        s.engine.parallel,
        s.chunk_tokens
    ))
    .on_hover_text(format!(
        "context: the longest conversation one request may hold (prompt and output){}; \
         KV: cells held now of the pool all slots and kept conversations share; chunk: \
         the most prompt tokens one step reads (a long read may give way between chunks)",
        crate::service::context_words(chosen)
    ));
}

/// Restart engine: at once when nothing runs or is parked, else it asks first.
fn restart_button_ui(
    ui: &mut Ui,
    s: &ServiceSnapshot,
    now: f64,
    confirm_restart: &mut Option<f64>,
    q: &mut CommandQueue,
) {
    if ui
        .button("Restart engine")
        .on_hover_text(
            "start a new engine worker with the same settings; asks first when requests \
             are running or parked (they fail with \"engine restarted\"; waiting ones stay)",
        )
        .clicked()
    {
        let in_flight = s.slots.iter().filter(|x| x.request_id.is_some()).count() + s.parked.len();
        if in_flight == 0 {
            q.send(Command::RestartEngine);
        } else {
            *confirm_restart = Some(now);
        }
    }
}

/// The restart's question: what it does to the requests in flight, with its countdown;
/// `asked_secs` ago.
fn confirm_restart_ui(
    ui: &mut Ui,
    s: &ServiceSnapshot,
    asked_secs: f64,
    confirm_restart: &mut Option<f64>,
    q: &mut CommandQueue,
) {
    // the countdown moves with no snapshot
    ui.ctx()
        .request_repaint_after(std::time::Duration::from_secs(1));
    let running = s.slots.iter().filter(|x| x.request_id.is_some()).count();
    ui.horizontal(|ui| {
        ui.colored_label(
            STARVING,
            format!(
                "A restart fails {running} running and {} parked request(s) with \"engine restarted\"; {} waiting stay queued. (This question closes in {:.0} s.)",
                s.parked.len(),
                s.waiting.len(),
                (CONFIRM_SECS - asked_secs).max(0.0)
            ),
        );
        if ui
            .button("Restart now")
            .on_hover_text("fail those requests and start a new engine")
            .clicked()
        {
            q.send(Command::RestartEngine);
            *confirm_restart = None;
        }
        if ui
            .button("Keep running")
            .on_hover_text("no restart")
            .clicked()
        {
            *confirm_restart = None;
        }
    });
}

/// "model.gguf, 100.2 MiB, Q4_1, 134.5 M parameters; weights 98.3 MiB, KV pool 180.0 MiB".
pub fn model_words(s: &ServiceSnapshot) -> String {
    let e = &s.engine;
    let mut words = vec![e.model_file.clone(), bytes_words(e.model_file_bytes)];
    if !e.quantization.is_empty() {
        words.push(e.quantization.clone());
    }
    if e.model_params > 0 {
        words.push(format!(
            "{:.1}\u{a0}M parameters",
            e.model_params as f64 / 1e6
        ));
    }
    let mut memory = Vec::new();
    if e.weights_bytes > 0 {
        memory.push(format!("weights {}", bytes_words(e.weights_bytes)));
    }
    if e.kv_pool_bytes > 0 {
        memory.push(format!("KV pool {}", bytes_words(e.kv_pool_bytes)));
    }
    if s.conversation_cache.bytes > 0 {
        memory.push(format!(
            "host-RAM cache {}",
            bytes_words(s.conversation_cache.bytes)
        ));
    }
    if let Some(rss) = e.worker_rss_bytes {
        memory.push(format!("engine process {}", bytes_words(rss)));
    }
    let mut line = words.join(", ");
    if !memory.is_empty() {
        line.push_str("; ");
        line.push_str(&memory.join(", "));
    }
    line
}

/// The model by the id clients use (its file's stem, which names the size, the fine-tune and
/// the quantization: "SmolLM2-135M-Instruct.Q4_1"), not its GGUF title ("Smollm2 135M 8k
/// Lc100K Mix1 Ep2"), which the hover gives.
fn display_model(s: &ServiceSnapshot) -> &str {
    match (s.engine.model_id.as_str(), s.engine.model.as_str()) {
        ("", "") => "(no model yet)",
        ("", title) => title,
        (id, _) => id,
    }
}

/// The pool-wide check's counter, shown only once it is not 0 (a bug the app survived).
pub fn pool_mismatches_ui(ui: &mut Ui, mismatches: u64) {
    if mismatches == 0 {
        return;
    }
    ui.colored_label(STARVING, format!("KV pool mismatches: {mismatches}"))
        .on_hover_text(
            "steps after which the engine held other KV cells than the scheduler counted: a \
             bug, logged in the scheduler log; the engine keeps running and no request is lost \
             for it (a restart clears it)",
        );
}

/// The kept conversations: each in its own sequence of the KV pool (least recently used
/// first) or in host RAM; how many tokens a next turn will not read again.
pub fn conversations_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    ui.heading("Kept conversations")
        .on_hover_text("finished conversations kept so that the next turn reads only what is new");
    ui.label(format!(
        "{} of {} sequences free; KV cells {} of {} used",
        s.engine.kv_sequences_free,
        s.engine.kv_sequences,
        s.engine.kv_cells_used,
        s.engine.kv_cells_total
    ));
    if s.conversations.is_empty() {
        ui.label("none kept yet");
        return;
    }
    egui::Grid::new("conversations")
        .striped(true)
        .num_columns(4)
        .show(ui, |ui| {
            for c in &s.conversations {
                ui.label(match c.seq {
                    Some(seq) => format!("{seq}"),
                    None => "host RAM".to_owned(),
                });
                ui.label(format!("{} tokens", c.tokens));
                ui.label(match c.idle_secs {
                    Some(secs) => format!("idle {secs:.0} s"),
                    None => "saved".to_owned(),
                });
                checkpoints_ui(ui, c.checkpoints, c.checkpoint_bytes);
                ui.end_row();
            }
        });
}

/// A conversation's context checkpoints: how many, their memory, and what they are for.
fn checkpoints_ui(ui: &mut Ui, count: u32, bytes: u64) {
    if count == 0 {
        ui.label("");
        return;
    }
    let mib = bytes as f64 / (1024.0 * 1024.0);
    ui.label(format!("{count} checkpoints, {mib:.1} MiB"))
        .on_hover_text(
            "this model's cache cannot be cut at any token: a next turn that departs from this \
             conversation reads from the last checkpoint before the departure",
        );
}

/// The counters the window shows: name, value, what it counts.
pub fn counter_rows(s: &ServiceSnapshot) -> [(&'static str, u64, &'static str); 11] {
    let c = &s.counters;
    [
        (
            "give-ways to higher priority",
            c.give_ways_higher_priority,
            "prompt reads that stopped at a chunk boundary for a higher-priority request",
        ),
        (
            "give-ways to shorter left",
            c.give_ways_shorter_left,
            "prompt reads that stopped at a chunk boundary for a request with less to read",
        ),
        (
            "pauses",
            c.pauses,
            "decoding streams paused for a higher priority (solo_priority)",
        ),
        ("resumes", c.resumes, "parked requests that went on"),
        (
            "processed-prefix losses",
            c.processed_prefix_losses,
            "prompt tokens already read that had to be read again (should stay 0)",
        ),
        (
            "cancellations",
            c.cancellations,
            "requests cancelled by their client or here",
        ),
        (
            "cut by the output cap",
            c.output_cap_cuts,
            "requests that ended at a limit max_output_tokens_cap lowered (agents take that as \
             a failed turn: raise the cap)",
        ),
        (
            "engine restarts",
            c.engine_restarts,
            "engine workers started again, after a crash or the Restart button",
        ),
        (
            "conversation-cache hits",
            s.conversation_cache.hits,
            "turns that found their conversation kept and did not read it again",
        ),
        (
            "parks kept in the pool",
            c.parks_in_pool,
            "parks whose state stayed in the KV pool (cheapest to resume)",
        ),
        (
            "parks saved to host RAM",
            c.parks_to_host,
            "parks whose state was copied to host RAM for want of room in the pool",
        ),
    ]
}

/// Totals since the app started (an apply that restarts the engine keeps counting).
pub fn counters_ui(ui: &mut Ui, s: &ServiceSnapshot) {
    ui.heading("Counters")
        .on_hover_text("totals since the app started, across the engines an apply started");
    egui::Grid::new("counters").num_columns(2).show(ui, |ui| {
        for (name, value, tip) in counter_rows(s) {
            ui.label(name).on_hover_text(tip);
            ui.label(value.to_string()).on_hover_text(tip);
            ui.end_row();
        }
    });
}

/// p50 and p95 of some TTFT samples (nearest rank).
pub fn percentiles(samples: &mut [f64]) -> Option<(f64, f64)> {
    if samples.is_empty() {
        return None;
    }
    samples.sort_by(f64::total_cmp);
    let at =
        |q: f64| samples[((q * samples.len() as f64).ceil() as usize).clamp(1, samples.len()) - 1];
    Some((at(0.5), at(0.95)))
}

/// The device line: where the layers run, and a warning when GPU memory runs low.
fn device_ui(ui: &mut Ui, d: &DeviceFacts, threads: u32) {
    ui.strong("Device");
    let why = crate::service::chosen_by_words(&d.chosen_by);
    let cpu_code = match crate::service::cpu_code_words(d) {
        words if words.is_empty() => String::new(),
        words => format!(", {words}"),
    };
    let text = if d.gpu_layers > 0 {
        format!(
            "{}: {} of {} layers on the GPU ({why}), {} of {} free{}; {threads} CPU \
             threads{cpu_code}",
            d.name,
            d.gpu_layers,
            d.model_layers,
            bytes_words(d.vram_free_bytes),
            bytes_words(d.vram_total_bytes),
            if d.vram_limit_bytes > 0 {
                " (within gpu_memory_limit)"
            } else {
                ""
            }
        )
    } else {
        format!(
            "{}: all {} layers on the CPU ({why}), {threads} threads{cpu_code}",
            d.name, d.model_layers
        )
    };
    ui.label(&text).on_hover_text(format!(
        "gpu_layers: `auto` fits as many layers as the GPU's free memory holds, with the KV \
         pool and a margin; a number sets them. CPU code: the variant of llama.cpp's CPU code \
         built for the best instruction sets this CPU has, chosen at start{}",
        if d.cpu_variants.is_empty() {
            String::new()
        } else {
            format!(" among {}", d.cpu_variants.join(", "))
        }
    ));
    if d.vram_low {
        ui.colored_label(
            Color32::from_rgb(230, 160, 40),
            "GPU memory low: Windows may spill into shared memory (about 10x slower)",
        );
    }
    // "no GPU found" is said once: by the line above when it is why the layers are on the CPU
    let said_above = text.contains("no GPU found") && d.picked_by.contains("no GPU found");
    if !d.picked_by.is_empty() && !said_above {
        ui.weak(&d.picked_by)
            .on_hover_text(format!("GPUs llama.cpp sees: {}", d.devices.join("; ")));
    }
    if !d.fit_warning.is_empty() {
        ui.colored_label(Color32::from_rgb(230, 160, 40), &d.fit_warning);
    }
}

#[cfg(test)]
mod tests {
    use super::{percentiles, pool_mismatches_ui};
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    #[test]
    fn pool_mismatches_show_on_the_engine_line_only_once_there_are_some() {
        let harness = Harness::new_ui(|ui| pool_mismatches_ui(ui, 0));
        assert!(
            harness
                .query_by_label_contains("KV pool mismatches")
                .is_none()
        );
        let harness = Harness::new_ui(|ui| pool_mismatches_ui(ui, 2));
        harness.get_by_label("KV pool mismatches: 2");
    }

    #[test]
    fn the_model_line_names_the_quantization_parameters_and_memory_it_knows() {
        let mut s = crate::service::ServiceSnapshot::starting(
            crate::service::SchedulerSettings::default(),
            1,
            false,
        );
        s.engine.model_file = "m.gguf".into();
        s.engine.model_file_bytes = 100 << 20;
        assert_eq!(super::model_words(&s), "m.gguf, 100.0\u{a0}MiB");
        s.engine.quantization = "Q4_1".into();
        s.engine.model_params = 134_515_008;
        s.engine.weights_bytes = 98 << 20;
        s.engine.kv_pool_bytes = 180 << 20;
        assert_eq!(
            super::model_words(&s),
            "m.gguf, 100.0\u{a0}MiB, Q4_1, 134.5\u{a0}M parameters; weights 98.0\u{a0}MiB, KV pool \
             180.0\u{a0}MiB"
        );
    }

    #[test]
    fn percentiles_are_nearest_rank() {
        let mut v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert_eq!(percentiles(&mut v), Some((50.0, 95.0)));
        assert_eq!(percentiles(&mut [3.0]), Some((3.0, 3.0)));
        assert_eq!(percentiles(&mut []), None);
    }

    /// #62 item 7: an unanswered restart question stayed up for minutes; it closes by itself
    /// after `CONFIRM_SECS`, restarting nothing.
    #[test]
    fn an_unanswered_restart_question_closes_by_itself_and_restarts_nothing() {
        let mut s = crate::service::ServiceSnapshot::starting(
            crate::service::SchedulerSettings::default(),
            1,
            false,
        );
        s.engine.status = crate::service::EngineStatus::Ready;
        s.slots = vec![crate::service::SlotView {
            slot: crate::service::SchedulerSlotView {
                id: 0,
                state: crate::service::SlotStatus::Decoding,
                request_id: Some(crate::ids::RequestId(1)),
                seq: None,
                priority: Some(0),
                prompt_tokens: 10,
                held_tokens: 12,
                read_tokens: 10,
                generated_tokens: 2,
                has_lane: false,
                effective_priority: Some(0),
                boost: 0,
                run_secs: 1.0,
                pausable_in_secs: None,
            },
            tokens_per_sec: None,
        }];
        let mut asked = None;
        let mut q = super::CommandQueue::default();
        let mut harness = Harness::builder()
            .with_step_dt(0.5)
            .build_ui(|ui| super::engine_ui(ui, &s, &mut asked, &mut q));
        harness.step();
        harness.get_by_label("Restart engine").click();
        harness.step();
        harness.step();
        assert!(harness.query_by_label("Restart now").is_some());
        // half a second a frame: past CONFIRM_SECS
        for _ in 0..(2 * super::CONFIRM_SECS as usize + 4) {
            harness.step();
        }
        assert!(harness.query_by_label("Restart now").is_none());
        drop(harness);
        assert!(asked.is_none());
        assert!(q.pending.is_empty(), "{:?}", q.pending);
    }
}

#[cfg(test)]
#[path = "panels_layout_tests.rs"]
mod layout_tests;
