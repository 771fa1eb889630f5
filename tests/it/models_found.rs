//! Models on this machine: the real test model found under an Ollama-style store (a blob with
//! no extension, named by its manifest) and an LM Studio-style folder, and described from its
//! header through the vocabulary-only load.

use crate::support::model_path;
use strata_desk::models::discover::{ModelSource, describe, find_models};

#[test]
fn the_test_model_is_found_in_an_ollama_store_and_an_lm_studio_folder_and_described() {
    let model = model_path();
    let root = tempfile::tempdir().unwrap();
    let store = root.path().join("ollama");
    let manifest_dir = store.join("manifests/registry.ollama.ai/library/smollm2");
    std::fs::create_dir_all(&manifest_dir).unwrap();
    std::fs::create_dir_all(store.join("blobs")).unwrap();
    let blob = store.join("blobs/sha256-0123abcd");
    std::os::unix::fs::symlink(&model, &blob).unwrap();
    std::fs::write(
        manifest_dir.join("135m"),
        r#"{"layers": [{"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:0123abcd"}]}"#,
    )
    .unwrap();
    let lms = root
        .path()
        .join("lmstudio/HuggingFaceTB/SmolLM2-135M-Instruct-GGUF");
    std::fs::create_dir_all(&lms).unwrap();
    std::os::unix::fs::symlink(&model, lms.join("smollm2-135m-instruct-q4_1.gguf")).unwrap();

    let found = find_models(&[
        (ModelSource::Ollama, store),
        (ModelSource::LmStudio, root.path().join("lmstudio")),
    ]);
    let names: Vec<&str> = found.iter().map(|m| m.name.as_str()).collect();
    assert_eq!(names, ["smollm2-135m-instruct-q4_1.gguf", "smollm2:135m"]);
    for m in &found {
        let facts = describe(&m.path).unwrap();
        assert_eq!(facts.context_length, 8192, "{m:?}");
        assert!(facts.has_chat_template, "{m:?}");
        // SmolLM2's template knows no tools
        assert_eq!(facts.tool_calls, None);
        assert!(m.size_bytes > 50 << 20);
    }
    assert!(describe(&root.path().join("missing.gguf")).is_err());
}
