//! What is wrong with a model path, in the user's words: missing, not a file, unreadable, or
//! not a GGUF (checked by its four magic bytes before llama.cpp is given it, which would only
//! say that loading failed).

use std::io::Read;
use std::path::Path;

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum ModelPathError {
    #[error("the model file {0} does not exist")]
    Missing(String),
    #[error("the model path {0} is not a file (a folder?); give the .gguf file itself")]
    NotAFile(String),
    #[error("the model file {path} cannot be read: {reason}")]
    Unreadable { path: String, reason: String },
    #[error(
        "{path} is not a GGUF model (it starts with {start:?}, a GGUF with \"GGUF\"); llama.cpp \
         loads .gguf files only"
    )]
    NotGguf { path: String, start: String },
}

/// Checks that `path` names a readable GGUF file.
pub fn check_model_path(path: &Path) -> Result<(), ModelPathError> {
    let shown = path.display().to_string();
    let meta = match std::fs::metadata(path) {
        Ok(meta) => meta,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(ModelPathError::Missing(shown));
        }
        Err(e) => {
            return Err(ModelPathError::Unreadable {
                path: shown,
                reason: e.to_string(),
            });
        }
    };
    if !meta.is_file() {
        return Err(ModelPathError::NotAFile(shown));
    }
    let mut magic = [0u8; 4];
    let read = std::fs::File::open(path).and_then(|mut f| f.read(&mut magic));
    match read {
        Ok(4) if &magic == b"GGUF" => Ok(()),
        Ok(n) => Err(ModelPathError::NotGguf {
            path: shown,
            start: String::from_utf8_lossy(&magic[..n]).into_owned(),
        }),
        Err(e) => Err(ModelPathError::Unreadable {
            path: shown,
            reason: e.to_string(),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_model_path_says_which_of_missing_not_a_file_not_a_gguf_or_unreadable_it_is() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("nope.gguf");
        assert!(matches!(
            check_model_path(&missing),
            Err(ModelPathError::Missing(_))
        ));
        assert!(matches!(
            check_model_path(dir.path()),
            Err(ModelPathError::NotAFile(_))
        ));
        let text = dir.path().join("notes.gguf");
        std::fs::write(&text, "hello world").unwrap();
        let error = check_model_path(&text).unwrap_err();
        assert!(matches!(error, ModelPathError::NotGguf { .. }), "{error}");
        assert!(error.to_string().contains("\"hell\""), "{error}");
        let good = dir.path().join("tiny.gguf");
        std::fs::write(&good, b"GGUF\x03\x00\x00\x00").unwrap();
        assert_eq!(check_model_path(&good), Ok(()));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&good, std::fs::Permissions::from_mode(0o000)).unwrap();
            // root reads anything: the check is only meaningful for another user
            if std::fs::File::open(&good).is_err() {
                assert!(matches!(
                    check_model_path(&good),
                    Err(ModelPathError::Unreadable { .. })
                ));
            }
        }
    }
}
