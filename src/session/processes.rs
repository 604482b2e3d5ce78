//! A session's long-running processes: starting one (checked as a command
//! is, counted against the session's ceiling, waited for until ready),
//! listing them, and the task that follows each one's events into its
//! kept state and journals its end. Reading output, input, resizing,
//! signals and stopping are in `control`.

mod control;
mod output;

pub use output::OutputStream;

use std::sync::{Arc, Weak};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use super::approvals::Gated;
use super::error::Error;
use super::failure;
use super::messages::{CommandRequest, ProcessRequest, ReadyOn, ReadyState, StartedProcess};
use super::process_table::{InputAck, Live, Matcher, ProcessInfo};
use super::tools::Session;
use crate::journal::{ProcessEnd, ProcessRecord};
use crate::sandbox::{ProcessEvent, ProcessEvents, ProcessSpec};

/// Characters of each stream a StartProcess answer carries.
const TAIL_CHARS: usize = 4000;
/// How long a start waits for the supervisor to say the process runs.
const START_WAIT: Duration = Duration::from_secs(30);
/// Longest readiness pattern.
const MAX_PATTERN: usize = 4096;
/// A terminal's size when the caller gives none.
const DEFAULT_PTY: (u16, u16) = (24, 80);

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// "p12" (or "12") as 12.
fn parse_id(id: &str) -> Result<u64, failure::Error> {
    id.strip_prefix('p')
        .unwrap_or(id)
        .parse()
        .map_err(|_| Error::ProcessNotFound { id: id.to_string() }.into())
}

fn invalid(field: &'static str, why: impl Into<String>) -> failure::Error {
    Error::InvalidArgument {
        field,
        why: why.into(),
    }
    .into()
}

/// One side of a terminal size, 1 to 1000 (0 means the default).
fn side(field: &'static str, asked: u32, default: u16) -> Result<u16, failure::Error> {
    match asked {
        0 => Ok(default),
        1..=1000 => Ok(asked as u16),
        _ => Err(invalid(field, format!("{asked} is not between 1 and 1000"))),
    }
}

impl Session {
    /// StartProcess: checks the command as RunCommand would (guard, policy,
    /// an ask rule's person), then starts it and answers once it runs, or,
    /// with a readiness condition, once it holds, the process ended, or
    /// the time limit passed.
    pub async fn start_process(
        self: &Arc<Self>,
        req: ProcessRequest,
    ) -> Result<Gated<StartedProcess>, failure::Error> {
        let started = Instant::now();
        let command = req.command.clone();
        let result = self.start_process_checked(req, started).await;
        match &result {
            Ok(Gated::Done(_)) => {}
            Ok(Gated::Rejected(r)) => self.journal_rejected("StartProcess", &command, started, r),
            Err(e) => self.refused("StartProcess", &command, started, e),
        }
        result
    }

