//! Conversions of long-running processes, their output and their
//! signals between the wire and the domain.

use std::time::Duration;

use crate::pb;
use crate::sandbox::ProcessSignal;
use crate::session::{
    Gated, OutputPiece, ProcessInfo, ProcessRequest, ProcessState, ReadyOn, ReadyState,
    StartedProcess,
};

impl From<pb::StartProcessRequest> for ProcessRequest {
    fn from(r: pb::StartProcessRequest) -> Self {
        let ready = r.ready.unwrap_or_default();
        ProcessRequest {
            command: r.command,
            cwd: r.cwd,
            env: r.env.into_iter().collect(),
            stdin: r.stdin,
            pty: r.pty.map(|p| (p.rows, p.cols)),
            ready: ready.condition.map(|c| match c {
                pb::readiness::Condition::Port(port) => ReadyOn::Port(port),
                pb::readiness::Condition::OutputRegex(re) => ReadyOn::Output(re),
            }),
            ready_timeout: Duration::from_millis(ready.timeout_ms),
        }
    }
}

impl From<ProcessState> for pb::ProcessState {
    fn from(s: ProcessState) -> Self {
        match s {
            ProcessState::Running => pb::ProcessState::Running,
            ProcessState::Exited => pb::ProcessState::Exited,
            ProcessState::Killed => pb::ProcessState::Killed,
            ProcessState::Interrupted => pb::ProcessState::Interrupted,
            ProcessState::Failed => pb::ProcessState::Failed,
        }
    }
}

impl From<ProcessInfo> for pb::Process {
    fn from(p: ProcessInfo) -> Self {
        pb::Process {
            process_id: format!("p{}", p.id),
            command: p.command,
            cwd: p.cwd,
            state: pb::ProcessState::from(p.state).into(),
            exit_code: p.exit_code,
            killed_by: pb::KilledBy::from(p.killed_by).into(),
            started_at_ms: p.started_at_ms,
            ended_at_ms: p.ended_at_ms,
            cpu_ms: p.cpu_ms,
            stdout_bytes: p.stdout_bytes,
            stderr_bytes: p.stderr_bytes,
            pty: p.pty,
            stdin_open: p.stdin_open,
            ready: p.ready,
            notes: p.notes,
        }
    }
}

impl From<ReadyState> for pb::ReadyState {
    fn from(s: ReadyState) -> Self {
        match s {
            ReadyState::NotAsked => pb::ReadyState::Unspecified,
            ReadyState::Ready => pb::ReadyState::Ready,
            ReadyState::Exited => pb::ReadyState::Exited,
            ReadyState::TimedOut => pb::ReadyState::TimedOut,
        }
    }
}

impl From<Gated<StartedProcess>> for pb::StartProcessResponse {
    fn from(g: Gated<StartedProcess>) -> Self {
        match g {
            Gated::Done(s) => pb::StartProcessResponse {
                process: Some(s.info.into()),
                ready_state: pb::ReadyState::from(s.ready_state).into(),
                ready_ms: s.ready_ms,
                stdout_tail: s.stdout_tail,
                stderr_tail: s.stderr_tail,
                rejected: None,
            },
            Gated::Rejected(r) => pb::StartProcessResponse {
                rejected: Some(r.into()),
                ..Default::default()
            },
        }
    }
}

impl From<OutputPiece> for pb::ProcessOutput {
    fn from(p: OutputPiece) -> Self {
        use pb::process_output::Kind;
        let kind = match p {
            OutputPiece::Chunk { stderr, read } => Kind::Chunk(pb::ProcessOutputChunk {
                stream: if stderr {
                    pb::ProcessStream::Stderr
                } else {
                    pb::ProcessStream::Stdout
                }
                .into(),
                offset: read.offset,
                data: read.data,
                skipped: read.skipped,
            }),
            OutputPiece::End {
                stdout_offset,
                stderr_offset,
                info,
            } => Kind::End(pb::ProcessOutputEnd {
                stdout_offset,
                stderr_offset,
                process: Some(info.into()),
            }),
        };
        pb::ProcessOutput { kind: Some(kind) }
    }
}

/// The signal a SignalProcess asks for; refused when it names none.
impl TryFrom<pb::ProcessSignal> for ProcessSignal {
    type Error = ();

    fn try_from(s: pb::ProcessSignal) -> Result<Self, ()> {
        match s {
            pb::ProcessSignal::Unspecified => Err(()),
            pb::ProcessSignal::Int => Ok(ProcessSignal::Int),
            pb::ProcessSignal::Term => Ok(ProcessSignal::Term),
            pb::ProcessSignal::Kill => Ok(ProcessSignal::Kill),
        }
    }
}
