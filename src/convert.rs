//! Every conversion between generated wire types and domain types. Nothing
//! outside this module and `service` sees a `pb` type. Plans and
//! approvals are in `approvals`.

mod approvals;

use crate::session::{DownloadEvent, Restore, Upload};
use crate::workspace::PatchedFile;
use crate::workspace::history::{ChangesOutput, CheckpointInfo, Created};
use crate::workspace::patch::Action as PatchAction;
use crate::workspace::tree::changes::{Kind as ChangeKind, Omitted, Side};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::environment::{self, Environment, Progress, Source};
use crate::journal::{Outcome, Report};
use crate::pb;
use crate::policy::Rules;
use crate::sandbox::{self, Captured, Event, KilledBy};
use crate::session::{Closed, CommandRequest, EnvironmentInfo, Info, NewEnvironment, NewSession};
use crate::workspace::walk::{DirEntry, Kind};
use crate::workspace::{
    CreateOutput, EditOutput, EditSpec, FindOutput, ListOutput, ReadOutput, SearchOutput,
    SearchQuery,
};

fn unix_seconds(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs())
}

impl From<pb::CreateSessionRequest> for NewSession {
    fn from(r: pb::CreateSessionRequest) -> Self {
        NewSession {
            workspace_path: (!r.workspace_path.is_empty()).then_some(r.workspace_path),
            ttl: Duration::from_secs(r.ttl_seconds),
            default_timeout: Duration::from_millis(r.default_timeout_ms),
            image: (!r.image.is_empty()).then_some(r.image),
            environment: (!r.environment.is_empty()).then_some(r.environment),
            limits: r.limits.map(Into::into).unwrap_or_default(),
            env: r.env.into_iter().collect(),
            rules: {
                let p = r.policy.unwrap_or_default();
                Rules {
                    read_only: r.read_only || p.read_only,
                    deny_writes: p.deny_writes,
                    allow_writes: p.allow_writes,
                    guard_patterns: p.guard_patterns,
                    ask_writes: p.ask_writes,
                    ask_commands: p.ask_commands,
                    ask_tools: p.ask_tools,
                    // Only an approved plan sets it; a caller's is refused.
                    plan_files: (!p.plan_files.is_empty()).then_some(p.plan_files),
                }
            },
            unattended: r.unattended,
        }
    }
}

impl From<Info> for pb::Session {
    fn from(i: Info) -> Self {
        pb::Session {
            session_id: i.id,
            workspace_path: i.workspace_path.display().to_string(),
            owns_workspace: i.owns_workspace,
            ttl_seconds: i.ttl.as_secs(),
            default_timeout_ms: i.default_timeout.as_millis() as u64,
            created_at: unix_seconds(i.created),
            last_used_at: unix_seconds(i.last_used),
            image: i.image,
            container_id: i.container_id.unwrap_or_default(),
            limits: Some(i.limits.into()),
            sandbox_status: i.sandbox_status.unwrap_or_default(),
            policy: Some(i.rules.into()),
            environment: i.environment.unwrap_or_default(),
            notes: i.notes,
            session_token: i.session_token.unwrap_or_default(),
            unattended: i.unattended,
            plan: i.plan.map(Into::into),
        }
    }
}

impl TryFrom<pb::BuildEnvironmentRequest> for NewEnvironment {
    type Error = environment::Error;

    fn try_from(r: pb::BuildEnvironmentRequest) -> Result<Self, Self::Error> {
        let source = match (r.dockerfile.is_empty(), r.setup_script.is_empty()) {
            (false, true) => {
                if !r.base.is_empty() {
                    return Err(environment::Error::InvalidRecipe(
                        "base goes with a setup script; a Dockerfile names its base in FROM".into(),
                    ));
                }
                Source::Dockerfile {
                    text: r.dockerfile,
                    context: r.context,
                }
            }
            (true, false) => {
                if !r.context.is_empty() {
                    return Err(environment::Error::InvalidRecipe(
                        "a setup script takes no context; write a Dockerfile to COPY files".into(),
                    ));
                }
                Source::Setup {
                    script: r.setup_script,
                    base: (!r.base.is_empty()).then_some(r.base),
                }
            }
            (false, false) => {
                return Err(environment::Error::InvalidRecipe(
                    "give a dockerfile or a setup_script, not both".into(),
                ));
            }
            (true, true) => {
                return Err(environment::Error::InvalidRecipe(
                    "give a dockerfile (with its context) or a setup_script".into(),
                ));
            }
        };
        Ok(NewEnvironment {
            name: r.name,
            source,
            timeout: Duration::from_secs(r.timeout_seconds),
            output_cap: r.output_cap,
        })
    }
}

