//! What a caller is told when a call fails: the roll-up of every domain
//! error ([`Error`]) and the one exhaustive table ([`describe`]) giving each
//! a status code, a stable [`reason`] and a message written for a model:
//! what happened, that nothing was changed, and what to do next.
//!
//! The table lives in the domain, at the top of the session layer, because
//! the session journals every refusal with the very words the caller gets:
//! the session needs the table, and the table needs every error below it,
//! the session's own included. `crate::error` only puts what [`describe`]
//! returns on the wire. The status codes are `tonic::Code`, used as the
//! vocabulary of failure classes; nothing else of the wire is used here.

use tonic::Code;

use super::error as session;
use crate::workspace::archive;

mod edit;
mod environment;
mod history;
mod patch;
mod policy;
mod process;
mod sandbox;
mod scan;
mod sessions;
mod transfer;
mod volume;
mod workspace;

use edit::edit_status;
use environment::environment_status;
use history::history_status;
use patch::{hunk_status, parse_status};
use policy::{
    approval_not_found_status, denial_status, invalid_plan_status, not_permitted_status,
    unavailable_status,
};
use sandbox::sandbox_status;
use scan::scan_status;
use sessions::session_status;
use transfer::{download_status, upload_status};
use volume::volume_status;
use workspace::workspace_status;

