//! Long-running processes in the journal: a line when one starts and a
//! line when it ends (both also calls in the timeline), so that a service
//! that stops while processes run finds them again and reports them as
//! interrupted. Input is journaled by its size, never its bytes.

use std::borrow::Cow;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use super::{Entry, Journal, MAX_COMMAND_CHARS, MAX_KEPT, Outcome, State, cut, now_ms};
use crate::sandbox::KilledBy;

/// A process as the journal keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessRecord {
    /// Its id in the session (the sequence number of its start).
    pub id: u64,
    /// The command line (its first 1024 characters).
    pub command: String,
    /// Working directory in the container.
    pub cwd: String,
    /// It ran on a terminal.
    pub pty: bool,
    /// Wall time of its start, ms since the Unix epoch.
    pub started_at_ms: u64,
    /// How it ended; `None` while it runs.
    pub end: Option<ProcessEnd>,
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessEnd {
    /// Wall time, ms since the Unix epoch.
    pub at_ms: u64,
    /// Exit code (128+n for signal n); -1 when unknown.
    pub exit_code: i64,
    /// The signal that ended it, if one did.
    #[serde(default)]
    pub signal: Option<i32>,
    /// The rung of the ladder that ended it.
    pub killed_by: KilledBy,
    /// The service stopped while it ran.
    #[serde(default)]
    pub interrupted: bool,
    /// It could not be started.
    #[serde(default)]
    pub failed: bool,
    /// CPU time of its group, ms.
    #[serde(default)]
    pub cpu_ms: u64,
    /// Bytes it wrote to stdout.
    #[serde(default)]
    pub stdout_bytes: u64,
    /// Bytes it wrote to stderr.
    #[serde(default)]
    pub stderr_bytes: u64,
    /// What the caller must know about its end.
    #[serde(default)]
    pub notes: Vec<String>,
}

/// Said of a process the service's stop cut short.
pub const NOTE_INTERRUPTED: &str = "the service stopped while this process ran; its container was not kept, so it is gone, and its output was not kept";

impl ProcessEnd {
    /// A short description: "exit 0", "killed by signal 15", ...
    pub fn describe(&self) -> String {
        if self.interrupted {
            return "interrupted: the service stopped while it ran".into();
        }
        if self.failed {
            return "could not start".into();
        }
        let mut text = match self.signal {
            Some(sig) => format!("killed by signal {sig}"),
            None => format!("exit {}", self.exit_code),
        };
        match self.killed_by {
            KilledBy::None => {}
            KilledBy::ProcessGroupTerm => text.push_str(" (SIGTERM to its group)"),
            KilledBy::ProcessGroupKill => text.push_str(" (SIGKILL to its group)"),
            KilledBy::Container | KilledBy::ContainerFailed => {
                text.push_str(" (its container was killed)")
            }
        }
        text
    }
}

impl Journal {
    /// Records that process `record.id` started (its id is the sequence
    /// number it took).
    pub fn process_started(&self, record: &ProcessRecord, started: Instant) {
        let record = ProcessRecord {
            command: cut(&record.command, MAX_COMMAND_CHARS),
            ..record.clone()
        };
        let entry = Entry {
            seq: record.id,
            at_ms: now_ms(),
            tool: Cow::Borrowed("StartProcess"),
            summary: cut(&record.command, super::MAX_SUMMARY_CHARS),
            outcome: Outcome::Ok {
                detail: format!("started p{}", record.id),
            },
            duration_ms: started.elapsed().as_millis() as u64,
        };
        self.state().push_process(record.clone());
        self.append_process(entry, &record);
    }

    /// Records how process `id` ended.
    pub fn process_ended(&self, id: u64, end: ProcessEnd) {
        let record = {
            let mut st = self.state();
            // The first end recorded stands (a shutdown records its
            // processes as interrupted before their ends come in).
            let Some(record) = st
                .processes
                .iter_mut()
                .find(|p| p.id == id && p.end.is_none())
            else {
                return;
            };
            record.end = Some(end.clone());
            record.clone()
        };
        let seq = self.next_seq();
        let entry = Entry {
            seq,
            at_ms: end.at_ms,
            tool: Cow::Borrowed("ProcessEnded"),
            summary: cut(
                &format!("p{id} {}", record.command),
                super::MAX_SUMMARY_CHARS,
            ),
            outcome: Outcome::Ok {
                detail: end.describe(),
            },
            duration_ms: end.at_ms.saturating_sub(record.started_at_ms),
        };
        self.append_process(entry, &record);
    }

    /// Every process, oldest first (the newest [`MAX_KEPT`]).
    pub fn processes(&self) -> Vec<ProcessRecord> {
        self.state().processes.iter().cloned().collect()
    }

    /// Records, after a restart, that every process still running when
    /// the service stopped was interrupted.
    pub fn interrupt_processes(&self) -> u64 {
        let running: Vec<u64> = self
            .state()
            .processes
            .iter()
            .filter(|p| p.end.is_none())
            .map(|p| p.id)
            .collect();
        for &id in &running {
            self.process_ended(
                id,
                ProcessEnd {
                    at_ms: now_ms(),
                    exit_code: -1,
                    signal: None,
                    killed_by: KilledBy::None,
                    interrupted: true,
                    failed: false,
                    cpu_ms: 0,
                    stdout_bytes: 0,
                    stderr_bytes: 0,
                    notes: vec![NOTE_INTERRUPTED.to_string()],
                },
            );
        }
        running.len() as u64
    }
}

impl State {
    /// Keeps `record`, replacing the one of the same id.
    pub(super) fn push_process(&mut self, record: ProcessRecord) {
        if let Some(kept) = self.processes.iter_mut().find(|p| p.id == record.id) {
            *kept = record;
            return;
        }
        if self.processes.len() >= MAX_KEPT {
            // The oldest that ended goes first; running ones stay.
            if let Some(at) = self.processes.iter().position(|p| p.end.is_some()) {
                self.processes.remove(at);
            }
        }
        self.processes.push_back(record);
    }
}
