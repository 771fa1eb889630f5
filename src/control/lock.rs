//! The instance lock: one app per config file (two would write the same file and fight over
//! the port). A second start asks the app that holds it to bring its window to the front,
//! over a loopback socket whose port the holder writes beside the lock file; where it cannot
//! (no window there, or an older app), it names the process that holds it.

use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::time::Duration;

#[derive(Debug, thiserror::Error)]
pub enum LockError {
    #[error(
        "another Strata Desk (process {pid}) is running with this config ({path}); close it first"
    )]
    AlreadyRunning {
        pid: String,
        path: String,
        /// Where the holder says which port takes a request to show its window.
        show_file: PathBuf,
    },
    #[error("cannot lock {path}: {source}")]
    Lock {
        path: String,
        source: std::io::Error,
    },
}

/// What a second start sends, and the holder's answer once its window was asked to show.
const SHOW: &str = "show";
const SHOWN: &str = "shown";
/// A request or its answer takes no longer than this.
const EXCHANGE_TIMEOUT: Duration = Duration::from_secs(3);

/// Holds the instance lock for a config while the app runs.
pub struct InstanceLock {
    _file: std::fs::File,
    show_file: PathBuf,
}

impl std::fmt::Debug for InstanceLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InstanceLock")
            .field("show_file", &self.show_file)
            .finish_non_exhaustive()
    }
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
    let show_file = dir.join(format!("instance-{digest}.show"));
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
            show_file,
        });
    }
    // a crashed holder's port is no one's now
    let _ = std::fs::remove_file(&show_file);
    file.set_len(0).map_err(lock_err)?;
    write!(file, "{}", std::process::id()).map_err(lock_err)?;
    Ok(InstanceLock {
        _file: file,
        show_file,
    })
}

impl InstanceLock {
    /// Takes a second start's requests to show the window: `show` runs for each, on a thread
    /// of its own. The port listens on loopback only; it is written beside the lock file.
    pub fn serve_show_requests(
        &self,
        show: impl Fn() + Send + 'static,
    ) -> Result<(), std::io::Error> {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))?;
        let port = listener.local_addr()?.port();
        std::thread::Builder::new()
            .name("show-requests".into())
            .spawn(move || {
                for stream in listener.incoming().flatten() {
                    if answer(stream, &show).is_err() {
                        tracing::debug!("a request to show the window did not read as one");
                    }
                }
            })?;
        std::fs::write(&self.show_file, port.to_string())
    }
}

fn answer(stream: TcpStream, show: &impl Fn()) -> Result<(), std::io::Error> {
    stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
    let mut line = String::new();
    BufReader::new(&stream).take(64).read_line(&mut line)?;
    if line.trim() != SHOW {
        return Err(std::io::Error::other("not a request to show"));
    }
    show();
    tracing::info!("a second start asked for the window: brought to the front");
    writeln!(&stream, "{SHOWN}")
}

impl Drop for InstanceLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.show_file);
    }
}

impl LockError {
    /// Asks the app that holds the lock to bring its window to the front; `Err` says why not
    /// (it shows no window, or did not answer).
    pub fn ask_holder_to_show(&self) -> Result<(), String> {
        let Self::AlreadyRunning { show_file, .. } = self else {
            return Err("no app holds the lock".to_owned());
        };
        let port: u16 = std::fs::read_to_string(show_file)
            .map_err(|e| format!("it takes no requests to show its window ({e})"))?
            .trim()
            .parse()
            .map_err(|e| format!("{}: {e}", show_file.display()))?;
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
        let exchange = || -> Result<String, std::io::Error> {
            let mut stream = TcpStream::connect_timeout(&addr, EXCHANGE_TIMEOUT)?;
            stream.set_read_timeout(Some(EXCHANGE_TIMEOUT))?;
            writeln!(stream, "{SHOW}")?;
            let mut answer = String::new();
            BufReader::new(&stream).read_line(&mut answer)?;
            Ok(answer)
        };
        match exchange() {
            Ok(answer) if answer.trim() == SHOWN => Ok(()),
            Ok(answer) => Err(format!("it answered {:?}", answer.trim())),
            Err(e) => Err(format!("it did not answer on {addr}: {e}")),
        }
    }
}
