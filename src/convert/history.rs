//! Conversions of checkpoints, restores and changes between the wire and
//! the domain.

use super::unix_seconds;
use crate::pb;
use crate::session::Restore;
use crate::workspace::history::{ChangesOutput, CheckpointInfo, Created};
use crate::workspace::tree::changes::{Kind as ChangeKind, Omitted, Side};

impl From<CheckpointInfo> for pb::Checkpoint {
    fn from(c: CheckpointInfo) -> Self {
        pb::Checkpoint {
            checkpoint_id: c.id,
            label: c.label,
            created_at: unix_seconds(c.created),
            files: c.files,
            bytes: c.bytes,
            own_bytes: c.own_bytes,
            digest: c.digest,
        }
    }
}

impl From<Created> for pb::CreateCheckpointResponse {
    fn from(c: Created) -> Self {
        let message = format!(
            "checkpoint {} taken: {} files, {} bytes ({} bytes copied; the store keeps {} of {} bytes)",
            c.checkpoint.id,
            c.checkpoint.files,
            c.checkpoint.bytes,
            c.copied_bytes,
            c.store_bytes,
            c.store_budget
        );
        pb::CreateCheckpointResponse {
            checkpoint: Some(c.checkpoint.into()),
            copied_bytes: c.copied_bytes,
            store_bytes: c.store_bytes,
            store_budget: c.store_budget,
            duration_ms: c.duration.as_millis() as u64,
            message,
        }
    }
}

impl From<Restore> for pb::RestoreCheckpointResponse {
    fn from(r: Restore) -> Self {
        let done = r.output.restored;
        let o = r.output;
        let exact = o.digest == o.checkpoint.digest;
        let message = format!(
            "restored checkpoint {}: {} files written, {} removed, {} directories made, {} modes set{}{}",
            o.checkpoint.id,
            done.written,
            done.removed,
            done.dirs_made,
            done.modes,
            if r.stopped_commands > 0 {
                format!(
                    "; {} running commands were stopped by a sandbox reset",
                    r.stopped_commands
                )
            } else {
                String::new()
            },
            if exact {
                "; the workspace matches the checkpoint exactly".to_string()
            } else {
                "; something wrote in the workspace during the restore, so it differs from the checkpoint: restore again".to_string()
            }
        );
        pb::RestoreCheckpointResponse {
            files_written: done.written,
            removed: done.removed,
            directories_made: done.dirs_made,
            modes_changed: done.modes,
            digest: o.digest,
            stopped_commands: r.stopped_commands as u64,
            duration_ms: o.duration.as_millis() as u64,
            checkpoint: Some(o.checkpoint.into()),
            message,
        }
    }
}

impl From<ChangesOutput> for pb::GetChangesResponse {
    fn from(c: ChangesOutput) -> Self {
        let omitted = c.changes.omitted() as u64;
        let n = c.changes.changes.len();
        let since = if c.since.is_empty() {
            "since the session began".to_string()
        } else {
            format!("since checkpoint {}", c.since)
        };
        let mut message = format!(
            "{n} {} changed {since}",
            if n == 1 { "path" } else { "paths" }
        );
        if c.changes.truncated {
            message.push_str(&format!(
                "; the listing stops at {n}: more changed (take a checkpoint of the fixed state and list from there)"
            ));
        }
        if omitted > 0 {
            message.push_str(&format!(
                "; {omitted} are not in the patch (binary, too large, or past max_patch_bytes): see each one's `omitted`"
            ));
        }
        let side = |s: &Option<Side>| {
            s.as_ref()
                .map(|s| (hex::encode(s.sha256), s.mode, s.size))
                .unwrap_or_default()
        };
        pb::GetChangesResponse {
            since_checkpoint: c.since,
            changes: c
                .changes
                .changes
                .into_iter()
                .map(|ch| {
                    let (sha256_before, mode_before, size_before) = side(&ch.before);
                    let (sha256_after, mode_after, size_after) = side(&ch.after);
                    pb::FileChange {
                        path: String::from_utf8_lossy(&ch.path).into_owned(),
                        kind: match ch.kind {
                            ChangeKind::Added => pb::ChangeKind::Added,
                            ChangeKind::Modified => pb::ChangeKind::Modified,
                            ChangeKind::Deleted => pb::ChangeKind::Deleted,
                        }
                        .into(),
                        sha256_before,
                        sha256_after,
                        mode_before,
                        mode_after,
                        size_before,
                        size_after,
                        omitted: match ch.omitted {
                            None => pb::OmittedReason::OmittedNone,
                            Some(Omitted::Binary) => pb::OmittedReason::OmittedBinary,
                            Some(Omitted::TooLarge) => pb::OmittedReason::OmittedTooLarge,
                            Some(Omitted::PatchFull) => pb::OmittedReason::OmittedPatchFull,
                            Some(Omitted::GitInternal) => pb::OmittedReason::OmittedGitInternal,
                        }
                        .into(),
                    }
                })
                .collect(),
            truncated: c.changes.truncated,
            patch: c.changes.patch,
            omitted,
            digest: c.digest,
            duration_ms: c.duration.as_millis() as u64,
            message,
        }
    }
}
