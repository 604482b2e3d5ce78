//! Printing of replies: how each verb shows what the service answered.
//! Everything goes through the [`Stdio`] console, so text the sandboxed
//! side controls reaches a terminal neutralised (see `terminal`). Names in
//! line-per-item listings (paths, commands, journal summaries) go through
//! [`name`]: one with a newline, a quote or an escape sequence is printed
//! quoted, as git prints it, so that it stays one item on one line, on a
//! terminal and in a pipe alike. Plans and approvals are printed in
//! `print/approvals`.

use sandboxd::pb;
pub use sandboxd::workspace::quote::shown as name;

use std::io::Write;

use super::terminal::Console;

mod approvals;
pub use approvals::{approved_plan, pending, rejection};

/// Where the client verbs print: every line that carries text the sandboxed
/// side controls goes through it.
pub type Stdio = Console<std::io::Stdout, std::io::Stderr>;

/// Prints the end of a streamed command: the kept tail of a stream whose
/// middle was cut, the service's notes, and the summary line.
pub fn exit(con: &mut Console<impl Write, impl Write>, exit: &pb::CommandExit) {
    let (out, err) = (
        exit.stdout.clone().unwrap_or_default(),
        exit.stderr.clone().unwrap_or_default(),
    );
    if out.truncated {
        con.out(format_args!(
            "\n[... {} bytes omitted ...]\n{}",
            out.omitted_bytes, out.tail
        ));
    }
    if err.truncated {
        con.err(format_args!(
            "\n[... {} bytes omitted ...]\n{}",
            err.omitted_bytes, err.tail
        ));
    }
    for note in &exit.notes {
        con.status(format_args!("[note: {note}]"));
    }
    con.status(format_args!("{}", exit_summary(exit)));
}

/// One line saying how a command ended.
pub fn exit_summary(exit: &pb::CommandExit) -> String {
    let how = match exit.killed_by() {
        pb::KilledBy::None => String::new(),
        pb::KilledBy::ProcessGroupTerm => ", stopped by SIGTERM to its process group".into(),
        pb::KilledBy::ProcessGroupKill => ", stopped by SIGKILL to its process group".into(),
        pb::KilledBy::Container => ", stopped by killing its container".into(),
        pb::KilledBy::ContainerFailed => {
            ", its container could not be killed (the engine failed; it is being removed)".into()
        }
    };
    let timed_out = if exit.timed_out { "timed out, " } else { "" };
    let oom = if exit.oom_killed {
        ", out of memory: the kernel killed a process at the container's memory limit"
    } else {
        ""
    };
    let pids = if exit.pids_exhausted {
        ", process limit reached: forks failed"
    } else {
        ""
    };
    format!(
        "[{timed_out}exit {} in {} ms{how}{oom}{pids}]",
        exit.exit_code, exit.duration_ms
    )
}

