//! Settings: defaults, bounds, the mode check, serde names, priority resolution.

use super::sim::facts;
use crate::{ConfigError, GiveWay, PriorityOrder, Scheduler, SchedulerSettings, resolve_priority};

/// The default SCHEDULING.md gives a key: "`key` = value", or "`key` (number)".
fn documented_default(doc: &str, key: &str) -> Option<String> {
    let name = format!("`{key}`");
    doc.match_indices(&name).find_map(|(at, _)| {
        let rest = doc[at + name.len()..].trim_start();
        let value = match rest.strip_prefix("= ") {
            Some(v) => v
                .split([',', ';', '(', ')', '\n'])
                .next()?
                .split(". ")
                .next()?,
            None => {
                let v = rest.strip_prefix('(')?.split(')').next()?;
                v.parse::<f64>().ok()?;
                v
            }
        };
        let value = value.trim().trim_matches('`').trim_end_matches('.');
        (!value.is_empty()).then(|| value.to_owned())
    })
}

/// Every key of `SchedulerSettings`, read from its JSON form, has its default written in
/// SCHEDULING.md, and the two agree. A new key without a documented default fails here.
#[test]
fn settings_defaults_are_scheduling_md_s() {
    let doc = include_str!("../../../../docs/SCHEDULING.md");
    let defaults = serde_json::to_value(SchedulerSettings::default()).unwrap();
    let keys = defaults.as_object().unwrap();
    assert_eq!(keys.len(), 18, "every setting is checked: {keys:?}");
    for (key, value) in keys {
        let documented = documented_default(doc, key)
            .unwrap_or_else(|| panic!("SCHEDULING.md gives no default for `{key}`"));
        let agrees = match value {
            serde_json::Value::Null => documented == "unset" || documented == "none",
            serde_json::Value::Bool(b) => documented == b.to_string(),
            serde_json::Value::Number(n) => documented.parse::<f64>().ok() == n.as_f64(),
            serde_json::Value::String(s) => documented == *s,
            serde_json::Value::Object(range) => {
                documented == format!("{}..{}", range["min"], range["max"])
            }
            serde_json::Value::Array(_) => false,
        };
        assert!(
            agrees,
            "`{key}`: the default is {value}, SCHEDULING.md says {documented}"
        );
    }
    assert!(SchedulerSettings::default().validate().is_ok());
}

#[test]
fn validate_names_the_key_the_bound_and_the_value() {
    let s = SchedulerSettings {
        chunk_tokens: Some(10),
        ..SchedulerSettings::default()
    };
    let e = s.validate().unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("chunk_tokens")
            && msg.contains("64")
            && msg.contains("8192")
            && msg.contains("10"),
        "{msg}"
    );
    let s = SchedulerSettings {
        aging_interval_secs: -1.0,
        ..SchedulerSettings::default()
    };
    assert!(matches!(
        s.validate(),
        Err(ConfigError::OutOfBounds {
            key: "aging_interval_secs",
            ..
        })
    ));
}

#[test]
fn solo_priority_with_parallel_two_is_a_configuration_error_naming_both_keys() {
    let s = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    let e = Scheduler::new(s, facts(2, 256)).unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("solo_priority") && msg.contains("parallel: 2"),
        "{msg}"
    );
}

#[test]
fn settings_deserialize_with_defaults_and_snake_case_names() {
    let s: SchedulerSettings = serde_json::from_str(
        r#"{"give_way":"whole","priority_order":"lower_first","yields_max":3}"#,
    )
    .unwrap();
    assert_eq!(s.give_way, GiveWay::Whole);
    assert_eq!(s.priority_order, PriorityOrder::LowerFirst);
    assert_eq!(s.yields_max, 3);
    assert_eq!(s.aging_interval_secs, 30.0);
    assert!(serde_json::from_str::<SchedulerSettings>(r#"{"yield_max":3}"#).is_err());
    let back: SchedulerSettings =
        serde_json::from_value(serde_json::to_value(&s).unwrap()).unwrap();
    assert_eq!(back, s);
}

#[test]
fn resolve_priority_clamps_and_turns_lower_first_around() {
    let mut s = SchedulerSettings::default();
    assert_eq!(resolve_priority(None, &s), 0);
    assert_eq!(resolve_priority(Some(7), &s), 7);
    assert_eq!(resolve_priority(Some(1_000), &s), 100);
    assert_eq!(resolve_priority(Some(-1_000), &s), -100);
    s.priority_order = PriorityOrder::LowerFirst;
    assert_eq!(resolve_priority(Some(7), &s), -7);
}

#[test]
fn an_invalid_setting_at_run_time_is_refused_and_the_old_ones_stay() {
    let mut sched = Scheduler::new(SchedulerSettings::default(), facts(2, 256)).unwrap();
    let bad = SchedulerSettings {
        solo_priority: true,
        ..SchedulerSettings::default()
    };
    assert!(
        sched
            .set_settings(bad.clone(), std::time::Duration::ZERO)
            .is_err()
    );
    let out = sched.handle(
        crate::Event::SettingsChanged(Box::new(bad)),
        std::time::Duration::ZERO,
    );
    assert!(out.diagnostics[0].contains("solo_priority"));
    assert!(!sched.settings().solo_priority);
}
