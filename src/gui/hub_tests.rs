//! The hub section under egui_kittest, on made-up listings (the listing and the download
//! themselves run against a fake hub in tests/it/models_hub.rs).

use super::*;
use crate::models::fit::{Fit, Verdict};
use crate::models::gguf_header::AttentionShape;
use crate::models::gguf_header::HeaderFacts;
use crate::models::hub::HubFile;
use egui_kittest::Harness;
use egui_kittest::kittest::{NodeT as _, Queryable as _};

const REPO: &str = "Qwen/Qwen2.5-Coder-7B-Instruct-GGUF";

fn model(name: &str, size_bytes: u64) -> HubModel {
    HubModel {
        name: name.into(),
        parts: vec![HubFile {
            path: name.into(),
            size_bytes,
            sha256: Some("ab".repeat(32)),
        }],
        projector: false,
    }
}

fn row(name: &str, size_bytes: u64, verdict: Verdict, words: &str) -> HubRow {
    HubRow {
        model: model(name, size_bytes),
        fit: Some(Fit {
            ctx_tokens: 32768,
            gpu_layers: 28,
            gpu_bytes: 0,
            ram_bytes: 0,
            kv_bytes: 0,
            verdict,
        }),
        fit_words: words.into(),
        downloaded: None,
    }
}

fn listing() -> HubListing {
    HubListing {
        repo: REPO.into(),
        facts: Ok(HeaderFacts {
            architecture: "qwen2".into(),
            name: None,
            quantization: Some("Q4_K_M".into()),
            layers: 28,
            context_length: 32768,
            shape: AttentionShape {
                layers: 28,
                kv_heads: 4,
                key_length: 128,
                value_length: 128,
            },
            vocab_size: 152_064,
            embedding_length: 3584,
            chat_template: Some("{{ tools }}".into()),
            // the list says Hermes: the view warns
            tool_calls: Some("Xml".into()),
            split_count: 1,
        }),
        rows: vec![
            row(
                "qwen2.5-coder-7b-instruct-q4_k_m.gguf",
                4_680_000_000,
                Verdict::OnGpu,
                "fits on the GPU up to 32768 tokens of context (estimate)",
            ),
            row(
                "qwen2.5-coder-7b-instruct-q8_0.gguf",
                8_100_000_000,
                Verdict::PartlyOnCpu { cpu_layers: 9 },
                "fits with 9 of 28 layers on the CPU up to 32768 tokens of context (estimate)",
            ),
        ],
    }
}

/// The section alone, wide enough for a row and its download line.
fn section<'a>(
    view: &'a mut HubView,
    model_path: &'a mut String,
    queue: &'a mut CommandQueue,
) -> Harness<'a> {
    Harness::builder()
        .with_size(egui::vec2(1400.0, 900.0))
        .build_ui(move |ui| hub_ui(ui, view, model_path, queue))
}

fn progress() -> DownloadProgress {
    DownloadProgress {
        file: "qwen2.5-coder-7b-instruct-q8_0.gguf".into(),
        part: 1,
        parts: 1,
        done_bytes: 2_025_000_000,
        total_bytes: 8_100_000_000,
        bytes_per_sec: Some(45e6),
        secs_left: Some(135.0),
        resumed_from_bytes: 0,
        checking: false,
    }
}

