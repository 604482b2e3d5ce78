//! What a caller is told when a checkpoint or the changes since one fail:
//! part of the one table in [`super`].

use tonic::Code;

use super::{Described, UNCHANGED, reason, scan_status, status};
use crate::workspace::history;

pub(super) fn history_status(err: &history::Error) -> Described {
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
        H::Denied(denial) => super::policy::denial_status(denial),
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
