//! Link fix for the x86_64-pc-windows-gnu (MinGW) target's static build (without `cpu-variants`,
//! `--no-default-features`); nothing on other targets. (With `cpu-variants`, the Windows
//! program's build, llama.cpp is DLLs whose import libraries, `lib*.dll.a`, llama-cpp-sys-2
//! links itself; scripts/windows/cross-build.sh puts the DLLs beside the program.)
//!
//! There ggml's CMake names its archives `ggml.a`, `ggml-base.a`, `ggml-cpu.a` (no `lib`
//! prefix), and llama-cpp-sys-2's build script links only the `lib*.a` it finds, so every
//! ggml symbol is undefined at the final link. We link them by their file names from the
//! search path llama-cpp-sys-2 already gives. `+whole-archive`: our crate's libraries come
//! before llama-cpp-sys-2's on the link line, and GNU ld takes from an archive only what is
//! already wanted, so the archives are taken whole. With the `vulkan` feature `ggml-vulkan.a`
//! too (its loader import library, `-lvulkan-1`, comes from llama-cpp-sys-2 after it).
//!
//! And `-static` for the program, so that libgcc and winpthread come from their static
//! archives (libstdc++ too: `CXXSTDLIB` in scripts/windows/env.sh): the .exe needs only
//! Windows' own DLLs. (No libgomp: that build uses ggml's own threads, Cargo.toml says why.)
//!
//! With `cpu-variants` on Linux llama.cpp is shared libraries (libllama, libggml, libggml-base,
//! loaded by their `.so.0` names), and the program finds them by its rpath: beside it
//! (`$ORIGIN`, a plain copy with its libraries), in `$ORIGIN/../lib/strata-desk` (the .deb), and
//! in llama-cpp-sys-2's build folder (`cargo build`, `cargo run`: its hard links beside the
//! program lack the `.so.0` names). `STRATA_RELOCATABLE=1` (scripts/build-deb.sh) leaves the
//! build folder out.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    println!("cargo:rerun-if-env-changed=STRATA_RELOCATABLE");
    let cpu_variants = std::env::var_os("CARGO_FEATURE_CPU_VARIANTS").is_some();
    if target.contains("-linux-") && cpu_variants {
        let mut rpath = "$ORIGIN:$ORIGIN/../lib/strata-desk".to_owned();
        let relocatable = std::env::var("STRATA_RELOCATABLE").is_ok_and(|v| v == "1");
        // llama-cpp-sys-2's `cargo:backends_dir` (its OUT_DIR/backends); the libraries are in
        // OUT_DIR/lib
        if let Some(out_dir) = std::env::var_os("DEP_LLAMA_BACKENDS_DIR")
            .map(std::path::PathBuf::from)
            .and_then(|b| b.parent().map(|o| o.join("lib")))
            .filter(|_| !relocatable)
        {
            rpath = format!("{rpath}:{}", out_dir.display());
        }
        println!("cargo:rustc-link-arg-bins=-Wl,-rpath,{rpath}");
    }
    if target.ends_with("-windows-gnu") && !cpu_variants {
        let vulkan = std::env::var_os("CARGO_FEATURE_VULKAN").is_some();
        let backends = vulkan.then_some("ggml-vulkan.a");
        for archive in ["ggml.a", "ggml-base.a", "ggml-cpu.a"]
            .into_iter()
            .chain(backends)
        {
            println!("cargo:rustc-link-lib=static:+whole-archive,+verbatim={archive}");
        }
        println!("cargo:rustc-link-arg-bins=-static");
    }
}
