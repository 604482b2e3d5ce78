//! A session's long-running processes as the service keeps them: each
//! one's handle, state, readiness and kept output ([`Live`]), and the
//! table of them with the session's ceiling ([`Processes`]). The calls
//! that start and drive processes are in `processes`; this file holds
//! only what they share with the rest of the session.

mod ready;
mod ring;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{oneshot, watch};

pub use ready::Matcher;
pub use ring::{Read, Ring};

use crate::journal::{ProcessEnd, ProcessRecord};
use crate::sandbox::{KilledBy, Process};

/// Bytes of output one chunk of a read carries at most.
pub const CHUNK: usize = 64 * 1024;
/// Ended processes whose output is kept; older ones are known from the
/// journal only (how they ended, not what they wrote), so a session that
/// starts process after process holds a bounded amount of output.
pub const ENDED_KEPT: usize = 32;

/// Where a process is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessState {
    /// It runs.
    Running,
    /// It ended by itself.
    Exited,
    /// A signal ended it.
    Killed,
    /// The service stopped while it ran.
    Interrupted,
    /// It could not be started.
    Failed,
}

/// A process as callers see it.
#[derive(Debug, Clone)]
pub struct ProcessInfo {
    /// Its number in the session ("p" and it, on the wire).
    pub id: u64,
    /// The command line.
    pub command: String,
    /// Working directory in the container.
    pub cwd: String,
    /// Where it is in its life.
    pub state: ProcessState,
    /// Exit code (128+n for signal n); -1 while it runs or when unknown.
    pub exit_code: i64,
    /// The rung of the ladder that ended it.
    pub killed_by: KilledBy,
    /// ms since the Unix epoch.
    pub started_at_ms: u64,
    /// ms since the Unix epoch; 0 while it runs.
    pub ended_at_ms: u64,
    /// CPU time of its group.
    pub cpu_ms: u64,
    /// Bytes written to each stream in all.
    pub stdout_bytes: u64,
    /// See `stdout_bytes`.
    pub stderr_bytes: u64,
    /// It runs on a terminal.
    pub pty: bool,
    /// Its input can be written.
    pub stdin_open: bool,
    /// Its readiness condition held (or it had none).
    pub ready: bool,
    /// What the caller must know.
    pub notes: Vec<String>,
}

impl ProcessInfo {
    /// A process known only from the journal (one a restart interrupted,
    /// or one that ended before it).
    pub fn from_record(record: &ProcessRecord) -> ProcessInfo {
        let mut info = ProcessInfo {
            id: record.id,
            command: record.command.clone(),
            cwd: record.cwd.clone(),
            state: ProcessState::Running,
            exit_code: -1,
            killed_by: KilledBy::None,
            started_at_ms: record.started_at_ms,
            ended_at_ms: 0,
            cpu_ms: 0,
            stdout_bytes: 0,
            stderr_bytes: 0,
            pty: record.pty,
            stdin_open: false,
            ready: false,
            notes: Vec::new(),
        };
        if let Some(end) = &record.end {
            info.ended(end);
        }
        info
    }

    fn ended(&mut self, end: &ProcessEnd) {
        self.state = if end.interrupted {
            ProcessState::Interrupted
        } else if end.failed {
            ProcessState::Failed
        } else if end.signal.is_some() || end.killed_by != KilledBy::None {
            ProcessState::Killed
        } else {
            ProcessState::Exited
        };
        self.exit_code = end.exit_code;
        self.killed_by = end.killed_by;
        self.ended_at_ms = end.at_ms;
        self.cpu_ms = self.cpu_ms.max(end.cpu_ms);
        self.stdout_bytes = self.stdout_bytes.max(end.stdout_bytes);
        self.stderr_bytes = self.stderr_bytes.max(end.stderr_bytes);
        self.stdin_open = false;
        self.notes = end.notes.clone();
    }
}

/// What became of one piece of input.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InputAck {
    /// Bytes the process took.
    pub written: u64,
    /// Its input is closed now.
    pub closed: bool,
    /// Why not all were taken.
    pub error: String,
}

/// What changes as a process runs.
#[derive(Debug, Default)]
pub struct LiveState {
    /// Its pid in the container, once it started.
    pub pid: Option<u32>,
    /// CPU time of its group.
    pub cpu_ms: u64,
    /// Its input is open.
    pub stdin_open: bool,
    /// Its readiness condition held, and when.
    pub ready_at: Option<Instant>,
    /// How it ended.
    pub end: Option<ProcessEnd>,
    /// Why it ends, when the service ends it with its sandbox.
    pub ending: Option<String>,
    /// A piece of input timed out and was not answered yet: the input
    /// takes nothing more until it is.
    pub input_stuck: bool,
    /// Nobody waits for its readiness any more (StartProcess answered):
    /// its output is no longer matched.
    pub ready_unwatched: bool,
}

