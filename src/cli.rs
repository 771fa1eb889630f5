//! The command line: `strata-desk <subcommand>`.

use crate::engine_worker::WorkerOptions;
use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;

/// `--version`: the version and the llama.cpp backends this build has (cargo features
/// `vulkan`, `cuda`); which device a run uses is in `/health` and the ready line.
const VERSION: &str = match (cfg!(feature = "vulkan"), cfg!(feature = "cuda")) {
    (true, true) => concat!(
        env!("CARGO_PKG_VERSION"),
        " (llama.cpp backends: CPU, Vulkan, CUDA)"
    ),
    (true, false) => concat!(
        env!("CARGO_PKG_VERSION"),
        " (llama.cpp backends: CPU, Vulkan)"
    ),
    (false, true) => concat!(
        env!("CARGO_PKG_VERSION"),
        " (llama.cpp backends: CPU, CUDA)"
    ),
    (false, false) => concat!(env!("CARGO_PKG_VERSION"), " (llama.cpp backends: CPU)"),
};

/// `--version` on this machine: [`VERSION`] and the CPU code the engine would run here (the
/// variant a `cpu-variants` build picks for this CPU, or why none can run).
pub fn version_here() -> String {
    use crate::engine_worker::modules;
    let cpu = match modules::cpu_variant_here() {
        Ok(best) if cfg!(feature = "cpu-variants") => {
            // what `cpu_code: auto` starts: the best less those recorded as crashing here
            let (ranked, _) = modules::ranked_cpu_variants().unwrap_or_default();
            let record = crate::engine::cpu_code::default_record_path()
                .map(|p| crate::engine::cpu_code::Record::read(&p))
                .unwrap_or_default();
            let key = crate::engine::cpu_code::CpuKey::here();
            let plan = crate::engine::cpu_code::Plan::new("auto", &ranked, record.crashed(&key));
            let variant = plan.candidates.first().cloned().unwrap_or(best);
            let skipped = crate::engine::cpu_code::skipped_words(&plan.recorded, &variant);
            let skipped = if skipped.is_empty() {
                String::new()
            } else {
                format!("; recorded: {skipped} (`--cpu-code auto` forgets the record)")
            };
            format!(
                "CPU code for this CPU: {variant} (chosen at start among the build's \
                 variants{skipped})"
            )
        }
        Ok(_) => "CPU code: built in, for the instruction sets it was built with".to_owned(),
        Err(why) => format!("CPU code: none runs here: {why}"),
    };
    format!("{VERSION}; {cpu}")
}

#[derive(Debug, Parser)]
#[command(
    name = "strata-desk",
    version = VERSION,
    about = "Serve a local LLM to coding agents, and see how the engine is shared"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<CliCommand>,
    #[command(flatten)]
    pub serve: ServeArgs,
}

