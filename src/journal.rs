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
//! `<dir>/<session id>.jsonl` as it happens, for external audit.

use std::collections::{BTreeSet, VecDeque};
use std::fs::File;
use std::io::{self, Write};
use std::sync::Mutex;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use serde::Serialize;

use crate::sandbox::{ExitReport, KilledBy};
use crate::state::StateDir;

/// Entries (and writes, commands, refusals) kept in memory per session;
/// older ones are dropped and counted (the JSON-lines file keeps them all).
/// Bounds a session's journal to a few MB at worst.
pub const MAX_KEPT: usize = 2_000;
/// Characters of a call's summary kept.
const MAX_SUMMARY_CHARS: usize = 240;
/// Characters of a command line kept in its record.
const MAX_COMMAND_CHARS: usize = 1024;

/// One call.
#[derive(Debug, Clone, Serialize)]
pub struct Entry {
    /// Order within the session.
    pub seq: u64,
    /// Wall time of the outcome, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The RPC.
    pub tool: &'static str,
    /// Its arguments in brief.
    pub summary: String,
    /// What came of it.
    pub outcome: Outcome,
    /// Time the call took.
    pub duration_ms: u64,
}

/// What came of a call.
#[derive(Debug, Clone, Serialize)]
#[serde(tag = "status", rename_all = "snake_case")]
pub enum Outcome {
    /// It succeeded.
    Ok {
        /// What it did, in brief.
        detail: String,
    },
    /// It was refused or failed; nothing was changed.
    Refused {
        /// The stable reason the caller got.
        reason: &'static str,
        /// The message the caller got.
        message: String,
    },
}

/// A file the file tools wrote.
#[derive(Debug, Clone, Serialize)]
pub struct FileWrite {
    /// Order within the session.
    pub seq: u64,
    /// CreateFile or EditFile.
    pub tool: &'static str,
    /// Workspace-relative path written (symlinks resolved).
    pub path: String,
    /// Hex sha256 before; `None` for a file that did not exist.
    pub sha256_before: Option<String>,
    /// Hex sha256 after.
    pub sha256_after: String,
}

/// A command that ran to a result.
#[derive(Debug, Clone, Serialize)]
pub struct CommandRecord {
    /// Order within the session (taken when it started).
    pub seq: u64,
    /// The command line (its first 1024 characters).
    pub command: String,
    /// Working directory in the container.
    pub cwd: String,
    /// Exit code (128+n for signal n); -1 when unknown.
    pub exit_code: i64,
    /// The timeout fired.
    pub timed_out: bool,
    /// Which rung of the kill ladder stopped it.
    pub killed_by: KilledBy,
    /// The container hit its memory limit while it ran.
    pub oom_killed: bool,
    /// The client went away before the end.
    pub cancelled: bool,
    /// Wall time.
    pub duration_ms: u64,
}

/// A refused or failed call.
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    /// Order within the session.
    pub seq: u64,
    /// The RPC.
    pub tool: &'static str,
    /// Its arguments in brief.
    pub summary: String,
    /// The stable reason the caller got.
    pub reason: &'static str,
    /// The message the caller got.
    pub message: String,
}

/// How a session's writes compare with a plan.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PlanCheck {
    /// Planned files that were written.
    pub planned_touched: Vec<String>,
    /// Written files that were not planned.
    pub unplanned: Vec<String>,
    /// Planned files that were not written.
    pub untouched: Vec<String>,
}

/// Whether a named verification command ran after the last write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verification {
    /// The command looked for (matched whole against the commands run,
    /// whitespace collapsed).
    pub command: String,
    /// A matching command ran at all.
    pub ran: bool,
    /// A matching command started after the last write and finished.
    pub ran_after_last_write: bool,
    /// Exit code of the last matching run after the last write.
    pub exit_code: Option<i64>,
    /// That run exited 0 without a timeout.
    pub passed: bool,
}

/// Everything the journal holds, reconciled against a plan.
#[derive(Debug, Clone)]
pub struct Report {
    /// Every call, oldest first.
    pub entries: Vec<Entry>,
    /// Entries dropped past [`MAX_KEPT`].
    pub dropped: u64,
    /// Successful writes only, oldest first.
    pub files_written: Vec<FileWrite>,
    /// Commands that ran to a result.
    pub commands: Vec<CommandRecord>,
    /// Refused or failed calls.
    pub refused: Vec<Refused>,
    /// Distinct paths written, sorted.
    pub touched: Vec<String>,
    /// Present when a plan was given.
    pub plan: Option<PlanCheck>,
    /// Present when a verification command was named.
    pub verification: Option<Verification>,
    /// The session's checkpoints (the session fills them in).
    pub checkpoints: Vec<crate::workspace::history::CheckpointInfo>,
}

#[derive(Debug, Default)]
struct State {
    next_seq: u64,
    entries: VecDeque<Entry>,
    dropped: u64,
    writes: VecDeque<FileWrite>,
    commands: VecDeque<CommandRecord>,
    refused: VecDeque<Refused>,
    touched: BTreeSet<String>,
    last_write: Option<u64>,
}

