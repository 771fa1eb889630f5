//! The facts the docs name that drift most, checked against the source: docs/TESTING.md's test
//! counts and README.md's route list. (`STRATA_UPDATE_DOCS=1` rewrites the counts.)

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    crate::layer_rules::rust_files(dir, &mut files);
    files
}

/// Lines under `dir` that start (after blanks) with `attribute`: TESTING.md's `grep -rhE`.
fn count(dir: &str, attribute: &str) -> usize {
    rust_files(&root().join(dir))
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .filter(|l| l.trim_start().starts_with(attribute))
                .count()
        })
        .sum()
}

/// docs/TESTING.md's sentence of counts, as the source has them now.
fn counts_sentence() -> String {
    let scheduler = count("crates/scheduler", "#[test]");
    let scheduler_ignored = count("crates/scheduler", "#[ignore");
    let protocol = count("crates/protocol", "#[test]");
    let (src, src_tokio) = (count("src", "#[test]"), count("src", "#[tokio::test"));
    let (tests, tests_tokio) = (count("tests", "#[test]"), count("tests", "#[tokio::test"));
    let ignored = count("src", "#[ignore") + count("tests", "#[ignore");
    let all = scheduler + protocol + src + src_tokio + tests + tests_tokio;
    format!(
        "In all: {all} test attributes. `crates/scheduler`: {scheduler} `#[test]` \
         ({scheduler_ignored} `#[ignore]`); `crates/protocol`: {protocol}; `src/`: {src} \
         `#[test]` and {src_tokio} `#[tokio::test]`; `tests/`: {tests} `#[test]` and \
         {tests_tokio} `#[tokio::test]` ({ignored} `#[ignore]` in `src/` and `tests/`)."
    )
}

#[test]
fn testing_md_s_counts_are_the_source_s() {
    let path = root().join("docs/TESTING.md");
    let text = std::fs::read_to_string(&path).unwrap();
    let start = text.find("In all: ").expect("the counts' sentence");
    let end = start + text[start..].find("\n\n").expect("its paragraph's end");
    let now = textwrap_paragraph(&counts_sentence());
    if text[start..end] != now && std::env::var_os("STRATA_UPDATE_DOCS").is_some() {
        let mut updated = text.clone();
        updated.replace_range(start..end, &now);
        std::fs::write(&path, updated).unwrap();
        return;
    }
    assert_eq!(
        text[start..end],
        now,
        "docs/TESTING.md's counts differ from the source (STRATA_UPDATE_DOCS=1 cargo test \
         testing_md rewrites them)"
    );
}

/// The sentence wrapped at 100 columns, as the docs are.
fn textwrap_paragraph(sentence: &str) -> String {
    let mut lines: Vec<String> = Vec::new();
    for word in sentence.split(' ') {
        match lines.last_mut() {
            Some(line) if line.len() + 1 + word.len() <= 100 => {
                line.push(' ');
                line.push_str(word);
            }
            _ => lines.push(word.to_owned()),
        }
    }
    lines.join("\n")
}

/// Every path the API's router serves (`.route("/path", ...)` in `src/api/`).
fn routes() -> Vec<String> {
    let mut routes = Vec::new();
    for file in rust_files(&root().join("src/api")) {
        let text = std::fs::read_to_string(file).unwrap();
        let mut rest = text.as_str();
        while let Some(at) = rest.find(".route(") {
            rest = &rest[at + ".route(".len()..];
            let quoted = rest.trim_start();
            if let Some(path) = quoted.strip_prefix('"').and_then(|q| q.split('"').next())
                && path.starts_with('/')
            {
                routes.push(path.to_owned());
            }
        }
    }
    routes.sort();
    routes.dedup();
    routes
}

#[test]
fn the_readme_names_every_route_the_api_serves() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let routes = routes();
    assert!(
        routes.len() >= 15,
        "the router's routes were not found: {routes:?}"
    );
    for route in routes.iter().filter(|r| r.as_str() != "/") {
        assert!(
            readme.contains(&format!(" {route}`")),
            "README.md does not name the route {route}"
        );
    }
}
