//! Validation of the whole configuration: every value in bounds, named with its key.

use super::{Config, ConfigError, EngineKind, FlashAttn, KvType};

/// A key, whether its value is in bounds, the bound in words, and the value as written.
type Bound = (&'static str, bool, &'static str, String);

impl Config {
    /// Checks every key's bounds; the first one out names the key, the bound and the value.
    pub fn validate(&self) -> Result<(), ConfigError> {
        for (key, ok, bound, value) in self.bounds().into_iter().chain(self.app_bounds()) {
            if !ok {
                return Err(ConfigError::OutOfBounds { key, bound, value });
            }
        }
        self.validate_ranges()?;
        self.validate_upstream()?;
        self.validate_keys_and_cache()?;
        self.scheduler
            .validate_for(self.app.engine_settings.slots)?;
        Ok(())
    }

    /// The keys whose bound is said in words, in the order they are checked.
    fn bounds(&self) -> [Bound; 11] {
        let a = &self.app;
        let e = &a.engine_settings;
        [
            (
                "parallel",
                (1..=64).contains(&e.slots),
                "between 1 and 64",
                e.slots.to_string(),
            ),
            (
                "kv_sequences",
                e.kv_sequences == 0 || (e.slots < e.kv_sequences && e.kv_sequences <= 256),
                "0 (max(16, parallel + 1)) or more than `parallel` and at most 256",
                e.kv_sequences.to_string(),
            ),
            (
                "ctx",
                e.ctx_tokens == 0 || (256..=1_048_576).contains(&e.ctx_tokens),
                "0 (the largest that fits) or between 256 and 1048576",
                e.ctx_tokens.to_string(),
            ),
            (
                "ctx_min",
                (256..=1_048_576).contains(&e.ctx_min_tokens),
                "between 256 and 1048576",
                e.ctx_min_tokens.to_string(),
            ),
            (
                "threads",
                e.threads <= 1024,
                "at most 1024",
                e.threads.to_string(),
            ),
            (
                "ubatch_tokens",
                (64..=2048).contains(&e.ubatch_tokens),
                "between 64 and 2048",
                e.ubatch_tokens.to_string(),
            ),
            (
                "conversation_cache_mib",
                e.conversation_cache_mib <= 1_048_576,
                "at most 1048576",
                e.conversation_cache_mib.to_string(),
            ),
            (
                "grammar_ms_per_token",
                (1..=5_000).contains(&e.grammar_ms_per_token),
                "between 1 and 5000 (the host gives a step 10 s and up)",
                e.grammar_ms_per_token.to_string(),
            ),
            (
                "ctx_checkpoints",
                e.ctx_checkpoints <= 1024,
                "at most 1024",
                e.ctx_checkpoints.to_string(),
            ),
            (
                "checkpoint_min_step",
                e.checkpoint_min_step_tokens >= 64,
                "at least 64",
                e.checkpoint_min_step_tokens.to_string(),
            ),
            (
                "checkpoint_mib",
                e.checkpoint_mib <= 1_048_576,
                "at most 1048576",
                e.checkpoint_mib.to_string(),
            ),
        ]
    }

    /// The app's keys whose bound is said in words.
    fn app_bounds(&self) -> [Bound; 3] {
        let a = &self.app;
        [
            (
                "port",
                a.port != 0,
                "between 1 and 65535",
                a.port.to_string(),
            ),
            (
                "fim_priority",
                a.fim_priority
                    .is_none_or(|p| (-1_000_000..=1_000_000).contains(&p)),
                "between -1000000 and 1000000",
                format!("{:?}", a.fim_priority),
            ),
            (
                "body_limit_mib",
                (1..=1024).contains(&a.body_limit_mib),
                "between 1 and 1024",
                a.body_limit_mib.to_string(),
            ),
        ]
    }

    /// The integer keys with a plain range.
    fn validate_ranges(&self) -> Result<(), ConfigError> {
        let a = &self.app;
        for (key, value, range) in [
            ("prepare_concurrency", a.prepare_concurrency, 0..=1024),
            ("prepare_waiting_max", a.prepare_waiting_max, 1..=100_000),
            ("max_tools", a.max_tools, 1..=4096),
            ("max_tool_schema_kib", a.max_tool_schema_kib, 1..=65_536),
            (
                "max_grammar_build_steps",
                a.max_grammar_build_steps,
                1_000..=4_000_000_000,
            ),
            ("max_stop_strings", a.max_stop_strings, 1..=256),
            ("max_stop_string_bytes", a.max_stop_string_bytes, 1..=65_536),
            (
                "header_read_timeout_secs",
                a.header_read_timeout_secs,
                1..=3600,
            ),
            ("body_read_timeout_secs", a.body_read_timeout_secs, 1..=3600),
            ("event_subscribers_max", a.event_subscribers_max, 1..=1024),
        ] {
            if !range.contains(&value) {
                return Err(ConfigError::OutOfRange {
                    key,
                    min: *range.start(),
                    max: *range.end(),
                    value,
                });
            }
        }
        Ok(())
    }

    /// API keys long enough, a KV cache type the attention can hold, and keys when the
    /// server listens beyond this machine.
    /// `engine: upstream` needs an `http://` or `https://` `upstream_url`; the other engines
    /// take none (a URL left there would silently not be used).
    fn validate_upstream(&self) -> Result<(), ConfigError> {
        let a = &self.app;
        let url = a
            .upstream_url
            .as_deref()
            .map(str::trim)
            .filter(|u| !u.is_empty());
        match (a.engine, url) {
            (EngineKind::Upstream, None) => Err(ConfigError::BadValue {
                message: "`engine: upstream` needs `upstream_url` (or `--upstream URL`): the \
                          server to send requests to, e.g. http://127.0.0.1:8081"
                    .into(),
            }),
            (EngineKind::Upstream, Some(url))
                if !(url.starts_with("http://") || url.starts_with("https://")) =>
            {
                Err(ConfigError::OutOfBounds {
                    key: "upstream_url",
                    bound: "an http:// or https:// URL",
                    value: format!("{url:?}"),
                })
            }
            (engine @ (EngineKind::Llama | EngineKind::Sim), Some(url)) => {
                Err(ConfigError::BadValue {
                    message: format!(
                        "`upstream_url` ({url}) is set but `engine` is `{}`: it would not be \
                         used; set `engine: upstream` (or pass `--upstream URL`), or remove \
                         `upstream_url`",
                        serde_json::to_value(engine)
                            .ok()
                            .and_then(|v| v.as_str().map(str::to_owned))
                            .unwrap_or_default()
                    ),
                })
            }
            _ => Ok(()),
        }
    }

    fn validate_keys_and_cache(&self) -> Result<(), ConfigError> {
        let a = &self.app;
        let e = &a.engine_settings;
        if let Some(empty) = a.api_keys.iter().find(|k| k.key().len() < 8) {
            return Err(ConfigError::OutOfBounds {
                key: "api_keys",
                bound: "keys of at least 8 characters",
                value: format!(
                    "{:?}",
                    empty.key().chars().take(2).collect::<String>() + "…"
                ),
            });
        }
        if e.kv_type == KvType::Q8_0 && e.flash_attn == FlashAttn::Off {
            return Err(ConfigError::OutOfBounds {
                key: "kv_type",
                bound: "f16 when `flash_attn` is off (llama.cpp quantizes the V cache only with flash attention)",
                value: "\"q8_0\"".into(),
            });
        }
        if !a.host.is_loopback() && a.api_keys.is_empty() {
            return Err(ConfigError::ExposedWithoutKeys { host: a.host });
        }
        Ok(())
    }
}
