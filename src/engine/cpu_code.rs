//! Which of llama.cpp's CPU variants a worker runs (`cpu_code`), and the fallback when one
//! crashes on this CPU.
//!
//! A variant that scores as runnable can still die on a CPU: on an Intel Xeon with AMX the
//! `sapphirerapids` code died of SIGILL at its first tile load, at every start (issue 60;
//! patches/llama.cpp/ggml-cpu.cmake now builds it without AMX). So with `cpu_code: auto` the
//! host, not the worker, picks the variant: the best this CPU runs ([`modules::ranked_cpu_variants`])
//! less those recorded as crashing here. The worker warms the variant up before its handshake
//! (a prompt batch and a one-token decode: `engine_worker::llama`); a worker that dies of a CPU
//! fault (SIGILL, SIGSEGV, SIGBUS; on Windows an illegal instruction or access violation) in
//! that warm-up, or in its first steps, is started again on the next variant, and the one that
//! crashed is recorded in the app's data folder ([`Record`]), keyed by the CPU's brand string,
//! its feature flags and the build, so the next start goes straight to a good one and a new
//! build probes again. A crash is recorded only once a later variant came up: a worker that
//! dies the same way on every variant is not the CPU code's fault (a broken model file), and
//! nothing is recorded.

use super::{EngineError, EngineProcess, WorkerExit, WorkerLaunch};
use crate::machine::modules;
use crate::protocol::gpu::SkippedCpuCode;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The record's file in the app's data folder.
pub const RECORD_FILE: &str = "cpu-code.json";

/// Steps after its handshake in which a worker's CPU fault is still blamed on its variant.
pub const FIRST_STEPS: u64 = 8;

/// The record's path on this machine (`~/.local/share/strata-desk/cpu-code.json`).
pub fn default_record_path() -> Option<PathBuf> {
    crate::machine::project_dirs().map(|d| d.data_dir().join(RECORD_FILE))
}

/// What a worker's end says about its CPU code: `Some(words)` for a CPU fault (an illegal
/// instruction, a bad memory access), the kind of death a variant built for instructions this
/// CPU or its system cannot run ends in.
pub fn cpu_fault(exit: &WorkerExit) -> Option<&'static str> {
    match exit {
        WorkerExit::Signal(4) => Some("illegal instruction, SIGILL"),
        WorkerExit::Signal(7) => Some("bus error, SIGBUS"),
        WorkerExit::Signal(11) => Some("invalid memory access, SIGSEGV"),
        // Windows' exception codes, as the exit code of a process they ended
        WorkerExit::Code(code) => match *code as u32 {
            0xC000_001D => Some("illegal instruction, STATUS_ILLEGAL_INSTRUCTION"),
            0xC000_0096 => Some("privileged instruction, STATUS_PRIVILEGED_INSTRUCTION"),
            0xC000_0005 => Some("invalid memory access, STATUS_ACCESS_VIOLATION"),
            _ => None,
        },
        _ => None,
    }
}

/// This CPU and this build: what a record is kept for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuKey {
    /// The CPU's brand string (`Intel(R) Xeon(R) Platinum 8488C`).
    pub cpu: String,
    /// Its feature flags: CPUID leaves 1 and 7 (sub-leaves 0 and 1), in hex.
    pub flags: String,
    /// The build: the version and a digest of the CPU variants' files (names, sizes, times).
    pub build: String,
}

impl CpuKey {
    pub fn here() -> Self {
        let (cpu, flags) = cpu_identity();
        Self {
            cpu,
            flags,
            build: build_id(),
        }
    }
}

/// The CPU's brand string and feature words, read with CPUID (the same on every system).
#[cfg(target_arch = "x86_64")]
fn cpu_identity() -> (String, String) {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    let max_extended = __cpuid(0x8000_0000).eax;
    let mut brand = Vec::new();
    if max_extended >= 0x8000_0004 {
        for leaf in 0x8000_0002u32..=0x8000_0004 {
            let r = __cpuid(leaf);
            for word in [r.eax, r.ebx, r.ecx, r.edx] {
                brand.extend_from_slice(&word.to_le_bytes());
            }
        }
    }
    let brand = String::from_utf8_lossy(&brand)
        .trim_matches(char::from(0))
        .trim()
        .to_owned();
    let max = __cpuid(0).eax;
    let leaf1 = __cpuid(1);
    let mut flags = format!("1:{:08x}{:08x}", leaf1.ecx, leaf1.edx);
    if max >= 7 {
        let l7 = __cpuid_count(7, 0);
        let l71 = __cpuid_count(7, 1);
        flags.push_str(&format!(
            " 7:{:08x}{:08x}{:08x} 7.1:{:08x}",
            l7.ebx, l7.ecx, l7.edx, l71.eax
        ));
    }
    (brand, flags)
}

#[cfg(not(target_arch = "x86_64"))]
fn cpu_identity() -> (String, String) {
    (std::env::consts::ARCH.to_owned(), String::new())
}

