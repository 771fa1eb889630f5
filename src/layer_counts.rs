//! The project counts itself (issue #63, item 6): over the source text, (a) imports that run
//! up a floor of docs/ARCHITECTURE.md's order, (b) cycles across folders, (c) functions
//! longer than 80 lines. (a) and (b) are held at 0; (c) at no more than [`LONG_FNS_MAX`],
//! which goes down as functions are split.
//!
//! Read by hand rather than with `syn`: the counts need only comments, string literals and
//! braces told apart, and a lexer of that much is shorter than a parser's dependency.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The floors of `src/`, top first (docs/ARCHITECTURE.md, "Floors", has the same table). A
/// part may mention a part on its own floor or below; a mention of one above it runs up a
/// floor. Every top-level part of `src/` (a folder or a `.rs` file) has a floor here.
pub(crate) const FLOORS: &[&[&str]] = &[
    // the binary, its commands and the crate's own checks
    &[
        "main",
        "lib",
        "cli",
        "generate",
        "bench",
        "console",
        "docs_facts",
        "layer_rules",
        "layer_counts",
    ],
    &["gui"],
    &["server"],
    &["api"],
    &["control"],
    &["models"],
    &["service", "engine_worker"],
    &["engine", "tokenizer", "grammar", "metrics"],
    &["config", "chat"],
    &["machine"],
];

/// Functions longer than 80 lines, at most: the count measured when the counter came (issue
/// #63); lower it as functions are split, never raise it.
const LONG_FNS_MAX: usize = 82;

/// Longer than this many lines is a long function.
const LONG_FN_LINES: usize = 80;

/// The floor of a part (0 is the top).
fn floor_of(part: &str) -> Option<usize> {
    FLOORS.iter().position(|floor| floor.contains(&part))
}

/// The text with every comment and the inside of every string and character literal made
/// spaces (newlines kept, so lines keep their numbers): what is left is code.
pub(crate) fn code_only(text: &str) -> String {
    let c: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < c.len() {
        // a literal may start here only where an identifier does not go on (`r#"`, not `for"`)
        let starts = i == 0 || !ident(c[i - 1]) || (c[i - 1] == 'b' && (i < 2 || !ident(c[i - 2])));
        i = match c[i] {
            '/' if c.get(i + 1) == Some(&'/') => line_comment(&c, i, &mut out),
            '/' if c.get(i + 1) == Some(&'*') => block_comment(&c, i, &mut out),
            'r' if starts && matches!(c.get(i + 1), Some('"' | '#')) => raw_string(&c, i, &mut out),
            '"' => string(&c, i, &mut out),
            '\'' if starts => char_literal(&c, i, &mut out),
            other => {
                out.push(other);
                i + 1
            }
        };
    }
    out
}

fn ident(ch: char) -> bool {
    ch.is_alphanumeric() || ch == '_'
}

fn blank(ch: char) -> char {
    if ch == '\n' { '\n' } else { ' ' }
}

/// `// ...` to the end of its line; the index after it.
fn line_comment(c: &[char], mut i: usize, out: &mut String) -> usize {
    while i < c.len() && c[i] != '\n' {
        out.push(' ');
        i += 1;
    }
    i
}

/// `/* ... */`, nested as Rust nests them.
fn block_comment(c: &[char], mut i: usize, out: &mut String) -> usize {
    let mut depth = 0;
    while i < c.len() {
        if c[i] == '/' && c.get(i + 1) == Some(&'*') {
            depth += 1;
            out.push_str("  ");
            i += 2;
        } else if c[i] == '*' && c.get(i + 1) == Some(&'/') {
            depth -= 1;
            out.push_str("  ");
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            out.push(blank(c[i]));
            i += 1;
        }
    }
    i
}

/// `r"..."` or `r#"..."#` (any number of `#`); an `r` that starts none is itself.
fn raw_string(c: &[char], i: usize, out: &mut String) -> usize {
    let mut j = i + 1;
    while c.get(j) == Some(&'#') {
        j += 1;
    }
    if c.get(j) != Some(&'"') {
        out.push(c[i]);
        return i + 1;
    }
    let hashes = j - i - 1;
    out.extend(&c[i..=j]);
    let mut i = j + 1;
    while i < c.len() {
        if c[i] == '"' && (1..=hashes).all(|k| c.get(i + k) == Some(&'#')) {
            out.extend(&c[i..=i + hashes]);
            return i + hashes + 1;
        }
        out.push(blank(c[i]));
        i += 1;
    }
    i
}

/// `"..."` with its escapes.
fn string(c: &[char], mut i: usize, out: &mut String) -> usize {
    out.push('"');
    i += 1;
    while i < c.len() && c[i] != '"' {
        if c[i] == '\\' {
            out.push(' ');
            i += 1;
        }
        if i < c.len() {
            out.push(blank(c[i]));
            i += 1;
        }
    }
    out.push('"');
    i + 1
}

