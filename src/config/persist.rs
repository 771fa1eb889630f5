//! Saving preferences into the config file: only the keys changed, atomically, keeping the
//! file's permissions.

use super::ConfigError;
use std::path::Path;

/// Writes `changes` into the config file at `path`, keeping every other key the file holds (in
/// its order); creates the file and its folder when missing. The text goes to a temporary file
/// beside it (tempfile: removed on any failure) with the old file's permissions (a 0600 file
/// holding `api_keys` stays 0600; a new file is 0600), is flushed to disk, renamed over the old
/// one, and the folder is flushed too, so neither a crash nor a power cut leaves half a file.
pub fn persist(
    path: &Path,
    changes: serde_json::Map<String, serde_json::Value>,
) -> Result<(), ConfigError> {
    let shown = path.display().to_string();
    let write_err = |e: std::io::Error| ConfigError::Write {
        path: shown.clone(),
        message: e.to_string(),
    };
    let mut map = match std::fs::read_to_string(path) {
        Ok(text) => match serde_json::from_str(&text) {
            Ok(serde_json::Value::Object(map)) => map,
            _ => {
                return Err(ConfigError::Parse {
                    path: shown,
                    message: "the file must hold one JSON object; not overwriting it".into(),
                });
            }
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => serde_json::Map::new(),
        Err(e) => return Err(write_err(e)),
    };
    map.extend(changes);
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir).map_err(write_err)?;
    }
    let text = serde_json::to_string_pretty(&serde_json::Value::Object(map))
        .map_err(|e| write_err(std::io::Error::other(e)))?;
    write_atomically(path, (text + "\n").as_bytes()).map_err(write_err)
}

/// `bytes` become the file at `path` whole or not at all (see [`persist`]).
fn write_atomically(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    };
    // A name of its own per write (tempfile's random suffix), so two writers never rename
    // each other's file; dropped, it is deleted.
    let mut temporary = tempfile::Builder::new()
        .prefix(".config.json.")
        .suffix(".tmp")
        .tempfile_in(dir)?;
    if let Ok(old) = std::fs::metadata(path) {
        temporary.as_file().set_permissions(old.permissions())?;
    }
    use std::io::Write as _;
    temporary.write_all(bytes)?;
    temporary.as_file().sync_all()?;
    temporary.persist(path).map_err(|e| e.error)?;
    sync_dir(dir)
}

/// Flushes a folder's entries (the rename) to disk. Windows has no such call for a folder;
/// NTFS journals the rename.
fn sync_dir(dir: &Path) -> std::io::Result<()> {
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    #[cfg(not(unix))]
    let _ = dir;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!(
            "strata-persist-{}-{}",
            std::process::id(),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos()
        ));
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn leftovers(dir: &Path) -> Vec<String> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|n| n != "config.json")
            .collect()
    }

    #[cfg(unix)]
    #[test]
    fn a_save_keeps_a_0600_file_0600_and_a_new_file_is_0600() {
        use std::os::unix::fs::PermissionsExt;
        let dir = dir();
        let path = dir.join("config.json");
        std::fs::write(&path, r#"{"api_keys": ["secret"]}"#).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        let mut changes = serde_json::Map::new();
        changes.insert("solo_priority".into(), serde_json::json!(true));
        persist(&path, changes.clone()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "the saved file is {mode:o}");
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("secret") && text.contains("solo_priority"),
            "{text}"
        );
        // A 0640 file stays 0640 (the old mode is kept, not forced).
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
        persist(&path, changes.clone()).unwrap();
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o640);
        let fresh = dir.join("new").join("config.json");
        persist(&fresh, changes).unwrap();
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        assert!(
            leftovers(&dir).iter().all(|n| n == "new"),
            "{:?}",
            leftovers(&dir)
        );
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_write_that_fails_at_the_rename_leaves_no_temporary_file() {
        let dir = dir();
        let path = dir.join("config.json");
        // A folder where the file should be: the rename over it fails after the temporary
        // file was written.
        std::fs::create_dir_all(path.join("in-the-way")).unwrap();
        let err = write_atomically(&path, b"{}\n");
        assert!(err.is_err(), "{err:?}");
        assert!(path.join("in-the-way").is_dir());
        let left = leftovers(&dir);
        assert!(left.is_empty(), "a temporary file was left: {left:?}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
