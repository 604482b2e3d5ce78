"""Results of sandboxd calls: plain frozen dataclasses, no protobuf messages.

Durations are float seconds, timestamps timezone-aware datetimes (UTC), and
sequences tuples.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from datetime import datetime
from typing import Literal, NamedTuple, Optional, Union


class _NamedEnum(str, enum.Enum):
    """A str enum with an UNKNOWN member for values newer than this client."""

    def __str__(self) -> str:
        return str(self.value)


class KilledBy(_NamedEnum):
    """What stopped a command."""

    NONE = "none"  #: it ended by itself
    PROCESS_GROUP_TERM = "process_group_term"  #: SIGTERM to its process group
    PROCESS_GROUP_KILL = "process_group_kill"  #: SIGKILL to its process group
    CONTAINER = "container"  #: the container was killed (the next command gets a fresh one)
    #: the engine failed to kill the container; it is removed when the engine answers
    CONTAINER_FAILED = "container_failed"
    UNKNOWN = "unknown"


class EntryKind(_NamedEnum):
    """Kind of a directory entry."""

    FILE = "file"
    DIR = "dir"
    SYMLINK = "symlink"
    OTHER = "other"
    UNKNOWN = "unknown"


class ChangeKind(_NamedEnum):
    """How a path changed."""

    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"
    UNKNOWN = "unknown"


class OmittedReason(_NamedEnum):
    """Why a change's bytes are not in the patch."""

    BINARY = "binary"
    TOO_LARGE = "too_large"
    PATCH_FULL = "patch_full"
    GIT_INTERNAL = "git_internal"  #: .git/config or a hook: listed, never patched
    UNKNOWN = "unknown"


class PatchAction(_NamedEnum):
    """What a patch did to a file."""

    MODIFIED = "modified"
    CREATED = "created"
    DELETED = "deleted"
    RENAMED = "renamed"
    UNKNOWN = "unknown"


class ProcessState(_NamedEnum):
    """Where a long-running process is (:class:`ProcessInfo`)."""

    RUNNING = "running"
    EXITED = "exited"  #: it ended by itself; ``exit_code`` says how
    #: a signal ended it: :meth:`Process.signal`, or the kill ladder of
    #: :meth:`Process.stop` or of its sandbox's end (``killed_by`` names the rung)
    KILLED = "killed"
    #: the service stopped while it ran; it is gone and its output was not kept
    INTERRUPTED = "interrupted"
    FAILED = "failed"  #: it could not be started; ``notes`` say why
    UNKNOWN = "unknown"


class ReadyState(_NamedEnum):
    """How :meth:`Session.start` waited for readiness."""

    NOT_ASKED = "not_asked"  #: no readiness was asked for: it answered once started
    READY = "ready"
    EXITED = "exited"  #: the process ended before it was ready
    #: the time limit passed first; the process is left running
    TIMED_OUT = "timed_out"
    UNKNOWN = "unknown"


# --- requests -----------------------------------------------------------------


@dataclass(frozen=True)
class Edit:
    """One exact-match replacement for :meth:`Session.edit`."""

    old: str
    new: str
    replace_all: bool = False


# --- sessions -----------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """Container limits in force (0: the server default)."""

    memory_bytes: int
    nano_cpus: int
    pids: int
    disk_bytes: int
    inodes: int


@dataclass(frozen=True)
class Policy:
    """The rules in force: the operator's and the session's together."""

    read_only: bool
    deny_writes: tuple[str, ...]
    allow_writes: tuple[str, ...]
    guard_patterns: tuple[str, ...]
    #: ``ask`` rules: a write, command or tool they match waits for a person.
    ask_writes: tuple[str, ...] = ()
    ask_commands: tuple[str, ...] = ()
    ask_tools: tuple[str, ...] = ()
    #: Read-only until a plan is approved (``read_only`` never writes).
    plan_mode: bool = False
    #: Set by an approved plan: the file tools may write these files only.
    plan_files: tuple[str, ...] = ()


