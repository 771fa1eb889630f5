//! llama.cpp's CPU code chosen at run time (`cpu-variants`, the default build): the engine
//! runs the best variant this CPU has and names it; a CPU below every variant the program
//! carries gets a message, not an illegal instruction.

use crate::support::*;
use std::collections::HashSet;
use std::path::Path;

const HASWELL: &str = "sse4_2 avx f16c fma avx2 bmi2";
const AVX512: &str = "avx512f avx512cd avx512vl avx512dq avx512bw";

/// ggml's x86 variants and the CPU flags (as Linux's /proc/cpuinfo names them) each is built
/// for: llama.cpp's ggml/src/CMakeLists.txt, `GGML_CPU_ALL_VARIANTS`, where `AVX512` is F, CD,
/// VL, DQ and BW.
fn variants() -> Vec<(&'static str, Vec<String>)> {
    let flags = |parts: &[&str]| -> Vec<String> {
        parts
            .iter()
            .flat_map(|p| p.split_whitespace())
            .map(str::to_owned)
            .collect()
    };
    vec![
        ("x64", flags(&[])),
        ("sse42", flags(&["sse4_2"])),
        ("sandybridge", flags(&["sse4_2 avx"])),
        ("ivybridge", flags(&["sse4_2 avx f16c"])),
        ("piledriver", flags(&["sse4_2 avx f16c fma"])),
        ("haswell", flags(&[HASWELL])),
        ("skylakex", flags(&[HASWELL, AVX512])),
        ("cannonlake", flags(&[HASWELL, AVX512, "avx512vbmi"])),
        ("cascadelake", flags(&[HASWELL, AVX512, "avx512_vnni"])),
        (
            "icelake",
            flags(&[HASWELL, AVX512, "avx512vbmi avx512_vnni"]),
        ),
        (
            "cooperlake",
            flags(&[HASWELL, AVX512, "avx512_vnni avx512_bf16"]),
        ),
        (
            "zen4",
            flags(&[HASWELL, AVX512, "avx512vbmi avx512_vnni avx512_bf16"]),
        ),
        ("alderlake", flags(&[HASWELL, "avx_vnni"])),
        (
            "sapphirerapids",
            flags(&[
                HASWELL,
                AVX512,
                "avx512vbmi avx512_vnni avx512_bf16 amx_tile amx_int8",
            ]),
        ),
    ]
}

/// This CPU's flags, from /proc/cpuinfo.
fn cpu_flags() -> HashSet<String> {
    let info = std::fs::read_to_string("/proc/cpuinfo").expect("/proc/cpuinfo");
    info.lines()
        .find(|l| l.starts_with("flags"))
        .and_then(|l| l.split_once(':'))
        .map(|(_, flags)| flags.split_whitespace().map(str::to_owned).collect())
        .unwrap_or_default()
}

fn runs_here(needs: &[String], here: &HashSet<String>) -> bool {
    needs.iter().all(|f| here.contains(f))
}

/// The engine's handshake names the variant it runs; that variant runs on this CPU, and no
/// variant built for a larger set of instructions that this CPU also has was passed over.
/// `--version` names the same one.
#[tokio::test]
async fn the_engine_runs_the_best_cpu_variant_this_cpu_has_and_names_it() {
    let _serial = real_model();
    let engine = start(1, 1).await;
    let d = engine.handshake().device.clone();
    drop(engine);
    if !cfg!(feature = "cpu-variants") {
        assert_eq!(d.cpu_variant, "built-in");
        return;
    }
    let table = variants();
    let known: Vec<&str> = table.iter().map(|(name, _)| *name).collect();
    let mut carried: Vec<&str> = d.cpu_variants.iter().map(String::as_str).collect();
    carried.sort_unstable();
    let mut all = known.clone();
    all.sort_unstable();
    assert_eq!(carried, all, "the build carries ggml's x86 variants");
    let here = cpu_flags();
    let needs = |name: &str| &table.iter().find(|(n, _)| *n == name).unwrap().1;
    let picked = needs(&d.cpu_variant);
    assert!(
        runs_here(picked, &here),
        "{} needs {picked:?}, not all on this CPU",
        d.cpu_variant
    );
    for (name, flags) in &table {
        let superset = flags.len() > picked.len() && picked.iter().all(|f| flags.contains(f));
        assert!(
            !(superset && runs_here(flags, &here)),
            "{} was picked, but {name} runs here and has more",
            d.cpu_variant
        );
    }
    let version = std::process::Command::new(worker_exe())
        .arg("--version")
        .output()
        .expect("--version runs");
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.contains(&format!("CPU code for this CPU: {} ", d.cpu_variant)),
        "{version}"
    );
}

