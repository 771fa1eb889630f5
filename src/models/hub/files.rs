//! A repository's files as the hub lists them (`/api/models/{repo}/tree/{revision}`), and its
//! GGUF models: one file, or the parts of a split one (`name-00001-of-00003.gguf`).

use serde::Deserialize;

/// One entry of the hub's tree listing (its JSON shape; directories are listed too).
#[derive(Debug, Clone, Deserialize)]
pub(super) struct TreeEntry {
    #[serde(rename = "type")]
    pub kind: String,
    pub path: String,
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub lfs: Option<LfsInfo>,
}

/// A file kept in Git LFS: its SHA-256 (`oid`) and size.
#[derive(Debug, Clone, Deserialize)]
pub(super) struct LfsInfo {
    pub oid: String,
    pub size: u64,
}

/// A file in a repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubFile {
    /// The path inside the repository.
    pub path: String,
    pub size_bytes: u64,
    /// The LFS SHA-256, which a download is checked against (`None` for a file outside LFS,
    /// then only its size is checked).
    pub sha256: Option<String>,
}

impl HubFile {
    /// The file's name, without the folders of its path (`/` and `\` both separate them,
    /// as on Windows).
    pub fn file_name(&self) -> &str {
        self.path.rsplit(['/', '\\']).next().unwrap_or(&self.path)
    }

    /// The name it is kept under in its repository's folder, or why it cannot be kept there
    /// on every platform ([`super::local_file_name`]).
    pub fn local_name(&self) -> Result<&str, String> {
        super::local_file_name(&self.path)
    }
}

impl From<TreeEntry> for HubFile {
    fn from(e: TreeEntry) -> Self {
        let (size_bytes, sha256) = match e.lfs {
            Some(lfs) => (lfs.size, Some(lfs.oid)),
            None => (e.size, None),
        };
        Self {
            path: e.path,
            size_bytes,
            sha256,
        }
    }
}

/// A model in a repository: one GGUF file, or the parts of a split one in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HubModel {
    /// The name a user picks it by: the file's path, or for a split model the first part's.
    pub name: String,
    pub parts: Vec<HubFile>,
    /// A vision projector (`mmproj-*.gguf`), not a model to serve on its own.
    pub projector: bool,
}

impl HubModel {
    /// All parts' sizes; a listing's absurd sizes saturate rather than wrap to a small one.
    pub fn size_bytes(&self) -> u64 {
        self.parts
            .iter()
            .fold(0u64, |sum, p| sum.saturating_add(p.size_bytes))
    }
}

/// `(stem, part, of)` of a split GGUF's path (`dir/name-00002-of-00003.gguf`).
pub fn split_part(path: &str) -> Option<(&str, u32, u32)> {
    let stem = path.strip_suffix(".gguf")?;
    let (rest, of) = stem.rsplit_once("-of-")?;
    let (base, part) = rest.rsplit_once('-')?;
    let digits = |s: &str| s.len() == 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits(part) || !digits(of) {
        return None;
    }
    let (part, of): (u32, u32) = (part.parse().ok()?, of.parse().ok()?);
    // `-00001-of-00000` and `-00003-of-00002` are names, not parts
    (1..=of).contains(&part).then_some((base, part, of))
}

/// The GGUF models among a repository's files: whole files by themselves, split ones with
/// their parts gathered in order (a split model with a part missing from the listing is left
/// out: it could not be loaded).
pub fn gguf_models(files: &[HubFile]) -> Vec<HubModel> {
    let mut models: Vec<HubModel> = Vec::new();
    for file in files.iter().filter(|f| f.path.ends_with(".gguf")) {
        let projector = file.file_name().starts_with("mmproj");
        match split_part(&file.path) {
            None => models.push(HubModel {
                name: file.path.clone(),
                parts: vec![file.clone()],
                projector,
            }),
            Some((_, 1, of)) => {
                let parts: Option<Vec<HubFile>> = (1..=of)
                    .map(|n| {
                        files
                            .iter()
                            .find(|f| {
                                split_part(&f.path).is_some_and(|(base, part, count)| {
                                    Some(base) == split_part(&file.path).map(|s| s.0)
                                        && part == n
                                        && count == of
                                })
                            })
                            .cloned()
                    })
                    .collect();
                if let Some(parts) = parts {
                    models.push(HubModel {
                        name: file.path.clone(),
                        parts,
                        projector,
                    });
                }
            }
            Some(_) => {}
        }
    }
    models
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str, size_bytes: u64) -> HubFile {
        HubFile {
            path: path.into(),
            size_bytes,
            sha256: Some(format!("sha-{path}")),
        }
    }

    #[test]
    fn split_parts_are_gathered_in_order_and_an_incomplete_split_is_left_out() {
        let files = [
            file("README.md", 1),
            file("Q8_0/coder-Q8_0-00002-of-00002.gguf", 20),
            file("coder-Q4_K_M.gguf", 5),
            file("Q8_0/coder-Q8_0-00001-of-00002.gguf", 30),
            file("mmproj-coder-f16.gguf", 2),
            file("BF16/coder-BF16-00001-of-00003.gguf", 9),
            file("BF16/coder-BF16-00003-of-00003.gguf", 9),
        ];
        let models = gguf_models(&files);
        let names: Vec<(&str, usize, u64, bool)> = models
            .iter()
            .map(|m| (m.name.as_str(), m.parts.len(), m.size_bytes(), m.projector))
            .collect();
        assert_eq!(
            names,
            [
                ("coder-Q4_K_M.gguf", 1, 5, false),
                ("Q8_0/coder-Q8_0-00001-of-00002.gguf", 2, 50, false),
                ("mmproj-coder-f16.gguf", 1, 2, true),
            ]
        );
        assert_eq!(
            models[1].parts[1].path,
            "Q8_0/coder-Q8_0-00002-of-00002.gguf"
        );
    }

    #[test]
    fn a_name_with_numbers_that_is_not_a_split_is_one_file() {
        assert_eq!(
            split_part("model-00001-of-00002.gguf"),
            Some(("model", 1, 2))
        );
        assert_eq!(split_part("model-2024-of-2025.gguf"), None);
        assert_eq!(split_part("model-00001-of-00002.bin"), None);
        // regression: a part of 0 parts made a model with no parts (a panic in the listing)
        assert_eq!(split_part("x-00001-of-00000.gguf"), None);
        assert_eq!(split_part("x-00003-of-00002.gguf"), None);
        assert!(
            gguf_models(&[file("x-00001-of-00000.gguf", 1)])[0]
                .parts
                .len()
                == 1
        );
    }
}
