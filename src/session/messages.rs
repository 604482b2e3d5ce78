//! What callers ask of sessions and what they get back, in domain terms
//! (`convert` maps them to and from the wire), and the check every
//! caller-given environment passes.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use super::error::Error;
use crate::environment::{Environment, Source};
use crate::journal::Report;
use crate::policy::Rules;
use crate::sandbox;

/// What the caller asks of a new session.
#[derive(Debug, Clone, Default)]
pub struct NewSession {
    /// Existing host directory to work in; `None` for a fresh workspace.
    pub workspace_path: Option<String>,
    /// Idle timeout; zero means the default.
    pub ttl: Duration,
    /// Timeout of its commands that give none; zero means the operator's.
    pub default_timeout: Duration,
    /// Image; `None` for the default.
    pub image: Option<String>,
    /// An environment to run instead of an image.
    pub environment: Option<String>,
    /// Limits; zero fields mean the default.
    pub limits: sandbox::Limits,
    /// Environment of every command.
    pub env: BTreeMap<String, String>,
    /// The session's own policy rules (added to the operator's).
    pub rules: Rules,
    /// Nobody watches it: nothing of it waits for a person.
    pub unattended: bool,
}

/// What the caller asks to build.
#[derive(Debug, Clone)]
pub struct NewEnvironment {
    /// The environment's name.
    pub name: String,
    /// Its recipe.
    pub source: Source,
    /// Time limit; zero means the operator's default.
    pub timeout: Duration,
    /// Bytes of build output to stream; zero means the operator's default.
    pub output_cap: u64,
}

/// An environment and the open sessions running it.
#[derive(Debug, Clone)]
pub struct EnvironmentInfo {
    /// The environment.
    pub environment: Environment,
    /// Ids of the sessions running it.
    pub sessions: Vec<String>,
}

/// What the caller asks of a command.
#[derive(Debug, Clone, Default)]
pub struct CommandRequest {
    /// Shell command line.
    pub command: String,
    /// Working directory relative to the workspace.
    pub cwd: String,
    /// Timeout; zero means the default.
    pub timeout: Duration,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Characters kept of stdout; zero means the default.
    pub stdout_cap: u64,
    /// Characters kept of stderr; zero means the default.
    pub stderr_cap: u64,
}

/// A snapshot of a session for replies.
#[derive(Debug, Clone)]
pub struct Info {
    /// Opaque id.
    pub id: String,
    /// Host path of the workspace.
    pub workspace_path: PathBuf,
    /// The service created the workspace and removes it on close.
    pub owns_workspace: bool,
    /// Idle timeout.
    pub ttl: Duration,
    /// Timeout of its commands that give none.
    pub default_timeout: Duration,
    /// Creation time.
    pub created: SystemTime,
    /// Time of the last call.
    pub last_used: SystemTime,
    /// Image of the container.
    pub image: String,
    /// The environment the image was built as, if any.
    pub environment: Option<String>,
    /// The running container, if one is up.
    pub container_id: Option<String>,
    /// Container limits.
    pub limits: sandbox::Limits,
    /// Why commands cannot run now, if they cannot.
    pub sandbox_status: Option<String>,
    /// The policy rules in force.
    pub rules: Rules,
    /// What the caller must know about the session, in plain words.
    pub notes: Vec<String>,
    /// The session's credential: only in the reply that created it.
    pub session_token: Option<String>,
    /// The warm pool served it (only in the reply that created it).
    pub pooled: bool,
    /// Created unattended.
    pub unattended: bool,
    /// The plan approved last.
    pub plan: Option<super::approvals::ApprovedPlan>,
}

/// Who is calling, as the server authenticated them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Caller {
    /// The operator (the service's token or its build token, or a transport
    /// only the operator can reach): every session and every call.
    Admin,
    /// The holder of session `0`'s token: calls on that session alone.
    Session(String),
    /// The holder of the operator's approver token: lists and decides
    /// what waits for a person, and nothing else.
    Approver,
}

impl Caller {
    /// Whether the caller may act on session `id`.
    pub fn may_use(&self, id: &str) -> bool {
        match self {
            Caller::Admin => true,
            Caller::Session(own) => own == id,
            Caller::Approver => false,
        }
    }

    /// Whether the caller may list and decide approvals.
    pub fn may_approve(&self) -> bool {
        matches!(self, Caller::Admin | Caller::Approver)
    }
}

/// What resetting a session's sandbox did.
#[derive(Debug, Clone)]
pub struct Reset {
    /// The session's id (unchanged).
    pub id: String,
    /// The fresh container.
    pub container_id: String,
    /// One-line summary.
    pub message: String,
}

/// What closing a session did.
#[derive(Debug, Clone)]
pub struct Closed {
    /// The closed session's id.
    pub id: String,
    /// The workspace belonged to the session and is being removed (right
    /// after the answer).
    pub workspace_removed: bool,
    /// The session's journal, as it stood at the end.
    pub report: Report,
}

/// Environment names must be non-empty and free of `=` and NUL.
pub(super) fn check_env(field: &'static str, env: &BTreeMap<String, String>) -> Result<(), Error> {
    for (k, v) in env {
        if k.is_empty() || k.contains('=') || k.contains('\0') || v.contains('\0') {
            return Err(Error::InvalidArgument {
                field,
                why: format!(
                    "{k:?} is not a valid variable (names are non-empty, without '=' or NUL)"
                ),
            });
        }
    }
    Ok(())
}

/// What the caller asks of a long-running process.
#[derive(Debug, Clone, Default)]
pub struct ProcessRequest {
    /// Shell command line.
    pub command: String,
    /// Working directory relative to the workspace.
    pub cwd: String,
    /// Extra environment.
    pub env: BTreeMap<String, String>,
    /// Open a pipe to its input.
    pub stdin: bool,
    /// Run it on a terminal of (rows, columns); 0 means the default.
    pub pty: Option<(u32, u32)>,
    /// Answer once this holds.
    pub ready: Option<ReadyOn>,
    /// How long to wait for it; zero means the default.
    pub ready_timeout: Duration,
}

/// When a process is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadyOn {
    /// This TCP port listens in the container.
    Port(u32),
    /// A line of its output matches this regular expression.
    Output(String),
}

/// What came of waiting for a process to be ready.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadyState {
    /// No readiness was asked for.
    NotAsked,
    /// It is ready.
    Ready,
    /// It ended first.
    Exited,
    /// The time limit passed first; it runs on.
    TimedOut,
}

/// A process just started, and how its readiness went.
#[derive(Debug, Clone)]
pub struct StartedProcess {
    /// The process now.
    pub info: super::process_table::ProcessInfo,
    /// What came of the wait.
    pub ready_state: ReadyState,
    /// From the start to ready.
    pub ready_ms: u64,
    /// The last characters of its stdout so far.
    pub stdout_tail: String,
    /// The last characters of its stderr so far.
    pub stderr_tail: String,
}

/// One message of a ReadProcessOutput.
#[derive(Debug, Clone)]
pub enum OutputPiece {
    /// Kept bytes of one stream.
    Chunk {
        /// Of stderr (else stdout).
        stderr: bool,
        /// The bytes and where they are.
        read: super::process_table::Read,
    },
    /// The last message: where to read on from, and the process now.
    End {
        /// Offset to continue stdout from.
        stdout_offset: u64,
        /// Offset to continue stderr from.
        stderr_offset: u64,
        /// The process.
        info: super::process_table::ProcessInfo,
    },
}