@dataclass(frozen=True)
class SessionInfo:
    """A session as the service describes it."""

    id: str
    workspace_path: str
    owns_workspace: bool  #: the service made the workspace and removes it on close
    image: str
    environment: str  #: empty for a plain image
    container_id: str  #: empty while no container is up
    ttl: int  #: idle seconds before the session is closed
    created_at: datetime
    last_used_at: datetime
    limits: Limits
    policy: Policy
    default_timeout: float  #: seconds, for commands that give none
    sandbox_status: str  #: empty when commands can run; else why not
    notes: tuple[str, ...]
    #: The session's own token: only in what creating it returned, else empty.
    session_token: str = ""
    #: Nothing of it waits for a person: plans and ask rules are refused at once.
    unattended: bool = False
    #: The plan approved last (see :meth:`Session.submit_plan`), if any.
    plan: Optional["ApprovedPlan"] = None


@dataclass(frozen=True)
class ResetResult:
    """The sandbox was replaced by a fresh container."""

    session_id: str
    container_id: str
    message: str


# --- file tools ---------------------------------------------------------------


@dataclass(frozen=True)
class ReadResult:
    """A window of lines of a text file."""

    path: str
    content: str  #: the lines, with their line endings, without a BOM
    first_line: int  #: 1-based; 0 for an empty file
    last_line: int
    total_lines: int
    sha256: str  #: of the whole file; pass to edit(expected_sha256=...)
    truncated: bool  #: lines exist past last_line
    size_bytes: int
    message: str


@dataclass(frozen=True)
class CreateResult:
    path: str
    sha256: str
    total_lines: int
    message: str
    #: An ``ask`` rule held the call and it was rejected: nothing was written,
    #: and only this and ``message`` are set.
    rejected: Optional["Rejection"] = None


@dataclass(frozen=True)
class EditResult:
    path: str
    replacements: int  #: sites replaced across all edits
    first_changed_line: int
    line_delta: int  #: lines after minus lines before
    diff: str  #: unified diff of the change (capped, see diff_truncated)
    diff_truncated: bool
    sha256: str  #: of the file as written
    message: str
    #: As for :class:`CreateResult`: rejected, nothing was written.
    rejected: Optional["Rejection"] = None


@dataclass(frozen=True)
class DirEntry:
    name: str
    kind: EntryKind
    size_bytes: int


@dataclass(frozen=True)
class Listing:
    path: str
    entries: tuple[DirEntry, ...]
    truncated: bool


@dataclass(frozen=True)
class FindResult:
    paths: tuple[str, ...]
    truncated: bool


@dataclass(frozen=True)
class SearchMatch:
    path: str
    line: int
    text: str


@dataclass(frozen=True)
class SearchResult:
    matches: tuple[SearchMatch, ...]
    truncated: bool
    files_searched: int


@dataclass(frozen=True)
class PatchedFile:
    path: str
    action: PatchAction
    old_path: str  #: for a rename, where the file was
    sha256_before: str  #: empty for a created file
    sha256_after: str  #: empty for a deleted file
    hunks: int
    line_delta: int


@dataclass(frozen=True)
class PatchResult:
    files: tuple[PatchedFile, ...]
    message: str
    #: As for :class:`CreateResult`: rejected, no file was changed.
    rejected: Optional["Rejection"] = None


# --- commands -----------------------------------------------------------------


@dataclass(frozen=True)
class Output:
    """The kept part of one output stream.

    When ``truncated``, ``text`` holds the start and ``tail`` the end, with
    ``omitted_bytes`` dropped between them; ``str(output)`` joins them with a
    note.
    """

    text: str
    tail: str
    total_bytes: int  #: bytes the command wrote to the stream
    truncated: bool
    omitted_bytes: int

    def __str__(self) -> str:
        if not self.truncated:
            return self.text + self.tail
        sep = "" if not self.text or self.text.endswith("\n") else "\n"
        return f"{self.text}{sep}[... {self.omitted_bytes} bytes omitted ...]\n{self.tail}"


@dataclass(frozen=True)
class Started:
    """Stream event: the command started."""

    container_id: str
    cwd: str
    timeout: float  #: seconds


@dataclass(frozen=True)
class OutputChunk:
    """Stream event: output as it arrived (within the caps)."""

    stream: Literal["stdout", "stderr"]
    data: str


