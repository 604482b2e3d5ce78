//! What the journal records: its entries, the writes, commands and
//! refusals among them, and the report reconciling them against a plan.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

use super::processes::ProcessRecord;
use crate::sandbox::KilledBy;

/// One call.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Entry {
    /// Order within the session.
    pub seq: u64,
    /// Wall time of the outcome, milliseconds since the Unix epoch.
    pub at_ms: u64,
    /// The RPC.
    pub tool: Cow<'static, str>,
    /// Its arguments in brief.
    pub summary: String,
    /// What came of it.
    pub outcome: Outcome,
    /// Time the call took.
    pub duration_ms: u64,
}

/// What came of a call.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
        reason: Cow<'static, str>,
        /// The message the caller got.
        message: String,
    },
}

/// A file the file tools wrote.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct FileWrite {
    /// Order within the session.
    pub seq: u64,
    /// CreateFile or EditFile.
    pub tool: Cow<'static, str>,
    /// Workspace-relative path written (symlinks resolved).
    pub path: String,
    /// Hex sha256 before; `None` for a file that did not exist.
    pub sha256_before: Option<String>,
    /// Hex sha256 after.
    pub sha256_after: String,
}

/// A command that ran to a result.
#[derive(Debug, Clone, Serialize, Deserialize)]
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
    /// The service stopped (crashed, was killed) while it ran: its result
    /// is unknown, and its container was not kept.
    #[serde(default)]
    pub interrupted: bool,
}

/// A refused or failed call.
#[derive(Debug, Clone, Serialize)]
pub struct Refused {
    /// Order within the session.
    pub seq: u64,
    /// The RPC.
    pub tool: Cow<'static, str>,
    /// Its arguments in brief.
    pub summary: String,
    /// The stable reason the caller got.
    pub reason: Cow<'static, str>,
    /// The message the caller got.
    pub message: String,
}

/// A session's calls counted, cheaply (for a listing of every session).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    /// Calls journaled (numbered) so far.
    pub calls: u64,
    /// Commands that ran to a result (those still kept).
    pub commands: u64,
    /// Commands started and not ended.
    pub running: u64,
    /// Refused or failed calls (those still kept).
    pub refused: u64,
    /// Wall time of the last call's outcome, ms since the Unix epoch.
    pub last_at_ms: Option<u64>,
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
    /// Entries dropped past [`MAX_KEPT`](super::MAX_KEPT).
    pub dropped: u64,
    /// Lines dropped from the journal files by rotation (their ceiling).
    pub file_lines_dropped: u64,
    /// Successful writes only, oldest first.
    pub files_written: Vec<FileWrite>,
    /// Commands that ran to a result.
    pub commands: Vec<CommandRecord>,
    /// Refused or failed calls.
    pub refused: Vec<Refused>,
    /// Distinct paths written, sorted (at most [`MAX_TOUCHED`](super::MAX_TOUCHED)).
    pub touched: Vec<String>,
    /// Writes to paths past that bound: the plan check does not see them.
    pub touched_dropped: u64,
    /// Present when a plan was given.
    pub plan: Option<PlanCheck>,
    /// Present when a verification command was named.
    pub verification: Option<Verification>,
    /// The session's checkpoints (the session fills them in).
    pub checkpoints: Vec<crate::workspace::history::CheckpointInfo>,
    /// Every process, oldest first.
    pub processes: Vec<ProcessRecord>,
}