/// A character literal (`'x'`, `'\n'`, `'\u{1F600}'`), else the `'` of a lifetime or a label.
fn char_literal(c: &[char], i: usize, out: &mut String) -> usize {
    let end = if c.get(i + 1) == Some(&'\\') {
        (i + 3..c.len()).find(|&j| c[j] == '\'')
    } else {
        (c.get(i + 2) == Some(&'\'')).then_some(i + 2)
    };
    out.push('\'');
    match end {
        Some(end) => {
            out.extend(std::iter::repeat_n(' ', end - i - 1));
            out.push('\'');
            end + 1
        }
        None => i + 1,
    }
}

/// The code with every test-only module block (`#[cfg(test)] mod name { ... }`) made spaces.
/// Test code may use what lies above its part, as a crate's dev-dependencies may: it is not in
/// the program's graph. (Test-only files, `#[cfg(test)] mod name;`, are left out by
/// [`program_files`].)
fn without_test_blocks(code: &str) -> String {
    let mut out: Vec<char> = code.chars().collect();
    let text: String = out.iter().collect();
    let mut from = 0;
    while let Some(at) = text[from..].find("#[cfg(test)]").map(|p| p + from) {
        from = at + 1;
        let rest = text[at + "#[cfg(test)]".len()..].trim_start();
        if !rest.starts_with("mod ") {
            continue;
        }
        let (Some(open), Some(semi)) = (text[at..].find('{'), text[at..].find(';')) else {
            continue;
        };
        if semi < open {
            continue;
        }
        let chars_before = text[..at + open].chars().count();
        if let Some(close) = matching_brace(&out, chars_before) {
            let start = text[..at].chars().count();
            for ch in &mut out[start..=close] {
                if *ch != '\n' {
                    *ch = ' ';
                }
            }
        }
    }
    out.into_iter().collect()
}

/// The index of the `}` that closes the `{` at `open`.
fn matching_brace(c: &[char], open: usize) -> Option<usize> {
    let mut depth = 0usize;
    for (j, &ch) in c.iter().enumerate().skip(open) {
        match ch {
            '{' => depth += 1,
            '}' => {
                depth -= 1;
                if depth == 0 {
                    return Some(j);
                }
            }
            _ => {}
        }
    }
    None
}