/// Serving options (the config file's keys; a flag overrides the file).
#[derive(Debug, Clone, Args, Default)]
pub struct ServeArgs {
    /// Run the server without the window (servers, CI) [default: off: the window].
    #[arg(long)]
    pub headless: bool,
    /// The JSON config file [default: config.json under the platform config dir, if present;
    /// the paths on this machine are listed below].
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// `llama` (the real engine) or `sim` (the simulated engine, labelled as such everywhere)
    /// [default: llama].
    #[arg(long, value_enum)]
    pub engine: Option<crate::config::EngineKind>,
    /// An existing serving engine to put our scheduler in front of (llama-server today):
    /// `upstream_url`, and `engine: upstream` unless `--engine` says otherwise [default: none].
    #[arg(long, value_name = "URL")]
    pub upstream: Option<String>,
    /// The bearer key the upstream wants; also read from the environment variable
    /// STRATA_UPSTREAM_API_KEY [default: none].
    #[arg(long, value_name = "KEY")]
    pub upstream_api_key: Option<String>,
    /// Which engine the upstream is: `auto` (found from its routes), `llama-server`, `vllm`
    /// or `sglang` [default: auto].
    #[arg(long, value_enum)]
    pub upstream_kind: Option<crate::upstream::UpstreamKind>,
    /// Address to bind [default: 127.0.0.1]; beyond loopback `api_keys` are required.
    #[arg(long)]
    pub host: Option<std::net::IpAddr>,
    /// Port to bind [default: 8080].
    #[arg(long)]
    pub port: Option<u16>,
    /// An API key clients must present (added to the file's `api_keys`), so `--host 0.0.0.0`
    /// (WSL2 in NAT mode, another machine) needs no config file; also read from the
    /// environment variable STRATA_API_KEY [default: none].
    #[arg(long, value_name = "KEY")]
    pub api_key: Option<String>,
    /// Output tokens for a request that asks no limit [default: the rest of the context].
    #[arg(long)]
    pub max_output_tokens_default: Option<u32>,
    /// The most output tokens any request gets, whatever it asks (it then ends with
    /// `length`) [default: no cap].
    #[arg(long)]
    pub max_output_tokens_cap: Option<u32>,
    /// Opt-in solo preemption (needs parallel 1) [default: off].
    #[arg(long)]
    pub solo_priority: bool,
    /// Prompt tokens per read chunk [default: about a quarter second of reading, measured].
    #[arg(long)]
    pub chunk_tokens: Option<u32>,
    /// The engine's settings (the config file's keys of the same names).
    #[command(flatten)]
    pub engine_settings: crate::config::EngineSettings,
    /// The engine settings' flags given on the command line (their config keys): only these
    /// override the file ([`Cli::from_matches`] fills it).
    #[arg(skip)]
    pub engine_flags_given: Vec<String>,
    /// How the window is drawn [default: glow; wgpu needs a build with `--features wgpu`].
    #[arg(long, value_enum)]
    pub renderer: Option<crate::config::Renderer>,
    /// Test only: a fault for the simulated engine's worker (`ignore-stdin-eof`, or a
    /// `--fake-fault` of `engine-worker`); repeatable [default: none].
    #[arg(long, hide = true)]
    pub sim_fault: Vec<String>,
    /// Test only: scripted outputs for the simulated engine (a `--fake-script` of
    /// `engine-worker`: `{"rules": [{"prompt_contains", "output"}]}`) [default: none].
    #[arg(long, hide = true)]
    pub sim_script: Option<std::path::PathBuf>,
}

impl Cli {
    /// Parses the command line (exiting on an error, `--help` or `--version`); `--help` ends
    /// with [`after_help`], this machine's real paths.
    pub fn parse_with_paths() -> Self {
        use clap::CommandFactory;
        let mut command = Self::command().after_help(after_help());
        if std::env::args_os().any(|a| a == "--version" || a == "-V") {
            // leaked once: the process prints it and exits
            command = command.version(&*Box::leak(version_here().into_boxed_str()));
        }
        let matches = command.get_matches();
        Self::from_matches(&matches).unwrap_or_else(|e| e.exit())
    }

    /// Parses `args` as the command line (tests; no paths in `--help`).
    pub fn try_parse_args<I, T>(args: I) -> Result<Self, clap::Error>
    where
        I: IntoIterator<Item = T>,
        T: Into<std::ffi::OsString> + Clone,
    {
        use clap::CommandFactory;
        Self::from_matches(&Self::command().try_get_matches_from(args)?)
    }

    /// The command line from clap's matches, with which engine settings were given (clap fills
    /// every field, the defaults too; only a flag given may override the config file).
    fn from_matches(matches: &clap::ArgMatches) -> Result<Self, clap::Error> {
        use clap::FromArgMatches;
        let mut cli = Self::from_arg_matches(matches)?;
        let ids = crate::config::EngineSettings::augment_args(clap::Command::new("engine"));
        cli.serve.engine_flags_given = ids
            .get_arguments()
            .map(|arg| arg.get_id().as_str())
            .filter(|id| {
                matches!(
                    matches.value_source(id),
                    Some(clap::parser::ValueSource::CommandLine)
                )
            })
            .map(str::to_owned)
            .collect();
        Ok(cli)
    }
}

