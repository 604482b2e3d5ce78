//! Why a file tool refused or failed, and how an I/O error becomes one.

use super::*;

/// Why a file tool refused or failed. Every refusal leaves files unchanged.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The path is malformed (NUL byte, not UTF-8, names the root, too long).
    #[error("invalid path {path:?}: {why}")]
    InvalidPath {
        /// The path as given.
        path: String,
        /// What is wrong with it.
        why: &'static str,
    },
    /// The path leaves the workspace, by `..`, an absolute path or a symlink.
    #[error("{path} is outside the workspace")]
    OutsideWorkspace {
        /// The path as given.
        path: String,
    },
    /// Nothing exists at the path.
    #[error("{path} does not exist")]
    NotFound {
        /// Workspace-relative path.
        path: String,
    },
    /// The path is a directory or a special file where a file was needed.
    #[error("{path} is not a regular file")]
    NotAFile {
        /// Workspace-relative path.
        path: String,
    },
    /// The path (or one of its parents) is not a directory.
    #[error("{path} is not a directory")]
    NotADirectory {
        /// Workspace-relative path.
        path: String,
    },
    /// CreateFile found the path taken.
    #[error("{path} already exists")]
    Exists {
        /// Workspace-relative path.
        path: String,
    },
    /// The file or content is over the size ceiling.
    #[error("{path} is {size} bytes, over the limit of {limit} bytes")]
    TooLarge {
        /// Workspace-relative path.
        path: String,
        /// Actual size.
        size: u64,
        /// Configured ceiling.
        limit: u64,
    },
    /// The file is binary or not UTF-8.
    #[error("{path} is not UTF-8 text")]
    NotText {
        /// Workspace-relative path.
        path: String,
    },
    /// expected_sha256 does not match the file as stored.
    #[error("{path} changed since it was read")]
    Stale {
        /// Workspace-relative path.
        path: String,
        /// Hash the caller expected.
        expected: String,
        /// Hash of the file now.
        actual: String,
    },
    /// ReadFile's offset is past the last line.
    #[error("line {offset} is past the end of {path} ({total} lines)")]
    LineOutOfRange {
        /// Workspace-relative path.
        path: String,
        /// Requested first line.
        offset: u64,
        /// Lines in the file.
        total: u64,
    },
    /// A glob or regular expression does not parse.
    #[error("invalid pattern {pattern:?}: {why}")]
    InvalidPattern {
        /// The pattern as given.
        pattern: String,
        /// Parser message.
        why: String,
    },
    /// The edit engine refused the edits.
    #[error("{path}: {source}")]
    Edit {
        /// Workspace-relative path.
        path: String,
        /// Engine refusal.
        source: EditError,
    },
    /// A walk met one of its bounds (a command planted a huge or deeply
    /// nested `.gitignore`, or a directory of too many entries).
    #[error("{path}: walk limit {what:?} of {limit} exceeded")]
    WalkLimit {
        /// The tool that walked ("FindFiles", "SearchFiles").
        tool: &'static str,
        /// Workspace-relative path of the file or directory concerned.
        path: String,
        /// The bound met.
        what: WalkLimit,
        /// Its value.
        limit: u64,
    },
    /// Session policy refuses the write.
    #[error("write refused by policy: {0:?}")]
    Denied(crate::policy::Denial),
    /// The patch cannot be read, or is of a kind not applied.
    #[error(transparent)]
    Patch(#[from] super::patch::ParseError),
    /// A hunk of the patch does not apply to the file.
    #[error("{path}: {error}")]
    Hunk {
        /// Workspace-relative path of the file.
        path: String,
        /// The hunk and why.
        error: super::patch::HunkError,
    },
    /// A deleted file holds more than the patch removes.
    #[error("{path} holds more than the patch deletes")]
    DeleteIncomplete {
        /// Workspace-relative path.
        path: String,
    },
    /// An unexpected I/O failure.
    #[error("{op} {path}: {source}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// Workspace-relative path.
        path: String,
        /// The OS error.
        source: io::Error,
    },
}

impl Error {
    /// Classifies an OS error met while working on `path`.
    pub(super) fn from_io(op: &'static str, path: &RelPath, source: io::Error) -> Error {
        use rustix::io::Errno;
        let path = path.to_string();
        match Errno::from_io_error(&source) {
            Some(Errno::NOENT) => Error::NotFound { path },
            Some(Errno::XDEV) => Error::OutsideWorkspace { path },
            Some(Errno::LOOP) => Error::InvalidPath {
                path,
                why: "it is a symbolic link that cannot be followed safely here, or a link loop",
            },
            Some(Errno::NOTDIR) => Error::NotADirectory { path },
            Some(Errno::ISDIR) => Error::NotAFile { path },
            Some(Errno::EXIST) => Error::Exists { path },
            Some(Errno::NAMETOOLONG) => Error::InvalidPath {
                path,
                why: "it is too long",
            },
            _ => Error::Io { op, path, source },
        }
    }
}
