//! What the file tools answer, and what a search asks.

use super::walk::DirEntry;

/// A window of a file's lines.
#[derive(Debug, Clone)]
pub struct ReadOutput {
    /// Workspace-relative path.
    pub path: String,
    /// The lines, endings included, BOM removed.
    pub content: String,
    /// First line in `content` (1-based; 0 for an empty file).
    pub first_line: u64,
    /// Last line in `content`.
    pub last_line: u64,
    /// Lines in the file.
    pub total_lines: u64,
    /// Hex sha256 of the stored bytes.
    pub sha256: String,
    /// Lines exist past `last_line`, or the last line was cut.
    pub truncated: bool,
    /// File size.
    pub size_bytes: u64,
    /// Summary such as "lines 1-40 of 120".
    pub message: String,
}

/// Result of CreateFile.
#[derive(Debug, Clone)]
pub struct CreateOutput {
    /// Workspace-relative path.
    pub path: String,
    /// Where the write landed: the real workspace-relative path.
    pub landed: String,
    /// Hex sha256 of the new file.
    pub sha256: String,
    /// Lines in the new file.
    pub total_lines: u64,
    /// One-line summary.
    pub message: String,
}

/// Result of EditFile.
#[derive(Debug, Clone)]
pub struct EditOutput {
    /// Workspace-relative path.
    pub path: String,
    /// Where the write landed: the real workspace-relative path.
    pub landed: String,
    /// Hex sha256 of the file before the edit.
    pub sha256_before: String,
    /// Sites replaced.
    pub replacements: u64,
    /// 1-based line of the first change.
    pub first_changed_line: u64,
    /// Lines after minus lines before.
    pub line_delta: i64,
    /// Unified diff (capped).
    pub diff: String,
    /// The diff was cut.
    pub diff_truncated: bool,
    /// Hex sha256 of the file as written.
    pub sha256: String,
    /// One-line summary.
    pub message: String,
}

/// Result of ListDir.
#[derive(Debug, Clone)]
pub struct ListOutput {
    /// Workspace-relative path of the directory.
    pub path: String,
    /// Entries sorted by name.
    pub entries: Vec<DirEntry>,
    /// More entries exist.
    pub truncated: bool,
}

/// Result of FindFiles.
#[derive(Debug, Clone)]
pub struct FindOutput {
    /// Matching workspace-relative paths, sorted.
    pub paths: Vec<String>,
    /// More matches exist.
    pub truncated: bool,
}

/// One line matching a search.
#[derive(Debug, Clone)]
pub struct SearchMatch {
    /// Workspace-relative path.
    pub path: String,
    /// 1-based line number.
    pub line: u64,
    /// The line (without its ending), cut to the configured length.
    pub text: String,
}

/// Result of SearchFiles.
#[derive(Debug, Clone)]
pub struct SearchOutput {
    /// Matches in walk order.
    pub matches: Vec<SearchMatch>,
    /// More matches exist.
    pub truncated: bool,
    /// Files whose contents were searched.
    pub files_searched: u64,
}

/// A SearchFiles request.
#[derive(Debug, Clone, Default)]
pub struct SearchQuery {
    /// Regular expression, matched per line.
    pub pattern: String,
    /// Directory or file to search ("" for the root).
    pub path: String,
    /// Optional glob restricting the files searched.
    pub glob: String,
    /// Match case-insensitively.
    pub case_insensitive: bool,
    /// Maximum matches (0: default).
    pub limit: u64,
}
