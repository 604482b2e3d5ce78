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
use crate::environment;
use crate::sandbox;
use crate::workspace::tree::ScanError;
use crate::workspace::tree::store;
use crate::workspace::{self, EditError, LineEndings, WalkLimit, archive, history};

mod policy;

use policy::{
    approval_not_found_status, denial_status, invalid_plan_status, not_permitted_status,
    unavailable_status,
};

/// Any error a handler can return.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// From the file tools.
    #[error(transparent)]
    Workspace(#[from] workspace::Error),
    /// From the session registry.
    #[error(transparent)]
    Session(#[from] session::Error),
    /// From the container engine.
    #[error(transparent)]
    Sandbox(#[from] sandbox::Error),
    /// From building, finding or deleting an environment.
    #[error(transparent)]
    Environment(#[from] environment::Error),
    /// From checkpoints and changes.
    #[error(transparent)]
    History(#[from] history::Error),
    /// From an upload.
    #[error(transparent)]
    Upload(#[from] archive::Error),
    /// From a download.
    #[error(transparent)]
    Download(#[from] archive::DownloadError),
    /// The call carried no valid bearer token.
    #[error("missing or wrong bearer token")]
    Unauthenticated,
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

fn workspace_status(err: &workspace::Error) -> Described {
    use workspace::Error as W;
    match err {
        W::Patch(e) => parse_status(e),
        W::Hunk { path, error } => hunk_status(path, error),
        W::DeleteIncomplete { path } => status(
            Code::FailedPrecondition,
            reason::PATCH_CONTEXT_MISMATCH,
            format!(
                "{path} holds more than the patch deletes: a deletion must remove every line. {PATCH_UNCHANGED} \
                 Read the file again and make the patch against what it holds now."
            ),
            &[("path", path.clone())],
        ),
        W::InvalidPath { path, why } => status(
            Code::InvalidArgument,
            reason::INVALID_PATH,
            format!(
                "The path {path:?} is not usable: {why}. {UNCHANGED} Use a relative path inside the workspace."
            ),
            &[("path", path.clone())],
        ),
        W::OutsideWorkspace { path } => status(
            Code::PermissionDenied,
            reason::PATH_OUTSIDE_WORKSPACE,
            format!(
                "The path {path:?} resolves outside the workspace (through \"..\", an absolute path or a symbolic link). \
                 {UNCHANGED} Use a path inside the workspace, relative to its root."
            ),
            &[("path", path.clone())],
        ),
        W::NotFound { path } => status(
            Code::NotFound,
            reason::FILE_NOT_FOUND,
            format!(
                "{path} does not exist. {UNCHANGED} Check the path with ListDir or FindFiles; to make a new file use CreateFile."
            ),
            &[("path", path.clone())],
        ),
        W::NotAFile { path } => status(
            Code::FailedPrecondition,
            reason::NOT_A_FILE,
            format!(
                "{path} is a directory or special file, not a regular file. {UNCHANGED} Use ListDir to see what it holds."
            ),
            &[("path", path.clone())],
        ),
        W::NotADirectory { path } => status(
            Code::FailedPrecondition,
            reason::NOT_A_DIRECTORY,
            format!(
                "{path} (or a parent of it) is not a directory. {UNCHANGED} Check the path with ListDir."
            ),
            &[("path", path.clone())],
        ),
        W::Exists { path } => status(
            Code::AlreadyExists,
            reason::FILE_EXISTS,
            format!(
                "{path} already exists. {UNCHANGED} To change it, read it with ReadFile and use EditFile."
            ),
            &[("path", path.clone())],
        ),
        W::TooLarge { path, size, limit } => status(
            Code::FailedPrecondition,
            reason::FILE_TOO_LARGE,
            format!(
                "{path} is {size} bytes, over the limit of {limit} bytes. {UNCHANGED} \
                 Work on it with a command instead (for example sed or a script)."
            ),
            &[
                ("path", path.clone()),
                ("size", size.to_string()),
                ("limit", limit.to_string()),
            ],
        ),
        W::NotText { path } => status(
            Code::FailedPrecondition,
            reason::NOT_TEXT,
            format!(
                "{path} is not UTF-8 text (it is binary or uses another encoding). {UNCHANGED} \
                 Inspect or change it with a command instead."
            ),
            &[("path", path.clone())],
        ),
        W::Stale {
            path,
            expected,
            actual,
        } => status(
            Code::Aborted,
            reason::STALE_FILE,
            format!(
                "{path} changed since you read it (sha256 is {actual}, expected {expected}). {UNCHANGED} \
                 Read the file again and redo the edit against its current text."
            ),
            &[
                ("path", path.clone()),
                ("expected_sha256", expected.clone()),
                ("actual_sha256", actual.clone()),
            ],
        ),
        W::LineOutOfRange {
            path,
            offset,
            total,
        } => status(
            Code::OutOfRange,
            reason::LINE_OUT_OF_RANGE,
            format!(
                "Line {offset} is past the end of {path}, which has {total} lines. Read from an offset between 1 and {total}."
            ),
            &[
                ("path", path.clone()),
                ("offset", offset.to_string()),
                ("total_lines", total.to_string()),
            ],
        ),
        W::InvalidPattern { pattern, why } => status(
            Code::InvalidArgument,
            reason::INVALID_PATTERN,
            format!("The pattern {pattern:?} does not parse: {why}. Fix the pattern and retry."),
            &[("pattern", pattern.clone())],
        ),
        W::WalkLimit {
            tool,
            path,
            what,
            limit,
        } => walk_limit_status(tool, path, *what, *limit),
        W::Edit { path, source } => edit_status(path, source),
        W::Denied(denial) => denial_status(denial),
        W::Io { op, path, source } => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "Could not {op} {path}: {source}. The operation did not complete; the file is as it was before the call."
            ),
            &[("path", path.clone()), ("op", op.to_string())],
        ),
    }
}

const PATCH_UNCHANGED: &str = "Nothing was changed: no file of the patch was written.";

fn parse_status(err: &workspace::patch::ParseError) -> Described {
    use workspace::patch::ParseError;
    const NONE: &str = PATCH_UNCHANGED;
    match err {
        ParseError::Malformed { line, why } => status(
            Code::InvalidArgument,
            reason::PATCH_MALFORMED,
            format!(
                "The patch cannot be read at its line {line}: {why}. {NONE} Send a unified diff as \
                 `git diff` writes it: `--- a/PATH`, `+++ b/PATH`, then `@@ -l,s +l,s @@` hunks whose \
                 line counts match their bodies."
            ),
            &[("line", line.to_string())],
        ),
        ParseError::Unsupported { path, what } => status(
            Code::InvalidArgument,
            reason::PATCH_UNSUPPORTED,
            format!(
                "{path}: {what} cannot be applied. {NONE} Change binary files with a command or \
                 UploadArchive, and copies as a created file."
            ),
            &[("path", path.clone())],
        ),
    }
}

fn hunk_status(path: &str, error: &workspace::patch::HunkError) -> Described {
    use workspace::patch::Mismatch;
    const NONE: &str = PATCH_UNCHANGED;
    let path = path.to_string();
    let expected = error.expected.join("\n");
    match &error.why {
        Mismatch::NotFound {
            at,
            found,
            past_end,
        } => {
            let there = if *past_end && found.is_empty() {
                format!("the file ends before line {at}")
            } else {
                format!(
                    "lines {at}-{} hold instead:\n{}{}",
                    at + found.len().saturating_sub(1),
                    found.join("\n"),
                    if *past_end {
                        "\n(and then the file ends)"
                    } else {
                        ""
                    }
                )
            };
            status(
                Code::FailedPrecondition,
                reason::PATCH_CONTEXT_MISMATCH,
                format!(
                    "Hunk {} of {path} ({}) does not match the file: its context and removed \
                             lines were not found at line {at} nor anywhere after the previous hunk. \
                             The hunk expects:\n{expected}\nbut {there}\n{NONE} Read the file again and \
                             make the patch against what it holds now.",
                    error.hunk, error.header
                ),
                &[("path", path.clone()), ("hunk", error.hunk.to_string())],
            )
        }
        Mismatch::SearchBudget { limit } => status(
            Code::ResourceExhausted,
            reason::PATCH_SEARCH_BUDGET,
            format!(
                "Hunk {} of {path} ({}) is not where it says, and looking for the patch's hunks \
                 away from where they say passed the search budget of one patch ({limit} line \
                 comparisons). {NONE} Make the patch against the files as they are now, so that \
                 its line numbers are right, or send it in smaller parts.",
                error.hunk, error.header
            ),
            &[
                ("path", path.clone()),
                ("hunk", error.hunk.to_string()),
                ("limit", limit.to_string()),
            ],
        ),
        Mismatch::Ambiguous { at } => {
            let lines: Vec<String> = at.iter().map(|l| l.to_string()).collect();
            status(
                Code::FailedPrecondition,
                reason::PATCH_CONTEXT_AMBIGUOUS,
                format!(
                    "Hunk {} of {path} ({}) does not match where it says, and its lines occur \
                             at {} places (lines {}). {NONE} Give the hunk more context lines, or the \
                             right line numbers, so that it names one place.",
                    error.hunk,
                    error.header,
                    at.len(),
                    lines.join(", ")
                ),
                &[("path", path.clone()), ("hunk", error.hunk.to_string())],
            )
        }
    }
}

fn walk_limit_status(tool: &str, path: &str, what: WalkLimit, limit: u64) -> Described {
    let (name, happened) = match what {
        WalkLimit::IgnoreFileBytes => (
            "ignore_file_bytes",
            format!(
                "{path} is larger than {limit} bytes, the most a walk reads from one ignore file"
            ),
        ),
        WalkLimit::IgnoreFileRules => (
            "ignore_file_rules",
            format!(
                "{path} holds more than {limit} rules, the most a walk takes from one ignore file"
            ),
        ),
        WalkLimit::IgnoreWalkRules => (
            "ignore_walk_rules",
            format!(
                "the .gitignore files on this walk hold more than {limit} rules in all (the limit was \
                 crossed at {path})"
            ),
        ),
        WalkLimit::IgnoreWalkFiles => (
            "ignore_walk_files",
            format!(
                "this walk met more than {limit} .gitignore files (the limit was crossed at {path})"
            ),
        ),
        WalkLimit::IgnoreNesting => (
            "ignore_nesting",
            format!("more than {limit} nested .gitignore files apply at {path}"),
        ),
        WalkLimit::HeldEntries => (
            "held_entries",
            format!(
                "the directories from the walk's start down to {path} hold more than {limit} entries"
            ),
        ),
    };
    let next = match what {
        WalkLimit::HeldEntries => {
            "Walk a narrower path (set path to a subdirectory), list the large directory with ListDir, \
             or use a command such as find or grep -r."
        }
        _ => {
            "A .gitignore applies to everything beneath its directory, so walk a path outside that \
             directory, shorten or remove the file (with a command), or use a command such as find or \
             grep -r instead."
        }
    };
    status(
        Code::ResourceExhausted,
        reason::LIMIT_EXCEEDED,
        format!("{tool} was refused: {happened}. {UNCHANGED} {next}"),
        &[
            ("path", path.to_string()),
            ("field", name.to_string()),
            ("max", limit.to_string()),
        ],
    )
}

fn edit_status(path: &str, err: &EditError) -> Described {
    match err {
        EditError::NoEdits => status(
            Code::InvalidArgument,
            reason::NO_EDITS,
            format!(
                "No edits were given for {path}. {UNCHANGED} Pass at least one edit with old_string and new_string."
            ),
            &[("path", path.to_string())],
        ),
        EditError::EmptyOldString { which } => status(
            Code::InvalidArgument,
            reason::EMPTY_OLD_STRING,
            format!(
                "old_string{which} is empty. {UNCHANGED} Copy the exact text to replace from the file; \
                 to make a new file use CreateFile."
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", which.index.to_string()),
            ],
        ),
        EditError::NoChange { which } => status(
            Code::InvalidArgument,
            reason::NO_CHANGE,
            format!(
                "old_string and new_string{which} are identical, so the edit would change nothing. {UNCHANGED}"
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", which.index.to_string()),
            ],
        ),
        EditError::NotFound { which, endings } => {
            let hint = match endings {
                LineEndings::Mixed => {
                    " The file mixes CRLF and LF line endings, so old_string must match its line endings byte for byte."
                }
                LineEndings::Lf | LineEndings::Crlf => "",
            };
            status(
                Code::FailedPrecondition,
                reason::OLD_STRING_NOT_FOUND,
                format!(
                    "old_string{which} cannot be found in {path}. {UNCHANGED} The file may have changed since you \
                     read it, or old_string differs in whitespace or indentation.{hint} Read the file again and copy \
                     old_string exactly."
                ),
                &[
                    ("path", path.to_string()),
                    ("edit_index", which.index.to_string()),
                ],
            )
        }
        EditError::Ambiguous {
            which,
            count,
            lines,
        } => {
            let listed = lines
                .iter()
                .map(|l| l.to_string())
                .collect::<Vec<_>>()
                .join(", ");
            let more = if *count > lines.len() { ", ..." } else { "" };
            status(
                Code::FailedPrecondition,
                reason::OLD_STRING_AMBIGUOUS,
                format!(
                    "old_string{which} occurs {count} times in {path} (lines {listed}{more}). {UNCHANGED} Include more \
                     surrounding lines in old_string so it matches exactly one place, or set replace_all to change \
                     every occurrence."
                ),
                &[
                    ("path", path.to_string()),
                    ("edit_index", which.index.to_string()),
                    ("count", count.to_string()),
                    ("lines", listed.clone()),
                ],
            )
        }
        EditError::Overlap {
            first,
            second,
            line,
        } => status(
            Code::InvalidArgument,
            reason::EDITS_OVERLAP,
            format!(
                "Edits {} and {} overlap at line {line} of {path}. {UNCHANGED} All edits of one call are matched \
                 against the same original text; merge them into one edit or make them touch separate text.",
                first + 1,
                second + 1
            ),
            &[("path", path.to_string()), ("line", line.to_string())],
        ),
        EditError::NotText => workspace_status(&workspace::Error::NotText {
            path: path.to_string(),
        }),
        EditError::TooManyEdits { count, max } => status(
            Code::ResourceExhausted,
            reason::LIMIT_EXCEEDED,
            format!(
                "The call carries {count} edits for {path}, more than the limit of {max} per call. {UNCHANGED} \
                 Split the edits over several calls of at most {max}, or use replace_all for a change repeated \
                 everywhere."
            ),
            &[
                ("path", path.to_string()),
                ("field", "edits".to_string()),
                ("asked", count.to_string()),
                ("max", max.to_string()),
            ],
        ),
        EditError::DuplicateOldString { first, second } => status(
            Code::InvalidArgument,
            reason::DUPLICATE_OLD_STRING,
            format!(
                "Edits {} and {} of the call for {path} have the same old_string; both would change the same \
                 text. {UNCHANGED} Send that old_string once (with replace_all to change every occurrence), or \
                 give each edit enough surrounding lines to match a different place.",
                first + 1,
                second + 1
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", second.to_string()),
                ("first_index", first.to_string()),
            ],
        ),
        EditError::TooManySites { which, max } => status(
            Code::ResourceExhausted,
            reason::LIMIT_EXCEEDED,
            format!(
                "old_string{which} would bring the replacements in {path} past the limit of {max} per call. \
                 {UNCHANGED} Make old_string longer so it matches fewer places, or change a file this large \
                 with a command (for example sed)."
            ),
            &[
                ("path", path.to_string()),
                ("edit_index", which.index.to_string()),
                ("field", "replacements".to_string()),
                ("max", max.to_string()),
            ],
        ),
        EditError::ResultTooLarge { size, limit } => status(
            Code::FailedPrecondition,
            reason::FILE_TOO_LARGE,
            format!(
                "The edits would make {path} {size} bytes, over the limit of {limit} bytes. {UNCHANGED} \
                 Replace less text at once, or change the file with a command instead."
            ),
            &[
                ("path", path.to_string()),
                ("size", size.to_string()),
                ("limit", limit.to_string()),
            ],
        ),
    }
}

fn history_status(err: &history::Error) -> Described {
    use history::Error as H;
    match err {
        H::NotFound { id, deleted } => {
            let what = if *deleted {
                "was deleted"
            } else {
                "is not one of this session's (each session has its own)"
            };
            status(
                Code::NotFound,
                reason::CHECKPOINT_NOT_FOUND,
                format!(
                    "Checkpoint {id:?} {what}. {UNCHANGED} ListCheckpoints shows this session's checkpoints."
                ),
                &[("checkpoint_id", id.clone())],
            )
        }
        H::TooMany { limit } => status(
            Code::ResourceExhausted,
            reason::TOO_MANY_CHECKPOINTS,
            format!(
                "The session keeps {limit} checkpoints already, the most it may. {UNCHANGED} Delete one \
                 it no longer needs (DeleteCheckpoint), then take this one."
            ),
            &[("limit", limit.to_string())],
        ),
        H::TooLarge { bytes, limit } => status(
            Code::ResourceExhausted,
            reason::CHECKPOINT_MEMORY_FULL,
            format!(
                "The session's checkpoints would take {bytes} bytes of the service's memory (their \
                 listings of every path, the session's starting point's included), over the {limit} \
                 a session may. {UNCHANGED} Delete \
                 checkpoints that are no longer needed, or remove files the workspace does not need."
            ),
            &[("limit", limit.to_string())],
        ),
        H::Scan(e) => scan_status(e, "No checkpoint was taken and nothing was changed."),
        H::NoBaseline(why) => status(
            Code::FailedPrecondition,
            reason::NO_STARTING_POINT,
            format!(
                "The workspace as it was when the session began could not be kept ({why}), so the changes \
                 since then cannot be told. {UNCHANGED} Take a checkpoint and ask for the changes since it."
            ),
            &[],
        ),
        H::Restore(e) => status(
            Code::Aborted,
            reason::RESTORE_FAILED,
            match &e.left_in {
                None => format!(
                    "The restore failed ({e}) and every step it had taken was undone: the workspace \
                     is as it was before the call. Free space or fix what the error names, then retry."
                ),
                Some(dir) => format!(
                    "The restore failed ({e}), and something changed the workspace meanwhile, so not \
                     every step could be undone: what could not be put back is in {dir}. Stop what \
                     writes in the workspace (RestoreCheckpoint with stop_commands resets the \
                     sandbox), then restore again."
                ),
            },
            &[("path", e.path.clone())],
        ),
        H::Busy => status(
            Code::FailedPrecondition,
            reason::COMMAND_RUNNING,
            "Writes or commands in the workspace did not end in time for the restore. Nothing was \
             changed. Wait for them, or ask with stop_commands to reset the sandbox first."
                .to_string(),
            &[],
        ),
        H::Io { op, source } => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "Could not {op}: {source}. {UNCHANGED} Retry; if it persists, tell the operator."
            ),
            &[],
        ),
    }
}

fn upload_status(err: &archive::Error) -> Described {
    use archive::{BadName, Ceiling, Error as A, Unsafe};
    const NONE: &str = "Nothing was extracted: the workspace is as it was.";
    match err {
        A::Unsafe { entry, why } => {
            let what = match why {
                Unsafe::Absolute => "has an absolute path".to_string(),
                Unsafe::DotDot => "has a `..` component".to_string(),
                Unsafe::ThroughSymlink(at) => {
                    format!("would be written through the symlink {at}")
                }
                Unsafe::BelowFile(at) => format!("lies below {at}, which is not a directory"),
                Unsafe::HardLinkOutside(to) => {
                    format!("is a hard link to {to}, which is not a file earlier in the archive")
                }
                Unsafe::Special(what) => format!("is {what}"),
            };
            status(
                Code::InvalidArgument,
                reason::ARCHIVE_ENTRY_UNSAFE,
                format!(
                    "The archive entry {entry:?} {what}: it cannot be extracted safely. {NONE} \
                     Rebuild the archive with relative paths of files, directories and symlinks only."
                ),
                &[("entry", entry.clone())],
            )
        }
        A::BadName { entry, why } => {
            let what = match why {
                BadName::Duplicate => "appears twice in the archive".to_string(),
                BadName::NotUtf8 => "is not UTF-8".to_string(),
                BadName::TooLong(max) => {
                    format!("is longer than {max} bytes (or has a component over 255)")
                }
                BadName::Empty => "names nothing".to_string(),
                BadName::TooDeep(max) => format!("has more than {max} levels"),
            };
            status(
                Code::InvalidArgument,
                reason::ARCHIVE_ENTRY_INVALID,
                format!("The archive entry {entry:?} {what}. {NONE} Fix the archive and retry."),
                &[("entry", entry.clone())],
            )
        }
        A::TooLarge { what, limit, entry } => {
            let what = match what {
                Ceiling::Bytes => format!("the archive's files hold more than {limit} bytes"),
                Ceiling::FileBytes => format!("{entry} is larger than {limit} bytes"),
                Ceiling::Entries => format!("the archive has more than {limit} entries"),
            };
            status(
                Code::ResourceExhausted,
                reason::ARCHIVE_TOO_LARGE,
                format!(
                    "The archive is past a ceiling: {what} (at entry {entry:?}). {NONE} Send a \
                     smaller archive (leave out build output and caches), or several."
                ),
                &[("entry", entry.clone()), ("limit", limit.to_string())],
            )
        }
        A::HeaderTooLarge { what, size, limit } => status(
            Code::ResourceExhausted,
            reason::ARCHIVE_HEADER_TOO_LARGE,
            format!(
                "The archive holds a {what} of {size} bytes, past its bound of {limit} bytes; it \
                 was refused before it was read. {NONE} Rebuild the archive with shorter names \
                 and fewer extended attributes."
            ),
            &[("limit", limit.to_string()), ("size", size.to_string())],
        ),
        A::Bomb { ratio } => status(
            Code::ResourceExhausted,
            reason::ARCHIVE_BOMB,
            format!(
                "The archive expands to more than {ratio} times its compressed size, as a \
                 decompression bomb does. {NONE} Send it uncompressed if it is genuine."
            ),
            &[("ratio", ratio.to_string())],
        ),
        A::Malformed(why) => status(
            Code::InvalidArgument,
            reason::ARCHIVE_MALFORMED,
            format!(
                "The stream is not a whole tar archive (plain or gzip): {why}. {NONE} Send the \
                 whole archive, as `tar -c` (or `tar -cz`) writes it."
            ),
            &[],
        ),
        A::Conflict { path, why } => status(
            Code::FailedPrecondition,
            reason::ARCHIVE_CONFLICT,
            format!(
                "{path}: {why}. {NONE} Remove or rename it in the workspace, or extract \
                 elsewhere (destination)."
            ),
            &[("path", path.clone())],
        ),
        A::Destination(dest) => status(
            Code::InvalidArgument,
            reason::INVALID_PATH,
            format!(
                "The destination {dest:?} is not a path inside the workspace. {NONE} Give a \
                 relative directory, or nothing for the root."
            ),
            &[("path", dest.clone())],
        ),
        A::Denied(denial) => denial_status(denial),
        A::Land(e) => status(
            Code::Aborted,
            reason::IO_ERROR,
            match &e.left_in {
                None => format!(
                    "The archive could not be extracted ({e}); every step taken was undone. {NONE} \
                     Free space (the disk quota counts the staged files too) and retry."
                ),
                Some(dir) => format!(
                    "The archive could not be extracted ({e}), and something changed the workspace \
                     meanwhile, so not every step could be undone: what could not be put back is in \
                     {dir}. Stop what writes in the workspace and retry."
                ),
            },
            &[("path", e.path.clone())],
        ),
        A::Read(e) => match super::slots::TooSlow::within(e) {
            Some(slow) => too_slow(slow, "upload", NONE),
            None => status(
                Code::Aborted,
                reason::ARCHIVE_MALFORMED,
                format!("The archive's stream failed: {e}. {NONE} Send it again."),
                &[],
            ),
        },
    }
}

/// A transfer stopped because its caller fell behind the minimum pace.
fn too_slow(slow: &super::slots::TooSlow, what: &str, none: &str) -> Described {
    status(
        Code::ResourceExhausted,
        reason::TRANSFER_TOO_SLOW,
        format!(
            "The {what} was stopped: {slow}. A transfer holds one of the service's few \
             transfer slots, so it must keep up that pace. {none} Retry from a faster link, \
             or send (or read) the stream as fast as it comes."
        ),
        &[
            ("min_bytes_per_sec", slow.rate.bytes_per_sec.to_string()),
            ("grace_seconds", slow.rate.grace.as_secs().to_string()),
        ],
    )
}

fn download_status(err: &archive::DownloadError) -> Described {
    use archive::DownloadError as D;
    match err {
        D::Path(e) => workspace_status(e),
        D::TooLarge { limit } => status(
            Code::ResourceExhausted,
            reason::DOWNLOAD_TOO_LARGE,
            format!(
                "The files to download hold more than {limit} bytes; the stream so far is not a \
                 whole archive. Download a smaller directory, use gitignore to leave out build \
                 output, or ask for a larger max_bytes (up to the ceiling)."
            ),
            &[("limit", limit.to_string())],
        ),
        D::Read { path, source } => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "Could not read {path}: {source}. The stream so far is not a whole archive. Retry."
            ),
            &[("path", path.clone())],
        ),
        D::Write(e) => match super::slots::TooSlow::within(e) {
            Some(slow) => too_slow(
                slow,
                "download",
                "The stream so far is not a whole archive; the workspace is as it was.",
            ),
            None => status(
                Code::Aborted,
                reason::IO_ERROR,
                format!("The archive could not be sent: {e}."),
                &[],
            ),
        },
        D::Walk(e) => status(
            Code::FailedPrecondition,
            reason::IO_ERROR,
            format!(
                "The walk of the workspace stopped: {e}. Download without gitignore, or a smaller directory."
            ),
            &[],
        ),
    }
}

/// A workspace that could not be pictured, and what that means (`outcome`).
fn scan_status(err: &ScanError, outcome: &str) -> Described {
    match err {
        ScanError::TooDeep { path, limit } => status(
            Code::FailedPrecondition,
            reason::TREE_TOO_DEEP,
            format!(
                "The directory {path} lies deeper than {limit} levels. {outcome} Remove the deep tree \
                 (for example `rm -rf` it with RunCommand) and retry."
            ),
            &[("path", path.clone()), ("limit", limit.to_string())],
        ),
        ScanError::PathTooLong { path, limit } => status(
            Code::FailedPrecondition,
            reason::TREE_TOO_DEEP,
            format!(
                "A path in the workspace is longer than {limit} bytes ({path}...). {outcome} Remove \
                 or rename that tree (for example `rm -rf` it with RunCommand) and retry."
            ),
            &[("path", path.clone()), ("limit", limit.to_string())],
        ),
        ScanError::TooMany { limit } => status(
            Code::FailedPrecondition,
            reason::TREE_TOO_LARGE,
            format!(
                "The workspace holds more than {limit} files and directories. {outcome} Remove what \
                 is not needed (build output, caches) and retry."
            ),
            &[("limit", limit.to_string())],
        ),
        ScanError::TooMuchMemory { limit } => status(
            Code::FailedPrecondition,
            reason::TREE_TOO_LARGE,
            format!(
                "The names of the workspace's files and directories take more than {limit} bytes of \
                 the service's memory. {outcome} Remove what is not needed (build output, caches, \
                 trees of long names) and retry."
            ),
            &[
                ("limit", limit.to_string()),
                ("bound", "memory".to_string()),
            ],
        ),
        ScanError::FileTooLarge { path, size, limit } => status(
            Code::FailedPrecondition,
            reason::FILE_TOO_LARGE,
            format!(
                "{path} holds {size} bytes (its apparent size), over the {limit} bytes a checkpoint \
                 keeps of one file. {outcome} Remove or shrink that file (for example with \
                 RunCommand), then retry."
            ),
            &[
                ("path", path.clone()),
                ("size", size.to_string()),
                ("limit", limit.to_string()),
            ],
        ),
        ScanError::ReadBudget { limit } => status(
            Code::ResourceExhausted,
            reason::SCAN_LIMIT_REACHED,
            format!(
                "Reading the workspace's new and changed files would pass {limit} bytes, the most \
                 one scan reads. {outcome} Remove large files the work does not need, then retry."
            ),
            &[
                ("limit", limit.to_string()),
                ("bound", "read_bytes".to_string()),
            ],
        ),
        ScanError::TimedOut { limit } => status(
            Code::ResourceExhausted,
            reason::SCAN_LIMIT_REACHED,
            format!(
                "Reading the workspace took longer than {} s, the most one scan may. {outcome} \
                 Remove large files or trees the work does not need, then retry.",
                limit.as_secs()
            ),
            &[
                ("limit", limit.as_secs().to_string()),
                ("bound", "seconds".to_string()),
            ],
        ),
        ScanError::Cancelled => status(
            Code::Cancelled,
            reason::CANCELLED,
            format!("The call was cancelled while the workspace was read. {outcome}"),
            &[],
        ),
        ScanError::Io { path, source } => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "Could not read {path}: {source}. {outcome} Check the file's permissions and retry."
            ),
            &[("path", path.clone())],
        ),
        ScanError::Store(store::Error::Full { budget, used }) => status(
            Code::ResourceExhausted,
            reason::CHECKPOINT_STORE_FULL,
            format!(
                "Keeping the workspace's contents would pass the session's budget for checkpoints \
                 ({budget} bytes, the disk quota; {used} bytes are kept now). {outcome} Delete \
                 checkpoints that are no longer needed, or remove large files, and retry."
            ),
            &[("budget", budget.to_string()), ("used", used.to_string())],
        ),
        ScanError::Store(e) => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "The checkpoint store failed: {e}. {outcome} Retry; if it persists, tell the operator."
            ),
            &[],
        ),
    }
}