/// One process started by this service.
#[derive(Debug)]
pub struct Live {
    /// Its number in the session.
    pub id: u64,
    /// The command line.
    pub command: String,
    /// Working directory in the container.
    pub cwd: String,
    /// It runs on a terminal.
    pub pty: bool,
    /// It was started with a pipe to its input.
    pub stdin_asked: bool,
    /// ms since the Unix epoch.
    pub started_at_ms: u64,
    /// When it started.
    pub started: Instant,
    /// The sandbox's handle.
    pub handle: Process,
    /// What changes as it runs.
    pub state: Mutex<LiveState>,
    /// stdout and stderr, kept.
    pub output: Mutex<[Ring; 2]>,
    /// Bumped on every change (output, readiness, its end), for waiters.
    changed: watch::Sender<u64>,
    /// One piece of input at a time.
    pub input: tokio::sync::Mutex<()>,
    /// Where the answer to the piece of input in flight goes.
    pub input_ack: Mutex<Option<oneshot::Sender<InputAck>>>,
}

impl Live {
    /// A process just started through `handle`.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        id: u64,
        command: String,
        cwd: String,
        pty: bool,
        stdin: bool,
        started_at_ms: u64,
        handle: Process,
        ring_bytes: usize,
        needs_ready: bool,
    ) -> Live {
        let now = Instant::now();
        Live {
            id,
            command,
            cwd,
            pty,
            stdin_asked: stdin,
            started_at_ms,
            started: now,
            handle,
            state: Mutex::new(LiveState {
                stdin_open: stdin || pty,
                ready_at: (!needs_ready).then_some(now),
                ..LiveState::default()
            }),
            output: Mutex::new([Ring::new(ring_bytes), Ring::new(ring_bytes)]),
            changed: watch::channel(0).0,
            input: tokio::sync::Mutex::new(()),
            input_ack: Mutex::new(None),
        }
    }

    /// Its state, locked.
    pub fn state(&self) -> std::sync::MutexGuard<'_, LiveState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Its output, locked.
    pub fn output(&self) -> std::sync::MutexGuard<'_, [Ring; 2]> {
        self.output.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Tells waiters something changed.
    pub fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// A receiver that sees every later [`Live::bump`].
    pub fn watch(&self) -> watch::Receiver<u64> {
        self.changed.subscribe()
    }

    /// Waits until `done` holds of its state, or `limit` passes; whether
    /// it holds.
    pub async fn wait_for(&self, limit: Duration, done: impl Fn(&LiveState) -> bool) -> bool {
        let mut changes = self.watch();
        let until = tokio::time::Instant::now() + limit;
        loop {
            if done(&self.state()) {
                return true;
            }
            match tokio::time::timeout_at(until, changes.changed()).await {
                Ok(Ok(())) => {}
                _ => return done(&self.state()),
            }
        }
    }

    /// Whether it ended.
    pub fn has_ended(&self) -> bool {
        self.state().end.is_some()
    }

    /// It as callers see it.
    pub fn info(&self) -> ProcessInfo {
        let (stdout_bytes, stderr_bytes) = {
            let out = self.output();
            (out[0].total(), out[1].total())
        };
        let st = self.state();
        let mut info = ProcessInfo {
            id: self.id,
            command: self.command.clone(),
            cwd: self.cwd.clone(),
            state: ProcessState::Running,
            exit_code: -1,
            killed_by: KilledBy::None,
            started_at_ms: self.started_at_ms,
            ended_at_ms: 0,
            cpu_ms: st.cpu_ms,
            stdout_bytes,
            stderr_bytes,
            pty: self.pty,
            stdin_open: st.stdin_open,
            ready: st.ready_at.is_some(),
            notes: Vec::new(),
        };
        if let Some(end) = &st.end {
            info.ended(end);
        }
        info
    }
}

/// The processes of one session.
#[derive(Debug)]
pub struct Processes {
    table: Mutex<BTreeMap<u64, Arc<Live>>>,
    /// One start at a time: the ceiling is checked and the process
    /// counted under it.
    pub starting: tokio::sync::Mutex<()>,
}

impl Processes {
    /// An empty table.
    pub fn new() -> Processes {
        Processes {
            table: Mutex::new(BTreeMap::new()),
            starting: tokio::sync::Mutex::new(()),
        }
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<u64, Arc<Live>>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Adds a process just started, letting go of the output of the
    /// oldest ended ones past [`ENDED_KEPT`].
    pub fn insert(&self, live: Arc<Live>) {
        let mut table = self.table();
        table.insert(live.id, live);
        let ended: Vec<u64> = table
            .iter()
            .filter(|(_, p)| p.has_ended())
            .map(|(id, _)| *id)
            .collect();
        for id in ended.iter().take(ended.len().saturating_sub(ENDED_KEPT)) {
            table.remove(id);
        }
    }

    /// Process `id`, if this service started it.
    pub fn get(&self, id: u64) -> Option<Arc<Live>> {
        self.table().get(&id).cloned()
    }

    /// Every process this service started, oldest first.
    pub fn all(&self) -> Vec<Arc<Live>> {
        self.table().values().cloned().collect()
    }

    /// Those still running.
    pub fn running(&self) -> Vec<Arc<Live>> {
        self.all().into_iter().filter(|p| !p.has_ended()).collect()
    }

    /// Marks every running process as ending with its sandbox, for `why`:
    /// its end is then said to be that, and the sandbox is not killed
    /// again for it.
    pub fn ending_with_sandbox(&self, why: &str) {
        for live in self.running() {
            live.handle.ending_with_sandbox();
            live.state().ending = Some(why.to_string());
        }
    }
}

impl Default for Processes {
    fn default() -> Self {
        Processes::new()
    }
}
