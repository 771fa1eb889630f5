//! A local stand-in for the Hugging Face hub (none is reachable from CI), serving real files
//! with the hub's shapes: the tree listing in pages (`Link: <...>; rel="next"`), `resolve`
//! answering with a redirect to a "CDN" path, Range requests answered 206 with
//! `Content-Range`, 401 for a gated repository without its token. Faults on demand: a
//! connection that drops after some bytes, a listed SHA-256 that is wrong.

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde_json::json;
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

/// The token a gated repository accepts.
pub const TOKEN: &str = "hf_test_token";

/// Entries a listing page holds (the hub's are larger; small here so pages are followed).
const PAGE_ENTRIES: usize = 2;

#[derive(Clone)]
pub struct HubFileSpec {
    pub path: String,
    pub bytes: Arc<Vec<u8>>,
    /// Kept in LFS (listed with its SHA-256), as the hub keeps every GGUF.
    pub lfs: bool,
    /// A SHA-256 to list instead of the true one.
    pub wrong_sha256: Option<String>,
    /// A size to list instead of the true one (a file changed on the hub since).
    pub listed_len: Option<usize>,
}

impl HubFileSpec {
    pub fn lfs(path: &str, bytes: Arc<Vec<u8>>) -> Self {
        Self {
            path: path.into(),
            bytes,
            lfs: true,
            wrong_sha256: None,
            listed_len: None,
        }
    }
}

#[derive(Default)]
struct Hub {
    repos: HashMap<String, (bool, Vec<HubFileSpec>)>,
    /// `(path, bytes)`: the next download of `path` ends after `bytes`, the connection dropped.
    drops: Vec<(String, usize)>,
    /// `(path, bytes)`: the next download of `path` falls silent after `bytes`, the
    /// connection left open.
    stalls: Vec<(String, usize)>,
    /// Every file request: the path and the Range header sent.
    requests: Vec<(String, Option<String>)>,
    /// Bytes of file bodies sent.
    sent_bytes: usize,
}

#[derive(Clone)]
pub struct FakeHub {
    pub base: String,
    state: Arc<Mutex<Hub>>,
}

impl FakeHub {
    pub async fn start() -> Self {
        let state = Arc::new(Mutex::new(Hub::default()));
        let app = Router::new()
            .route("/api/models/{owner}/{name}/tree/{revision}", get(tree))
            .route("/{owner}/{name}/resolve/{revision}/{*path}", get(resolve))
            .route("/cdn/{owner}/{name}/{*path}", get(cdn))
            .with_state(Arc::clone(&state));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        Self { base, state }
    }

    pub fn repo(&self, repo: &str, gated: bool, files: Vec<HubFileSpec>) {
        let mut hub = self.state.lock().unwrap();
        hub.repos.insert(repo.into(), (gated, files));
    }

    pub fn drop_next_download_after(&self, path: &str, bytes: usize) {
        self.state.lock().unwrap().drops.push((path.into(), bytes));
    }

    pub fn stall_next_download_after(&self, path: &str, bytes: usize) {
        self.state.lock().unwrap().stalls.push((path.into(), bytes));
    }

    pub fn requests(&self) -> Vec<(String, Option<String>)> {
        self.state.lock().unwrap().requests.clone()
    }

    pub fn sent_bytes(&self) -> usize {
        self.state.lock().unwrap().sent_bytes
    }
}

enum Refused {
    NotFound,
    Gated,
}

impl IntoResponse for Refused {
    fn into_response(self) -> Response {
        match self {
            Refused::NotFound => not_found("RepoNotFound"),
            Refused::Gated => gated(),
        }
    }
}

impl Hub {
    /// A repository's files, or the hub's refusal (not found; gated without the token).
    fn files(
        &self,
        owner: &str,
        name: &str,
        headers: &HeaderMap,
    ) -> Result<&[HubFileSpec], Refused> {
        let Some((is_gated, files)) = self.repos.get(&format!("{owner}/{name}")) else {
            return Err(Refused::NotFound);
        };
        if *is_gated && !authorized(headers) {
            return Err(Refused::Gated);
        }
        Ok(files)
    }
}

type Shared = State<Arc<Mutex<Hub>>>;

fn authorized(headers: &HeaderMap) -> bool {
    headers.get(header::AUTHORIZATION)
        == Some(&HeaderValue::from_str(&format!("Bearer {TOKEN}")).unwrap())
}

/// The hub's refusal of a gated repository to a request without an accepted token.
fn gated() -> Response {
    (
        StatusCode::UNAUTHORIZED,
        [("x-error-code", "GatedRepo")],
        "Access to model is restricted",
    )
        .into_response()
}

fn not_found(code: &'static str) -> Response {
    (StatusCode::NOT_FOUND, [("x-error-code", code)], "not found").into_response()
}