    async fn start_process_checked(
        self: &Arc<Self>,
        req: ProcessRequest,
        started: Instant,
    ) -> Result<Gated<StartedProcess>, failure::Error> {
        let cfg = &self.config.sandbox;
        let pty = match req.pty {
            Some((rows, cols)) => Some((
                side("pty.rows", rows, DEFAULT_PTY.0)?,
                side("pty.cols", cols, DEFAULT_PTY.1)?,
            )),
            None => None,
        };
        let (ready_port, matcher) = match &req.ready {
            None => (0, None),
            Some(ReadyOn::Port(port)) => match u16::try_from(*port) {
                Ok(port) if port > 0 => (port, None),
                _ => return Err(invalid("ready.port", format!("{port} is not a TCP port"))),
            },
            Some(ReadyOn::Output(pattern)) => {
                if pattern.is_empty() || pattern.len() > MAX_PATTERN {
                    return Err(invalid(
                        "ready.output_regex",
                        format!("it must be 1 to {MAX_PATTERN} bytes"),
                    ));
                }
                let regex = regex::RegexBuilder::new(pattern)
                    .size_limit(1 << 20)
                    .build()
                    .map_err(|e| invalid("ready.output_regex", e.to_string()))?;
                (0, Some(Matcher::new(regex)))
            }
        };
        let ready_timeout = cfg.ready_timeout(req.ready_timeout)?;
        let asked = CommandRequest {
            command: req.command,
            cwd: req.cwd,
            timeout: Duration::ZERO,
            env: req.env,
            stdout_cap: 0,
            stderr_cap: 0,
        };
        let interactive = req.stdin || pty.is_some();
        let spec = match self
            .gated_command("StartProcess", asked, interactive)
            .await?
        {
            Gated::Done(spec) => spec,
            Gated::Rejected(r) => return Ok(Gated::Rejected(r)),
        };
        if cfg.supervisor.is_none() {
            return Err(Error::ProcessesUnavailable(
                "this service runs every command as its own exec".into(),
            )
            .into());
        }
        let starting = self.processes.starting.lock().await;
        let running = self.processes.running();
        if running.len() >= cfg.max_processes {
            return Err(Error::TooManyProcesses {
                max: cfg.max_processes,
                running: running
                    .iter()
                    .map(|p| format!("p{} `{}`", p.id, cut(&p.command, 60)))
                    .collect(),
            }
            .into());
        }
        // The session's starting point is taken before its first change.
        self.history.begin().await;
        let id = self.journal.next_seq();
        let process = ProcessSpec {
            command: spec.command.clone(),
            cwd: spec.cwd.clone(),
            env: spec.env,
            stdin: req.stdin,
            pty,
            ready_port,
        };
        let (handle, events) = match self.sandbox.start_process(&process).await {
            Ok(started) => {
                self.set_sandbox_status(None);
                started
            }
            Err(e) => {
                self.set_sandbox_status(Some(e.to_string()));
                return Err(e.into());
            }
        };
        let started_at_ms = now_ms();
        let live = Arc::new(Live::new(
            id,
            spec.command.clone(),
            spec.cwd.clone(),
            pty.is_some(),
            req.stdin,
            started_at_ms,
            handle,
            cfg.process_output_bytes as usize,
            req.ready.is_some(),
        ));
        self.processes.insert(Arc::clone(&live));
        self.journal.process_started(
            &ProcessRecord {
                id,
                command: spec.command,
                cwd: spec.cwd,
                pty: pty.is_some(),
                started_at_ms,
                end: None,
            },
            started,
        );
        drop(starting);
        tokio::spawn(follow(
            Arc::downgrade(self),
            Arc::clone(&live),
            events,
            matcher,
        ));

        live.wait_for(START_WAIT, |s| s.pid.is_some() || s.end.is_some())
            .await;
        let ready_state = if req.ready.is_none() {
            ReadyState::NotAsked
        } else {
            live.wait_for(ready_timeout, |s| s.ready_at.is_some() || s.end.is_some())
                .await;
            // Decided and closed under one lock: once answered, readiness
            // is no longer watched (the matcher stops scanning), and a
            // process the answer called not ready never turns ready.
            let mut st = live.state();
            st.ready_unwatched = true;
            if st.ready_at.is_some() {
                ReadyState::Ready
            } else if st.end.is_some() {
                ReadyState::Exited
            } else {
                ReadyState::TimedOut
            }
        };
        let ready_ms = live.state().ready_at.map_or(0, |at| {
            at.saturating_duration_since(live.started).as_millis() as u64
        });
        let (stdout_tail, stderr_tail) = {
            let out = live.output();
            (out[0].last_text(TAIL_CHARS), out[1].last_text(TAIL_CHARS))
        };
        Ok(Gated::Done(StartedProcess {
            info: live.info(),
            ready_state,
            ready_ms,
            stdout_tail,
            stderr_tail,
        }))
    }

    /// ListProcesses: every process of the session, oldest first (those
    /// an earlier run of the service started, from the journal).
    pub fn list_processes(&self) -> Vec<ProcessInfo> {
        let started = Instant::now();
        let list = self.process_list();
        self.journal.ok(
            "ListProcesses",
            "",
            started,
            format!("{} processes", list.len()),
        );
        list
    }