fn session_status(err: &session::Error) -> Described {
    use session::Error as S;
    match err {
        S::NotFound { id } => status(
            Code::NotFound,
            reason::SESSION_NOT_FOUND,
            format!(
                "Session {id:?} does not exist for this caller (it was closed, expired, never created, or \
                 belongs to another session token). Nothing was run or changed. Call with the session's own \
                 token (the one CreateSession returned), or create a new session with CreateSession."
            ),
            &[("session_id", id.clone())],
        ),
        S::NotPermitted { token, what } => not_permitted_status(*token, what),
        S::ApprovalUnavailable(why) => unavailable_status(why),
        S::InvalidPlan { problems } => invalid_plan_status(problems),
        S::ApprovalNotFound { id } => approval_not_found_status(id),
        S::WorkspaceNotAllowed { path, allowed } => {
            let roots = if allowed.is_empty() {
                "the operator allows no existing directories (serve --allow-root)".to_string()
            } else {
                let list: Vec<String> = allowed.iter().map(|p| p.display().to_string()).collect();
                format!("allowed roots: {}", list.join(", "))
            };
            status(
                Code::PermissionDenied,
                reason::PATH_OUTSIDE_WORKSPACE,
                format!(
                    "{path} is not under an allowed workspace root ({roots}). No session was created. Name an \
                     absolute directory under an allowed root, or omit workspace_path for a fresh workspace."
                ),
                &[("path", path.clone())],
            )
        }
        S::OpenWorkspace { path, source } => status(
            Code::InvalidArgument,
            reason::INVALID_WORKSPACE,
            format!(
                "The workspace directory {path} cannot be opened: {source}. No session was created. Name an existing directory."
            ),
            &[("path", path.clone())],
        ),
        S::OverlapsState { path } => status(
            Code::PermissionDenied,
            reason::INVALID_WORKSPACE,
            format!(
                "{path} holds or lies inside the service's own state directory, which no session may \
                 use. No session was created. Name a directory outside it."
            ),
            &[("path", path.clone())],
        ),
        S::TooMany { limit } => status(
            Code::ResourceExhausted,
            reason::TOO_MANY_SESSIONS,
            format!(
                "The service already holds its limit of {limit} sessions. Close a session you no longer need, then retry."
            ),
            &[("limit", limit.to_string())],
        ),
        S::CreateWorkspace(e) => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "The service could not create a workspace directory: {e}. No session was created. Retry later or tell the operator."
            ),
            &[],
        ),
        S::CommandRunning { running } => status(
            Code::FailedPrecondition,
            reason::COMMAND_RUNNING,
            format!(
                "{running} command(s) are running in the session, and a restore under them would race \
                 their writes. Nothing was changed. Wait for them to end, or ask again with \
                 stop_commands to reset the sandbox (stopping every process in it) first."
            ),
            &[("running", running.to_string())],
        ),
        S::LimitExceeded { what, asked, max } => status(
            Code::ResourceExhausted,
            reason::LIMIT_EXCEEDED,
            format!(
                "{what} {asked} is above the operator's ceiling of {max}. Nothing was run or changed. \
                 Ask for at most {max}, or 0 for the default."
            ),
            &[
                ("field", what.to_string()),
                ("asked", asked.to_string()),
                ("max", max.to_string()),
            ],
        ),
        S::CommandRefused(refusal) => status(
            Code::PermissionDenied,
            reason::COMMAND_REFUSED,
            format!(
                "The command was refused by the slip guard ({}). Nothing was run. The guard catches obvious \
                 destructive slips; it is not the security boundary (the container is). Run a narrower command \
                 that does what you need.",
                refusal.reason
            ),
            &[("rule", refusal.reason.clone())],
        ),
        S::Denied(denial) => denial_status(denial),
        S::InvalidPolicy(e) => status(
            Code::InvalidArgument,
            reason::INVALID_POLICY,
            format!(
                "The session policy is invalid: {e}. No session was created. Fix the rule and retry."
            ),
            &[],
        ),
        S::Journal(e) => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "The audit journal cannot be written: {e}. No session was created. Tell the operator \
                 (serve --journal-dir)."
            ),
            &[],
        ),
        S::CallerGone => status(
            Code::Cancelled,
            reason::TRANSPORT,
            "The call was cancelled before the session was opened; nothing of it was kept."
                .to_string(),
            &[],
        ),
        S::NotStarted(e) => status(
            Code::Unavailable,
            reason::SANDBOX_UNAVAILABLE,
            format!(
                "The container engine did not answer in time ({e}). No session was created, and \
                 what the engine may still make for it is removed once it answers. Retry later; \
                 the operator should check the engine (`docker info`)."
            ),
            &[],
        ),
        S::Record(e) => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "The session cannot be recorded in the service's state directory ({e}), so a restart \
                 would lose it. No session was created. Tell the operator (the state directory's disk)."
            ),
            &[],
        ),
        S::InvalidArgument { field, why } => status(
            Code::InvalidArgument,
            reason::INVALID_ARGUMENT,
            format!(
                "Invalid {field}: {why}. Nothing was run or changed. Fix the request and retry."
            ),
            &[("field", field.to_string())],
        ),
        S::ImageNotAllowed { image, allowed } => status(
            Code::PermissionDenied,
            reason::IMAGE_NOT_ALLOWED,
            format!(
                "Image {image} is not one the operator allows for sessions (allowed: {}). No session was \
                 created. Leave image empty for the default, or ask the operator to allow it \
                 (serve --allow-image).",
                allowed.join(", ")
            ),
            &[("image", image.clone())],
        ),
        S::Volume(e) => volume_status(e),
    }
}

