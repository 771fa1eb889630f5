//! A client of the Hugging Face model hub, the file layout LM Studio, llama.cpp's `-hf` and
//! Ollama's `hf.co/` all use: list a repository's GGUF models with their sizes and SHA-256
//! (`/api/models/{repo}/tree/{revision}`), read a remote GGUF's header through HTTP Range
//! requests without its weights, and download a file resumably, checked by its SHA-256
//! (`download`). `HF_ENDPOINT` (a mirror) and `HF_TOKEN` (gated models) are read from the
//! environment, and so are proxies (reqwest's default).
//!
//! The hub is a server on the network and is read as one that may be hostile: every answer
//! read into memory is bounded in size and time (`bounds`), a repository id and each listed
//! file's path are checked before they become a path here (`names`), and the token goes only
//! to the endpoint's own origin (`token`).

mod bounds;
mod download;
mod files;
mod names;
mod token;

pub use bounds::{
    HEADER_BYTES_MAX, HEADER_DEADLINE_SECS, HubBounds, LISTING_BYTES_MAX, LISTING_DEADLINE_SECS,
    LISTING_PAGES_MAX,
};
pub use download::{DownloadProgress, download_model};
pub use files::{HubFile, HubModel, gguf_models, split_part};
pub use names::{check_repo_id, local_file_name};

use super::gguf_header::{HeaderError, HeaderFacts, parse_prefix};
use bounds::{Hit, Stopped, read_body};
use files::TreeEntry;
use reqwest::header::{AUTHORIZATION, HeaderMap, LINK, RANGE};
use reqwest::{StatusCode, Url};

/// The hub when `HF_ENDPOINT` does not name a mirror.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// A header prefix is fetched at these sizes while it ends inside the header (a large
/// vocabulary's token list is several MB), then at the bound, [`HEADER_BYTES_MAX`].
const HEADER_PREFIX_BYTES: [u64; 3] = [2 << 20, 8 << 20, 32 << 20];

/// What went wrong, in words that say what to do.
#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error("{what} was not found on {endpoint}")]
    NotFound { what: String, endpoint: String },
    #[error(
        "{repo} is gated or private: {endpoint} answered {status}; set HF_TOKEN to a token of an account that has accepted its terms"
    )]
    Gated {
        repo: String,
        endpoint: String,
        status: u16,
    },
    #[error(
        "{repo} is gated or private: {endpoint} answered {status}; HF_TOKEN is set but is sent only over https, or over plain http to this machine, so not to {endpoint}"
    )]
    TokenWithheld {
        repo: String,
        endpoint: String,
        status: u16,
    },
    #[error("{url} answered {status}")]
    Status { url: String, status: u16 },
    /// A bound of `bounds` stopped the reading of an answer.
    #[error("{what} {bound}: stopped reading")]
    Bound { what: String, bound: String },
    #[error("{0}")]
    RepoId(String),
    #[error(
        "the hub lists a file '{file}' whose path {why}: not downloaded (a file is kept only under a name every platform keeps inside the models folder)"
    )]
    UnsafeName { file: String, why: String },
    /// `detail` does not repeat `url` (reqwest's own words name it).
    #[error(
        "No connection to the hub; check the network or proxy, or set HF_ENDPOINT ({url}: {detail})"
    )]
    Network { url: String, detail: String },
    #[error("{0}")]
    Header(#[from] HeaderError),
    #[error(
        "the disk is full: {path} needs {needed_bytes} more bytes ({needed_gb:.2} GB); free some space and run it again, the part downloaded so far is kept",
        needed_gb = *needed_bytes as f64 / 1e9
    )]
    DiskFull { path: String, needed_bytes: u64 },
    #[error(
        "{file} has SHA-256 {actual}, but the hub lists {expected}: the file was removed; run it again to download it anew"
    )]
    Checksum {
        file: String,
        expected: String,
        actual: String,
    },
    #[error(
        "{file} changed on the hub since it was listed (it has at least {got} bytes where the listing said {expected}): list it again"
    )]
    Size {
        file: String,
        expected: u64,
        got: u64,
    },
    #[error("cancelled; {done_bytes} bytes of {file} are kept and the next download resumes there")]
    Cancelled { file: String, done_bytes: u64 },
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

/// The hub's address and the token to present; cheap to clone.
#[derive(Debug, Clone)]
pub struct HubClient {
    endpoint: String,
    token: Option<String>,
    http: reqwest::Client,
    bounds: HubBounds,
    /// A token is set but the endpoint takes none (plain http beyond this machine).
    token_withheld: bool,
}

