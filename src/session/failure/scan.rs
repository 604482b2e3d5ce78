//! What a caller is told when a workspace cannot be pictured: part of the
//! one table in [`super`].

use tonic::Code;

use super::{Described, reason, status};
use crate::workspace::tree::ScanError;
use crate::workspace::tree::store;

/// A workspace that could not be pictured, and what that means (`outcome`).
pub(super) fn scan_status(err: &ScanError, outcome: &str) -> Described {
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