impl From<Environment> for pb::Environment {
    fn from(e: Environment) -> Self {
        pb::Environment {
            name: e.name,
            image: e.image,
            image_id: e.image_id,
            key: e.key,
            base: e.base,
            created_at: e.created,
            size_bytes: e.size,
            sessions: Vec::new(),
        }
    }
}

impl From<EnvironmentInfo> for pb::Environment {
    fn from(e: EnvironmentInfo) -> Self {
        pb::Environment {
            sessions: e.sessions,
            ..e.environment.into()
        }
    }
}

impl From<Progress> for pb::BuildEnvironmentEvent {
    fn from(p: Progress) -> Self {
        use pb::build_environment_event::Event as E;
        let event = match p {
            Progress::Joined => E::Joined(pb::BuildJoined {}),
            Progress::Step {
                number,
                total,
                instruction,
            } => E::Step(pb::BuildStep {
                number,
                total,
                instruction,
            }),
            Progress::Output(mut text) => {
                text.push('\n');
                E::Output(pb::BuildOutput { text })
            }
            Progress::Done(b) => E::Done(pb::BuildDone {
                environment: Some(b.environment.into()),
                cached: b.cached,
                duration_ms: b.duration.as_millis() as u64,
                output_bytes: b.output_bytes,
                output_truncated: b.output_truncated,
            }),
        };
        pb::BuildEnvironmentEvent { event: Some(event) }
    }
}

impl From<Closed> for pb::CloseSessionResponse {
    fn from(c: Closed) -> Self {
        let message = if c.workspace_removed {
            format!("closed session {}; its workspace was removed", c.id)
        } else {
            format!(
                "closed session {}; the workspace directory was left in place",
                c.id
            )
        };
        let report = (c.id.clone(), c.report).into();
        pb::CloseSessionResponse {
            session_id: c.id,
            workspace_removed: c.workspace_removed,
            message,
            report: Some(report),
        }
    }
}

impl From<ReadOutput> for pb::ReadFileResponse {
    fn from(o: ReadOutput) -> Self {
        pb::ReadFileResponse {
            path: o.path,
            content: o.content,
            first_line: o.first_line,
            last_line: o.last_line,
            total_lines: o.total_lines,
            sha256: o.sha256,
            truncated: o.truncated,
            size_bytes: o.size_bytes,
            message: o.message,
        }
    }
}

impl From<CreateOutput> for pb::CreateFileResponse {
    fn from(o: CreateOutput) -> Self {
        pb::CreateFileResponse {
            path: o.path,
            sha256: o.sha256,
            message: o.message,
            total_lines: o.total_lines,
            rejected: None,
        }
    }
}

impl From<pb::Edit> for EditSpec {
    fn from(e: pb::Edit) -> Self {
        EditSpec {
            old: e.old_string,
            new: e.new_string,
            replace_all: e.replace_all,
        }
    }
}

impl From<EditOutput> for pb::EditFileResponse {
    fn from(o: EditOutput) -> Self {
        pb::EditFileResponse {
            path: o.path,
            replacements: o.replacements,
            first_changed_line: o.first_changed_line,
            line_delta: o.line_delta,
            diff: o.diff,
            sha256: o.sha256,
            message: o.message,
            diff_truncated: o.diff_truncated,
            rejected: None,
        }
    }
}

