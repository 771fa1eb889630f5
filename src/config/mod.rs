//! The app's configuration: a JSON file (default under the platform config dir) overridden
//! by command-line flags, parsed into a validated [`Config`]. Every error names the key, the
//! bound and the value. Imports only the scheduler's settings type (which it embeds) and the
//! protocol's engine settings (`FlashAttn`, `KvType`).

use crate::scheduler::{ConfigError as SchedulerConfigError, SchedulerSettings};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

/// Which engine serves: the real llama.cpp worker, the simulated one (always labelled so), or
/// an existing serving engine at `upstream_url` behind our scheduler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum EngineKind {
    #[default]
    Llama,
    Sim,
    Upstream,
}

pub use crate::protocol::{
    DEFAULT_CTX_MIN_TOKENS, EngineSettings, FlashAttn, GpuLayers, GpuMemoryLimit, KvType,
};
pub use flat::{FlatError, changed_keys, flat};
pub use persist::persist;

impl AppSettings {
    /// `prepare_concurrency`, with 0 taken as the number of cores.
    pub fn prepare_places(&self) -> usize {
        match self.prepare_concurrency {
            0 => std::thread::available_parallelism().map_or(2, |n| n.get()),
            n => n as usize,
        }
    }
}

mod flat;
mod persist;
pub mod schema;
mod validate;

/// The tool-call format the output is parsed in: `auto` (the default) takes the family the
/// model's chat template shows; a name forces one, for a model whose template misleads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallFormat {
    #[default]
    Auto,
    /// `<tool_call>{"name", "arguments"}</tool_call>` (Hermes, Qwen 2.5/3, Granite 4).
    Hermes,
    /// `<function=NAME><parameter=P>` (Qwen3-Coder, Qwen3.5, Nemotron 3).
    Qwen3Coder,
    /// gpt-oss.
    Harmony,
    /// `[TOOL_CALLS]` (Mistral Small, Devstral, Ministral, Nemo).
    Mistral,
    /// Llama 3.1 / 3.2 / 3.3 JSON.
    Llama3,
    /// GLM 4.5 / 4.6 / 4.7.
    Glm4,
    /// DeepSeek V3.1.
    DeepseekV3,
    /// DeepSeek V3.2 and V4 (DSML).
    DeepseekV32,
    /// Kimi K2.
    KimiK2,
    /// Granite 4 (the Hermes form).
    Granite,
    /// Apriel 1.5 / 1.6: `<tool_calls>[...]</tool_calls>`.
    Apriel,
    /// NVIDIA Nemotron Nano v2: `<TOOLCALL>[...]</TOOLCALL>`.
    NemotronV2,
    /// Cohere Command R7B and Command A: `<|START_ACTION|>[...]<|END_ACTION|>`.
    Cohere,
    /// Apertus: `<|tools_prefix|>[{"NAME": {...}}]<|tools_suffix|>`.
    Apertus,
    /// Granite 3.x: `<|tool_call|>[...]`.
    #[serde(rename = "granite_3")]
    Granite3,
    /// MiniMax-M1: `<tool_calls>` with a call per line.
    MinimaxM1,
    /// GigaChat 3: `function call<|role_sep|>{...}`.
    Gigachat3,
    /// GigaChat 3.1: `<|function_call|>{...}`.
    #[serde(rename = "gigachat3_1")]
    Gigachat31,
    /// DeepSeek R1 (llama.cpp's template): calls with their arguments in a JSON fence.
    DeepseekR1,
    /// MiniMax-M2: `<minimax:tool_call>` of `<invoke>`s.
    MinimaxM2,
    /// Muse Glimmer: `<atem:function_calls>` of `<atem:invoke>`s.
    MuseGlimmer,
    /// MiniCPM5: `<function name="f"><param name="k">`.
    #[serde(rename = "minicpm5")]
    MiniCpm5,
    /// Hy3: `<tool_call:opensource>` with key and value tags.
    Hy3,
    /// Kimi-K3: `<|open|>call tool="f"<|sep|>` with typed `argument`s.
    KimiK3,
    /// Gemma 4: `<|tool_call>call:NAME{…}<tool_call|>`.
    #[serde(rename = "gemma4")]
    Gemma4,
    /// LFM2 / LFM2.5: `<|tool_call_start|>[NAME(key=value)]<|tool_call_end|>`.
    #[serde(rename = "lfm2")]
    Lfm2,
    /// Solar Open: `<|tool_call:begin|>ID<|tool_call:name|>NAME<|tool_call:args|>{...}`.
    SolarOpen,
    /// functionary v3.1: `<function=NAME>{...}</function>`.
    #[serde(rename = "functionary_v3_1")]
    FunctionaryV31,
}

