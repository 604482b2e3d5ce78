//! Long-running processes in a session's container, as the service sees
//! them: what to start ([`ProcessSpec`]), what happens to it
//! ([`ProcessEvent`]), and the handle that gives it input, resizes its
//! terminal, signals it and stops it ([`Process`]). A process always runs
//! under the container's supervisor: there is no plain-exec path for one,
//! since only the supervisor can keep its group apart and stop it.
//!
//! The container stays the hard stop: a process whose group survives
//! SIGKILL, or whose link dies, gets its container killed, as a command
//! does.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::mpsc;

use super::command::TERM_GRACE;
use super::supervisor::frames::{self, event};
use super::supervisor::host::Link;
use super::{Error, KilledBy, Runtime, Sandbox};

/// Said when a process's link to the supervisor died under it.
pub const NOTE_LINK_LOST: &str = "the link to the sandbox's supervisor was lost while this process ran, so the container was killed (the workspace is intact)";

/// How long a process may take to end after the ladder began, before the
/// service kills its container: the ladder's own time and some slack.
pub const STOP_DEADLINE: Duration = Duration::from_secs(TERM_GRACE.as_secs() + 1 + 5);

/// What to start.
#[derive(Debug, Clone)]
pub struct ProcessSpec {
    /// Shell command line.
    pub command: String,
    /// Absolute working directory in the container.
    pub cwd: String,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Open a pipe to its input.
    pub stdin: bool,
    /// Run it on a terminal of (rows, columns).
    pub pty: Option<(u16, u16)>,
    /// A port whose listening the supervisor reports (0: none).
    pub ready_port: u16,
}

/// A signal a caller may send to a process's group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcessSignal {
    /// SIGINT (^C).
    Int,
    /// SIGTERM.
    Term,
    /// SIGKILL.
    Kill,
}

impl ProcessSignal {
    /// Its number.
    pub fn number(self) -> i32 {
        match self {
            ProcessSignal::Int => 2,
            ProcessSignal::Term => 15,
            ProcessSignal::Kill => 9,
        }
    }

    /// Its name, as `kill -l` says it.
    pub fn name(self) -> &'static str {
        match self {
            ProcessSignal::Int => "INT",
            ProcessSignal::Term => "TERM",
            ProcessSignal::Kill => "KILL",
        }
    }
}

/// How a process ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessExit {
    /// Exit code (128+n for signal n); -1 when unknown.
    pub exit_code: i64,
    /// The signal that ended it, if one did.
    pub signal: Option<i32>,
    /// The rung of the ladder that ended it.
    pub killed_by: KilledBy,
    /// It could not be started: why.
    pub failed: Option<String>,
    /// What the caller must know about its end.
    pub notes: Vec<String>,
}

/// What happens to a process, in order: `Started` (or an `Exit` saying it
/// could not start), output, and one `Exit`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProcessEvent {
    /// It runs, with this pid in the container.
    Started(u32),
    /// Bytes it wrote to stdout (or its terminal).
    Stdout(Vec<u8>),
    /// Bytes it wrote to stderr.
    Stderr(Vec<u8>),
    /// Its ready port listens.
    Listening,
    /// CPU time of its group so far.
    Cpu(Duration),
    /// What became of the last input: bytes taken, whether the input is
    /// closed now, and why not all were taken.
    InputDone {
        /// Bytes taken.
        written: u64,
        /// The input is closed.
        closed: bool,
        /// Why not all were taken (empty when all were).
        error: String,
    },
    /// The end.
    Exit(ProcessExit),
}

/// A running process: its handle.
#[derive(Debug, Clone)]
pub struct Process {
    rt: Arc<dyn Runtime>,
    link: Arc<Link>,
    container: String,
    id: u64,
    /// Its sandbox is being reset or removed: a link that dies now is
    /// that, not a fault.
    ending: Arc<AtomicBool>,
}

/// The events of one process.
#[derive(Debug)]
pub struct ProcessEvents {
    process: Process,
    frames: mpsc::Receiver<frames::Event>,
    done: bool,
}

impl Process {
    /// The container it runs in.
    pub fn container(&self) -> &str {
        &self.container
    }

    /// Hands `data` to its input, closing the input after it with `close`;
    /// what became of it comes as [`ProcessEvent::InputDone`].
    pub async fn write(&self, data: Vec<u8>, close: bool) -> Result<(), Error> {
        self.link.input(self.id, data, close).await
    }

    /// Resizes its terminal.
    pub async fn resize(&self, rows: u16, cols: u16) -> Result<(), Error> {
        self.link.resize(self.id, rows, cols).await
    }

    /// Sends `signal` to its group.
    pub async fn signal(&self, signal: ProcessSignal) -> Result<(), Error> {
        self.link.signal(self.id, signal.number()).await
    }

