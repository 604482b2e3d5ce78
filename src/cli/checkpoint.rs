//! `sandboxd diff` and `sandboxd checkpoint`: what changed in a session's
//! workspace, as a patch `git apply` takes, and checkpoints to roll back to.

use std::io::Write;

use clap::Subcommand;
use sandboxd::pb;

use super::connect::Client;
use super::print::Stdio;
use super::terminal::Console;

/// The verbs of `sandboxd checkpoint`.
#[derive(Debug, Subcommand)]
pub enum CheckpointCommand {
    /// Take a checkpoint of the whole workspace; prints its id.
    Create {
        /// A label shown by `checkpoint ls`.
        #[arg(default_value = "")]
        label: String,
    },
    /// List the session's checkpoints, oldest first.
    Ls,
    /// Bring the workspace back to a checkpoint, all or nothing.
    Restore {
        /// The checkpoint's id.
        id: String,
        /// Reset the sandbox first if commands are running (every process
        /// in it stops); otherwise a running command makes it refused.
        #[arg(long)]
        stop_commands: bool,
    },
    /// Delete a checkpoint, freeing what only it held.
    Rm {
        /// The checkpoint's id.
        id: String,
    },
}

/// Whether a diff was printed whole.
pub enum Diffed {
    /// Every change is in the patch (binary files aside, which no text
    /// patch carries).
    Whole,
    /// Changes are missing from it: the listing or the patch hit a bound.
    Cut,
}

/// `sandboxd diff`: prints the patch (or, with `stat`, the listing) of the
/// changes since the start or `since`; what the patch lacks is said on
/// stderr.
pub async fn diff(
    c: &mut Client,
    session_id: String,
    since: String,
    max_bytes: u64,
    stat: bool,
    con: &mut Stdio,
) -> Result<Diffed, tonic::Status> {
    let r = c
        .get_changes(pb::GetChangesRequest {
            session_id,
            since_checkpoint: since,
            max_patch_bytes: max_bytes,
        })
        .await?
        .into_inner();
    Ok(changes(con, &r, stat))
}

/// Prints the patch (or, with `stat`, the listing) of `r`; what the patch
/// lacks is said as status lines.
pub fn changes(
    con: &mut Console<impl Write, impl Write>,
    r: &pb::GetChangesResponse,
    stat: bool,
) -> Diffed {
    if stat {
        for ch in &r.changes {
            let mark = match ch.kind() {
                pb::ChangeKind::Added => 'A',
                pb::ChangeKind::Deleted => 'D',
                _ => 'M',
            };
            con.out(format_args!(
                "{mark} {}\n",
                crate::cli::print::name(&ch.path)
            ));
        }
    } else {
        con.out_bytes(&r.patch);
    }
    let mut cut = r.truncated;
    for ch in &r.changes {
        match ch.omitted() {
            pb::OmittedReason::OmittedNone => {}
            pb::OmittedReason::OmittedBinary => con.status(format_args!(
                "note: {} is binary: not in the patch",
                crate::cli::print::name(&ch.path)
            )),
            why => {
                cut = true;
                let why = if why == pb::OmittedReason::OmittedTooLarge {
                    "too large to diff"
                } else {
                    "past the patch size bound (--max-bytes)"
                };
                con.status(format_args!(
                    "warning: {} is {why}: not in the patch",
                    crate::cli::print::name(&ch.path)
                ))
            }
        }
    }
    con.status(format_args!("{}", r.message));
    if cut { Diffed::Cut } else { Diffed::Whole }
}

/// Makes the call of `cmd` and prints its result.
pub async fn call(
    c: &mut Client,
    session_id: String,
    cmd: CheckpointCommand,
    con: &mut Stdio,
) -> Result<(), tonic::Status> {
    match cmd {
        CheckpointCommand::Create { label } => {
            let r = c
                .create_checkpoint(pb::CreateCheckpointRequest { session_id, label })
                .await?
                .into_inner();
            let id = r.checkpoint.map(|cp| cp.checkpoint_id).unwrap_or_default();
            con.out(format_args!("{id}\n"));
            con.status(format_args!("{} in {} ms", r.message, r.duration_ms));
        }
        CheckpointCommand::Ls => {
            let r = c
                .list_checkpoints(pb::ListCheckpointsRequest { session_id })
                .await?
                .into_inner();
            checkpoints(con, &r.checkpoints);
        }
        CheckpointCommand::Restore { id, stop_commands } => {
            let r = c
                .restore_checkpoint(pb::RestoreCheckpointRequest {
                    session_id,
                    checkpoint_id: id,
                    stop_commands,
                })
                .await?
                .into_inner();
            con.out(format_args!("{}\n", r.message));
        }
        CheckpointCommand::Rm { id } => {
            let r = c
                .delete_checkpoint(pb::DeleteCheckpointRequest {
                    session_id,
                    checkpoint_id: id,
                })
                .await?
                .into_inner();
            con.out(format_args!("{}\n", r.message));
        }
    }
    Ok(())
}

/// Prints checkpoints, one a line: id, size and label.
pub fn checkpoints(con: &mut Console<impl Write, impl Write>, list: &[pb::Checkpoint]) {
    for cp in list {
        con.out(format_args!(
            "{}  {} files  {} bytes  {} own  {}\n",
            cp.checkpoint_id, cp.files, cp.bytes, cp.own_bytes, cp.label
        ));
    }
    if list.is_empty() {
        con.status(format_args!("no checkpoints"));
    }
}
