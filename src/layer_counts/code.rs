//! Code told apart from comments and literals, for the counts: hand-written (see the
//! module above), over characters, keeping every newline so that lines keep their numbers.

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

pub(super) fn ident(ch: char) -> bool {
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
pub(super) fn without_test_blocks(code: &str) -> String {
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
pub(super) fn matching_brace(c: &[char], open: usize) -> Option<usize> {
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
