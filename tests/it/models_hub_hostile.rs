//! The hub client against a hostile hub (issue #61 items 3, 4, 5 and 7): file names that
//! Windows reads as paths out of the models folder, a repository id that is a path, a next
//! page on another host, a header whose counts overflow. Each is refused by name, and nothing
//! is written outside the models folder.

use crate::hostile_hub::{TREE, gguf, lfs_entry, serve, walk, within};
use crate::support::worker_exe;
use axum::Router;
use axum::http::{HeaderMap, Uri, header};
use axum::response::IntoResponse;
use axum::routing::get;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};
use strata_desk::models::hub::{HubClient, download_model};

/// Issue #61 item 3: file names are split on `/` only, so `..\..\..\x.gguf` was written
/// verbatim (on Windows, outside the models folder). Names Windows reads as a path out of the
/// folder, a drive, a device or a name it changes are refused by name, on every platform, and
/// nothing is written but the one good file, in its folder.
#[tokio::test]
async fn file_names_windows_reads_as_paths_devices_or_other_names_are_refused_by_name() {
    let bytes: &'static [u8] = b"GGUF, and no weights";
    let hostile = [
        r"..\..\..\x.gguf",
        r"C:\Users\Public\x.gguf",
        r"sub\..\..\x.gguf",
        "CON.gguf",
        "q4/nul.Q4_K_M.gguf",
        "com1.gguf",
        "a:b.gguf",
        "q4./x.gguf",
        "q4 /x.gguf",
        "what?.gguf",
        "tab\t.gguf",
    ];
    let listing: Vec<serde_json::Value> = hostile
        .iter()
        .chain(&["ok.gguf"])
        .map(|p| lfs_entry(p, bytes))
        .collect();
    let app = Router::new()
        .route(
            TREE,
            get(move || {
                let listing = listing.clone();
                async move { axum::Json(listing) }
            }),
        )
        // every file (whatever the URL the client made of its name) is the same bytes
        .fallback(move || async move { bytes });
    let base = serve(app).await;
    let client = HubClient::new(&base, None);
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("models").join("someone").join("hostile");
    let models = client.list_models("someone/hostile", "main").await.unwrap();
    let never = AtomicBool::new(false);
    for model in &models {
        let result = download_model(
            &client,
            "someone/hostile",
            "main",
            model,
            &dir,
            &mut |_| {},
            &never,
        )
        .await;
        if model.name == "ok.gguf" {
            assert_eq!(result.unwrap(), dir.join("ok.gguf"));
            continue;
        }
        let err = result
            .map(|path| format!("{} was written to {}", model.name, path.display()))
            .unwrap_err();
        let words = err.to_string();
        assert!(
            words.starts_with(&format!("the hub lists a file '{}'", model.name)),
            "{words}"
        );
    }
    assert_eq!(models.len(), hostile.len() + 1, "{models:?}");
    let written = walk(root.path());
    assert_eq!(written, [dir.join("ok.gguf")]);
}

/// A hub that answers every listing with one file, `x.gguf`, and every other path with its
/// bytes; the paths it was asked for.
async fn any_path_hub() -> (String, Arc<Mutex<Vec<String>>>) {
    let bytes: &'static [u8] = b"GGUF, and no weights";
    let asked = Arc::new(Mutex::new(Vec::new()));
    let log = Arc::clone(&asked);
    let app = Router::new().fallback(move |uri: Uri| {
        let log = Arc::clone(&log);
        async move {
            log.lock().unwrap().push(uri.to_string());
            if uri.path().ends_with("/tree/main") {
                axum::Json(vec![lfs_entry("x.gguf", bytes)]).into_response()
            } else {
                bytes.into_response()
            }
        }
    });
    (serve(app).await, asked)
}

/// Issue #61 item 4: `pull ../..:FILE` wrote to `~/.local/share/`, outside the models folder.
/// A repository id that is not `owner/name` as the hub defines it is refused before anything
/// is asked of the hub or written.
#[tokio::test]
async fn pull_refuses_a_repository_id_that_is_not_owner_slash_name_and_writes_nothing() {
    let (base, asked) = any_path_hub().await;
    for repo in ["../..", "someone/..", "./x", "-x/y", "a/b.git", "a--b/c"] {
        let home = tempfile::tempdir().unwrap();
        let out = within(
            60,
            "the pull",
            tokio::process::Command::new(worker_exe())
                .args(["pull", "--", &format!("{repo}:x.gguf")])
                .env("HF_ENDPOINT", &base)
                .env("HOME", home.path())
                .env("XDG_DATA_HOME", home.path().join("data"))
                .env_remove("HF_TOKEN")
                .kill_on_drop(true)
                .output(),
        )
        .await
        .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{repo}: {stderr}");
        assert!(
            stderr.contains(&format!("'{repo}' is not a repository id")),
            "{repo}: {stderr}"
        );
        let left: Vec<_> = walk(home.path());
        assert!(left.is_empty(), "{repo}: {left:?}");
        assert!(asked.lock().unwrap().is_empty(), "{repo}: {asked:?}");
    }
}