impl HubClient {
    pub fn new(endpoint: &str, token: Option<String>) -> Self {
        let http = reqwest::Client::builder()
            .user_agent(concat!("strata-desk/", env!("CARGO_PKG_VERSION")))
            .redirect(token::redirect_policy())
            // no total timeout (a download of many GB takes as long as it takes); a connection
            // silent for 30 s is dropped and resumed
            .connect_timeout(std::time::Duration::from_secs(20))
            .read_timeout(std::time::Duration::from_secs(30))
            .build()
            .expect("an HTTP client with rustls builds");
        let endpoint = endpoint.trim_end_matches('/').to_owned();
        let token = token.filter(|t| !t.is_empty());
        let token_withheld = token.is_some()
            && !Url::parse(&endpoint).is_ok_and(|e| token::endpoint_takes_token(&e));
        if token_withheld {
            tracing::warn!(
                %endpoint,
                "HF_TOKEN is not sent to this endpoint: only over https, or plain http to this machine"
            );
        }
        Self {
            endpoint,
            token,
            http,
            bounds: HubBounds::default(),
            token_withheld,
        }
    }

    /// The same client reading under other bounds (tests make them small).
    pub fn with_bounds(mut self, bounds: HubBounds) -> Self {
        self.bounds = bounds;
        self
    }

