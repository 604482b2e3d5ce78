//! The tools a model sees: their names, descriptions and argument schemas,
//! and each call made on the session over gRPC. A refusal (a status with
//! its stable reason) comes back as an `isError` result carrying the
//! reason and the service's message, never as a protocol error; so do
//! arguments that do not fit the schema. A call an `ask` rule held and a
//! person rejected is a result saying it was not executed, and why.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rmcp::handler::server::common::schema_for_type;
use rmcp::model::{JsonObject, ProgressNotificationParam, Tool, ToolAnnotations};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use sandboxd::pb;
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};
use tonic_types::StatusExt;

use super::{plan, render};
use crate::cli::connect::Client;

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

/// Arguments of `read_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReadArgs {
    /// Path relative to the workspace root, e.g. "src/app.py".
    path: String,
    /// First line to return, 1-based (default 1).
    offset: Option<u64>,
    /// How many lines to return (default 2000).
    limit: Option<u64>,
}

/// Arguments of `create_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CreateArgs {
    /// Path relative to the workspace root; missing parent directories are
    /// made. The file must not exist yet.
    path: String,
    /// The whole content of the new file.
    content: String,
}

/// One replacement of `edit_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditArg {
    /// Exact text to replace, copied from the file (without read_file's
    /// line-number prefix), indentation included.
    old_string: String,
    /// The text to put in its place; empty deletes old_string.
    new_string: String,
    /// Replace every occurrence instead of requiring exactly one.
    #[serde(default)]
    replace_all: bool,
}

/// Arguments of `edit_file`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct EditArgs {
    /// Path relative to the workspace root.
    path: String,
    /// For one edit: the exact text to replace. It must occur exactly once
    /// in the file unless replace_all is true; include enough surrounding
    /// lines to make it unique.
    old_string: Option<String>,
    /// For one edit: the replacement text (empty deletes old_string).
    new_string: Option<String>,
    /// For one edit: replace every occurrence of old_string.
    replace_all: Option<bool>,
    /// Several edits applied together, all or nothing, each matched against
    /// the file as it was before this call; they must not overlap. Give
    /// this or old_string/new_string, not both.
    edits: Option<Vec<EditArg>>,
    /// The sha256 read_file reported: the edit is refused (STALE_FILE) if
    /// the file changed since.
    expected_sha256: Option<String>,
}

/// Arguments of `list_dir`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ListArgs {
    /// Directory relative to the workspace root (default: the root).
    path: Option<String>,
}

/// Arguments of `find_files`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct FindArgs {
    /// Glob over workspace-relative paths, e.g. "src/**/*.py"; a pattern
    /// without "/" matches file names at any depth, e.g. "*.toml".
    pattern: String,
    /// Directory to search under (default: the workspace root).
    path: Option<String>,
    /// Most paths returned (default 1000).
    limit: Option<u64>,
}

/// Arguments of `search_files`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct SearchArgs {
    /// Regular expression (Rust regex syntax), matched against each line.
    pattern: String,
    /// Directory or file to search (default: the workspace root).
    path: Option<String>,
    /// Only search files whose names match this glob, e.g. "*.py".
    glob: Option<String>,
    /// Match regardless of case.
    #[serde(default)]
    case_insensitive: bool,
    /// Most matches returned (default 200).
    limit: Option<u64>,
}

/// Arguments of `run_command`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RunArgs {
    /// Shell command, run with /bin/sh -c, e.g. "python3 -m pytest -q".
    command: String,
    /// Working directory relative to the workspace root (default: the root).
    cwd: Option<String>,
    /// Seconds before the command is stopped (default: the session's, 30
    /// unless configured). Give long test suites more.
    timeout_seconds: Option<u64>,
    /// Extra environment variables for this command.
    env: Option<BTreeMap<String, String>>,
    /// Characters of output kept per stream (default 4000): the start and
    /// the end of longer output are kept, the middle counted.
    output_cap: Option<u64>,
}

/// Arguments of `apply_patch`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct PatchArgs {
    /// A unified diff as `git diff` writes it: several files, new and
    /// deleted files, renames. Context must match exactly.
    patch: String,
}

/// Arguments of `diff`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct DiffArgs {
    /// Compare with this checkpoint instead of the session's start.
    since_checkpoint: Option<String>,
    /// List the changed files only, without the patch.
    #[serde(default)]
    stat: bool,
}