impl From<Kind> for pb::dir_entry::Kind {
    fn from(k: Kind) -> Self {
        match k {
            Kind::File => pb::dir_entry::Kind::File,
            Kind::Dir => pb::dir_entry::Kind::Dir,
            Kind::Symlink => pb::dir_entry::Kind::Symlink,
            Kind::Other => pb::dir_entry::Kind::Other,
        }
    }
}

impl From<DirEntry> for pb::DirEntry {
    fn from(e: DirEntry) -> Self {
        pb::DirEntry {
            name: e.name,
            kind: pb::dir_entry::Kind::from(e.kind).into(),
            size_bytes: e.size,
        }
    }
}

impl From<ListOutput> for pb::ListDirResponse {
    fn from(o: ListOutput) -> Self {
        pb::ListDirResponse {
            path: o.path,
            entries: o.entries.into_iter().map(Into::into).collect(),
            truncated: o.truncated,
        }
    }
}

impl From<FindOutput> for pb::FindFilesResponse {
    fn from(o: FindOutput) -> Self {
        pb::FindFilesResponse {
            paths: o.paths,
            truncated: o.truncated,
        }
    }
}

impl From<pb::SearchFilesRequest> for SearchQuery {
    fn from(r: pb::SearchFilesRequest) -> Self {
        SearchQuery {
            pattern: r.pattern,
            path: r.path,
            glob: r.glob,
            case_insensitive: r.case_insensitive,
            limit: r.limit,
        }
    }
}

impl From<SearchOutput> for pb::SearchFilesResponse {
    fn from(o: SearchOutput) -> Self {
        pb::SearchFilesResponse {
            matches: o
                .matches
                .into_iter()
                .map(|m| pb::SearchMatch {
                    path: m.path,
                    line: m.line,
                    text: m.text,
                })
                .collect(),
            truncated: o.truncated,
            files_searched: o.files_searched,
        }
    }
}

impl From<pb::Limits> for sandbox::Limits {
    fn from(l: pb::Limits) -> Self {
        sandbox::Limits {
            memory_bytes: l.memory_bytes,
            nano_cpus: l.nano_cpus,
            pids: l.pids,
            disk_bytes: l.disk_bytes,
            inodes: l.inodes,
        }
    }
}

impl From<sandbox::Limits> for pb::Limits {
    fn from(l: sandbox::Limits) -> Self {
        pb::Limits {
            memory_bytes: l.memory_bytes,
            nano_cpus: l.nano_cpus,
            pids: l.pids,
            disk_bytes: l.disk_bytes,
            inodes: l.inodes,
        }
    }
}

impl From<crate::session::Reset> for pb::ResetSandboxResponse {
    fn from(r: crate::session::Reset) -> Self {
        pb::ResetSandboxResponse {
            session_id: r.id,
            container_id: r.container_id,
            message: r.message,
        }
    }
}

impl From<pb::RunCommandRequest> for CommandRequest {
    fn from(r: pb::RunCommandRequest) -> Self {
        CommandRequest {
            command: r.command,
            cwd: r.cwd,
            timeout: Duration::from_millis(r.timeout_ms),
            env: r.env.into_iter().collect(),
            stdout_cap: r.stdout_cap,
            stderr_cap: r.stderr_cap,
        }
    }
}

impl From<KilledBy> for pb::KilledBy {
    fn from(k: KilledBy) -> Self {
        match k {
            KilledBy::None => pb::KilledBy::None,
            KilledBy::ProcessGroupTerm => pb::KilledBy::ProcessGroupTerm,
            KilledBy::ProcessGroupKill => pb::KilledBy::ProcessGroupKill,
            KilledBy::Container => pb::KilledBy::Container,
            KilledBy::ContainerFailed => pb::KilledBy::ContainerFailed,
        }
    }
}

impl From<Captured> for pb::StreamResult {
    fn from(c: Captured) -> Self {
        pb::StreamResult {
            text: c.text,
            total_bytes: c.total_bytes,
            truncated: c.truncated,
            tail: c.tail,
            omitted_bytes: c.omitted_bytes,
        }
    }
}

