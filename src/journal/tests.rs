use std::time::Duration;

use super::*;
use crate::sandbox::Captured;
use std::io::Write;

/// Journal files in a fresh private directory, bounded by `max_bytes`.
fn files(base: &tempfile::TempDir, max_bytes: u64) -> Files {
    std::fs::set_permissions(
        base.path(),
        std::os::unix::fs::PermissionsExt::from_mode(0o700),
    )
    .unwrap();
    Files {
        dir: Arc::new(StateDir::open(&base.path().join("journal")).unwrap()),
        max_bytes,
    }
}

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
    let dir = files(&base, 1 << 30);
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
    let path = dir.dir.path().to_path_buf();
    let text = std::fs::read_to_string(path.join("d.jsonl")).unwrap();
    let mode =
        std::os::unix::fs::MetadataExt::mode(&std::fs::metadata(path.join("d.jsonl")).unwrap());
    assert_eq!(mode & 0o777, 0o600, "a journal is private");
    // A name planted in advance is never appended to.
    std::os::unix::fs::symlink("/etc/passwd", path.join("e.jsonl")).unwrap();
    assert!(Journal::new("e", Some(&dir)).is_err());
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), MAX_KEPT + 6);
    let last: serde_json::Value = serde_json::from_str(lines[lines.len() - 1]).unwrap();
    assert_eq!(last["session_id"], "d");
    assert_eq!(last["tool"], "EditFile");
    assert_eq!(last["outcome"]["status"], "refused");
    assert_eq!(last["outcome"]["reason"], "POLICY_DENIED");
}

#[test]
fn a_recovered_journal_is_the_journal_and_reports_a_cut_short_command_as_interrupted() {
    let base = tempfile::tempdir().unwrap();
    let dir = files(&base, 1 << 30);
    let before = {
        let j = Journal::new("r", Some(&dir)).unwrap();
        write(&j, "calc.py");
        run(&j, "pytest -q", 0);
        j.refused(
            "EditFile",
            "x",
            Instant::now(),
            "OLD_STRING_NOT_FOUND",
            "no".into(),
        );
        j.changed_tree("RestoreCheckpoint", "c1", Instant::now(), String::new());
        // Started and never ended: the service died here.
        let seq = j.next_seq();
        j.command_started(seq, "sleep 1000", "/workspace/sub");
        j.report(Some(&["calc.py".to_string()]), Some("pytest -q"))
        // The journal is dropped without any ending, as by kill -9.
    };
    // The last line was cut short by the crash.
    let path = dir.dir.path().join("r.jsonl");
    let mut f = std::fs::OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap();
    f.write_all(b"{\"session_id\":\"r\",\"seq\":9").unwrap();
    drop(f);
    let (j, found) = Journal::recover("r", &dir).unwrap();
    assert_eq!(
        found,
        Recovered {
            entries: 4,
            interrupted: 1,
            unreadable: 1
        }
    );
    let after = j.report(Some(&["calc.py".to_string()]), Some("pytest -q"));
    assert_eq!(after.touched, before.touched);
    assert_eq!(after.plan, before.plan);
    // The restore came after the test run: it does not verify it, then or now.
    assert_eq!(after.verification, before.verification);
    assert!(!after.verification.as_ref().unwrap().ran_after_last_write);
    assert_eq!(after.refused.len(), 1);
    assert_eq!(after.refused[0].reason, "OLD_STRING_NOT_FOUND");
    assert_eq!(after.files_written.len(), 1);
    let interrupted: Vec<&CommandRecord> =
        after.commands.iter().filter(|c| c.interrupted).collect();
    assert_eq!(interrupted.len(), 1);
    assert_eq!(interrupted[0].command, "sleep 1000");
    assert_eq!(interrupted[0].cwd, "/workspace/sub");
    assert_eq!(interrupted[0].exit_code, -1);
    // New entries follow the old ones, numbered after them.
    let last_seq = after.entries.last().unwrap().seq;
    j.ok("ReadFile", "calc.py", Instant::now(), String::new());
    assert_eq!(
        j.report(None, None).entries.last().unwrap().seq,
        last_seq + 1
    );
    // A second restart finds the interruption recorded, not a second one.
    drop(j);
    let (again, found) = Journal::recover("r", &dir).unwrap();
    assert_eq!(found.interrupted, 0);
    let interrupted = again
        .report(None, None)
        .commands
        .iter()
        .filter(|c| c.interrupted)
        .count();
    assert_eq!(interrupted, 1);
    // An interrupted run is never a verification.
    let (cut, _) = {
        let j = Journal::new("v", Some(&dir)).unwrap();
        write(&j, "a.py");
        let seq = j.next_seq();
        j.command_started(seq, "pytest -q", "/workspace");
        drop(j);
        Journal::recover("v", &dir).unwrap()
    };
    let v = cut.report(None, Some("pytest -q")).verification.unwrap();
    assert!(!v.ran && !v.passed, "{v:?}");
}