/// How the window is drawn: glow (OpenGL, the default: under software rendering it costs about
/// a quarter of wgpu's CPU) or wgpu (in builds with the `wgpu` feature).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "snake_case")]
pub enum Renderer {
    #[default]
    Glow,
    Wgpu,
}

/// Most models the dashboard's picker remembers.
pub const RECENT_MODELS_MAX: usize = 8;

/// `max_grammar_build_steps`' default: about a second of llama.cpp's converter on the
/// machine docs/BENCHMARKS.md measured ("Grammars: building one").
pub const DEFAULT_GRAMMAR_BUILD_STEPS: u32 = 50_000_000;

/// An API key: a plain string, or an object with `key` and optionally `name` (shown in the
/// dashboard and logs), `priority` (its requests' default), `max_priority` (a cap on what
/// their body or header asks) and `admin` (may use the control routes; absent means true, so
/// keys written before this field existed keep working; a key with `admin: false` may cancel
/// or re-prioritise only its own requests).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum ApiKeyEntry {
    Plain(String),
    WithPriority(ApiKey),
}

/// A key written as an object. Unknown fields are refused: a misspelt `admin` must not leave
/// an admin key behind.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ApiKey {
    pub key: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(default)]
    pub priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_priority: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admin: Option<bool>,
}

impl ApiKeyEntry {
    /// A key with only a default priority (every other field at its default).
    pub fn with_priority(key: &str, priority: Option<i64>) -> Self {
        Self::WithPriority(ApiKey {
            key: key.to_owned(),
            name: None,
            priority,
            max_priority: None,
            admin: None,
        })
    }

    pub fn key(&self) -> &str {
        match self {
            Self::Plain(key) => key,
            Self::WithPriority(k) => &k.key,
        }
    }

    pub fn priority(&self) -> Option<i64> {
        match self {
            Self::Plain(_) => None,
            Self::WithPriority(k) => k.priority,
        }
    }

    /// Its `name` (shown as the client of its requests).
    pub fn name(&self) -> Option<&str> {
        match self {
            Self::Plain(_) => None,
            Self::WithPriority(k) => k.name.as_deref(),
        }
    }

    pub fn max_priority(&self) -> Option<i64> {
        match self {
            Self::Plain(_) => None,
            Self::WithPriority(k) => k.max_priority,
        }
    }

    /// Whether it may use the control routes (true unless the entry says `admin: false`).
    pub fn admin(&self) -> bool {
        match self {
            Self::Plain(_) => true,
            Self::WithPriority(k) => k.admin.unwrap_or(true),
        }
    }

    /// The name shown for it: its `name`, else `key N` (its place in `api_keys`, from 1).
    pub fn display_name(&self, index: usize) -> String {
        match self {
            Self::WithPriority(ApiKey {
                name: Some(name), ..
            }) => name.clone(),
            _ => format!("key {}", index + 1),
        }
    }
}