    /// The hub `HF_ENDPOINT` names (or huggingface.co), with `HF_TOKEN` if set.
    pub fn from_env() -> Self {
        let endpoint = std::env::var("HF_ENDPOINT")
            .ok()
            .filter(|e| !e.is_empty())
            .unwrap_or_else(|| DEFAULT_ENDPOINT.to_owned());
        Self::new(&endpoint, std::env::var("HF_TOKEN").ok())
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// Where a file of `repo` at `revision` is downloaded from (the hub redirects to its CDN).
    pub fn file_url(&self, repo: &str, revision: &str, path: &str) -> String {
        format!("{}/{repo}/resolve/{revision}/{path}", self.endpoint)
    }

    /// A GET of `url`, with the token only where it may go (`token`): the endpoint's own
    /// origin, over https or plain http on loopback.
    fn get(&self, url: &str) -> reqwest::RequestBuilder {
        let request = self.http.get(url);
        match &self.token {
            // reqwest drops it on a redirect to another host (the CDN's signed URL)
            Some(token) if token::token_goes_to(&self.endpoint, url) => {
                request.header(AUTHORIZATION, format!("Bearer {token}"))
            }
            _ => request,
        }
    }

    /// Sends a request, turning the hub's refusals into errors that say what to do.
    async fn send(
        &self,
        request: reqwest::RequestBuilder,
        url: &str,
        repo: &str,
        what: impl FnOnce() -> String,
    ) -> Result<reqwest::Response, HubError> {
        let response = request.send().await.map_err(|e| network(url, &e))?;
        match response.status() {
            s if s.is_success() => Ok(response),
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN if self.token_withheld => {
                Err(HubError::TokenWithheld {
                    repo: repo.to_owned(),
                    endpoint: self.endpoint.clone(),
                    status: response.status().as_u16(),
                })
            }
            StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => Err(HubError::Gated {
                repo: repo.to_owned(),
                endpoint: self.endpoint.clone(),
                status: response.status().as_u16(),
            }),
            StatusCode::NOT_FOUND => Err(HubError::NotFound {
                what: what(),
                endpoint: self.endpoint.clone(),
            }),
            s => Err(HubError::Status {
                url: url.to_owned(),
                status: s.as_u16(),
            }),
        }
    }

    /// Every file of `repo` at `revision` (folders left out), following the listing's pages:
    /// at most [`LISTING_PAGES_MAX`] pages, none twice, [`LISTING_BYTES_MAX`] bytes in all,
    /// within [`LISTING_DEADLINE_SECS`].
    pub async fn list_files(&self, repo: &str, revision: &str) -> Result<Vec<HubFile>, HubError> {
        check_repo_id(repo).map_err(HubError::RepoId)?;
        let deadline = self.bounds.listing_deadline;
        tokio::time::timeout(deadline, self.list_pages(repo, revision))
            .await
            .unwrap_or_else(|_| {
                Err(HubError::Bound {
                    what: format!("the hub's listing of {repo}"),
                    bound: Hit::Deadline {
                        name: "LISTING_DEADLINE_SECS",
                        after: deadline,
                    }
                    .to_string(),
                })
            })
    }

    async fn list_pages(&self, repo: &str, revision: &str) -> Result<Vec<HubFile>, HubError> {
        let stop = |hit: Hit| HubError::Bound {
            what: format!("the hub's listing of {repo}"),
            bound: hit.to_string(),
        };
        let first = format!(
            "{}/api/models/{repo}/tree/{revision}?recursive=true",
            self.endpoint
        );
        // written as `next_page` writes the pages after it, for the loop check
        let mut url = Some(Url::parse(&first).map_or(first, String::from));
        let mut read = std::collections::HashSet::new();
        let mut bytes_left = self.bounds.listing_bytes_max;
        let mut files = Vec::new();
        while let Some(page) = url.take() {
            if read.contains(&page) {
                return Err(stop(Hit::Loop { url: page }));
            }
            if read.len() >= self.bounds.listing_pages_max as usize {
                return Err(stop(Hit::Pages {
                    name: "LISTING_PAGES_MAX",
                    max: self.bounds.listing_pages_max,
                }));
            }
            let mut response = self
                .send(self.get(&page), &page, repo, || {
                    format!("the repository {repo} (revision {revision})")
                })
                .await?;
            url = next_page(response.headers(), &page);
            let body =
                read_body(&mut response, bytes_left)
                    .await
                    .map_err(|stopped| match stopped {
                        Stopped::TooLong => stop(Hit::Bytes {
                            name: "LISTING_BYTES_MAX",
                            max: self.bounds.listing_bytes_max,
                        }),
                        Stopped::Network(e) => network(&page, &e),
                    })?;
            bytes_left -= body.len() as u64;
            let entries: Vec<TreeEntry> =
                serde_json::from_slice(&body).map_err(|e| HubError::Network {
                    url: page.clone(),
                    detail: format!("its listing did not read as the hub's: {e}"),
                })?;
            files.extend(
                entries
                    .into_iter()
                    .filter(|e| e.kind == "file")
                    .map(HubFile::from),
            );
            read.insert(page);
        }
        Ok(files)
    }

    /// The GGUF models of `repo` at `revision`.
    pub async fn list_models(&self, repo: &str, revision: &str) -> Result<Vec<HubModel>, HubError> {
        Ok(gguf_models(&self.list_files(repo, revision).await?))
    }

    /// What a remote GGUF's header says, read from its first bytes only: at most
    /// [`HEADER_BYTES_MAX`] of them, within [`HEADER_DEADLINE_SECS`].
    pub async fn remote_facts(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
    ) -> Result<HeaderFacts, HubError> {
        check_repo_id(repo).map_err(HubError::RepoId)?;
        let deadline = self.bounds.header_deadline;
        tokio::time::timeout(deadline, self.read_header(repo, revision, path))
            .await
            .unwrap_or_else(|_| {
                Err(HubError::Bound {
                    what: format!("the GGUF header of {path} in {repo}"),
                    bound: Hit::Deadline {
                        name: "HEADER_DEADLINE_SECS",
                        after: deadline,
                    }
                    .to_string(),
                })
            })
    }

    async fn read_header(
        &self,
        repo: &str,
        revision: &str,
        path: &str,
    ) -> Result<HeaderFacts, HubError> {
        let url = self.file_url(repo, revision, path);
        let max_bytes = self.bounds.header_bytes_max;
        let prefixes = HEADER_PREFIX_BYTES
            .into_iter()
            .filter(|&bytes| bytes < max_bytes)
            .chain([max_bytes]);
        for prefix_bytes in prefixes {
            let request = self
                .get(&url)
                .header(RANGE, format!("bytes=0-{}", prefix_bytes - 1));
            let mut response = self
                .send(request, &url, repo, || format!("{path} in {repo}"))
                .await?;
            // a server that ignores the range sends the whole file: read only the prefix
            let mut bytes = Vec::new();
            while (bytes.len() as u64) < prefix_bytes {
                match response.chunk().await.map_err(|e| network(&url, &e))? {
                    Some(chunk) => bytes.extend_from_slice(&chunk),
                    None => break,
                }
            }
            let whole_file = (bytes.len() as u64) < prefix_bytes;
            bytes.truncate(prefix_bytes as usize);
            match parse_prefix(&bytes) {
                Ok(header) => return Ok(header.facts()?),
                Err(HeaderError::NeedMore { .. }) if whole_file => {
                    return Err(HeaderError::Invalid(format!(
                        "{path} ends inside its GGUF header ({} bytes)",
                        bytes.len()
                    ))
                    .into());
                }
                Err(HeaderError::NeedMore { .. }) => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(HubError::Bound {
            what: format!("the GGUF header of {path} in {repo}"),
            bound: Hit::Bytes {
                name: "HEADER_BYTES_MAX",
                max: max_bytes,
            }
            .to_string(),
        })
    }
}

/// Downloads one file whose size and SHA-256 are pinned here (not taken from the hub's
/// listing) to `dest`, from any thread, inside a runtime or not: the download runs on a
/// thread of its own with its own runtime.
pub fn fetch_pinned(
    repo: &str,
    file: &str,
    size_bytes: u64,
    sha256: &str,
    dest: &std::path::Path,
) -> Result<(), HubError> {
    let model = HubModel {
        name: file.to_owned(),
        parts: vec![HubFile {
            path: file.to_owned(),
            size_bytes,
            sha256: Some(sha256.to_owned()),
        }],
        projector: false,
    };
    let dir = dest
        .parent()
        .map(std::path::Path::to_path_buf)
        .unwrap_or_default();
    let repo = repo.to_owned();
    let downloaded = std::thread::scope(|s| {
        s.spawn(|| {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|source| HubError::Io {
                    context: "starting the download's runtime".into(),
                    source,
                })?;
            let client = HubClient::from_env();
            let never = std::sync::atomic::AtomicBool::new(false);
            runtime.block_on(download_model(
                &client,
                &repo,
                "main",
                &model,
                &dir,
                &mut |_| {},
                &never,
            ))
        })
        .join()
        .unwrap_or_else(|_| {
            Err(HubError::Io {
                context: "the download's thread".into(),
                source: std::io::Error::other("it panicked"),
            })
        })
    })?;
    if downloaded != dest {
        std::fs::rename(&downloaded, dest).map_err(|source| HubError::Io {
            context: format!("moving the model to {}", dest.display()),
            source,
        })?;
    }
    Ok(())
}

fn network(url: &str, e: &reqwest::Error) -> HubError {
    // reqwest's Display stops at the outermost error; the cause says what failed. Its words
    // name the URL, said once already.
    let mut detail = match e.url() {
        Some(named) => e.to_string().replace(&format!(" for url ({named})"), ""),
        None => e.to_string(),
    };
    let mut source = std::error::Error::source(e);
    while let Some(s) = source {
        detail = format!("{detail}: {s}");
        source = s.source();
    }
    HubError::Network {
        url: url.to_owned(),
        detail,
    }
}

/// The next page of a listing: the `Link` header's `rel="next"` target, read against the
/// page it came with, written as a URL is (so one page named twice is seen as one).
fn next_page(headers: &HeaderMap, page: &str) -> Option<String> {
    let link = headers.get(LINK)?.to_str().ok()?;
    let target = link.split(',').find_map(|part| {
        let (target, params) = part.split_once(';')?;
        params
            .split(';')
            .any(|p| p.trim() == "rel=\"next\"")
            .then(|| target.trim().trim_start_matches('<').trim_end_matches('>'))
    })?;
    Url::parse(page)
        .and_then(|page| page.join(target))
        .map(String::from)
        .ok()
}

/// Where a repository's downloads go in the models folder: a folder per repository
/// (`owner/name/`, as LM Studio keeps them), so two repositories' files of one name never
/// share a path. `repo` is an id [`check_repo_id`] takes (the listing, the header and the
/// download refuse any other, so nothing is written for one).
pub fn repo_dir(models_dir: &std::path::Path, repo: &str) -> std::path::PathBuf {
    repo.split('/')
        .fold(models_dir.to_path_buf(), |dir, part| dir.join(part))
}

/// `REPO[:FILE]` as `strata-desk pull` takes it.
pub fn parse_model_ref(reference: &str) -> Result<(String, Option<String>), String> {
    let (repo, file) = match reference.split_once(':') {
        Some((repo, file)) => (repo, Some(file.to_owned()).filter(|f| !f.is_empty())),
        None => (reference, None),
    };
    check_repo_id(repo)?;
    Ok((repo.to_owned(), file))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_next_page_is_the_links_rel_next() {
        let mut headers = HeaderMap::new();
        headers.insert(
            LINK,
            "<https://hub/api/models/a/b/tree/main?cursor=xyz>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        let page = "https://hub/api/models/a/b/tree/main";
        assert_eq!(
            next_page(&headers, page).as_deref(),
            Some("https://hub/api/models/a/b/tree/main?cursor=xyz")
        );
        // a relative target is read against the page
        headers.insert(
            LINK,
            "</api/models/a/b/tree/main?cursor=2>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_page(&headers, page).as_deref(),
            Some("https://hub/api/models/a/b/tree/main?cursor=2")
        );
        headers.insert(LINK, "<https://hub/x>; rel=\"prev\"".parse().unwrap());
        assert_eq!(next_page(&headers, page), None);
    }

    #[test]
    fn a_model_reference_is_owner_slash_name_and_an_optional_file() {
        assert_eq!(
            parse_model_ref("a/b:c.gguf"),
            Ok(("a/b".into(), Some("c.gguf".into())))
        );
        assert_eq!(parse_model_ref("a/b"), Ok(("a/b".into(), None)));
        assert!(
            parse_model_ref("just-a-name")
                .unwrap_err()
                .contains("owner/name")
        );
        assert!(parse_model_ref("a/b/c").is_err());
        // regression (#61): `pull ../..:FILE` wrote outside the models folder
        assert!(
            parse_model_ref("../..:x.gguf")
                .unwrap_err()
                .starts_with("'../..' is not a repository id")
        );
    }
}
