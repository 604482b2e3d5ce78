//! The audit journal of one session: every call with its arguments in brief,
//! its outcome and its duration; the files written (with sha256 before and
//! after), the commands run and the refused calls. A report reconciles the
//! journal against a plan: which planned files were touched, which touched
//! files were not planned, which planned files were left alone, and whether
//! a verification command ran after the last write.
//!
//! Entries carry one sequence number per session. A write takes its number
//! when it has landed; a command takes its number when it starts, so "ran
//! after the last write" means started after that write was on disk.
//!
//! With a journal directory, each entry is also appended as one JSON line to
//! `<dir>/<session id>.jsonl` as it happens: for external audit, and so
//! that a service that restarts after a crash finds the journal again
//! ([`Journal::recover`]). A command's start is a line of its own, so a
//! command the crash cut short is reported as interrupted. The files are
//! bounded: past half the ceiling the file is rotated to
//! `<session id>.jsonl.1` (the one before it is dropped), and what was
//! dropped is counted, written at the head of the new file and reported.
//!
//! One job per file: this one holds the journal; `records` what it
//! records (entries, writes, commands, refusals, the report); `sink` the
//! file and its rotation, `recover` reading a journal back at a
//! restart, `report` the reconciliation against a plan.

use std::borrow::Cow;
use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::sync::{Arc, Mutex};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

use crate::sandbox::{ExitReport, KilledBy};
use crate::state::StateDir;

mod processes;
mod records;
mod recover;
mod report;
mod sink;

pub use processes::{NOTE_INTERRUPTED, ProcessEnd, ProcessRecord};
pub use records::{
    CommandRecord, Entry, FileWrite, Outcome, PlanCheck, Refused, Report, Tally, Verification,
};
pub use recover::Recovered;
use sink::{Sink, file_name, previous_name};

/// Entries (and writes, commands, refusals) kept in memory per session;
/// older ones are dropped and counted (the JSON-lines file keeps them all).
/// Bounds a session's journal to a few MB at worst.
pub const MAX_KEPT: usize = 2_000;
/// Distinct written paths a journal keeps for the plan check; writes to
/// further paths are counted, not kept (a session's calls cannot grow it
/// without bound).
pub const MAX_TOUCHED: usize = 10_000;
/// Characters of a call's summary kept.
const MAX_SUMMARY_CHARS: usize = 240;
/// Characters of a command line kept in its record.
const MAX_COMMAND_CHARS: usize = 1024;

/// Default ceiling of one session's journal files together.
pub const DEFAULT_MAX_FILE_BYTES: u64 = 16 << 20;

/// Where journal files go, and how large they may grow.
#[derive(Debug, Clone)]
pub struct Files {
    /// The directory (checked like the state directory).
    pub dir: Arc<StateDir>,
    /// Ceiling of one session's files together (the current one and the
    /// one before it); at least 64 KiB.
    pub max_bytes: u64,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    /// Commands started and not yet ended: (command, cwd, wall time).
    running: BTreeMap<u64, (String, String, u64)>,
    entries: VecDeque<Entry>,
    dropped: u64,
    writes: VecDeque<FileWrite>,
    commands: VecDeque<CommandRecord>,
    refused: VecDeque<Refused>,
    touched: BTreeSet<String>,
    /// Writes to paths past [`MAX_TOUCHED`], not kept.
    touched_dropped: u64,
    last_write: Option<u64>,
    processes: VecDeque<ProcessRecord>,
}

/// The journal of one session.
#[derive(Debug)]
pub struct Journal {
    session: String,
    state: Mutex<State>,
    sink: Option<Mutex<Sink>>,
}

/// One JSON line of a call.
#[derive(Serialize)]
struct Line<'a> {
    session_id: &'a str,
    #[serde(flatten)]
    entry: &'a Entry,
    #[serde(skip_serializing_if = "Option::is_none")]
    write: Option<&'a FileWrite>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a CommandRecord>,
    #[serde(skip_serializing_if = "Option::is_none")]
    process: Option<&'a ProcessRecord>,
    /// The call changed the workspace as a whole (a restore).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    changed_tree: bool,
}

/// A line as read back.
#[derive(Deserialize)]
struct ReadLine {
    #[serde(flatten)]
    entry: Entry,
    write: Option<FileWrite>,
    command: Option<CommandRecord>,
    process: Option<ProcessRecord>,
    #[serde(default)]
    changed_tree: bool,
}

/// The line of a command's start.
#[derive(Serialize, Deserialize)]
struct StartedLine {
    seq: u64,
    at_ms: u64,
    command: String,
    cwd: String,
}

fn push_capped<T>(list: &mut VecDeque<T>, item: T) -> bool {
    let full = list.len() >= MAX_KEPT;
    if full {
        list.pop_front();
    }
    list.push_back(item);
    full
}

fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl Journal {
    /// A journal for `session`; with `files`, entries are also appended to
    /// `<dir>/<session>.jsonl`.
    pub fn new(session: &str, files: Option<&Files>) -> io::Result<Journal> {
        let sink = match files {
            // A new file, 0600, created through the directory's fd: a name
            // planted in advance (or a link) is refused, never appended to.
            Some(files) => Some(Mutex::new(Sink {
                file: files.dir.create_private(&file_name(session))?,
                files: files.clone(),
                bytes: 0,
                lines: 0,
                previous_lines: 0,
                previous_bytes: 0,
                dropped_lines: 0,
                dropped_bytes: 0,
            })),
            None => None,
        };
        Ok(Journal {
            session: session.to_string(),
            state: Mutex::new(State::default()),
            sink,
        })
    }

    /// Removes the files of `session` (when its session closes and the
    /// files were only kept for a restart).
    pub fn remove_files(session: &str, files: &Files) {
        for name in [file_name(session), previous_name(session)] {
            if let Err(e) = files.dir.remove_file(&name) {
                tracing::warn!(session, error = %e, "cannot remove a journal file");
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The session's calls counted.
    pub fn tally(&self) -> Tally {
        let st = self.state();
        Tally {
            calls: st.next_seq,
            commands: st.commands.len() as u64,
            running: st.running.len() as u64,
            refused: st.refused.len() as u64,
            last_at_ms: st.entries.back().map(|e| e.at_ms),
        }
    }

    /// Takes the next sequence number (a command takes it when it starts).
    pub fn next_seq(&self) -> u64 {
        let mut st = self.state();
        st.next_seq += 1;
        st.next_seq
    }

    fn entry(
        seq: u64,
        tool: &'static str,
        summary: &str,
        started: Instant,
        outcome: Outcome,
    ) -> Entry {
        Entry {
            seq,
            at_ms: now_ms(),
            tool: Cow::Borrowed(tool),
            summary: cut(summary, MAX_SUMMARY_CHARS),
            outcome,
            duration_ms: started.elapsed().as_millis() as u64,
        }
    }

    /// Records a call that succeeded without writing.
    pub fn ok(&self, tool: &'static str, summary: &str, started: Instant, detail: String) {
        let seq = self.next_seq();
        let entry = Self::entry(seq, tool, summary, started, Outcome::Ok { detail });
        self.append(entry, None, None);
    }

    /// Records a refused or failed call.
    pub fn refused(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        reason: &'static str,
        message: String,
    ) {
        let seq = self.next_seq();
        let entry = Self::entry(
            seq,
            tool,
            summary,
            started,
            Outcome::Refused {
                reason: Cow::Borrowed(reason),
                message,
            },
        );
        self.state().push_refused(&entry);
        self.append(entry, None, None);
    }

    /// Records a call that changed the workspace as a whole (a restore):
    /// a verification must run after it to count.
    pub fn changed_tree(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        detail: String,
    ) {
        let seq = self.next_seq();
        let entry = Self::entry(seq, tool, summary, started, Outcome::Ok { detail });
        self.state().last_write = Some(seq);
        self.append_line(entry, None, None, true);
    }

    /// Records a write that landed.
    pub fn wrote(
        &self,
        tool: &'static str,
        summary: &str,
        started: Instant,
        path: String,
        sha256_before: Option<String>,
        sha256_after: String,
    ) {
        let seq = self.next_seq();
        let detail = format!("wrote {path}");
        let entry = Self::entry(seq, tool, summary, started, Outcome::Ok { detail });
        let write = FileWrite {
            seq,
            tool: Cow::Borrowed(tool),
            path,
            sha256_before,
            sha256_after,
        };
        self.state().push_write(write.clone());
        self.append(entry, Some(&write), None);
    }

    /// Records that the command `seq` started (a line of its own, so that
    /// a service that stops before it ends reports it as interrupted).
    pub fn command_started(&self, seq: u64, command: &str, cwd: &str) {
        let started = StartedLine {
            seq,
            at_ms: now_ms(),
            command: cut(command, MAX_COMMAND_CHARS),
            cwd: cwd.to_string(),
        };
        self.state().running.insert(
            seq,
            (started.command.clone(), started.cwd.clone(), started.at_ms),
        );
        self.write_line(&serde_json::json!({
            "session_id": self.session,
            "started": started,
        }));
    }

    /// Records that the command `seq`, started at `at_ms`, was cut short
    /// by the service stopping.
    fn interrupted(&self, seq: u64, command: &str, cwd: &str, at_ms: u64) {
        let record = CommandRecord {
            seq,
            command: command.to_string(),
            cwd: cwd.to_string(),
            exit_code: -1,
            timed_out: false,
            killed_by: KilledBy::None,
            oom_killed: false,
            cancelled: false,
            duration_ms: now_ms().saturating_sub(at_ms),
            interrupted: true,
        };
        let entry = Entry {
            seq,
            at_ms: now_ms(),
            tool: Cow::Borrowed("RunCommand"),
            summary: cut(command, MAX_SUMMARY_CHARS),
            outcome: Outcome::Ok {
                detail: "interrupted: the service stopped while it ran; its result is unknown"
                    .into(),
            },
            duration_ms: record.duration_ms,
        };
        push_capped(&mut self.state().commands, record.clone());
        self.append(entry, None, Some(&record));
    }

    /// Records a command's result; `seq` was taken when it started.
    pub fn command(
        &self,
        seq: u64,
        command: &str,
        cwd: &str,
        started: Instant,
        report: &ExitReport,
    ) {
        let record = CommandRecord {
            seq,
            command: cut(command, MAX_COMMAND_CHARS),
            cwd: cwd.to_string(),
            exit_code: report.exit_code,
            timed_out: report.timed_out,
            killed_by: report.killed_by,
            oom_killed: report.oom_killed,
            cancelled: report.cancelled,
            duration_ms: report.duration.as_millis() as u64,
            interrupted: false,
        };
        let mut detail = format!("exit {}", report.exit_code);
        if report.timed_out {
            detail.push_str(", timed out");
        }
        if report.oom_killed {
            detail.push_str(", out of memory");
        }
        if report.cancelled {
            detail.push_str(", cancelled");
        }
        let entry = Self::entry(seq, "RunCommand", command, started, Outcome::Ok { detail });
        {
            let mut st = self.state();
            st.running.remove(&seq);
            push_capped(&mut st.commands, record.clone());
        }
        self.append(entry, None, Some(&record));
    }

    fn append(&self, entry: Entry, write: Option<&FileWrite>, command: Option<&CommandRecord>) {
        self.append_line(entry, write, command, false);
    }

    fn append_process(&self, entry: Entry, process: &ProcessRecord) {
        if self.sink.is_some() {
            self.write_line(&Line {
                session_id: &self.session,
                entry: &entry,
                write: None,
                command: None,
                process: Some(process),
                changed_tree: false,
            });
        }
        self.state().push_entry(entry);
    }

    fn append_line(
        &self,
        entry: Entry,
        write: Option<&FileWrite>,
        command: Option<&CommandRecord>,
        changed_tree: bool,
    ) {
        if self.sink.is_some() {
            self.write_line(&Line {
                session_id: &self.session,
                entry: &entry,
                write,
                command,
                process: None,
                changed_tree,
            });
        }
        self.state().push_entry(entry);
    }

    fn write_line(&self, line: &impl Serialize) {
        let Some(sink) = &self.sink else { return };
        match serde_json::to_vec(line) {
            Ok(mut bytes) => {
                bytes.push(b'\n');
                let mut sink = sink.lock().unwrap_or_else(|e| e.into_inner());
                if let Err(e) = sink.append(&self.session, &bytes) {
                    tracing::warn!(session = %self.session, error = %e, "cannot append to the journal file");
                }
            }
            Err(e) => tracing::warn!(error = %e, "cannot encode a journal line"),
        }
    }

    /// Lines the file's rotation dropped so far.
    fn file_lines_dropped(&self) -> u64 {
        self.sink.as_ref().map_or(0, |s| {
            s.lock().unwrap_or_else(|e| e.into_inner()).dropped_lines
        })
    }
}

impl State {
    fn push_entry(&mut self, entry: Entry) {
        // Commands take their number at start and land later: keep order.
        let at = self.entries.partition_point(|e| e.seq < entry.seq);
        self.entries.insert(at, entry);
        if self.entries.len() > MAX_KEPT {
            self.entries.pop_front();
            self.dropped += 1;
        }
    }

    fn push_refused(&mut self, entry: &Entry) {
        if let Outcome::Refused { reason, message } = &entry.outcome {
            let refusal = Refused {
                seq: entry.seq,
                tool: entry.tool.clone(),
                summary: entry.summary.clone(),
                reason: reason.clone(),
                message: message.clone(),
            };
            push_capped(&mut self.refused, refusal);
        }
    }

    fn push_write(&mut self, write: FileWrite) {
        if self.touched.len() < MAX_TOUCHED || self.touched.contains(&write.path) {
            self.touched.insert(write.path.clone());
        } else {
            self.touched_dropped += 1;
        }
        self.last_write = Some(self.last_write.map_or(write.seq, |l| l.max(write.seq)));
        push_capped(&mut self.writes, write);
    }

    /// A line read back from the files, as it was when written.
    fn replay(&mut self, line: ReadLine) {
        let seq = line.entry.seq;
        self.next_seq = self.next_seq.max(seq);
        self.push_refused(&line.entry);
        if let Some(write) = line.write {
            self.push_write(write);
        }
        if line.changed_tree {
            self.last_write = Some(self.last_write.map_or(seq, |l| l.max(seq)));
        }
        if let Some(command) = line.command {
            self.running.remove(&command.seq);
            push_capped(&mut self.commands, command);
        }
        if let Some(process) = line.process {
            self.push_process(process);
        }
        self.push_entry(line.entry);
    }
}

/// A command line with its whitespace trimmed and runs of it made one space.
fn collapse(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
