//! Running a command in a session's container: the request checked
//! against the slip guard, the policy and the operator's ceilings, then
//! started, its events streamed to the caller and its result journaled.
//! While it runs the session is busy, so its idle timeout cannot close it
//! under the command.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;

use super::approvals::{Asked, Gated};
use super::error::Error;
use super::failure;
use super::gate::Approval;
use super::messages::{CommandRequest, check_env};
use super::tools::Session;
use crate::policy::{CommandDenied, Denial, Policy};
use crate::sandbox::{CommandSpec, Event, LimitHints};

/// What a person approving an interactive process is told: the approval
/// covers whatever is typed into it afterwards.
pub const INTERACTIVE: &str = "an interactive process: it takes input after it starts, and \
     what is typed into it then, commands included, runs without asking again; approving this \
     start approves that input";

impl Session {
    /// Checks a command against the guard and the ceilings, starts it, and
    /// returns its events (`Started`, chunks, `Exit`). Dropping the receiver
    /// cancels the command (the kill ladder runs).
    pub async fn run_command(
        self: &Arc<Self>,
        req: CommandRequest,
    ) -> Result<Gated<mpsc::Receiver<Event>>, failure::Error> {
        let started = Instant::now();
        let command = req.command.clone();
        let spec = match self.gated_command("RunCommand", req, false).await {
            Ok(Gated::Done(spec)) => spec,
            Ok(Gated::Rejected(r)) => {
                self.journal_rejected("RunCommand", &command, started, &r);
                return Ok(Gated::Rejected(r));
            }
            Err(e) => {
                self.refused("RunCommand", &command, started, &e);
                return Err(e);
            }
        };
        crate::profile::mark("session: request checked");
        let cwd = spec.cwd.clone();
        // The session's starting point is taken before its first change;
        // a restore waits for the command to end.
        self.history.begin().await;
        let turn = self.history.write_turn().await;
        let seq = self.journal.next_seq();
        let busy = Busy::new(self);
        crate::profile::mark("session: history turn taken");
        let running = match self.sandbox.start(spec).await {
            Ok(running) => {
                self.set_sandbox_status(None);
                running
            }
            Err(e) => {
                self.set_sandbox_status(Some(e.to_string()));
                let e = e.into();
                self.refused("RunCommand", &command, started, &e);
                return Err(e);
            }
        };
        crate::profile::mark("session: command handed over");
        self.journal.command_started(seq, &command, &cwd);
        self.watch.started(seq, &command);
        crate::profile::mark("session: start journaled");
        let (tx, rx) = mpsc::channel(64);
        let session = Arc::clone(self);
        // What the sandbox logs while the command runs names the session.
        let span = tracing::info_span!("command", session = %self.id, seq);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let container = running.container().to_string();
                // Every event reaches the caller through the session's
                // watch, in the same task: viewers see the output as it
                // comes, and a caller that leaves still cancels the command.
                let (inner, mut events) = mpsc::channel(64);
                let watch = &session.watch;
                let forward = async move {
                    loop {
                        let event = tokio::select! {
                            biased;
                            event = events.recv() => event,
                            () = tx.closed() => None,
                        };
                        let Some(event) = event else { break };
                        match &event {
                            Event::Stdout(text) => watch.output(seq, false, text),
                            Event::Stderr(text) => watch.output(seq, true, text),
                            Event::Exit(_) => crate::profile::mark("session: exit forwarded"),
                            _ => {}
                        }
                        if tx.send(event).await.is_err() {
                            break;
                        }
                    }
                };
                let (report, ()) = tokio::join!(running.drive(inner), forward);
                session.watch.ended(seq, &report);
                if let Some(m) = &session.config.metrics {
                    m.command(if report.cancelled {
                        "cancelled"
                    } else if report.timed_out {
                        "timed_out"
                    } else if report.oom_killed {
                        "oom"
                    } else {
                        "exit"
                    });
                    m.command_seconds.observe(report.duration.as_secs_f64());
                    for (stream, c) in [("stdout", &report.stdout), ("stderr", &report.stderr)] {
                        let kept = (c.text.len() + c.tail.len()) as u64;
                        m.output(stream, c.total_bytes, c.total_bytes.saturating_sub(kept));
                    }
                }
                session
                    .journal
                    .command(seq, &command, &cwd, started, &report);
                crate::profile::mark("session: end journaled");
                session.sandbox.finished(&container, &report).await;
                drop(turn);
                drop(busy);
            },
            span,
        ));
        Ok(Gated::Done(rx))
    }

    /// The command `req` asks `tool` (RunCommand, StartProcess) to run, as
    /// [`Session::command_spec`] checks it; when an ask rule holds it, once
    /// a person approved it. `interactive`: it takes input after it
    /// starts, which no rule sees, and the person is told so.
    pub(super) async fn gated_command(
        &self,
        tool: &'static str,
        req: CommandRequest,
        interactive: bool,
    ) -> Result<Gated<CommandSpec>, failure::Error> {
        let policy = self.policy();
        let rule = match policy.check_command_by(tool, &req.command) {
            Err(CommandDenied::Policy(Denial::NeedsApproval { rule, .. })) => rule,
            _ => return self.command_spec(tool, req, &policy).await.map(Gated::Done),
        };
        // Checked whole before anyone is asked: a person never approves a
        // command that would be refused anyway.
        let approved = policy.approving_command();
        self.command_spec(tool, req.clone(), &approved).await?;
        // The summary of an interactive start says what approving it
        // means (the command beside it is shown whole anyway).
        let summary = if interactive {
            INTERACTIVE.to_string()
        } else {
            req.command.clone()
        };
        let asked = Asked::Call {
            tool,
            summary,
            rule,
            path: String::new(),
            command: req.command.clone(),
            change: String::new(),
        };
        match self.ask(asked).await? {
            Approval::Approved { .. } => self
                .command_spec(tool, req, &approved)
                .await
                .map(Gated::Done),
            Approval::Rejected(r) => Ok(Gated::Rejected(r)),
        }
    }

    /// The command `req` asks `tool` to run, checked against the guard,
    /// `policy` and the ceilings, with the operator's defaults filled in.
    async fn command_spec(
        &self,
        tool: &'static str,
        req: CommandRequest,
        policy: &Policy,
    ) -> Result<CommandSpec, failure::Error> {
        let cfg = &self.config.sandbox;
        if req.command.trim().is_empty() {
            return Err(Error::InvalidArgument {
                field: "command",
                why: "it is empty".into(),
            }
            .into());
        }
        if req.command.contains('\0') {
            return Err(Error::InvalidArgument {
                field: "command",
                why: "it contains a NUL byte".into(),
            }
            .into());
        }
        policy
            .check_command_by(tool, &req.command)
            .map_err(|denied| match denied {
                CommandDenied::Policy(denial) => Error::Denied(denial),
                CommandDenied::Guard(refusal) => Error::CommandRefused(refusal),
            })?;
        check_env("env", &req.env)?;
        let timeout = cfg.timeout(req.timeout, self.default_timeout)?;
        let stdout_cap = cfg.cap("stdout_cap", req.stdout_cap)?;
        let stderr_cap = cfg.cap("stderr_cap", req.stderr_cap)?;
        // The workspace root needs no lookup (and no trip to the blocking pool).
        let cwd = if matches!(req.cwd.as_str(), "" | "." | "/workspace") {
            String::new()
        } else {
            self.workspace.real_dir(&req.cwd).await?
        };
        let env = self.env.clone().into_iter().chain(req.env).collect();
        Ok(CommandSpec {
            command: req.command,
            cwd: if cwd.is_empty() {
                "/workspace".into()
            } else {
                format!("/workspace/{cwd}")
            },
            env,
            hints: LimitHints {
                timed_out: timed_out_hint(timeout, self.default_timeout, cfg.max_timeout),
                truncated: truncated_hint(stdout_cap, stderr_cap, cfg.max_cap),
            },
            timeout,
            stdout_cap: stdout_cap as usize,
            stderr_cap: stderr_cap as usize,
        })
    }
}

