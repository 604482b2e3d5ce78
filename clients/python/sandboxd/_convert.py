"""Protobuf messages to the dataclasses of :mod:`sandboxd.types`."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any, Optional

from . import types as t
from .v1 import sandbox_pb2 as pb

_KILLED_BY: dict[int, t.KilledBy] = {
    pb.KILLED_BY_NONE: t.KilledBy.NONE,
    pb.KILLED_BY_PROCESS_GROUP_TERM: t.KilledBy.PROCESS_GROUP_TERM,
    pb.KILLED_BY_PROCESS_GROUP_KILL: t.KilledBy.PROCESS_GROUP_KILL,
    pb.KILLED_BY_CONTAINER: t.KilledBy.CONTAINER,
    pb.KILLED_BY_CONTAINER_FAILED: t.KilledBy.CONTAINER_FAILED,
}
_ENTRY_KIND: dict[int, t.EntryKind] = {
    pb.DirEntry.KIND_FILE: t.EntryKind.FILE,
    pb.DirEntry.KIND_DIR: t.EntryKind.DIR,
    pb.DirEntry.KIND_SYMLINK: t.EntryKind.SYMLINK,
    pb.DirEntry.KIND_OTHER: t.EntryKind.OTHER,
}
_CHANGE_KIND: dict[int, t.ChangeKind] = {
    pb.CHANGE_KIND_ADDED: t.ChangeKind.ADDED,
    pb.CHANGE_KIND_MODIFIED: t.ChangeKind.MODIFIED,
    pb.CHANGE_KIND_DELETED: t.ChangeKind.DELETED,
}
_OMITTED: dict[int, t.OmittedReason] = {
    pb.OMITTED_BINARY: t.OmittedReason.BINARY,
    pb.OMITTED_TOO_LARGE: t.OmittedReason.TOO_LARGE,
    pb.OMITTED_PATCH_FULL: t.OmittedReason.PATCH_FULL,
    pb.OMITTED_GIT_INTERNAL: t.OmittedReason.GIT_INTERNAL,
}
_PATCH_ACTION: dict[int, t.PatchAction] = {
    pb.PATCH_ACTION_MODIFIED: t.PatchAction.MODIFIED,
    pb.PATCH_ACTION_CREATED: t.PatchAction.CREATED,
    pb.PATCH_ACTION_DELETED: t.PatchAction.DELETED,
    pb.PATCH_ACTION_RENAMED: t.PatchAction.RENAMED,
}

_PROCESS_STATE: dict[int, t.ProcessState] = {
    pb.PROCESS_STATE_RUNNING: t.ProcessState.RUNNING,
    pb.PROCESS_STATE_EXITED: t.ProcessState.EXITED,
    pb.PROCESS_STATE_KILLED: t.ProcessState.KILLED,
    pb.PROCESS_STATE_INTERRUPTED: t.ProcessState.INTERRUPTED,
    pb.PROCESS_STATE_FAILED: t.ProcessState.FAILED,
}
_READY_STATE: dict[int, t.ReadyState] = {
    pb.READY_STATE_UNSPECIFIED: t.ReadyState.NOT_ASKED,
    pb.READY_STATE_READY: t.ReadyState.READY,
    pb.READY_STATE_EXITED: t.ReadyState.EXITED,
    pb.READY_STATE_TIMED_OUT: t.ReadyState.TIMED_OUT,
}


def _secs(ms: int) -> float:
    return ms / 1000.0


def _time(epoch_seconds: float) -> datetime:
    return datetime.fromtimestamp(epoch_seconds, tz=timezone.utc)


def killed_by(v: int) -> t.KilledBy:
    return _KILLED_BY.get(v, t.KilledBy.UNKNOWN)


def session(m: Any) -> t.SessionInfo:
    return t.SessionInfo(
        id=m.session_id,
        workspace_path=m.workspace_path,
        owns_workspace=m.owns_workspace,
        image=m.image,
        environment=m.environment,
        container_id=m.container_id,
        ttl=m.ttl_seconds,
        created_at=_time(m.created_at),
        last_used_at=_time(m.last_used_at),
        limits=t.Limits(
            memory_bytes=m.limits.memory_bytes,
            nano_cpus=m.limits.nano_cpus,
            pids=m.limits.pids,
            disk_bytes=m.limits.disk_bytes,
            inodes=m.limits.inodes,
        ),
        policy=t.Policy(
            read_only=m.policy.read_only,
            plan_mode=m.policy.plan_mode,
            deny_writes=tuple(m.policy.deny_writes),
            allow_writes=tuple(m.policy.allow_writes),
            guard_patterns=tuple(m.policy.guard_patterns),
            ask_writes=tuple(m.policy.ask_writes),
            ask_commands=tuple(m.policy.ask_commands),
            ask_tools=tuple(m.policy.ask_tools),
            plan_files=tuple(m.policy.plan_files),
        ),
        default_timeout=_secs(m.default_timeout_ms),
        sandbox_status=m.sandbox_status,
        notes=tuple(m.notes),
        session_token=m.session_token,
        unattended=m.unattended,
        plan=approved_plan(m.plan) if m.HasField("plan") else None,
    )


def read(m: Any) -> t.ReadResult:
    return t.ReadResult(
        path=m.path,
        content=m.content,
        first_line=m.first_line,
        last_line=m.last_line,
        total_lines=m.total_lines,
        sha256=m.sha256,
        truncated=m.truncated,
        size_bytes=m.size_bytes,
        message=m.message,
    )


def _rejected(m: Any) -> Optional[t.Rejection]:
    """The ``rejected`` field of a tool's response, if set."""
    return rejection(m.rejected) if m.HasField("rejected") else None


