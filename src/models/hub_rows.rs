//! A repository's models as the settings view lists them: each GGUF with its size, what its
//! header says, where it would run on this machine and the largest context that keeps it so
//! (the fit estimate), and whether it is downloaded already.
//!
//! One header is read per listing (a Range request of a few MB): a repository's files are
//! quantizations of one model, so its layers, attention shape and trained context are the
//! same for all; each file's own size gives its weights.

use super::fit::{Fit, Machine, ModelShape, fit, largest_context, verdict_words};
use super::gguf_header::HeaderFacts;
use super::hub::{HubClient, HubError, HubModel};
use crate::engine_worker::KvType;
use std::path::{Path, PathBuf};

#[derive(Debug, Clone, PartialEq)]
pub struct HubRow {
    pub model: HubModel,
    /// Where it would run here, and at what context; `None` when the header could not be read.
    pub fit: Option<Fit>,
    /// The fit in words: "fits on the GPU up to 32768 tokens of context (estimate)".
    pub fit_words: String,
    /// Its first part's path in the repository's folder when every part is there at its
    /// listed size.
    pub downloaded: Option<PathBuf>,
}

/// The listing of a repository with what the settings view shows of it.
#[derive(Debug, Clone, PartialEq)]
pub struct HubListing {
    pub repo: String,
    /// The header of the first model listed (`Err`: why it could not be read).
    pub facts: Result<HeaderFacts, String>,
    pub rows: Vec<HubRow>,
}

/// Lists `repo`'s models (those whose name contains `pattern`, if given; projectors left out)
/// with their fit on `machine` for at least `min_ctx` tokens; what is downloaded is looked for
/// in the repository's folder under `models_dir`.
pub async fn list_with_fit(
    client: &HubClient,
    repo: &str,
    pattern: Option<&str>,
    machine: &Machine,
    min_ctx: u32,
    models_dir: &Path,
) -> Result<HubListing, HubError> {
    let pattern = pattern.map(str::to_lowercase);
    let models: Vec<HubModel> = client
        .list_models(repo, "main")
        .await?
        .into_iter()
        .filter(|m| !m.projector)
        .filter(|m| {
            pattern
                .as_deref()
                .is_none_or(|p| m.name.to_lowercase().contains(p))
        })
        .collect();
    let facts = match models.first() {
        Some(first) => client
            .remote_facts(repo, "main", &first.parts[0].path)
            .await
            .map_err(|e| e.to_string()),
        None => Err(match pattern {
            Some(p) => format!("no GGUF in {repo} has '{p}' in its name"),
            None => format!("{repo} has no GGUF model"),
        }),
    };
    let dir = super::hub::repo_dir(models_dir, repo);
    let rows = models
        .into_iter()
        .map(|model| row(model, facts.as_ref().ok(), machine, min_ctx, &dir))
        .collect();
    Ok(HubListing {
        repo: repo.to_owned(),
        facts,
        rows,
    })
}

fn row(
    model: HubModel,
    facts: Option<&HeaderFacts>,
    machine: &Machine,
    min_ctx: u32,
    dir: &Path,
) -> HubRow {
    // a name that cannot be kept in the folder (the download refuses it) is never there
    let here = |f: &super::hub::HubFile| f.local_name().ok().map(|name| dir.join(name));
    let whole = |f: &super::hub::HubFile| {
        here(f).is_some_and(|path| std::fs::metadata(path).is_ok_and(|m| m.len() == f.size_bytes))
    };
    let downloaded = model
        .parts
        .iter()
        .all(whole)
        .then(|| here(&model.parts[0]))
        .flatten();
    let (fit, fit_words) = match facts {
        Some(facts) => {
            let shape = ModelShape {
                weights_bytes: model.size_bytes(),
                layers: facts.layers,
                kv_bytes_per_token: facts.kv_bytes_per_token(KvType::F16),
                trained_context: facts.context_length,
                compute_bytes: facts.gpu_compute_bytes(),
            };
            fit_and_words(&shape, machine, min_ctx)
        }
        None => (None, "fit unknown: its header could not be read".to_owned()),
    };
    HubRow {
        model,
        fit,
        fit_words,
        downloaded,
    }
}

/// The fit at the largest context that keeps the model's best place here, in words; or why
/// it does not fit at `min_ctx`.
pub fn fit_and_words(shape: &ModelShape, machine: &Machine, min_ctx: u32) -> (Option<Fit>, String) {
    match largest_context(shape, machine, min_ctx) {
        Some(f) => {
            let words = format!(
                "{} up to {} tokens of context (estimate)",
                verdict_words(&f, shape.layers),
                f.ctx_tokens
            );
            (Some(f), words)
        }
        None => {
            let f = fit(shape, machine, min_ctx.min(shape.trained_context));
            let words = format!(
                "{} at {} tokens (estimate)",
                verdict_words(&f, shape.layers),
                f.ctx_tokens
            );
            (Some(f), words)
        }
    }
}
