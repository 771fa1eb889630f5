//! llama.cpp's backends as modules loaded at run time (the `cpu-variants` feature: llama-cpp-2's
//! `dynamic-backends`): ggml's CPU code built once per x86 instruction-set level (`x64`,
//! `sse42`, ..., `haswell`, `skylakex`, `icelake`, `zen4`, `alderlake`, `sapphirerapids`),
//! each a `libggml-cpu-<variant>` module, and a GPU backend (`libggml-vulkan`) as one more.
//! [`load`] takes the best CPU variant this CPU runs (the highest `ggml_backend_score` each
//! module gives, 0 where the CPU lacks an instruction it was built for: what ggml itself asks),
//! then each GPU module; a GPU module that does not load (no Vulkan driver on the machine) is
//! named, and the engine runs on the CPU.
//!
//! Ours rather than ggml's `ggml_backend_load_all`: that one also searches the current
//! directory (a module planted there would be loaded), does not say which CPU variant it took,
//! and in a release build says nothing when a GPU module fails to load.
//!
//! A build without the feature has one CPU code, linked in ([`CpuCode::BuiltIn`]).

// Without `cpu-variants` (`--no-default-features`: the MSVC workflow's build) the folder search
// is unused.
#![cfg_attr(not(feature = "cpu-variants"), allow(dead_code))]

use std::path::{Path, PathBuf};

/// Where the modules were found and what was loaded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Modules {
    /// The CPU code the engine runs.
    pub cpu: CpuCode,
    /// GPU modules present that did not load, with the system's reason
    /// (`vulkan: libvulkan.so.1: cannot open shared object file ...`).
    pub not_loaded: Vec<String>,
}

/// The CPU code in use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CpuCode {
    /// A build without `cpu-variants`: ggml's CPU code linked into the program, for the
    /// instruction sets it was built with.
    BuiltIn,
    /// The variant loaded (`zen4`), from the folder, out of those it holds.
    Variant {
        name: String,
        dir: PathBuf,
        of: Vec<String>,
    },
}

impl CpuCode {
    /// The variant's name; `built-in` for a build without variants.
    pub fn name(&self) -> &str {
        match self {
            Self::BuiltIn => "built-in",
            Self::Variant { name, .. } => name,
        }
    }
}

/// The environment variable naming the modules' folder, ahead of the places searched
/// ([`candidate_dirs`]): for packagers, and for the tests of what a CPU below every variant
/// sees.
pub const DIR_VAR: &str = "STRATA_BACKENDS_DIR";

/// The GPU backends a build may carry as modules, by ggml's module name.
const GPU_MODULES: &[&str] = &["vulkan", "cuda"];

/// `cpu_code`'s word for "the best variant this CPU runs".
pub const AUTO: &str = "auto";

/// Loads the modules once per process with the best CPU variant (the app's vocabulary-only
/// tokenizer); later calls return the first outcome.
pub fn load() -> Result<&'static Modules, String> {
    load_as(AUTO)
}

/// Loads the modules once per process with the CPU variant `cpu_code` names (`auto` or empty:
/// the best this CPU runs): the engine worker, told by the host which one
/// ([`crate::engine::cpu_code`] passes over those that crashed here). Later calls return the
/// first outcome.
pub fn load_as(cpu_code: &str) -> Result<&'static Modules, String> {
    static LOADED: std::sync::OnceLock<Result<Modules, String>> = std::sync::OnceLock::new();
    LOADED
        .get_or_init(|| load_now(cpu_code))
        .as_ref()
        .map_err(Clone::clone)
}

#[cfg(not(feature = "cpu-variants"))]
fn load_now(cpu_code: &str) -> Result<Modules, String> {
    if !is_auto(cpu_code) && cpu_code != CpuCode::BuiltIn.name() {
        return Err(format!(
            "cpu_code {cpu_code:?}: this build has one CPU code, built in (use `auto`)"
        ));
    }
    Ok(Modules {
        cpu: CpuCode::BuiltIn,
        not_loaded: Vec::new(),
    })
}

/// Whether `cpu_code` asks for the best variant.
pub fn is_auto(cpu_code: &str) -> bool {
    let code = cpu_code.trim();
    code.is_empty() || code.eq_ignore_ascii_case(AUTO)
}

#[cfg(feature = "cpu-variants")]
fn load_now(cpu_code: &str) -> Result<Modules, String> {
    let started = std::time::Instant::now();
    let dir = modules_dir()?;
    let (best, of) = if is_auto(cpu_code) {
        best_cpu_variant(&dir)?
    } else {
        named_cpu_variant(&dir, cpu_code.trim())?
    };
    register(&dir.join(module_file(&format!("cpu-{best}"))))?;
    let mut not_loaded = Vec::new();
    for gpu in GPU_MODULES {
        let path = dir.join(module_file(gpu));
        if !path.exists() {
            continue;
        }
        if let Err(why) = open(&path).and_then(|_| register(&path)) {
            tracing::warn!("the {gpu} backend did not load: {why}; the engine can use the CPU");
            not_loaded.push(format!("{gpu}: {why}"));
        }
    }
    tracing::info!(
        "llama.cpp's CPU code: {best} (of {}) from {}, loaded in {} ms",
        of.join(", "),
        dir.display(),
        started.elapsed().as_millis()
    );
    Ok(Modules {
        cpu: CpuCode::Variant {
            name: best,
            dir,
            of,
        },
        not_loaded,
    })
}