/// The build's id: the version, and a digest of the CPU variants' module files (a rebuilt
/// variant is a new build, which probes again).
fn build_id() -> String {
    use sha2::Digest;
    let mut digest = sha2::Sha256::new();
    if let Some(dir) = modules::modules_dir_here() {
        let mut files: Vec<_> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.file_name().to_string_lossy().contains("ggml-cpu-"))
            .collect();
        files.sort_by_key(std::fs::DirEntry::file_name);
        for file in files {
            let meta = file.metadata().ok();
            let modified = meta
                .as_ref()
                .and_then(|m| m.modified().ok())
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            digest.update(format!(
                "{} {} {modified}\n",
                file.file_name().to_string_lossy(),
                meta.map_or(0, |m| m.len())
            ));
        }
    }
    let hex: String = digest
        .finalize()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("{}+{hex}", env!("CARGO_PKG_VERSION"))
}

/// The variants that crashed, per CPU and build: `cpu-code.json` in the app's data folder.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    #[serde(default)]
    pub cpus: Vec<CpuRecord>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CpuRecord {
    #[serde(flatten)]
    pub key: CpuKey,
    /// Best first, as they were tried.
    pub crashed: Vec<SkippedCpuCode>,
}

impl Record {
    /// The record at `path`; an empty one when there is none or it cannot be read (a record
    /// only saves a probe: losing it costs a crash and a second start).
    pub fn read(path: &Path) -> Self {
        let Ok(text) = std::fs::read_to_string(path) else {
            return Self::default();
        };
        serde_json::from_str(&text).unwrap_or_else(|e| {
            tracing::warn!(
                "{}: not a CPU-code record ({e}); starting afresh",
                path.display()
            );
            Self::default()
        })
    }

    /// The variants recorded as crashing on this CPU with this build.
    pub fn crashed(&self, key: &CpuKey) -> &[SkippedCpuCode] {
        self.cpus
            .iter()
            .find(|c| &c.key == key)
            .map_or(&[], |c| c.crashed.as_slice())
    }

    /// Adds `crashed` for `key`; entries of other builds go (a new build probes again).
    pub fn add(&mut self, key: &CpuKey, crashed: &[SkippedCpuCode]) {
        self.cpus.retain(|c| c.key.build == key.build);
        match self.cpus.iter_mut().find(|c| &c.key == key) {
            Some(entry) => {
                for c in crashed {
                    if !entry.crashed.iter().any(|e| e.variant == c.variant) {
                        entry.crashed.push(c.clone());
                    }
                }
            }
            None => self.cpus.push(CpuRecord {
                key: key.clone(),
                crashed: crashed.to_vec(),
            }),
        }
    }

    /// Forgets this CPU's entry (`--cpu-code auto` on the command line).
    pub fn forget(&mut self, key: &CpuKey) -> bool {
        let before = self.cpus.len();
        self.cpus.retain(|c| &c.key != key);
        before != self.cpus.len()
    }

    pub fn write(&self, path: &Path) -> std::io::Result<()> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        // written whole, then renamed: a crash mid-write leaves the old record
        let part = path.with_extension("json.part");
        std::fs::write(&part, text)?;
        std::fs::rename(&part, path)
    }
}

/// Forgets what the record at `path` holds for this CPU and build; says whether it held
/// anything.
pub fn forget_here(path: &Path) -> std::io::Result<bool> {
    let mut record = Record::read(path);
    if !record.forget(&CpuKey::here()) {
        return Ok(false);
    }
    record.write(path)?;
    Ok(true)
}

/// The words for a variant passed over: "the sapphirerapids CPU code crashed on this CPU
/// (illegal instruction, SIGILL, while warming up)".
pub fn skipped_words(skipped: &[SkippedCpuCode], using: &str) -> String {
    if skipped.is_empty() {
        return String::new();
    }
    let each: Vec<String> = skipped
        .iter()
        .map(|s| format!("the {} CPU code {}", s.variant, s.why))
        .collect();
    format!("{}; using {using}", each.join("; "))
}

/// What the start plans to try, best first, and what it passes over already.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    /// Variants to try in turn (empty: start the worker as configured, no fallback).
    pub candidates: Vec<String>,
    /// Recorded as crashing here, passed over.
    pub recorded: Vec<SkippedCpuCode>,
}

impl Plan {
    /// With `cpu_code` auto: the variants this CPU runs (`ranked`, best first) less those
    /// recorded; when the record rules out every one, the record is ignored. A pinned variant
    /// or a build without variants: no plan.
    pub fn new(cpu_code: &str, ranked: &[String], recorded: &[SkippedCpuCode]) -> Self {
        if !modules::is_auto(cpu_code) || ranked.is_empty() {
            return Self {
                candidates: Vec::new(),
                recorded: Vec::new(),
            };
        }
        let bad = |v: &String| recorded.iter().any(|r| &r.variant == v);
        let candidates: Vec<String> = ranked.iter().filter(|v| !bad(v)).cloned().collect();
        if candidates.is_empty() {
            return Self {
                candidates: ranked.to_vec(),
                recorded: Vec::new(),
            };
        }
        let recorded = recorded
            .iter()
            .filter(|r| ranked.contains(&r.variant))
            .cloned()
            .collect();
        Self {
            candidates,
            recorded,
        }
    }
}