/// Arguments of `checkpoint`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct CheckpointArgs {
    /// A short note of what state this is, e.g. "tests red, before the fix".
    label: Option<String>,
}

/// Arguments of `restore_checkpoint`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct RestoreArgs {
    /// The id `checkpoint` or `list_checkpoints` gave.
    checkpoint_id: String,
    /// Stop commands still running (they would be refused otherwise).
    #[serde(default)]
    stop_commands: bool,
}

/// Arguments of `session_report`.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct ReportArgs {
    /// Workspace-relative files you planned to change: the report says
    /// which were changed, which were not, and what else was.
    #[serde(default)]
    planned_files: Vec<String>,
    /// The command that verifies the change, e.g. "python3 -m pytest -q":
    /// the report says whether it ran after the last write and passed.
    verify_command: Option<String>,
}

/// A tool without arguments.
#[derive(Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
struct NoArgs {}

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
const HELD: [&str; 4] = ["create_file", "edit_file", "apply_patch", "run_command"];

/// What the held tools' descriptions add.
const HELD_NOTE: &str = " In plan mode (a session started read-only) it is refused until \
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

/// The arguments of a call as `T`, or a refusal saying what is wrong.
fn args<T: serde::de::DeserializeOwned>(tool: &str, raw: JsonObject) -> Result<T, Refused> {
    serde_json::from_value(Value::Object(raw)).map_err(|e| {
        Refused::new(
            "INVALID_ARGUMENT",
            format!(
                "the arguments of {tool} do not fit its schema: {e}; nothing was done. \
                 Call it again with the arguments its schema lists"
            ),
        )
    })
}

/// An optional number the service reads as "default" when 0.
fn or_zero(n: Option<u64>) -> u64 {
    n.unwrap_or(0)
}

