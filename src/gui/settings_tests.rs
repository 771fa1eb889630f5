//! The settings view's found-models list under egui_kittest, on made-up scan results (the
//! scan itself is tested on the real model in tests/it/models_found.rs).

use super::*;
use crate::config::Overrides;
use crate::models::discover::{FoundModel, ModelFacts, ModelSource};
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable as _};

fn config() -> Config {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config.json");
    std::fs::write(&path, "{}").unwrap();
    Config::load(Some(&path), &Overrides::default()).unwrap()
}

fn found() -> Vec<ScannedModel> {
    vec![
        (
            FoundModel {
                name: "qwen2.5-coder:7b".into(),
                path: PathBuf::from("/home/u/.ollama/models/blobs/sha256-1f"),
                source: ModelSource::Ollama,
                size_bytes: 4_700_000_000,
            },
            Ok(ModelFacts {
                context_length: 32768,
                has_chat_template: true,
                tool_calls: Some("Hermes".into()),
            }),
        ),
        (
            FoundModel {
                name: "broken.gguf".into(),
                path: PathBuf::from("/home/u/.lmstudio/models/x/broken.gguf"),
                source: ModelSource::LmStudio,
                size_bytes: 1 << 30,
            },
            Err("not a GGUF file".into()),
        ),
    ]
}

#[test]
fn found_models_show_their_facts_and_use_puts_one_in_the_draft() {
    let config = config();
    let mut view = SettingsView {
        found: Some(found()),
        ..SettingsView::default()
    };
    let mut queue = CommandQueue::default();
    let mut harness = Harness::new_ui(|ui| settings_ui(ui, &mut view, &config, 0, &mut queue));
    harness.run();
    for text in [
        "qwen2.5-coder:7b",
        "Ollama",
        "4.4 GiB",
        "context 32768",
        "tools: Hermes",
        "broken.gguf",
        "LM Studio",
        "unreadable",
        AGENT_CONTEXTS,
    ] {
        assert!(harness.query_by_label(text).is_some(), "no {text:?}");
    }
    let uses: Vec<_> = harness.query_all_by_label("Use").collect();
    assert_eq!(uses.len(), 2, "a Use per model");
    // the unreadable one cannot be used
    assert!(uses[1].accesskit_node().is_disabled());
    uses[0].click();
    harness.run();
    drop(harness);
    let draft = view.draft.as_ref().expect("a draft");
    assert_eq!(
        draft.model_path, "/home/u/.ollama/models/blobs/sha256-1f",
        "Use did not put the model in the draft"
    );
}

#[test]
fn find_models_starts_a_scan_and_shows_that_it_reads() {
    let config = config();
    let mut view = SettingsView::default();
    let mut queue = CommandQueue::default();
    let mut harness = Harness::new_ui(|ui| settings_ui(ui, &mut view, &config, 0, &mut queue));
    harness.run_ok();
    harness.get_by_label("Find models").click();
    harness.run_ok();
    assert!(
        harness
            .query_by_label("reading each model's header...")
            .is_some()
    );
    drop(harness);
    assert!(view.scanning);
    assert_eq!(queue.pending, [Command::ScanModels]);
}

/// #44 item 5: a click after "Find models" hit another control, since the results pushed the
/// settings below them down. The lists now come last: the controls above stay put.
#[test]
fn the_found_models_arriving_move_no_setting_or_button() {
    let config = config();
    let mut view = SettingsView::default();
    let mut queue = CommandQueue::default();
    let place = |view: &mut SettingsView, queue: &mut CommandQueue| {
        let mut harness = Harness::builder()
            .with_size(egui::vec2(1100.0, 900.0))
            .build_ui(|ui| settings_ui(ui, view, &config, 0, queue));
        harness.run_ok();
        ["Apply and restart", "q8_0", "Find models"].map(|label| harness.get_by_label(label).rect())
    };
    let before = place(&mut view, &mut queue);
    view.found = Some(found());
    let after = place(&mut view, &mut queue);
    assert_eq!(
        before, after,
        "the settings moved when the scan's results arrived"
    );
}

