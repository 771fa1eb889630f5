//! The config file and flags: parsing, overrides, defaults, errors that name the key.

use super::*;

fn write(text: &str) -> PathBuf {
    // One file per call: tests run in parallel in one process.
    static NEXT: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "strata-config-{}-{}.json",
        std::process::id(),
        NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    ));
    std::fs::write(&path, text).unwrap();
    path
}

#[test]
fn app_and_scheduler_keys_sit_flat_in_one_file_and_flags_override_them() {
    let path = write(r#"{"port": 9000, "parallel": 2, "give_way": "whole", "queue_max": 7}"#);
    let config = Config::load(
        Some(&path),
        &Overrides {
            port: Some(9100),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(config.app.port, 9100);
    assert_eq!(config.app.engine_settings.slots, 2);
    assert_eq!(config.scheduler.queue_max, 7);
    assert_eq!(config.scheduler.give_way, crate::scheduler::GiveWay::Whole);
}

#[test]
fn ctx_min_is_32k_by_default_the_flag_overrides_it_and_one_under_256_names_the_key_and_bound() {
    let path = write(r#"{"port": 9002}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(
        (
            config.app.engine_settings.ctx_tokens,
            config.app.engine_settings.ctx_min_tokens
        ),
        (0, 32_768)
    );
    let overrides = Overrides {
        engine_settings: flags(serde_json::json!({"ctx_min": 98_304})),
        ..Overrides::default()
    };
    let config = Config::load(Some(&path), &overrides).unwrap();
    assert_eq!(config.app.engine_settings.ctx_min_tokens, 98_304);
    let path = write(r#"{"ctx_min": 100}"#);
    let error = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("`ctx_min`"), "{error}");
    assert!(error.contains("between 256 and 1048576"), "{error}");
    assert!(error.contains("100"), "{error}");
}

#[test]
fn gpu_memory_limit_is_none_by_default_takes_mib_or_a_size_and_a_bad_value_names_the_key() {
    let path = write(r#"{"port": 9002}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.engine_settings.gpu_memory_limit.bytes(), 0);
    let path = write(r#"{"gpu_memory_limit": "6 GiB"}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.engine_settings.gpu_memory_limit.mib, 6144);
    let overrides = Overrides {
        engine_settings: flags(serde_json::json!({"gpu_memory_limit": 512})),
        ..Overrides::default()
    };
    let config = Config::load(Some(&path), &overrides).unwrap();
    assert_eq!(config.app.engine_settings.gpu_memory_limit.mib, 512);
    let path = write(r#"{"gpu_memory_limit": "6 GB"}"#);
    let error = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("`gpu_memory_limit`"), "{error}");
    assert!(error.contains("\"6 GB\""), "{error}");
}

#[test]
fn gpu_layers_is_auto_by_default_takes_a_count_and_a_bad_value_names_the_key() {
    let path = write(r#"{"port": 9002}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.engine_settings.gpu_layers, GpuLayers::Auto);
    let path = write(r#"{"gpu_layers": 24}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.engine_settings.gpu_layers, GpuLayers::Count(24));
    let path = write(r#"{"gpu_layers": "all"}"#);
    let error = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("`gpu_layers`"), "{error}");
    assert!(error.contains("\"all\""), "{error}");
    let path = write(r#"{"give_way": "sometimes"}"#);
    let error = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("`give_way`"), "{error}");
}

#[test]
fn persisting_keeps_the_files_other_keys_and_the_result_loads() {
    let path = write(r#"{"port": 9001, "queue_max": 5}"#);
    let mut changes = serde_json::Map::new();
    changes.insert("parallel".into(), serde_json::json!(3));
    changes.insert("kv_type".into(), serde_json::json!("q8_0"));
    persist(&path, changes).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.port, 9001);
    assert_eq!(config.scheduler.queue_max, 5);
    assert_eq!(config.app.engine_settings.slots, 3);
    assert_eq!(config.app.engine_settings.kv_type, KvType::Q8_0);
}

#[test]
fn persisted_nulls_for_the_default_model_and_measured_chunks_load_again() {
    let path = write(r#"{"ctx": 2048, "queue_max": 6, "parallel": 1, "threads": 1}"#);
    let mut changes = serde_json::Map::new();
    changes.insert("model".into(), serde_json::Value::Null);
    changes.insert("chunk_tokens".into(), serde_json::Value::Null);
    persist(&path, changes).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.engine_settings.model, None);
    assert_eq!(config.scheduler.chunk_tokens, None);
    assert_eq!(config.app.engine_settings.ctx_tokens, 2048);
}

#[test]
fn a_quantized_kv_cache_without_flash_attention_is_refused() {
    let err = Config::load(
        None,
        &Overrides {
            engine_settings: flags(serde_json::json!({"kv_type": "q8_0", "flash_attn": "off"})),
            ..Overrides::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("kv_type") && err.contains("flash_attn"),
        "{err}"
    );
}

#[test]
fn persisting_creates_a_missing_file_and_refuses_to_overwrite_a_broken_one() {
    let dir = std::env::temp_dir().join(format!("strata-persist-{}", std::process::id()));
    let path = dir.join("sub").join("config.json");
    let mut changes = serde_json::Map::new();
    changes.insert("solo_priority".into(), serde_json::json!(true));
    persist(&path, changes.clone()).unwrap();
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert!(config.scheduler.solo_priority);
    std::fs::write(&path, "[1, 2").unwrap();
    let err = persist(&path, changes).unwrap_err().to_string();
    assert!(err.contains("not overwriting"), "{err}");
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "[1, 2");
}

#[test]
fn a_file_from_an_older_version_without_the_newer_keys_still_loads() {
    let path = write(r#"{"model": "/m.gguf", "parallel": 1}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(config.app.engine_settings.flash_attn, FlashAttn::Auto);
    assert_eq!(config.app.renderer, Renderer::Glow);
    assert!(config.app.recent_models.is_empty());
}

#[test]
fn an_unknown_key_is_named() {
    let path = write(r#"{"prot": 9000}"#);
    let err = Config::load(Some(&path), &Overrides::default()).unwrap_err();
    assert!(err.to_string().contains("unknown key `prot`"), "{err}");
}

#[test]
fn a_value_out_of_bounds_names_the_key_the_bound_and_the_value() {
    let err = Config::load(
        None,
        &Overrides {
            engine_settings: flags(serde_json::json!({"parallel": 0})),
            ..Overrides::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "`parallel` must be between 1 and 64, got 0"
    );
}

#[test]
fn solo_priority_with_parallel_is_refused_naming_both_keys() {
    let err = Config::load(
        None,
        &Overrides {
            engine_settings: flags(serde_json::json!({"parallel": 2})),
            solo_priority: true,
            ..Overrides::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("solo_priority") && err.contains("parallel"),
        "{err}"
    );
}

#[test]
fn binding_beyond_loopback_without_api_keys_is_refused() {
    let err = Config::load(
        None,
        &Overrides {
            host: Some(IpAddr::from([0, 0, 0, 0])),
            ..Overrides::default()
        },
    )
    .unwrap_err();
    assert!(
        matches!(err, ConfigError::ExposedWithoutKeys { .. }),
        "{err}"
    );
}

#[test]
fn a_key_on_the_command_line_lets_the_server_bind_beyond_loopback() {
    let exposed = |api_key: &str| {
        Config::load(
            Some(&write("{}")),
            &Overrides {
                host: Some(IpAddr::from([0, 0, 0, 0])),
                api_key: Some(api_key.into()),
                ..Overrides::default()
            },
        )
    };
    let config = exposed("a-long-enough-key").unwrap();
    let keys: Vec<&str> = config.app.api_keys.iter().map(|k| k.key()).collect();
    assert_eq!(keys, ["a-long-enough-key"]);
    // the same rules as a key in the file
    let err = exposed("short").unwrap_err().to_string();
    assert!(err.contains("api_keys"), "{err}");
    // without one, the refusal says how to give one
    let err = Config::load(
        Some(&write("{}")),
        &Overrides {
            host: Some(IpAddr::from([0, 0, 0, 0])),
            ..Overrides::default()
        },
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("--api-key") && err.contains("STRATA_API_KEY"),
        "{err}"
    );
}

#[test]
fn a_windows_path_with_single_backslashes_says_to_double_them_or_use_slashes() {
    let path = write(r#"{"model": "C:\models\coder.gguf"}"#);
    let error = Config::load(Some(&path), &Overrides::default())
        .unwrap_err()
        .to_string();
    assert!(error.contains("invalid escape"), "{error}");
    assert!(
        error.contains(r#""C:\\models\\a.gguf" or "C:/models/a.gguf""#),
        "{error}"
    );
    let path = write(r#"{"model": "C:\\models\\coder.gguf", "port": 9003}"#);
    let config = Config::load(Some(&path), &Overrides::default()).unwrap();
    assert_eq!(
        config.app.engine_settings.model,
        Some(PathBuf::from(r"C:\models\coder.gguf"))
    );
}

/// Engine-setting flags as the command line gives them: config keys and values.
fn flags(value: serde_json::Value) -> serde_json::Map<String, serde_json::Value> {
    value.as_object().cloned().unwrap_or_default()
}

#[test]
fn the_upstream_flag_sets_the_url_and_the_upstream_engine_and_its_key_is_never_shown() {
    let path = write(r#"{"upstream_kind": "llama-server"}"#);
    let config = Config::load(
        Some(&path),
        &Overrides {
            upstream_url: Some("http://127.0.0.1:8081".into()),
            upstream_api_key: Some("upstream-secret-key".into()),
            ..Overrides::default()
        },
    )
    .unwrap();
    assert_eq!(config.app.engine, EngineKind::Upstream);
    assert_eq!(
        config.app.upstream_url.as_deref(),
        Some("http://127.0.0.1:8081")
    );
    assert_eq!(
        config.app.upstream_kind,
        crate::upstream::UpstreamKind::LlamaServer
    );
    let shown = crate::config::schema::describe(&config.app, &config.scheduler).to_string();
    assert!(!shown.contains("upstream-secret-key"), "{shown}");
    assert!(shown.contains(r#""upstream_api_key":"set""#), "{shown}");
}

#[test]
fn an_upstream_url_with_another_engine_or_the_upstream_engine_without_one_is_refused() {
    for (text, needle) in [
        (
            r#"{"upstream_url": "http://127.0.0.1:8081"}"#,
            "`upstream_url` (http://127.0.0.1:8081) is set but `engine` is `llama`",
        ),
        (
            r#"{"engine": "sim", "upstream_url": "http://127.0.0.1:8081"}"#,
            "`engine` is `sim`",
        ),
        (
            r#"{"engine": "upstream"}"#,
            "`engine: upstream` needs `upstream_url`",
        ),
        (
            r#"{"engine": "upstream", "upstream_url": "127.0.0.1:8081"}"#,
            "`upstream_url` must be an http:// or https:// URL, got \"127.0.0.1:8081\"",
        ),
    ] {
        let error = Config::load(Some(&write(text)), &Overrides::default()).unwrap_err();
        assert!(error.to_string().contains(needle), "{text}: {error}");
    }
}