@dataclass(frozen=True)
class CommandResult:
    """A command's whole, capped result (also the last stream event).

    A non-zero exit or a timeout is a result, not an exception.
    """

    command: str
    exit_code: int  #: 128+n when killed by signal n; -1 when unknown
    timed_out: bool
    killed_by: KilledBy
    duration: float  #: seconds
    stdout: Output
    stderr: Output
    cancelled: bool  #: the client went away before the end
    oom_killed: bool  #: the container hit its memory limit
    pids_exhausted: bool  #: the process limit refused a fork
    notes: tuple[str, ...]  #: what the caller must know about how it ran
    started: Optional[Started]
    #: An ``ask`` rule held the command and it was rejected: it did not run
    #: (``exit_code`` is -1, the outputs are empty).
    rejected: Optional["Rejection"] = None

    @property
    def ok(self) -> bool:
        """Exit code 0, not timed out, and it ran."""
        return self.exit_code == 0 and not self.timed_out and self.rejected is None


CommandEvent = Union[Started, OutputChunk, CommandResult]


# --- long-running processes ---------------------------------------------------


@dataclass(frozen=True)
class ProcessInfo:
    """A long-running process of a session, as the service describes it."""

    id: str  #: "p" and a number, unique in the session
    command: str
    cwd: str  #: in the container
    state: ProcessState
    exit_code: int  #: 128+n when signal n ended it; -1 while it runs or when unknown
    killed_by: KilledBy  #: the rung of the kill ladder that ended it, if one did
    started_at: datetime
    ended_at: Optional[datetime]  #: None while it runs
    cpu_time: float  #: seconds of CPU its process group used (sampled each second)
    stdout_bytes: int  #: written to the stream in all, kept or not
    stderr_bytes: int
    pty: bool  #: it runs on a terminal: everything it writes is stdout
    stdin_open: bool  #: its input can still be written
    ready: bool  #: its readiness condition held (or it had none)
    notes: tuple[str, ...]  #: what the caller must know (why it ended, why it could not start)

    @property
    def running(self) -> bool:
        return self.state is ProcessState.RUNNING

    @property
    def ok(self) -> bool:
        """It exited by itself with code 0."""
        return self.state is ProcessState.EXITED and self.exit_code == 0


@dataclass(frozen=True)
class ProcessChunk:
    """A piece of a process's output, as :meth:`Process.follow` yields it."""

    stream: Literal["stdout", "stderr"]
    data: bytes  #: the raw bytes (a UTF-8 character may span two chunks)
    #: ``data`` decoded as UTF-8 (invalid bytes replaced), a character that
    #: spans chunks given whole with the chunk that ends it
    text: str
    offset: int  #: of data's first byte in its stream
    skipped: int  #: bytes before ``offset`` the service no longer kept


@dataclass(frozen=True)
class ProcessOutput:
    """The output of a process the service keeps (:meth:`Process.output`).

    For long output the service keeps each stream's start and its most
    recent part: ``stdout`` is what is kept, joined, and ``stdout_skipped``
    counts the bytes dropped between (likewise for stderr). Text is UTF-8
    with invalid bytes replaced.
    """

    stdout: str
    stderr: str
    stdout_skipped: int
    stderr_skipped: int
    info: ProcessInfo  #: the process as the output was read


# --- report -------------------------------------------------------------------


@dataclass(frozen=True)
class FileWrite:
    seq: int
    tool: str
    path: str
    sha256_before: str  #: empty for a created file
    sha256_after: str


@dataclass(frozen=True)
class CommandRecord:
    seq: int
    command: str
    cwd: str
    exit_code: int
    timed_out: bool
    killed_by: KilledBy
    oom_killed: bool
    cancelled: bool
    duration: float
    #: The service stopped while it ran: its result is unknown.
    interrupted: bool = False


@dataclass(frozen=True)
class RefusedCall:
    seq: int
    tool: str
    summary: str
    reason: str
    message: str


@dataclass(frozen=True)
class Verification:
    command: str
    ran: bool  #: a matching command ran at all
    ran_after_last_write: bool
    exit_code: int  #: of the last such run; -1 when none
    passed: bool  #: that run exited 0 without timing out