/// Prints a session report; `journal` adds every journal entry.
pub fn report(con: &mut Console<impl Write, impl Write>, r: &pb::SessionReport, journal: bool) {
    con.out(format_args!("files written ({}):\n", r.files_written.len()));
    for w in &r.files_written {
        let before = if w.sha256_before.is_empty() {
            "new"
        } else {
            prefix(&w.sha256_before, 12)
        };
        con.out(format_args!(
            "  #{:<4} {:<10} {}  {} -> {}\n",
            w.seq,
            w.tool,
            name(&w.path),
            before,
            prefix(&w.sha256_after, 12)
        ));
    }
    con.out(format_args!("commands ({}):\n", r.commands.len()));
    for c in &r.commands {
        let mut how = format!("exit {}", c.exit_code);
        if c.timed_out {
            how.push_str(", timed out");
        }
        if c.oom_killed {
            how.push_str(", out of memory");
        }
        if c.cancelled {
            how.push_str(", cancelled");
        }
        if c.interrupted {
            how = "interrupted: the service stopped while it ran".to_string();
        }
        con.out(format_args!(
            "  #{:<4} {}  [{how}]\n",
            c.seq,
            name(&c.command)
        ));
    }
    con.out(format_args!("refused ({}):\n", r.denied.len()));
    for d in &r.denied {
        con.out(format_args!(
            "  #{:<4} {:<10} {} [{}]\n",
            d.seq,
            d.tool,
            name(&d.summary),
            d.reason
        ));
    }
    let list = |v: &[String]| {
        if v.is_empty() {
            "-".to_string()
        } else {
            v.iter().map(|p| name(p)).collect::<Vec<_>>().join(", ")
        }
    };
    if !r.planned_touched.is_empty() || !r.unplanned.is_empty() || !r.untouched.is_empty() {
        con.out(format_args!(
            "planned and touched: {}\ntouched, not planned: {}\nplanned, untouched:  {}\n",
            list(&r.planned_touched),
            list(&r.unplanned),
            list(&r.untouched)
        ));
    }
    if !r.changes_unchecked.is_empty() {
        con.out(format_args!(
            "changed outside the plan (by anything): not checked: {}\n",
            name(&r.changes_unchecked)
        ));
    } else if r.plan.is_some() || !r.changed_unplanned.is_empty() {
        con.out(format_args!(
            "changed outside the plan (by anything): {}\n",
            list(&r.changed_unplanned)
        ));
    }
    if let Some(plan) = &r.plan {
        approved_plan(con, plan);
    }
    if !r.processes.is_empty() {
        con.out(format_args!("processes ({}):\n", r.processes.len()));
        for p in &r.processes {
            let state = format!("{:?}", p.state()).to_lowercase();
            let end = if p.ended_at_ms == 0 {
                String::new()
            } else {
                format!(", exit {}", p.exit_code)
            };
            con.out(format_args!(
                "  {}  [{state}{end}]  {}\n",
                name(&p.process_id),
                name(&p.command)
            ));
        }
    }
    if let Some(v) = &r.verification {
        let verdict = match (v.ran, v.ran_after_last_write, v.passed) {
            (false, _, _) => "never ran".to_string(),
            (true, false, _) => "did not run after the last write".to_string(),
            (true, true, true) => "ran after the last write and passed".to_string(),
            (true, true, false) => {
                format!("ran after the last write and failed (exit {})", v.exit_code)
            }
        };
        con.out(format_args!("verification {:?}: {verdict}\n", v.command));
    }
    if journal {
        con.out(format_args!("journal ({} dropped):\n", r.journal_dropped));
        if r.journal_file_lines_dropped > 0 {
            con.out(format_args!(
                "  ({} older lines dropped from the journal files at their size ceiling)\n",
                r.journal_file_lines_dropped
            ));
        }
        for e in &r.journal {
            con.out(format_args!(
                "  #{:<4} {:<16} {:<10} {} ms  {}  {}\n",
                e.seq,
                e.tool,
                e.outcome,
                e.duration_ms,
                name(&e.summary),
                name(&e.detail)
            ));
        }
    }
}

/// The first `chars` characters of `s` (ids and hashes come from the
/// service: never cut one inside a character).
pub fn prefix(s: &str, chars: usize) -> &str {
    s.char_indices().nth(chars).map_or(s, |(end, _)| &s[..end])
}

/// Prints one session.
pub fn session(con: &mut Console<impl Write, impl Write>, s: &pb::Session) {
    con.out(format_args!("session   {}\n", s.session_id));
    con.out(format_args!(
        "workspace {}{}\n",
        name(&s.workspace_path),
        if s.owns_workspace {
            " (fresh, removed on close)"
        } else {
            ""
        }
    ));
    if !s.session_token.is_empty() {
        con.out(format_args!(
            "token     {} (its own calls only; keep it in SANDBOXD_SESSION_TOKEN)\n",
            s.session_token
        ));
    }
    con.out(format_args!("ttl       {}s idle\n", s.ttl_seconds));
    con.out(format_args!(
        "timeout   {} ms per command that gives none\n",
        s.default_timeout_ms
    ));
    if let Some(p) = &s.policy {
        let mut rules = Vec::new();
        if p.read_only {
            rules.push("read-only".to_string());
        }
        if p.plan_mode {
            rules.push("plan mode".to_string());
        }
        if !p.deny_writes.is_empty() {
            rules.push(format!("deny writes {}", p.deny_writes.join(", ")));
        }
        if !p.allow_writes.is_empty() {
            rules.push(format!("allow writes {}", p.allow_writes.join(", ")));
        }
        if !p.guard_patterns.is_empty() {
            rules.push(format!("guard {}", p.guard_patterns.join(", ")));
        }
        if !p.ask_writes.is_empty() {
            rules.push(format!("ask writes {}", p.ask_writes.join(", ")));
        }
        if !p.ask_commands.is_empty() {
            rules.push(format!("ask commands {}", p.ask_commands.join(", ")));
        }
        if !p.ask_tools.is_empty() {
            rules.push(format!("ask tools {}", p.ask_tools.join(", ")));
        }
        if !p.plan_files.is_empty() {
            rules.push(format!("plan files only ({})", p.plan_files.len()));
        }
        if !rules.is_empty() {
            con.out(format_args!("policy    {}\n", rules.join("; ")));
        }
    }
    if s.environment.is_empty() {
        con.out(format_args!("image     {}\n", s.image));
    } else {
        con.out(format_args!(
            "image     {} (environment {})\n",
            s.image, s.environment
        ));
    }
    match (s.container_id.as_str(), s.sandbox_status.as_str()) {
        (_, status) if !status.is_empty() => {
            con.out(format_args!("sandbox   unavailable: {status}\n"))
        }
        ("", _) => con.out(format_args!(
            "container (none yet; starts with the first command)\n"
        )),
        (id, _) => con.out(format_args!("container {}\n", prefix(id, 12))),
    }
    if s.unattended {
        con.out(format_args!(
            "unattended (nothing waits for a person: plans and ask rules are refused at once)\n"
        ));
    }
    if let Some(plan) = &s.plan {
        approved_plan(con, plan);
    }
    // A note is one line of its own, whatever the service put in it.
    for note in &s.notes {
        con.out(format_args!(
            "note      {}\n",
            sandboxd::text::one_line(note)
        ));
    }
}

