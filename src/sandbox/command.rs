//! What a command is and how it ended, whichever path runs it (the
//! supervisor in the container, or the exec fallback): the request
//! ([`CommandSpec`]), the events a caller sees ([`Event`]), the final
//! result ([`ExitReport`]), and the rung of the kill ladder that stopped it
//! ([`KilledBy`]).

use std::collections::BTreeMap;
use std::time::Duration;

use super::capture::Captured;

/// Wait between SIGTERM and SIGKILL to a command's process group, on every
/// path.
pub const TERM_GRACE: Duration = Duration::from_secs(2);

/// What to run.
#[derive(Debug, Clone)]
pub struct CommandSpec {
    /// Shell command line.
    pub command: String,
    /// Absolute working directory in the container.
    pub cwd: String,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Wall-clock limit.
    pub timeout: Duration,
    /// Characters kept of stdout.
    pub stdout_cap: usize,
    /// Characters kept of stderr.
    pub stderr_cap: usize,
    /// What the exit says when the command ran out of time, and when
    /// output was cut at its cap: how to get more, in the caller's terms.
    pub hints: LimitHints,
}

/// Notes an exit carries when a limit stopped or cut the command.
#[derive(Debug, Clone, Default)]
pub struct LimitHints {
    /// Said when the command timed out.
    pub timed_out: String,
    /// Said when stdout or stderr was cut at its cap.
    pub truncated: String,
}

/// Which rung of the ladder stopped the command.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum KilledBy {
    /// It ended by itself.
    None,
    /// SIGTERM to its process group.
    ProcessGroupTerm,
    /// SIGKILL to its process group.
    ProcessGroupKill,
    /// The container was killed (the session gets a fresh one).
    Container,
    /// The container was to be killed as the hard stop and the engine
    /// failed to: it is not forgotten (its removal is retried until it is
    /// gone), and the session gets a fresh one.
    ContainerFailed,
}

/// The final result of a command.
#[derive(Debug, Clone)]
pub struct ExitReport {
    /// Exit code (128+n for signal n); -1 when unknown.
    pub exit_code: i64,
    /// The timeout fired.
    pub timed_out: bool,
    /// The client went away before the end.
    pub cancelled: bool,
    /// Which rung stopped it.
    pub killed_by: KilledBy,
    /// The container hit its memory limit while the command ran (the
    /// kernel's OOM killer ended a process of it).
    pub oom_killed: bool,
    /// The container's process limit refused a fork while it ran.
    pub pids_exhausted: bool,
    /// What the caller must know about how it ran, in plain words.
    pub notes: Vec<String>,
    /// Wall time from start to result.
    pub duration: Duration,
    /// Kept stdout.
    pub stdout: Captured,
    /// Kept stderr.
    pub stderr: Captured,
}

/// Events of one command, in order: `Started`, chunks, `Exit`.
#[derive(Debug, Clone)]
pub enum Event {
    /// The command is running.
    Started {
        /// Container it runs in.
        container_id: String,
        /// Working directory in the container.
        cwd: String,
        /// The timeout in force.
        timeout: Duration,
    },
    /// Live stdout text (within the cap).
    Stdout(String),
    /// Live stderr text (within the cap).
    Stderr(String),
    /// The end, with the whole capped result.
    Exit(ExitReport),
}