fn volume_status(err: &crate::volume::Error) -> Described {
    use crate::volume::Error as V;
    match err {
        V::NotPrivate { path } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "{} is reachable by other users of this host, so a file a command marked set-user-id \
                 there could be run by them. No session was created. Make a directory above it \
                 private (owned by root or its owner, chmod 700), e.g. the allowed root, then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::LinkedOutside { path, links } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "{} in the directory has {links} hard links, some outside it (a local `git \
                 clone` or `cp -al` makes them): a command writing it, or marking it set-id, would \
                 change that file elsewhere on the host too. No session was created. Lend a copy \
                 without shared files (`git clone --no-hardlinks`, `cp -a`), then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::HoldsState { path } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "The directory is, holds or lies inside a sandboxd state directory ({}): a \
                 service's tokens, sockets and sessions are never lent. No session was created. \
                 Lend a project directory of its own, then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::Unchecked { path, why } => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            format!(
                "The directory could not be checked for files linked from outside it (at {}: \
                 {why}). No session was created. Lend a smaller or readable tree, then retry.",
                path.display()
            ),
            &[("path", path.display().to_string())],
        ),
        V::CannotPin => status(
            Code::FailedPrecondition,
            reason::INVALID_WORKSPACE,
            "Existing directories can be lent to sessions only when the service runs as root (it pins \
             each one with a mount, so later renames cannot change what containers see). No session \
             was created. Omit workspace_path for a fresh workspace."
                .to_string(),
            &[],
        ),
        V::Gone(why) => status(
            Code::FailedPrecondition,
            reason::WORKSPACE_GONE,
            format!(
                "The session's workspace is gone ({why}). Nothing was run. Close the session and create \
                 a new one."
            ),
            &[],
        ),
        e @ (V::State(_) | V::Create(_) | V::Pin(_)) => status(
            Code::Internal,
            reason::IO_ERROR,
            format!(
                "The service could not prepare the workspace: {e}. No session was created. Retry later \
                 or tell the operator."
            ),
            &[],
        ),
    }
}