/// The app's keys of the config file (the scheduler's keys sit beside them, flat).
/// `fim_priority`'s default, in scheduler order: an autocomplete goes before chat (0) and
/// before a chat request's small-request boost (+1), and leaves room above it for what the
/// user ranks higher. Under `priority_order: lower_first` it is -5 in the user's units.
pub const DEFAULT_FIM_PRIORITY: i64 = 5;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct AppSettings {
    /// What a new engine takes (flat in the file: `ctx`, `parallel`, ...).
    #[serde(flatten)]
    pub engine_settings: EngineSettings,
    pub engine: EngineKind,
    /// `engine: upstream`'s server (`http://HOST:PORT`): llama-server today.
    pub upstream_url: Option<String>,
    /// The bearer key the upstream wants, if any: handed to the worker in its environment,
    /// never logged, never shown (`GET /v1/settings` says only whether it is set).
    pub upstream_api_key: Option<String>,
    /// Which engine the upstream is: `auto` finds it from its routes.
    pub upstream_kind: crate::upstream::UpstreamKind,
    pub host: IpAddr,
    pub port: u16,
    pub api_keys: Vec<ApiKeyEntry>,
    /// Model names `/v1/models` lists besides the loaded model's (any name is served by the
    /// loaded model; the values are not read).
    pub model_aliases: BTreeMap<String, String>,
    /// Request bodies above this get a 413.
    pub body_limit_mib: u64,
    /// Requests prepared at once (body parsing, tool schemas, grammars, tokenizing), each on a
    /// blocking thread; 0 takes the number of cores.
    pub prepare_concurrency: u32,
    /// Requests that may wait for a place to be prepared; one more gets a 429 `server_busy`.
    pub prepare_waiting_max: u32,
    /// The most `tools` one request may offer.
    pub max_tools: u32,
    /// The largest parameter schema of one tool (its JSON text), in KiB.
    pub max_tool_schema_kib: u32,
    /// The most estimated steps of llama.cpp's schema converter a request's grammar may take
    /// (`grammar::estimate`); more is a 400 before any work.
    pub max_grammar_build_steps: u32,
    /// The most stop strings (`stop`, `stop_sequences`) one request may give.
    pub max_stop_strings: u32,
    /// The longest stop string, in bytes.
    pub max_stop_string_bytes: u32,
    /// A client must send a request's headers within this (else the connection is closed).
    pub header_read_timeout_secs: u32,
    /// A client must send a request's whole body within this (else a 408).
    pub body_read_timeout_secs: u32,
    /// Clients of `/v1/scheduler/events` at once; one more gets a 429 `server_busy`.
    pub event_subscribers_max: u32,
    /// The priority of an autocomplete request (completions, infill) that names none, in
    /// `priority_order`'s units; `None`: [`DEFAULT_FIM_PRIORITY`] ahead of chat in either order.
    pub fim_priority: Option<i64>,
    /// The tool-call format family; `auto` takes the chat template's.
    pub tool_call_format: ToolCallFormat,
    /// Host header values accepted besides the bound address and localhost (DNS rebinding).
    pub allowed_hosts: Vec<String>,
    /// Origins allowed by CORS; none by default.
    pub cors_origins: Vec<String>,
    /// The window's renderer (the desktop app only).
    pub renderer: Renderer,
    /// Closing the window keeps the server and the engine running in the tray (the desktop
    /// app only; with no tray, closing quits).
    pub close_to_tray: bool,
    /// Models opened in the dashboard, newest first (the desktop app only).
    pub recent_models: Vec<PathBuf>,
}

impl Default for AppSettings {
    fn default() -> Self {
        Self {
            engine_settings: EngineSettings::default(),
            engine: EngineKind::Llama,
            upstream_url: None,
            upstream_api_key: None,
            upstream_kind: crate::upstream::UpstreamKind::Auto,
            host: IpAddr::from([127, 0, 0, 1]),
            port: 8080,
            api_keys: Vec::new(),
            model_aliases: BTreeMap::new(),
            body_limit_mib: 32,
            prepare_concurrency: 0,
            prepare_waiting_max: 256,
            max_tools: 256,
            max_tool_schema_kib: 64,
            max_grammar_build_steps: DEFAULT_GRAMMAR_BUILD_STEPS,
            max_stop_strings: 16,
            max_stop_string_bytes: 1024,
            header_read_timeout_secs: 30,
            body_read_timeout_secs: 60,
            event_subscribers_max: 32,
            fim_priority: None,
            tool_call_format: ToolCallFormat::Auto,
            allowed_hosts: Vec::new(),
            cors_origins: Vec::new(),
            renderer: Renderer::Glow,
            close_to_tray: true,
            recent_models: Vec::new(),
        }
    }
}

