//! Every key of the config file, declared once: its part (the app's or the scheduler's), when a
//! change takes effect, its command-line flag, what its default means and what values it takes.
//! Defaults are not repeated here: they are the `Default` of `AppSettings` and
//! `SchedulerSettings`, read through serde. From this table come `GET /v1/settings`, how
//! `PATCH /v1/settings` applies each key, and docs/DEPLOYMENT.md's key tables (a test fails when the file
//! differs; `STRATA_UPDATE_DOCS=1` rewrites it), and tests check that every field has an entry
//! and every flag named here exists.

use serde::Serialize;

/// Which struct holds the key (both sit flat in the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Part {
    App,
    Scheduler,
}

/// When a new value takes effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Applies {
    /// At once, while serving (`PATCH /v1/settings`, the window, the tray).
    Live,
    /// With a new engine, on the same address (the window's "Apply"; the HTTP server and its
    /// clients stay).
    NewEngine,
    /// When the app or the service starts again.
    Restart,
}

impl Applies {
    pub fn words(self) -> &'static str {
        match self {
            Self::Live => "live",
            Self::NewEngine => "new engine",
            Self::Restart => "restart",
        }
    }
}

/// One key.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Key {
    pub name: &'static str,
    pub part: Part,
    pub applies: Applies,
    /// Its command-line flag, if it has one.
    pub flag: Option<&'static str>,
    /// What the default means, when the value alone does not say.
    pub default_note: Option<&'static str>,
    /// The values it takes and what they do.
    pub values: &'static str,
}

const fn key(
    name: &'static str,
    part: Part,
    applies: Applies,
    flag: Option<&'static str>,
    default_note: Option<&'static str>,
    values: &'static str,
) -> Key {
    Key {
        name,
        part,
        applies,
        flag,
        default_note,
        values,
    }
}

mod keys;

/// Every key: the engine's (from [`crate::protocol::EngineSettings`]: its docs beside its
/// fields, its flags from its clap definition, all taking effect with a new engine), then the
/// rest of the app's and the scheduler's (the table in `keys.rs`).
pub fn keys() -> &'static [Key] {
    static KEYS: std::sync::LazyLock<Vec<Key>> = std::sync::LazyLock::new(|| {
        use clap::Args;
        let flags = crate::protocol::EngineSettings::augment_args(clap::Command::new("engine"));
        let flag_of = |name: &str| {
            flags
                .get_arguments()
                .find(|a| a.get_id() == name)
                .and_then(|a| a.get_long())
                // made once for the process: a `&'static str` like the table's own flags
                .map(|long| &*Box::leak(format!("--{long}").into_boxed_str()))
        };
        let engine = crate::protocol::ENGINE_KEY_DOCS.iter().map(|d| {
            key(
                d.name,
                Part::App,
                Applies::NewEngine,
                flag_of(d.name),
                d.default_note,
                d.values,
            )
        });
        engine.chain(keys::OTHER_KEYS.iter().copied()).collect()
    });
    &KEYS
}

/// The entry for `name`.
pub fn find(name: &str) -> Option<&'static Key> {
    keys().iter().find(|k| k.name == name)
}

/// Each key's default, as the config file writes it (from the two structs' `Default`).
pub fn defaults() -> serde_json::Map<String, serde_json::Value> {
    let mut map = serde_json::Map::new();
    for value in [
        serde_json::to_value(super::AppSettings::default()),
        serde_json::to_value(crate::scheduler::SchedulerSettings::default()),
    ]
    .into_iter()
    .flatten()
    {
        if let serde_json::Value::Object(fields) = value {
            map.extend(fields);
        }
    }
    map
}

/// `GET /v1/settings`: every key with the value in force, its default and its schema entry.
/// `api_keys` shows each key's name (or `key N`), never the key.
pub fn describe(
    app: &super::AppSettings,
    scheduler: &crate::scheduler::SchedulerSettings,
) -> serde_json::Value {
    let mut values = serde_json::Map::new();
    for value in [serde_json::to_value(app), serde_json::to_value(scheduler)]
        .into_iter()
        .flatten()
    {
        if let serde_json::Value::Object(fields) = value {
            values.extend(fields);
        }
    }
    let names: Vec<String> = app
        .api_keys
        .iter()
        .enumerate()
        .map(|(i, k)| k.display_name(i))
        .collect();
    values.insert("api_keys".into(), serde_json::json!(names));
    if app.upstream_api_key.is_some() {
        values.insert("upstream_api_key".into(), serde_json::json!("set"));
    }
    let defaults = defaults();
    let keys: Vec<serde_json::Value> = keys()
        .iter()
        .map(|k| {
            let mut entry = serde_json::to_value(k).unwrap_or_default();
            entry["value"] = values.get(k.name).cloned().unwrap_or_default();
            entry["default"] = defaults.get(k.name).cloned().unwrap_or_default();
            entry
        })
        .collect();
    serde_json::json!({ "settings": values, "keys": keys })
}

