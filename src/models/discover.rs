//! Models on this machine: GGUF files in the places other local-LLM apps keep them, so the
//! settings view can offer them. LM Studio's models folder (`~/.lmstudio/models`, older
//! `~/.cache/lm-studio/models`), Ollama's store (`$OLLAMA_MODELS`, `~/.ollama/models`, the Linux
//! service's `/usr/share/ollama/.ollama/models`: its blobs have no extension, so each model is
//! found through its manifest), and this app's own models folder. Each is then described from
//! its GGUF header through llama.cpp's vocabulary-only load (no weights are read): context
//! length, chat template and the tool-call form that template implies.

use std::path::{Path, PathBuf};

/// Where a model was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelSource {
    LmStudio,
    Ollama,
    ThisApp,
}

impl ModelSource {
    pub fn words(self) -> &'static str {
        match self {
            Self::LmStudio => "LM Studio",
            Self::Ollama => "Ollama",
            Self::ThisApp => "this app",
        }
    }
}

/// A GGUF found on disk.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FoundModel {
    /// A name to show: the file name, or Ollama's `name:tag`.
    pub name: String,
    pub path: PathBuf,
    pub source: ModelSource,
    pub size_bytes: u64,
}

/// The folders to look in on this machine, each with what keeps models there.
pub fn usual_folders() -> Vec<(ModelSource, PathBuf)> {
    let mut folders = Vec::new();
    if let Some(home) = directories::UserDirs::new().map(|u| u.home_dir().to_path_buf()) {
        folders.push((ModelSource::LmStudio, home.join(".lmstudio").join("models")));
        folders.push((
            ModelSource::LmStudio,
            home.join(".cache").join("lm-studio").join("models"),
        ));
        folders.push((ModelSource::Ollama, home.join(".ollama").join("models")));
    }
    if let Some(custom) = std::env::var_os("OLLAMA_MODELS") {
        folders.push((ModelSource::Ollama, PathBuf::from(custom)));
    }
    if cfg!(target_os = "linux") {
        folders.push((
            ModelSource::Ollama,
            PathBuf::from("/usr/share/ollama/.ollama/models"),
        ));
    }
    if let Some(dirs) = super::project_dirs() {
        folders.push((ModelSource::ThisApp, dirs.data_dir().join("models")));
    }
    folders
}

/// Every model in `folders` (missing folders are skipped), each path once, by name.
pub fn find_models(folders: &[(ModelSource, PathBuf)]) -> Vec<FoundModel> {
    let mut found = Vec::new();
    for (source, folder) in folders {
        match source {
            ModelSource::Ollama => ollama_models(folder, &mut found),
            _ => gguf_files(folder, *source, 0, &mut found),
        }
    }
    found.sort_by(|a, b| a.name.cmp(&b.name).then(a.path.cmp(&b.path)));
    // one row per file, under its first name (two Ollama tags may share a blob; a store may be
    // both `~/.ollama/models` and `OLLAMA_MODELS`)
    let mut seen = std::collections::HashSet::new();
    found.retain(|m| seen.insert(m.path.clone()));
    found
}

/// Folders deeper than this under a models folder are not searched (LM Studio keeps
/// `publisher/model/file.gguf`).
const DEPTH_MAX: usize = 4;

fn gguf_files(dir: &Path, source: ModelSource, depth: usize, out: &mut Vec<FoundModel>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        // followed, so a model linked into the folder counts
        let Ok(meta) = std::fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() && depth < DEPTH_MAX {
            gguf_files(&path, source, depth + 1, out);
            continue;
        }
        let name = entry.file_name().to_string_lossy().into_owned();
        // vision projectors are GGUFs too, but no model to chat with
        let is_model = name.to_ascii_lowercase().ends_with(".gguf")
            && !name.to_ascii_lowercase().starts_with("mmproj");
        if meta.is_file() && is_model {
            out.push(FoundModel {
                name,
                path,
                source,
                size_bytes: meta.len(),
            });
        }
    }
}

/// Ollama's `manifests/<registry>/<namespace>/<model>/<tag>` files name the model layer's
/// blob (`application/vnd.ollama.image.model`, `sha256:HEX`), kept as `blobs/sha256-HEX`.
fn ollama_models(store: &Path, out: &mut Vec<FoundModel>) {
    let mut manifests = Vec::new();
    collect_files(&store.join("manifests"), 0, &mut manifests);
    for manifest in manifests {
        let Ok(text) = std::fs::read_to_string(&manifest) else {
            continue;
        };
        let Ok(json) = serde_json::from_str::<serde_json::Value>(&text) else {
            continue;
        };
        let layer = json["layers"].as_array().and_then(|layers| {
            layers
                .iter()
                .find(|l| l["mediaType"] == "application/vnd.ollama.image.model")
        });
        let Some(digest) = layer.and_then(|l| l["digest"].as_str()) else {
            continue;
        };
        let blob = store.join("blobs").join(digest.replace(':', "-"));
        let Ok(meta) = std::fs::metadata(&blob) else {
            continue;
        };
        let tag = manifest
            .file_name()
            .map(|t| t.to_string_lossy().into_owned());
        let model = manifest
            .parent()
            .and_then(|p| p.file_name())
            .map(|m| m.to_string_lossy().into_owned());
        out.push(FoundModel {
            name: format!("{}:{}", model.unwrap_or_default(), tag.unwrap_or_default()),
            path: blob,
            source: ModelSource::Ollama,
            size_bytes: meta.len(),
        });
    }
}