def create(m: Any) -> t.CreateResult:
    return t.CreateResult(
        path=m.path, sha256=m.sha256, total_lines=m.total_lines, message=m.message, rejected=_rejected(m)
    )


def edit(m: Any) -> t.EditResult:
    return t.EditResult(
        path=m.path,
        replacements=m.replacements,
        first_changed_line=m.first_changed_line,
        line_delta=m.line_delta,
        diff=m.diff,
        diff_truncated=m.diff_truncated,
        sha256=m.sha256,
        message=m.message,
        rejected=_rejected(m),
    )


def listing(m: Any) -> t.Listing:
    return t.Listing(
        path=m.path,
        entries=tuple(
            t.DirEntry(name=e.name, kind=_ENTRY_KIND.get(e.kind, t.EntryKind.UNKNOWN), size_bytes=e.size_bytes)
            for e in m.entries
        ),
        truncated=m.truncated,
    )


def find(m: Any) -> t.FindResult:
    return t.FindResult(paths=tuple(m.paths), truncated=m.truncated)


def search(m: Any) -> t.SearchResult:
    return t.SearchResult(
        matches=tuple(t.SearchMatch(path=x.path, line=x.line, text=x.text) for x in m.matches),
        truncated=m.truncated,
        files_searched=m.files_searched,
    )


def patch(m: Any) -> t.PatchResult:
    return t.PatchResult(
        files=tuple(
            t.PatchedFile(
                path=f.path,
                action=_PATCH_ACTION.get(f.action, t.PatchAction.UNKNOWN),
                old_path=f.old_path,
                sha256_before=f.sha256_before,
                sha256_after=f.sha256_after,
                hunks=f.hunks,
                line_delta=f.line_delta,
            )
            for f in m.files
        ),
        message=m.message,
        rejected=_rejected(m),
    )


def output(m: Any) -> t.Output:
    return t.Output(
        text=m.text,
        tail=m.tail,
        total_bytes=m.total_bytes,
        truncated=m.truncated,
        omitted_bytes=m.omitted_bytes,
    )


