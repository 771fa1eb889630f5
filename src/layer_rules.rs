//! The dependency rules of docs/ARCHITECTURE.md that no crate boundary can express, checked
//! over the source text. (The scheduler and the protocol are crates of their own: Cargo keeps
//! their rules.) A rule names a part of `src/` and the paths its code must not mention; a
//! comment line does not count. The floors as a whole (no import runs up one, no cycle across
//! folders) are counted beside these rules, in `layer_counts`.

use std::path::{Path, PathBuf};

/// A rule: the code under `part` must not mention any of `forbidden`.
struct Rule {
    part: &'static str,
    forbidden: &'static [&'static str],
    why: &'static str,
}

/// Below the service: what `api` and `gui` must reach only through the service's handle,
/// snapshot and re-exported value types.
const BELOW_THE_SERVICE: &[&str] = &[
    "crate::scheduler",
    "crate::protocol",
    "crate::engine",
    "strata_scheduler",
    "strata_protocol",
    "llama_cpp",
];

const RULES: &[Rule] = &[
    Rule {
        part: "api",
        forbidden: BELOW_THE_SERVICE,
        why: "api sees only the service handle and snapshot types",
    },
    Rule {
        part: "api",
        forbidden: &["crate::gui", "crate::server"],
        why: "api is served by the server; it does not start one",
    },
    Rule {
        part: "gui",
        forbidden: BELOW_THE_SERVICE,
        why: "the dashboard sees only the service handle and snapshot types",
    },
    Rule {
        part: "gui",
        forbidden: &["crate::api"],
        why: "the dashboard reads the service, not the HTTP layer",
    },
    Rule {
        part: "config",
        forbidden: &[
            "crate::api",
            "crate::service",
            "crate::engine",
            "crate::gui",
            "crate::server",
            "crate::chat",
            "crate::tokenizer",
            "crate::metrics",
            "crate::models",
            "crate::control",
        ],
        why: "config imports only the scheduler's settings, the protocol's engine settings and machine::project_dirs",
    },
    Rule {
        part: "bench",
        forbidden: &["crate::"],
        why: "the load client speaks HTTP only and imports nothing of the app",
    },
    Rule {
        part: "chat",
        forbidden: &["crate::"],
        why: "chat templates and output parsing stand alone",
    },
    Rule {
        part: "upstream",
        forbidden: &["crate::"],
        why: "an upstream engine's readings are pure functions over what its routes answer",
    },
    Rule {
        part: "metrics",
        forbidden: &[
            "crate::api",
            "crate::service",
            "crate::engine",
            "crate::gui",
            "crate::protocol",
        ],
        why: "metrics record what the service gives them; they import only the scheduler's counters",
    },
    Rule {
        part: "service",
        forbidden: &["crate::api", "crate::gui", "crate::server", "llama_cpp"],
        why: "the service knows neither HTTP nor the window, and runs no inference",
    },
    Rule {
        part: "control",
        forbidden: &["crate::gui", "crate::server", "crate::api", "llama_cpp"],
        why: "the control plane is below the window, the server and the HTTP routes, which call \
              it; it makes the engine unit itself (control::making)",
    },
    Rule {
        part: "models",
        forbidden: &[
            "crate::gui",
            "crate::server",
            "crate::api",
            "crate::control",
            "crate::service",
        ],
        why: "models (files, the hub, the fit) are below the control plane that loads them",
    },
    Rule {
        part: "engine_worker",
        forbidden: &[
            "crate::api",
            "crate::gui",
            "crate::server",
            "crate::control",
            "crate::service",
            "crate::tokenizer",
        ],
        why: "the worker runs inference; the machine's facts and llama.cpp's start are machine's",
    },
    Rule {
        part: "tokenizer",
        forbidden: &[
            "crate::engine",
            "crate::models",
            "crate::service",
            "crate::api",
        ],
        why: "the tokenizer is below the worker and the models: llama.cpp's start is machine's",
    },
    Rule {
        part: "machine",
        forbidden: &["crate::", "strata_"],
        why: "machine is the lowest floor: everything asks it, it asks nothing of the app",
    },
    Rule {
        part: "engine",
        forbidden: &[
            "crate::api",
            "crate::gui",
            "crate::service",
            "crate::scheduler",
            "crate::models",
            "crate::engine_worker",
            "llama_cpp",
        ],
        why: "the engine host spawns and talks to the worker (over the protocol); it decides nothing",
    },
];

