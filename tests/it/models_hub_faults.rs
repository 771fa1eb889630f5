//! The hub client's faults and split models against the local fake hub: every part of a
//! split model, a file changed on the hub since its listing, a damaged file on disk, a split
//! model half on disk, a silent connection cancelled. The regressions a review found are
//! named so.

use crate::fake_hub::{FakeHub, HubFileSpec};
use crate::models_hub::{FILE, REPO, cpu, hub, model_bytes, pull_first, sha256_of};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use strata_desk::models::hub::{HubClient, HubError, download_model, repo_dir};

/// A hub with `someone/split`: the test model's bytes cut in two parts under `folder` (part 2
/// listed first). The download checks each part; nothing loads them.
async fn split_hub(folder: &str) -> (FakeHub, Arc<Vec<u8>>) {
    let hub = FakeHub::start().await;
    let bytes = model_bytes();
    let half = bytes.len() / 2;
    hub.repo(
        "someone/split",
        false,
        vec![
            HubFileSpec::lfs(
                &format!("{folder}m-00002-of-00002.gguf"),
                Arc::new(bytes[half..].to_vec()),
            ),
            HubFileSpec::lfs(
                &format!("{folder}m-00001-of-00002.gguf"),
                Arc::new(bytes[..half].to_vec()),
            ),
        ],
    );
    (hub, bytes)
}

#[tokio::test]
async fn a_split_model_downloads_every_part_checked_and_names_the_first() {
    let (hub, bytes) = split_hub("Q4/").await;
    let client = HubClient::new(&hub.base, None);
    let models = client.list_models("someone/split", "main").await.unwrap();
    assert_eq!(models.len(), 1, "{models:?}");
    assert_eq!(models[0].size_bytes(), bytes.len() as u64);
    let dir = tempfile::tempdir().unwrap();
    let mut parts_seen = Vec::new();
    let path = download_model(
        &client,
        "someone/split",
        "main",
        &models[0],
        dir.path(),
        &mut |p| {
            if parts_seen.last() != Some(&p.part) {
                parts_seen.push(p.part);
            }
            assert_eq!(p.total_bytes, bytes.len() as u64);
        },
        &AtomicBool::new(false),
    )
    .await
    .unwrap();
    assert_eq!(path, dir.path().join("m-00001-of-00002.gguf"));
    assert_eq!(parts_seen, [1, 2]);
    let mut joined = std::fs::read(&path).unwrap();
    joined.extend(std::fs::read(dir.path().join("m-00002-of-00002.gguf")).unwrap());
    assert!(joined == *bytes, "the parts are not the file's halves");
}

/// Regression (review): a file changed on the hub after it was listed looped for ever (a
/// shorter file: resume, 416, start again) or was fetched six times (a longer one).
#[tokio::test]
async fn a_file_changed_on_the_hub_since_its_listing_ends_the_download_with_list_again() {
    let hub = FakeHub::start().await;
    let bytes = Arc::new(b"GGUF, and the weights of a small model".repeat(4096));
    hub.repo(
        "someone/shrunk",
        false,
        vec![HubFileSpec {
            listed_len: Some(bytes.len() + 1000),
            ..HubFileSpec::lfs("shrunk.gguf", Arc::clone(&bytes))
        }],
    );
    hub.repo(
        "someone/grown",
        false,
        vec![HubFileSpec {
            listed_len: Some(bytes.len() - 1000),
            ..HubFileSpec::lfs("grown.gguf", Arc::clone(&bytes))
        }],
    );
    let client = HubClient::new(&hub.base, None);
    for repo in ["someone/shrunk", "someone/grown"] {
        let dir = tempfile::tempdir().unwrap();
        let err = tokio::time::timeout(
            std::time::Duration::from_secs(30),
            pull_first(&client, repo, dir.path()),
        )
        .await
        .unwrap_or_else(|_| panic!("{repo}: the download never ended"))
        .unwrap_err();
        assert!(matches!(err, HubError::Size { .. }), "{repo}: {err}");
        assert!(err.to_string().contains("changed on the hub"), "{err}");
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0, "{repo}");
    }
    // the shrunk file was fetched once and asked for past its end once; the grown one once
    assert_eq!(hub.requests().len(), 3, "{:?}", hub.requests());
}

/// Regression (review): a damaged file at the model's path was moved aside as a whole part,
/// hashed again and failed; it is downloaded anew.
#[tokio::test]
async fn a_damaged_file_at_the_models_path_is_downloaded_anew() {
    let hub = hub().await;
    let client = HubClient::new(&hub.base, None);
    let dir = tempfile::tempdir().unwrap();
    let mut damaged = model_bytes().to_vec();
    damaged[4096] ^= 0xff;
    std::fs::write(dir.path().join(FILE), &damaged).unwrap();
    let path = pull_first(&client, REPO, dir.path()).await.unwrap();
    assert_eq!(sha256_of(&path), strata_desk::models::DEFAULT_MODEL_SHA256);
}

/// Regression (review): a split model with only its first part on disk showed Use.
#[tokio::test]
async fn a_split_model_is_downloaded_only_when_every_part_is_there() {
    use strata_desk::models::hub_rows::list_with_fit;
    let (hub, bytes) = split_hub("").await;
    let half = bytes.len() / 2;
    let client = HubClient::new(&hub.base, None);
    let models_dir = tempfile::tempdir().unwrap();
    let repo_folder = repo_dir(models_dir.path(), "someone/split");
    std::fs::create_dir_all(&repo_folder).unwrap();
    std::fs::write(repo_folder.join("m-00001-of-00002.gguf"), &bytes[..half]).unwrap();
    let cpu = cpu();
    let listing = list_with_fit(
        &client,
        "someone/split",
        None,
        &cpu,
        4096,
        models_dir.path(),
    )
    .await
    .unwrap();
    assert_eq!(listing.rows[0].downloaded, None);
    std::fs::write(repo_folder.join("m-00002-of-00002.gguf"), &bytes[half..]).unwrap();
    let listing = list_with_fit(
        &client,
        "someone/split",
        None,
        &cpu,
        4096,
        models_dir.path(),
    )
    .await
    .unwrap();
    assert_eq!(
        listing.rows[0].downloaded,
        Some(repo_folder.join("m-00001-of-00002.gguf"))
    );
}

/// Regression (review): Cancel was read only when a chunk arrived, so a silent connection
/// could not be cancelled.
#[tokio::test]
async fn cancel_stops_a_download_whose_connection_fell_silent() {
    let hub = hub().await;
    hub.stall_next_download_after(FILE, 1 << 20);
    let client = HubClient::new(&hub.base, None);
    let model = client.list_models(REPO, "main").await.unwrap().remove(0);
    let dir = tempfile::tempdir().unwrap();
    let cancel = Arc::new(AtomicBool::new(false));
    let later = Arc::clone(&cancel);
    tokio::spawn(async move {
        tokio::time::sleep(std::time::Duration::from_secs(1)).await;
        later.store(true, Ordering::Relaxed);
    });
    let started = std::time::Instant::now();
    let err = download_model(
        &client,
        REPO,
        "main",
        &model,
        dir.path(),
        &mut |_| {},
        &cancel,
    )
    .await
    .unwrap_err();
    assert!(
        matches!(err, HubError::Cancelled { done_bytes, .. } if done_bytes == 1 << 20),
        "{err}"
    );
    // well before the client's 30 s read timeout
    assert!(
        started.elapsed().as_secs_f64() < 5.0,
        "{:?}",
        started.elapsed()
    );
}
