//! Every key of the config file, declared once: its part (the app's or the scheduler's), when a
//! change takes effect, its command-line flag, what its default means and what values it takes.
//! Defaults are not repeated here: they are the `Default` of `AppSettings` and
//! `SchedulerSettings`, read through serde. From this table come `GET /v1/settings`, the
//! settings view's notes and docs/DEPLOYMENT.md's key tables (a test fails when the file
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

pub use keys::KEYS;

/// The entry for `name`.
pub fn find(name: &str) -> Option<&'static Key> {
    KEYS.iter().find(|k| k.name == name)
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
    let defaults = defaults();
    let keys: Vec<serde_json::Value> = KEYS
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
    for k in KEYS.iter().filter(|k| k.part == part) {
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
            let declared = KEYS.iter().filter(|k| k.name == name).count();
            assert_eq!(declared, 1, "`{name}` is declared {declared} times");
        }
        for k in KEYS {
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
        for k in KEYS {
            assert_eq!(
                app.get(k.name).is_some(),
                k.part == Part::App,
                "`{}`",
                k.name
            );
        }
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