/// Lines of a failed step's output put in its error, and characters of each.
const TAIL_LINES_TOLD: usize = 12;
const TAIL_LINE_CHARS: usize = 160;

fn environment_status(err: &environment::Error) -> Described {
    use environment::Error as E;
    const NOTHING_BUILT: &str = "No environment was created or changed.";
    match err {
        E::NotAllowed => status(
            Code::PermissionDenied,
            reason::POLICY_DENIED,
            format!(
                "Building and deleting environments runs code with network access, so it is an \
                 operator's permission, and this caller does not have it. {NOTHING_BUILT} Ask the \
                 operator to build it, to start the service with --allow-builds, or for the build token."
            ),
            &[],
        ),
        E::InvalidName { name } => status(
            Code::InvalidArgument,
            reason::INVALID_ARGUMENT,
            format!(
                "{name:?} is not a valid environment name. {NOTHING_BUILT} Use 1 to 64 lowercase \
                 letters and digits, with single '.', '_' or '-' between them (e.g. py-3.12)."
            ),
            &[("name", name.clone())],
        ),
        E::InvalidRecipe(why) => status(
            Code::InvalidArgument,
            reason::INVALID_RECIPE,
            format!(
                "The recipe cannot be built: {why}. {NOTHING_BUILT} Fix the recipe and build again."
            ),
            &[],
        ),
        E::InvalidContext(why) => status(
            Code::InvalidArgument,
            reason::INVALID_RECIPE,
            format!(
                "The build context is refused: {why}. {NOTHING_BUILT} Send a plain tar archive of \
                 relative paths holding only files, directories and symbolic links."
            ),
            &[],
        ),
        E::ContextTooLarge { size, max } => status(
            Code::ResourceExhausted,
            reason::BUILD_CONTEXT_TOO_LARGE,
            format!(
                "The build context is {size} bytes, over the ceiling of {max}. {NOTHING_BUILT} Send \
                 only what the Dockerfile copies (list the rest in .dockerignore, or leave it out), or \
                 fetch large inputs in a RUN step."
            ),
            &[("size", size.to_string()), ("max", max.to_string())],
        ),
        E::BaseMissing { image, local } => status(
            Code::FailedPrecondition,
            reason::IMAGE_NOT_FOUND,
            format!(
                "The base image {image} is not in the engine's image store, and images are never \
                 pulled. {NOTHING_BUILT} Build FROM a local image; these are present: {}.",
                if local.is_empty() {
                    "none".to_string()
                } else {
                    local.join(", ")
                }
            ),
            &[("image", image.clone())],
        ),
        E::BuildFailed {
            step,
            instruction,
            message,
            tail,
        } => {
            let at = if step.is_empty() {
                "The build failed before its first step".to_string()
            } else {
                format!("Step {step} ({instruction}) failed")
            };
            let tail: Vec<String> = tail
                .iter()
                .rev()
                .take(TAIL_LINES_TOLD)
                .rev()
                .map(|l| shorten_to(l, TAIL_LINE_CHARS))
                .collect();
            let output = if tail.is_empty() {
                " ".to_string()
            } else {
                format!(" Its last output lines:\n{}\n", tail.join("\n"))
            };
            status(
                Code::FailedPrecondition,
                reason::BUILD_FAILED,
                format!(
                    "{at}: {message}.{output}{NOTHING_BUILT} Its containers were removed. Fix \
                     that step and build again; the steps before it are cached."
                ),
                &[("step", step.clone())],
            )
        }
        E::BuildTimedOut {
            limit,
            step,
            ceiling,
        } => status(
            Code::DeadlineExceeded,
            reason::BUILD_TIMED_OUT,
            format!(
                "The build passed its time limit of {} s at step {step} and was stopped; its \
                 containers were removed. {NOTHING_BUILT} Ask for a longer timeout_seconds (up \
                 to the operator's ceiling of {} s), or make the step faster.",
                limit.as_secs(),
                ceiling.as_secs()
            ),
            &[("limit_seconds", limit.as_secs().to_string())],
        ),
        E::NotFound { name, known } => status(
            Code::NotFound,
            reason::ENVIRONMENT_NOT_FOUND,
            format!(
                "No environment is named {name}. Nothing was created. Known environments: {}. \
                 Build it first (BuildEnvironment, or `sandboxd env build`).",
                if known.is_empty() {
                    "none".to_string()
                } else {
                    known.join(", ")
                }
            ),
            &[("name", name.clone())],
        ),
        E::InUse { name, sessions } => status(
            Code::FailedPrecondition,
            reason::ENVIRONMENT_IN_USE,
            format!(
                "Environment {name} is used by {} open session(s) ({}), so it was kept. Close \
                 those sessions, then delete it.",
                sessions.len(),
                sessions.join(", ")
            ),
            &[("name", name.clone())],
        ),
        E::Engine(e) => sandbox_status(e),
    }
}