/// A change to settings: config keys with their new values, from any entry point (the window's
/// draft, `PATCH /v1/settings`, a live switch).
pub type SettingsPatch = serde_json::Map<String, serde_json::Value>;

/// The whole validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub app: AppSettings,
    pub scheduler: SchedulerSettings,
    /// Where it was read from, if a file.
    pub source: Option<PathBuf>,
    /// Test only (`--sim-fault`, never a file key): faults for the simulated engine's worker.
    pub sim_faults: Vec<String>,
    /// Test only (`--sim-script`, never a file key): the simulated engine's scripted outputs.
    pub sim_script: Option<PathBuf>,
}

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the config file {path}: {message}")]
    Read { path: String, message: String },
    #[error("cannot write the config file {path}: {message}")]
    Write { path: String, message: String },
    #[error("config file {path}: {message}")]
    Parse { path: String, message: String },
    #[error("config file {path}: unknown key `{key}`")]
    UnknownKey { path: String, key: String },
    #[error("unknown key `{key}` (`GET /v1/settings` lists the keys)")]
    UnknownSetting { key: String },
    #[error("{message}")]
    BadValue { message: String },
    #[error("`{key}` must be {bound}, got {value}")]
    OutOfBounds {
        key: &'static str,
        bound: &'static str,
        value: String,
    },
    #[error("`{key}` must be between {min} and {max}, got {value}")]
    OutOfRange {
        key: &'static str,
        min: u32,
        max: u32,
        value: u32,
    },
    #[error("`cpu_code` must be `auto` or a CPU variant of this build ({variants}), got {value:?}")]
    UnknownCpuCode { value: String, variants: String },
    #[error(
        "binding {host} (not loopback) requires an API key: anyone who reaches the port could use the engine; \
         give one with `--api-key KEY`, the environment variable STRATA_API_KEY, or `api_keys` in the config file"
    )]
    ExposedWithoutKeys { host: IpAddr },
    #[error(transparent)]
    Scheduler(#[from] SchedulerConfigError),
}

/// Command-line overrides (each `None` keeps the file's value).
#[derive(Debug, Clone, Default)]
pub struct Overrides {
    pub engine: Option<EngineKind>,
    /// `--upstream URL`: `upstream_url`, and `engine: upstream` unless `--engine` says otherwise.
    pub upstream_url: Option<String>,
    /// `--upstream-api-key` or `STRATA_UPSTREAM_API_KEY`.
    pub upstream_api_key: Option<String>,
    pub upstream_kind: Option<crate::upstream::UpstreamKind>,
    pub host: Option<IpAddr>,
    pub port: Option<u16>,
    /// `--api-key` or `STRATA_API_KEY`: one more key in `api_keys`.
    pub api_key: Option<String>,
    /// The engine settings' flags given on the command line, by config key (`ctx`,
    /// `parallel`): only these override the file (`cli::Cli::engine_flags_given`).
    pub engine_settings: serde_json::Map<String, serde_json::Value>,
    pub max_output_tokens_default: Option<u32>,
    pub max_output_tokens_cap: Option<u32>,
    pub solo_priority: bool,
    pub chunk_tokens: Option<u32>,
    pub renderer: Option<Renderer>,
    pub sim_faults: Vec<String>,
    pub sim_script: Option<PathBuf>,
}

