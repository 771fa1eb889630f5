//! The config as the file writes it: one flat JSON object of keys, each to the struct that holds
//! it (the engine's settings, the app's, the scheduler's). A change from any entry point is a
//! patch of such keys; what changed is a diff of serialized values, so no key is named by hand.

use super::{AppSettings, Config, ConfigError, EngineSettings, SchedulerSettings};
use serde::Serialize;
use serde_json::{Map, Value};

/// A value's fields as the file writes them.
pub fn flat(value: &impl Serialize) -> Map<String, Value> {
    match serde_json::to_value(value) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    }
}

/// Why a flat object is not a config.
#[derive(Debug, Clone, PartialEq)]
pub enum FlatError {
    UnknownKey(String),
    /// A value of the wrong type or form; the message names the key (`gpu_layers: ...`).
    Value(String),
}

/// The keys whose values differ between `before` and `after`, with their values in `after`.
pub fn changed_keys(before: &Config, after: &Config) -> Map<String, Value> {
    let was = before.flat();
    after
        .flat()
        .into_iter()
        .filter(|(key, now)| was.get(key) != Some(now))
        .collect()
}

impl Config {
    /// Every key with its value, as the file writes them.
    pub fn flat(&self) -> Map<String, Value> {
        let mut map = flat(&self.app);
        map.extend(flat(&self.scheduler));
        map
    }

    /// The config from a flat object: each key to its struct, every key known; a missing key
    /// takes its default.
    pub fn from_flat(map: Map<String, Value>) -> Result<Self, FlatError> {
        let engine_keys = flat(&EngineSettings::default());
        let app_keys = flat(&AppSettings::default());
        let scheduler_keys = flat(&SchedulerSettings::default());
        let (mut engine, mut app, mut scheduler) = (Map::new(), Map::new(), Map::new());
        for (key, value) in map {
            if engine_keys.contains_key(&key) {
                engine.insert(key, value);
            } else if app_keys.contains_key(&key) {
                app.insert(key, value);
            } else if scheduler_keys.contains_key(&key) {
                scheduler.insert(key, value);
            } else {
                return Err(FlatError::UnknownKey(key));
            }
        }
        // each struct on its own, so a value's error names its key (`gpu_layers: expected
        // ...`): through serde's flatten the path would be lost
        let mut app: AppSettings = named(app)?;
        app.engine_settings = named(engine)?;
        Ok(Config {
            app,
            scheduler: named(scheduler)?,
            source: None,
            sim_faults: Vec::new(),
            sim_script: None,
        })
    }

    /// This config with `patch`'s keys set (unvalidated); the rest as it is.
    pub fn patched(&self, patch: &Map<String, Value>) -> Result<Self, ConfigError> {
        let mut map = self.flat();
        for (key, value) in patch {
            if !map.contains_key(key) {
                return Err(ConfigError::UnknownSetting { key: key.clone() });
            }
            map.insert(key.clone(), value.clone());
        }
        let mut config = Self::from_flat(map).map_err(|e| match e {
            FlatError::UnknownKey(key) => ConfigError::UnknownSetting { key },
            FlatError::Value(message) => ConfigError::BadValue { message },
        })?;
        config.source.clone_from(&self.source);
        config.sim_faults.clone_from(&self.sim_faults);
        config.sim_script.clone_from(&self.sim_script);
        Ok(config)
    }
}

fn named<T: serde::de::DeserializeOwned>(map: Map<String, Value>) -> Result<T, FlatError> {
    serde_path_to_error::deserialize(Value::from(map))
        .map_err(|e| FlatError::Value(format!("`{}`: {}", e.path(), e.inner())))
}
