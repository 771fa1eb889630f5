//! Models on this machine: the real test model found under an Ollama-style store (a blob with
//! no extension, named by its manifest) and an LM Studio-style folder, and described from its
//! header through the vocabulary-only load.

use crate::support::model_path;
use strata_desk::models::discover::{ModelSource, describe, find_models};
use strata_desk::models::fit::{GpuMemory, Machine};
use strata_desk::models::on_this_machine::{ModelsArgs, report};

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

/// `strata-desk models` on this machine (no GPU here): the model pulled into this app's folder,
/// described from its header, in RAM up to its trained context; and the same model on cards
/// of 8 and 1 GiB (the machine injected): on the GPU, and partly on the CPU.
#[test]
fn strata_desk_models_lists_what_is_here_with_where_it_would_run() {
    let home = tempfile::tempdir().unwrap();
    let models = home.path().join("data/strata-desk/models");
    std::fs::create_dir_all(&models).unwrap();
    std::os::unix::fs::symlink(model_path(), models.join("SmolLM2-135M-Instruct.Q4_1.gguf"))
        .unwrap();
    let out = std::process::Command::new(crate::support::worker_exe())
        .arg("models")
        .env("HOME", home.path())
        .env("XDG_DATA_HOME", home.path().join("data"))
        .env("OLLAMA_MODELS", home.path().join("no-ollama"))
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("This machine: no GPU that llama.cpp sees, RAM "),
        "{stdout}"
    );
    assert!(
        stdout.contains(
            "  SmolLM2-135M-Instruct.Q4_1.gguf  [this app]  98.4 MB\n      llama Q4_1, 30 layers, trained for 8192 tokens: runs on the CPU (in RAM) up to 8192 tokens of context (estimate)\n"
        ),
        "{stdout}"
    );

    let found = find_models(&[(ModelSource::ThisApp, models)]);
    let gpu = |gib: u64| Machine {
        gpu: Some(GpuMemory {
            name: "RTX".into(),
            total_bytes: gib << 30,
            free_bytes: gib << 30,
            limit_bytes: 0,
        }),
        ram_available_bytes: 8_000_000_000,
    };
    let args = ModelsArgs {
        min_ctx: 4096,
        gpu_memory_limit: None,
    };
    let on_8 = report(&args, &gpu(8), &found);
    assert!(
        on_8.contains("fits on the GPU up to 8192 tokens of context (estimate)"),
        "{on_8}"
    );
    // 1 GiB free is all margin: nothing goes to the GPU
    let on_1 = report(&args, &gpu(1), &found);
    assert!(
        on_1.contains("runs on the CPU (in RAM) up to 8192"),
        "{on_1}"
    );
}