/// docs/DEPLOYMENT.md's table of one part's keys.
pub fn markdown_table(part: Part) -> String {
    let defaults = defaults();
    let mut out = String::from(
        "| key | default | bounds and values | flag | takes effect |\n| --- | --- | --- | --- | --- |\n",
    );
    for k in keys().iter().filter(|k| k.part == part) {
        let value = defaults
            .get(k.name)
            .map_or("?".to_owned(), serde_json::Value::to_string);
        let default = match k.default_note {
            Some(note) => format!("`{value}`: {note}"),
            None => format!("`{value}`"),
        };
        let flag = k.flag.map_or("none".to_owned(), |f| format!("`{f}`"));
        out.push_str(&format!(
            "| `{}` | {default} | {} | {flag} | {} |\n",
            k.name,
            k.values,
            k.applies.words()
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_config_key_is_declared_once_and_every_declared_key_exists() {
        let defaults = defaults();
        for name in defaults.keys() {
            let declared = keys().iter().filter(|k| k.name == name).count();
            assert_eq!(declared, 1, "`{name}` is declared {declared} times");
        }
        for k in keys() {
            assert!(
                defaults.contains_key(k.name),
                "`{}` is no config key",
                k.name
            );
        }
    }

    #[test]
    fn each_key_sits_in_the_struct_its_part_names() {
        let app = serde_json::to_value(super::super::AppSettings::default()).unwrap();
        for k in keys() {
            assert_eq!(
                app.get(k.name).is_some(),
                k.part == Part::App,
                "`{}`",
                k.name
            );
        }
    }

    /// The schema is checked against the types: a new engine's keys are the fields of
    /// `EngineSettings` (each with one entry of words beside it) and the two that the unit
    /// reads besides the worker (`chunk_tokens`, the scheduler's; `tool_call_format`, the
    /// prompts'). (The live keys are checked against the service's switches in `api::admin`.)
    #[test]
    fn when_a_key_takes_effect_follows_the_struct_that_holds_it() {
        let named = |applies: Applies| {
            let mut names: Vec<String> = keys()
                .iter()
                .filter(|k| k.applies == applies)
                .map(|k| k.name.to_owned())
                .collect();
            names.sort();
            names
        };
        let mut engine: Vec<String> =
            super::super::flat(&crate::protocol::EngineSettings::default())
                .keys()
                .cloned()
                .chain(["chunk_tokens".to_owned(), "tool_call_format".to_owned()])
                .collect();
        engine.sort();
        assert_eq!(named(Applies::NewEngine), engine);
        let docs: Vec<&str> = crate::protocol::ENGINE_KEY_DOCS
            .iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(docs.len(), engine.len() - 2, "{docs:?}");
    }

    /// The key tables of docs/DEPLOYMENT.md are this module's (`STRATA_UPDATE_DOCS=1`
    /// rewrites them).
    #[test]
    fn deployment_md_s_key_tables_are_the_schema_s() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/docs/DEPLOYMENT.md");
        let text = std::fs::read_to_string(path).unwrap();
        let mut updated = text.clone();
        for (part, heading) in [
            (Part::App, "### App keys"),
            (Part::Scheduler, "### Scheduler keys"),
        ] {
            let at = updated.find(heading).expect(heading);
            let start = at + updated[at..].find("\n| key |").expect("a table") + 1;
            let end = start + updated[start..].find("\n\n").expect("its end") + 1;
            updated.replace_range(start..end, &markdown_table(part));
        }
        if updated != text && std::env::var_os("STRATA_UPDATE_DOCS").is_some() {
            std::fs::write(path, &updated).unwrap();
            return;
        }
        assert!(
            updated == text,
            "docs/DEPLOYMENT.md's key tables differ from src/config/schema.rs \
             (STRATA_UPDATE_DOCS=1 cargo test deployment_md rewrites them)"
        );
    }
}