fn sha256(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

async fn tree(
    State(state): Shared,
    Path((owner, name, _revision)): Path<(String, String, String)>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let hub = state.lock().unwrap();
    let files = match hub.files(&owner, &name, &headers) {
        Ok(files) => files,
        Err(refused) => return refused.into_response(),
    };
    // a folder entry first, as the hub lists folders of a recursive tree
    let mut entries = vec![json!({"type": "directory", "oid": "0", "size": 0, "path": "docs"})];
    for f in files {
        let mut entry = json!({
            "type": "file",
            "oid": "3c2fa2d1e5b0000000000000000000000000000",
            "size": f.bytes.len(),
            "path": f.path,
        });
        if f.lfs {
            let listed = f.listed_len.unwrap_or(f.bytes.len());
            entry["size"] = json!(listed);
            entry["lfs"] = json!({
                "oid": f.wrong_sha256.clone().unwrap_or_else(|| sha256(&f.bytes)),
                "size": listed,
                "pointerSize": 135,
            });
        }
        entries.push(entry);
    }
    let start: usize = query
        .get("cursor")
        .and_then(|c| c.parse().ok())
        .unwrap_or(0);
    let end = (start + PAGE_ENTRIES).min(entries.len());
    let mut response = axum::Json(entries[start..end].to_vec()).into_response();
    if end < entries.len() {
        let host = headers.get(header::HOST).unwrap().to_str().unwrap();
        let next = format!(
            "<http://{host}/api/models/{owner}/{name}/tree/main?recursive=true&cursor={end}>; rel=\"next\""
        );
        response
            .headers_mut()
            .insert(header::LINK, HeaderValue::from_str(&next).unwrap());
    }
    response
}

async fn resolve(
    State(state): Shared,
    Path((owner, name, _revision, path)): Path<(String, String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let hub = state.lock().unwrap();
    let files = match hub.files(&owner, &name, &headers) {
        Ok(files) => files,
        Err(refused) => return refused.into_response(),
    };
    if !files.iter().any(|f| f.path == path) {
        return not_found("EntryNotFound");
    }
    // the hub sends a file in LFS to its CDN with a signed URL
    (
        StatusCode::FOUND,
        [(
            header::LOCATION,
            format!("/cdn/{owner}/{name}/{path}?X-Amz-Signature=x"),
        )],
    )
        .into_response()
}

async fn cdn(
    State(state): Shared,
    Path((owner, name, path)): Path<(String, String, String)>,
    headers: HeaderMap,
) -> Response {
    let mut hub = state.lock().unwrap();
    let range = headers
        .get(header::RANGE)
        .map(|r| r.to_str().unwrap().to_owned());
    hub.requests.push((path.clone(), range.clone()));
    let Some(file) = hub
        .repos
        .get(&format!("{owner}/{name}"))
        .and_then(|(_, files)| files.iter().find(|f| f.path == path))
        .cloned()
    else {
        return not_found("EntryNotFound");
    };
    let len = file.bytes.len();
    let (status, start, end) = match range.as_deref().and_then(|r| r.strip_prefix("bytes=")) {
        Some(spec) => {
            let (a, b) = spec.split_once('-').unwrap();
            let start: usize = a.parse().unwrap();
            let end = if b.is_empty() {
                len
            } else {
                (b.parse::<usize>().unwrap() + 1).min(len)
            };
            if start >= len {
                return (
                    StatusCode::RANGE_NOT_SATISFIABLE,
                    [(header::CONTENT_RANGE, format!("bytes */{len}"))],
                )
                    .into_response();
            }
            (StatusCode::PARTIAL_CONTENT, start, end)
        }
        None => (StatusCode::OK, 0, len),
    };
    let drop_after = hub
        .drops
        .iter()
        .position(|(p, _)| *p == path)
        .map(|i| hub.drops.remove(i).1);
    let stall_after = hub
        .stalls
        .iter()
        .position(|(p, _)| *p == path)
        .map(|i| hub.stalls.remove(i).1);
    let body_len = end - start;
    let sent = drop_after
        .or(stall_after)
        .map_or(body_len, |n| n.min(body_len));
    hub.sent_bytes += sent;
    let bytes = Bytes::copy_from_slice(&file.bytes[start..start + sent]);
    let body = if stall_after.is_some() {
        // the bytes, then silence: the connection stays open
        let first = futures_util::stream::iter([Ok::<_, std::io::Error>(bytes)]);
        Body::from_stream(futures_util::StreamExt::chain(
            first,
            futures_util::stream::pending(),
        ))
    } else if drop_after.is_some() {
        // the bytes, then an error: hyper cuts the connection short of Content-Length
        let chunks: Vec<Result<Bytes, std::io::Error>> = vec![
            Ok(bytes),
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionReset,
                "dropped",
            )),
        ];
        Body::from_stream(futures_util::stream::iter(chunks))
    } else {
        Body::from(bytes)
    };
    let mut response = Response::builder()
        .status(status)
        .header(header::CONTENT_LENGTH, body_len)
        .header(header::ACCEPT_RANGES, "bytes");
    if status == StatusCode::PARTIAL_CONTENT {
        response = response.header(
            header::CONTENT_RANGE,
            format!("bytes {start}-{}/{len}", end - 1),
        );
    }
    response.body(body).unwrap()
}
