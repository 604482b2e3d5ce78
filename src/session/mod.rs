//! Sessions: the top of the domain. A session is a workspace, the container
//! that runs its commands, the policy bounding both, and the journal of
//! every call; the registry opens, finds, reaps and closes them.
//!
//! One job per file; each uses only files listed after it (the crate's
//! `layers` test checks this):
//! - `registry`: the open sessions, their idle timeout, and shutdown;
//! - `plans`: a session's plan, submitted, approved and put in force;
//! - `reports`: a session's journal reconciled against its plan, and what
//!   changed outside it;
//! - `pool`: warm sessions-to-be, kept ready (for the default image and
//!   for each environment the operator names);
//! - `builds`: environments as callers reach them: who may build, every
//!   build journaled;
//! - `prepare`: a session-to-be (workspace opened, sandbox specified);
//! - `records`: what each open session is, kept in the state directory so
//!   that a restarted service brings it back;
//! - `archives`: tar archives in and out of a session's workspace;
//! - `checkpoints`: a session's checkpoints and changes;
//! - `processes`: a session's long-running processes, started, followed,
//!   given input, signalled and stopped;
//! - `command`: running a command in a session's container;
//! - `gate`: a call an `ask` rule holds, waiting for a person;
//! - `tools`: a session and its file tools, each call journaled;
//! - `readers`: how many readers of process output a session and the
//!   service have, and which one stalled;
//! - `replies`: a session's budget of replies its caller has not read;
//! - `failure`: every domain error rolled up, and the one table saying
//!   what a caller is told about each (the journal records the same words);
//! - `messages`: what callers ask and get back;
//! - `process_table`: each process's state and kept output, and the
//!   session's table of them;
//! - `config`: operator settings, and the one rule for a value set under a
//!   ceiling (0 means the default, above the ceiling is refused);
//! - `slots`: each session's fair share of the transfer slots, and the
//!   minimum pace a transfer holding one keeps up;
//! - `error`: why a session call or the registry fails;
//! - `approvals`: what waits for a person, who answers, and the plans
//!   they approved;
//! - `defaults`: the operator's defaults and ceilings, written once.
//!
//! This file only declares them and names what other layers use.

mod approvals;
mod archives;
pub mod build_watch;
mod builds;
mod checkpoints;
mod command;
mod config;
pub mod defaults;
mod error;
pub mod failure;
mod gate;
mod lend;
mod messages;
mod plans;
mod pool;
mod prepare;
mod process_table;
mod processes;
mod readers;
mod records;
mod registry;
mod replies;
mod reports;
mod slots;
mod tools;
pub mod watch;

pub use approvals::{ApprovedPlan, Asked, Decision, Gated, Pending, Rejection, Scope};
pub use archives::{Chunks, DownloadEvent, Upload};
pub use builds::BuildEvents;
pub use checkpoints::Restore;
pub use config::{ApprovalConfig, ArchiveConfig, Config, HistoryConfig, SandboxConfig};
pub use error::{Error, StartError, Token};
pub use messages::{
    Caller, Closed, CommandRequest, EnvironmentInfo, Info, NewEnvironment, NewSession, OutputPiece,
    ProcessRequest, ReadyOn, ReadyState, Reset, StartedProcess,
};
pub use plans::PlanEvent;
pub use process_table::{InputAck, ProcessInfo, ProcessState, Read};
pub use processes::OutputStream;
pub use registry::Registry;
pub use replies::ReplyBytes;
pub use reports::Reconciled;
pub use slots::{MinRate, Shares, TooSlow};
pub use tools::Session;
