//! A model's download: each part into `NAME.part` beside its final name, resumed from what is
//! there (an HTTP Range request) after a dropped connection, a cancel or a restart of the app,
//! checked against the hub's SHA-256, then renamed. A file already downloaded and whole is
//! kept.
//!
//! The file is written with std::fs from the async task: one 16-64 KB chunk at a time, each a
//! short write (tokio's `fs` would move each to a blocking thread for nothing).

use super::{HubClient, HubError, HubFile, HubModel};
use reqwest::StatusCode;
use reqwest::header::RANGE;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

/// A dropped connection is resumed this many times in a row before the download gives up.
const RETRIES_MAX: u32 = 5;

/// How far a download is, across all of a model's parts.
#[derive(Debug, Clone, PartialEq)]
pub struct DownloadProgress {
    /// The file being written now (its name).
    pub file: String,
    /// 1-based, of `parts`.
    pub part: usize,
    pub parts: usize,
    pub done_bytes: u64,
    pub total_bytes: u64,
    /// Over this connection so far; `None` before a second has passed.
    pub bytes_per_sec: Option<f64>,
    pub secs_left: Option<f64>,
    /// Bytes of this file that were already here when it started (a resume).
    pub resumed_from_bytes: u64,
    /// The whole file is here and its SHA-256 is being checked.
    pub checking: bool,
}

/// Downloads every part of `model` into `dir`; returns the first part's path (llama.cpp finds
/// the others beside it). `progress` is called at each chunk; `cancel` stops at the next.
/// A repository id the hub would not take, or a part whose path cannot be kept inside `dir`
/// on every platform (`names`), is refused before anything is written.
pub async fn download_model(
    client: &HubClient,
    repo: &str,
    revision: &str,
    model: &HubModel,
    dir: &Path,
    progress: &mut (dyn FnMut(&DownloadProgress) + Send),
    cancel: &AtomicBool,
) -> Result<PathBuf, HubError> {
    super::check_repo_id(repo).map_err(HubError::RepoId)?;
    let names = model
        .parts
        .iter()
        .map(|file| {
            file.local_name().map_err(|why| HubError::UnsafeName {
                file: file.path.clone(),
                why,
            })
        })
        .collect::<Result<Vec<&str>, HubError>>()?;
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let total_bytes = model.size_bytes();
    let mut before_bytes = 0;
    let mut first = None;
    for (i, (file, name)) in model.parts.iter().zip(names).enumerate() {
        let mut job = Job {
            client,
            repo,
            url: client.file_url(repo, revision, &file.path),
            file,
            dest: dir.join(name),
            progress: DownloadProgress {
                file: name.to_owned(),
                part: i + 1,
                parts: model.parts.len(),
                done_bytes: before_bytes,
                total_bytes,
                bytes_per_sec: None,
                secs_left: None,
                resumed_from_bytes: 0,
                checking: false,
            },
            before_bytes,
        };
        job.run(progress, cancel).await?;
        first.get_or_insert(job.dest);
        before_bytes = before_bytes.saturating_add(file.size_bytes);
    }
    first.ok_or_else(|| HubError::NotFound {
        what: format!("a file of {}", model.name),
        endpoint: client.endpoint().to_owned(),
    })
}

struct Job<'a> {
    client: &'a HubClient,
    repo: &'a str,
    url: String,
    file: &'a HubFile,
    dest: PathBuf,
    progress: DownloadProgress,
    /// The bytes of the parts before this one.
    before_bytes: u64,
}