/// The CPU variants this CPU runs, best first (by each module's own score), and every variant
/// the build carries: what `cpu_code: auto` chooses from. Empty lists for a build without
/// variants.
pub fn ranked_cpu_variants() -> Result<(Vec<String>, Vec<String>), String> {
    #[cfg(feature = "cpu-variants")]
    {
        ranked_in(&modules_dir()?)
    }
    #[cfg(not(feature = "cpu-variants"))]
    {
        Ok((Vec::new(), Vec::new()))
    }
}

/// The variants in `dir` this CPU runs, best first (the highest score; a tie keeps the names'
/// order), and every variant there.
#[cfg(feature = "cpu-variants")]
fn ranked_in(dir: &Path) -> Result<(Vec<String>, Vec<String>), String> {
    let all = variants_in(dir);
    let mut scored = Vec::new();
    for variant in &all {
        let score = score(&dir.join(module_file(&format!("cpu-{variant}"))))?;
        if score > 0 {
            scored.push((score, variant.clone()));
        }
    }
    // stable: equal scores stay in the names' order
    scored.sort_by_key(|(score, _)| std::cmp::Reverse(*score));
    Ok((scored.into_iter().map(|(_, v)| v).collect(), all))
}

/// The variants the build carries (`cpu_code` takes one of these names, or `auto`).
pub fn carried_cpu_variants() -> Vec<String> {
    #[cfg(feature = "cpu-variants")]
    {
        modules_dir().map(|d| variants_in(&d)).unwrap_or_default()
    }
    #[cfg(not(feature = "cpu-variants"))]
    {
        vec![CpuCode::BuiltIn.name().to_owned()]
    }
}

/// The CPU variant [`load`] would take, without loading it (`--version`).
pub fn cpu_variant_here() -> Result<String, String> {
    #[cfg(feature = "cpu-variants")]
    {
        best_cpu_variant(&modules_dir()?).map(|(best, _)| best)
    }
    #[cfg(not(feature = "cpu-variants"))]
    {
        Ok(CpuCode::BuiltIn.name().to_owned())
    }
}

/// Where modules are looked for, in order: [`DIR_VAR`], the program's folder (the Windows
/// program, a plain copy), `../lib/strata-desk` beside it (the .deb), and the folder
/// llama-cpp-sys-2's build installed them in (`cargo build`, `cargo run`).
pub fn candidate_dirs() -> Vec<PathBuf> {
    let mut dirs = Vec::new();
    if let Some(dir) = std::env::var_os(DIR_VAR) {
        dirs.push(PathBuf::from(dir));
    }
    if let Some(exe_dir) = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
    {
        let package = exe_dir.join("../lib/strata-desk");
        dirs.push(exe_dir);
        dirs.push(package);
    }
    #[cfg(feature = "cpu-variants")]
    if let Some(built) = llama_cpp_sys_2::BACKENDS_DIR {
        dirs.push(PathBuf::from(built));
    }
    dirs
}

/// A module's file name on this system: `libggml-cpu-zen4.so`, `ggml-vulkan.dll`.
fn module_file(name: &str) -> String {
    if cfg!(windows) {
        format!("ggml-{name}.dll")
    } else {
        format!("libggml-{name}.so")
    }
}

/// The variant a file name holds: `libggml-cpu-zen4.so` is `zen4`.
fn variant_of(file_name: &str) -> Option<&str> {
    let (prefix, suffix) = if cfg!(windows) {
        ("ggml-cpu-", ".dll")
    } else {
        ("libggml-cpu-", ".so")
    };
    file_name
        .strip_prefix(prefix)?
        .strip_suffix(suffix)
        .filter(|v| !v.is_empty())
}

/// The variants a folder holds, sorted by name.
fn variants_in(dir: &Path) -> Vec<String> {
    let mut found: Vec<String> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| variant_of(&e.file_name().to_string_lossy()).map(str::to_owned))
        .collect();
    found.sort();
    found
}

/// The folder the CPU variants are loaded from (`None`: a build without them, or none found).
pub fn modules_dir_here() -> Option<PathBuf> {
    if cfg!(feature = "cpu-variants") {
        modules_dir().ok()
    } else {
        None
    }
}