/// Prints lines read from a file, numbered, with a summary; `raw` prints
/// the content alone.
pub fn read(con: &mut Console<impl Write, impl Write>, r: &pb::ReadFileResponse, raw: bool) {
    if raw {
        con.out(format_args!("{}", r.content));
        return;
    }
    let width = r.last_line.to_string().len().max(4);
    for (i, line) in r.content.split_inclusive('\n').enumerate() {
        let end = if line.ends_with('\n') { "" } else { "\n" };
        con.out(format_args!(
            "{:>width$}  {line}{end}",
            r.first_line + i as u64
        ));
    }
    con.out(format_args!("-- {} (sha256 {})\n", r.message, r.sha256));
}

/// Prints the open sessions, one a line.
pub fn sessions(con: &mut Console<impl Write, impl Write>, r: &pb::ListSessionsResponse) {
    for s in &r.sessions {
        con.out(format_args!(
            "{}  {}\n",
            s.session_id,
            name(&s.workspace_path)
        ));
    }
}

/// Prints what creating a file did, or that a person rejected it.
pub fn created(con: &mut Console<impl Write, impl Write>, r: &pb::CreateFileResponse) {
    if let Some(rejected) = &r.rejected {
        return rejection(con, rejected);
    }
    con.out(format_args!("{}\nsha256 {}\n", r.message, r.sha256));
}

/// Prints what an edit did, with its diff, or that a person rejected it.
pub fn edited(con: &mut Console<impl Write, impl Write>, r: &pb::EditFileResponse) {
    if let Some(rejected) = &r.rejected {
        return rejection(con, rejected);
    }
    con.out(format_args!("{}\n{}", r.message, r.diff));
    if r.diff_truncated {
        con.out(format_args!("... (diff truncated)\n"));
    }
}

/// Prints a directory listing: sizes of files, `/` after directories, `@`
/// after symbolic links.
pub fn dir(con: &mut Console<impl Write, impl Write>, r: &pb::ListDirResponse) {
    for e in &r.entries {
        let (mark, size) = match e.kind() {
            pb::dir_entry::Kind::Dir => ("/", String::new()),
            pb::dir_entry::Kind::Symlink => ("@", String::new()),
            _ => ("", format!("{:>10}  ", e.size_bytes)),
        };
        con.out(format_args!("{size:>12}{}{mark}\n", name(&e.name)));
    }
    if r.truncated {
        con.out(format_args!("... (more entries)\n"));
    }
}

/// Prints the paths a glob found, one a line.
pub fn found(con: &mut Console<impl Write, impl Write>, r: &pb::FindFilesResponse) {
    for p in &r.paths {
        con.out(format_args!("{}\n", name(p)));
    }
    if r.truncated {
        con.out(format_args!("... (more matches)\n"));
    }
}

/// Prints search matches as `path:line: text`.
pub fn matches(con: &mut Console<impl Write, impl Write>, r: &pb::SearchFilesResponse) {
    for m in &r.matches {
        con.out(format_args!("{}:{}: {}\n", name(&m.path), m.line, m.text));
    }
    if r.truncated {
        con.out(format_args!("... (more matches)\n"));
    }
}

