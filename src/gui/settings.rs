//! The settings view: what only a new engine takes (model, parallel, context, chunk size,
//! threads, GPU layers, flash attention, KV type), edited as a draft and applied by restarting
//! the server, which it says first. Includes the model picker: a GGUF by file dialog or path,
//! the recent models, the default model.

use super::commands::{Command, CommandQueue, ScannedModel};
use super::settings_in_force::InForce;
use crate::config::{Config, FlashAttn, GpuLayers, KvType};
use crate::control::RestartSettings;
use egui::{Color32, RichText, Ui};
use std::path::PathBuf;

/// The smallest `ctx` each agent works with, as measured: its first request and room to work
/// and to compact (docs/DEPLOYMENT.md, "Context windows"; Claude Code compacts no earlier than
/// about 67K tokens whatever its window says).
pub const AGENT_CONTEXTS: &str = "agents need: Claude Code about 100K (98304); Qwen Code, Codex, \
                                  OpenCode 32K; aider 8K";

/// The view's state between frames.
#[derive(Debug, Default)]
pub struct SettingsView {
    /// The draft; `None` until first shown (then taken from the config in force).
    draft: Option<Draft>,
    /// An apply is running.
    pub applying: bool,
    /// How the last apply ended.
    pub last_result: Option<Result<String, String>>,
    /// A model chosen in the file dialog before the draft existed.
    picked: Option<PathBuf>,
    /// The GPUs the running engine lists (`DeviceFacts::devices`): what `device` offers.
    pub devices: Vec<String>,
    /// The CPU variants the running engine's build carries (`DeviceFacts::cpu_variants`):
    /// what `cpu_code` offers.
    pub cpu_variants: Vec<String>,
    /// Models found on this machine (`None` until the first scan).
    pub found: Option<Vec<ScannedModel>>,
    /// A scan is running.
    pub scanning: bool,
    /// Models from the hub: listings and downloads.
    pub hub: super::hub::HubView,
    /// What the running engine uses (shown beside what it leaves to the engine).
    pub in_force: super::settings_in_force::InForce,
}

/// The draft: the settings a new engine takes, edited in place, and what a widget keeps beside
/// a value (the path as typed, a count kept while "auto" or "measured" is ticked).
#[derive(Debug, Clone, PartialEq)]
struct Draft {
    settings: RestartSettings,
    model_path: String,
    chunk_measured: bool,
    chunk_tokens: u32,
    gpu_auto: bool,
    gpu_layers: u32,
}

impl Draft {
    fn of(config: &Config) -> Self {
        let settings = RestartSettings::of(config);
        let e = &settings.engine;
        Self {
            model_path: e
                .model
                .as_ref()
                .map(|m| m.display().to_string())
                .unwrap_or_default(),
            chunk_measured: settings.chunk_tokens.is_none(),
            chunk_tokens: settings.chunk_tokens.unwrap_or(512),
            gpu_auto: e.gpu_layers == GpuLayers::Auto,
            gpu_layers: match e.gpu_layers {
                GpuLayers::Count(n) => n,
                GpuLayers::Auto => 99,
            },
            settings,
        }
    }

    /// The settings the draft stands for.
    fn settings(&self) -> RestartSettings {
        let path = self.model_path.trim();
        let mut settings = self.settings.clone();
        settings.engine.model = (!path.is_empty()).then(|| PathBuf::from(path));
        settings.chunk_tokens = (!self.chunk_measured).then_some(self.chunk_tokens);
        settings.engine.gpu_layers = if self.gpu_auto {
            GpuLayers::Auto
        } else {
            GpuLayers::Count(self.gpu_layers)
        };
        settings
    }
}

impl SettingsView {
    /// A model chosen in the file dialog goes into the draft.
    pub fn picked(&mut self, path: PathBuf) {
        match &mut self.draft {
            Some(draft) => draft.model_path = path.display().to_string(),
            None => self.picked = Some(path),
        }
    }

    /// Forget the draft (after an apply, the config in force is the new starting point).
    pub fn reset(&mut self) {
        self.draft = None;
    }