/// The top-level parts of `src/`: each folder and each `.rs` file, by name.
fn parts() -> Vec<String> {
    std::fs::read_dir(src())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".rs") || !name.contains('.'))
        .collect()
}

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The `.rs` files of a part: `src/<part>/**` or `src/<part>.rs`.
fn files_of(part: &str) -> Vec<PathBuf> {
    let dir = src().join(part);
    if dir.is_dir() {
        let mut files = Vec::new();
        let mut stack = vec![dir];
        while let Some(d) = stack.pop() {
            for entry in std::fs::read_dir(&d).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    stack.push(path);
                } else if path.extension().is_some_and(|e| e == "rs") {
                    files.push(path);
                }
            }
        }
        files
    } else {
        vec![src().join(format!("{part}.rs"))]
    }
}

/// `file:line: text` for every line of the files that mentions `needle` outside a comment.
fn mentions(files: &[PathBuf], needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).unwrap();
        for (n, line) in text.lines().enumerate() {
            let code = line.split("//").next().unwrap_or("");
            if code.contains(needle) {
                found.push(format!("{}:{}: {}", file.display(), n + 1, line.trim()));
            }
        }
    }
    found
}

#[test]
fn every_module_imports_only_what_the_architecture_allows() {
    let mut broken = Vec::new();
    for rule in RULES {
        let files = files_of(rule.part);
        assert!(!files.is_empty(), "no sources for {}", rule.part);
        for needle in rule.forbidden {
            for hit in mentions(&files, needle) {
                broken.push(format!("{} ({}): {hit}", rule.part, rule.why));
            }
        }
    }
    assert!(
        broken.is_empty(),
        "layer rules broken:\n{}",
        broken.join("\n")
    );
}

#[test]
fn inference_and_llama_cpp_stay_in_the_worker_the_tokenizer_and_the_grammar() {
    let allowed = [
        "engine_worker",
        "tokenizer.rs",
        "grammar",
        "machine",
        "layer_rules.rs",
    ];
    let mut broken = Vec::new();
    for name in parts() {
        if allowed.contains(&name.as_str()) {
            continue;
        }
        let part = name.trim_end_matches(".rs");
        broken.extend(mentions(&files_of(part), "llama_cpp"));
    }
    assert!(
        broken.is_empty(),
        "llama-cpp-2 used outside its places:\n{}",
        broken.join("\n")
    );
}

#[test]
fn anyhow_is_used_only_in_main() {
    let mut broken = Vec::new();
    for name in parts() {
        if name == "main.rs" || name == "layer_rules.rs" {
            continue;
        }
        broken.extend(mentions(&files_of(name.trim_end_matches(".rs")), "anyhow"));
    }
    assert!(
        broken.is_empty(),
        "anyhow outside main.rs:\n{}",
        broken.join("\n")
    );
}

/// Every `.rs` file under `dir` and its folders (the walker `layer_counts` and `docs_facts`
/// share).
pub(crate) fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One job a file: the issue that split the big files set the bound at 600 lines, and this
/// keeps it (the app, both crates and the integration tests).
const MAX_FILE_LINES: usize = 600;

#[test]
fn no_source_file_is_longer_than_600_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches"] {
        if root.join(dir).is_dir() {
            rust_files(&root.join(dir), &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} files", files.len());
    let long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let lines = std::fs::read_to_string(f).unwrap().lines().count();
            (lines > MAX_FILE_LINES).then(|| format!("{} ({lines} lines)", f.display()))
        })
        .collect();
    assert!(long.is_empty(), "split these files:\n{}", long.join("\n"));
}

#[test]
fn the_checker_finds_a_forbidden_path() {
    // The check itself can fail: a line that names the scheduler is found, a comment is not.
    let dir = std::env::temp_dir().join(format!("strata-layers-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("x.rs");
    std::fs::write(
        &file,
        "// crate::scheduler in a comment\nuse crate::scheduler::GiveWay;\n",
    )
    .unwrap();
    let hits = mentions(&[file], "crate::scheduler");
    std::fs::remove_dir_all(&dir).unwrap();
    assert_eq!(hits.len(), 1, "{hits:?}");
    assert!(hits[0].ends_with("use crate::scheduler::GiveWay;"));
}
