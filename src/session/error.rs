//! Why a session call, or the registry itself, fails: the session layer's
//! own errors. What a caller is told about each lives in [`super::failure`].

use std::io;
use std::path::PathBuf;

use crate::policy::guard::Refusal;
use crate::policy::{Denial, InvalidRules};

/// Why a session call failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No open session has this id.
    #[error("session {id:?} does not exist")]
    NotFound {
        /// The id as given.
        id: String,
    },
    /// A session's token was used for a call beyond its session, or the
    /// approver token for anything but approvals.
    #[error("{token} cannot {what}")]
    NotPermitted {
        /// Which kind of token.
        token: Token,
        /// What the call would have done.
        what: &'static str,
    },
    /// Nobody can approve the call now, or too many calls wait already.
    #[error("nobody can approve now: {0:?}")]
    ApprovalUnavailable(super::approvals::Unavailable),
    /// A plan lacks what makes it checkable.
    #[error("the plan is not checkable: {}", .problems.join("; "))]
    InvalidPlan {
        /// Everything it lacks, in words.
        problems: Vec<String>,
    },
    /// Decide named nothing that waits.
    #[error("approval {id:?} is not pending")]
    ApprovalNotFound {
        /// The id given.
        id: String,
    },
    /// The caller named a directory outside every allowed root.
    #[error("{path} is not under an allowed workspace root")]
    WorkspaceNotAllowed {
        /// The path as given.
        path: String,
        /// The roots the operator allows.
        allowed: Vec<PathBuf>,
    },
    /// The caller named a directory that holds, or lies in, the service's
    /// own state.
    #[error("{path} overlaps the service's state directory")]
    OverlapsState {
        /// The path as given.
        path: String,
    },
    /// The caller named a directory that cannot be opened.
    #[error("workspace {path} cannot be opened: {source}")]
    OpenWorkspace {
        /// The path as given.
        path: String,
        /// Why.
        source: io::Error,
    },
    /// The service holds its ceiling of sessions.
    #[error("the service already holds {limit} sessions")]
    TooMany {
        /// The ceiling.
        limit: usize,
    },
    /// A fresh workspace directory could not be made.
    #[error("cannot create a workspace directory: {0}")]
    CreateWorkspace(io::Error),
    /// A requested limit is above the operator's ceiling.
    #[error("{what} {asked} is above the ceiling {max}")]
    LimitExceeded {
        /// Which limit.
        what: &'static str,
        /// The requested value.
        asked: u64,
        /// The ceiling.
        max: u64,
    },
    /// The slip guard refused the command.
    #[error("command refused: {}", .0.reason)]
    CommandRefused(Refusal),
    /// Session policy refuses the call.
    #[error("refused by policy: {0:?}")]
    Denied(Denial),
    /// The requested policy does not compile.
    #[error(transparent)]
    InvalidPolicy(#[from] InvalidRules),
    /// The caller gave up before the session was opened.
    #[error("the caller went away before the session was opened")]
    CallerGone,
    /// The engine did not start the session's container in time.
    #[error("the session's container could not be started: {0}")]
    NotStarted(crate::sandbox::Error),
    /// The session's record cannot be kept in the state directory.
    #[error("cannot record the session: {0}")]
    Record(io::Error),
    /// The journal file cannot be opened.
    #[error("cannot open the journal: {0}")]
    Journal(io::Error),
    /// The image is not one the operator allows.
    #[error("image {image} is not allowed")]
    ImageNotAllowed {
        /// The image asked for.
        image: String,
        /// The images the operator allows.
        allowed: Vec<String>,
    },
    /// The workspace volume cannot be made or pinned.
    #[error(transparent)]
    Volume(#[from] crate::volume::Error),
    /// A request field is malformed.
    #[error("invalid {field}: {why}")]
    InvalidArgument {
        /// The field.
        field: &'static str,
        /// What is wrong.
        why: String,
    },
    /// Commands or processes run in the session, and the call may not
    /// stop them.
    #[error("{running} commands are running")]
    CommandRunning {
        /// How many.
        running: usize,
    },
    /// No process of the session has this id.
    #[error("process {id:?} does not exist")]
    ProcessNotFound {
        /// The id as given.
        id: String,
    },
    /// The session runs its ceiling of processes.
    #[error("{max} processes are running")]
    TooManyProcesses {
        /// The ceiling.
        max: usize,
        /// The running ones, "p3 `command`".
        running: Vec<String>,
    },
    /// The session (or the service) has its ceiling of output readers.
    #[error("{max} readers of process output are open in this {of}")]
    TooManyReaders {
        /// The ceiling.
        max: usize,
        /// "session" or "service".
        of: &'static str,
    },
    /// The session's earlier replies are not read, and its budget of
    /// unread replies stayed spent.
    #[error("{budget} bytes of replies are not read yet")]
    RepliesUnread {
        /// The budget.
        budget: usize,
        /// How long the reply waited.
        secs: u64,
    },
    /// The reader did not come back for output it was given.
    #[error("the reader did not read for {secs} s; its place was taken")]
    ReaderStalled {
        /// How long it did not read.
        secs: u64,
    },
    /// The process ended: it takes no input, resize or signal.
    #[error("process {id} ended: {how}")]
    ProcessEnded {
        /// Its id.
        id: String,
        /// How it ended.
        how: String,
    },
    /// The process's input is closed, or was never opened.
    #[error("the input of process {id} is closed")]
    ProcessInputClosed {
        /// Its id.
        id: String,
        /// It was started without `stdin` or `pty`.
        never_opened: bool,
    },
    /// The process did not take its input in time, or could not.
    #[error("process {id} did not take its input: {why}")]
    ProcessNotReading {
        /// Its id.
        id: String,
        /// Bytes it took.
        written: u64,
        /// Why.
        why: String,
    },
    /// ResizeProcess on a process with no terminal.
    #[error("process {id} has no terminal")]
    NoTerminal {
        /// Its id.
        id: String,
    },
    /// Processes need the sandbox's supervisor, which is not there.
    #[error("processes need the sandbox's supervisor: {0}")]
    ProcessesUnavailable(String),
}

/// A token that admits less than the operator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Token {
    /// A session's own token.
    Session,
    /// The operator's approver token.
    Approver,
}

impl std::fmt::Display for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Token::Session => "a session token",
            Token::Approver => "the approver token",
        })
    }
}

/// Why the registry cannot start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The state directory or its volumes cannot be used.
    #[error(transparent)]
    Volumes(#[from] crate::volume::Error),
    /// The journal of builds cannot be opened.
    #[error("cannot open the journal of builds: {0}")]
    Journal(io::Error),
    /// Another live instance of the service holds the state directory.
    #[error(
        "another sandboxd instance is running on the state directory {path}: stop it, or give \
         this one a --state-dir of its own"
    )]
    InUse {
        /// The state directory.
        path: PathBuf,
    },
    /// The state directory's records or marks cannot be read or written.
    #[error("the state directory {path}: {source}")]
    State {
        /// What was being read or written.
        path: PathBuf,
        /// Why.
        source: io::Error,
    },
    /// An allowed root does not exist.
    #[error("allowed root {root}: {source}")]
    AllowedRoot {
        /// The root as configured.
        root: PathBuf,
        /// Why it cannot be resolved.
        source: io::Error,
    },
}