/// Any error a handler can return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the file tools.
    #[error(transparent)]
    Workspace(#[from] crate::workspace::Error),
    /// From the session registry.
    #[error(transparent)]
    Session(#[from] session::Error),
    /// From the container engine.
    #[error(transparent)]
    Sandbox(#[from] crate::sandbox::Error),
    /// From building, finding or deleting an environment.
    #[error(transparent)]
    Environment(#[from] crate::environment::Error),
    /// From checkpoints and changes.
    #[error(transparent)]
    History(#[from] crate::workspace::history::Error),
    /// From an upload.
    #[error(transparent)]
    Upload(#[from] archive::Error),
    /// From a download.
    #[error(transparent)]
    Download(#[from] archive::DownloadError),
    /// The call carried no valid bearer token.
    #[error("missing or wrong bearer token")]
    Unauthenticated,
    /// The caller holds its bound of calls open at once.
    #[error("{max} calls are open on this {whose}")]
    TooManyStreams {
        /// The bound.
        max: usize,
        /// Whose bound it is.
        whose: &'static str,
    },
    /// The transport refused the call before any handler saw it (a request
    /// that does not decode, a message past the size limit, an unknown
    /// method).
    #[error("{message}")]
    Transport {
        /// The code the transport chose.
        code: Code,
        /// Its message.
        message: String,
    },
}

/// Stable machine reasons, as sent in `ErrorInfo.reason`.
pub mod reason {
    #![allow(missing_docs)]
    pub const INVALID_PATH: &str = "INVALID_PATH";
    pub const PATH_OUTSIDE_WORKSPACE: &str = "PATH_OUTSIDE_WORKSPACE";
    pub const FILE_NOT_FOUND: &str = "FILE_NOT_FOUND";
    pub const NOT_A_FILE: &str = "NOT_A_FILE";
    pub const NOT_A_DIRECTORY: &str = "NOT_A_DIRECTORY";
    pub const FILE_EXISTS: &str = "FILE_EXISTS";
    pub const FILE_TOO_LARGE: &str = "FILE_TOO_LARGE";
    pub const NOT_TEXT: &str = "NOT_TEXT";
    pub const STALE_FILE: &str = "STALE_FILE";
    pub const LINE_OUT_OF_RANGE: &str = "LINE_OUT_OF_RANGE";
    pub const INVALID_PATTERN: &str = "INVALID_PATTERN";
    pub const NO_EDITS: &str = "NO_EDITS";
    pub const EMPTY_OLD_STRING: &str = "EMPTY_OLD_STRING";
    pub const NO_CHANGE: &str = "NO_CHANGE";
    pub const OLD_STRING_NOT_FOUND: &str = "OLD_STRING_NOT_FOUND";
    pub const OLD_STRING_AMBIGUOUS: &str = "OLD_STRING_AMBIGUOUS";
    pub const EDITS_OVERLAP: &str = "EDITS_OVERLAP";
    pub const DUPLICATE_OLD_STRING: &str = "DUPLICATE_OLD_STRING";
    pub const IO_ERROR: &str = "IO_ERROR";
    pub const SESSION_NOT_FOUND: &str = "SESSION_NOT_FOUND";
    pub const INVALID_WORKSPACE: &str = "INVALID_WORKSPACE";
    pub const TOO_MANY_SESSIONS: &str = "TOO_MANY_SESSIONS";
    pub const LIMIT_EXCEEDED: &str = "LIMIT_EXCEEDED";
    pub const COMMAND_REFUSED: &str = "COMMAND_REFUSED";
    pub const INVALID_ARGUMENT: &str = "INVALID_ARGUMENT";
    pub const SANDBOX_UNAVAILABLE: &str = "SANDBOX_UNAVAILABLE";
    pub const IMAGE_NOT_FOUND: &str = "IMAGE_NOT_FOUND";
    pub const IMAGE_NOT_ALLOWED: &str = "IMAGE_NOT_ALLOWED";
    pub const ENVIRONMENT_NOT_FOUND: &str = "ENVIRONMENT_NOT_FOUND";
    pub const ENVIRONMENT_IN_USE: &str = "ENVIRONMENT_IN_USE";
    pub const BUILD_FAILED: &str = "BUILD_FAILED";
    pub const BUILD_TIMED_OUT: &str = "BUILD_TIMED_OUT";
    pub const INVALID_RECIPE: &str = "INVALID_RECIPE";
    pub const BUILD_CONTEXT_TOO_LARGE: &str = "BUILD_CONTEXT_TOO_LARGE";
    pub const WORKSPACE_GONE: &str = "WORKSPACE_GONE";
    pub const CHECKPOINT_NOT_FOUND: &str = "CHECKPOINT_NOT_FOUND";
    pub const TOO_MANY_CHECKPOINTS: &str = "TOO_MANY_CHECKPOINTS";
    pub const CHECKPOINT_STORE_FULL: &str = "CHECKPOINT_STORE_FULL";
    pub const TREE_TOO_DEEP: &str = "TREE_TOO_DEEP";
    pub const TREE_TOO_LARGE: &str = "TREE_TOO_LARGE";
    pub const SCAN_LIMIT_REACHED: &str = "SCAN_LIMIT_REACHED";
    pub const CHECKPOINT_MEMORY_FULL: &str = "CHECKPOINT_MEMORY_FULL";
    pub const CANCELLED: &str = "CANCELLED";
    pub const NO_STARTING_POINT: &str = "NO_STARTING_POINT";
    pub const RESTORE_FAILED: &str = "RESTORE_FAILED";
    pub const COMMAND_RUNNING: &str = "COMMAND_RUNNING";
    pub const ARCHIVE_ENTRY_UNSAFE: &str = "ARCHIVE_ENTRY_UNSAFE";
    pub const ARCHIVE_ENTRY_INVALID: &str = "ARCHIVE_ENTRY_INVALID";
    pub const ARCHIVE_TOO_LARGE: &str = "ARCHIVE_TOO_LARGE";
    pub const TRANSFER_TOO_SLOW: &str = "TRANSFER_TOO_SLOW";
    pub const ARCHIVE_HEADER_TOO_LARGE: &str = "ARCHIVE_HEADER_TOO_LARGE";
    pub const ARCHIVE_BOMB: &str = "ARCHIVE_BOMB";
    pub const ARCHIVE_MALFORMED: &str = "ARCHIVE_MALFORMED";
    pub const ARCHIVE_CONFLICT: &str = "ARCHIVE_CONFLICT";
    pub const DOWNLOAD_TOO_LARGE: &str = "DOWNLOAD_TOO_LARGE";
    pub const PATCH_MALFORMED: &str = "PATCH_MALFORMED";
    pub const PATCH_UNSUPPORTED: &str = "PATCH_UNSUPPORTED";
    pub const PATCH_CONTEXT_MISMATCH: &str = "PATCH_CONTEXT_MISMATCH";
    pub const PATCH_CONTEXT_AMBIGUOUS: &str = "PATCH_CONTEXT_AMBIGUOUS";
    pub const PATCH_SEARCH_BUDGET: &str = "PATCH_SEARCH_BUDGET";
    pub const UNAUTHENTICATED: &str = "UNAUTHENTICATED";
    pub const NOT_PERMITTED: &str = "NOT_PERMITTED";
    pub const POLICY_DENIED: &str = "POLICY_DENIED";
    pub const INVALID_POLICY: &str = "INVALID_POLICY";
    pub const MALFORMED_REQUEST: &str = "MALFORMED_REQUEST";
    pub const MESSAGE_TOO_LARGE: &str = "MESSAGE_TOO_LARGE";
    pub const UNIMPLEMENTED: &str = "UNIMPLEMENTED";
    pub const TRANSPORT: &str = "TRANSPORT";
    pub const APPROVAL_UNAVAILABLE: &str = "APPROVAL_UNAVAILABLE";
    pub const INVALID_PLAN: &str = "INVALID_PLAN";
    pub const APPROVAL_NOT_FOUND: &str = "APPROVAL_NOT_FOUND";
    pub const PROCESS_NOT_FOUND: &str = "PROCESS_NOT_FOUND";
    pub const TOO_MANY_PROCESSES: &str = "TOO_MANY_PROCESSES";
    pub const TOO_MANY_READERS: &str = "TOO_MANY_READERS";
    pub const TOO_MANY_STREAMS: &str = "TOO_MANY_STREAMS";
    pub const REPLIES_UNREAD: &str = "REPLIES_UNREAD";
    pub const READER_STALLED: &str = "READER_STALLED";
    pub const PROCESS_ENDED: &str = "PROCESS_ENDED";
    pub const PROCESS_INPUT_CLOSED: &str = "PROCESS_INPUT_CLOSED";
    pub const PROCESS_NOT_READING: &str = "PROCESS_NOT_READING";
    pub const NOT_A_TERMINAL: &str = "NOT_A_TERMINAL";
    pub const PROCESSES_UNAVAILABLE: &str = "PROCESSES_UNAVAILABLE";
}

/// An error as the caller sees it: status code, stable reason, message for
/// a model and ErrorInfo metadata. The journal records the same words the
/// caller got.
#[derive(Debug, Clone)]
pub struct Described {
    /// gRPC status code.
    pub code: Code,
    /// Stable machine reason (`ErrorInfo.reason`).
    pub reason: &'static str,
    /// Message written for a model.
    pub message: String,
    /// `ErrorInfo.metadata`.
    pub meta: Vec<(&'static str, String)>,
}

pub(super) fn status(
    code: Code,
    reason: &'static str,
    message: String,
    meta: &[(&'static str, String)],
) -> Described {
    // Paths, patterns and commands come from the caller and can be huge; a
    // status echoing them whole would not fit in a response header.
    let mut message = message;
    let meta = meta
        .iter()
        .map(|(k, v)| {
            let short = shorten(v);
            if short.len() < v.len() {
                message = message.replace(v.as_str(), &short);
            }
            (*k, short)
        })
        .collect();
    if message.len() > MAX_MESSAGE_BYTES {
        // Keep the start (what happened) and the end (what to do next).
        let mut head = MAX_MESSAGE_BYTES / 2;
        while !message.is_char_boundary(head) {
            head -= 1;
        }
        let mut tail = message.len() - MAX_MESSAGE_BYTES / 4;
        while !message.is_char_boundary(tail) {
            tail += 1;
        }
        message = format!("{} … {}", &message[..head], &message[tail..]);
    }
    Described {
        code,
        reason,
        message,
        meta,
    }
}

/// Longest message a status carries, in bytes.
const MAX_MESSAGE_BYTES: usize = 2048;
/// Characters of a caller's value kept at each end when it is echoed.
const ECHO_KEEP_CHARS: usize = 80;

/// A caller's value cut to its two ends when long.
fn shorten(v: &str) -> String {
    let chars = v.chars().count();
    if chars <= 3 * ECHO_KEEP_CHARS {
        return v.to_string();
    }
    let head: String = v.chars().take(ECHO_KEEP_CHARS).collect();
    let tail: String = v.chars().skip(chars - ECHO_KEEP_CHARS).collect();
    format!("{head}…({chars} characters)…{tail}")
}

const UNCHANGED: &str = "Nothing was changed.";

/// The one mapping from a domain error to what the caller is told.
pub fn describe(err: &Error) -> Described {
    match err {
        Error::Workspace(e) => workspace_status(e),
        Error::Session(e) => session_status(e),
        Error::Sandbox(e) => sandbox_status(e),
        Error::Environment(e) => environment_status(e),
        Error::History(e) => history_status(e),
        Error::Upload(e) => upload_status(e),
        Error::Download(e) => download_status(e),
        Error::Unauthenticated => status(
            Code::Unauthenticated,
            reason::UNAUTHENTICATED,
            "The call carried no valid bearer token. Nothing was run or changed. Send the \
                 `authorization: Bearer <token>` header with the token the operator configured."
                .to_string(),
            &[],
        ),
        Error::TooManyStreams { max, whose } => status(
            Code::ResourceExhausted,
            reason::TOO_MANY_STREAMS,
            format!(
                "This {whose} already has {max} calls open at once (streams not read to their end \
                 hold their place). Nothing was run or changed. Read or cancel the calls you \
                 have open, then retry."
            ),
            &[("max", max.to_string())],
        ),
        Error::Transport { code, message } => transport_status(*code, message),
    }
}

fn transport_status(code: Code, message: &str) -> Described {
    match code {
        Code::Internal if message.starts_with("failed to decode") => status(
            Code::InvalidArgument,
            reason::MALFORMED_REQUEST,
            format!(
                "The request could not be decoded ({message}). Every string field must be valid UTF-8 and \
                 the message must match sandboxd.v1. Nothing was run or changed. Fix the request and retry."
            ),
            &[],
        ),
        Code::OutOfRange if message.contains("too large") => status(
            Code::ResourceExhausted,
            reason::MESSAGE_TOO_LARGE,
            format!(
                "The request is larger than the service accepts ({message}). Nothing was run or changed. \
                 Send less at once; files over the file tools' size limit are changed with a command."
            ),
            &[],
        ),
        Code::Unimplemented => status(
            code,
            reason::UNIMPLEMENTED,
            format!(
                "{message}. The service does not offer this method; check the sandboxd.v1 contract."
            ),
            &[],
        ),
        code => status(code, reason::TRANSPORT, message.to_string(), &[]),
    }
}