/// Prints a refused call: its reason and the service's message.
pub fn refusal(con: &mut Console<impl Write, impl Write>, status: &tonic::Status) {
    use tonic_types::StatusExt;
    let reason = status
        .get_details_error_info()
        .map_or_else(|| format!("{:?}", status.code()), |i| i.reason);
    con.status(format_args!("refused [{reason}]: {}", status.message()));
}

#[cfg(test)]
mod tests {
    use super::approvals::plan;
    use super::*;

    /// What a console over two buffers printed: (stdout, stderr).
    fn printed(f: impl FnOnce(&mut Console<Vec<u8>, Vec<u8>>)) -> (String, String) {
        let mut con = Console::new(Vec::new(), false, Vec::new(), false);
        f(&mut con);
        let (out, err) = con.into_writers();
        (
            String::from_utf8(out).expect("utf-8"),
            String::from_utf8(err).expect("utf-8"),
        )
    }

    fn withheld(path: &str, rule: &str) -> pb::WithheldFile {
        pb::WithheldFile {
            path: path.into(),
            rule: rule.into(),
            message: String::new(),
        }
    }

    fn a_plan() -> pb::Plan {
        pb::Plan {
            goal: "Make add() add".into(),
            steps: vec![
                pb::PlanStep {
                    description: "Fix the operator".into(),
                    files: vec!["calc.py".into()],
                },
                pb::PlanStep {
                    description: "Cover it with a test".into(),
                    files: vec!["tests/test_x.py".into()],
                },
            ],
            verification: "pytest -q".into(),
            risks: vec!["callers relying on subtraction".into()],
        }
    }

    #[test]
    fn a_pending_plan_shows_goal_steps_files_verification_risks_and_withheld_rules() {
        let p = pb::PendingApproval {
            approval_id: "7f3a-4".into(),
            session_id: "s1".into(),
            workspace_path: "/w".into(),
            requested_at_ms: 10_000,
            expires_at_ms: 610_000,
            what: Some(pb::pending_approval::What::Plan(a_plan())),
            withheld: vec![withheld("tests/test_x.py", "deny_writes \"tests/**\"")],
        };
        let (out, _) = printed(|con| pending(con, &p, 22_000));
        let expected = "\
plan 7f3a-4  session s1  (waiting 12 s, rejected in 9 min 48 s unless answered)
  workspace     /w
  grants (1)
    calc.py
  approval would withhold (1):
    tests/test_x.py  by deny_writes \"tests/**\"
  goal          Make add() add
  step 1        Fix the operator
                  calc.py
  step 2        Cover it with a test
                  tests/test_x.py  (withheld: deny_writes \"tests/**\")
  verification  pytest -q
  risks         - callers relying on subtraction
";
        assert_eq!(out, expected);
    }

    #[test]
    fn a_pending_call_shows_tool_summary_path_command_and_rule() {
        let p = pb::PendingApproval {
            approval_id: "7f3a-5".into(),
            session_id: "s1".into(),
            workspace_path: "/w".into(),
            requested_at_ms: 1_000,
            expires_at_ms: 0,
            what: Some(pb::pending_approval::What::Call(pb::PendingCall {
                tool: "RunCommand".into(),
                summary: "make deploy".into(),
                rule: "ask_commands deploy".into(),
                path: String::new(),
                command: "make deploy".into(),
                change: String::new(),
            })),
            withheld: vec![],
        };
        let (out, _) = printed(|con| pending(con, &p, 61_000));
        assert!(
            out.starts_with("call 7f3a-5  session s1  (waiting 1 min 0 s)\n"),
            "{out}"
        );
        assert!(out.contains("  tool          RunCommand\n"), "{out}");
        assert!(out.contains("  command       make deploy\n"), "{out}");
        assert!(
            out.contains("  asked by      ask_commands deploy\n"),
            "{out}"
        );
        assert!(!out.contains("  path "), "{out}");
    }

    #[test]
    fn text_a_model_wrote_cannot_forge_lines() {
        let mut p = a_plan();
        p.goal = "x\n  approval would withhold (0):".into();
        let (out, _) = printed(|con| plan(con, &p, &[]));
        assert!(
            out.contains("\n  goal          \"x\\n  approval would withhold (0):\"\n"),
            "{out}"
        );
        assert!(
            !out.lines()
                .any(|l| l.starts_with("  approval would withhold")),
            "{out}"
        );
    }

    #[test]
    fn a_rejection_says_nothing_ran_and_who_or_that_nobody_answered() {
        let by_person = pb::Rejection {
            approval_id: "7f3a-6".into(),
            reason: "not now".into(),
            timed_out: false,
            decision: Some(pb::Decision {
                decided_by: "approver alice".into(),
                note: "not now".into(),
                decided_at_ms: 5,
            }),
            message: "The call was not executed.".into(),
        };
        let (_, err) = printed(|con| rejection(con, &by_person));
        assert_eq!(
            err,
            "rejected [7f3a-6]: not executed; rejected by approver alice: not now\n\
             The call was not executed.\n"
        );
        let timed_out = pb::Rejection {
            timed_out: true,
            decision: None,
            reason: "nobody answered".into(),
            ..by_person
        };
        let (_, err) = printed(|con| rejection(con, &timed_out));
        assert!(err.starts_with("rejected [7f3a-6]: not executed; nobody answered in time\n"));
    }

    #[test]
    fn a_report_shows_the_approved_plan_beside_the_reconciliation() {
        let r = pb::SessionReport {
            planned_touched: vec!["calc.py".into()],
            untouched: vec![],
            plan: Some(pb::ApprovedPlan {
                approval_id: "7f3a-4".into(),
                plan: Some(a_plan()),
                granted: vec!["calc.py".into()],
                withheld: vec![withheld("tests/test_x.py", "deny_writes tests/**")],
                decision: Some(pb::Decision {
                    decided_by: "operator".into(),
                    note: String::new(),
                    decided_at_ms: 1,
                }),
            }),
            ..Default::default()
        };
        let (out, _) = printed(|con| report(con, &r, false));
        let plan_at = out
            .find("plan      7f3a-4, approved by operator\n")
            .expect(&out);
        assert!(
            out[plan_at..].contains("  goal          Make add() add\n"),
            "{out}"
        );
        assert!(
            out[plan_at..].contains("  granted       calc.py\n"),
            "{out}"
        );
        assert!(
            out[plan_at..].contains("    tests/test_x.py  by deny_writes tests/**\n"),
            "{out}"
        );
        assert!(out.contains("planned and touched: calc.py\n"), "{out}");
    }
}

#[cfg(test)]
mod report_tests {
    use super::*;