/// The first candidate folder that holds a CPU variant.
fn modules_dir() -> Result<PathBuf, String> {
    let dirs = candidate_dirs();
    dirs.iter()
        .find(|d| !variants_in(d).is_empty())
        .cloned()
        .ok_or_else(|| {
            format!(
                "llama.cpp's CPU code ({}) is in none of these folders: {}; reinstall \
                 Strata Desk, or name the folder in {DIR_VAR}",
                module_file("cpu-<variant>"),
                dirs.iter()
                    .map(|d| d.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        })
}

/// The best-scoring CPU variant in `dir`, and every variant there. An error names the
/// variants when this CPU runs none of them.
#[cfg(feature = "cpu-variants")]
fn best_cpu_variant(dir: &Path) -> Result<(String, Vec<String>), String> {
    let (ranked, variants) = ranked_in(dir)?;
    match ranked.into_iter().next() {
        Some(best) => Ok((best, variants)),
        None => Err(format!(
            "this CPU lacks an instruction set that each of llama.cpp's CPU variants here needs \
             ({} in {}): no engine can run on it",
            variants.join(", "),
            dir.display()
        )),
    }
}

/// The variant `name` (`cpu_code`), and every variant in `dir`: refused with the list when
/// the build lacks it, and with the reason when this CPU cannot run it (an illegal
/// instruction otherwise).
#[cfg(feature = "cpu-variants")]
fn named_cpu_variant(dir: &Path, name: &str) -> Result<(String, Vec<String>), String> {
    let variants = variants_in(dir);
    if !variants.iter().any(|v| v == name) {
        return Err(format!(
            "cpu_code {name:?} is not a CPU variant of this build: `auto` or one of {}",
            variants.join(", ")
        ));
    }
    if score(&dir.join(module_file(&format!("cpu-{name}"))))? <= 0 {
        return Err(format!(
            "cpu_code {name:?}: this CPU lacks an instruction set that variant needs; use \
             `auto` or another of {}",
            variants.join(", ")
        ));
    }
    Ok((name.to_owned(), variants))
}

/// Opens a module and closes it again: the system's reason when it cannot be loaded.
#[cfg(feature = "cpu-variants")]
#[allow(unsafe_code)]
fn open(path: &Path) -> Result<libloading::Library, String> {
    // SAFETY: a ggml module's load-time initialisers only register static data; the same file
    // is what ggml itself would load.
    unsafe { libloading::Library::new(path) }.map_err(|e| {
        // On Windows the system's reason is the error's source ("The specified module could not
        // be found": no vulkan-1.dll, no Vulkan driver); dlopen's is in the error itself.
        match std::error::Error::source(&e) {
            Some(why) => format!("{e}: {why}"),
            None => e.to_string(),
        }
    })
}

/// The module's own `ggml_backend_score` (0: this CPU lacks an instruction it needs).
#[cfg(feature = "cpu-variants")]
#[allow(unsafe_code)]
fn score(path: &Path) -> Result<i32, String> {
    let library = open(path)?;
    // SAFETY: ggml's backend modules export `int ggml_backend_score(void)` (GGML_BACKEND_DL's
    // ABI, ggml-backend-dl.h); it reads cpuid and nothing else.
    unsafe {
        let score: libloading::Symbol<unsafe extern "C" fn() -> std::os::raw::c_int> = library
            .get(b"ggml_backend_score\0")
            .map_err(|e| format!("{}: {e}", path.display()))?;
        Ok(score())
    }
}

/// Registers a module with ggml's backend registry.
#[cfg(feature = "cpu-variants")]
#[allow(unsafe_code)]
fn register(path: &Path) -> Result<(), String> {
    let c_path = std::ffi::CString::new(path.to_string_lossy().as_bytes())
        .map_err(|_| format!("{}: a NUL in the path", path.display()))?;
    // SAFETY: a valid C string; ggml keeps the module loaded for the process's life.
    let reg = unsafe { llama_cpp_sys_2::ggml_backend_load(c_path.as_ptr()) };
    if reg.is_null() {
        // The file loaded, its backend did not start: for a GPU backend, no device it can use
        // (Vulkan's "Vulkan 1.2 required" without a graphics driver), said in ggml's log.
        Err(format!(
            "{} loaded, but its backend did not start (no usable device: ggml's log says why)",
            path.display()
        ))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_variant_is_read_from_a_module_file_name_and_nothing_else_is() {
        let file = module_file("cpu-zen4");
        assert_eq!(variant_of(&file), Some("zen4"));
        assert_eq!(variant_of(&module_file("vulkan")), None);
        assert_eq!(variant_of(&module_file("cpu-")), None);
        assert_eq!(variant_of("libggml-cpu-zen4.so.1"), None);
    }

    #[test]
    fn the_program_folder_comes_before_the_package_folder_and_the_build_folder() {
        let dirs = candidate_dirs();
        let exe_dir = std::env::current_exe().unwrap();
        let exe_dir = exe_dir.parent().unwrap();
        let at = |d: &Path| dirs.iter().position(|x| x == d);
        let program = at(exe_dir).expect("the program's folder");
        let package = at(&exe_dir.join("../lib/strata-desk")).expect("the package's folder");
        assert!(program < package, "{dirs:?}");
        if cfg!(feature = "cpu-variants") {
            assert_eq!(dirs.len(), package + 2, "the build's folder last: {dirs:?}");
        }
    }
}