    /// What the running engine offers and uses, from the snapshot: copied only when it
    /// changed (a frame is drawn per token while a stream runs).
    pub fn observe(&mut self, s: &crate::service::ServiceSnapshot) {
        let device = s.engine.device.as_ref();
        let devices = device.map_or(&[][..], |d| &d.devices[..]);
        if self.devices != devices {
            self.devices = devices.to_vec();
        }
        let variants = device.map_or(&[][..], |d| &d.cpu_variants[..]);
        if self.cpu_variants != variants {
            self.cpu_variants = variants.to_vec();
        }
        let in_force = super::settings_in_force::InForce::of(s);
        if self.in_force != in_force {
            self.in_force = in_force;
        }
    }
}

/// `device`: auto, the CPU, or one of the GPUs the engine lists (`Vulkan0: ...`: the name
/// before the colon is the value).
fn device_ui(ui: &mut Ui, device: &mut String, devices: &[String]) {
    let shown = if device.is_empty() {
        "auto"
    } else {
        device.as_str()
    }
    .to_owned();
    egui::ComboBox::from_id_salt("device")
        .selected_text(shown)
        .show_ui(ui, |ui| {
            ui.selectable_value(
                device,
                "auto".to_owned(),
                "auto: the GPU with the most free memory",
            );
            ui.selectable_value(device, "cpu".to_owned(), "cpu: every layer on the CPU");
            for listed in devices {
                let id = listed.split(':').next().unwrap_or(listed).to_owned();
                ui.selectable_value(device, id, listed);
            }
        })
        .response
        .on_hover_text("which device the engine runs on; the list is what llama.cpp sees");
}

/// `cpu_code`: auto, or one of the build's CPU variants.
fn cpu_code_ui(ui: &mut Ui, cpu_code: &mut String, variants: &[String]) {
    let shown = if cpu_code.trim().is_empty() {
        "auto".to_owned()
    } else {
        cpu_code.clone()
    };
    egui::ComboBox::from_id_salt("cpu_code")
        .selected_text(shown)
        .show_ui(ui, |ui| {
            ui.selectable_value(
                cpu_code,
                "auto".to_owned(),
                "auto: the best this CPU runs, passing over those that crashed here",
            );
            for variant in variants {
                ui.selectable_value(cpu_code, variant.clone(), variant);
            }
        })
        .response
        .on_hover_text("llama.cpp's CPU code: the variant of its instruction sets the engine runs");
}

/// The settings view. `config` is the config in force; `in_flight` how many requests an apply
/// would end.
pub fn settings_ui(
    ui: &mut Ui,
    view: &mut SettingsView,
    config: &Config,
    in_flight: usize,
    q: &mut CommandQueue,
) {
    let in_force = Draft::of(config);
    let draft = view.draft.get_or_insert_with(|| in_force.clone());
    if let Some(path) = view.picked.take() {
        draft.model_path = path.display().to_string();
    }
    egui::Grid::new("settings")
        .num_columns(2)
        .spacing([12.0, 6.0])
        .show(ui, |ui| {
            model_rows_ui(ui, draft, config, q);
            context_rows_ui(ui, draft, &view.in_force);
            engine_rows_ui(ui, draft, &view.in_force);
            device_rows_ui(ui, draft, &view.devices, &view.cpu_variants);
        });
    apply_ui(ui, view, &in_force, in_flight, q);
    let Some(draft) = view.draft.as_mut() else {
        return;
    };
    // Last, below Apply: the lists grow when a scan or a listing arrives, and nothing above
    // them moves under the pointer (a click after "Find models" hit another control).
    ui.separator();
    egui::Grid::new("settings-models")
        .num_columns(2)
        .spacing([12.0, 6.0])
        .show(ui, |ui| {
            ui.label("Models on this machine");
            ui.vertical(|ui| found_models_ui(ui, &view.found, &mut view.scanning, draft, q));
            ui.end_row();

            ui.label("Models from the hub");
            egui::CollapsingHeader::new("coding-agent models by card size, or any repository")
                .show(ui, |ui| {
                    super::hub::hub_ui(ui, &mut view.hub, &mut draft.model_path, q);
                });
            ui.end_row();
        });
}