def started(m: Any) -> t.Started:
    return t.Started(container_id=m.container_id, cwd=m.cwd, timeout=_secs(m.timeout_ms))


def command_result(m: Any, command: str, began: Optional[t.Started]) -> t.CommandResult:
    return t.CommandResult(
        command=command,
        exit_code=m.exit_code,
        timed_out=m.timed_out,
        killed_by=killed_by(m.killed_by),
        duration=_secs(m.duration_ms),
        stdout=output(m.stdout),
        stderr=output(m.stderr),
        cancelled=m.cancelled,
        oom_killed=m.oom_killed,
        pids_exhausted=m.pids_exhausted,
        notes=tuple(m.notes),
        started=began,
    )


def checkpoint(m: Any) -> t.Checkpoint:
    return t.Checkpoint(
        id=m.checkpoint_id,
        label=m.label,
        created_at=_time(m.created_at),
        files=m.files,
        bytes=m.bytes,
        own_bytes=m.own_bytes,
        digest=m.digest,
    )


def checkpoint_created(m: Any) -> t.CheckpointCreated:
    c = m.checkpoint
    return t.CheckpointCreated(
        id=c.checkpoint_id,
        label=c.label,
        created_at=_time(c.created_at),
        files=c.files,
        bytes=c.bytes,
        own_bytes=c.own_bytes,
        digest=c.digest,
        copied_bytes=m.copied_bytes,
        store_bytes=m.store_bytes,
        store_budget=m.store_budget,
        duration=_secs(m.duration_ms),
        message=m.message,
    )


def restore(m: Any) -> t.RestoreResult:
    return t.RestoreResult(
        checkpoint=checkpoint(m.checkpoint),
        files_written=m.files_written,
        removed=m.removed,
        directories_made=m.directories_made,
        modes_changed=m.modes_changed,
        digest=m.digest,
        stopped_commands=m.stopped_commands,
        duration=_secs(m.duration_ms),
        message=m.message,
    )


def changes(m: Any) -> t.Changes:
    return t.Changes(
        since_checkpoint=m.since_checkpoint or None,
        changes=tuple(
            t.FileChange(
                path=c.path,
                kind=_CHANGE_KIND.get(c.kind, t.ChangeKind.UNKNOWN),
                sha256_before=c.sha256_before,
                sha256_after=c.sha256_after,
                mode_before=c.mode_before,
                mode_after=c.mode_after,
                size_before=c.size_before,
                size_after=c.size_after,
                omitted=None if c.omitted == pb.OMITTED_NONE else _OMITTED.get(c.omitted, t.OmittedReason.UNKNOWN),
            )
            for c in m.changes
        ),
        truncated=m.truncated,
        patch=m.patch,
        omitted=m.omitted,
        digest=m.digest,
        duration=_secs(m.duration_ms),
        message=m.message,
    )


def report(m: Any) -> t.Report:
    v = m.verification
    return t.Report(
        session_id=m.session_id,
        files_written=tuple(
            t.FileWrite(seq=w.seq, tool=w.tool, path=w.path, sha256_before=w.sha256_before, sha256_after=w.sha256_after)
            for w in m.files_written
        ),
        commands=tuple(
            t.CommandRecord(
                seq=c.seq,
                command=c.command,
                cwd=c.cwd,
                exit_code=c.exit_code,
                timed_out=c.timed_out,
                killed_by=killed_by(c.killed_by),
                oom_killed=c.oom_killed,
                cancelled=c.cancelled,
                duration=_secs(c.duration_ms),
                interrupted=c.interrupted,
            )
            for c in m.commands
        ),
        denied=tuple(
            t.RefusedCall(seq=d.seq, tool=d.tool, summary=d.summary, reason=d.reason, message=d.message)
            for d in m.denied
        ),
        touched=tuple(m.touched),
        planned_touched=tuple(m.planned_touched),
        unplanned=tuple(m.unplanned),
        untouched=tuple(m.untouched),
        verification=(
            t.Verification(
                command=v.command,
                ran=v.ran,
                ran_after_last_write=v.ran_after_last_write,
                exit_code=v.exit_code,
                passed=v.passed,
            )
            if m.HasField("verification")
            else None
        ),
        journal=tuple(
            t.JournalEntry(
                seq=j.seq,
                at=_time(j.at_ms / 1000.0),
                tool=j.tool,
                summary=j.summary,
                outcome=j.outcome,
                detail=j.detail,
                duration=_secs(j.duration_ms),
            )
            for j in m.journal
        ),
        journal_dropped=m.journal_dropped,
        journal_file_lines_dropped=m.journal_file_lines_dropped,
        checkpoints=tuple(checkpoint(c) for c in m.checkpoints),
        changed_unplanned=tuple(m.changed_unplanned),
        changes_unchecked=m.changes_unchecked,
        plan=approved_plan(m.plan) if m.HasField("plan") else None,
    )