#[test]
fn journal_files_stay_under_their_ceiling_and_count_what_they_dropped() {
    let base = tempfile::tempdir().unwrap();
    let max = 128 << 10;
    let dir = files(&base, max);
    let j = Journal::new("b", Some(&dir)).unwrap();
    let message = "m".repeat(700);
    let calls = 2_000u64;
    for i in 0..calls {
        j.refused(
            "EditFile",
            &format!("f{i}"),
            Instant::now(),
            "POLICY_DENIED",
            message.clone(),
        );
    }
    let path = dir.dir.path();
    let size = |name: &str| std::fs::metadata(path.join(name)).map_or(0, |m| m.len());
    let total = size("b.jsonl") + size("b.jsonl.1");
    assert!(total <= max, "{total} bytes of journal files, over {max}");
    let report = j.report(None, None);
    let dropped = report.file_lines_dropped;
    assert!(dropped > 0);
    // Every line is either kept in a file or counted as dropped.
    let lines = |name: &str| {
        std::fs::read_to_string(path.join(name))
            .unwrap()
            .lines()
            .filter(|l| !l.contains("\"rotated\""))
            .count() as u64
    };
    assert_eq!(lines("b.jsonl") + lines("b.jsonl.1") + dropped, calls);
    // The head of the file says what went.
    let head = std::fs::read_to_string(path.join("b.jsonl")).unwrap();
    let head: serde_json::Value = serde_json::from_str(head.lines().next().unwrap()).unwrap();
    assert!(head["rotated"]["dropped_lines"].as_u64().unwrap() > 0);
    // A restart reads back what is kept and the count of what is not.
    drop(j);
    let (j, found) = Journal::recover("b", &dir).unwrap();
    assert_eq!(found.unreadable, 0);
    assert_eq!(
        j.report(None, None).file_lines_dropped,
        head["rotated"]["dropped_lines"].as_u64().unwrap()
    );
    Journal::remove_files("b", &dir);
    assert_eq!(size("b.jsonl") + size("b.jsonl.1"), 0);
}

/// A rotation never reads a file: the previous file's lines and bytes are
/// counted as they were written. Here the previous file is swapped for a
/// sparse 8 GiB one (reading it would take the service's memory and many
/// seconds); the next rotation still takes no time worth noticing, another
/// writer of the same journal is not held up, and the counts say what the
/// journal wrote, not what the file grew to.
#[test]
fn rotation_reads_no_file_and_holds_other_writers_up_briefly() {
    let base = tempfile::tempdir().unwrap();
    let dir = files(&base, 256 << 10);
    let path = dir.dir.path().to_path_buf();
    let j = Journal::new("r", Some(&dir)).unwrap();
    let message = "m".repeat(500);
    let refuse = |j: &Journal, i: u64| {
        j.refused(
            "EditFile",
            &format!("f{i}"),
            Instant::now(),
            "POLICY_DENIED",
            message.clone(),
        )
    };
    let mut i = 0;
    while !path.join("r.jsonl.1").exists() {
        refuse(&j, i);
        i += 1;
        assert!(i < 100_000, "the journal never rotated");
    }
    let first = std::fs::read_to_string(path.join("r.jsonl.1")).unwrap();
    let (lines, bytes) = (first.lines().count() as u64, first.len() as u64);
    let sparse = 8u64 << 30;
    std::fs::File::options()
        .write(true)
        .open(path.join("r.jsonl.1"))
        .unwrap()
        .set_len(sparse)
        .unwrap();
    let rotated = || std::fs::metadata(path.join("r.jsonl.1")).map_or(0, |m| m.len()) != sparse;
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (slowest, took) = std::thread::scope(|s| {
        let other = s.spawn(|| {
            let mut slowest = Duration::ZERO;
            while !stop.load(std::sync::atomic::Ordering::SeqCst) {
                let t = Instant::now();
                j.ok("ReadFile", "x", Instant::now(), String::new());
                slowest = slowest.max(t.elapsed());
                std::thread::sleep(Duration::from_millis(1));
            }
            slowest
        });
        let started = Instant::now();
        let mut n = 0;
        while !rotated() {
            refuse(&j, i + n);
            n += 1;
            assert!(n < 100_000, "the journal never rotated again");
        }
        let took = started.elapsed();
        stop.store(true, std::sync::atomic::Ordering::SeqCst);
        (other.join().unwrap(), took)
    });
    assert!(took < Duration::from_secs(5), "rotating took {took:?}");
    assert!(
        slowest < Duration::from_secs(2),
        "another writer waited {slowest:?}"
    );
    // What went is what the journal had written there.
    assert_eq!(j.report(None, None).file_lines_dropped, lines);
    let current = std::fs::read_to_string(path.join("r.jsonl")).unwrap();
    let head: serde_json::Value = serde_json::from_str(current.lines().next().unwrap()).unwrap();
    assert_eq!(head["rotated"]["dropped_lines"].as_u64(), Some(lines));
    assert_eq!(head["rotated"]["dropped_bytes"].as_u64(), Some(bytes));
    Journal::remove_files("r", &dir);
}