/// The default config file path (it need not exist).
pub fn default_path() -> Option<PathBuf> {
    crate::machine::project_dirs().map(|d| d.config_dir().join("config.json"))
}

impl Config {
    /// Reads `path` (or the default file, if it exists), applies the flags, validates.
    pub fn load(path: Option<&Path>, overrides: &Overrides) -> Result<Self, ConfigError> {
        let (mut config, source) = match path {
            Some(path) => (parse_file(path)?, Some(path.to_path_buf())),
            None => match default_path().filter(|p| p.exists()) {
                Some(path) => (parse_file(&path)?, Some(path)),
                None => (Config::default_parts(), None),
            },
        };
        config.source = source;
        config.apply(overrides);
        config.validate()?;
        Ok(config)
    }

    fn default_parts() -> Self {
        Self {
            app: AppSettings::default(),
            scheduler: SchedulerSettings::default(),
            source: None,
            sim_faults: Vec::new(),
            sim_script: None,
        }
    }

    fn apply(&mut self, o: &Overrides) {
        let a = &mut self.app;
        a.engine = o.engine.unwrap_or(a.engine);
        if let Some(url) = &o.upstream_url {
            a.upstream_url = Some(url.clone());
            a.engine = o.engine.unwrap_or(EngineKind::Upstream);
        }
        if let Some(key) = &o.upstream_api_key {
            a.upstream_api_key = Some(key.clone());
        }
        a.upstream_kind = o.upstream_kind.unwrap_or(a.upstream_kind);
        a.host = o.host.unwrap_or(a.host);
        if let Some(key) = &o.api_key
            && !a.api_keys.iter().any(|k| k.key() == key)
        {
            a.api_keys.push(ApiKeyEntry::Plain(key.clone()));
        }
        a.port = o.port.unwrap_or(a.port);
        // the flags were parsed into the same struct: their values always deserialize
        let mut engine = flat(&a.engine_settings);
        engine.extend(o.engine_settings.clone());
        if let Ok(settings) = serde_json::from_value(engine.into()) {
            a.engine_settings = settings;
        }
        a.renderer = o.renderer.unwrap_or(a.renderer);
        self.sim_faults.clone_from(&o.sim_faults);
        self.sim_script.clone_from(&o.sim_script);
        if o.solo_priority {
            self.scheduler.solo_priority = true;
        }
        if o.chunk_tokens.is_some() {
            self.scheduler.chunk_tokens = o.chunk_tokens;
        }
        if o.max_output_tokens_default.is_some() {
            self.scheduler.max_output_tokens_default = o.max_output_tokens_default;
        }
        if o.max_output_tokens_cap.is_some() {
            self.scheduler.max_output_tokens_cap = o.max_output_tokens_cap;
        }
    }
}

/// Splits the file's flat keys between the app's and the scheduler's, so an unknown key is
/// named rather than ignored.
fn parse_file(path: &Path) -> Result<Config, ConfigError> {
    let shown = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
        path: shown.clone(),
        message: e.to_string(),
    })?;
    let parse = |message: String| ConfigError::Parse {
        path: shown.clone(),
        message,
    };
    let value: serde_json::Value = serde_json::from_str(&text).map_err(|e| {
        // a Windows path written as in Explorer: `"C:\models\a.gguf"` holds `\m`, `\a`
        let hint = if e.to_string().starts_with("invalid escape") {
            " (a Windows path in JSON needs each \\ doubled, or / instead: \
             \"C:\\\\models\\\\a.gguf\" or \"C:/models/a.gguf\")"
        } else {
            ""
        };
        parse(format!("{e}{hint}"))
    })?;
    let serde_json::Value::Object(map) = value else {
        return Err(parse("the file must hold one JSON object".into()));
    };
    Config::from_flat(map).map_err(|e| match e {
        FlatError::UnknownKey(key) => ConfigError::UnknownKey {
            path: shown.clone(),
            key,
        },
        FlatError::Value(message) => parse(message),
    })
}

#[cfg(test)]
mod tests;