/// The `ctx_min` field: its value from the config, editable while `ctx` is 0 (the fitted
/// context it is the floor of), not while a `ctx` is set.
#[test]
fn ctx_min_is_editable_while_ctx_is_0_and_not_once_a_ctx_is_set() {
    let field = |file: &str| {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("config.json");
        std::fs::write(&path, file).unwrap();
        let config = Config::load(Some(&path), &Overrides::default()).unwrap();
        let mut view = SettingsView::default();
        let mut queue = CommandQueue::default();
        let mut harness = Harness::new_ui(|ui| settings_ui(ui, &mut view, &config, 0, &mut queue));
        harness.run_ok();
        let spin = harness
            .query_all_by_label("ctx_min (floor of a fitted ctx)")
            .find(|n| n.accesskit_node().role() == egui::accesskit::Role::SpinButton)
            .expect("no ctx_min field");
        let node = spin.accesskit_node();
        (node.numeric_value(), node.is_disabled())
    };
    assert_eq!(field("{}"), (Some(32_768.0), false));
    assert_eq!(
        field(r#"{"ctx": 4096, "ctx_min": 98304}"#),
        (Some(98_304.0), true)
    );
}

/// #62 item 8: what the engine chose is shown, not a greyed placeholder ("chunk_tokens 512"
/// while the engine read 64, "gpu_layers 99" with no GPU).
#[test]
fn values_left_to_the_engine_show_the_value_in_force_and_where_it_came_from() {
    let config = config();
    let mut view = SettingsView {
        in_force: super::super::settings_in_force::InForce {
            chunk_tokens: 64,
            gpu_layers: Some((0, 30, "auto-no-gpu".into())),
            trained_ctx: 8192,
            solo_priority: false,
        },
        ..SettingsView::default()
    };
    let mut queue = CommandQueue::default();
    let mut harness = Harness::new_ui(|ui| settings_ui(ui, &mut view, &config, 0, &mut queue));
    harness.run_ok();
    for text in ["64 in force (measured)", "0 in force: no GPU found"] {
        assert!(harness.query_by_label(text).is_some(), "no {text:?}");
    }
    // the default ctx 0 with ctx_min 32768 beside an 8192-token model
    assert!(
        harness
            .query_by_label_contains("is above this model's trained context (8192)")
            .is_some()
    );
}

/// #62 item 8: a validation error stayed after Revert; `parallel` 2 with preemption on is
/// refused, and the view offers the way that works.
#[test]
fn revert_clears_the_error_and_parallel_two_with_preemption_on_offers_to_turn_it_off() {
    let config = config();
    let mut view = SettingsView {
        last_result: Some(Err("solo_priority with parallel 2".into())),
        in_force: super::super::settings_in_force::InForce {
            solo_priority: true,
            ..Default::default()
        },
        ..SettingsView::default()
    };
    let mut draft = Draft::of(&config);
    draft.settings.engine.slots = 2;
    view.draft = Some(draft);
    let mut queue = CommandQueue::default();
    let mut harness = Harness::new_ui(|ui| settings_ui(ui, &mut view, &config, 0, &mut queue));
    harness.run_ok();
    harness
        .get_by_label("Turn preemption off and apply")
        .click();
    harness.run_ok();
    drop(harness);
    assert!(
        matches!(
            &queue.pending[..],
            [Command::ApplyWithPreemptionOff(s)] if s.engine.slots >= 2
        ),
        "{:?}",
        queue.pending
    );

    let mut view = SettingsView {
        last_result: Some(Err("solo_priority with parallel 2".into())),
        ..SettingsView::default()
    };
    let mut draft = Draft::of(&config);
    draft.settings.engine.slots = 2;
    view.draft = Some(draft);
    let mut queue = CommandQueue::default();
    let mut harness = Harness::new_ui(|ui| settings_ui(ui, &mut view, &config, 0, &mut queue));
    harness.run_ok();
    assert!(harness.query_by_label_contains("not applied").is_some());
    harness.get_by_label("Revert").click();
    harness.run_ok();
    assert!(harness.query_by_label_contains("not applied").is_none());
}
