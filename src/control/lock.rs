//! The instance lock: one app per config file (two would write the same file and fight over
//! the port). A second start names the process that holds it.

use std::path::Path;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another Strata Desk (process {pid}) is running with this config ({path}); close it first"
    )]
    AlreadyRunning { pid: String, path: String },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: String,
        source: std::io::Error,
    },
}

/// Holds the instance lock for a config while the app runs.
pub struct InstanceLock {
    _file: std::fs::File,
}

pub fn lock_instance(config_path: Option<&Path>) -> Result<InstanceLock, LockError> {
    let key = config_path.map_or_else(|| "default".to_owned(), |p| p.display().to_string());
    let digest = {
        use sha2::Digest;
        let hash = sha2::Sha256::digest(key.as_bytes());
        hash.iter()
            .take(8)
            .map(|b| format!("{b:02x}"))
            .collect::<String>()
    };
    let dir = crate::models::project_dirs()
        .map_or_else(std::env::temp_dir, |d| d.data_local_dir().to_path_buf());
    let _ = std::fs::create_dir_all(&dir);
    let path = dir.join(format!("instance-{digest}.lock"));
    let lock_err = |source| LockError::Lock {
        path: path.display().to_string(),
        source,
    };
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(&path)
        .map_err(lock_err)?;
    if file.try_lock().is_err() {
        let pid = std::fs::read_to_string(&path).unwrap_or_default();
        return Err(LockError::AlreadyRunning {
            pid: pid.trim().to_owned(),
            path: key,
        });
    }
    use std::io::Write;
    file.set_len(0).map_err(lock_err)?;
    write!(file, "{}", std::process::id()).map_err(lock_err)?;
    Ok(InstanceLock { _file: file })
}