/// Runs the tool `name` on `session`.
pub async fn call(
    session: &Session,
    name: &str,
    raw: JsonObject,
    ctx: &RequestContext<RoleServer>,
) -> Result<Reply, Refused> {
    let mut c = session.client.clone();
    let sid = session.id.clone();
    match name {
        "read_file" => {
            let a: ReadArgs = args(name, raw)?;
            let r = c
                .read_file(pb::ReadFileRequest {
                    session_id: sid,
                    path: a.path,
                    offset: or_zero(a.offset),
                    limit: or_zero(a.limit),
                })
                .await?
                .into_inner();
            Ok(Reply::text(render::read(&r)))
        }
        "create_file" => {
            let a: CreateArgs = args(name, raw)?;
            let what = format!("create_file of {}", render::path(&a.path));
            let r = c
                .create_file(pb::CreateFileRequest {
                    session_id: sid,
                    path: a.path,
                    content: a.content,
                })
                .await?
                .into_inner();
            if let Some(rejected) = &r.rejected {
                return Ok(Reply::rejected(&what, rejected));
            }
            Ok(Reply::text(format!("{} (sha256 {})", r.message, r.sha256)))
        }
        "edit_file" => {
            let a: EditArgs = args(name, raw)?;
            let edits = edits(a.old_string, a.new_string, a.replace_all, a.edits)?;
            let what = format!("edit_file of {}", render::path(&a.path));
            let r = c
                .edit_file(pb::EditFileRequest {
                    session_id: sid,
                    path: a.path,
                    edits,
                    expected_sha256: a.expected_sha256.unwrap_or_default(),
                })
                .await?
                .into_inner();
            if let Some(rejected) = &r.rejected {
                return Ok(Reply::rejected(&what, rejected));
            }
            Ok(Reply::text(render::edited(&r)))
        }
        "list_dir" => {
            let a: ListArgs = args(name, raw)?;
            let r = c
                .list_dir(pb::ListDirRequest {
                    session_id: sid,
                    path: a.path.unwrap_or_default(),
                })
                .await?
                .into_inner();
            Ok(Reply::text(render::dir(&r)))
        }
        "find_files" => {
            let a: FindArgs = args(name, raw)?;
            let r = c
                .find_files(pb::FindFilesRequest {
                    session_id: sid,
                    pattern: a.pattern,
                    path: a.path.unwrap_or_default(),
                    limit: or_zero(a.limit),
                })
                .await?
                .into_inner();
            Ok(Reply::text(render::found(&r)))
        }
        "search_files" => {
            let a: SearchArgs = args(name, raw)?;
            let r = c
                .search_files(pb::SearchFilesRequest {
                    session_id: sid,
                    pattern: a.pattern,
                    path: a.path.unwrap_or_default(),
                    glob: a.glob.unwrap_or_default(),
                    case_insensitive: a.case_insensitive,
                    limit: or_zero(a.limit),
                })
                .await?
                .into_inner();
            Ok(Reply::text(render::matches(&r)))
        }
        "run_command" => {
            let a: RunArgs = args(name, raw)?;
            let cap = or_zero(a.output_cap);
            let what = format!("run_command of `{}`", render::safe(&a.command));
            let req = pb::RunCommandRequest {
                session_id: sid,
                command: a.command,
                cwd: a.cwd.unwrap_or_default(),
                timeout_ms: or_zero(a.timeout_seconds).saturating_mul(1000),
                env: a.env.unwrap_or_default().into_iter().collect(),
                stdout_cap: cap,
                stderr_cap: cap,
            };
            let exit = match run(&mut c, req, ctx).await? {
                Ran::Exited(exit) => exit,
                Ran::Rejected(rejected) => return Ok(Reply::rejected(&what, &rejected)),
            };
            Ok(Reply {
                text: render::exit(&exit),
                structured: Some(render::exit_json(&exit)),
                is_error: false,
            })
        }
        "apply_patch" => {
            let a: PatchArgs = args(name, raw)?;
            let r = c
                .apply_patch(pb::ApplyPatchRequest {
                    session_id: sid,
                    patch: a.patch,
                })
                .await?
                .into_inner();
            if let Some(rejected) = &r.rejected {
                return Ok(Reply::rejected("apply_patch", rejected));
            }
            Ok(Reply::text(render::patched(&r)))
        }
        "diff" => {
            let a: DiffArgs = args(name, raw)?;
            let r = c
                .get_changes(pb::GetChangesRequest {
                    session_id: sid,
                    since_checkpoint: a.since_checkpoint.unwrap_or_default(),
                    max_patch_bytes: 0,
                })
                .await?
                .into_inner();
            Ok(Reply::text(render::changes(&r, a.stat)))
        }
        "checkpoint" => {
            let a: CheckpointArgs = args(name, raw)?;
            let r = c
                .create_checkpoint(pb::CreateCheckpointRequest {
                    session_id: sid,
                    label: a.label.unwrap_or_default(),
                })
                .await?
                .into_inner();
            let id = r
                .checkpoint
                .as_ref()
                .map(|k| k.checkpoint_id.clone())
                .unwrap_or_default();
            Ok(Reply {
                text: format!("{} (checkpoint_id {id})", r.message),
                structured: Some(json!({ "checkpoint_id": id })),
                is_error: false,
            })
        }
        "list_checkpoints" => {
            let _: NoArgs = args(name, raw)?;
            let r = c
                .list_checkpoints(pb::ListCheckpointsRequest { session_id: sid })
                .await?
                .into_inner();
            Ok(Reply::text(render::checkpoints(&r.checkpoints)))
        }
        "restore_checkpoint" => {
            let a: RestoreArgs = args(name, raw)?;
            let r = c
                .restore_checkpoint(pb::RestoreCheckpointRequest {
                    session_id: sid,
                    checkpoint_id: a.checkpoint_id,
                    stop_commands: a.stop_commands,
                })
                .await?
                .into_inner();
            Ok(Reply::text(r.message))
        }
        "session_report" => {
            let a: ReportArgs = args(name, raw)?;
            let r = c
                .get_session_report(pb::GetSessionReportRequest {
                    session_id: sid,
                    planned_files: a.planned_files,
                    verification_command: a.verify_command.unwrap_or_default(),
                })
                .await?
                .into_inner();
            Ok(Reply::text(render::report(&r)))
        }
        "submit_plan" => plan::call(session, args(name, raw)?, ctx).await,
        "reset_sandbox" => {
            let _: NoArgs = args(name, raw)?;
            let r = c
                .reset_sandbox(pb::ResetSandboxRequest { session_id: sid })
                .await?
                .into_inner();
            Ok(Reply::text(render::reset(&r)))
        }
        other => Err(Refused::new(
            "UNIMPLEMENTED",
            format!(
                "there is no tool {other:?}; nothing was done. Call one of: {}",
                table().iter().map(|t| t.0).collect::<Vec<_>>().join(", ")
            ),
        )),
    }
}

