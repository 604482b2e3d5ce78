//! Conversions of commands, their captured output and their events between
//! the wire and the domain.

use std::time::Duration;

use crate::pb;
use crate::sandbox::{Captured, Event, KilledBy};
use crate::session::CommandRequest;

impl From<pb::RunCommandRequest> for CommandRequest {
    fn from(r: pb::RunCommandRequest) -> Self {
        CommandRequest {
            command: r.command,
            cwd: r.cwd,
            timeout: Duration::from_millis(r.timeout_ms),
            env: r.env.into_iter().collect(),
            stdout_cap: r.stdout_cap,
            stderr_cap: r.stderr_cap,
        }
    }
}

impl pb::OutputMode {
    /// `event` as a caller who asked for this mode gets it: `None` for a
    /// chunk it did not ask for; an exit without the text its chunks
    /// carried.
    pub fn shape(self, event: Event) -> Option<pb::RunCommandEvent> {
        let chunk = matches!(event, Event::Stdout(_) | Event::Stderr(_));
        if chunk && self == pb::OutputMode::Result {
            return None;
        }
        let exit = matches!(event, Event::Exit(_));
        let mut e = pb::RunCommandEvent::from(event);
        if self == pb::OutputMode::Chunks
            && let Some(pb::run_command_event::Event::Exit(x)) = &mut e.event
        {
            for s in [&mut x.stdout, &mut x.stderr].into_iter().flatten() {
                s.text.clear();
            }
        }
        if exit {
            crate::profile::mark("service: exit converted");
        }
        Some(e)
    }
}

impl From<KilledBy> for pb::KilledBy {
    fn from(k: KilledBy) -> Self {
        match k {
            KilledBy::None => pb::KilledBy::None,
            KilledBy::ProcessGroupTerm => pb::KilledBy::ProcessGroupTerm,
            KilledBy::ProcessGroupKill => pb::KilledBy::ProcessGroupKill,
            KilledBy::Container => pb::KilledBy::Container,
            KilledBy::ContainerFailed => pb::KilledBy::ContainerFailed,
        }
    }
}

impl From<Captured> for pb::StreamResult {
    fn from(c: Captured) -> Self {
        pb::StreamResult {
            text: c.text,
            total_bytes: c.total_bytes,
            truncated: c.truncated,
            tail: c.tail,
            omitted_bytes: c.omitted_bytes,
        }
    }
}

impl From<Event> for pb::RunCommandEvent {
    fn from(e: Event) -> Self {
        use pb::run_command_event::Event as E;
        let event = match e {
            Event::Started {
                container_id,
                cwd,
                timeout,
            } => E::Started(pb::CommandStarted {
                container_id,
                cwd,
                timeout_ms: timeout.as_millis() as u64,
            }),
            Event::Stdout(data) => E::Stdout(pb::OutputChunk { data }),
            Event::Stderr(data) => E::Stderr(pb::OutputChunk { data }),
            Event::Exit(r) => E::Exit(pb::CommandExit {
                exit_code: r.exit_code,
                timed_out: r.timed_out,
                killed_by: pb::KilledBy::from(r.killed_by).into(),
                duration_ms: r.duration.as_millis() as u64,
                stdout: Some(r.stdout.into()),
                stderr: Some(r.stderr.into()),
                cancelled: r.cancelled,
                oom_killed: r.oom_killed,
                pids_exhausted: r.pids_exhausted,
                notes: r.notes,
            }),
        };
        pb::RunCommandEvent { event: Some(event) }
    }
}
