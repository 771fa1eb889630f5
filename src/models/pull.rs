//! `strata-desk pull REPO[:FILE]`: a model from the hub into this app's models folder, with
//! its facts (read from the remote header before the download) and the download's progress on
//! the terminal. Ctrl-C keeps what was downloaded; the next pull resumes there.

use super::gguf_header::HeaderFacts;
use super::hub::{
    DownloadProgress, HubClient, HubError, HubModel, download_model, parse_model_ref,
};
use crate::engine_worker::KvType;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, clap::Args)]
pub struct PullArgs {
    /// `owner/name` of a repository, with `:FILE` for one of its GGUFs: a file name, or a
    /// quantization its name contains (`:Q4_K_M`) [default: the one with Q4_K_M in its
    /// name, or its only model].
    pub model: String,
    /// A branch, tag or commit of the repository.
    #[arg(long, default_value = "main")]
    pub revision: String,
    /// The folder to download into [default: the repository's folder (owner/name) in this
    /// app's models folder].
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// List the repository's models with their sizes and download nothing.
    #[arg(long)]
    pub list: bool,
}

/// The quantization picked when a pull names none (llama.cpp's `-hf` does the same).
const DEFAULT_QUANTIZATION: &str = "Q4_K_M";

/// Why a pull stopped.
#[derive(Debug, thiserror::Error)]
pub enum PullError {
    #[error("{0}")]
    Reference(String),
    #[error("{0}")]
    Hub(#[from] HubError),
    #[error("{0}")]
    ModelsFolder(#[from] super::ModelFetchError),
    /// None of the repository's models, or several, answer the name: the listing follows.
    #[error("{why}\n{listing}")]
    Choose { why: String, listing: String },
}

/// Pulls; returns the downloaded model's path (its first part for a split model).
pub async fn run(args: &PullArgs) -> Result<PathBuf, PullError> {
    let (repo, wanted) = parse_model_ref(&args.model).map_err(PullError::Reference)?;
    let client = HubClient::from_env();
    let models = client.list_models(&repo, &args.revision).await?;
    if args.list || models.is_empty() {
        eprintln!("{}", listing(&repo, &models));
        if models.is_empty() {
            return Err(PullError::Choose {
                why: format!("{repo} has no GGUF files"),
                listing: String::new(),
            });
        }
        return Ok(PathBuf::new());
    }
    let model = choose(&models, wanted.as_deref()).map_err(|why| PullError::Choose {
        why,
        listing: listing(&repo, &models),
    })?;
    // the facts are for the reader: a header that cannot be read does not stop the pull
    match client
        .remote_facts(&repo, &args.revision, &model.parts[0].path)
        .await
    {
        Ok(facts) => eprintln!(
            "{}: {}",
            model.name,
            facts_words(&facts, model.size_bytes())
        ),
        Err(e) => eprintln!("{}: its header could not be read ({e})", model.name),
    }
    let dir = match &args.dir {
        Some(dir) => dir.clone(),
        None => super::hub::repo_dir(&super::models_dir()?, &repo),
    };
    let cancel = Arc::new(AtomicBool::new(false));
    let on_ctrl_c = Arc::clone(&cancel);
    let ctrl_c = tokio::spawn(async move {
        if tokio::signal::ctrl_c().await.is_ok() {
            on_ctrl_c.store(true, Ordering::Relaxed);
        }
    });
    let mut printer = Printer::new();
    let result = download_model(
        &client,
        &repo,
        &args.revision,
        model,
        &dir,
        &mut |p| printer.show(p),
        &cancel,
    )
    .await;
    ctrl_c.abort();
    printer.end();
    Ok(result?)
}

/// The model a pull means: the file named, or the one whose name has the quantization asked
/// for (or Q4_K_M), or the repository's only model.
fn choose<'a>(models: &'a [HubModel], wanted: Option<&str>) -> Result<&'a HubModel, String> {
    let servable: Vec<&HubModel> = models.iter().filter(|m| !m.projector).collect();
    if let Some(m) = wanted.and_then(|wanted| {
        models
            .iter()
            .find(|m| m.name == wanted || m.parts[0].file_name() == wanted)
    }) {
        return Ok(m);
    }
    let tag = wanted.unwrap_or(DEFAULT_QUANTIZATION).to_lowercase();
    let matching: Vec<&HubModel> = servable
        .iter()
        .copied()
        .filter(|m| m.name.to_lowercase().contains(&tag))
        .collect();
    match (matching.as_slice(), servable.as_slice(), wanted) {
        ([one], _, _) => Ok(one),
        ([], [only], None) => Ok(only),
        ([], _, Some(w)) => Err(format!("no model's name matches '{w}'; name one of these:")),
        ([], _, None) => Err("this repository has several models; name one (REPO:FILE):".into()),
        (_, _, _) => Err(format!(
            "several models match '{}'; name one (REPO:FILE):",
            wanted.unwrap_or(DEFAULT_QUANTIZATION)
        )),
    }
}

fn listing(repo: &str, models: &[HubModel]) -> String {
    let mut out = format!("models in {repo}:");
    for m in models {
        let parts = if m.parts.len() > 1 {
            format!(", {} parts", m.parts.len())
        } else {
            String::new()
        };
        let projector = if m.projector {
            ", vision projector"
        } else {
            ""
        };
        out += &format!(
            "\n  {}  ({}{parts}{projector})",
            m.name,
            gigabytes(m.size_bytes())
        );
    }
    out
}