/// The parts of the crate a piece of code mentions, by line (1-based): `crate::x`, and each
/// name of a group `crate::{x, y::z}` (over lines too). Only names in `parts` count (not
/// `crate::protocol`, a re-export of another crate). A path through `super::` out of a part
/// is not followed (none exists).
fn mentioned_parts(code: &str, parts: &BTreeSet<String>) -> Vec<(usize, String)> {
    let c: Vec<char> = code.chars().collect();
    let name_at = |from: usize| -> String {
        let from = (from..c.len())
            .find(|&j| !c[j].is_whitespace())
            .unwrap_or(c.len());
        c[from..].iter().take_while(|&&ch| ident(ch)).collect()
    };
    let line_at = |i: usize| c[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let needle: Vec<char> = "crate::".chars().collect();
    let mut found = Vec::new();
    let mut i = 0;
    while i + needle.len() <= c.len() {
        if c[i..i + needle.len()] != needle[..] || (i > 0 && ident(c[i - 1])) {
            i += 1;
            continue;
        }
        let at = i;
        i += needle.len();
        let mut names = Vec::new();
        if c.get(i) == Some(&'{') {
            // each item at the group's first depth
            names.push(name_at(i + 1));
            let mut depth = 0;
            for (j, &ch) in c.iter().enumerate().skip(i) {
                match ch {
                    '{' => depth += 1,
                    '}' => {
                        depth -= 1;
                        if depth == 0 {
                            break;
                        }
                    }
                    ',' if depth == 1 => names.push(name_at(j + 1)),
                    _ => {}
                }
            }
        } else {
            names.push(name_at(i));
        }
        for name in names {
            if parts.contains(&name) {
                found.push((line_at(at), name));
            }
        }
    }
    found
}

/// A source file of a part: its path and its text.
pub(crate) struct Source {
    pub part: String,
    pub path: String,
    pub text: String,
}

/// Mentions that run up a floor, as `part -> part (path:line)`; a part with no floor is one
/// too (`no floor`).
pub(crate) fn up_floor(sources: &[Source]) -> Vec<String> {
    let parts: BTreeSet<String> = sources.iter().map(|s| s.part.clone()).collect();
    let mut found = Vec::new();
    for part in &parts {
        if floor_of(part).is_none() {
            found.push(format!("{part}: no floor in FLOORS"));
        }
    }
    for s in sources {
        let code = without_test_blocks(&code_only(&s.text));
        let Some(from) = floor_of(&s.part) else {
            continue;
        };
        let mut seen = BTreeSet::new();
        for (line, to) in mentioned_parts(&code, &parts) {
            if floor_of(&to).is_some_and(|f| f < from) && seen.insert((line, to.clone())) {
                found.push(format!("{} -> {to} ({}:{line})", s.part, s.path));
            }
        }
    }
    found
}

/// The part graph: which parts each part mentions (itself left out).
fn part_graph(sources: &[Source]) -> BTreeMap<String, BTreeSet<String>> {
    let parts: BTreeSet<String> = sources.iter().map(|s| s.part.clone()).collect();
    let mut graph: BTreeMap<String, BTreeSet<String>> =
        parts.iter().map(|p| (p.clone(), BTreeSet::new())).collect();
    for s in sources {
        let code = without_test_blocks(&code_only(&s.text));
        for (_, to) in mentioned_parts(&code, &parts) {
            if to != s.part {
                graph.get_mut(&s.part).unwrap().insert(to);
            }
        }
    }
    graph
}

/// The cycles across folders: the strongly connected components of more than one part of the
/// part graph (parts that reach each other, directly or through a chain), each sorted.
pub(crate) fn cycles(sources: &[Source]) -> Vec<Vec<String>> {
    let graph = part_graph(sources);
    // what each part reaches (a few dozen parts: a search from each is plenty)
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(p) = stack.pop() {
            for next in &graph[&p] {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|p| (p, reach(p))).collect();
    let mut placed = BTreeSet::new();
    let mut found = Vec::new();
    for p in graph.keys() {
        if placed.contains(p) {
            continue;
        }
        let component: Vec<String> = graph
            .keys()
            .filter(|q| *q == p || (reaches[p].contains(*q) && reaches[*q].contains(p)))
            .cloned()
            .collect();
        placed.extend(component.iter().cloned());
        if component.len() > 1 {
            found.push(component);
        }
    }
    found
}

/// The functions of a file longer than [`LONG_FN_LINES`], as (`path:line name`, lines). A
/// function is counted from the line of its `fn` to the line of its closing brace, inclusive
/// (its attributes and doc comment are not); braces are matched in the code with comments
/// and literals blanked. A declaration without a body (`fn f();`) and a function-pointer
/// type (`fn(u32)`) are not functions; a function inside another counts on its own too.
pub(crate) fn long_fns(path: &str, text: &str) -> Vec<(String, usize)> {
    let code: Vec<char> = code_only(text).chars().collect();
    let line_at = |i: usize| code[..i].iter().filter(|&&ch| ch == '\n').count() + 1;
    let mut found = Vec::new();
    let mut i = 0;
    while i + 2 < code.len() {
        let is_fn = code[i] == 'f'
            && code[i + 1] == 'n'
            && code[i + 2].is_whitespace()
            && (i == 0 || !ident(code[i - 1]));
        if !is_fn {
            i += 1;
            continue;
        }
        let mut j = i + 2;
        while j < code.len() && code[j].is_whitespace() {
            j += 1;
        }
        let name: String = code[j..].iter().take_while(|&&ch| ident(ch)).collect();
        if name.is_empty() {
            i += 2;
            continue;
        }
        // the body's `{`, or a `;` first (no body); `[u8; 4]` in a signature is not its end
        let mut depth = 0i32;
        let mut open = None;
        for (k, &ch) in code.iter().enumerate().skip(j) {
            match ch {
                '(' | '[' => depth += 1,
                ')' | ']' => depth -= 1,
                ';' if depth == 0 => break,
                '{' if depth == 0 => {
                    open = Some(k);
                    break;
                }
                _ => {}
            }
        }
        if let Some(close) = open.and_then(|open| matching_brace(&code, open)) {
            let lines = line_at(close) - line_at(i) + 1;
            if lines > LONG_FN_LINES {
                found.push((format!("{path}:{} {name}", line_at(i)), lines));
            }
        }
        i += 2;
    }
    found
}

/// Every `.rs` file under `dir`.
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() && !path.ends_with("target") {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The files of `src/` that are in the program (not a test-only file: one its parent declares
/// `#[cfg(test)] mod name;`), each with its top-level part.
fn program_files() -> Vec<Source> {
    let src = root().join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect();
    // the test-only modules, as (folder, name)
    let mut test_only = BTreeSet::new();
    for (file, text) in &texts {
        let code = code_only(text);
        let lines: Vec<&str> = code.lines().map(str::trim).collect();
        for pair in lines.windows(2) {
            let declared = pair[1]
                .strip_prefix("mod ")
                .or(pair[1].strip_prefix("pub mod "));
            if pair[0] == "#[cfg(test)]"
                && let Some(name) = declared.and_then(|d| d.strip_suffix(';'))
            {
                test_only.insert((file.parent().unwrap().to_path_buf(), name.to_owned()));
            }
        }
    }
    texts
        .into_iter()
        .filter(|(file, _)| {
            let name = file.file_stem().unwrap().to_string_lossy().into_owned();
            !test_only.contains(&(file.parent().unwrap().to_path_buf(), name))
        })
        .map(|(file, text)| {
            let relative = file.strip_prefix(&src).unwrap();
            let first = relative.components().next().unwrap().as_os_str();
            let part = first.to_string_lossy().trim_end_matches(".rs").to_owned();
            Source {
                part,
                path: format!("src/{}", relative.display()),
                text,
            }
        })
        .collect()
}

#[test]
fn no_import_runs_up_a_floor() {
    let found = up_floor(&program_files());
    assert!(
        found.is_empty(),
        "{} imports run up a floor of docs/ARCHITECTURE.md's order:\n{}",
        found.len(),
        found.join("\n")
    );
}

#[test]
fn no_cycle_runs_across_folders() {
    let found = cycles(&program_files());
    let words: Vec<String> = found.iter().map(|c| c.join(" <-> ")).collect();
    assert!(
        found.is_empty(),
        "{} cycles across folders (parts that mention each other, directly or through a chain):\n{}",
        found.len(),
        words.join("\n")
    );
}

#[test]
fn no_more_functions_are_over_80_lines_than_counted() {
    let mut files = Vec::new();
    for dir in ["src", "crates", "tests", "benches"] {
        if root().join(dir).is_dir() {
            rust_files(&root().join(dir), &mut files);
        }
    }
    let mut long = Vec::new();
    for file in files {
        let path = file.strip_prefix(root()).unwrap().display().to_string();
        long.extend(long_fns(&path, &std::fs::read_to_string(&file).unwrap()));
    }
    long.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
    let words: Vec<String> = long
        .iter()
        .map(|(f, n)| format!("{n:>4} lines  {f}"))
        .collect();
    assert!(
        long.len() <= LONG_FNS_MAX,
        "{} functions are over {LONG_FN_LINES} lines, more than LONG_FNS_MAX ({LONG_FNS_MAX}); split one, \
         longest first:\n{}",
        long.len(),
        words.join("\n")
    );
}

/// Sources given as text, for the tests of the counter itself.
fn planted(files: &[(&str, &str)]) -> Vec<Source> {
    files
        .iter()
        .map(|(path, text)| Source {
            part: path.split(['/', '.']).next().unwrap().to_owned(),
            path: format!("src/{path}"),
            text: (*text).to_owned(),
        })
        .collect()
}

#[test]
fn the_counter_finds_a_planted_up_floor_import_and_a_planted_cycle() {
    let sources = planted(&[
        // control is below api: this runs up; the comment and the string do not count
        (
            "control/mod.rs",
            "// crate::gui in a comment\nuse crate::api::Prompts;\nconst S: &str = \"crate::server\";\n",
        ),
        ("api/mod.rs", "use crate::{control::Control, service};\n"),
        (
            "service/mod.rs",
            "#[cfg(test)]\nmod tests {\n    use crate::api::X;\n}\n",
        ),
    ]);
    assert_eq!(
        up_floor(&sources),
        ["control -> api (src/control/mod.rs:2)"]
    );
    assert_eq!(
        cycles(&sources),
        [vec!["api".to_owned(), "control".to_owned()]]
    );
    // through a chain: models -> service -> engine_worker -> models
    let chain = planted(&[
        ("models/a.rs", "use crate::service::S;"),
        ("service.rs", "fn f() { crate::engine_worker::g() }"),
        ("engine_worker/b.rs", "use crate::models::M;"),
        ("machine.rs", "fn lone() {}"),
    ]);
    assert_eq!(cycles(&chain), [vec!["engine_worker", "models", "service"]]);
    // a part with no floor is said
    let unknown = planted(&[("newpart.rs", "fn f() {}")]);
    assert_eq!(up_floor(&unknown), ["newpart: no floor in FLOORS"]);
}

#[test]
fn the_counter_measures_a_function_from_its_fn_line_to_its_closing_brace() {
    let body = "    let s = \"}\"; // }\n".repeat(80);
    let text = format!(
        "/// doc\n#[inline]\nfn long(x: [u8; 4]) -> u8 {{\n{body}    x[0]\n}}\n\
         trait T {{ fn declared(&self); }}\nfn short() {{ let f: fn(u8) = |_| {{}}; }}\n\
         fn lifetimes<'a>(c: &'a str) -> char {{ '{{' }}\n"
    );
    // 1 line of `fn`, 80 of body, the tail expression and the closing brace
    assert_eq!(long_fns("x.rs", &text), [("x.rs:3 long".to_owned(), 83)]);
    assert!(long_fns("x.rs", "fn fine() {\n}\n").is_empty());
}
