//! Printing of replies: how each verb shows what the service answered.
//! Everything goes through the [`Stdio`] console, so text the sandboxed
//! side controls reaches a terminal neutralised (see `terminal`). Names in
//! line-per-item listings (paths, commands, journal summaries) go through
//! [`name`]: one with a newline, a quote or an escape sequence is printed
//! quoted, as git prints it, so that it stays one item on one line, on a
//! terminal and in a pipe alike.

use sandboxd::pb;
pub use sandboxd::workspace::quote::shown as name;

use std::io::Write;

use super::terminal::Console;

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
        if !p.deny_writes.is_empty() {
            rules.push(format!("deny writes {}", p.deny_writes.join(", ")));
        }
        if !p.allow_writes.is_empty() {
            rules.push(format!("allow writes {}", p.allow_writes.join(", ")));
        }
        if !p.guard_patterns.is_empty() {
            rules.push(format!("guard {}", p.guard_patterns.join(", ")));
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
    for note in &s.notes {
        con.out(format_args!("note      {note}\n"));
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

/// Prints what creating a file did.
pub fn created(con: &mut Console<impl Write, impl Write>, r: &pb::CreateFileResponse) {
    con.out(format_args!("{}\nsha256 {}\n", r.message, r.sha256));
}

/// Prints what an edit did, with its diff.
pub fn edited(con: &mut Console<impl Write, impl Write>, r: &pb::EditFileResponse) {
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
