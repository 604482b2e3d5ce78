//! Running a command in a session's container: the request checked
//! against the slip guard, the policy and the operator's ceilings, then
//! started, its events streamed to the caller and its result journaled.
//! While it runs the session is busy, so its idle timeout cannot close it
//! under the command.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use tokio::sync::mpsc;

use super::error::Error;
use super::failure;
use super::messages::{CommandRequest, check_env};
use super::tools::Session;
use crate::policy::CommandDenied;
use crate::sandbox::{CommandSpec, Event};

impl Session {
    /// Checks a command against the guard and the ceilings, starts it, and
    /// returns its events (`Started`, chunks, `Exit`). Dropping the receiver
    /// cancels the command (the kill ladder runs).
    pub async fn run_command(
        self: &Arc<Self>,
        req: CommandRequest,
    ) -> Result<mpsc::Receiver<Event>, failure::Error> {
        let started = Instant::now();
        let command = req.command.clone();
        let spec = match self.command_spec(req).await {
            Ok(spec) => spec,
            Err(e) => {
                self.refused("RunCommand", &command, started, &e);
                return Err(e);
            }
        };
        let cwd = spec.cwd.clone();
        let seq = self.journal.next_seq();
        let busy = Busy::new(self);
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
        let (tx, rx) = mpsc::channel(64);
        let session = Arc::clone(self);
        tokio::spawn(async move {
            let container = running.container().to_string();
            let report = running.drive(tx).await;
            session
                .journal
                .command(seq, &command, &cwd, started, &report);
            session.sandbox.finished(&container, &report).await;
            drop(busy);
        });
        Ok(rx)
    }

    /// The command `req` asks for, checked against the guard, the policy
    /// and the ceilings, with the operator's defaults filled in.
    async fn command_spec(&self, req: CommandRequest) -> Result<CommandSpec, failure::Error> {
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
        self.policy
            .check_command(&req.command)
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
            timeout,
            stdout_cap: stdout_cap as usize,
            stderr_cap: stderr_cap as usize,
        })
    }
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