@dataclass(frozen=True)
class JournalEntry:
    seq: int
    at: datetime
    tool: str
    summary: str
    outcome: str  #: "ok" or the refusal's reason
    detail: str
    duration: float


@dataclass(frozen=True)
class Checkpoint:
    id: str
    label: str
    created_at: datetime
    files: int
    bytes: int
    own_bytes: int  #: what deleting it frees
    digest: str


@dataclass(frozen=True)
class CheckpointCreated(Checkpoint):
    """A new checkpoint, with what taking it cost."""

    copied_bytes: int
    store_bytes: int
    store_budget: int
    duration: float
    message: str


@dataclass(frozen=True)
class Report:
    """The session's journal, reconciled against a plan."""

    session_id: str
    files_written: tuple[FileWrite, ...]
    commands: tuple[CommandRecord, ...]
    denied: tuple[RefusedCall, ...]
    touched: tuple[str, ...]
    planned_touched: tuple[str, ...]
    unplanned: tuple[str, ...]
    untouched: tuple[str, ...]
    verification: Optional[Verification]  #: set when verify= was given
    journal: tuple[JournalEntry, ...]
    journal_dropped: int
    checkpoints: tuple[Checkpoint, ...]
    #: Lines dropped from the journal files at their size ceiling.
    journal_file_lines_dropped: int = 0
    #: The approved plan the report was reconciled against, when the call
    #: named no plan of its own and the session has one.
    plan: Optional["ApprovedPlan"] = None
    #: With a plan: paths changed since the session began (by a file tool or
    #: a command) that the plan does not name.
    changed_unplanned: tuple[str, ...] = ()
    #: Why those changes could not be read, when they could not.
    changes_unchecked: str = ""


@dataclass(frozen=True)
class CloseResult:
    session_id: str
    workspace_removed: bool
    message: str
    report: Optional[Report]  #: the journal as it stood (no plan)


# --- history ------------------------------------------------------------------


@dataclass(frozen=True)
class FileChange:
    path: str
    kind: ChangeKind
    sha256_before: str
    sha256_after: str
    mode_before: int  #: git's mode: 0o100644, 0o100755 or 0o120000; 0 where absent
    mode_after: int
    size_before: int
    size_after: int
    omitted: Optional[OmittedReason]  #: why the patch lacks it; None when it has it


@dataclass(frozen=True)
class Changes:
    since_checkpoint: Optional[str]  #: None: since the session began
    changes: tuple[FileChange, ...]
    truncated: bool
    patch: bytes  #: git's unified format; `git apply` accepts it on the older tree
    omitted: int  #: changes whose bytes the patch lacks
    digest: str  #: of the workspace now; empty when nothing changed
    duration: float
    message: str


@dataclass(frozen=True)
class RestoreResult:
    checkpoint: Checkpoint
    files_written: int
    removed: int
    directories_made: int
    modes_changed: int
    digest: str  #: equals the checkpoint's unless something wrote meanwhile
    stopped_commands: int
    duration: float
    message: str


# --- archives -----------------------------------------------------------------


@dataclass(frozen=True)
class UploadResult:
    destination: str
    files: int
    directories: int
    symlinks: int
    bytes: int
    stripped: int  #: entries whose set-id or sticky bits were dropped
    replaced: int
    duration: float
    message: str


@dataclass(frozen=True)
class SkippedPath:
    path: str
    why: str


@dataclass(frozen=True)
class Download:
    data: bytes  #: the archive; empty when written to a file (to=...)
    files: int
    directories: int
    symlinks: int
    bytes: int
    skipped: tuple[SkippedPath, ...]
    skipped_count: int
    duration: float
    message: str


# --- plans and approvals ------------------------------------------------------


@dataclass(frozen=True)
class PlanStep:
    """One step of a plan: what it does and the files it writes (exact paths)."""

    description: str
    files: tuple[str, ...]


@dataclass(frozen=True)
class Plan:
    """A checkable plan: its goal, steps, verification command and risks."""

    goal: str
    steps: tuple[PlanStep, ...]
    verification: str  #: the command whose passing run verifies the result
    risks: tuple[str, ...]

    @property
    def files(self) -> tuple[str, ...]:
        """Every file of every step, once each, in the order first named."""
        return tuple(dict.fromkeys(f for step in self.steps for f in step.files))


