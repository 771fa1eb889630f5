//! Settings: defaults, bounds, the mode check, serde names, priority resolution.

use super::sim::facts;
use crate::{ConfigError, GiveWay, PriorityOrder, Scheduler, SchedulerSettings, resolve_priority};

#[test]
fn settings_defaults_are_scheduling_md_s() {
    let s = SchedulerSettings::default();
    assert!(!s.solo_priority);
    assert_eq!(s.yields_max, 2);
    assert_eq!(s.min_run_quantum_secs, 5.0);
    assert_eq!(s.aging_interval_secs, 30.0);
    assert_eq!(s.small_request_tokens, 2048);
    assert_eq!((s.priority_range.min, s.priority_range.max), (-100, 100));
    assert_eq!(s.priority_order, PriorityOrder::HigherFirst);
    assert_eq!(s.give_way, GiveWay::Left);
    assert_eq!(s.chunk_tokens, None);
    assert!(s.validate().is_ok());
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