/// Starts a worker (one generation) on the CPU code `launch`'s `cpu_code` says: with `auto`,
/// the best variant not recorded as crashing here, and on a CPU fault before the handshake the
/// next, until one comes up (then the ones that crashed are recorded). The simulated engine
/// and a pinned variant start as they are.
pub async fn start(launch: &WorkerLaunch, generation: u64) -> Result<EngineProcess, EngineError> {
    if launch.options.fake.enabled {
        return EngineProcess::start(launch, generation).await;
    }
    let pinned = !modules::is_auto(&launch.options.cpu_code);
    let ranked = match modules::ranked_cpu_variants() {
        Ok((ranked, _)) if !pinned => ranked,
        // the worker says what is wrong (no variant runs here, a folder missing)
        _ => Vec::new(),
    };
    let key = CpuKey::here();
    let record = launch
        .cpu_record
        .as_deref()
        .map(Record::read)
        .unwrap_or_default();
    let plan = Plan::new(&launch.options.cpu_code, &ranked, record.crashed(&key));
    if plan.candidates.is_empty() {
        return EngineProcess::start(launch, generation)
            .await
            .map_err(|e| pinned_words(e, &launch.options.cpu_code));
    }
    let mut crashed: Vec<SkippedCpuCode> = Vec::new();
    let mut last_error = None;
    for (index, variant) in plan.candidates.iter().enumerate() {
        let mut attempt = launch.clone();
        attempt.options.cpu_code.clone_from(variant);
        attempt.options.cpu_code_skipped = plan.recorded.clone();
        attempt
            .options
            .cpu_code_skipped
            .extend(crashed.iter().cloned());
        match EngineProcess::start(&attempt, generation).await {
            Ok(process) => {
                if !crashed.is_empty() {
                    record_crashes(launch.cpu_record.as_deref(), &key, &crashed);
                }
                return Ok(process);
            }
            Err(EngineError::Died { exit, stderr_tail }) if cpu_fault(&exit).is_some() => {
                let words = cpu_fault(&exit).unwrap_or_default();
                let next = plan.candidates.get(index + 1);
                tracing::warn!(
                    "the {variant} CPU code crashed on this CPU ({words}) while the engine \
                     warmed up{}",
                    next.map_or_else(
                        || "; no other CPU code to try".to_owned(),
                        |n| format!("; trying {n}")
                    )
                );
                crashed.push(SkippedCpuCode {
                    variant: variant.clone(),
                    why: format!("crashed on this CPU ({words}) while the engine warmed up"),
                });
                last_error = Some(EngineError::Died { exit, stderr_tail });
            }
            Err(other) => return Err(other),
        }
    }
    // every variant crashed the same way: not the CPU code's doing; nothing is recorded
    Err(match last_error {
        Some(EngineError::Died {
            exit,
            mut stderr_tail,
        }) => {
            stderr_tail.push(format!(
                "every CPU code crashed ({}): not the CPU code's fault; the model file or \
                 llama.cpp itself",
                crashed
                    .iter()
                    .map(|c| c.variant.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
            EngineError::Died { exit, stderr_tail }
        }
        Some(other) => other,
        None => EngineError::NotRunning,
    })
}

/// A pinned variant that crashes gets a hint: the words say it was pinned.
fn pinned_words(error: EngineError, cpu_code: &str) -> EngineError {
    match error {
        EngineError::Died {
            exit,
            mut stderr_tail,
        } if !modules::is_auto(cpu_code) && cpu_fault(&exit).is_some() => {
            stderr_tail.push(format!(
                "cpu_code {cpu_code:?} (set in the config or with --cpu-code) crashed on this \
                 CPU; set it to `auto` to take the best that runs"
            ));
            EngineError::Died { exit, stderr_tail }
        }
        other => other,
    }
}

/// Records `crashed` for `key` at `path` (none: not kept), saying so in the log.
pub fn record_crashes(path: Option<&Path>, key: &CpuKey, crashed: &[SkippedCpuCode]) {
    let Some(path) = path else {
        return;
    };
    let mut record = Record::read(path);
    record.add(key, crashed);
    match record.write(path) {
        Ok(()) => tracing::warn!(
            "recorded in {}: {} (the next start goes straight to the next; `--cpu-code auto` \
             forgets it)",
            path.display(),
            crashed
                .iter()
                .map(|c| format!("{} {}", c.variant, c.why))
                .collect::<Vec<_>>()
                .join("; ")
        ),
        Err(e) => tracing::warn!(
            "could not record the crashed CPU code in {}: {e}",
            path.display()
        ),
    }
}

#[cfg(test)]
#[path = "cpu_code_tests.rs"]
mod tests;