class WithheldFile(NamedTuple):
    """A planned file approval does not grant, and the rule that withholds it
    (a pair: ``path, rule = w``)."""

    path: str
    rule: str  #: in words, e.g. ``deny_writes "tests/**"``


@dataclass(frozen=True)
class Decision:
    """Who decided ("operator" or "approver", then the name given) and when."""

    decided_by: str
    note: str
    decided_at: Optional[datetime]


@dataclass(frozen=True)
class ApprovedPlan:
    """A plan as approved: what the session was granted."""

    approval_id: str
    plan: Optional[Plan]
    granted: tuple[str, ...]  #: the planned files the file tools may write
    withheld: tuple[WithheldFile, ...]
    decision: Optional[Decision]


@dataclass(frozen=True)
class Rejection:
    """A call or plan that was not approved: nothing of it was executed."""

    approval_id: str
    reason: str  #: the approver's note, or "nobody answered"
    timed_out: bool  #: no approver answered in time
    decision: Optional[Decision]
    message: str  #: for the model: what happened and what to do next


@dataclass(frozen=True)
class PlanPending:
    """A submitted plan waits for a person (passed to ``on_pending``)."""

    approval_id: str
    withheld: tuple[WithheldFile, ...]  #: files approval would withhold
    expires_at: Optional[datetime]  #: when it becomes a rejection if nobody answers
    message: str


@dataclass(frozen=True)
class PlanResult:
    """How a plan ended (:meth:`Session.submit_plan`). A rejection is a result,
    not an exception."""

    approved: bool
    approval_id: str
    granted: tuple[str, ...]  #: the files the session may now write; empty if rejected
    withheld: tuple[WithheldFile, ...]  #: planned files a rule withholds
    reason: str  #: why it was rejected (the note, or "nobody answered"); empty if approved
    timed_out: bool  #: rejected because nobody answered in time
    message: str  #: for the model
    decision: Optional[Decision]
    plan: Optional[Plan]  #: the plan as approved (files normalised); None if rejected

    def __bool__(self) -> bool:
        return self.approved


@dataclass(frozen=True)
class PendingCall:
    """A call an ``ask`` rule holds."""

    tool: str
    summary: str  #: its arguments in brief
    rule: str  #: the rule that asked, e.g. ``ask_writes "src/**"``
    path: str  #: where a write would land; empty otherwise
    command: str  #: the command, if one; empty otherwise


@dataclass(frozen=True)
class PendingApproval:
    """A plan or call waiting for a person's decision (:meth:`Client.approvals`)."""

    approval_id: str
    session_id: str
    workspace_path: str
    requested_at: datetime
    expires_at: Optional[datetime]
    plan: Optional[Plan]  #: set for a plan
    call: Optional[PendingCall]  #: set for a call
    withheld: tuple[WithheldFile, ...]  #: for a plan: files approval would withhold

    @property
    def kind(self) -> Literal["plan", "call", "unknown"]:
        return "plan" if self.plan is not None else "call" if self.call is not None else "unknown"


@dataclass(frozen=True)
class DecideResult:
    """What a decision did (:meth:`Client.approve`, :meth:`Client.reject`)."""

    approval_id: str
    session_id: str
    outcome: str  #: "approved" or "rejected"
    message: str


# --- environments -------------------------------------------------------------


@dataclass(frozen=True)
class Environment:
    name: str
    image: str
    image_id: str
    key: str
    base: str
    created_at: datetime
    size_bytes: int
    sessions: tuple[str, ...]  #: open sessions running it


@dataclass(frozen=True)
class BuildJoined:
    """Build event: this call shares a build of the same recipe already running."""


@dataclass(frozen=True)
class BuildStep:
    """Build event: a step began."""

    number: int
    total: int
    instruction: str


@dataclass(frozen=True)
class BuildOutput:
    """Build event: lines a step printed."""

    text: str


@dataclass(frozen=True)
class BuildDone:
    """Build event, the last: the environment is ready."""

    environment: Environment
    cached: bool
    duration: float
    output_bytes: int
    output_truncated: bool


BuildEvent = Union[BuildJoined, BuildStep, BuildOutput, BuildDone]