    /// Every process of the session, oldest first. Not journaled.
    pub fn process_list(&self) -> Vec<ProcessInfo> {
        let live = self.processes.all();
        let mut list: Vec<ProcessInfo> = self
            .journal
            .processes()
            .iter()
            .filter(|r| !live.iter().any(|l| l.id == r.id))
            .map(ProcessInfo::from_record)
            .collect();
        list.extend(live.iter().map(|l| l.info()));
        list.sort_by_key(|p| p.id);
        list
    }
}

/// A string cut to `max` characters.
fn cut(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

/// Follows one process's events into its kept state until its end, then
/// journals the end. Holds the session weakly: a session that closes is
/// not kept for its processes (closing ends them anyway).
async fn follow(
    session: Weak<Session>,
    live: Arc<Live>,
    mut events: ProcessEvents,
    mut matcher: Option<Matcher>,
) {
    while let Some(event) = events.next().await {
        match event {
            ProcessEvent::Started(pid) => live.state().pid = Some(pid),
            ProcessEvent::Stdout(bytes) | ProcessEvent::Stderr(bytes) if bytes.is_empty() => {}
            ProcessEvent::Stdout(bytes) => output(&live, &mut matcher, 0, &bytes),
            ProcessEvent::Stderr(bytes) => output(&live, &mut matcher, 1, &bytes),
            ProcessEvent::Listening => ready(&live),
            ProcessEvent::Cpu(cpu) => live.state().cpu_ms = cpu.as_millis() as u64,
            ProcessEvent::InputDone {
                written,
                closed,
                error,
            } => {
                if closed {
                    live.state().stdin_open = false;
                }
                let ack = InputAck {
                    written,
                    closed,
                    error,
                };
                let waiter = live
                    .input_ack
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                match waiter {
                    Some(tx) => {
                        let _ = tx.send(ack);
                    }
                    // The writer gave up waiting: the input is free again.
                    None => live.state().input_stuck = false,
                }
            }
            ProcessEvent::Exit(exit) => {
                let (stdout_bytes, stderr_bytes) = {
                    let out = live.output();
                    (out[0].total(), out[1].total())
                };
                let (ending, cpu_ms) = {
                    let st = live.state();
                    (st.ending.clone(), st.cpu_ms)
                };
                let mut notes = exit.notes;
                if let Some(why) = &exit.failed {
                    notes.push(why.clone());
                }
                if let Some(why) = &ending {
                    notes.push(why.clone());
                }
                let end = ProcessEnd {
                    at_ms: now_ms(),
                    exit_code: exit.exit_code,
                    signal: exit.signal,
                    killed_by: exit.killed_by,
                    interrupted: false,
                    failed: exit.failed.is_some(),
                    cpu_ms,
                    stdout_bytes,
                    stderr_bytes,
                    notes,
                };
                // Journaled first: once the table shows the end, the
                // journal holds it too (an ended process may leave the
                // table for the journal at any time).
                let session = session.upgrade();
                if let Some(session) = &session {
                    session.journal.process_ended(live.id, end.clone());
                }
                {
                    let mut st = live.state();
                    st.end = Some(end);
                    st.stdin_open = false;
                }
                // A writer waiting for its answer gets none: it ended.
                live.input_ack
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                live.bump();
                if let Some(session) = session
                    && ending.is_none()
                {
                    session
                        .sandbox
                        .ended(live.handle.container(), exit.killed_by)
                        .await;
                }
                return;
            }
        }
        live.bump();
    }
}

/// Keeps output of stream `stream` and looks for readiness in it.
fn output(live: &Live, matcher: &mut Option<Matcher>, stream: usize, bytes: &[u8]) {
    live.output()[stream].push(bytes);
    if matcher.is_some() && live.state().ready_unwatched {
        *matcher = None;
    }
    if let Some(m) = matcher
        && m.push(stream, bytes)
    {
        *matcher = None;
        ready(live);
    }
}

fn ready(live: &Live) {
    let mut st = live.state();
    if st.ready_at.is_none() && !st.ready_unwatched {
        st.ready_at = Some(Instant::now());
    }
}
