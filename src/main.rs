//! Thin entry point: CLI → a subcommand, the headless server, or the desktop app (no command).
//! On Windows a Windows-subsystem program (no console window beside the app); a run from a
//! terminal attaches to the terminal's console (`strata_desk::console`).
#![cfg_attr(windows, windows_subsystem = "windows")]

use anyhow::Context;
use strata_desk::cli::{Cli, CliCommand, EngineWorkerArgs, GenerateArgs, ServeArgs};

fn main() -> anyhow::Result<()> {
    strata_desk::console::attach_parent();
    let cli = Cli::parse_with_paths();
    init_logging();
    match cli.command {
        Some(CliCommand::EngineWorker(args)) => run_engine_worker(&args),
        Some(CliCommand::CpuCheck(args)) => {
            let check = strata_desk::engine_worker::variant_check::run(
                &args.model,
                &args.cpu_code,
                args.greedy,
            )?;
            println!("{}", serde_json::to_string(&check)?);
        }
        Some(CliCommand::Bench(args)) => {
            let runtime = tokio::runtime::Runtime::new()?;
            let report = runtime.block_on(strata_desk::bench::run(&args))?;
            print!("{}", report.table());
        }
        Some(CliCommand::Pull(args)) => {
            let runtime = tokio::runtime::Runtime::new()?;
            match runtime.block_on(strata_desk::models::pull::run(&args)) {
                Ok(path) => println!("{}", path.display()),
                Err(e) => {
                    eprintln!("strata-desk pull: {e}");
                    std::process::exit(1);
                }
            }
        }
        Some(CliCommand::Models(args)) => {
            print!("{}", strata_desk::models::on_this_machine::run(&args));
        }
        Some(CliCommand::FetchModel) => {
            let path = strata_desk::models::ensure_default_model()?;
            println!("{}", path.display());
        }
        Some(CliCommand::Generate(args)) => run_generate(&args)?,
        None if cli.serve.headless => serve_headless(&cli.serve)?,
        None => serve_with_window(&cli.serve)?,
    }
    Ok(())
}

/// The engine worker; a failure ends the process with its message as the last stderr line,
/// which the app shows when the worker dies.
fn run_engine_worker(args: &EngineWorkerArgs) {
    let options = args.options().unwrap_or_else(|e| {
        eprintln!("engine worker: {e}");
        std::process::exit(1);
    });
    if let Err(e) = strata_desk::engine_worker::run(&options) {
        eprintln!("engine worker: {e}");
        std::process::exit(1);
    }
}

/// `generate`: the text on stdout, the summary line on stderr.
fn run_generate(args: &GenerateArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Runtime::new()?;
    let exe = std::env::current_exe().context("locating this program")?;
    let stdout = std::io::stdout();
    let report = runtime.block_on(strata_desk::generate::generate(
        args,
        exe,
        &mut stdout.lock(),
    ))?;
    eprintln!(
        "\n[{} prompt tokens, {} generated, first token after {:.2} s, {:.1} tokens/s, finish: {}]",
        report.prompt_tokens,
        report.generated_tokens,
        report.time_to_first_token_secs,
        report.decode_tokens_per_sec,
        report.finish_reason
    );
    Ok(())
}

/// The server without the window, until it is stopped.
fn serve_headless(serve: &ServeArgs) -> anyhow::Result<()> {
    serve.forget_cpu_record_if_asked();
    let config = strata_desk::config::Config::load(serve.config.as_deref(), &serve.overrides())?;
    let exe = std::env::current_exe().context("locating this program")?;
    let runtime = tokio::runtime::Runtime::new()?;
    runtime.block_on(strata_desk::server::run_headless(config, exe))?;
    Ok(())
}

/// The desktop app: the window, and the server behind it.
fn serve_with_window(serve: &ServeArgs) -> anyhow::Result<()> {
    serve.forget_cpu_record_if_asked();
    // a bad config is shown in the window (a Start-menu program has no terminal)
    let config = strata_desk::config::Config::load(serve.config.as_deref(), &serve.overrides());
    let exe = std::env::current_exe().context("locating this program")?;
    if let Err(e) = strata_desk::gui::run(config, serve.config.clone(), exe) {
        eprintln!("strata-desk: {e}");
        std::process::exit(2);
    }
    Ok(())
}

/// Logs go to stderr (stdout is the worker's protocol pipe); `STRATA_LOG` sets the filter.
/// Colours only on a terminal: a log file or the journal (a systemd service) gets plain text.
fn init_logging() {
    use std::io::IsTerminal;
    // an explicit `with_ansi` overrides tracing-subscriber's own NO_COLOR check, so keep it
    let no_color_unset = std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let filter = tracing_subscriber::EnvFilter::try_from_env("STRATA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal() && no_color_unset)
        .init();
}
