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
    // a variant recorded as crashing on this CPU is passed over, and said so
    let skipped: Vec<&str> = d
        .cpu_variants_skipped
        .iter()
        .map(|s| s.variant.as_str())
        .collect();
    for (name, flags) in &table {
        let superset = flags.len() > picked.len() && picked.iter().all(|f| flags.contains(f));
        assert!(
            !(superset && runs_here(flags, &here)) || skipped.contains(name),
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

/// The CPU variants this CPU runs, best first (what `cpu_code: auto` tries in turn).
fn ranked_here() -> Vec<String> {
    strata_desk::engine_worker::modules::ranked_cpu_variants()
        .expect("the build's variants")
        .0
}

/// `strata-desk cpu-check`: one variant's top tokens on `model`, at one thread.
fn cpu_check(model: &Path, variant: &str) -> strata_desk::engine_worker::variant_check::Check {
    let out = std::process::Command::new(worker_exe())
        .args(["cpu-check", "--model", model.to_str().unwrap()])
        .args(["--cpu-code", variant])
        .output()
        .expect("cpu-check runs");
    assert!(
        out.status.success(),
        "cpu-check on {variant}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("cpu-check's JSON")
}

/// Every CPU variant this CPU runs computes what ggml's plain x86-64 code (`x64`) does on both
/// test models (SmolLM2's Q4_1 and Gemma 3's Q4_K_M take different kernels): at each position
/// of a fixed prompt and in a 16-token greedy continuation the top token is x64's, or one x64
/// puts within `NEAR_TIE_LOGITS` (0.5) of its best (a near-tie, which summing in another order
/// turns: the 0.01 was measured too tight, docs/TESTING.md says by how much).
#[test]
fn every_cpu_variant_this_cpu_runs_tops_the_tokens_x64_tops_on_both_test_models() {
    use strata_desk::engine_worker::variant_check::{NEAR_TIE_LOGITS, disagreement};
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let _serial = real_model();
    let ranked = ranked_here();
    assert!(ranked.iter().any(|v| v == "x64"), "{ranked:?}");
    let gemma = crate::models_hub::gemma_path();
    let mut failures = Vec::new();
    for model in [model_path(), gemma] {
        let reference = cpu_check(&model, "x64");
        assert!(reference.prompt.len() >= 30 && reference.greedy.len() == 16);
        for variant in ranked.iter().filter(|v| *v != "x64") {
            let checked = cpu_check(&model, variant);
            assert_eq!(&checked.variant, variant);
            if let Some(why) = disagreement(&reference, &checked, NEAR_TIE_LOGITS) {
                failures.push(format!("{variant} on {}: {why}", model.display()));
            }
        }
        eprintln!(
            "{}: {} variants agree with x64",
            model.display(),
            ranked.len() - 1
        );
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

/// The real engine's warm-up crashes (an injected illegal instruction) on the best variant:
/// the start goes on with the next best, says which crashed and why in the handshake and in
/// words, and records it for this CPU and build; the next start, with no fault, goes straight
/// to the next best; once the record is forgotten the best runs again.
#[tokio::test]
async fn a_variant_that_crashes_while_warming_up_is_passed_over_recorded_and_named() {
    use strata_desk::engine::cpu_code::{self, CpuKey, Record};
    use strata_desk::engine_worker::fault::CRASH_VAR;
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let _serial = real_model();
    let ranked = ranked_here();
    let (best, next) = (&ranked[0], &ranked[1]);
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join(cpu_code::RECORD_FILE);
    let mut launch = launch(1, 1);
    launch.cpu_record = Some(record.clone());
    launch.env = vec![(CRASH_VAR.into(), best.into())];

    let started = cpu_code::start(&launch, 1).await.expect("a fallback start");
    let d = started.handshake().device.clone();
    drop(started);
    assert_eq!(&d.cpu_variant, next);
    assert_eq!(d.cpu_variants_skipped.len(), 1, "{d:?}");
    assert_eq!(&d.cpu_variants_skipped[0].variant, best);
    let words = strata_desk::service::cpu_code_words(&d);
    assert!(
        words.contains(&format!(
            "the {best} CPU code crashed on this CPU (illegal instruction, SIGILL) while the \
             engine warmed up; using {next}"
        )),
        "{words}"
    );
    let recorded = Record::read(&record);
    let crashed: Vec<&str> = recorded
        .crashed(&CpuKey::here())
        .iter()
        .map(|c| c.variant.as_str())
        .collect();
    assert_eq!(crashed, [best.as_str()]);

    // the next start, without the fault, takes the next best: the record is read
    launch.env.clear();
    let again = cpu_code::start(&launch, 2).await.expect("a start");
    assert_eq!(&again.handshake().device.cpu_variant, next);
    drop(again);
    // forgotten: the best again
    assert!(cpu_code::forget_here(&record).unwrap());
    let fresh = cpu_code::start(&launch, 3).await.expect("a start");
    assert_eq!(&fresh.handshake().device.cpu_variant, best);
    assert!(fresh.handshake().device.cpu_variants_skipped.is_empty());
}

/// A worker that dies the same way on every variant is not the CPU code's fault (a broken
/// model file, llama.cpp itself): the start fails saying so, and nothing is recorded.
#[tokio::test]
async fn a_crash_on_every_variant_is_not_recorded_and_the_start_says_why() {
    use strata_desk::engine::cpu_code;
    use strata_desk::engine_worker::fault::CRASH_VAR;
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let _serial = real_model();
    let dir = tempfile::tempdir().unwrap();
    let record = dir.path().join(cpu_code::RECORD_FILE);
    let mut launch = launch(1, 1);
    launch.cpu_record = Some(record.clone());
    launch.env = vec![(CRASH_VAR.into(), "*".into())];
    let error = cpu_code::start(&launch, 1)
        .await
        .expect_err("every variant crashes");
    let text = error.to_string();
    assert!(text.contains("SIGILL"), "{text}");
    assert!(
        text.contains("every CPU code crashed") && text.contains("not the CPU code's fault"),
        "{text}"
    );
    assert!(!record.exists(), "nothing recorded");
}

/// The app, started as a user starts it, with its best variant crashing in the warm-up: the
/// ready line and `/health` (`engine.cpu_code`, `engine.cpu_code_skipped`) say which crashed
/// and which runs; the record lands in the app's data folder, `--version` reads it, and
/// `--cpu-code auto` on the command line forgets it.
#[tokio::test]
async fn the_app_names_a_crashed_variant_in_its_ready_line_health_and_version() {
    use std::io::{BufRead, BufReader};
    use strata_desk::engine_worker::fault::CRASH_VAR;
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let _serial = real_model();
    let ranked = ranked_here();
    let (best, next) = (ranked[0].clone(), ranked[1].clone());
    let data = tempfile::tempdir().unwrap();
    let model = model_path();
    let serve = |extra: &[&str], fault: bool| {
        let port = {
            let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap().port()
        };
        let mut command = std::process::Command::new(worker_exe());
        command
            .args(["--headless", "--ctx", "2048", "--threads", "1"])
            .args(["--model", model.to_str().unwrap()])
            .args(["--port", &port.to_string()])
            .args(extra)
            .env("XDG_DATA_HOME", data.path())
            .env_remove("STRATA_LOG")
            .stderr(std::process::Stdio::piped());
        if fault {
            command.env(CRASH_VAR, &best);
        }
        let mut server = command.spawn().unwrap();
        let stderr = server.stderr.take().unwrap();
        let lines: Vec<String> = BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
            .take_while(|l| !l.contains("ready on"))
            .chain(std::iter::once(String::new()))
            .collect();
        (server, port, lines)
    };
    let health = |port: u16| async move {
        reqwest::get(format!("http://127.0.0.1:{port}/health"))
            .await
            .unwrap()
            .json::<serde_json::Value>()
            .await
            .unwrap()
    };

    let (mut server, port, lines) = serve(&[], true);
    let h = health(port).await;
    server.kill().unwrap();
    server.wait().unwrap();
    let engine = &h["engine"];
    assert_eq!(engine["cpu_code"], next.as_str(), "{engine}");
    assert_eq!(
        engine["cpu_code_skipped"][0]["variant"],
        best.as_str(),
        "{engine}"
    );
    let words = format!("the {best} CPU code crashed on this CPU (illegal instruction, SIGILL)");
    assert!(
        engine["cpu_code_words"].as_str().unwrap().contains(&words),
        "{engine}"
    );
    let log = lines.join("\n");
    assert!(
        log.contains("crashed on this CPU (illegal instruction, SIGILL)"),
        "{log}"
    );
    let record = data.path().join("strata-desk").join("cpu-code.json");
    assert!(record.exists(), "{log}");

    let version = std::process::Command::new(worker_exe())
        .arg("--version")
        .env("XDG_DATA_HOME", data.path())
        .output()
        .unwrap();
    let version = String::from_utf8_lossy(&version.stdout);
    assert!(
        version.contains(&format!("CPU code for this CPU: {next} ")) && version.contains(&words),
        "{version}"
    );

    // no fault, and `--cpu-code auto`: the record is forgotten and the best runs
    let (mut server, port, lines) = serve(&["--cpu-code", "auto"], false);
    let h = health(port).await;
    server.kill().unwrap();
    server.wait().unwrap();
    assert_eq!(h["engine"]["cpu_code"], best.as_str(), "{h}");
    assert!(
        lines.iter().any(|l| l.contains("--cpu-code auto: forgot")),
        "{lines:#?}"
    );
}

/// `cpu_code` names a variant: an unknown one is refused with the build's list.
#[test]
fn an_unknown_cpu_code_is_refused_with_the_variants_of_the_build() {
    if !cfg!(feature = "cpu-variants") {
        return;
    }
    let out = std::process::Command::new(worker_exe())
        .args(["--headless", "--cpu-code", "pentium4"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("`cpu_code` must be `auto` or a CPU variant of this build (")
            && stderr.contains("x64")
            && stderr.contains("got \"pentium4\""),
        "{stderr}"
    );
}
