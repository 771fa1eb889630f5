//! Link fix for the x86_64-pc-windows-gnu (MinGW) target only; nothing on other targets.
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

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let target = std::env::var("TARGET").unwrap_or_default();
    if target.ends_with("-windows-gnu") {
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