    #[test]
    fn a_report_shows_changes_outside_the_plan_and_processes() {
        let r = pb::SessionReport {
            plan: Some(pb::ApprovedPlan::default()),
            changed_unplanned: vec!["tests/test_x.py".into(), "src/z.py".into()],
            processes: vec![pb::Process {
                process_id: "p1".into(),
                command: "python3 -m http.server".into(),
                state: pb::ProcessState::Running as i32,
                ..Default::default()
            }],
            ..Default::default()
        };
        let mut con = Console::new(Vec::new(), true, Vec::new(), true);
        report(&mut con, &r, false);
        let out = String::from_utf8_lossy(&con.into_writers().0).into_owned();
        assert!(
            out.contains("changed outside the plan (by anything): tests/test_x.py, src/z.py\n"),
            "{out}"
        );
        assert!(
            out.contains("processes (1):\n  p1  [running]  python3 -m http.server\n"),
            "{out}"
        );

        let r = pb::SessionReport {
            plan: Some(pb::ApprovedPlan::default()),
            changes_unchecked: "the workspace could not be read".into(),
            ..Default::default()
        };
        let mut con = Console::new(Vec::new(), true, Vec::new(), true);
        report(&mut con, &r, false);
        let out = String::from_utf8_lossy(&con.into_writers().0).into_owned();
        assert!(
            out.contains("not checked: the workspace could not be read"),
            "{out}"
        );
    }

    #[test]
    fn a_hostile_services_session_reaches_a_terminal_neutralised() {
        let s = pb::Session {
            session_id: "id\x1b]0;title\x07".into(),
            workspace_path: "/w/\x1b]52;c;cm0=\x07".into(),
            notes: vec!["n1\x1b[2J\nsandbox   ok".into()],
            sandbox_status: "\x1b[1A\x1b[2K".into(),
            ..Default::default()
        };
        let mut con = Console::new(Vec::new(), true, Vec::new(), true);
        session(&mut con, &s);
        let out = String::from_utf8(con.into_writers().0).unwrap();
        assert!(!out.contains('\x1b'), "{out}");
        assert!(out.contains("note      n1^[[2J\\nsandbox   ok\n"), "{out}");
    }
}
