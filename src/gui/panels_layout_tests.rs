//! The engine line at the window's default width with a real model's figures (regression: the
//! line did not wrap, and a real model's file, sizes and context pushed the Restart button
//! past the window's edge, where no click reaches it).

use super::*;
use crate::service::SchedulerSettings;
use egui_kittest::Harness;
use egui_kittest::kittest::Queryable as _;

/// What a 7B coder on a GPU shows, at the window's default width (1100).
fn real_model() -> ServiceSnapshot {
    let mut s = ServiceSnapshot::starting(SchedulerSettings::default(), 1, false);
    let e = &mut s.engine;
    e.status = EngineStatus::Ready;
    e.model = "Qwen2.5 Coder 7B Instruct".into();
    e.model_file = "qwen2.5-coder-7b-instruct-q4_k_m.gguf".into();
    e.model_file_bytes = 4_683_073_504;
    e.quantization = "Q4_K_M".into();
    e.model_params = 7_615_616_512;
    e.weights_bytes = 4_683_000_000;
    e.kv_pool_bytes = 1_879_048_192;
    e.worker_rss_bytes = Some(6_800_000_000);
    e.context_tokens = 32_768;
    e.context_chosen_by = "trained".into();
    e.kv_cells_total = 32_768;
    e.device = Some(DeviceFacts {
        name: "NVIDIA GeForce RTX 4070".into(),
        backend: "Vulkan".into(),
        id: "Vulkan0".into(),
        gpu_layers: 28,
        model_layers: 28,
        chosen_by: "auto".into(),
        picked_by: "device auto: the only GPU".into(),
        vram_total_bytes: 12 << 30,
        vram_free_bytes: 3 << 30,
        fit_warning: "the context of 32768 tokens does not fit in the free memory of NVIDIA \
                      GeForce RTX 4070 beside the model: lower ctx_min or ctx, or use a \
                      smaller model"
            .into(),
        cpu_variant: "zen4".into(),
        cpu_variants: [
            "alderlake",
            "cannonlake",
            "cascadelake",
            "cooperlake",
            "haswell",
            "icelake",
            "ivybridge",
            "piledriver",
            "sandybridge",
            "sapphirerapids",
            "skylakex",
            "sse42",
            "x64",
            "zen4",
        ]
        .map(String::from)
        .to_vec(),
        ..DeviceFacts::default()
    });
    s
}

const WIDTH: f32 = 1100.0;

/// Where the widget whose label contains `label` ends, the engine panel drawn with
/// [`real_model`] in a window of the default width.
fn right_edge_of(label: &str) -> f32 {
    let s = real_model();
    let (mut confirm, mut queue) = (None, CommandQueue::default());
    let mut harness = Harness::builder()
        .with_size(egui::vec2(WIDTH, 300.0))
        .build_ui(|ui| engine_ui(ui, &s, &mut confirm, &mut queue));
    harness.run_ok();
    harness.get_by_label_contains(label).rect().right()
}

#[test]
fn the_restart_button_stays_in_the_window_with_a_real_models_figures() {
    let button = right_edge_of("Restart engine");
    assert!(
        button <= WIDTH,
        "the Restart button ends at x {button:.0}, past the window's {WIDTH}"
    );
    let context = right_edge_of("context 32768 tokens (trained)");
    assert!(context <= WIDTH, "{context}");
}

/// The device line names llama.cpp's CPU code the engine runs (the variant picked for this
/// CPU, of those the program carries), within the window.
#[test]
fn the_device_line_names_the_cpu_variant_within_the_window() {
    let line = right_edge_of("CPU code zen4 (of 14 variants)");
    assert!(line <= WIDTH, "{line}");
}

/// The engine panel's labels, drawn at the default width.
fn engine_labels(s: &ServiceSnapshot) -> Vec<String> {
    use egui_kittest::kittest::NodeT as _;
    let (mut confirm, mut queue) = (None, CommandQueue::default());
    let mut harness = Harness::builder()
        .with_size(egui::vec2(WIDTH, 300.0))
        .build_ui(|ui| engine_ui(ui, s, &mut confirm, &mut queue));
    harness.run_ok();
    harness
        .query_all_by_role(egui::accesskit::Role::Label)
        .map(|n| {
            let node = n.accesskit_node();
            node.label().or_else(|| node.value()).unwrap_or_default()
        })
        .collect()
}

#[test]
fn over_an_upstream_its_own_figures_show_under_the_engine_labelled_as_its_own() {
    let mut s = real_model();
    assert!(!engine_labels(&s).join("\n").contains("Upstream"));
    s.upstream = Some(crate::service::UpstreamView {
        url: "http://10.0.0.5:8080".into(),
        kind: crate::service::UpstreamKind::LlamaServer,
        slots: Some(vec![
            crate::service::UpstreamSlot {
                id: 0,
                busy: true,
                ctx_tokens: 8192,
            };
            4
        ]),
        load: Default::default(),
        metrics: false,
        error: None,
    });
    let labels = engine_labels(&s).join("\n");
    assert!(labels.contains("Upstream (its own figures)"), "{labels}");
    assert!(
        labels.contains("llama-server at http://10.0.0.5:8080: 4 of 4 slots busy"),
        "{labels}"
    );
}

#[test]
fn a_machine_without_a_gpu_is_said_to_have_none_once() {
    let mut s = real_model();
    let device = s.engine.device.as_mut().unwrap();
    device.gpu_layers = 0;
    device.chosen_by = "auto-no-gpu".into();
    device.picked_by = "device auto: no GPU found".into();
    device.fit_warning.clear();
    let said: Vec<String> = engine_labels(&s)
        .into_iter()
        .filter(|l| l.contains("no GPU found"))
        .collect();
    assert_eq!(said.len(), 1, "{said:?}");
}

#[test]
fn every_size_on_the_engine_lines_is_in_binary_units_kept_to_its_number() {
    let labels = engine_labels(&real_model()).join("\n");
    for size in [
        "4.4\u{a0}GiB",
        "1.8\u{a0}GiB",
        "3.0\u{a0}GiB",
        "12.0\u{a0}GiB",
    ] {
        assert!(labels.contains(size), "no {size:?} in {labels}");
    }
    for loose in [" MB", " GB", " MiB", " GiB"] {
        assert!(
            !labels.contains(loose),
            "{loose:?} apart from its number in {labels}"
        );
    }
}
