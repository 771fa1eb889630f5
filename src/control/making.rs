//! The engine unit's making: config → the model's prompts ([`prepare_prompts`]) and the engine
//! worker's launch ([`worker_launch`]). The control plane makes every unit (the first, and each
//! apply's), so the making is its own: nothing above it (`api`, `server`, `gui`) is needed.

use super::Prompts;
use crate::config::{Config, ConfigError, EngineKind, EngineSettings};
use crate::engine::WorkerLaunch;
use crate::engine_worker::{FakeOptions, WorkerOptions};
use crate::models::{ModelFetchError, ensure_default_model};
use crate::protocol::{UPSTREAM_API_KEY_ENV, UpstreamTarget};
use crate::tokenizer::{Tokenizer, TokenizerError};
use std::path::PathBuf;

/// Why a unit could not be made. The words are those the server said before the making moved
/// here (`ServerError` wraps this one whole).
#[derive(Debug, thiserror::Error)]
pub enum MakingError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error(transparent)]
    Model(#[from] ModelFetchError),
    #[error(transparent)]
    ModelPath(#[from] crate::models::ModelPathError),
    #[error(transparent)]
    Settings(#[from] crate::service::SettingsError),
    #[error(transparent)]
    Tokenizer(#[from] TokenizerError),
    #[error("the model's chat template: {0}")]
    Template(#[from] crate::chat::TemplateError),
    /// The blocking task that prepared the prompts ended without an answer (it panicked). The
    /// words are those it had as a `ServerError`, kept so that nothing a user reads changes.
    #[error("the HTTP server stopped: {0}")]
    Stopped(std::io::Error),
}

/// The model a config names: its file, or the default model (fetched on first use); checked
/// to be a readable GGUF.
fn model_of(config: &Config) -> Result<PathBuf, MakingError> {
    let model = match &config.app.engine_settings.model {
        Some(path) => path.clone(),
        None => ensure_default_model()?,
    };
    crate::models::check_model_path(&model)?;
    Ok(model)
}

/// The model's prompts for a config: its tokenizer (the GGUF loaded vocabulary-only), chat
/// template and tool-call format; the simulated engine's byte vocabulary.
pub fn prepare_prompts(config: &Config) -> Result<Prompts, MakingError> {
    let tokenizer = match config.app.engine {
        // over an upstream, the same GGUF as the upstream's, at hand here (its vocabulary is
        // checked against the upstream's at the worker's start)
        EngineKind::Llama | EngineKind::Upstream => {
            let model = model_of(config)?;
            let tokenizer = Tokenizer::load(&model)?;
            if tokenizer.chat_template().is_none() {
                // said at load: otherwise only the window's model list would say it
                tracing::warn!(
                    "{} has no chat template: prompts use ChatML (<|im_start|>), which this \
                     model may not know; its answers may be poor and tool calls unparsed",
                    model.display()
                );
            }
            tokenizer
        }
        EngineKind::Sim => Tokenizer::simulated(),
    };
    Ok(Prompts::new(tokenizer)?.with_tool_call_format(config.app.tool_call_format))
}

/// How to start a config's engine worker.
pub fn worker_launch(config: &Config, exe: PathBuf) -> Result<WorkerLaunch, MakingError> {
    let a = &config.app;
    let e = &a.engine_settings;
    // `cpu_code` names one of the build's variants (the config itself does not know them)
    if a.engine == EngineKind::Llama && !crate::machine::modules::is_auto(&e.cpu_code) {
        let carried = crate::machine::modules::carried_cpu_variants();
        if !carried.iter().any(|v| v == e.cpu_code.trim()) {
            return Err(ConfigError::UnknownCpuCode {
                value: e.cpu_code.clone(),
                variants: carried.join(", "),
            }
            .into());
        }
    }
    let options = match a.engine {
        EngineKind::Llama => WorkerOptions::of(EngineSettings {
            model: Some(model_of(config)?),
            ..e.clone()
        }),
        EngineKind::Upstream => WorkerOptions {
            upstream: Some(UpstreamTarget {
                url: a.upstream_url.clone().unwrap_or_default(),
                kind: serde_json::to_value(a.upstream_kind)
                    .ok()
                    .and_then(|v| v.as_str().map(str::to_owned))
                    .unwrap_or_default(),
            }),
            ..WorkerOptions::of(EngineSettings {
                model: Some(model_of(config)?),
                ..e.clone()
            })
        },
        EngineKind::Sim => WorkerOptions {
            engine: e.clone(),
            ..WorkerOptions::simulated(FakeOptions {
                enabled: true,
                kv_cells: if e.ctx_tokens > 0 {
                    e.ctx_tokens
                } else {
                    16_384
                },
                prompt_tokens_per_sec: 2_000.0,
                decode_steps_per_sec: 50.0,
                script: config.sim_script.clone(),
                faults: config.sim_faults.clone(),
                load_secs: 0.0,
                non_trimmable: false,
                generation: 1,
            })
        },
    };
    let mut launch = WorkerLaunch::new(exe, options);
    launch.cpu_record = crate::engine::cpu_code::default_record_path();
    if let (EngineKind::Upstream, Some(key)) = (a.engine, &a.upstream_api_key) {
        // in the environment: a command line is visible to every user of the machine
        launch.env.push((UPSTREAM_API_KEY_ENV.into(), key.into()));
    }
    Ok(launch)
}