/// The edits of an `edit_file` call: one given inline, or a list.
fn edits(
    old: Option<String>,
    new: Option<String>,
    replace_all: Option<bool>,
    list: Option<Vec<EditArg>>,
) -> Result<Vec<pb::Edit>, Refused> {
    let invalid = |what: &str| {
        Refused::new(
            "INVALID_ARGUMENT",
            format!("{what}; nothing was changed. Call edit_file again with the edit"),
        )
    };
    match (old, new, list) {
        (None, None, Some(list)) if replace_all.is_none() => Ok(list
            .into_iter()
            .map(|e| pb::Edit {
                old_string: e.old_string,
                new_string: e.new_string,
                replace_all: e.replace_all,
            })
            .collect()),
        (Some(old_string), Some(new_string), None) => Ok(vec![pb::Edit {
            old_string,
            new_string,
            replace_all: replace_all.unwrap_or(false),
        }]),
        (_, _, Some(_)) => Err(invalid(
            "give either old_string and new_string (one edit) or edits (several), not both",
        )),
        (Some(_), None, None) => Err(invalid("old_string was given without new_string")),
        (None, Some(_), None) => Err(invalid("new_string was given without old_string")),
        (None, None, None) => Err(invalid("no edit was given: pass old_string and new_string")),
    }
}

/// How often a running command reports progress.
const PROGRESS_EVERY: Duration = Duration::from_secs(1);

/// How a command's stream ended.
enum Ran {
    /// It ran to its end.
    Exited(pb::CommandExit),
    /// An `ask` rule held it and it was rejected: it did not run.
    Rejected(pb::Rejection),
}

/// Runs a command to its end, sending progress notifications while it runs
/// when the client asked for them. The client cancelling the call drops
/// the stream: the service then stops the command.
async fn run(
    c: &mut Client,
    req: pb::RunCommandRequest,
    ctx: &RequestContext<RoleServer>,
) -> Result<Ran, Refused> {
    let progress = ctx.meta.get_progress_token().map(|t| (t, ctx.peer.clone()));
    let started = Instant::now();
    let mut stream = c.run_command(req).await?.into_inner();
    let mut timeout_ms = 0u64;
    let mut last_line = String::new();
    let mut tick =
        tokio::time::interval_at(tokio::time::Instant::now() + PROGRESS_EVERY, PROGRESS_EVERY);
    loop {
        tokio::select! {
            () = ctx.ct.cancelled() => {
                return Err(Refused::new("CANCELLED", "the call was cancelled; the command was stopped"));
            }
            event = stream.message() => {
                let Some(event) = event? else {
                    return Err(Refused::new(
                        "TRANSPORT",
                        "the command's stream ended without its result; it may still have run. \
                         Check its effects before running it again",
                    ));
                };
                match event.event {
                    Some(pb::run_command_event::Event::Started(s)) => timeout_ms = s.timeout_ms,
                    Some(pb::run_command_event::Event::Stdout(chunk) | pb::run_command_event::Event::Stderr(chunk)) => {
                        if let Some(line) = render::last_line(&chunk.data) {
                            last_line = line;
                        }
                    }
                    Some(pb::run_command_event::Event::Exit(exit)) => return Ok(Ran::Exited(exit)),
                    Some(pb::run_command_event::Event::Rejected(r)) => return Ok(Ran::Rejected(r)),
                    None => {}
                }
            }
            _ = tick.tick(), if progress.is_some() => {
                if let Some((token, peer)) = &progress {
                    notify(peer, token, started.elapsed(), timeout_ms, &last_line).await;
                }
            }
        }
    }
}

/// One progress notification: seconds so far out of the timeout, and the
/// last line of output.
async fn notify(
    peer: &Peer<RoleServer>,
    token: &rmcp::model::ProgressToken,
    elapsed: Duration,
    timeout_ms: u64,
    last_line: &str,
) {
    let secs = elapsed.as_secs_f64();
    let mut message = format!("running for {secs:.0} s");
    if !last_line.is_empty() {
        message.push_str(": ");
        message.push_str(last_line);
    }
    let mut param = ProgressNotificationParam::new(token.clone(), secs).with_message(message);
    if timeout_ms > 0 {
        param = param.with_total(timeout_ms as f64 / 1000.0);
    }
    // A client that cannot take it does not stop the command.
    if let Err(e) = peer.notify_progress(param).await {
        tracing::debug!(error = %e, "progress notification not sent");
    }
}