fn process(j: &Journal, command: &str) -> u64 {
    let id = j.next_seq();
    j.process_started(
        &ProcessRecord {
            id,
            command: command.into(),
            cwd: "/workspace".into(),
            pty: false,
            started_at_ms: now_ms(),
            end: None,
        },
        Instant::now(),
    );
    id
}

fn ended(code: i64) -> ProcessEnd {
    ProcessEnd {
        at_ms: now_ms(),
        exit_code: code,
        signal: None,
        killed_by: KilledBy::None,
        interrupted: false,
        failed: false,
        cpu_ms: 7,
        stdout_bytes: 3,
        stderr_bytes: 0,
        notes: Vec::new(),
    }
}

#[test]
fn processes_running_at_a_crash_come_back_interrupted_once_and_ended_ones_as_they_ended() {
    let base = tempfile::tempdir().unwrap();
    let dir = files(&base, 1 << 30);
    let (server, done) = {
        let j = Journal::new("p", Some(&dir)).unwrap();
        let server = process(&j, "python3 -m http.server");
        let done = process(&j, "make watch");
        j.process_ended(done, ended(2));
        // A second end of the same process changes nothing.
        j.process_ended(done, ended(9));
        (server, done)
    };
    let (j, found) = Journal::recover("p", &dir).unwrap();
    assert_eq!(found.interrupted, 1);
    let list = j.processes();
    assert_eq!(list.len(), 2);
    let cut = list.iter().find(|p| p.id == server).unwrap();
    let end = cut.end.as_ref().unwrap();
    assert!(end.interrupted);
    assert_eq!(end.notes, [NOTE_INTERRUPTED]);
    let finished = list.iter().find(|p| p.id == done).unwrap();
    assert_eq!(finished.end.as_ref().unwrap().exit_code, 2);
    assert_eq!(finished.end.as_ref().unwrap().cpu_ms, 7);
    // The timeline has each start and each end as an entry.
    let tools: Vec<String> = j
        .report(None, None)
        .entries
        .iter()
        .map(|e| e.tool.to_string())
        .collect();
    assert_eq!(
        tools,
        [
            "StartProcess",
            "StartProcess",
            "ProcessEnded",
            "ProcessEnded"
        ]
    );
    // New ids follow the old ones; a second restart interrupts nothing more.
    assert!(process(&j, "true") > done);
    drop(j);
    let (_, found) = Journal::recover("p", &dir).unwrap();
    assert_eq!(found.interrupted, 1, "the new one was running");
}

/// A command or a process may change files as a file tool does: one that
/// ran after the verification leaves it standing for nothing, until the
/// verification runs again after it.
#[test]
fn a_command_or_a_process_after_the_verification_leaves_it_unverified() {
    let j = Journal::new("after", None).unwrap();
    let verdict = |j: &Journal| {
        let v = j.report(None, Some("pytest -q")).verification.unwrap();
        (v.ran_after_last_write, v.passed)
    };
    write(&j, "calc.py");
    run(&j, "pytest -q", 0);
    assert_eq!(verdict(&j), (true, true));
    run(&j, "sed -i s/1/2/ calc.py", 0);
    assert_eq!(verdict(&j), (false, false), "a command after it");
    run(&j, "pytest -q", 0);
    assert_eq!(verdict(&j), (true, true));

    // A command that started before it and finished after it.
    let seq = j.next_seq();
    run(&j, "pytest -q", 0);
    j.command(seq, "make fmt", "/workspace", Instant::now(), &exit(0));
    assert_eq!(verdict(&j), (false, false), "a command finishing after it");
    run(&j, "pytest -q", 0);
    assert_eq!(verdict(&j), (true, true));

    // A process started after it; then one running while it ran.
    let late = process(&j, "sh -c 'sleep 1; echo 2 > calc.py'");
    assert_eq!(verdict(&j), (false, false), "a process started after it");
    j.process_ended(late, ended(0));
    std::thread::sleep(Duration::from_millis(3));
    run(&j, "pytest -q", 0);
    assert_eq!(verdict(&j), (true, true), "that process ended before it");
    let watcher = process(&j, "make watch");
    std::thread::sleep(Duration::from_millis(3));
    run(&j, "pytest -q", 0);
    assert_eq!(verdict(&j), (false, false), "a process still running");
    std::thread::sleep(Duration::from_millis(3));
    j.process_ended(watcher, ended(0));
    assert_eq!(verdict(&j), (false, false), "a process that ended after it");
    std::thread::sleep(Duration::from_millis(3));
    run(&j, "pytest -q", 0);
    assert_eq!(verdict(&j), (true, true));
}

#[test]
fn the_written_paths_kept_are_bounded_and_the_rest_counted() {
    let j = Journal::new("a", None).unwrap();
    for i in 0..MAX_TOUCHED + 5 {
        write(&j, &format!("f/{i}.txt"));
    }
    // A path already kept is still kept, and not counted again.
    write(&j, "f/0.txt");
    let r = j.report(Some(&["f/0.txt".to_string()]), None);
    assert_eq!(r.touched.len(), MAX_TOUCHED);
    assert_eq!(r.touched_dropped, 5);
    assert_eq!(r.plan.unwrap().planned_touched, vec!["f/0.txt".to_string()]);
}
