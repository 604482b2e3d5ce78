use std::time::Duration;

use super::*;
use crate::sandbox::Captured;

fn exit(code: i64) -> ExitReport {
    ExitReport {
        exit_code: code,
        timed_out: false,
        cancelled: false,
        killed_by: KilledBy::None,
        oom_killed: false,
        pids_exhausted: false,
        notes: Vec::new(),
        duration: Duration::from_millis(5),
        stdout: Captured::default(),
        stderr: Captured::default(),
    }
}

fn run(j: &Journal, command: &str, code: i64) {
    let seq = j.next_seq();
    j.command(seq, command, "/workspace", Instant::now(), &exit(code));
}

fn write(j: &Journal, path: &str) {
    j.wrote(
        "EditFile",
        path,
        Instant::now(),
        path.to_string(),
        Some("a".into()),
        "b".into(),
    );
}

#[test]
fn reconciles_a_faithful_and_a_drifting_run() {
    let plan = vec!["src/calc.py".to_string(), "README.md".to_string()];
    let faithful = Journal::new("a", None).unwrap();
    run(&faithful, "python3 -m pytest -q", 1);
    write(&faithful, "src/calc.py");
    write(&faithful, "README.md");
    run(&faithful, "python3 -m pytest -q", 0);
    let r = faithful.report(Some(&plan), Some("python3 -m pytest -q"));
    let plan_check = r.plan.unwrap();
    assert_eq!(plan_check.unplanned, Vec::<String>::new());
    assert_eq!(plan_check.untouched, Vec::<String>::new());
    let v = r.verification.unwrap();
    assert!(v.ran && v.ran_after_last_write && v.passed);
    assert_eq!(v.exit_code, Some(0));

    let drifting = Journal::new("b", None).unwrap();
    run(&drifting, "python3 -m pytest -q", 1);
    write(&drifting, "src/calc.py");
    write(&drifting, "tests/test_calc.py");
    let r = drifting.report(Some(&plan), Some("python3 -m pytest -q"));
    let plan_check = r.plan.unwrap();
    assert_eq!(plan_check.planned_touched, vec!["src/calc.py".to_string()]);
    assert_eq!(plan_check.unplanned, vec!["tests/test_calc.py".to_string()]);
    assert_eq!(plan_check.untouched, vec!["README.md".to_string()]);
    let v = r.verification.unwrap();
    assert!(v.ran && !v.ran_after_last_write && !v.passed);
}

#[test]
fn a_command_started_before_a_write_does_not_verify_it() {
    let j = Journal::new("c", None).unwrap();
    let seq = j.next_seq();
    write(&j, "a.py");
    j.command(seq, "make test", "/workspace", Instant::now(), &exit(0));
    let v = j.report(None, Some("make test")).verification.unwrap();
    assert!(v.ran && !v.ran_after_last_write);
    // Entries stay in sequence order although the command landed last.
    let seqs: Vec<u64> = j.report(None, None).entries.iter().map(|e| e.seq).collect();
    assert_eq!(seqs, vec![1, 2]);
}

#[test]
fn only_the_very_verification_command_counts() {
    let j = Journal::new("v", None).unwrap();
    write(&j, "a.py");
    // Lookalikes after the write: they mention it, they are not it.
    run(&j, "pytest --co", 0);
    run(&j, "echo pytest", 0);
    run(&j, "pytest2", 0);
    let v = j.report(None, Some("pytest")).verification.unwrap();
    assert!(!v.ran && !v.ran_after_last_write && !v.passed, "{v:?}");
    // The command itself, however it is spaced.
    run(&j, "  pytest ", 0);
    let v = j.report(None, Some("pytest")).verification.unwrap();
    assert!(v.ran_after_last_write && v.passed, "{v:?}");
    let v = j
        .report(None, Some("python3  -m   unittest"))
        .verification
        .unwrap();
    assert!(!v.ran);
    run(&j, "python3 -m unittest", 1);
    let v = j
        .report(None, Some(" python3  -m   unittest "))
        .verification
        .unwrap();
    assert!(v.ran_after_last_write && !v.passed, "{v:?}");
    assert_eq!(v.command, "python3 -m unittest");
}

#[test]
fn keeps_a_bounded_window_and_writes_json_lines() {
    let base = tempfile::tempdir().unwrap();
    let dir = StateDir::open(&base.path().join("journal")).unwrap();
    let j = Journal::new("d", Some(&dir)).unwrap();
    for i in 0..(MAX_KEPT + 5) {
        j.ok("ReadFile", &format!("f{i}"), Instant::now(), String::new());
    }
    j.refused(
        "EditFile",
        "x",
        Instant::now(),
        "POLICY_DENIED",
        "no".into(),
    );
    let r = j.report(None, None);
    assert_eq!(r.entries.len(), MAX_KEPT);
    assert_eq!(r.dropped, 6);
    assert_eq!(r.refused.len(), 1);
    let text = std::fs::read_to_string(dir.path().join("d.jsonl")).unwrap();
    let mode = std::os::unix::fs::MetadataExt::mode(
        &std::fs::metadata(dir.path().join("d.jsonl")).unwrap(),
    );
    assert_eq!(mode & 0o777, 0o600, "a journal is private");
    // A name planted in advance is never appended to.
    std::os::unix::fs::symlink("/etc/passwd", dir.path().join("e.jsonl")).unwrap();
    assert!(Journal::new("e", Some(&dir)).is_err());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), MAX_KEPT + 6);
    let last: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last["session_id"], "d");
    assert_eq!(last["tool"], "EditFile");
    assert_eq!(last["outcome"]["status"], "refused");
    assert_eq!(last["outcome"]["reason"], "POLICY_DENIED");
}