/// `d` in whole seconds, or in milliseconds under a second.
fn shown(d: Duration) -> String {
    if d.as_millis().is_multiple_of(1000) {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}

/// What a command that ran out of `timeout` is told: how to give it more
/// time, and up to what.
fn timed_out_hint(timeout: Duration, session_default: Duration, ceiling: Duration) -> String {
    if timeout >= ceiling {
        return format!(
            "The command was stopped at its timeout of {}, the operator's ceiling: it cannot be \
             given longer. Run less at once (e.g. part of the test suite), or ask the operator to \
             raise the ceiling (serve --max-timeout-ms).",
            shown(timeout)
        );
    }
    format!(
        "The command was stopped at its timeout of {} (this session's default is {}). To give \
         it longer, set timeout_ms on RunCommand (`sandboxd run --timeout-ms`), or \
         default_timeout_ms on CreateSession for every command of a session, up to the \
         operator's ceiling of {} ({} ms).",
        shown(timeout),
        shown(session_default),
        shown(ceiling),
        ceiling.as_millis()
    )
}

/// What a command whose output was cut at its cap is told.
fn truncated_hint(stdout_cap: u64, stderr_cap: u64, ceiling: u64) -> String {
    format!(
        "Output past its cap was cut ({stdout_cap} characters of stdout, {stderr_cap} of \
         stderr): `text` holds the first three quarters of the cap, `tail` the last quarter, and \
         omitted_bytes what was dropped between them. To see more, set stdout_cap / stderr_cap \
         on RunCommand (`sandboxd run --cap`), up to the operator's ceiling of {ceiling}, or \
         redirect the output to a file in the workspace and read it with ReadFile or search it \
         with SearchFiles."
    )
}

/// Marks a session busy while one of its commands runs: the idle clock
/// restarts when the command ends.
struct Busy(Arc<Session>);

impl Busy {
    fn new(session: &Arc<Session>) -> Busy {
        session.running.fetch_add(1, Ordering::SeqCst);
        Busy(Arc::clone(session))
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.touch();
        self.0.running.fetch_sub(1, Ordering::SeqCst);
    }
}