/// The journal of one session.
#[derive(Debug)]
pub struct Journal {
    session: String,
    state: Mutex<State>,
    sink: Option<Mutex<File>>,
}

/// One JSON line of the external journal.
#[derive(Serialize)]
struct Line<'a> {
    session_id: &'a str,
    #[serde(flatten)]
    entry: &'a Entry,
    #[serde(skip_serializing_if = "Option::is_none")]
    write: Option<&'a FileWrite>,
    #[serde(skip_serializing_if = "Option::is_none")]
    command: Option<&'a CommandRecord>,
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
    /// A journal for `session`; with `dir`, entries are also appended to
    /// `<dir>/<session>.jsonl`.
    pub fn new(session: &str, dir: Option<&StateDir>) -> io::Result<Journal> {
        let sink = match dir {
            // A new file, 0600, created through the directory's fd: a name
            // planted in advance (or a link) is refused, never appended to.
            Some(dir) => Some(Mutex::new(dir.create_private(&format!("{session}.jsonl"))?)),
            None => None,
        };
        Ok(Journal {
            session: session.to_string(),
            state: Mutex::new(State::default()),
            sink,
        })
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
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
            tool,
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
                reason,
                message: message.clone(),
            },
        );
        {
            let mut st = self.state();
            let refusal = Refused {
                seq,
                tool,
                summary: entry.summary.clone(),
                reason,
                message,
            };
            push_capped(&mut st.refused, refusal);
        }
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
        self.append(entry, None, None);
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
            tool,
            path,
            sha256_before,
            sha256_after,
        };
        {
            let mut st = self.state();
            st.touched.insert(write.path.clone());
            st.last_write = Some(seq);
            push_capped(&mut st.writes, write.clone());
        }
        self.append(entry, Some(&write), None);
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
        push_capped(&mut self.state().commands, record.clone());
        self.append(entry, None, Some(&record));
    }

    fn append(&self, entry: Entry, write: Option<&FileWrite>, command: Option<&CommandRecord>) {
        if let Some(sink) = &self.sink {
            let line = Line {
                session_id: &self.session,
                entry: &entry,
                write,
                command,
            };
            match serde_json::to_vec(&line) {
                Ok(mut bytes) => {
                    bytes.push(b'\n');
                    // One write per line, append mode: lines never interleave.
                    let mut file = sink.lock().unwrap_or_else(|e| e.into_inner());
                    if let Err(e) = file.write_all(&bytes) {
                        tracing::warn!(session = %self.session, error = %e, "cannot append to the journal file");
                    }
                }
                Err(e) => tracing::warn!(error = %e, "cannot encode a journal line"),
            }
        }
        let mut st = self.state();
        // Commands take their number at start and land later: keep order.
        let at = st.entries.partition_point(|e| e.seq < entry.seq);
        st.entries.insert(at, entry);
        if st.entries.len() > MAX_KEPT {
            st.entries.pop_front();
            st.dropped += 1;
        }
    }

    /// The journal, reconciled against `planned` files (workspace-relative,
    /// normalised; `None`: no plan) and a `verify` command.
    pub fn report(&self, planned: Option<&[String]>, verify: Option<&str>) -> Report {
        let st = self.state();
        let plan = planned.map(|planned| {
            let planned: BTreeSet<&String> = planned.iter().collect();
            PlanCheck {
                planned_touched: st
                    .touched
                    .iter()
                    .filter(|p| planned.contains(p))
                    .cloned()
                    .collect(),
                unplanned: st
                    .touched
                    .iter()
                    .filter(|p| !planned.contains(p))
                    .cloned()
                    .collect(),
                untouched: planned
                    .iter()
                    .filter(|p| !st.touched.contains(p.as_str()))
                    .map(|p| p.to_string())
                    .collect(),
            }
        });
        let verification = verify.map(|wanted| {
            // The very command, not one that merely mentions it (`pytest
            // --co`, `echo pytest`): compared whole, whitespace collapsed.
            let wanted = collapse(wanted);
            let matching = || {
                st.commands
                    .iter()
                    .filter(|c| !c.cancelled && collapse(&c.command) == wanted)
            };
            let after = st.last_write.unwrap_or(0);
            let last_after = matching().rfind(|c| c.seq > after);
            Verification {
                command: wanted.clone(),
                ran: matching().next().is_some(),
                ran_after_last_write: last_after.is_some(),
                exit_code: last_after.map(|c| c.exit_code),
                passed: last_after.is_some_and(|c| c.exit_code == 0 && !c.timed_out),
            }
        });
        Report {
            entries: st.entries.iter().cloned().collect(),
            dropped: st.dropped,
            files_written: st.writes.iter().cloned().collect(),
            commands: st.commands.iter().cloned().collect(),
            refused: st.refused.iter().cloned().collect(),
            touched: st.touched.iter().cloned().collect(),
            plan,
            verification,
            checkpoints: Vec::new(),
        }
    }
}

/// A command line with its whitespace trimmed and runs of it made one space.
fn collapse(command: &str) -> String {
    command.split_whitespace().collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests;