def close(m: Any) -> t.CloseResult:
    return t.CloseResult(
        session_id=m.session_id,
        workspace_removed=m.workspace_removed,
        message=m.message,
        report=report(m.report) if m.HasField("report") else None,
    )


def reset(m: Any) -> t.ResetResult:
    return t.ResetResult(session_id=m.session_id, container_id=m.container_id, message=m.message)


def upload(m: Any) -> t.UploadResult:
    return t.UploadResult(
        destination=m.destination,
        files=m.files,
        directories=m.directories,
        symlinks=m.symlinks,
        bytes=m.bytes,
        stripped=m.stripped,
        replaced=m.replaced,
        duration=_secs(m.duration_ms),
        message=m.message,
    )


def download(data: bytes, m: Any) -> t.Download:
    return t.Download(
        data=data,
        files=m.files,
        directories=m.directories,
        symlinks=m.symlinks,
        bytes=m.bytes,
        skipped=tuple(t.SkippedPath(path=s.path, why=s.why) for s in m.skipped),
        skipped_count=m.skipped_count,
        duration=_secs(m.duration_ms),
        message=m.message,
    )


def environment(m: Any) -> t.Environment:
    return t.Environment(
        name=m.name,
        image=m.image,
        image_id=m.image_id,
        key=m.key,
        base=m.base,
        created_at=_time(m.created_at),
        size_bytes=m.size_bytes,
        sessions=tuple(m.sessions),
    )


def build_event(m: Any) -> Optional[t.BuildEvent]:
    which = m.WhichOneof("event")
    if which == "joined":
        return t.BuildJoined()
    if which == "step":
        return t.BuildStep(number=m.step.number, total=m.step.total, instruction=m.step.instruction)
    if which == "output":
        return t.BuildOutput(text=m.output.text)
    if which == "done":
        d = m.done
        return t.BuildDone(
            environment=environment(d.environment),
            cached=d.cached,
            duration=_secs(d.duration_ms),
            output_bytes=d.output_bytes,
            output_truncated=d.output_truncated,
        )
    return None


def _epoch_ms(ms: int) -> Optional[datetime]:
    return _time(ms / 1000.0) if ms else None


def plan(m: Any) -> t.Plan:
    return t.Plan(
        goal=m.goal,
        steps=tuple(t.PlanStep(description=s.description, files=tuple(s.files)) for s in m.steps),
        verification=m.verification,
        risks=tuple(m.risks),
    )


def withheld(ms: Any) -> tuple[t.WithheldFile, ...]:
    return tuple(t.WithheldFile(path=w.path, rule=w.rule) for w in ms)


def decision(m: Any) -> t.Decision:
    return t.Decision(decided_by=m.decided_by, note=m.note, decided_at=_epoch_ms(m.decided_at_ms))


