//! The curated list of coding-agent models (assets/models.json, compiled in): a repository
//! and a file pattern per size class, with the tool-call family the app parses for it. Sizes,
//! hashes and facts come from the hub at run time.

use serde::Deserialize;

/// The classes in order, smallest first: what the settings view groups the list by.
pub const CLASSES: [&str; 6] = ["CPU only", "8 GB", "12 GB", "16 GB", "24 GB", "more"];

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CuratedList {
    pub version: u32,
    pub about: String,
    pub models: Vec<CuratedModel>,
}

#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CuratedModel {
    /// One of [`CLASSES`].
    pub class: String,
    pub repo: String,
    /// What the GGUF's name contains (a quantization: `q4_k_m`, `mxfp4`).
    pub file: String,
    /// The tool-call family (`Hermes`, `Xml`, `Harmony`, ... as the app names them).
    pub tool_calls: String,
    pub note: String,
}

/// The list shipped with this build, read once.
pub fn curated() -> &'static CuratedList {
    static LIST: std::sync::OnceLock<CuratedList> = std::sync::OnceLock::new();
    LIST.get_or_init(|| {
        serde_json::from_str(include_str!("../../assets/models.json"))
            .expect("assets/models.json parses (checked by a test)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_shipped_list_parses_and_names_known_classes_families_and_repositories() {
        let list = curated();
        assert_eq!(list.version, 1);
        let families = [
            "Hermes", "Xml", "Harmony", "Mistral", "Llama3", "Glm", "DeepSeek", "Kimi",
        ];
        for m in &list.models {
            assert!(CLASSES.contains(&m.class.as_str()), "{m:?}");
            assert!(families.contains(&m.tool_calls.as_str()), "{m:?}");
            assert!(
                crate::models::hub::parse_model_ref(&m.repo).is_ok(),
                "{m:?}"
            );
        }
        // every card size and the CPU has a model
        for class in &CLASSES[..5] {
            assert!(list.models.iter().any(|m| m.class == *class), "{class}");
        }
    }
}