impl From<Event> for pb::RunCommandEvent {
    fn from(e: Event) -> Self {
        use pb::run_command_event::Event as E;
        let event = match e {
            Event::Started {
                container_id,
                cwd,
                timeout,
            } => E::Started(pb::CommandStarted {
                container_id,
                cwd,
                timeout_ms: timeout.as_millis() as u64,
            }),
            Event::Stdout(data) => E::Stdout(pb::OutputChunk { data }),
            Event::Stderr(data) => E::Stderr(pb::OutputChunk { data }),
            Event::Exit(r) => E::Exit(pb::CommandExit {
                exit_code: r.exit_code,
                timed_out: r.timed_out,
                killed_by: pb::KilledBy::from(r.killed_by).into(),
                duration_ms: r.duration.as_millis() as u64,
                stdout: Some(r.stdout.into()),
                stderr: Some(r.stderr.into()),
                cancelled: r.cancelled,
                oom_killed: r.oom_killed,
                pids_exhausted: r.pids_exhausted,
                notes: r.notes,
            }),
        };
        pb::RunCommandEvent { event: Some(event) }
    }
}

impl From<Rules> for pb::Policy {
    fn from(r: Rules) -> Self {
        pb::Policy {
            read_only: r.read_only,
            deny_writes: r.deny_writes,
            allow_writes: r.allow_writes,
            guard_patterns: r.guard_patterns,
            ask_writes: r.ask_writes,
            ask_commands: r.ask_commands,
            ask_tools: r.ask_tools,
            plan_files: r.plan_files.unwrap_or_default(),
        }
    }
}

impl From<(String, Report)> for pb::SessionReport {
    fn from((session_id, r): (String, Report)) -> Self {
        let plan = r.plan.unwrap_or_default();
        pb::SessionReport {
            session_id,
            files_written: r
                .files_written
                .into_iter()
                .map(|w| pb::FileWrite {
                    seq: w.seq,
                    tool: w.tool.to_string(),
                    path: w.path,
                    sha256_before: w.sha256_before.unwrap_or_default(),
                    sha256_after: w.sha256_after,
                })
                .collect(),
            commands: r
                .commands
                .into_iter()
                .map(|c| pb::CommandRecord {
                    seq: c.seq,
                    command: c.command,
                    cwd: c.cwd,
                    exit_code: c.exit_code,
                    timed_out: c.timed_out,
                    killed_by: pb::KilledBy::from(c.killed_by).into(),
                    oom_killed: c.oom_killed,
                    cancelled: c.cancelled,
                    duration_ms: c.duration_ms,
                    interrupted: c.interrupted,
                })
                .collect(),
            denied: r
                .refused
                .into_iter()
                .map(|d| pb::RefusedCall {
                    seq: d.seq,
                    tool: d.tool.to_string(),
                    summary: d.summary,
                    reason: d.reason.to_string(),
                    message: d.message,
                })
                .collect(),
            touched: r.touched,
            planned_touched: plan.planned_touched,
            unplanned: plan.unplanned,
            untouched: plan.untouched,
            verification: r.verification.map(|v| pb::Verification {
                command: v.command,
                ran: v.ran,
                ran_after_last_write: v.ran_after_last_write,
                exit_code: v.exit_code.unwrap_or(-1),
                passed: v.passed,
            }),
            journal: r
                .entries
                .into_iter()
                .map(|e| {
                    let (outcome, detail) = match e.outcome {
                        Outcome::Ok { detail } => ("ok".to_string(), detail),
                        Outcome::Refused { reason, message } => (reason.to_string(), message),
                    };
                    pb::JournalEntry {
                        seq: e.seq,
                        at_ms: e.at_ms,
                        tool: e.tool.to_string(),
                        summary: e.summary,
                        outcome,
                        detail,
                        duration_ms: e.duration_ms,
                    }
                })
                .collect(),
            journal_dropped: r.dropped,
            journal_file_lines_dropped: r.file_lines_dropped,
            checkpoints: r.checkpoints.into_iter().map(Into::into).collect(),
            plan: None,
            changed_unplanned: Vec::new(),
            changes_unchecked: String::new(),
        }
    }
}

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

