//! The tools a model sees: their names, descriptions and argument schemas,
//! and each call made on the session over gRPC. A refusal (a status with
//! its stable reason) comes back as an `isError` result carrying the
//! reason and the service's message, never as a protocol error; so do
//! arguments that do not fit the schema. A call an `ask` rule held and a
//! person rejected is a result saying it was not executed, and why.
//! This file holds the tools' definitions and replies; `tools/args` their
//! argument types, `tools/call` the calls and `tools/process` the
//! long-running process tools.

use std::sync::Arc;

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{JsonObject, Tool, ToolAnnotations};
use sandboxd::pb;
use serde_json::{Value, json};
use tonic_types::StatusExt;

use super::{plan, render};
use crate::cli::connect::Client;

mod args;
mod call;
mod process;

use args::*;
pub use call::call;

/// What a tool call answers: text for the model and, where a program may
/// want the fields, the same as JSON.
pub struct Reply {
    pub text: String,
    pub structured: Option<Value>,
    /// The call did not do what it was asked (a person rejected it).
    pub is_error: bool,
}

impl Reply {
    fn text(text: String) -> Reply {
        Reply {
            text,
            structured: None,
            is_error: false,
        }
    }

    /// A call a person rejected: not executed, and why.
    fn rejected(what: &str, r: &pb::Rejection) -> Reply {
        Reply {
            text: render::rejected_call(what, r),
            structured: Some(json!({ "rejected": render::rejection_json(r) })),
            is_error: true,
        }
    }
}

/// A call the service (or this bridge) refused: the stable reason and the
/// message written for a model.
#[derive(Debug, Clone)]
pub struct Refused {
    pub reason: String,
    pub message: String,
}

impl Refused {
    pub fn new(reason: &str, message: impl Into<String>) -> Refused {
        Refused {
            reason: reason.to_string(),
            message: message.into(),
        }
    }
}

impl From<tonic::Status> for Refused {
    fn from(status: tonic::Status) -> Refused {
        match status.get_error_details().error_info() {
            Some(info) => Refused::new(&info.reason, status.message()),
            // The service gives every refusal a reason: a status without
            // one was made on the way (the service is gone, the link broke).
            None => Refused::new(
                "TRANSPORT",
                format!(
                    "the call did not reach sandboxd ({:?}: {}); nothing was done. \
                     Try again; if it keeps failing, the service has stopped",
                    status.code(),
                    status.message()
                ),
            ),
        }
    }
}

/// The session the tools act on.
#[derive(Clone)]
pub struct Session {
    pub client: Client,
    pub id: String,
}

/// How a tool behaves, for the client's annotations.
#[derive(Clone, Copy)]
enum Kind {
    /// Changes nothing.
    Reads,
    /// Changes the workspace.
    Writes,
    /// Runs code, which may change anything in the sandbox.
    Runs,
    /// Asks a person; changes the session's rules, not the workspace.
    Asks,
}

/// The tools an `ask` rule can hold, and plan mode refuses until a plan is
/// approved.
const HELD: [&str; 5] = [
    "create_file",
    "edit_file",
    "apply_patch",
    "run_command",
    "start_process",
];

/// What the held tools' descriptions add.
const HELD_NOTE: &str = " In plan mode (a session started with --plan-mode) it is refused until \
     submit_plan is approved, and then allowed for the planned files only. A call a rule \
     holds for a person's approval waits for it; a rejected call is not executed, and its \
     result says so and why.";