/// The end of `--help`: how flags and the file combine, and where this machine keeps the
/// config file, the models and the instance locks (the platform folders `directories` gives:
/// on Windows under `%APPDATA%` and `%LOCALAPPDATA%`).
pub fn after_help() -> String {
    let shown = |path: Option<PathBuf>| {
        path.map_or_else(
            || "(no home folder found)".to_owned(),
            |p| p.display().to_string(),
        )
    };
    let dirs = crate::models::project_dirs();
    format!(
        "With no command: the window and the server. A flag overrides the config file's key of \
         the same name; a default applies when neither sets it.\n\n\
         Paths on this machine:\n  \
         config file:     {}\n  \
         models:          {}\n  \
         instance locks:  {}",
        shown(crate::config::default_path()),
        shown(dirs.as_ref().map(|d| d.data_dir().join("models"))),
        shown(dirs.as_ref().map(|d| d.data_local_dir().to_path_buf())),
    )
}

impl ServeArgs {
    /// `--cpu-code auto` forgets the CPU variants recorded as crashing on this CPU (they are
    /// probed again at the next start); says so on stderr when there was a record.
    pub fn forget_cpu_record_if_asked(&self) {
        use crate::engine::cpu_code;
        let given = self.engine_flags_given.iter().any(|id| id == "cpu_code");
        if !(given && crate::engine_worker::modules::is_auto(&self.engine_settings.cpu_code)) {
            return;
        }
        let Some(path) = cpu_code::default_record_path() else {
            return;
        };
        match cpu_code::forget_here(&path) {
            Ok(true) => eprintln!(
                "strata-desk: --cpu-code auto: forgot the CPU variants recorded as crashing on \
                 this CPU ({}); they are tried again",
                path.display()
            ),
            Ok(false) => {}
            Err(e) => eprintln!("strata-desk: could not forget {}: {e}", path.display()),
        }
    }

    pub fn overrides(&self) -> crate::config::Overrides {
        let engine_settings = crate::config::flat(&self.engine_settings)
            .into_iter()
            .filter(|(key, _)| self.engine_flags_given.contains(key))
            .collect();
        crate::config::Overrides {
            engine: self.engine,
            upstream_url: self.upstream.clone(),
            upstream_api_key: self.upstream_api_key.clone().or_else(|| {
                std::env::var("STRATA_UPSTREAM_API_KEY")
                    .ok()
                    .filter(|key| !key.is_empty())
            }),
            upstream_kind: self.upstream_kind,
            host: self.host,
            port: self.port,
            // the flag first, else the environment (so a key need not sit in shell history)
            api_key: self.api_key.clone().or_else(|| {
                std::env::var("STRATA_API_KEY")
                    .ok()
                    .filter(|key| !key.is_empty())
            }),
            engine_settings,
            max_output_tokens_default: self.max_output_tokens_default,
            max_output_tokens_cap: self.max_output_tokens_cap,
            solo_priority: self.solo_priority,
            chunk_tokens: self.chunk_tokens,
            renderer: self.renderer,
            sim_faults: self.sim_fault.clone(),
            sim_script: self.sim_script.clone(),
        }
    }
}

#[derive(Debug, Subcommand)]
pub enum CliCommand {
    /// Stream a completion of PROMPT from the model to the terminal.
    Generate(GenerateArgs),
    /// Fetch the default model (SmolLM2-135M-Instruct) if it is not here yet, and print its path.
    FetchModel,
    /// Download a GGUF model from the Hugging Face hub (or the mirror HF_ENDPOINT names) into
    /// this app's models folder, resumably, checked by its SHA-256; prints its path.
    Pull(crate::models::pull::PullArgs),
    /// List the GGUF models on this machine (this app's folder, LM Studio's, Ollama's) with
    /// where each would run here (GPU, some layers on the CPU, RAM) and the largest context.
    Models(crate::models::on_this_machine::ModelsArgs),
    /// Load a server with one of the seeds' scenarios and report TTFT and tokens/s.
    Bench(crate::bench::BenchArgs),
    /// Run the engine worker (started by the app itself; speaks JSON lines on stdin/stdout).
    EngineWorker(EngineWorkerArgs),
    /// Test only: one forward pass and a greedy continuation on one CPU variant at one
    /// thread, as JSON (`tests/it/cpu_variants.rs` compares every variant with x64's).
    #[command(hide = true)]
    CpuCheck(CpuCheckArgs),
}