/// `s` cut to `max` characters.
fn shorten_to(s: &str, max: usize) -> String {
    match s.char_indices().nth(max) {
        Some((end, _)) => format!("{}…", &s[..end]),
        None => s.to_string(),
    }
}

fn sandbox_status(err: &sandbox::Error) -> Described {
    use sandbox::Error as X;
    match err {
        X::ImageMissing { image, why } => status(
            Code::FailedPrecondition,
            reason::IMAGE_NOT_FOUND,
            format!(
                "Image {image} is not available: {why}. No session was created. Use the default image \
                 (leave image empty) or one the operator has loaded."
            ),
            &[("image", image.clone())],
        ),
        X::WorkspaceGone(why) => status(
            Code::FailedPrecondition,
            reason::WORKSPACE_GONE,
            format!(
                "The session's workspace is gone ({why}). No container was started over it and \
                 nothing was run. Close the session and create a new one."
            ),
            &[],
        ),
        X::ImageUnusable { image, why } => status(
            Code::FailedPrecondition,
            reason::IMAGE_NOT_ALLOWED,
            format!(
                "Image {image} cannot be used: {why}. No session was created. Build the \
                 environment again without it, or use another image."
            ),
            &[("image", image.clone())],
        ),
        X::ImageInUse { image, why } => status(
            Code::FailedPrecondition,
            reason::ENVIRONMENT_IN_USE,
            format!(
                "Image {image} is still used by a container ({why}), so it was kept. Close the \
                 sessions using it, then try again."
            ),
            &[("image", image.clone())],
        ),
        e @ (X::Connect(_)
        | X::EngineTimeout
        | X::LinkLost
        | X::BuildImage { .. }
        | X::Images(_)
        | X::StartContainer(_)
        | X::StartExec(_)
        | X::InspectExec(_)
        | X::KillContainer(_)
        | X::RemoveContainer(_)
        | X::ListContainers(_)) => status(
            Code::Unavailable,
            reason::SANDBOX_UNAVAILABLE,
            format!(
                "The sandbox is unavailable: {e}. The command was not run. File tools (read, edit, search) \
                 still work; retry the command later."
            ),
            &[],
        ),
    }
}