impl Job<'_> {
    fn part_path(&self) -> PathBuf {
        let mut name = self.dest.clone().into_os_string();
        name.push(".part");
        name.into()
    }

    async fn run(
        &mut self,
        progress: &mut (dyn FnMut(&DownloadProgress) + Send),
        cancel: &AtomicBool,
    ) -> Result<(), HubError> {
        let size = self.file.size_bytes;
        if std::fs::metadata(&self.dest).is_ok_and(|m| m.len() == size) {
            // here already: kept if it checks out, downloaded anew if not
            let at = self.dest.clone();
            if self.check(&at, progress).await.is_ok() {
                return Ok(());
            }
            remove(&self.dest)?;
        }
        let part = self.part_path();
        let mut retries = 0;
        loop {
            let have = std::fs::metadata(&part).map_or(0, |m| m.len());
            if have > size {
                remove(&part)?;
                continue;
            }
            if have == size {
                break;
            }
            match self.fetch(&part, have, progress, cancel).await {
                Ok(()) => retries = 0,
                Err(e) if retryable(&e) && retries < RETRIES_MAX => {
                    // "in a row": a connection that moved the file on starts the count again
                    let now = std::fs::metadata(&part).map_or(0, |m| m.len());
                    retries = if now > have { 1 } else { retries + 1 };
                    tracing::warn!(url = %self.url, retries, "download stopped ({e}); resuming");
                    tokio::time::sleep(Duration::from_millis(500 * u64::from(retries))).await;
                }
                Err(e) => return Err(e),
            }
        }
        if let Err(e) = self.check(&part, progress).await {
            remove(&part)?;
            return Err(e);
        }
        std::fs::rename(&part, &self.dest).map_err(io(format!(
            "renaming {} to {}",
            part.display(),
            self.dest.display()
        )))
    }

    /// The file's SHA-256 against the hub's (hashed on a blocking thread: many GB take a
    /// while, and the runtime serves requests meanwhile).
    async fn check(
        &mut self,
        path: &Path,
        progress: &mut (dyn FnMut(&DownloadProgress) + Send),
    ) -> Result<(), HubError> {
        let Some(expected) = &self.file.sha256 else {
            return Ok(());
        };
        self.progress.checking = true;
        self.progress.done_bytes = self.before_bytes + self.file.size_bytes;
        self.progress.secs_left = None;
        progress(&self.progress);
        self.progress.checking = false;
        let owned = path.to_path_buf();
        let actual = tokio::task::spawn_blocking(move || crate::models::sha256_file(&owned))
            .await
            .map_err(|e| e.to_string())
            .and_then(|hashed| hashed.map_err(|e| e.to_string()))
            .map_err(|e| HubError::Io {
                context: format!("checking {}", path.display()),
                source: std::io::Error::other(e),
            })?;
        if actual == *expected {
            Ok(())
        } else {
            Err(HubError::Checksum {
                file: self.file.path.clone(),
                expected: expected.clone(),
                actual,
            })
        }
    }

    /// One request for the rest of the file from `have` bytes on, appended to `part`.
    async fn fetch(
        &mut self,
        part: &Path,
        have: u64,
        progress: &mut (dyn FnMut(&DownloadProgress) + Send),
        cancel: &AtomicBool,
    ) -> Result<(), HubError> {
        let mut response = self.request_rest(part, have).await?;
        // 206: the rest, appended; 200: a server that ignored the range sends it all
        let resumed = response.status() == StatusCode::PARTIAL_CONTENT;
        let out = if resumed {
            OpenOptions::new().append(true).open(part)
        } else {
            File::create(part)
        }
        .map_err(io(format!("opening {}", part.display())))?;
        let written = if resumed { have } else { 0 };
        self.progress.resumed_from_bytes = written;
        let body = Body {
            part,
            progress,
            cancel,
        };
        let (mut out, written) = self.write_body(&mut response, out, written, body).await?;
        out.flush()
            .map_err(|e| self.write_error(part, written, e))?;
        if written != self.file.size_bytes {
            // the connection ended early: resumed by the caller
            return Err(HubError::Network {
                url: self.url.clone(),
                detail: format!(
                    "the body ended after {written} of {} bytes",
                    self.file.size_bytes
                ),
            });
        }
        Ok(())
    }

    /// The request for the file from `have` bytes on; a file that ends before them changed
    /// on the hub since it was listed (its part is removed).
    async fn request_rest(&self, part: &Path, have: u64) -> Result<reqwest::Response, HubError> {
        let mut request = self.client.get(&self.url);
        if have > 0 {
            request = request.header(RANGE, format!("bytes={have}-"));
        }
        let path = self.file.path.clone();
        let response = self
            .client
            .send(request, &self.url, self.repo, || {
                format!("{path} in {}", self.repo)
            })
            .await;
        match response {
            // the hub's file ends before what is here: it changed since it was listed
            Err(HubError::Status { status: 416, .. }) => {
                remove(part)?;
                Err(self.changed(have))
            }
            other => other,
        }
    }

    /// The response's body appended to `out` from `written` bytes on, with progress, until
    /// it ends or a cancel; the file and the bytes written then.
    async fn write_body(
        &mut self,
        response: &mut reqwest::Response,
        mut out: File,
        mut written: u64,
        body: Body<'_>,
    ) -> Result<(File, u64), HubError> {
        let started = Instant::now();
        let mut this_request_bytes = 0u64;
        loop {
            let chunk = match next_chunk(response, body.cancel, &self.url).await? {
                Next::Data(chunk) => chunk,
                Next::End => return Ok((out, written)),
                Next::Cancelled => return Err(self.cancelled(&mut out, body.part, written)),
            };
            if written + chunk.len() as u64 > self.file.size_bytes {
                // longer than listed: the file changed on the hub
                drop(out);
                remove(body.part)?;
                return Err(self.changed(written + chunk.len() as u64));
            }
            if let Err(e) = out.write_all(&chunk) {
                return Err(self.write_error(body.part, written, e));
            }
            written += chunk.len() as u64;
            this_request_bytes += chunk.len() as u64;
            self.report(written, this_request_bytes, started, body.progress);
            if body.cancel.load(Ordering::Relaxed) {
                return Err(self.cancelled(&mut out, body.part, written));
            }
        }
    }

    /// A cancel: what is written is flushed, to be resumed.
    fn cancelled(&self, out: &mut File, part: &Path, written: u64) -> HubError {
        match out.flush() {
            Err(e) => self.write_error(part, written, e),
            Ok(()) => HubError::Cancelled {
                file: self.file.path.clone(),
                done_bytes: written,
            },
        }
    }

    fn report(
        &mut self,
        written: u64,
        this_request_bytes: u64,
        started: Instant,
        progress: &mut (dyn FnMut(&DownloadProgress) + Send),
    ) {
        let secs = started.elapsed().as_secs_f64();
        let rate = (secs >= 1.0).then(|| this_request_bytes as f64 / secs);
        self.progress.done_bytes = self.before_bytes + written;
        self.progress.bytes_per_sec = rate;
        self.progress.secs_left = rate.filter(|r| *r > 0.0).map(|r| {
            self.progress
                .total_bytes
                .saturating_sub(self.progress.done_bytes) as f64
                / r
        });
        progress(&self.progress);
    }

    /// The hub's file is not the one listed (`got` bytes where the listing said otherwise).
    fn changed(&self, got: u64) -> HubError {
        HubError::Size {
            file: self.file.path.clone(),
            expected: self.file.size_bytes,
            got,
        }
    }

    fn write_error(&self, part: &Path, written: u64, e: std::io::Error) -> HubError {
        if e.kind() == std::io::ErrorKind::StorageFull {
            HubError::DiskFull {
                path: part.display().to_string(),
                needed_bytes: self.file.size_bytes.saturating_sub(written),
            }
        } else {
            HubError::Io {
                context: format!("writing {}", part.display()),
                source: e,
            }
        }
    }
}