#[test]
fn a_listing_shows_each_files_fit_a_download_in_progress_and_cancel_and_use_work() {
    let mut view = HubView::default();
    view.listed(REPO.into(), Ok(listing()));
    let cancel = CancelFlag::default();
    let q8 = download_key(REPO, &listing().rows[1].model);
    view.downloads.insert(
        q8.clone(),
        Download::Running {
            progress: Some(progress()),
            cancel: cancel.clone(),
        },
    );
    let q4 = download_key(REPO, &listing().rows[0].model);
    view.finished(
        q4,
        Ok(PathBuf::from(
            "/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf",
        )),
    );
    let mut model_path = String::new();
    let mut queue = CommandQueue::default();
    let mut harness = section(&mut view, &mut model_path, &mut queue);
    harness.run_ok();
    for text in [
        "fits on the GPU up to 32768 tokens of context (estimate)",
        "fits with 9 of 28 layers on the CPU up to 32768 tokens of context (estimate)",
        "4.4\u{a0}GiB",
        "7.5\u{a0}GiB",
        "qwen2.5-coder-7b-instruct-q8_0.gguf: 2.02 GB of 8.10 GB, 25 %, 45.0 MB/s, 2 min 15 s left",
        "    the list says Hermes tool calls; its template says Xml",
    ] {
        assert!(harness.query_by_label(text).is_some(), "no {text:?}");
    }
    harness.get_by_label("Cancel").click();
    harness.run_ok();
    assert!(
        cancel.flag().load(std::sync::atomic::Ordering::Relaxed),
        "Cancel did not stop it"
    );
    harness.get_by_label("Use").click();
    harness.run_ok();
    drop(harness);
    assert_eq!(model_path, "/models/qwen2.5-coder-7b-instruct-q4_k_m.gguf");

    // the download ends cancelled: its row offers Download again, which resumes
    view.finished(
        q8.clone(),
        Err(HubFailure::from(
            "cancelled; 2025000000 bytes ... kept".to_owned(),
        )),
    );
    let mut harness = section(&mut view, &mut model_path, &mut queue);
    harness.run_ok();
    harness.get_by_label("Download").click();
    harness.run_ok();
    drop(harness);
    assert!(matches!(
        queue.pending.as_slice(),
        [Command::HubDownload { repo, model, .. }] if repo == REPO && model.name.ends_with("q8_0.gguf")
    ));
    assert!(matches!(
        view.downloads.get(&q8),
        Some(Download::Running { progress: None, .. })
    ));

    // reading the repository again keeps the running download's line and Cancel in sight
    // (regression: the listing was dropped while it was read again)
    let mut harness = section(&mut view, &mut model_path, &mut queue);
    harness.run_ok();
    harness.query_all_by_label("Check").nth(1).unwrap().click();
    harness.run_ok();
    assert!(
        harness
            .query_by_label(&format!("reading {REPO} from the hub..."))
            .is_some()
    );
    assert!(harness.query_by_label("starting...").is_some());
    assert!(harness.query_by_label("Cancel").is_some());
    drop(harness);
}

#[test]
fn a_repository_typed_or_from_the_list_is_listed_and_a_bad_one_cannot_be() {
    let mut view = HubView::default();
    let mut model_path = String::new();
    let mut queue = CommandQueue::default();
    let mut harness = section(&mut view, &mut model_path, &mut queue);
    harness.run_ok();
    assert!(
        harness
            .get_by_label("List files")
            .accesskit_node()
            .is_disabled()
    );
    // the second entry of the list: the 8 GB class's
    harness.query_all_by_label("Check").nth(1).unwrap().click();
    harness.run_ok();
    assert!(
        harness
            .query_by_label(&format!("reading {REPO} from the hub..."))
            .is_some()
    );
    drop(harness);
    assert_eq!(
        queue.pending,
        [Command::HubList {
            repo: REPO.into(),
            pattern: Some("q4_k_m".into())
        }]
    );
    view.repo_input = "bartowski/gemma-3-27b-it-GGUF".into();
    let mut harness = section(&mut view, &mut model_path, &mut queue);
    harness.run_ok();
    harness.get_by_label("List files").click();
    harness.run_ok();
    drop(harness);
    assert_eq!(
        queue.pending[1],
        Command::HubList {
            repo: "bartowski/gemma-3-27b-it-GGUF".into(),
            pattern: None
        }
    );
}

/// Regression (#62): offline, the listing showed reqwest's raw error with the URL twice.
#[test]
fn a_hub_out_of_reach_is_said_in_words_with_the_detail_folded_away_naming_the_url_once() {
    // a port nothing listens on: the connection is refused, as offline
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let client = crate::models::hub::HubClient::new(&format!("http://127.0.0.1:{port}"), None);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let error = rt
        .block_on(client.list_models(REPO, "main"))
        .expect_err("nothing listens there");
    let failure = HubFailure::of(&error);
    assert_eq!(failure.words, super::super::hub_commands::NO_CONNECTION);
    let detail = failure.detail.clone().unwrap();
    let url = format!("http://127.0.0.1:{port}/api/models/{REPO}");
    assert_eq!(detail.matches(&url).count(), 1, "{detail}");
    assert!(detail.contains("Connect"), "{detail}");
    assert_eq!(error.to_string().matches(&url).count(), 1, "{error}");

    let mut view = HubView::default();
    view.listed(REPO.into(), Err(failure));
    let mut model_path = String::new();
    let mut queue = CommandQueue::default();
    let mut harness = section(&mut view, &mut model_path, &mut queue);
    harness.run_ok();
    harness.get_by_label(super::super::hub_commands::NO_CONNECTION);
    assert!(
        harness.query_by_label_contains(&url).is_none(),
        "not folded"
    );
    harness.get_by_label("details").click();
    harness.run_ok();
    harness.get_by_label_contains(&url);
}
