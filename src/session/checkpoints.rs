//! A session's checkpoints and changes: taking, listing, restoring and
//! deleting checkpoints, and what changed since the start or a checkpoint,
//! each call journaled. A restore is refused while a command runs, unless
//! the caller asks for the sandbox to be reset first (which stops every
//! process in it).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::error::Error;
use super::failure;
use super::tools::Session;
use crate::workspace::history::{ChangesOutput, CheckpointInfo, Created, RestoreOutput};
use crate::workspace::tree::changes::Bounds;

/// Longest label a checkpoint may carry, in bytes.
pub const MAX_LABEL_BYTES: usize = 200;

/// How long a restore waits for writes in flight (and the commands a reset
/// stopped) to end.
const RESTORE_WAIT: Duration = Duration::from_secs(15);

/// A restore done, and whether commands were stopped for it.
#[derive(Debug, Clone)]
pub struct Restore {
    /// What the restore did.
    pub output: RestoreOutput,
    /// Commands that were running and were stopped (by a sandbox reset).
    pub stopped_commands: usize,
}

impl Session {
    /// CreateCheckpoint.
    pub async fn create_checkpoint(&self, label: String) -> Result<Created, failure::Error> {
        let started = Instant::now();
        let summary = format!("{label:?}");
        let result = async {
            if label.len() > MAX_LABEL_BYTES || label.chars().any(char::is_control) {
                return Err(Error::InvalidArgument {
                    field: "label",
                    why: format!(
                        "it must be at most {MAX_LABEL_BYTES} bytes, without control characters"
                    ),
                }
                .into());
            }
            self.history.begin().await;
            self.history.create(label).await.map_err(Into::into)
        }
        .await;
        self.journaled("CreateCheckpoint", &summary, started, result, |c| {
            format!(
                "checkpoint {}: {} files, {} bytes, {} bytes copied",
                c.checkpoint.id, c.checkpoint.files, c.checkpoint.bytes, c.copied_bytes
            )
        })
    }

    /// ListCheckpoints.
    pub async fn list_checkpoints(&self) -> Vec<CheckpointInfo> {
        let started = Instant::now();
        let list = self.history.list().await;
        self.journal.ok(
            "ListCheckpoints",
            "",
            started,
            format!("{} checkpoints", list.len()),
        );
        list
    }

    /// DeleteCheckpoint.
    pub async fn delete_checkpoint(&self, id: &str) -> Result<CheckpointInfo, failure::Error> {
        let started = Instant::now();
        let result = self.history.delete(id).await.map_err(Into::into);
        self.journaled("DeleteCheckpoint", id, started, result, |c| {
            format!("checkpoint {} deleted", c.id)
        })
    }

    /// RestoreCheckpoint: refused while a command runs unless
    /// `stop_commands`, which resets the sandbox first.
    pub async fn restore_checkpoint(
        &self,
        id: &str,
        stop_commands: bool,
    ) -> Result<Restore, failure::Error> {
        let started = Instant::now();
        let summary = format!("{id} stop_commands {stop_commands}");
        let result = self.restore_inner(id, stop_commands).await;
        match &result {
            Ok(r) => {
                let o = &r.output.restored;
                self.journal.changed_tree(
                    "RestoreCheckpoint",
                    &summary,
                    started,
                    format!(
                        "restored {id}: {} written, {} removed, {} directories made, {} modes set; digest {}",
                        o.written, o.removed, o.dirs_made, o.modes, r.output.digest
                    ),
                );
            }
            Err(e) => self.refused("RestoreCheckpoint", &summary, started, e),
        }
        result
    }

    async fn restore_inner(&self, id: &str, stop: bool) -> Result<Restore, failure::Error> {
        let policy = self.policy();
        policy
            .check_mutation("RestoreCheckpoint")
            .map_err(Error::Denied)?;
        // Refused before anything is stopped: an unknown id stops nothing.
        self.history.info(id).await?;
        let running = self.running.load(Ordering::SeqCst) + self.processes.running().len();
        if running > 0 && !stop {
            return Err(Error::CommandRunning { running }.into());
        }
        if running > 0 {
            self.processes.ending_with_sandbox(super::tools::NOTE_RESET);
            self.sandbox.reset(true).await?;
            self.set_sandbox_status(None);
        }
        self.history.begin().await;
        let output = self.history.restore(id, RESTORE_WAIT, policy).await?;
        Ok(Restore {
            output,
            stopped_commands: running,
        })
    }

    /// GetChanges: since checkpoint `since`, or since the session began.
    pub async fn changes(
        &self,
        since: &str,
        max_patch_bytes: u64,
    ) -> Result<ChangesOutput, failure::Error> {
        let started = Instant::now();
        let summary = if since.is_empty() {
            "since the start".to_string()
        } else {
            format!("since {since}")
        };
        let cfg = &self.config;
        let result = match cfg.pick_patch_bytes(max_patch_bytes) {
            Ok(max_patch_bytes) => {
                let bounds = Bounds {
                    max_changes: cfg.history.max_changes,
                    max_patch_bytes,
                    max_file_bytes: cfg.limits.max_file_bytes,
                    diff_time: Duration::from_secs(2),
                };
                self.history
                    .changes(since, bounds)
                    .await
                    .map_err(Into::into)
            }
            Err(e) => Err(e.into()),
        };
        self.journaled("GetChanges", &summary, started, result, |c| {
            format!(
                "{} changes, patch {} bytes",
                c.changes.changes.len(),
                c.changes.patch.len()
            )
        })
    }
}