impl From<Upload> for pb::UploadArchiveResponse {
    fn from(u: Upload) -> Self {
        let d = &u.uploaded;
        let shown = if u.destination.is_empty() {
            ".".to_string()
        } else {
            u.destination.clone()
        };
        let mut message = format!(
            "extracted into {shown}: {} files, {} directories, {} symlinks, {} bytes",
            d.files, d.dirs, d.symlinks, d.bytes
        );
        if d.replaced > 0 {
            message.push_str(&format!("; {} existing files replaced", d.replaced));
        }
        if d.stripped > 0 {
            message.push_str(&format!(
                "; set-id bits dropped from {} entries",
                d.stripped
            ));
        }
        pb::UploadArchiveResponse {
            destination: u.destination,
            files: d.files,
            directories: d.dirs,
            symlinks: d.symlinks,
            bytes: d.bytes,
            stripped: d.stripped,
            replaced: d.replaced,
            duration_ms: u.duration.as_millis() as u64,
            message,
        }
    }
}

impl From<DownloadEvent> for pb::DownloadArchiveResponse {
    fn from(e: DownloadEvent) -> Self {
        use pb::download_archive_response::Part;
        let part = match e {
            DownloadEvent::Chunk(data) => Part::Chunk(data),
            DownloadEvent::Done { summary, duration } => {
                let mut message = format!(
                    "{} files, {} directories, {} symlinks, {} bytes",
                    summary.files, summary.dirs, summary.symlinks, summary.bytes
                );
                if summary.skipped_count > 0 {
                    message.push_str(&format!(
                        "; {} paths left out (see skipped)",
                        summary.skipped_count
                    ));
                }
                Part::Done(pb::DownloadSummary {
                    files: summary.files,
                    directories: summary.dirs,
                    symlinks: summary.symlinks,
                    bytes: summary.bytes,
                    skipped: summary
                        .skipped
                        .into_iter()
                        .map(|(path, why)| pb::SkippedPath {
                            path,
                            why: why.to_string(),
                        })
                        .collect(),
                    skipped_count: summary.skipped_count,
                    duration_ms: duration.as_millis() as u64,
                    message,
                })
            }
        };
        pb::DownloadArchiveResponse { part: Some(part) }
    }
}

impl From<Vec<PatchedFile>> for pb::ApplyPatchResponse {
    fn from(files: Vec<PatchedFile>) -> Self {
        let lines: Vec<String> = files
            .iter()
            .map(|f| {
                let what = match f.action {
                    PatchAction::Modify => "changed",
                    PatchAction::Create => "created",
                    PatchAction::Delete => "deleted",
                    PatchAction::Rename => "renamed",
                };
                match &f.old_path {
                    Some(old) => format!("{what} {old} -> {} ({:+} lines)", f.path, f.line_delta),
                    None => format!("{what} {} ({:+} lines)", f.path, f.line_delta),
                }
            })
            .collect();
        let message = format!(
            "applied the patch to {} files: {}",
            files.len(),
            lines.join("; ")
        );
        pb::ApplyPatchResponse {
            files: files
                .into_iter()
                .map(|f| pb::PatchedFile {
                    path: f.path,
                    action: match f.action {
                        PatchAction::Modify => pb::PatchAction::Modified,
                        PatchAction::Create => pb::PatchAction::Created,
                        PatchAction::Delete => pb::PatchAction::Deleted,
                        PatchAction::Rename => pb::PatchAction::Renamed,
                    }
                    .into(),
                    old_path: f.old_path.unwrap_or_default(),
                    sha256_before: f.sha256_before.unwrap_or_default(),
                    sha256_after: f.sha256_after.unwrap_or_default(),
                    hunks: f.hunks,
                    line_delta: f.line_delta,
                })
                .collect(),
            message,
            rejected: None,
        }
    }
}