/// The model: a path typed or picked, the default, a recent one.
fn model_rows_ui(ui: &mut Ui, draft: &mut Draft, config: &Config, q: &mut CommandQueue) {
    ui.label("Model");
    ui.vertical(|ui| {
        ui.horizontal(|ui| {
            ui.add(
                egui::TextEdit::singleline(&mut draft.model_path)
                    .hint_text("default: SmolLM2-135M-Instruct, fetched on first use")
                    .desired_width(360.0),
            );
            if ui
                .button("Open GGUF...")
                .on_hover_text("choose a model file (Ollama's blobs have no extension)")
                .clicked()
            {
                q.send(Command::PickModel);
            }
            if ui
                .button("Default model")
                .on_hover_text("SmolLM2-135M-Instruct, fetched on first use")
                .clicked()
            {
                draft.model_path.clear();
            }
        });
        if !config.app.recent_models.is_empty() {
            egui::ComboBox::from_label("Recent models")
                .selected_text("choose...")
                .show_ui(ui, |ui| {
                    for model in &config.app.recent_models {
                        let shown = model.display().to_string();
                        if ui.selectable_label(false, &shown).clicked() {
                            draft.model_path = shown;
                        }
                    }
                });
        }
    });
    ui.end_row();
}

/// Slots and the context: `parallel`, `ctx`, `ctx_min` (with the agents' needs).
fn context_rows_ui(ui: &mut Ui, draft: &mut Draft, in_force: &InForce) {
    let e = &mut draft.settings.engine;
    let label = ui.label("parallel (slots)");
    ui.add(egui::DragValue::new(&mut e.slots).range(1..=64))
        .labelled_by(label.id)
        .on_hover_text(
            "1: solo mode (one stream at a time, preemption may pause it); 2 or more: \
             batch mode (streams decode together, none is paused)",
        );
    ui.end_row();

    let label = ui.label("ctx (tokens, 0 = the largest that fits)");
    ui.add(egui::DragValue::new(&mut e.ctx_tokens).range(0..=1_048_576))
        .labelled_by(label.id)
        .on_hover_text(
            "the longest conversation one request may hold; 0: the largest that fits \
             in memory up to the model's trained context, not below ctx_min; set the \
             agent's context window to match (docs/DEPLOYMENT.md, \"Context windows\")",
        );
    ui.end_row();

    let label = ui.label("ctx_min (floor of a fitted ctx)");
    // the note in the same row: one more row pushes the buttons below a small window
    ui.horizontal(|ui| {
        ui.add_enabled(
            e.ctx_tokens == 0,
            egui::DragValue::new(&mut e.ctx_min_tokens).range(256..=1_048_576),
        )
        .labelled_by(label.id)
        .on_hover_text(
            "with ctx 0: the smallest context the agent needs; layers leave the GPU \
             before the context goes below it",
        );
        if let Some(note) = in_force.ctx_min_note(e.ctx_tokens, e.ctx_min_tokens) {
            ui.colored_label(Color32::from_rgb(200, 140, 20), note);
        }
    });
    ui.end_row();
    ui.label("");
    ui.label(RichText::new(AGENT_CONTEXTS).weak().small());
    ui.end_row();
}