/// Issue #61 item 5: `HF_TOKEN` went to whatever host a listing's next page named. It goes
/// to the endpoint's own host only: a next page on another host is asked for without it.
#[tokio::test]
async fn hf_token_goes_only_to_the_endpoints_own_host() {
    // (which host was asked, the Authorization it got)
    type Asked = Vec<(String, Option<String>)>;
    let seen: Arc<Mutex<Asked>> = Arc::default();
    let log = Arc::clone(&seen);
    let record = move |who: &'static str, headers: &HeaderMap| {
        let auth = headers
            .get(header::AUTHORIZATION)
            .map(|v| v.to_str().unwrap().to_owned());
        log.lock().unwrap().push((who.to_owned(), auth));
    };
    let on_other = record.clone();
    let other = serve(Router::new().route(
        TREE,
        get(move |headers: HeaderMap| {
            on_other("other host", &headers);
            async { axum::Json(Vec::<serde_json::Value>::new()) }
        }),
    ))
    .await;
    let next = format!("<{other}/api/models/someone/paged/tree/main?cursor=2>; rel=\"next\"");
    let endpoint = serve(Router::new().route(
        TREE,
        get(move |headers: HeaderMap| {
            record("endpoint", &headers);
            let next = next.clone();
            async move {
                (
                    [(header::LINK, next)],
                    axum::Json(vec![lfs_entry("a.gguf", b"GGUF")]),
                )
            }
        }),
    ))
    .await;
    let client = HubClient::new(&endpoint, Some("hf_secret".into()));
    let files = within(
        20,
        "the listing",
        client.list_files("someone/paged", "main"),
    )
    .await
    .unwrap();
    assert_eq!(files.len(), 1);
    assert_eq!(
        *seen.lock().unwrap(),
        [
            ("endpoint".to_owned(), Some("Bearer hf_secret".to_owned())),
            ("other host".to_owned(), None),
        ]
    );
}

/// Issue #61 item 7: absurd counts in a header overflowed the facts shown (the KV cache's
/// size wrapped to 0 bytes a token, so the fit said "fits"). The header is refused, naming the
/// field, and the row's fit is unknown.
#[tokio::test]
async fn a_header_whose_counts_overflow_is_refused_naming_the_field_and_the_fit_is_unknown() {
    use strata_desk::models::fit::{GpuMemory, Machine};
    use strata_desk::models::hub_rows::list_with_fit;
    let u32_value = |v: u32| v.to_le_bytes().to_vec();
    let mut name = 11u64.to_le_bytes().to_vec();
    name.extend(b"hostile-gpt");
    let mut arch = 5u64.to_le_bytes().to_vec();
    arch.extend(b"llama");
    // 2^22 layers × 2^21 KV heads × (2^20 + 2^20) values × 2 bytes: 2^65, 0 once wrapped
    let header: &'static [u8] = Box::leak(
        gguf(&[
            ("general.architecture", 8, arch),
            ("general.name", 8, name),
            ("llama.block_count", 4, u32_value(1 << 22)),
            ("llama.context_length", 4, u32_value(8192)),
            ("llama.embedding_length", 4, u32_value(4096)),
            ("llama.attention.head_count", 4, u32_value(1 << 21)),
            ("llama.attention.head_count_kv", 4, u32_value(1 << 21)),
            ("llama.attention.key_length", 4, u32_value(1 << 20)),
            ("llama.attention.value_length", 4, u32_value(1 << 20)),
        ])
        .into_boxed_slice(),
    );
    let app = Router::new()
        .route(
            TREE,
            get(move || async move { axum::Json(vec![lfs_entry("huge.gguf", header)]) }),
        )
        .fallback(move || async move { header });
    let base = serve(app).await;
    let client = HubClient::new(&base, None);
    let card = Machine {
        gpu: Some(GpuMemory {
            name: "24 GiB card".into(),
            total_bytes: 24 << 30,
            free_bytes: 23 << 30,
            limit_bytes: 0,
        }),
        ram_available_bytes: 32 << 30,
    };
    let models_dir = tempfile::tempdir().unwrap();
    let listing = list_with_fit(
        &client,
        "someone/huge",
        None,
        &card,
        4096,
        models_dir.path(),
    )
    .await
    .unwrap();
    let refused = listing.facts.unwrap_err();
    assert!(
        refused.starts_with("its header's llama.attention.key_length + value_length (2097152)"),
        "{refused}"
    );
    assert!(refused.contains("overflow"), "{refused}");
    assert_eq!(listing.rows[0].fit, None);
    assert_eq!(
        listing.rows[0].fit_words,
        "fit unknown: its header could not be read"
    );
}