#[derive(Debug, Args)]
pub struct CpuCheckArgs {
    #[arg(long)]
    pub model: PathBuf,
    /// The CPU variant (`x64`, `zen4`, ...).
    #[arg(long)]
    pub cpu_code: String,
    /// Greedy tokens after the prompt.
    #[arg(long, default_value_t = 16)]
    pub greedy: usize,
}

/// The engine worker's options: as one JSON object (how the app passes them), or as flags
/// (then a model or `--fake` is needed).
#[derive(Debug, Clone, Args)]
#[command(group(clap::ArgGroup::new("what_runs").required(true).args(["model", "fake", "options_json"]).multiple(true)))]
pub struct EngineWorkerArgs {
    /// Every option as one JSON object (the fields of `WorkerOptions`); the flags are then
    /// not read.
    #[arg(long = "options-json", id = "options_json")]
    pub options_json: Option<String>,
    #[command(flatten)]
    pub options: WorkerOptions,
}

impl EngineWorkerArgs {
    /// The options in force: the JSON object if given, else the flags.
    pub fn options(&self) -> Result<WorkerOptions, String> {
        match &self.options_json {
            Some(json) => serde_json::from_str(json).map_err(|e| format!("--options-json: {e}")),
            None => Ok(self.options.clone()),
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct GenerateArgs {
    /// The prompt, sent as one user message through the model's chat template.
    pub prompt: String,
    /// A GGUF model [default: SmolLM2-135M-Instruct, fetched on first use].
    #[arg(long)]
    pub model: Option<PathBuf>,
    /// A system message before the prompt [default: none].
    #[arg(long)]
    pub system: Option<String>,
    /// Most tokens to generate.
    #[arg(long, default_value_t = 256)]
    pub max_tokens: u32,
    /// 0 is greedy.
    #[arg(long, default_value_t = 0.0)]
    pub temperature: f32,
    #[arg(long, default_value_t = 0)]
    pub seed: u32,
    /// Context size in tokens; 0 takes the largest that fits, up to the model's (at least
    /// 32768, or the model's when smaller).
    #[arg(long = "ctx", default_value_t = 0)]
    pub ctx_tokens: u32,
    /// Prompt tokens read per step; 0 takes the engine's measured default (about 0.25 s).
    #[arg(long, default_value_t = 0)]
    pub chunk_tokens: u32,
    /// CPU threads; 0 takes the physical cores.
    #[arg(long, default_value_t = 0)]
    pub threads: u32,
    /// Layers on the GPU: `auto` (as many as fit) or a count.
    #[arg(long, default_value_t = crate::config::GpuLayers::Auto)]
    pub gpu_layers: crate::config::GpuLayers,
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::{CommandFactory, Parser};

    /// Regression: a flag named in `required_unless_present` that did not exist made every
    /// start of the engine worker panic in clap's own checks.
    #[test]
    fn the_command_line_definition_is_consistent() {
        Cli::command().debug_assert();
    }

    /// `--help` names every flag's default (`--version` and `--help` aside).
    #[test]
    fn every_flag_of_the_app_and_of_generate_states_its_default() {
        let app = Cli::command();
        let generate = app.find_subcommand("generate").unwrap().clone();
        for command in [&app, &generate] {
            for arg in command.get_arguments() {
                let id = arg.get_id().as_str();
                if matches!(id, "help" | "version") || arg.is_positional() {
                    continue;
                }
                let help = arg.get_help().map(|h| h.to_string()).unwrap_or_default();
                assert!(
                    help.contains("[default") || !arg.get_default_values().is_empty(),
                    "`--{id}` of `{}` does not state its default: {help:?}",
                    command.get_name()
                );
            }
        }
    }

    #[test]
    fn the_version_names_the_engine_backends_this_build_has() {
        let version = Cli::command().render_version();
        assert!(version.starts_with("strata-desk "), "{version}");
        assert!(version.contains("backends: CPU"), "{version}");
        assert_eq!(
            version.contains("Vulkan"),
            cfg!(feature = "vulkan"),
            "{version}"
        );
        assert_eq!(
            version.contains("CUDA"),
            cfg!(feature = "cuda"),
            "{version}"
        );
    }

    /// Regression: the bench's global `--model` collided with the app's `--model` and every
    /// `strata-desk bench ...` panicked in clap.
    #[test]
    fn a_bench_command_line_parses() {
        let cli = Cli::try_parse_from([
            "strata-desk",
            "bench",
            "solo-long-short",
            "--base-url",
            "http://127.0.0.1:1",
            "--model-name",
            "m",
        ])
        .unwrap();
        assert!(matches!(cli.command, Some(super::CliCommand::Bench(_))));
    }

    #[test]
    fn the_app_passes_the_worker_its_options_as_one_json_object_that_parses_back_whole() {
        let mut options = crate::engine_worker::WorkerOptions::for_model("m.gguf".into());
        options.ctx_tokens = 4096;
        options.kv_type = crate::config::KvType::Q8_0;
        options.fake.faults = vec!["die:3".into()];
        let launch = crate::engine::WorkerLaunch::new("strata-desk".into(), options.clone());
        let mut argv = vec![std::ffi::OsString::from("strata-desk")];
        argv.extend(launch.args_for(2));
        let Some(super::CliCommand::EngineWorker(args)) =
            Cli::try_parse_from(argv).unwrap().command
        else {
            panic!("not the engine worker");
        };
        options.fake.generation = 2;
        assert_eq!(args.options(), Ok(options));
    }

    /// The config schema's flags are the app's: each one named there exists, and each serve
    /// flag that sets a config key is named there.
    #[test]
    fn the_flags_of_the_config_schema_are_the_app_s_flags() {
        let command = Cli::command();
        let longs: Vec<String> = command
            .get_arguments()
            .filter_map(|a| a.get_long().map(|l| format!("--{l}")))
            .collect();
        for key in crate::config::schema::keys() {
            if let Some(flag) = key.flag {
                assert!(longs.iter().any(|l| l == flag), "{flag} of `{}`", key.name);
            }
        }
        // the serve flags that are not config keys
        let not_keys = [
            "--config",
            "--headless",
            "--sim-fault",
            "--sim-script",
            "--help",
            "--version",
        ];
        for long in &longs {
            let named = crate::config::schema::keys()
                .iter()
                .any(|k| k.flag == Some(long.as_str()));
            assert!(
                named || not_keys.contains(&long.as_str()),
                "{long} sets a config key the schema does not name"
            );
        }
    }

    #[test]
    fn the_engine_worker_needs_a_model_unless_simulated() {
        assert!(Cli::try_parse_from(["strata-desk", "engine-worker"]).is_err());
        assert!(Cli::try_parse_from(["strata-desk", "engine-worker", "--fake"]).is_ok());
        assert!(Cli::try_parse_from(["strata-desk", "engine-worker", "--model", "m.gguf"]).is_ok());
    }

    /// An engine setting's flag overrides the config file only when given: clap fills every
    /// field with its default, and those must not overwrite the file's values.
    #[test]
    fn an_engine_flag_given_overrides_the_file_and_one_not_given_leaves_it() {
        let cli = Cli::try_parse_args(["strata-desk", "--ctx", "4096", "--swa-full"]).unwrap();
        let overrides = cli.serve.overrides();
        let mut given: Vec<&str> = overrides
            .engine_settings
            .keys()
            .map(String::as_str)
            .collect();
        given.sort_unstable();
        assert_eq!(given, ["ctx", "swa_full"]);
        assert_eq!(overrides.engine_settings["ctx"], 4096);
        let none = Cli::try_parse_args(["strata-desk"])
            .unwrap()
            .serve
            .overrides();
        assert!(none.engine_settings.is_empty());
        // the worker's old flag for `parallel` still parses
        let old = Cli::try_parse_args(["strata-desk", "--slots", "2"]).unwrap();
        assert_eq!(old.serve.overrides().engine_settings["parallel"], 2);
    }
}
