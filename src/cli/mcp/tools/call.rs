//! Each call of a tool made on the session over gRPC, and its reply.

use std::time::{Duration, Instant};

use rmcp::model::{JsonObject, ProgressNotificationParam};
use rmcp::service::RequestContext;
use rmcp::{Peer, RoleServer};
use sandboxd::pb;
use serde_json::{Value, json};

use crate::cli::connect::Client;
use crate::cli::mcp::{plan, render};

use super::args::*;
use super::{Refused, Reply, Session, table};

/// The arguments of a call as `T`, or a refusal saying what is wrong.
pub(super) fn args<T: serde::de::DeserializeOwned>(
    tool: &str,
    raw: JsonObject,
) -> Result<T, Refused> {
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
            Ok(Reply::text(render::created(&r)))
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
            let what = format!("run_command of {}", sandboxd::text::code_span(&a.command));
            let req = pb::RunCommandRequest {
                session_id: sid,
                command: a.command,
                cwd: a.cwd.unwrap_or_default(),
                timeout_ms: or_zero(a.timeout_seconds).saturating_mul(1000),
                env: a.env.unwrap_or_default().into_iter().collect(),
                stdout_cap: cap,
                stderr_cap: cap,
                output: pb::OutputMode::Both.into(),
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
                text: format!("{} (checkpoint_id {id})", render::safe(&r.message)),
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
            Ok(Reply::text(render::safe(&r.message)))
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
        name if super::process::TOOLS.contains(&name) => {
            super::process::call(session, name, raw, ctx).await
        }
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
    // The reply is the exit's result; chunks are read only for the
    // progress notes a caller asked for.
    let mut req = req;
    if progress.is_none() {
        req.output = pb::OutputMode::Result.into();
    }
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