def approved_plan(m: Any) -> t.ApprovedPlan:
    return t.ApprovedPlan(
        approval_id=m.approval_id,
        plan=plan(m.plan) if m.HasField("plan") else None,
        granted=tuple(m.granted),
        withheld=withheld(m.withheld),
        decision=decision(m.decision) if m.HasField("decision") else None,
    )


def rejection(m: Any) -> t.Rejection:
    return t.Rejection(
        approval_id=m.approval_id,
        reason=m.reason,
        timed_out=m.timed_out,
        decision=decision(m.decision) if m.HasField("decision") else None,
        message=m.message,
    )


def plan_pending(m: Any, message: str) -> t.PlanPending:
    return t.PlanPending(
        approval_id=m.approval_id,
        withheld=withheld(m.withheld),
        expires_at=_epoch_ms(m.expires_at_ms),
        message=message,
    )


def plan_approved(m: Any, message: str) -> t.PlanResult:
    a = approved_plan(m)
    return t.PlanResult(
        approved=True,
        approval_id=a.approval_id,
        granted=a.granted,
        withheld=a.withheld,
        reason="",
        timed_out=False,
        message=message,
        decision=a.decision,
        plan=a.plan,
    )


def plan_rejected(m: Any, message: str, withheld_files: tuple[t.WithheldFile, ...]) -> t.PlanResult:
    r = rejection(m)
    return t.PlanResult(
        approved=False,
        approval_id=r.approval_id,
        granted=(),
        withheld=withheld_files,
        reason=r.reason,
        timed_out=r.timed_out,
        message=message or r.message,
        decision=r.decision,
        plan=None,
    )


def rejected_command(m: Any, command: str, began: Optional[t.Started]) -> t.CommandResult:
    """The result of a command an ``ask`` rule held and a person rejected: it never ran."""
    empty = t.Output(text="", tail="", total_bytes=0, truncated=False, omitted_bytes=0)
    return t.CommandResult(
        command=command,
        exit_code=-1,
        timed_out=False,
        killed_by=t.KilledBy.NONE,
        duration=0.0,
        stdout=empty,
        stderr=empty,
        cancelled=False,
        oom_killed=False,
        pids_exhausted=False,
        notes=(),
        started=began,
        rejected=rejection(m),
    )


def pending_approval(m: Any) -> t.PendingApproval:
    which = m.WhichOneof("what")
    c = m.call
    return t.PendingApproval(
        approval_id=m.approval_id,
        session_id=m.session_id,
        workspace_path=m.workspace_path,
        requested_at=_time(m.requested_at_ms / 1000.0),
        expires_at=_epoch_ms(m.expires_at_ms),
        plan=plan(m.plan) if which == "plan" else None,
        call=(
            t.PendingCall(tool=c.tool, summary=c.summary, rule=c.rule, path=c.path, command=c.command)
            if which == "call"
            else None
        ),
        withheld=withheld(m.withheld),
    )


def decided(m: Any) -> t.DecideResult:
    return t.DecideResult(approval_id=m.approval_id, session_id=m.session_id, outcome=m.outcome, message=m.message)


def process_info(m: Any) -> t.ProcessInfo:
    return t.ProcessInfo(
        id=m.process_id,
        command=m.command,
        cwd=m.cwd,
        state=_PROCESS_STATE.get(m.state, t.ProcessState.UNKNOWN),
        exit_code=m.exit_code,
        killed_by=killed_by(m.killed_by),
        started_at=_time(m.started_at_ms / 1000.0),
        ended_at=_epoch_ms(m.ended_at_ms),
        cpu_time=_secs(m.cpu_ms),
        stdout_bytes=m.stdout_bytes,
        stderr_bytes=m.stderr_bytes,
        pty=m.pty,
        stdin_open=m.stdin_open,
        ready=m.ready,
        notes=tuple(m.notes),
    )


def ready_state(v: int) -> t.ReadyState:
    return _READY_STATE.get(v, t.ReadyState.UNKNOWN)
