//! A hostile stand-in for the hub: a loopback server each test builds from its own routes,
//! to serve the answers a hub on the network could send (issue #61), and what those tests
//! share.

use axum::Router;
use axum::body::{Body, Bytes};
use futures_util::StreamExt;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::time::Duration;

pub(crate) const TREE: &str = "/api/models/{owner}/{name}/tree/{revision}";
pub(crate) const RESOLVE: &str = "/{owner}/{name}/resolve/{revision}/{*path}";

/// Serves `app` on a loopback port; its base URL.
pub(crate) async fn serve(app: Router) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    base
}

/// Waits at most `secs` for `what`: a hang is a failure, not a stuck test.
pub(crate) async fn within<T>(secs: u64, what: &str, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .unwrap_or_else(|_| panic!("{what} never ended ({secs} s)"))
}

pub(crate) fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

pub(crate) fn lfs_entry(path: &str, bytes: &[u8]) -> serde_json::Value {
    json!({
        "type": "file",
        "oid": "0",
        "size": bytes.len(),
        "path": path,
        "lfs": {"oid": sha256(bytes), "size": bytes.len(), "pointerSize": 135},
    })
}

/// A body that sends `first`, then one byte of JSON whitespace every `every`, for ever.
pub(crate) fn trickle(first: &'static [u8], every: Duration) -> Body {
    let rest = futures_util::stream::unfold((), move |()| async move {
        tokio::time::sleep(every).await;
        Some((Ok::<_, std::io::Error>(Bytes::from_static(b" ")), ()))
    });
    Body::from_stream(
        futures_util::stream::iter([Ok::<_, std::io::Error>(Bytes::from_static(first))])
            .chain(rest),
    )
}

/// Every file under `root`.
pub(crate) fn walk(root: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let mut folders = vec![root.to_path_buf()];
    while let Some(folder) = folders.pop() {
        let Ok(entries) = std::fs::read_dir(folder) else {
            continue;
        };
        for entry in entries {
            let path = entry.unwrap().path();
            if path.is_dir() {
                folders.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}

/// A GGUF header with these `(key, type, value)` pairs (gguf.md's layout).
pub(crate) fn gguf(pairs: &[(&str, u32, Vec<u8>)]) -> Vec<u8> {
    let mut out = b"GGUF".to_vec();
    out.extend(3u32.to_le_bytes());
    out.extend(0u64.to_le_bytes());
    out.extend((pairs.len() as u64).to_le_bytes());
    for (key, kind, value) in pairs {
        out.extend((key.len() as u64).to_le_bytes());
        out.extend(key.as_bytes());
        out.extend(kind.to_le_bytes());
        out.extend(value);
    }
    out
}