/// The read chunk, the threads and the GPU: `chunk_tokens`, `threads`, `gpu_layers`,
/// `gpu_memory_limit`.
fn engine_rows_ui(ui: &mut Ui, draft: &mut Draft, in_force: &InForce) {
    let label = ui.label("chunk_tokens");
    ui.horizontal(|ui| {
        let measured = ui.checkbox(
            &mut draft.chunk_measured,
            "measured (about 0.25 s of reading)",
        );
        if measured.changed() && !draft.chunk_measured && in_force.chunk_tokens > 0 {
            // set by hand from the value in force, not a placeholder
            draft.chunk_tokens = in_force.chunk_tokens;
        }
        if draft.chunk_measured {
            ui.label(in_force.chunk_words());
        } else {
            ui.add(egui::DragValue::new(&mut draft.chunk_tokens).range(64..=8192))
                .labelled_by(label.id)
                .on_hover_text(
                    "the most prompt tokens one step reads: a long read may give way \
                     between chunks, so smaller chunks answer short requests sooner",
                );
        }
    });
    ui.end_row();

    let label = ui.label("threads (0 = the physical cores)");
    // the physical batch in the same row: one more row pushes the buttons below a small window
    ui.horizontal(|ui| {
        let e = &mut draft.settings.engine;
        ui.add(egui::DragValue::new(&mut e.threads).range(0..=1024))
            .labelled_by(label.id)
            .on_hover_text("the engine's CPU threads (chosen by measurement: docs/BENCHMARKS.md)");
        let label = ui.label("ubatch_tokens");
        ui.add(egui::DragValue::new(&mut e.ubatch_tokens).range(64..=2048))
            .labelled_by(label.id)
            .on_hover_text(
                "prompt tokens llama.cpp computes in one pass: larger reads a long prompt \
                 faster on a GPU, at more memory",
            );
    });
    ui.end_row();

    let label = ui.label("gpu_layers");
    ui.horizontal(|ui| {
        ui.checkbox(
            &mut draft.gpu_auto,
            "auto (as many as fit in free GPU memory)",
        )
        .on_hover_text(
            "llama.cpp fits layers, the KV pool and its buffers into the GPU's \
                 free memory with a margin; 0 on a computer without a GPU",
        );
        if draft.gpu_auto {
            ui.label(in_force.gpu_layers_words());
        } else {
            ui.add(egui::DragValue::new(&mut draft.gpu_layers).range(0..=1000))
                .labelled_by(label.id);
        }
    });
    ui.end_row();

    let label = ui.label("gpu_memory_limit MiB (0 = none)");
    ui.add(
        egui::DragValue::new(&mut draft.settings.engine.gpu_memory_limit.mib)
            .range(0..=1 << 20)
            .speed(64),
    )
    .labelled_by(label.id)
    .on_hover_text(
        "the most GPU memory the engine may take, to leave room for the desktop and \
         other programs; auto fits the layers into it",
    );
    ui.end_row();
}

/// The device and the engine's kernels and cache: `device`, `cpu_code`, `flash_attn`,
/// `kv_type`, `swa_full`, the checkpoints.
fn device_rows_ui(ui: &mut Ui, draft: &mut Draft, devices: &[String], cpu_variants: &[String]) {
    let e = &mut draft.settings.engine;
    ui.label("device");
    ui.horizontal(|ui| {
        device_ui(ui, &mut e.device, devices);
        // in the device's row: one more row pushes the buttons below a small window
        ui.label("cpu_code");
        cpu_code_ui(ui, &mut e.cpu_code, cpu_variants);
    });
    ui.end_row();

    ui.label("flash_attn");
    ui.horizontal(|ui| {
        for (value, label) in [
            (FlashAttn::Auto, "auto"),
            (FlashAttn::On, "on"),
            (FlashAttn::Off, "off"),
        ] {
            ui.radio_value(&mut e.flash_attn, value, label)
                .on_hover_text("flash attention: auto lets llama.cpp choose per device");
        }
    });
    ui.end_row();

    ui.label("kv_type");
    ui.horizontal(|ui| {
        ui.radio_value(&mut e.kv_type, KvType::F16, "f16")
            .on_hover_text("the KV cache at full precision");
        ui.radio_value(&mut e.kv_type, KvType::Q8_0, "q8_0")
            .on_hover_text("the KV cache in 8 bits: about half the memory, so twice the context");
        // in the KV cache's row: one more row pushes the buttons below a small window
        ui.separator();
        ui.checkbox(&mut e.swa_full, "swa_full").on_hover_text(
            "sliding-window models (Gemma 3, gpt-oss): their window layers keep the \
             whole context, so a conversation continues from any token it shares, at \
             more memory and a slower decode; off, only a conversation the prompt \
             extends whole continues",
        );
        super::settings_cache::checkpoints_ui(ui, e);
    });
    ui.end_row();
}