/// What a model's GGUF header says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModelFacts {
    /// The context it was trained for (`{arch}.context_length`).
    pub context_length: u32,
    pub has_chat_template: bool,
    /// The tool-call family its template writes (`Hermes`, `Xml`, `Harmony`, ...), or `None`
    /// when the template knows no tools.
    pub tool_calls: Option<String>,
}

/// Reads a model's facts: llama.cpp loads its vocabulary only (the header and the token
/// list, no weights), so this takes a moment even for a large model.
pub fn describe(path: &Path) -> Result<ModelFacts, String> {
    // llama-cpp-2 asserts that the file exists; say so instead
    if !path.is_file() {
        return Err(format!("{} is not a file", path.display()));
    }
    let tokenizer = crate::tokenizer::Tokenizer::load(path).map_err(|e| e.to_string())?;
    let template = tokenizer.chat_template();
    let tool_calls = tool_call_family(template.as_deref());
    Ok(ModelFacts {
        context_length: tokenizer.context_length(),
        has_chat_template: template.is_some(),
        tool_calls,
    })
}

/// The tool-call family a chat template writes (`Hermes`, `Xml`, ...), `None` for a template
/// that knows no tools (or none).
pub fn tool_call_family(template: Option<&str>) -> Option<String> {
    template
        .filter(|t| t.contains("tools"))
        .map(|t| format!("{:?}", crate::chat::ToolFormat::of_template(t)))
}

fn collect_files(dir: &Path, depth: usize, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() && depth < DEPTH_MAX {
            collect_files(&path, depth + 1, out);
        } else if path.is_file() {
            out.push(path);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An empty Ollama store under `root`, and the manifests folder of its `qwen3` model.
    fn ollama_store(root: &Path) -> (PathBuf, PathBuf) {
        let store = root.join("ollama");
        let manifests = store
            .join("manifests")
            .join("registry.ollama.ai")
            .join("library")
            .join("qwen3");
        std::fs::create_dir_all(&manifests).unwrap();
        std::fs::create_dir_all(store.join("blobs")).unwrap();
        (store, manifests)
    }

    #[test]
    fn lm_studio_files_and_ollama_blobs_are_found_and_projectors_are_not() {
        let root = tempfile::tempdir().unwrap();
        let lms = root.path().join("lmstudio");
        let model_dir = lms.join("publisher").join("Coder-7B-GGUF");
        std::fs::create_dir_all(&model_dir).unwrap();
        std::fs::write(model_dir.join("coder-7b-Q4_K_M.gguf"), b"GGUF....").unwrap();
        std::fs::write(model_dir.join("mmproj-coder-f16.gguf"), b"GGUF").unwrap();
        std::fs::write(model_dir.join("README.md"), b"not a model").unwrap();

        let (ollama, manifests) = ollama_store(root.path());
        std::fs::write(ollama.join("blobs").join("sha256-abc123"), b"GGUF......").unwrap();
        std::fs::write(
            manifests.join("8b"),
            r#"{"layers": [
                {"mediaType": "application/vnd.ollama.image.template", "digest": "sha256:fff"},
                {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:abc123"}
            ]}"#,
        )
        .unwrap();

        let found = find_models(&[
            (ModelSource::LmStudio, lms),
            (ModelSource::Ollama, ollama.clone()),
            (ModelSource::ThisApp, root.path().join("missing")),
        ]);
        let names: Vec<(&str, ModelSource, u64)> = found
            .iter()
            .map(|m| (m.name.as_str(), m.source, m.size_bytes))
            .collect();
        assert_eq!(
            names,
            [
                ("coder-7b-Q4_K_M.gguf", ModelSource::LmStudio, 8),
                ("qwen3:8b", ModelSource::Ollama, 10),
            ]
        );
        assert_eq!(found[1].path, ollama.join("blobs").join("sha256-abc123"));
    }

    #[test]
    fn a_blob_under_two_tags_in_a_store_listed_twice_is_found_once_under_its_first_name() {
        let root = tempfile::tempdir().unwrap();
        let (store, manifests) = ollama_store(root.path());
        // two names for one file, and another file whose name sorts between them
        for (tag, blob) in [("8b", "abc"), ("9b", "def"), ("latest", "abc")] {
            std::fs::write(store.join("blobs").join(format!("sha256-{blob}")), b"GGUF").unwrap();
            let layer = format!(
                r#"{{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:{blob}"}}"#
            );
            std::fs::write(manifests.join(tag), format!(r#"{{"layers": [{layer}]}}"#)).unwrap();
        }
        let found = find_models(&[
            (ModelSource::Ollama, store.clone()),
            (ModelSource::Ollama, store),
        ]);
        let names: Vec<&str> = found.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["qwen3:8b", "qwen3:9b"]);
    }
}