/// A folder of modules of which this CPU runs none (as an old CPU sees a newer program's):
/// `--version` and the engine worker say so, and the worker exits with the message (the last
/// stderr line, which the app shows) instead of dying on an illegal instruction.
#[test]
fn a_cpu_below_every_variant_gets_a_message_not_an_illegal_instruction() {
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let here = cpu_flags();
    let Some((too_new, _)) = variants()
        .into_iter()
        .rev()
        .find(|(_, needs)| !runs_here(needs, &here))
    else {
        eprintln!("SKIPPED: this CPU runs every variant ggml builds");
        return;
    };
    let built = backends_folder(too_new);
    let dir = tempfile::tempdir().unwrap();
    let module = format!("libggml-cpu-{too_new}.so");
    std::fs::copy(built.join(&module), dir.path().join(&module)).unwrap();
    let run = |args: &[&str], dir: &Path| {
        std::process::Command::new(worker_exe())
            .args(args)
            .env("STRATA_BACKENDS_DIR", dir)
            .output()
            .expect("the program runs")
    };
    let version = run(&["--version"], dir.path());
    let text = String::from_utf8_lossy(&version.stdout);
    assert!(text.contains("CPU code: none runs here"), "{text}");
    assert!(text.contains(&format!("({too_new} in ")), "{text}");
    let model = model_path();
    let worker = run(
        &["engine-worker", "--model", model.to_str().unwrap()],
        dir.path(),
    );
    let stderr = String::from_utf8_lossy(&worker.stderr);
    assert_eq!(worker.status.code(), Some(1), "{stderr}");
    let last = stderr.lines().last().unwrap_or_default();
    assert!(
        last.contains("this CPU lacks an instruction set") && last.contains(too_new),
        "{stderr}"
    );
}

/// A GPU module that does not load (as `libggml-vulkan` on a machine without a Vulkan driver)
/// is named with the system's reason in the ready line and `/health`, and the engine runs on
/// the CPU.
#[tokio::test]
async fn a_gpu_module_that_does_not_load_is_named_and_the_engine_runs_on_the_cpu() {
    use std::io::{BufRead, BufReader};
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let _serial = real_model();
    let dir = tempfile::tempdir().unwrap();
    let built = backends_folder("haswell");
    for entry in std::fs::read_dir(&built).unwrap().flatten() {
        std::fs::copy(entry.path(), dir.path().join(entry.file_name())).unwrap();
    }
    std::fs::write(dir.path().join("libggml-vulkan.so"), "not a library").unwrap();
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let model = model_path();
    let mut server = std::process::Command::new(worker_exe())
        .args([
            "--headless",
            "--ctx",
            "2048",
            "--model",
            model.to_str().unwrap(),
        ])
        .args(["--port", &port.to_string()])
        .env("STRATA_BACKENDS_DIR", dir.path())
        .env_remove("STRATA_LOG")
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = server.stderr.take().unwrap();
    let ready = BufReader::new(stderr)
        .lines()
        .map_while(Result::ok)
        .find(|l| l.contains("ready on"))
        .unwrap_or_default();
    let health: serde_json::Value = reqwest::get(format!("http://127.0.0.1:{port}/health"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    server.kill().unwrap();
    server.wait().unwrap();
    assert!(
        ready.contains("CPU (CPU; device auto: no GPU found (a GPU backend did not load: vulkan: ")
            && ready.contains("CPU code "),
        "{ready}"
    );
    let device = &health["engine"]["device"];
    let not_loaded = device["backends_not_loaded"].as_array().unwrap();
    assert_eq!(not_loaded.len(), 1, "{device}");
    assert!(
        not_loaded[0].as_str().unwrap().starts_with("vulkan: "),
        "{device}"
    );
    assert_eq!(device["gpu_layers"], 0, "{device}");
}

/// llama-cpp-sys-2's folder of modules in this build (one with the variant `variant`).
fn backends_folder(variant: &str) -> std::path::PathBuf {
    std::fs::read_dir(worker_exe().parent().unwrap().join("build"))
        .unwrap()
        .flatten()
        .map(|e| e.path().join("out/backends"))
        .find(|d| d.join(format!("libggml-cpu-{variant}.so")).exists())
        .expect("llama-cpp-sys-2's backends folder")
}
