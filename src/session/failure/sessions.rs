//! What a caller is told when the session registry refuses or fails a
//! call: part of the one table in [`super`].

use tonic::Code;

use super::{
    Described, approval_not_found_status, denial_status, invalid_plan_status, not_permitted_status,
    process, reason, status, unavailable_status, volume_status,
};
use crate::session::error as session;

pub(super) fn session_status(err: &session::Error) -> Described {
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
                "{running} command(s) or process(es) are running in the session, and a restore under \
                 them would race their writes. Nothing was changed. Wait for the commands to end and \
                 stop the processes (StopProcess), or ask again with stop_commands to reset the \
                 sandbox (stopping every process in it) first."
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
        S::ProcessNotFound { id } => process::not_found(id),
        S::TooManyProcesses { max, running } => process::too_many(*max, running),
        S::TooManyReaders { max, of } => process::too_many_readers(*max, of),
        S::ReaderStalled { secs } => process::reader_stalled(*secs),
        S::RepliesUnread { budget, secs } => status(
            Code::ResourceExhausted,
            reason::REPLIES_UNREAD,
            format!(
                "This session's replies not yet read by its caller hold {} MiB, its budget, and \
                 none was taken for {secs} s. Nothing was read or changed. Read the replies of \
                 the calls you have open (or cancel them), then retry.",
                budget >> 20
            ),
            &[("budget_bytes", budget.to_string())],
        ),
        S::ProcessEnded { id, how } => process::ended(id, how),
        S::ProcessInputClosed { id, never_opened } => process::input_closed(id, *never_opened),
        S::ProcessNotReading { id, written, why } => process::not_reading(id, *written, why),
        S::NoTerminal { id } => process::no_terminal(id),
        S::ProcessesUnavailable(why) => process::unavailable(why),
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
