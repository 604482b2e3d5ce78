//! What a caller is told when a file tool fails on a path, a file's size,
//! text or freshness, or a walk's limits: part of the one table in [`super`].

use tonic::Code;

use super::patch::PATCH_UNCHANGED;
use super::{
    Described, UNCHANGED, denial_status, edit_status, hunk_status, parse_status, reason, status,
};
use crate::workspace::{self, WalkLimit};

pub(super) fn workspace_status(err: &workspace::Error) -> Described {
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

pub(super) fn walk_limit_status(tool: &str, path: &str, what: WalkLimit, limit: u64) -> Described {
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