    /// Starts the kill ladder; the end comes as [`ProcessEvent::Exit`].
    /// Whoever waits for it and does not see it within [`STOP_DEADLINE`]
    /// calls [`Process::kill_container`].
    pub async fn stop(&self) -> Result<(), Error> {
        self.link.stop(self.id).await
    }

    /// Says its sandbox is being reset or removed: when its link dies, it
    /// ended with the container, which is not killed again for it.
    pub fn ending_with_sandbox(&self) {
        self.ending.store(true, Ordering::SeqCst);
    }

    /// The hard stop: kills its container.
    pub async fn kill_container(&self) -> KilledBy {
        super::hard_stop(self.rt.as_ref(), &self.container).await
    }
}

impl ProcessEvents {
    /// The next event; `None` after the `Exit`. A link that dies, or a
    /// supervisor that breaks the protocol, kills the container and ends
    /// the process with a note saying so.
    pub async fn next(&mut self) -> Option<ProcessEvent> {
        if self.done {
            return None;
        }
        loop {
            let kind = self.frames.recv().await.and_then(|f| f.kind);
            let event = match kind {
                Some(event::Kind::Started(pid)) => ProcessEvent::Started(pid),
                Some(event::Kind::Out(bytes)) => ProcessEvent::Stdout(bytes),
                Some(event::Kind::Err(bytes)) => ProcessEvent::Stderr(bytes),
                Some(event::Kind::Listening(_)) => ProcessEvent::Listening,
                Some(event::Kind::Usage(ms)) => ProcessEvent::Cpu(Duration::from_millis(ms)),
                Some(event::Kind::InputDone(done)) => ProcessEvent::InputDone {
                    written: done.written,
                    closed: done.closed,
                    error: done.error,
                },
                Some(event::Kind::Exit(exit)) => {
                    self.done = true;
                    let exit = match exit.killed_by() {
                        Ok(KilledBy::Container) => ProcessExit {
                            exit_code: exit.exit_code,
                            signal: (exit.signal != 0).then_some(exit.signal),
                            killed_by: self.process.kill_container().await,
                            failed: None,
                            notes: Vec::new(),
                        },
                        Ok(killed_by) => ProcessExit {
                            exit_code: exit.exit_code,
                            signal: (exit.signal != 0).then_some(exit.signal),
                            killed_by,
                            failed: (!exit.spawn_error.is_empty()).then_some(exit.spawn_error),
                            notes: Vec::new(),
                        },
                        Err(e) => {
                            tracing::warn!(error = %e, "the supervisor broke the protocol");
                            self.lost().await
                        }
                    };
                    self.process.link.forget(self.process.id);
                    return Some(ProcessEvent::Exit(exit));
                }
                Some(
                    event::Kind::Ready(_)
                    | event::Kind::Stdout(_)
                    | event::Kind::Stderr(_)
                    | event::Kind::Lent(_),
                ) => {
                    continue;
                }
                None => {
                    self.done = true;
                    self.process.link.forget(self.process.id);
                    return Some(ProcessEvent::Exit(self.lost().await));
                }
            };
            return Some(event);
        }
    }

    /// The end of a process whose link died: its container is killed
    /// (unless the container is going anyway).
    async fn lost(&self) -> ProcessExit {
        if self.process.ending.load(Ordering::SeqCst) {
            return ProcessExit {
                exit_code: -1,
                signal: None,
                killed_by: KilledBy::Container,
                failed: None,
                notes: Vec::new(),
            };
        }
        ProcessExit {
            exit_code: -1,
            signal: None,
            killed_by: self.process.kill_container().await,
            failed: None,
            notes: vec![NOTE_LINK_LOST.to_string()],
        }
    }
}

impl Sandbox {
    /// Starts a process through the container's supervisor (starting the
    /// container first if there is none). A container whose link died is
    /// replaced first. Refused where the supervisor cannot run: a process
    /// never runs as a plain exec.
    pub async fn start_process(
        &self,
        spec: &ProcessSpec,
    ) -> Result<(Process, ProcessEvents), Error> {
        let mut container = self.ensure().await?;
        let link = match self.live_link(&container).await {
            Ok(link) => link,
            Err(Error::LinkLost) => {
                self.replace_container(&container).await;
                container = self.ensure().await?;
                self.live_link(&container).await?
            }
            Err(e) => return Err(e),
        };
        let (id, frames) = link.start_process(spec).await.map_err(|e| {
            tracing::warn!(container, error = %e, "the supervisor link died");
            Error::LinkLost
        })?;
        let process = Process {
            rt: Arc::clone(self.runtime()),
            link,
            container,
            id,
            ending: Arc::default(),
        };
        let events = ProcessEvents {
            process: process.clone(),
            frames,
            done: false,
        };
        Ok((process, events))
    }
}
