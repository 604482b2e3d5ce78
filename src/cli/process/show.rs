//! How the process verbs show a process: its state in a word or two (the
//! `ps` table, `start`), how it ended in a sentence (`stop`, `logs`), its
//! notes, and the `ps` table. Commands are shown with [`name`], so one
//! with a newline or an escape sequence stays one row.

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

use sandboxd::pb;

use crate::cli::print::name;
use crate::cli::terminal::Console;

/// Milliseconds since the Unix epoch, as the service's times are given.
pub fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// A span of milliseconds in one unit: "350 ms", "45 s", "12 min", "5 h",
/// "3 d".
pub fn span(ms: u64) -> String {
    match ms / 1000 {
        0 => format!("{ms} ms"),
        s @ 1..120 => format!("{s} s"),
        s @ 120..7200 => format!("{} min", s / 60),
        s @ 7200..172_800 => format!("{} h", s / 3600),
        s => format!("{} d", s / 86_400),
    }
}

/// A count of bytes: "812 B", "1.2 KiB", "3.4 MiB", "1.0 GiB".
fn bytes(n: u64) -> String {
    const UNITS: [&str; 3] = ["KiB", "MiB", "GiB"];
    if n < 1024 {
        return format!("{n} B");
    }
    let mut value = n as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The name of signal `n`, as `kill -l` gives it, for the usual ones.
fn signal(n: i64) -> String {
    let name = match n {
        1 => "SIGHUP",
        2 => "SIGINT",
        3 => "SIGQUIT",
        6 => "SIGABRT",
        9 => "SIGKILL",
        13 => "SIGPIPE",
        14 => "SIGALRM",
        15 => "SIGTERM",
        _ => return format!("signal {n}"),
    };
    name.to_string()
}

/// The state in a word or two: running, exited 3, killed (SIGTERM),
/// interrupted, failed.
pub fn state(p: &pb::Process) -> String {
    match p.state() {
        pb::ProcessState::Running => "running".into(),
        pb::ProcessState::Exited => format!("exited {}", p.exit_code),
        pb::ProcessState::Killed => {
            let by = match p.killed_by() {
                pb::KilledBy::ProcessGroupTerm => "SIGTERM".into(),
                pb::KilledBy::ProcessGroupKill => "SIGKILL".into(),
                pb::KilledBy::Container => "container".into(),
                pb::KilledBy::ContainerFailed => "container failed".into(),
                pb::KilledBy::None => signal(p.exit_code - 128),
            };
            format!("killed ({by})")
        }
        pb::ProcessState::Interrupted => "interrupted".into(),
        pb::ProcessState::Failed => "failed".into(),
        pb::ProcessState::Unspecified => "unknown".into(),
    }
}

/// How the process is, or how it ended, as the rest of a sentence that
/// starts with its id: "exited with code 0 after 3 s", "was stopped by
/// SIGTERM to its process group after 2 min (exit 143)".
pub fn how(p: &pb::Process) -> String {
    let after = if p.ended_at_ms >= p.started_at_ms && p.started_at_ms > 0 {
        format!(" after {}", span(p.ended_at_ms - p.started_at_ms))
    } else {
        String::new()
    };
    match p.state() {
        pb::ProcessState::Running => "is still running".into(),
        pb::ProcessState::Exited => format!("exited with code {}{after}", p.exit_code),
        pb::ProcessState::Killed => {
            let by = match p.killed_by() {
                pb::KilledBy::ProcessGroupTerm => "was stopped by SIGTERM to its process group",
                pb::KilledBy::ProcessGroupKill => {
                    "was stopped by SIGKILL to its process group (SIGTERM did not end it)"
                }
                pb::KilledBy::Container => "was stopped by killing its container",
                pb::KilledBy::ContainerFailed => {
                    "ended with its container, which the engine failed to kill (it is being \
                     removed)"
                }
                pb::KilledBy::None => {
                    return format!(
                        "was ended by {}{after} (exit {})",
                        signal(p.exit_code - 128),
                        p.exit_code
                    );
                }
            };
            format!("{by}{after} (exit {})", p.exit_code)
        }
        pb::ProcessState::Interrupted => {
            "was interrupted: the service stopped while it ran, and its output was not kept".into()
        }
        pb::ProcessState::Failed => "could not be started".into(),
        pb::ProcessState::Unspecified => "is in a state this client does not know".into(),
    }
}

/// Prints the service's notes about a process (why it ended, why it could
/// not start), one a status line.
pub fn notes(con: &mut Console<impl Write, impl Write>, p: &pb::Process) {
    for note in &p.notes {
        con.status(format_args!("[note: {note}]"));
    }
}

/// Prints the `ps` table: id, state, when it started (an age, from
/// `now_ms`), CPU time, bytes written (stdout and stderr) and the command;
/// the notes of a process under its row.
pub fn table(con: &mut Console<impl Write, impl Write>, list: &[pb::Process], now_ms: u64) {
    if list.is_empty() {
        con.status(format_args!(
            "no processes: `sandboxd start -- COMMAND` starts one"
        ));
        return;
    }
    let rows: Vec<[String; 5]> = list
        .iter()
        .map(|p| {
            let started = if p.started_at_ms == 0 {
                "-".to_string()
            } else {
                format!("{} ago", span(now_ms.saturating_sub(p.started_at_ms)))
            };
            [
                p.process_id.clone(),
                state(p),
                started,
                format!("{:.1} s", p.cpu_ms as f64 / 1000.0),
                bytes(p.stdout_bytes + p.stderr_bytes),
            ]
        })
        .collect();
    let head = ["ID", "STATE", "STARTED", "CPU", "OUTPUT"];
    let mut width = head.map(str::len);
    for row in &rows {
        for (w, cell) in width.iter_mut().zip(row) {
            *w = (*w).max(cell.chars().count());
        }
    }
    let line = |cells: [&str; 5], command: &str| {
        let [id, st, started, cpu, out] = cells;
        let [wi, ws, wt, wc, wo] = width;
        format!("{id:<wi$}  {st:<ws$}  {started:<wt$}  {cpu:>wc$}  {out:>wo$}  {command}\n")
    };
    con.out(format_args!("{}", line(head, "COMMAND")));
    for (p, row) in list.iter().zip(&rows) {
        let cells = [&row[0], &row[1], &row[2], &row[3], &row[4]].map(String::as_str);
        con.out(format_args!("{}", line(cells, &name(&p.command))));
        for note in &p.notes {
            con.out(format_args!(
                "{:w$}  note: {}\n",
                "",
                name(note),
                w = width[0]
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn printed(f: impl FnOnce(&mut Console<Vec<u8>, Vec<u8>>)) -> (String, String) {
        let mut con = Console::new(Vec::new(), false, Vec::new(), false);
        f(&mut con);
        let (out, err) = con.into_writers();
        (
            String::from_utf8(out).expect("utf-8"),
            String::from_utf8(err).expect("utf-8"),
        )
    }

    fn process(id: &str, state: pb::ProcessState, command: &str) -> pb::Process {
        pb::Process {
            process_id: id.into(),
            command: command.into(),
            state: state as i32,
            exit_code: -1,
            started_at_ms: 1_000_000,
            ..Default::default()
        }
    }

    #[test]
    fn states_read_as_a_word_or_two() {
        let mut p = process("p1", pb::ProcessState::Exited, "make");
        p.exit_code = 2;
        assert_eq!(state(&p), "exited 2");
        p.state = pb::ProcessState::Killed as i32;
        p.exit_code = 143;
        p.killed_by = pb::KilledBy::ProcessGroupTerm as i32;
        assert_eq!(state(&p), "killed (SIGTERM)");
        p.killed_by = pb::KilledBy::None as i32;
        p.exit_code = 130;
        assert_eq!(state(&p), "killed (SIGINT)");
        p.ended_at_ms = p.started_at_ms + 3_000;
        assert_eq!(how(&p), "was ended by SIGINT after 3 s (exit 130)");
        p.state = pb::ProcessState::Interrupted as i32;
        assert_eq!(state(&p), "interrupted");
    }

    #[test]
    fn the_table_lines_up_and_a_hostile_command_stays_one_row() {
        let mut server = process("p1", pb::ProcessState::Running, "python3 -m http.server");
        server.cpu_ms = 1_250;
        server.stdout_bytes = 1_000;
        server.stderr_bytes = 1_048;
        let mut done = process("p12", pb::ProcessState::Exited, "echo hi\n\x1b[2K");
        done.exit_code = 0;
        done.stdout_bytes = 3;
        done.notes = vec!["it ended with its sandbox".into()];
        let (out, _) = printed(|con| table(con, &[server, done], 1_000_000 + 125_000));
        let expected = "\
ID   STATE     STARTED      CPU   OUTPUT  COMMAND
p1   running   2 min ago  1.2 s  2.0 KiB  python3 -m http.server
p12  exited 0  2 min ago  0.0 s      3 B  \"echo hi\\n\\033[2K\"
     note: it ended with its sandbox
";
        assert_eq!(out, expected);
    }

    #[test]
    fn spans_and_sizes_read_in_one_unit() {
        assert_eq!(span(350), "350 ms");
        assert_eq!(span(45_000), "45 s");
        assert_eq!(span(720_000), "12 min");
        assert_eq!(span(5 * 3_600_000), "5 h");
        assert_eq!(bytes(812), "812 B");
        assert_eq!(bytes(3 * 1024 * 1024 + 400_000), "3.4 MiB");
    }
}
