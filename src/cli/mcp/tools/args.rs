//! The arguments of each tool: the types their schemas are made from and
//! that a call's arguments are read into.

use std::collections::BTreeMap;

use schemars::JsonSchema;
use serde::Deserialize;

/// Arguments of `read_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReadArgs {
    /// Path relative to the workspace root, e.g. "src/app.py".
    pub path: String,
    /// First line to return, 1-based (default 1).
    pub offset: Option<u64>,
    /// How many lines to return (default 2000).
    pub limit: Option<u64>,
}

/// Arguments of `create_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateArgs {
    /// Path relative to the workspace root; missing parent directories are
    /// made. The file must not exist yet.
    pub path: String,
    /// The whole content of the new file.
    pub content: String,
}

/// One replacement of `edit_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArg {
    /// Exact text to replace, copied from the file (without read_file's
    /// line-number prefix), indentation included.
    pub old_string: String,
    /// The text to put in its place; empty deletes old_string.
    pub new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    pub replace_all: bool,
}

/// Arguments of `edit_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct EditArgs {
    /// Path relative to the workspace root.
    pub path: String,
    /// For one edit: the exact text to replace. It must occur exactly once
    /// in the file unless replace_all is true; include enough surrounding
    /// lines to make it unique.
    pub old_string: Option<String>,
    /// For one edit: the replacement text (empty deletes old_string).
    pub new_string: Option<String>,
    /// For one edit: replace every occurrence of old_string.
    pub replace_all: Option<bool>,
    /// Several edits applied together, all or nothing, each matched against
    /// the file as it was before this call; they must not overlap. Give
    /// this or old_string/new_string, not both.
    pub edits: Option<Vec<EditArg>>,
    /// The sha256 read_file reported: the edit is refused (STALE_FILE) if
    /// the file changed since.
    pub expected_sha256: Option<String>,
}

/// Arguments of `list_dir`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ListArgs {
    /// Directory relative to the workspace root (default: the root).
    pub path: Option<String>,
}

/// Arguments of `find_files`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct FindArgs {
    /// Glob over workspace-relative paths, e.g. "src/**/*.py"; a pattern
    /// without "/" matches file names at any depth, e.g. "*.toml".
    pub pattern: String,
    /// Directory to search under (default: the workspace root).
    pub path: Option<String>,
    /// Most paths returned (default 1000).
    pub limit: Option<u64>,
}

/// Arguments of `search_files`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct SearchArgs {
    /// Regular expression (Rust regex syntax), matched against each line.
    pub pattern: String,
    /// Directory or file to search (default: the workspace root).
    pub path: Option<String>,
    /// Only search files whose names match this glob, e.g. "*.py".
    pub glob: Option<String>,
    /// Match regardless of case.
    #[serde(default)]
    pub case_insensitive: bool,
    /// Most matches returned (default 200).
    pub limit: Option<u64>,
}

/// Arguments of `run_command`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunArgs {
    /// Shell command, run with /bin/sh -c, e.g. "python3 -m pytest -q".
    pub command: String,
    /// Working directory relative to the workspace root (default: the root).
    pub cwd: Option<String>,
    /// Seconds before the command is stopped (default: the session's, 30
    /// unless configured). Give long test suites more.
    pub timeout_seconds: Option<u64>,
    /// Extra environment variables for this command.
    pub env: Option<BTreeMap<String, String>>,
    /// Characters of output kept per stream (default 4000): the start and
    /// the end of longer output are kept, the middle counted.
    pub output_cap: Option<u64>,
}

/// Arguments of `apply_patch`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchArgs {
    /// A unified diff as `git diff` writes it: several files, new and
    /// deleted files, renames. Context must match exactly.
    pub patch: String,
}

/// Arguments of `diff`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct DiffArgs {
    /// Compare with this checkpoint instead of the session's start.
    pub since_checkpoint: Option<String>,
    /// List the changed files only, without the patch.
    #[serde(default)]
    pub stat: bool,
}

/// Arguments of `checkpoint`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct CheckpointArgs {
    /// A short note of what state this is, e.g. "tests red, before the fix".
    pub label: Option<String>,
}

/// Arguments of `restore_checkpoint`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RestoreArgs {
    /// The id `checkpoint` or `list_checkpoints` gave.
    pub checkpoint_id: String,
    /// Stop commands still running (they would be refused otherwise).
    #[serde(default)]
    pub stop_commands: bool,
}

/// Arguments of `session_report`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ReportArgs {
    /// Workspace-relative files you planned to change: the report says
    /// which were changed, which were not, and what else was.
    #[serde(default)]
    pub planned_files: Vec<String>,
    /// The command that verifies the change, e.g. "python3 -m pytest -q":
    /// the report says whether it ran after the last write and passed.
    pub verify_command: Option<String>,
}

/// A tool without arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}