/// "4.68 GB", or "98.4 MB" under a GB.
pub fn gigabytes(bytes: u64) -> String {
    if bytes >= 1_000_000_000 {
        format!("{:.2} GB", bytes as f64 / 1e9)
    } else {
        format!("{:.1} MB", bytes as f64 / 1e6)
    }
}

/// The facts a download decision needs, in a line.
pub fn facts_words(facts: &HeaderFacts, size_bytes: u64) -> String {
    let kv = facts.kv_bytes_per_token(KvType::F16);
    format!(
        "{}{}, {} layers, trained context {} tokens, weights {}, KV cache {:.1} KB a token at F16 ({} at the full context), chat template {}, tool calls {}",
        facts.architecture,
        facts
            .quantization
            .as_deref()
            .map(|q| format!(" {q}"))
            .unwrap_or_default(),
        facts.layers,
        facts.context_length,
        gigabytes(size_bytes),
        kv as f64 / 1e3,
        gigabytes(kv * u64::from(facts.context_length)),
        if facts.chat_template.is_some() {
            "yes"
        } else {
            "none"
        },
        facts.tool_calls.as_deref().unwrap_or("none"),
    )
}

/// The progress line: rewritten in place on a terminal, a line every 10 % elsewhere (a log).
struct Printer {
    terminal: bool,
    last: Option<Instant>,
    last_tenth: u64,
    shown: bool,
}

impl Printer {
    fn new() -> Self {
        Self {
            terminal: std::io::stderr().is_terminal(),
            last: None,
            last_tenth: u64::MAX,
            shown: false,
        }
    }

    fn show(&mut self, p: &DownloadProgress) {
        let tenth = (p.done_bytes * 10).checked_div(p.total_bytes).unwrap_or(10);
        let due = if self.terminal {
            self.last
                .is_none_or(|t| t.elapsed() >= Duration::from_millis(250))
                || p.checking
        } else {
            tenth != self.last_tenth || p.checking
        };
        if !due {
            return;
        }
        self.last = Some(Instant::now());
        self.last_tenth = tenth;
        let line = progress_words(p);
        let mut err = std::io::stderr().lock();
        if self.terminal {
            let _ = write!(err, "\r\x1b[2K{line}");
        } else {
            let _ = writeln!(err, "{line}");
        }
        self.shown = true;
    }

    fn end(&mut self) {
        if self.terminal && self.shown {
            eprintln!();
        }
    }
}

/// "coder-Q4_K_M.gguf (part 1 of 2): 1.20 GB of 4.68 GB, 25 %, 38.1 MB/s, 1 min 31 s left".
pub fn progress_words(p: &DownloadProgress) -> String {
    let part = if p.parts > 1 {
        format!(" (part {} of {})", p.part, p.parts)
    } else {
        String::new()
    };
    if p.checking {
        return format!("{}{part}: checking its SHA-256", p.file);
    }
    let percent = (p.done_bytes * 100)
        .checked_div(p.total_bytes)
        .unwrap_or(100);
    let mut line = format!(
        "{}{part}: {} of {}, {percent} %",
        p.file,
        gigabytes(p.done_bytes),
        gigabytes(p.total_bytes)
    );
    if p.resumed_from_bytes > 0 {
        line += &format!(", resumed at {}", gigabytes(p.resumed_from_bytes));
    }
    if let Some(rate) = p.bytes_per_sec {
        line += &format!(", {:.1} MB/s", rate / 1e6);
    }
    if let Some(left) = p.secs_left {
        let left = left.round() as u64;
        line += &if left >= 60 {
            format!(", {} min {} s left", left / 60, left % 60)
        } else {
            format!(", {left} s left")
        };
    }
    line
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::models::hub::HubFile;

    fn model(name: &str) -> HubModel {
        HubModel {
            name: name.into(),
            parts: vec![HubFile {
                path: name.into(),
                size_bytes: 1,
                sha256: None,
            }],
            projector: name.starts_with("mmproj"),
        }
    }

    #[test]
    fn a_pull_takes_the_file_named_else_the_quantization_else_q4_k_m_else_the_only_one() {
        let models = [
            model("coder-Q4_K_M.gguf"),
            model("coder-Q8_0.gguf"),
            model("mmproj-coder-f16.gguf"),
        ];
        let pick = |w: Option<&str>| choose(&models, w).map(|m| m.name.as_str());
        assert_eq!(pick(Some("coder-Q8_0.gguf")), Ok("coder-Q8_0.gguf"));
        assert_eq!(pick(Some("q8_0")), Ok("coder-Q8_0.gguf"));
        assert_eq!(pick(None), Ok("coder-Q4_K_M.gguf"));
        assert!(pick(Some("Q6_K")).unwrap_err().contains("'Q6_K'"));
        assert!(pick(Some("coder")).unwrap_err().starts_with("several"));
        let only = [model("tiny.Q4_1.gguf"), model("mmproj-tiny.gguf")];
        assert_eq!(
            choose(&only, None).map(|m| m.name.as_str()),
            Ok("tiny.Q4_1.gguf")
        );
    }

    #[test]
    fn the_progress_line_says_how_much_how_fast_and_how_long() {
        let p = DownloadProgress {
            file: "coder.gguf".into(),
            part: 1,
            parts: 2,
            done_bytes: 1_200_000_000,
            total_bytes: 4_800_000_000,
            bytes_per_sec: Some(40e6),
            secs_left: Some(90.4),
            resumed_from_bytes: 0,
            checking: false,
        };
        assert_eq!(
            progress_words(&p),
            "coder.gguf (part 1 of 2): 1.20 GB of 4.80 GB, 25 %, 40.0 MB/s, 1 min 30 s left"
        );
    }
}