/// A dropped or stalled connection, or the hub busy (5xx, 429): worth resuming.
fn retryable(e: &HubError) -> bool {
    match e {
        HubError::Network { .. } => true,
        HubError::Status { status, .. } => *status >= 500 || *status == 429,
        _ => false,
    }
}

enum Next {
    Data(bytes::Bytes),
    End,
    Cancelled,
}

/// Where a body goes, who hears its progress, and what cancels it.
struct Body<'a> {
    part: &'a Path,
    progress: &'a mut (dyn FnMut(&DownloadProgress) + Send),
    cancel: &'a AtomicBool,
}

/// The body's next chunk, or `Cancelled` as soon as the flag is set, even while the
/// connection is silent (the client's read timeout ends a stalled one).
async fn next_chunk(
    response: &mut reqwest::Response,
    cancel: &AtomicBool,
    url: &str,
) -> Result<Next, HubError> {
    let next = response.chunk();
    tokio::pin!(next);
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            chunk = &mut next => {
                return match chunk.map_err(|e| super::network(url, &e))? {
                    Some(data) => Ok(Next::Data(data)),
                    None => Ok(Next::End),
                };
            }
            _ = tick.tick() => {
                if cancel.load(Ordering::Relaxed) {
                    return Ok(Next::Cancelled);
                }
            }
        }
    }
}

fn remove(path: &Path) -> Result<(), HubError> {
    std::fs::remove_file(path).map_err(io(format!("removing {}", path.display())))
}

fn io(context: String) -> impl FnOnce(std::io::Error) -> HubError {
    move |source| HubError::Io { context, source }
}
