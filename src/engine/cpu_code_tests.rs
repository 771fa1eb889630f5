use super::*;

fn skipped(variant: &str) -> SkippedCpuCode {
    SkippedCpuCode {
        variant: variant.to_owned(),
        why: "crashed on this CPU (illegal instruction, SIGILL) while the engine warmed up"
            .to_owned(),
    }
}

fn names(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn key(cpu: &str, build: &str) -> CpuKey {
    CpuKey {
        cpu: cpu.to_owned(),
        flags: "1:0 7:0".to_owned(),
        build: build.to_owned(),
    }
}

#[test]
fn auto_tries_the_variants_best_first_passing_over_those_recorded_as_crashing() {
    let ranked = names(&["sapphirerapids", "zen4", "icelake", "x64"]);
    let plan = Plan::new("auto", &ranked, &[skipped("sapphirerapids")]);
    assert_eq!(plan.candidates, names(&["zen4", "icelake", "x64"]));
    assert_eq!(plan.recorded, vec![skipped("sapphirerapids")]);
    // empty is auto too
    assert_eq!(Plan::new("", &ranked, &[]).candidates, ranked);
}

#[test]
fn a_pinned_variant_or_a_build_without_variants_has_no_fallback() {
    let ranked = names(&["zen4", "x64"]);
    assert!(Plan::new("zen4", &ranked, &[]).candidates.is_empty());
    assert!(Plan::new("auto", &[], &[]).candidates.is_empty());
}

#[test]
fn a_record_that_rules_out_every_variant_is_ignored() {
    let ranked = names(&["zen4", "x64"]);
    let plan = Plan::new("auto", &ranked, &[skipped("zen4"), skipped("x64")]);
    assert_eq!(plan.candidates, ranked);
    assert!(plan.recorded.is_empty());
}

#[test]
fn a_record_is_kept_per_cpu_and_build_and_a_new_build_probes_again() {
    let here = key("Intel(R) Xeon(R) Platinum 8488C", "0.1.0+aa");
    let other_cpu = key("AMD EPYC 9R14", "0.1.0+aa");
    let mut record = Record::default();
    record.add(&here, &[skipped("sapphirerapids")]);
    record.add(&here, &[skipped("sapphirerapids")]);
    assert_eq!(record.crashed(&here), &[skipped("sapphirerapids")]);
    assert!(record.crashed(&other_cpu).is_empty());
    // a new build: the old build's entries go
    let rebuilt = key("Intel(R) Xeon(R) Platinum 8488C", "0.1.0+bb");
    assert!(record.crashed(&rebuilt).is_empty());
    record.add(&rebuilt, &[skipped("icelake")]);
    assert!(record.crashed(&here).is_empty());
    assert_eq!(record.cpus.len(), 1);
    assert!(record.forget(&rebuilt));
    assert!(!record.forget(&rebuilt));
}

#[test]
fn a_record_survives_a_write_and_a_read_and_a_broken_file_reads_as_empty() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sub").join(RECORD_FILE);
    let here = key("cpu", "b");
    let mut record = Record::default();
    record.add(&here, &[skipped("zen4")]);
    record.write(&path).unwrap();
    assert_eq!(Record::read(&path), record);
    std::fs::write(&path, "{not json").unwrap();
    assert_eq!(Record::read(&path), Record::default());
    assert_eq!(
        Record::read(&dir.path().join("none.json")),
        Record::default()
    );
}

#[test]
fn only_cpu_faults_are_blamed_on_the_cpu_code() {
    assert!(
        cpu_fault(&WorkerExit::Signal(4))
            .unwrap()
            .contains("SIGILL")
    );
    assert!(
        cpu_fault(&WorkerExit::Signal(11))
            .unwrap()
            .contains("SIGSEGV")
    );
    assert!(
        cpu_fault(&WorkerExit::Signal(7))
            .unwrap()
            .contains("SIGBUS")
    );
    let windows = |code: u32| WorkerExit::Code(code as i32);
    assert!(
        cpu_fault(&windows(0xC000_001D))
            .unwrap()
            .contains("ILLEGAL_INSTRUCTION")
    );
    assert!(
        cpu_fault(&windows(0xC000_0005))
            .unwrap()
            .contains("ACCESS_VIOLATION")
    );
    for not in [
        WorkerExit::Signal(9),
        WorkerExit::Signal(6),
        WorkerExit::Code(1),
        WorkerExit::Killed,
    ] {
        assert_eq!(cpu_fault(&not), None, "{not:?}");
    }
}

#[test]
fn the_words_name_each_variant_passed_over_and_the_one_in_use() {
    assert_eq!(skipped_words(&[], "zen4"), "");
    let words = skipped_words(&[skipped("sapphirerapids")], "zen4");
    assert_eq!(
        words,
        "the sapphirerapids CPU code crashed on this CPU (illegal instruction, SIGILL) while \
         the engine warmed up; using zen4"
    );
}

#[test]
fn this_cpu_has_a_brand_string_and_flags() {
    let key = CpuKey::here();
    assert!(!key.cpu.is_empty());
    assert!(key.build.starts_with(env!("CARGO_PKG_VERSION")));
    if cfg!(target_arch = "x86_64") {
        assert!(key.flags.starts_with("1:"), "{}", key.flags);
    }
}