/// Apply and Revert (and, for `parallel` 2 or more with preemption on, the way that works),
/// what applying does, and how the last apply ended.
fn apply_ui(
    ui: &mut Ui,
    view: &mut SettingsView,
    in_force: &Draft,
    in_flight: usize,
    q: &mut CommandQueue,
) {
    let Some(draft) = view.draft.as_mut() else {
        return;
    };
    let changed = draft.settings() != in_force.settings();
    ui.horizontal(|ui| {
        let apply = ui
            .add_enabled(
                changed && !view.applying,
                egui::Button::new("Apply and restart"),
            )
            .on_hover_text(
                "start a new engine with these settings (the server and its address stay), \
                 and save them",
            );
        if apply.clicked() {
            q.send(Command::ApplySettings(Box::new(draft.settings())));
            view.applying = true;
            view.last_result = None;
        }
        if ui
            .add_enabled(changed && !view.applying, egui::Button::new("Revert"))
            .on_hover_text("back to the settings in force")
            .clicked()
        {
            *draft = in_force.clone();
            // the error was about the draft just reverted (#62: it stayed)
            view.last_result = None;
        }
        // parallel 2 or more is refused with preemption on: offer the way that works
        if draft.settings.engine.slots >= 2 && view.in_force.solo_priority && !view.applying {
            ui.label("parallel 2 or more needs preemption off");
            if ui
                .button("Turn preemption off and apply")
                .on_hover_text(
                    "turns solo_priority off (streams then run to their end), then starts the \
                     new engine with these settings",
                )
                .clicked()
            {
                q.send(Command::ApplyWithPreemptionOff(Box::new(draft.settings())));
                view.applying = true;
                view.last_result = None;
            }
        }
    });
    if changed {
        let ends = if in_flight == 0 {
            "nothing is in flight now".to_owned()
        } else {
            format!(
                "the {in_flight} request(s) in flight or waiting end with an error (clients retry)"
            )
        };
        ui.label(format!(
            "These settings take a new engine: applying starts one in place of this one (the server, its address and the clients that only watch stay); {ends}. A model that cannot be read stops nothing; once the new engine is ready the settings are saved to the config file; if it fails, the previous settings run again."
        ));
    }
    if view.applying {
        ui.horizontal(|ui| {
            ui.spinner();
            ui.label("starting a new engine with the new settings...");
        });
    }
    match &view.last_result {
        Some(Ok(line)) => {
            ui.label(line);
        }
        Some(Err(e)) => {
            ui.colored_label(Color32::from_rgb(220, 60, 40), format!("not applied: {e}"));
        }
        None => {}
    }
}

/// The models found in LM Studio's and Ollama's folders and the app's own, each pickable.
fn found_models_ui(
    ui: &mut Ui,
    found: &Option<Vec<ScannedModel>>,
    scanning: &mut bool,
    draft: &mut Draft,
    q: &mut CommandQueue,
) {
    ui.horizontal(|ui| {
        let scan = ui
            .add_enabled(!*scanning, egui::Button::new("Find models"))
            .on_hover_text(
                "look in LM Studio's models folder, Ollama's store and this app's models folder",
            );
        if scan.clicked() {
            *scanning = true;
            q.send(Command::ScanModels);
        }
        if *scanning {
            ui.spinner();
            ui.label("reading each model's header...");
        }
    });
    let Some(found) = found else {
        return;
    };
    if found.is_empty() {
        ui.label("no GGUF found in LM Studio's, Ollama's or this app's folders");
        return;
    }
    egui::Grid::new("found-models")
        .striped(true)
        .show(ui, |ui| {
            for (model, facts) in found {
                ui.label(&model.name)
                    .on_hover_text(model.path.display().to_string());
                ui.label(model.source.words());
                ui.label(format!(
                    "{:.1} GiB",
                    model.size_bytes as f64 / (1u64 << 30) as f64
                ));
                match facts {
                    Ok(f) => {
                        ui.label(format!("context {}", f.context_length));
                        ui.label(match (&f.tool_calls, f.has_chat_template) {
                            (Some(family), _) => format!("tools: {family}"),
                            (None, true) => "chat template, no tools".to_owned(),
                            (None, false) => "no chat template".to_owned(),
                        });
                    }
                    Err(e) => {
                        ui.colored_label(Color32::from_rgb(220, 60, 40), "unreadable")
                            .on_hover_text(e);
                        ui.label("");
                    }
                }
                if ui
                    .add_enabled(facts.is_ok(), egui::Button::new("Use"))
                    .on_hover_text("put this model in the draft (Apply and restart loads it)")
                    .clicked()
                {
                    draft.model_path = model.path.display().to_string();
                }
                ui.end_row();
            }
        });
}

#[cfg(test)]
#[path = "settings_tests.rs"]
mod tests;