/// Every tool: name, kind, argument schema and description.
fn table() -> Vec<(&'static str, Kind, Arc<JsonObject>, &'static str)> {
    vec![
        (
            "read_file",
            Kind::Reads,
            schema_for_type::<ReadArgs>(),
            "Read a text file of the workspace. Lines come numbered (\"  12\\tcode\"); the \
             number and tab are not part of the file. Long files come in pages: pass offset \
             and limit for the rest. Reports the file's sha256, which edit_file accepts as \
             expected_sha256.",
        ),
        (
            "create_file",
            Kind::Writes,
            schema_for_type::<CreateArgs>(),
            "Create a new file with the given content (refused with FILE_EXISTS if it \
             exists: use edit_file to change an existing file).",
        ),
        (
            "edit_file",
            Kind::Writes,
            schema_for_type::<EditArgs>(),
            "Replace exact text in a file. old_string must match the file exactly, \
             whitespace included, and occur exactly once (or set replace_all). Several edits \
             in one call apply all or nothing. A refused edit (OLD_STRING_NOT_FOUND, \
             OLD_STRING_AMBIGUOUS, ...) changes nothing and says what to do next. Returns a \
             diff of the change.",
        ),
        (
            "list_dir",
            Kind::Reads,
            schema_for_type::<ListArgs>(),
            "List a directory of the workspace: names, kinds and sizes.",
        ),
        (
            "find_files",
            Kind::Reads,
            schema_for_type::<FindArgs>(),
            "Find files by glob, e.g. \"**/*.py\" or \"test_*.py\". Skips what .gitignore \
             ignores.",
        ),
        (
            "search_files",
            Kind::Reads,
            schema_for_type::<SearchArgs>(),
            "Search file contents with a regular expression; returns path:line: text for \
             each matching line.",
        ),
        (
            "run_command",
            Kind::Runs,
            schema_for_type::<RunArgs>(),
            "Run a shell command in the session's sandbox: a container with no network, \
             the workspace mounted at /workspace (the working directory), stdin closed. \
             Returns the exit code, whether it timed out or was killed, and stdout and \
             stderr (long output keeps its start and end). A non-zero exit is a result, \
             not an error. Commands cannot reach the internet: install nothing at run time.",
        ),
        (
            "apply_patch",
            Kind::Writes,
            schema_for_type::<PatchArgs>(),
            "Apply a unified diff (git diff format) to the workspace, all or nothing: \
             a hunk whose context does not match exactly refuses the whole patch.",
        ),
        (
            "diff",
            Kind::Reads,
            schema_for_type::<DiffArgs>(),
            "Show every change made to the workspace since the session began (or since a \
             checkpoint), by the file tools or by commands, as a patch git apply accepts.",
        ),
        (
            "checkpoint",
            Kind::Writes,
            schema_for_type::<CheckpointArgs>(),
            "Save the workspace as it is now; restore_checkpoint brings it back exactly. \
             Returns the checkpoint's id.",
        ),
        (
            "list_checkpoints",
            Kind::Reads,
            schema_for_type::<NoArgs>(),
            "List the session's checkpoints, oldest first.",
        ),
        (
            "restore_checkpoint",
            Kind::Writes,
            schema_for_type::<RestoreArgs>(),
            "Put the workspace back exactly as it was at a checkpoint: files changed since \
             are restored, files made since are removed.",
        ),
        (
            "session_report",
            Kind::Reads,
            schema_for_type::<ReportArgs>(),
            "Summarise the session: files written (sha256 before and after), commands run \
             and their exit codes, refused calls; with planned_files and verify_command, \
             how the work compares with the plan and whether the verification passed after \
             the last change.",
        ),
        (
            "submit_plan",
            Kind::Asks,
            schema_for_type::<plan::PlanArgs>(),
            plan::DESCRIPTION,
        ),
        (
            "reset_sandbox",
            Kind::Runs,
            schema_for_type::<NoArgs>(),
            "Kill everything running in the sandbox (servers left in the background, \
             runaway processes) and start a fresh container over the same workspace.",
        ),
        (
            "start_process",
            Kind::Runs,
            schema_for_type::<process::StartArgs>(),
            process::START,
        ),
        (
            "process_output",
            Kind::Reads,
            schema_for_type::<process::OutputArgs>(),
            process::OUTPUT,
        ),
        (
            "send_input",
            Kind::Runs,
            schema_for_type::<process::SendArgs>(),
            process::SEND,
        ),
        (
            "stop_process",
            Kind::Runs,
            schema_for_type::<process::StopArgs>(),
            process::STOP,
        ),
        (
            "list_processes",
            Kind::Reads,
            schema_for_type::<process::ListArgs>(),
            process::LIST,
        ),
    ]
}

/// The tools as `tools/list` gives them.
pub fn list() -> Vec<Tool> {
    table()
        .into_iter()
        .map(|(name, kind, schema, description)| {
            let annotations = match kind {
                Kind::Reads => ToolAnnotations::new().read_only(true),
                Kind::Writes => ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .open_world(false),
                Kind::Runs => ToolAnnotations::new()
                    .read_only(false)
                    .destructive(true)
                    .open_world(false),
                Kind::Asks => ToolAnnotations::new()
                    .read_only(false)
                    .destructive(false)
                    .open_world(false),
            };
            let description = if HELD.contains(&name) {
                format!("{description}{HELD_NOTE}")
            } else {
                description.to_string()
            };
            Tool::new(name, description, bare(schema)).annotate(annotations)
        })
        .collect()
}

/// A schema without the Rust type's title and doc line (the tool's
/// description says it all).
fn bare(schema: Arc<JsonObject>) -> Arc<JsonObject> {
    let mut schema = Arc::unwrap_or_clone(schema);
    schema.remove("title");
    schema.remove("description");
    Arc::new(schema)
}
