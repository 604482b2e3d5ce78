from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class OutputMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OUTPUT_MODE_BOTH: _ClassVar[OutputMode]
    OUTPUT_MODE_CHUNKS: _ClassVar[OutputMode]
    OUTPUT_MODE_RESULT: _ClassVar[OutputMode]

class KilledBy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    KILLED_BY_NONE: _ClassVar[KilledBy]
    KILLED_BY_PROCESS_GROUP_TERM: _ClassVar[KilledBy]
    KILLED_BY_PROCESS_GROUP_KILL: _ClassVar[KilledBy]
    KILLED_BY_CONTAINER: _ClassVar[KilledBy]
    KILLED_BY_CONTAINER_FAILED: _ClassVar[KilledBy]

class ChangeKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHANGE_KIND_UNSPECIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_ADDED: _ClassVar[ChangeKind]
    CHANGE_KIND_MODIFIED: _ClassVar[ChangeKind]
    CHANGE_KIND_DELETED: _ClassVar[ChangeKind]

class OmittedReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    OMITTED_NONE: _ClassVar[OmittedReason]
    OMITTED_BINARY: _ClassVar[OmittedReason]
    OMITTED_TOO_LARGE: _ClassVar[OmittedReason]
    OMITTED_PATCH_FULL: _ClassVar[OmittedReason]
    OMITTED_GIT_INTERNAL: _ClassVar[OmittedReason]

class PatchAction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PATCH_ACTION_UNSPECIFIED: _ClassVar[PatchAction]
    PATCH_ACTION_MODIFIED: _ClassVar[PatchAction]
    PATCH_ACTION_CREATED: _ClassVar[PatchAction]
    PATCH_ACTION_DELETED: _ClassVar[PatchAction]
    PATCH_ACTION_RENAMED: _ClassVar[PatchAction]

class Verdict(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    VERDICT_UNSPECIFIED: _ClassVar[Verdict]
    VERDICT_APPROVE: _ClassVar[Verdict]
    VERDICT_REJECT: _ClassVar[Verdict]

class ReadyState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    READY_STATE_UNSPECIFIED: _ClassVar[ReadyState]
    READY_STATE_READY: _ClassVar[ReadyState]
    READY_STATE_EXITED: _ClassVar[ReadyState]
    READY_STATE_TIMED_OUT: _ClassVar[ReadyState]

class ProcessState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROCESS_STATE_UNSPECIFIED: _ClassVar[ProcessState]
    PROCESS_STATE_RUNNING: _ClassVar[ProcessState]
    PROCESS_STATE_EXITED: _ClassVar[ProcessState]
    PROCESS_STATE_KILLED: _ClassVar[ProcessState]
    PROCESS_STATE_INTERRUPTED: _ClassVar[ProcessState]
    PROCESS_STATE_FAILED: _ClassVar[ProcessState]

class ProcessStream(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROCESS_STREAM_STDOUT: _ClassVar[ProcessStream]
    PROCESS_STREAM_STDERR: _ClassVar[ProcessStream]

class ProcessSignal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PROCESS_SIGNAL_UNSPECIFIED: _ClassVar[ProcessSignal]
    PROCESS_SIGNAL_INT: _ClassVar[ProcessSignal]
    PROCESS_SIGNAL_TERM: _ClassVar[ProcessSignal]
    PROCESS_SIGNAL_KILL: _ClassVar[ProcessSignal]
OUTPUT_MODE_BOTH: OutputMode
OUTPUT_MODE_CHUNKS: OutputMode
OUTPUT_MODE_RESULT: OutputMode
KILLED_BY_NONE: KilledBy
KILLED_BY_PROCESS_GROUP_TERM: KilledBy
KILLED_BY_PROCESS_GROUP_KILL: KilledBy
KILLED_BY_CONTAINER: KilledBy
KILLED_BY_CONTAINER_FAILED: KilledBy
CHANGE_KIND_UNSPECIFIED: ChangeKind
CHANGE_KIND_ADDED: ChangeKind
CHANGE_KIND_MODIFIED: ChangeKind
CHANGE_KIND_DELETED: ChangeKind
OMITTED_NONE: OmittedReason
OMITTED_BINARY: OmittedReason
OMITTED_TOO_LARGE: OmittedReason
OMITTED_PATCH_FULL: OmittedReason
OMITTED_GIT_INTERNAL: OmittedReason
PATCH_ACTION_UNSPECIFIED: PatchAction
PATCH_ACTION_MODIFIED: PatchAction
PATCH_ACTION_CREATED: PatchAction
PATCH_ACTION_DELETED: PatchAction
PATCH_ACTION_RENAMED: PatchAction
VERDICT_UNSPECIFIED: Verdict
VERDICT_APPROVE: Verdict
VERDICT_REJECT: Verdict
READY_STATE_UNSPECIFIED: ReadyState
READY_STATE_READY: ReadyState
READY_STATE_EXITED: ReadyState
READY_STATE_TIMED_OUT: ReadyState
PROCESS_STATE_UNSPECIFIED: ProcessState
PROCESS_STATE_RUNNING: ProcessState
PROCESS_STATE_EXITED: ProcessState
PROCESS_STATE_KILLED: ProcessState
PROCESS_STATE_INTERRUPTED: ProcessState
PROCESS_STATE_FAILED: ProcessState
PROCESS_STREAM_STDOUT: ProcessStream
PROCESS_STREAM_STDERR: ProcessStream
PROCESS_SIGNAL_UNSPECIFIED: ProcessSignal
PROCESS_SIGNAL_INT: ProcessSignal
PROCESS_SIGNAL_TERM: ProcessSignal
PROCESS_SIGNAL_KILL: ProcessSignal

class Policy(_message.Message):
    __slots__ = ("read_only", "deny_writes", "allow_writes", "guard_patterns", "ask_writes", "ask_commands", "ask_tools", "plan_files", "plan_mode")
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    DENY_WRITES_FIELD_NUMBER: _ClassVar[int]
    ALLOW_WRITES_FIELD_NUMBER: _ClassVar[int]
    GUARD_PATTERNS_FIELD_NUMBER: _ClassVar[int]
    ASK_WRITES_FIELD_NUMBER: _ClassVar[int]
    ASK_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    ASK_TOOLS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FILES_FIELD_NUMBER: _ClassVar[int]
    PLAN_MODE_FIELD_NUMBER: _ClassVar[int]
    read_only: bool
    deny_writes: _containers.RepeatedScalarFieldContainer[str]
    allow_writes: _containers.RepeatedScalarFieldContainer[str]
    guard_patterns: _containers.RepeatedScalarFieldContainer[str]
    ask_writes: _containers.RepeatedScalarFieldContainer[str]
    ask_commands: _containers.RepeatedScalarFieldContainer[str]
    ask_tools: _containers.RepeatedScalarFieldContainer[str]
    plan_files: _containers.RepeatedScalarFieldContainer[str]
    plan_mode: bool
    def __init__(self, read_only: _Optional[bool] = ..., deny_writes: _Optional[_Iterable[str]] = ..., allow_writes: _Optional[_Iterable[str]] = ..., guard_patterns: _Optional[_Iterable[str]] = ..., ask_writes: _Optional[_Iterable[str]] = ..., ask_commands: _Optional[_Iterable[str]] = ..., ask_tools: _Optional[_Iterable[str]] = ..., plan_files: _Optional[_Iterable[str]] = ..., plan_mode: _Optional[bool] = ...) -> None: ...

class Limits(_message.Message):
    __slots__ = ("memory_bytes", "nano_cpus", "pids", "disk_bytes", "inodes")
    MEMORY_BYTES_FIELD_NUMBER: _ClassVar[int]
    NANO_CPUS_FIELD_NUMBER: _ClassVar[int]
    PIDS_FIELD_NUMBER: _ClassVar[int]
    DISK_BYTES_FIELD_NUMBER: _ClassVar[int]
    INODES_FIELD_NUMBER: _ClassVar[int]
    memory_bytes: int
    nano_cpus: int
    pids: int
    disk_bytes: int
    inodes: int
    def __init__(self, memory_bytes: _Optional[int] = ..., nano_cpus: _Optional[int] = ..., pids: _Optional[int] = ..., disk_bytes: _Optional[int] = ..., inodes: _Optional[int] = ...) -> None: ...

class CreateSessionRequest(_message.Message):
    __slots__ = ("image", "workspace_path", "limits", "env", "ttl_seconds", "read_only", "policy", "default_timeout_ms", "environment", "unattended")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    READ_ONLY_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    UNATTENDED_FIELD_NUMBER: _ClassVar[int]
    image: str
    workspace_path: str
    limits: Limits
    env: _containers.ScalarMap[str, str]
    ttl_seconds: int
    read_only: bool
    policy: Policy
    default_timeout_ms: int
    environment: str
    unattended: bool
    def __init__(self, image: _Optional[str] = ..., workspace_path: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., env: _Optional[_Mapping[str, str]] = ..., ttl_seconds: _Optional[int] = ..., read_only: _Optional[bool] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., default_timeout_ms: _Optional[int] = ..., environment: _Optional[str] = ..., unattended: _Optional[bool] = ...) -> None: ...

class Session(_message.Message):
    __slots__ = ("session_id", "workspace_path", "owns_workspace", "ttl_seconds", "created_at", "last_used_at", "image", "container_id", "limits", "sandbox_status", "policy", "default_timeout_ms", "environment", "notes", "session_token", "unattended", "plan")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
    OWNS_WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    TTL_SECONDS_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    LAST_USED_AT_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    LIMITS_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_STATUS_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    DEFAULT_TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    SESSION_TOKEN_FIELD_NUMBER: _ClassVar[int]
    UNATTENDED_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    workspace_path: str
    owns_workspace: bool
    ttl_seconds: int
    created_at: int
    last_used_at: int
    image: str
    container_id: str
    limits: Limits
    sandbox_status: str
    policy: Policy
    default_timeout_ms: int
    environment: str
    notes: _containers.RepeatedScalarFieldContainer[str]
    session_token: str
    unattended: bool
    plan: ApprovedPlan
    def __init__(self, session_id: _Optional[str] = ..., workspace_path: _Optional[str] = ..., owns_workspace: _Optional[bool] = ..., ttl_seconds: _Optional[int] = ..., created_at: _Optional[int] = ..., last_used_at: _Optional[int] = ..., image: _Optional[str] = ..., container_id: _Optional[str] = ..., limits: _Optional[_Union[Limits, _Mapping]] = ..., sandbox_status: _Optional[str] = ..., policy: _Optional[_Union[Policy, _Mapping]] = ..., default_timeout_ms: _Optional[int] = ..., environment: _Optional[str] = ..., notes: _Optional[_Iterable[str]] = ..., session_token: _Optional[str] = ..., unattended: _Optional[bool] = ..., plan: _Optional[_Union[ApprovedPlan, _Mapping]] = ...) -> None: ...

class GetSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListSessionsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListSessionsResponse(_message.Message):
    __slots__ = ("sessions",)
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    sessions: _containers.RepeatedCompositeFieldContainer[Session]
    def __init__(self, sessions: _Optional[_Iterable[_Union[Session, _Mapping]]] = ...) -> None: ...

class ResetSandboxRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ResetSandboxResponse(_message.Message):
    __slots__ = ("session_id", "container_id", "message")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    container_id: str
    message: str
    def __init__(self, session_id: _Optional[str] = ..., container_id: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class CloseSessionRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class CloseSessionResponse(_message.Message):
    __slots__ = ("session_id", "workspace_removed", "message", "report")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_REMOVED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REPORT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    workspace_removed: bool
    message: str
    report: SessionReport
    def __init__(self, session_id: _Optional[str] = ..., workspace_removed: _Optional[bool] = ..., message: _Optional[str] = ..., report: _Optional[_Union[SessionReport, _Mapping]] = ...) -> None: ...

class GetSessionReportRequest(_message.Message):
    __slots__ = ("session_id", "planned_files", "verification_command")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PLANNED_FILES_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_COMMAND_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    planned_files: _containers.RepeatedScalarFieldContainer[str]
    verification_command: str
    def __init__(self, session_id: _Optional[str] = ..., planned_files: _Optional[_Iterable[str]] = ..., verification_command: _Optional[str] = ...) -> None: ...

class SessionReport(_message.Message):
    __slots__ = ("session_id", "files_written", "commands", "denied", "touched", "planned_touched", "unplanned", "untouched", "verification", "journal", "journal_dropped", "journal_file_lines_dropped", "checkpoints", "plan", "changed_unplanned", "changes_unchecked", "processes", "touched_dropped")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FILES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    COMMANDS_FIELD_NUMBER: _ClassVar[int]
    DENIED_FIELD_NUMBER: _ClassVar[int]
    TOUCHED_FIELD_NUMBER: _ClassVar[int]
    PLANNED_TOUCHED_FIELD_NUMBER: _ClassVar[int]
    UNPLANNED_FIELD_NUMBER: _ClassVar[int]
    UNTOUCHED_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_DROPPED_FIELD_NUMBER: _ClassVar[int]
    JOURNAL_FILE_LINES_DROPPED_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    CHANGED_UNPLANNED_FIELD_NUMBER: _ClassVar[int]
    CHANGES_UNCHECKED_FIELD_NUMBER: _ClassVar[int]
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    TOUCHED_DROPPED_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    files_written: _containers.RepeatedCompositeFieldContainer[FileWrite]
    commands: _containers.RepeatedCompositeFieldContainer[CommandRecord]
    denied: _containers.RepeatedCompositeFieldContainer[RefusedCall]
    touched: _containers.RepeatedScalarFieldContainer[str]
    planned_touched: _containers.RepeatedScalarFieldContainer[str]
    unplanned: _containers.RepeatedScalarFieldContainer[str]
    untouched: _containers.RepeatedScalarFieldContainer[str]
    verification: Verification
    journal: _containers.RepeatedCompositeFieldContainer[JournalEntry]
    journal_dropped: int
    journal_file_lines_dropped: int
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    plan: ApprovedPlan
    changed_unplanned: _containers.RepeatedScalarFieldContainer[str]
    changes_unchecked: str
    processes: _containers.RepeatedCompositeFieldContainer[Process]
    touched_dropped: int
    def __init__(self, session_id: _Optional[str] = ..., files_written: _Optional[_Iterable[_Union[FileWrite, _Mapping]]] = ..., commands: _Optional[_Iterable[_Union[CommandRecord, _Mapping]]] = ..., denied: _Optional[_Iterable[_Union[RefusedCall, _Mapping]]] = ..., touched: _Optional[_Iterable[str]] = ..., planned_touched: _Optional[_Iterable[str]] = ..., unplanned: _Optional[_Iterable[str]] = ..., untouched: _Optional[_Iterable[str]] = ..., verification: _Optional[_Union[Verification, _Mapping]] = ..., journal: _Optional[_Iterable[_Union[JournalEntry, _Mapping]]] = ..., journal_dropped: _Optional[int] = ..., journal_file_lines_dropped: _Optional[int] = ..., checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ..., plan: _Optional[_Union[ApprovedPlan, _Mapping]] = ..., changed_unplanned: _Optional[_Iterable[str]] = ..., changes_unchecked: _Optional[str] = ..., processes: _Optional[_Iterable[_Union[Process, _Mapping]]] = ..., touched_dropped: _Optional[int] = ...) -> None: ...

class FileWrite(_message.Message):
    __slots__ = ("seq", "tool", "path", "sha256_before", "sha256_after")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SHA256_AFTER_FIELD_NUMBER: _ClassVar[int]
    seq: int
    tool: str
    path: str
    sha256_before: str
    sha256_after: str
    def __init__(self, seq: _Optional[int] = ..., tool: _Optional[str] = ..., path: _Optional[str] = ..., sha256_before: _Optional[str] = ..., sha256_after: _Optional[str] = ...) -> None: ...

class CommandRecord(_message.Message):
    __slots__ = ("seq", "command", "cwd", "exit_code", "timed_out", "killed_by", "oom_killed", "cancelled", "duration_ms", "interrupted")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    KILLED_BY_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    INTERRUPTED_FIELD_NUMBER: _ClassVar[int]
    seq: int
    command: str
    cwd: str
    exit_code: int
    timed_out: bool
    killed_by: KilledBy
    oom_killed: bool
    cancelled: bool
    duration_ms: int
    interrupted: bool
    def __init__(self, seq: _Optional[int] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., killed_by: _Optional[_Union[KilledBy, str]] = ..., oom_killed: _Optional[bool] = ..., cancelled: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., interrupted: _Optional[bool] = ...) -> None: ...

class RefusedCall(_message.Message):
    __slots__ = ("seq", "tool", "summary", "reason", "message")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    seq: int
    tool: str
    summary: str
    reason: str
    message: str
    def __init__(self, seq: _Optional[int] = ..., tool: _Optional[str] = ..., summary: _Optional[str] = ..., reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Verification(_message.Message):
    __slots__ = ("command", "ran", "ran_after_last_write", "exit_code", "passed")
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    RAN_FIELD_NUMBER: _ClassVar[int]
    RAN_AFTER_LAST_WRITE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    PASSED_FIELD_NUMBER: _ClassVar[int]
    command: str
    ran: bool
    ran_after_last_write: bool
    exit_code: int
    passed: bool
    def __init__(self, command: _Optional[str] = ..., ran: _Optional[bool] = ..., ran_after_last_write: _Optional[bool] = ..., exit_code: _Optional[int] = ..., passed: _Optional[bool] = ...) -> None: ...

class JournalEntry(_message.Message):
    __slots__ = ("seq", "at_ms", "tool", "summary", "outcome", "detail", "duration_ms")
    SEQ_FIELD_NUMBER: _ClassVar[int]
    AT_MS_FIELD_NUMBER: _ClassVar[int]
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    seq: int
    at_ms: int
    tool: str
    summary: str
    outcome: str
    detail: str
    duration_ms: int
    def __init__(self, seq: _Optional[int] = ..., at_ms: _Optional[int] = ..., tool: _Optional[str] = ..., summary: _Optional[str] = ..., outcome: _Optional[str] = ..., detail: _Optional[str] = ..., duration_ms: _Optional[int] = ...) -> None: ...

class ReadFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "offset", "limit")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    offset: int
    limit: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., offset: _Optional[int] = ..., limit: _Optional[int] = ...) -> None: ...

class ReadFileResponse(_message.Message):
    __slots__ = ("path", "content", "first_line", "last_line", "total_lines", "sha256", "truncated", "size_bytes", "message")
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    FIRST_LINE_FIELD_NUMBER: _ClassVar[int]
    LAST_LINE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LINES_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    path: str
    content: str
    first_line: int
    last_line: int
    total_lines: int
    sha256: str
    truncated: bool
    size_bytes: int
    message: str
    def __init__(self, path: _Optional[str] = ..., content: _Optional[str] = ..., first_line: _Optional[int] = ..., last_line: _Optional[int] = ..., total_lines: _Optional[int] = ..., sha256: _Optional[str] = ..., truncated: _Optional[bool] = ..., size_bytes: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class CreateFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "content")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    content: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., content: _Optional[str] = ...) -> None: ...

class CreateFileResponse(_message.Message):
    __slots__ = ("path", "sha256", "message", "total_lines", "rejected")
    PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOTAL_LINES_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    path: str
    sha256: str
    message: str
    total_lines: int
    rejected: Rejection
    def __init__(self, path: _Optional[str] = ..., sha256: _Optional[str] = ..., message: _Optional[str] = ..., total_lines: _Optional[int] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class Edit(_message.Message):
    __slots__ = ("old_string", "new_string", "replace_all")
    OLD_STRING_FIELD_NUMBER: _ClassVar[int]
    NEW_STRING_FIELD_NUMBER: _ClassVar[int]
    REPLACE_ALL_FIELD_NUMBER: _ClassVar[int]
    old_string: str
    new_string: str
    replace_all: bool
    def __init__(self, old_string: _Optional[str] = ..., new_string: _Optional[str] = ..., replace_all: _Optional[bool] = ...) -> None: ...

class EditFileRequest(_message.Message):
    __slots__ = ("session_id", "path", "edits", "expected_sha256")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    EDITS_FIELD_NUMBER: _ClassVar[int]
    EXPECTED_SHA256_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    edits: _containers.RepeatedCompositeFieldContainer[Edit]
    expected_sha256: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., edits: _Optional[_Iterable[_Union[Edit, _Mapping]]] = ..., expected_sha256: _Optional[str] = ...) -> None: ...

class EditFileResponse(_message.Message):
    __slots__ = ("path", "replacements", "first_changed_line", "line_delta", "diff", "sha256", "message", "diff_truncated", "rejected")
    PATH_FIELD_NUMBER: _ClassVar[int]
    REPLACEMENTS_FIELD_NUMBER: _ClassVar[int]
    FIRST_CHANGED_LINE_FIELD_NUMBER: _ClassVar[int]
    LINE_DELTA_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    SHA256_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DIFF_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    path: str
    replacements: int
    first_changed_line: int
    line_delta: int
    diff: str
    sha256: str
    message: str
    diff_truncated: bool
    rejected: Rejection
    def __init__(self, path: _Optional[str] = ..., replacements: _Optional[int] = ..., first_changed_line: _Optional[int] = ..., line_delta: _Optional[int] = ..., diff: _Optional[str] = ..., sha256: _Optional[str] = ..., message: _Optional[str] = ..., diff_truncated: _Optional[bool] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class ListDirRequest(_message.Message):
    __slots__ = ("session_id", "path")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ...) -> None: ...

class DirEntry(_message.Message):
    __slots__ = ("name", "kind", "size_bytes")
    class Kind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
        __slots__ = ()
        KIND_UNSPECIFIED: _ClassVar[DirEntry.Kind]
        KIND_FILE: _ClassVar[DirEntry.Kind]
        KIND_DIR: _ClassVar[DirEntry.Kind]
        KIND_SYMLINK: _ClassVar[DirEntry.Kind]
        KIND_OTHER: _ClassVar[DirEntry.Kind]
    KIND_UNSPECIFIED: DirEntry.Kind
    KIND_FILE: DirEntry.Kind
    KIND_DIR: DirEntry.Kind
    KIND_SYMLINK: DirEntry.Kind
    KIND_OTHER: DirEntry.Kind
    NAME_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    name: str
    kind: DirEntry.Kind
    size_bytes: int
    def __init__(self, name: _Optional[str] = ..., kind: _Optional[_Union[DirEntry.Kind, str]] = ..., size_bytes: _Optional[int] = ...) -> None: ...

class ListDirResponse(_message.Message):
    __slots__ = ("path", "entries", "truncated")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    path: str
    entries: _containers.RepeatedCompositeFieldContainer[DirEntry]
    truncated: bool
    def __init__(self, path: _Optional[str] = ..., entries: _Optional[_Iterable[_Union[DirEntry, _Mapping]]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class FindFilesRequest(_message.Message):
    __slots__ = ("session_id", "pattern", "path", "limit")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    pattern: str
    path: str
    limit: int
    def __init__(self, session_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., limit: _Optional[int] = ...) -> None: ...

class FindFilesResponse(_message.Message):
    __slots__ = ("paths", "truncated")
    PATHS_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    paths: _containers.RepeatedScalarFieldContainer[str]
    truncated: bool
    def __init__(self, paths: _Optional[_Iterable[str]] = ..., truncated: _Optional[bool] = ...) -> None: ...

class SearchFilesRequest(_message.Message):
    __slots__ = ("session_id", "pattern", "path", "glob", "case_insensitive", "limit")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATTERN_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    GLOB_FIELD_NUMBER: _ClassVar[int]
    CASE_INSENSITIVE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    pattern: str
    path: str
    glob: str
    case_insensitive: bool
    limit: int
    def __init__(self, session_id: _Optional[str] = ..., pattern: _Optional[str] = ..., path: _Optional[str] = ..., glob: _Optional[str] = ..., case_insensitive: _Optional[bool] = ..., limit: _Optional[int] = ...) -> None: ...

class SearchMatch(_message.Message):
    __slots__ = ("path", "line", "text")
    PATH_FIELD_NUMBER: _ClassVar[int]
    LINE_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    path: str
    line: int
    text: str
    def __init__(self, path: _Optional[str] = ..., line: _Optional[int] = ..., text: _Optional[str] = ...) -> None: ...

class SearchFilesResponse(_message.Message):
    __slots__ = ("matches", "truncated", "files_searched")
    MATCHES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    FILES_SEARCHED_FIELD_NUMBER: _ClassVar[int]
    matches: _containers.RepeatedCompositeFieldContainer[SearchMatch]
    truncated: bool
    files_searched: int
    def __init__(self, matches: _Optional[_Iterable[_Union[SearchMatch, _Mapping]]] = ..., truncated: _Optional[bool] = ..., files_searched: _Optional[int] = ...) -> None: ...

class RunCommandRequest(_message.Message):
    __slots__ = ("session_id", "command", "cwd", "timeout_ms", "env", "stdout_cap", "stderr_cap", "output")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    STDOUT_CAP_FIELD_NUMBER: _ClassVar[int]
    STDERR_CAP_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    cwd: str
    timeout_ms: int
    env: _containers.ScalarMap[str, str]
    stdout_cap: int
    stderr_cap: int
    output: OutputMode
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., timeout_ms: _Optional[int] = ..., env: _Optional[_Mapping[str, str]] = ..., stdout_cap: _Optional[int] = ..., stderr_cap: _Optional[int] = ..., output: _Optional[_Union[OutputMode, str]] = ...) -> None: ...

class RunCommandEvent(_message.Message):
    __slots__ = ("started", "stdout", "stderr", "exit", "rejected")
    STARTED_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    EXIT_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    started: CommandStarted
    stdout: OutputChunk
    stderr: OutputChunk
    exit: CommandExit
    rejected: Rejection
    def __init__(self, started: _Optional[_Union[CommandStarted, _Mapping]] = ..., stdout: _Optional[_Union[OutputChunk, _Mapping]] = ..., stderr: _Optional[_Union[OutputChunk, _Mapping]] = ..., exit: _Optional[_Union[CommandExit, _Mapping]] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class CommandStarted(_message.Message):
    __slots__ = ("container_id", "cwd", "timeout_ms")
    CONTAINER_ID_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    container_id: str
    cwd: str
    timeout_ms: int
    def __init__(self, container_id: _Optional[str] = ..., cwd: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class OutputChunk(_message.Message):
    __slots__ = ("data",)
    DATA_FIELD_NUMBER: _ClassVar[int]
    data: str
    def __init__(self, data: _Optional[str] = ...) -> None: ...

class StreamResult(_message.Message):
    __slots__ = ("text", "total_bytes", "truncated", "tail", "omitted_bytes")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    TAIL_FIELD_NUMBER: _ClassVar[int]
    OMITTED_BYTES_FIELD_NUMBER: _ClassVar[int]
    text: str
    total_bytes: int
    truncated: bool
    tail: str
    omitted_bytes: int
    def __init__(self, text: _Optional[str] = ..., total_bytes: _Optional[int] = ..., truncated: _Optional[bool] = ..., tail: _Optional[str] = ..., omitted_bytes: _Optional[int] = ...) -> None: ...

class CommandExit(_message.Message):
    __slots__ = ("exit_code", "timed_out", "killed_by", "duration_ms", "stdout", "stderr", "cancelled", "oom_killed", "pids_exhausted", "notes")
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    KILLED_BY_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLED_FIELD_NUMBER: _ClassVar[int]
    PIDS_EXHAUSTED_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    exit_code: int
    timed_out: bool
    killed_by: KilledBy
    duration_ms: int
    stdout: StreamResult
    stderr: StreamResult
    cancelled: bool
    oom_killed: bool
    pids_exhausted: bool
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, exit_code: _Optional[int] = ..., timed_out: _Optional[bool] = ..., killed_by: _Optional[_Union[KilledBy, str]] = ..., duration_ms: _Optional[int] = ..., stdout: _Optional[_Union[StreamResult, _Mapping]] = ..., stderr: _Optional[_Union[StreamResult, _Mapping]] = ..., cancelled: _Optional[bool] = ..., oom_killed: _Optional[bool] = ..., pids_exhausted: _Optional[bool] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class BuildEnvironmentRequest(_message.Message):
    __slots__ = ("name", "dockerfile", "context", "setup_script", "base", "timeout_seconds", "output_cap")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DOCKERFILE_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_FIELD_NUMBER: _ClassVar[int]
    SETUP_SCRIPT_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_SECONDS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_CAP_FIELD_NUMBER: _ClassVar[int]
    name: str
    dockerfile: str
    context: bytes
    setup_script: str
    base: str
    timeout_seconds: int
    output_cap: int
    def __init__(self, name: _Optional[str] = ..., dockerfile: _Optional[str] = ..., context: _Optional[bytes] = ..., setup_script: _Optional[str] = ..., base: _Optional[str] = ..., timeout_seconds: _Optional[int] = ..., output_cap: _Optional[int] = ...) -> None: ...

class BuildEnvironmentEvent(_message.Message):
    __slots__ = ("joined", "step", "output", "done")
    JOINED_FIELD_NUMBER: _ClassVar[int]
    STEP_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    joined: BuildJoined
    step: BuildStep
    output: BuildOutput
    done: BuildDone
    def __init__(self, joined: _Optional[_Union[BuildJoined, _Mapping]] = ..., step: _Optional[_Union[BuildStep, _Mapping]] = ..., output: _Optional[_Union[BuildOutput, _Mapping]] = ..., done: _Optional[_Union[BuildDone, _Mapping]] = ...) -> None: ...

class BuildJoined(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class BuildStep(_message.Message):
    __slots__ = ("number", "total", "instruction")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    INSTRUCTION_FIELD_NUMBER: _ClassVar[int]
    number: int
    total: int
    instruction: str
    def __init__(self, number: _Optional[int] = ..., total: _Optional[int] = ..., instruction: _Optional[str] = ...) -> None: ...

class BuildOutput(_message.Message):
    __slots__ = ("text",)
    TEXT_FIELD_NUMBER: _ClassVar[int]
    text: str
    def __init__(self, text: _Optional[str] = ...) -> None: ...

class BuildDone(_message.Message):
    __slots__ = ("environment", "cached", "duration_ms", "output_bytes", "output_truncated")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    cached: bool
    duration_ms: int
    output_bytes: int
    output_truncated: bool
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., cached: _Optional[bool] = ..., duration_ms: _Optional[int] = ..., output_bytes: _Optional[int] = ..., output_truncated: _Optional[bool] = ...) -> None: ...

class Environment(_message.Message):
    __slots__ = ("name", "image", "image_id", "key", "base", "created_at", "size_bytes", "sessions")
    NAME_FIELD_NUMBER: _ClassVar[int]
    IMAGE_FIELD_NUMBER: _ClassVar[int]
    IMAGE_ID_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    BASE_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    SIZE_BYTES_FIELD_NUMBER: _ClassVar[int]
    SESSIONS_FIELD_NUMBER: _ClassVar[int]
    name: str
    image: str
    image_id: str
    key: str
    base: str
    created_at: int
    size_bytes: int
    sessions: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, name: _Optional[str] = ..., image: _Optional[str] = ..., image_id: _Optional[str] = ..., key: _Optional[str] = ..., base: _Optional[str] = ..., created_at: _Optional[int] = ..., size_bytes: _Optional[int] = ..., sessions: _Optional[_Iterable[str]] = ...) -> None: ...

class ListEnvironmentsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListEnvironmentsResponse(_message.Message):
    __slots__ = ("environments",)
    ENVIRONMENTS_FIELD_NUMBER: _ClassVar[int]
    environments: _containers.RepeatedCompositeFieldContainer[Environment]
    def __init__(self, environments: _Optional[_Iterable[_Union[Environment, _Mapping]]] = ...) -> None: ...

class DeleteEnvironmentRequest(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class DeleteEnvironmentResponse(_message.Message):
    __slots__ = ("environment", "message")
    ENVIRONMENT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    environment: Environment
    message: str
    def __init__(self, environment: _Optional[_Union[Environment, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class GetChangesRequest(_message.Message):
    __slots__ = ("session_id", "since_checkpoint", "max_patch_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    SINCE_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    MAX_PATCH_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    since_checkpoint: str
    max_patch_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., since_checkpoint: _Optional[str] = ..., max_patch_bytes: _Optional[int] = ...) -> None: ...

class FileChange(_message.Message):
    __slots__ = ("path", "kind", "sha256_before", "sha256_after", "mode_before", "mode_after", "size_before", "size_after", "omitted")
    PATH_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SHA256_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SHA256_AFTER_FIELD_NUMBER: _ClassVar[int]
    MODE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    MODE_AFTER_FIELD_NUMBER: _ClassVar[int]
    SIZE_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SIZE_AFTER_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    path: str
    kind: ChangeKind
    sha256_before: str
    sha256_after: str
    mode_before: int
    mode_after: int
    size_before: int
    size_after: int
    omitted: OmittedReason
    def __init__(self, path: _Optional[str] = ..., kind: _Optional[_Union[ChangeKind, str]] = ..., sha256_before: _Optional[str] = ..., sha256_after: _Optional[str] = ..., mode_before: _Optional[int] = ..., mode_after: _Optional[int] = ..., size_before: _Optional[int] = ..., size_after: _Optional[int] = ..., omitted: _Optional[_Union[OmittedReason, str]] = ...) -> None: ...

class GetChangesResponse(_message.Message):
    __slots__ = ("since_checkpoint", "changes", "truncated", "patch", "omitted", "digest", "duration_ms", "message")
    SINCE_CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    OMITTED_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    since_checkpoint: str
    changes: _containers.RepeatedCompositeFieldContainer[FileChange]
    truncated: bool
    patch: bytes
    omitted: int
    digest: str
    duration_ms: int
    message: str
    def __init__(self, since_checkpoint: _Optional[str] = ..., changes: _Optional[_Iterable[_Union[FileChange, _Mapping]]] = ..., truncated: _Optional[bool] = ..., patch: _Optional[bytes] = ..., omitted: _Optional[int] = ..., digest: _Optional[str] = ..., duration_ms: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("checkpoint_id", "label", "created_at", "files", "bytes", "own_bytes", "digest")
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    CREATED_AT_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    OWN_BYTES_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    checkpoint_id: str
    label: str
    created_at: int
    files: int
    bytes: int
    own_bytes: int
    digest: str
    def __init__(self, checkpoint_id: _Optional[str] = ..., label: _Optional[str] = ..., created_at: _Optional[int] = ..., files: _Optional[int] = ..., bytes: _Optional[int] = ..., own_bytes: _Optional[int] = ..., digest: _Optional[str] = ...) -> None: ...

class CreateCheckpointRequest(_message.Message):
    __slots__ = ("session_id", "label")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    LABEL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    label: str
    def __init__(self, session_id: _Optional[str] = ..., label: _Optional[str] = ...) -> None: ...

class CreateCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "copied_bytes", "store_bytes", "store_budget", "duration_ms", "message")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    COPIED_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORE_BYTES_FIELD_NUMBER: _ClassVar[int]
    STORE_BUDGET_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    copied_bytes: int
    store_bytes: int
    store_budget: int
    duration_ms: int
    message: str
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., copied_bytes: _Optional[int] = ..., store_bytes: _Optional[int] = ..., store_budget: _Optional[int] = ..., duration_ms: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class ListCheckpointsRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListCheckpointsResponse(_message.Message):
    __slots__ = ("checkpoints",)
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class RestoreCheckpointRequest(_message.Message):
    __slots__ = ("session_id", "checkpoint_id", "stop_commands")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    STOP_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    checkpoint_id: str
    stop_commands: bool
    def __init__(self, session_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ..., stop_commands: _Optional[bool] = ...) -> None: ...

class RestoreCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "files_written", "removed", "directories_made", "modes_changed", "digest", "stopped_commands", "duration_ms", "message")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    FILES_WRITTEN_FIELD_NUMBER: _ClassVar[int]
    REMOVED_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_MADE_FIELD_NUMBER: _ClassVar[int]
    MODES_CHANGED_FIELD_NUMBER: _ClassVar[int]
    DIGEST_FIELD_NUMBER: _ClassVar[int]
    STOPPED_COMMANDS_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    files_written: int
    removed: int
    directories_made: int
    modes_changed: int
    digest: str
    stopped_commands: int
    duration_ms: int
    message: str
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., files_written: _Optional[int] = ..., removed: _Optional[int] = ..., directories_made: _Optional[int] = ..., modes_changed: _Optional[int] = ..., digest: _Optional[str] = ..., stopped_commands: _Optional[int] = ..., duration_ms: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class DeleteCheckpointRequest(_message.Message):
    __slots__ = ("session_id", "checkpoint_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    checkpoint_id: str
    def __init__(self, session_id: _Optional[str] = ..., checkpoint_id: _Optional[str] = ...) -> None: ...

class DeleteCheckpointResponse(_message.Message):
    __slots__ = ("checkpoint", "message")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    checkpoint: Checkpoint
    message: str
    def __init__(self, checkpoint: _Optional[_Union[Checkpoint, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class UploadArchiveRequest(_message.Message):
    __slots__ = ("header", "chunk")
    HEADER_FIELD_NUMBER: _ClassVar[int]
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    header: UploadArchiveHeader
    chunk: bytes
    def __init__(self, header: _Optional[_Union[UploadArchiveHeader, _Mapping]] = ..., chunk: _Optional[bytes] = ...) -> None: ...

class UploadArchiveHeader(_message.Message):
    __slots__ = ("session_id", "destination")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    destination: str
    def __init__(self, session_id: _Optional[str] = ..., destination: _Optional[str] = ...) -> None: ...

class UploadArchiveResponse(_message.Message):
    __slots__ = ("destination", "files", "directories", "symlinks", "bytes", "stripped", "replaced", "duration_ms", "message")
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    STRIPPED_FIELD_NUMBER: _ClassVar[int]
    REPLACED_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    destination: str
    files: int
    directories: int
    symlinks: int
    bytes: int
    stripped: int
    replaced: int
    duration_ms: int
    message: str
    def __init__(self, destination: _Optional[str] = ..., files: _Optional[int] = ..., directories: _Optional[int] = ..., symlinks: _Optional[int] = ..., bytes: _Optional[int] = ..., stripped: _Optional[int] = ..., replaced: _Optional[int] = ..., duration_ms: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class DownloadArchiveRequest(_message.Message):
    __slots__ = ("session_id", "path", "gitignore", "gzip", "max_bytes")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    GITIGNORE_FIELD_NUMBER: _ClassVar[int]
    GZIP_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    path: str
    gitignore: bool
    gzip: bool
    max_bytes: int
    def __init__(self, session_id: _Optional[str] = ..., path: _Optional[str] = ..., gitignore: _Optional[bool] = ..., gzip: _Optional[bool] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class DownloadArchiveResponse(_message.Message):
    __slots__ = ("chunk", "done")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    DONE_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    done: DownloadSummary
    def __init__(self, chunk: _Optional[bytes] = ..., done: _Optional[_Union[DownloadSummary, _Mapping]] = ...) -> None: ...

class DownloadSummary(_message.Message):
    __slots__ = ("files", "directories", "symlinks", "bytes", "skipped", "skipped_count", "duration_ms", "message")
    FILES_FIELD_NUMBER: _ClassVar[int]
    DIRECTORIES_FIELD_NUMBER: _ClassVar[int]
    SYMLINKS_FIELD_NUMBER: _ClassVar[int]
    BYTES_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_COUNT_FIELD_NUMBER: _ClassVar[int]
    DURATION_MS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    files: int
    directories: int
    symlinks: int
    bytes: int
    skipped: _containers.RepeatedCompositeFieldContainer[SkippedPath]
    skipped_count: int
    duration_ms: int
    message: str
    def __init__(self, files: _Optional[int] = ..., directories: _Optional[int] = ..., symlinks: _Optional[int] = ..., bytes: _Optional[int] = ..., skipped: _Optional[_Iterable[_Union[SkippedPath, _Mapping]]] = ..., skipped_count: _Optional[int] = ..., duration_ms: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class SkippedPath(_message.Message):
    __slots__ = ("path", "why")
    PATH_FIELD_NUMBER: _ClassVar[int]
    WHY_FIELD_NUMBER: _ClassVar[int]
    path: str
    why: str
    def __init__(self, path: _Optional[str] = ..., why: _Optional[str] = ...) -> None: ...

class ApplyPatchRequest(_message.Message):
    __slots__ = ("session_id", "patch")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PATCH_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    patch: str
    def __init__(self, session_id: _Optional[str] = ..., patch: _Optional[str] = ...) -> None: ...

class PatchedFile(_message.Message):
    __slots__ = ("path", "action", "old_path", "sha256_before", "sha256_after", "hunks", "line_delta")
    PATH_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    SHA256_BEFORE_FIELD_NUMBER: _ClassVar[int]
    SHA256_AFTER_FIELD_NUMBER: _ClassVar[int]
    HUNKS_FIELD_NUMBER: _ClassVar[int]
    LINE_DELTA_FIELD_NUMBER: _ClassVar[int]
    path: str
    action: PatchAction
    old_path: str
    sha256_before: str
    sha256_after: str
    hunks: int
    line_delta: int
    def __init__(self, path: _Optional[str] = ..., action: _Optional[_Union[PatchAction, str]] = ..., old_path: _Optional[str] = ..., sha256_before: _Optional[str] = ..., sha256_after: _Optional[str] = ..., hunks: _Optional[int] = ..., line_delta: _Optional[int] = ...) -> None: ...

class ApplyPatchResponse(_message.Message):
    __slots__ = ("files", "message", "rejected")
    FILES_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    files: _containers.RepeatedCompositeFieldContainer[PatchedFile]
    message: str
    rejected: Rejection
    def __init__(self, files: _Optional[_Iterable[_Union[PatchedFile, _Mapping]]] = ..., message: _Optional[str] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class PlanStep(_message.Message):
    __slots__ = ("description", "files")
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    FILES_FIELD_NUMBER: _ClassVar[int]
    description: str
    files: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, description: _Optional[str] = ..., files: _Optional[_Iterable[str]] = ...) -> None: ...

class Plan(_message.Message):
    __slots__ = ("goal", "steps", "verification", "risks")
    GOAL_FIELD_NUMBER: _ClassVar[int]
    STEPS_FIELD_NUMBER: _ClassVar[int]
    VERIFICATION_FIELD_NUMBER: _ClassVar[int]
    RISKS_FIELD_NUMBER: _ClassVar[int]
    goal: str
    steps: _containers.RepeatedCompositeFieldContainer[PlanStep]
    verification: str
    risks: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, goal: _Optional[str] = ..., steps: _Optional[_Iterable[_Union[PlanStep, _Mapping]]] = ..., verification: _Optional[str] = ..., risks: _Optional[_Iterable[str]] = ...) -> None: ...

class SubmitPlanRequest(_message.Message):
    __slots__ = ("session_id", "plan")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    plan: Plan
    def __init__(self, session_id: _Optional[str] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ...) -> None: ...

class WithheldFile(_message.Message):
    __slots__ = ("path", "rule", "message")
    PATH_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    path: str
    rule: str
    message: str
    def __init__(self, path: _Optional[str] = ..., rule: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class Decision(_message.Message):
    __slots__ = ("decided_by", "note", "decided_at_ms")
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    decided_by: str
    note: str
    decided_at_ms: int
    def __init__(self, decided_by: _Optional[str] = ..., note: _Optional[str] = ..., decided_at_ms: _Optional[int] = ...) -> None: ...

class ApprovedPlan(_message.Message):
    __slots__ = ("approval_id", "plan", "granted", "withheld", "decision")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    GRANTED_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    plan: Plan
    granted: _containers.RepeatedScalarFieldContainer[str]
    withheld: _containers.RepeatedCompositeFieldContainer[WithheldFile]
    decision: Decision
    def __init__(self, approval_id: _Optional[str] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ..., granted: _Optional[_Iterable[str]] = ..., withheld: _Optional[_Iterable[_Union[WithheldFile, _Mapping]]] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ...) -> None: ...

class Rejection(_message.Message):
    __slots__ = ("approval_id", "reason", "timed_out", "decision", "message")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    TIMED_OUT_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    reason: str
    timed_out: bool
    decision: Decision
    message: str
    def __init__(self, approval_id: _Optional[str] = ..., reason: _Optional[str] = ..., timed_out: _Optional[bool] = ..., decision: _Optional[_Union[Decision, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class PlanPending(_message.Message):
    __slots__ = ("approval_id", "withheld", "expires_at_ms")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    withheld: _containers.RepeatedCompositeFieldContainer[WithheldFile]
    expires_at_ms: int
    def __init__(self, approval_id: _Optional[str] = ..., withheld: _Optional[_Iterable[_Union[WithheldFile, _Mapping]]] = ..., expires_at_ms: _Optional[int] = ...) -> None: ...

class PlanEvent(_message.Message):
    __slots__ = ("pending", "approved", "rejected", "message")
    PENDING_FIELD_NUMBER: _ClassVar[int]
    APPROVED_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    pending: PlanPending
    approved: ApprovedPlan
    rejected: Rejection
    message: str
    def __init__(self, pending: _Optional[_Union[PlanPending, _Mapping]] = ..., approved: _Optional[_Union[ApprovedPlan, _Mapping]] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ..., message: _Optional[str] = ...) -> None: ...

class ListPendingApprovalsRequest(_message.Message):
    __slots__ = ("wait_ms", "session_id")
    WAIT_MS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    wait_ms: int
    session_id: str
    def __init__(self, wait_ms: _Optional[int] = ..., session_id: _Optional[str] = ...) -> None: ...

class PendingCall(_message.Message):
    __slots__ = ("tool", "summary", "rule", "path", "command", "change")
    TOOL_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    RULE_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CHANGE_FIELD_NUMBER: _ClassVar[int]
    tool: str
    summary: str
    rule: str
    path: str
    command: str
    change: str
    def __init__(self, tool: _Optional[str] = ..., summary: _Optional[str] = ..., rule: _Optional[str] = ..., path: _Optional[str] = ..., command: _Optional[str] = ..., change: _Optional[str] = ...) -> None: ...

class PendingApproval(_message.Message):
    __slots__ = ("approval_id", "session_id", "workspace_path", "requested_at_ms", "expires_at_ms", "plan", "call", "withheld")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_PATH_FIELD_NUMBER: _ClassVar[int]
    REQUESTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    EXPIRES_AT_MS_FIELD_NUMBER: _ClassVar[int]
    PLAN_FIELD_NUMBER: _ClassVar[int]
    CALL_FIELD_NUMBER: _ClassVar[int]
    WITHHELD_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    session_id: str
    workspace_path: str
    requested_at_ms: int
    expires_at_ms: int
    plan: Plan
    call: PendingCall
    withheld: _containers.RepeatedCompositeFieldContainer[WithheldFile]
    def __init__(self, approval_id: _Optional[str] = ..., session_id: _Optional[str] = ..., workspace_path: _Optional[str] = ..., requested_at_ms: _Optional[int] = ..., expires_at_ms: _Optional[int] = ..., plan: _Optional[_Union[Plan, _Mapping]] = ..., call: _Optional[_Union[PendingCall, _Mapping]] = ..., withheld: _Optional[_Iterable[_Union[WithheldFile, _Mapping]]] = ...) -> None: ...

class ListPendingApprovalsResponse(_message.Message):
    __slots__ = ("pending",)
    PENDING_FIELD_NUMBER: _ClassVar[int]
    pending: _containers.RepeatedCompositeFieldContainer[PendingApproval]
    def __init__(self, pending: _Optional[_Iterable[_Union[PendingApproval, _Mapping]]] = ...) -> None: ...

class DecideRequest(_message.Message):
    __slots__ = ("approval_id", "verdict", "note", "decided_by")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    VERDICT_FIELD_NUMBER: _ClassVar[int]
    NOTE_FIELD_NUMBER: _ClassVar[int]
    DECIDED_BY_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    verdict: Verdict
    note: str
    decided_by: str
    def __init__(self, approval_id: _Optional[str] = ..., verdict: _Optional[_Union[Verdict, str]] = ..., note: _Optional[str] = ..., decided_by: _Optional[str] = ...) -> None: ...

class DecideResponse(_message.Message):
    __slots__ = ("approval_id", "session_id", "outcome", "message")
    APPROVAL_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    approval_id: str
    session_id: str
    outcome: str
    message: str
    def __init__(self, approval_id: _Optional[str] = ..., session_id: _Optional[str] = ..., outcome: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class StartProcessRequest(_message.Message):
    __slots__ = ("session_id", "command", "cwd", "env", "stdin", "pty", "ready")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    STDIN_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    command: str
    cwd: str
    env: _containers.ScalarMap[str, str]
    stdin: bool
    pty: Pty
    ready: Readiness
    def __init__(self, session_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ..., stdin: _Optional[bool] = ..., pty: _Optional[_Union[Pty, _Mapping]] = ..., ready: _Optional[_Union[Readiness, _Mapping]] = ...) -> None: ...

class Pty(_message.Message):
    __slots__ = ("rows", "cols")
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    rows: int
    cols: int
    def __init__(self, rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class Readiness(_message.Message):
    __slots__ = ("port", "output_regex", "timeout_ms")
    PORT_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_REGEX_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_MS_FIELD_NUMBER: _ClassVar[int]
    port: int
    output_regex: str
    timeout_ms: int
    def __init__(self, port: _Optional[int] = ..., output_regex: _Optional[str] = ..., timeout_ms: _Optional[int] = ...) -> None: ...

class StartProcessResponse(_message.Message):
    __slots__ = ("process", "ready_state", "ready_ms", "stdout_tail", "stderr_tail", "rejected")
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    READY_STATE_FIELD_NUMBER: _ClassVar[int]
    READY_MS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_TAIL_FIELD_NUMBER: _ClassVar[int]
    STDERR_TAIL_FIELD_NUMBER: _ClassVar[int]
    REJECTED_FIELD_NUMBER: _ClassVar[int]
    process: Process
    ready_state: ReadyState
    ready_ms: int
    stdout_tail: str
    stderr_tail: str
    rejected: Rejection
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ..., ready_state: _Optional[_Union[ReadyState, str]] = ..., ready_ms: _Optional[int] = ..., stdout_tail: _Optional[str] = ..., stderr_tail: _Optional[str] = ..., rejected: _Optional[_Union[Rejection, _Mapping]] = ...) -> None: ...

class Process(_message.Message):
    __slots__ = ("process_id", "command", "cwd", "state", "exit_code", "killed_by", "started_at_ms", "ended_at_ms", "cpu_ms", "stdout_bytes", "stderr_bytes", "pty", "stdin_open", "ready", "notes")
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    COMMAND_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    KILLED_BY_FIELD_NUMBER: _ClassVar[int]
    STARTED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    ENDED_AT_MS_FIELD_NUMBER: _ClassVar[int]
    CPU_MS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    PTY_FIELD_NUMBER: _ClassVar[int]
    STDIN_OPEN_FIELD_NUMBER: _ClassVar[int]
    READY_FIELD_NUMBER: _ClassVar[int]
    NOTES_FIELD_NUMBER: _ClassVar[int]
    process_id: str
    command: str
    cwd: str
    state: ProcessState
    exit_code: int
    killed_by: KilledBy
    started_at_ms: int
    ended_at_ms: int
    cpu_ms: int
    stdout_bytes: int
    stderr_bytes: int
    pty: bool
    stdin_open: bool
    ready: bool
    notes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, process_id: _Optional[str] = ..., command: _Optional[str] = ..., cwd: _Optional[str] = ..., state: _Optional[_Union[ProcessState, str]] = ..., exit_code: _Optional[int] = ..., killed_by: _Optional[_Union[KilledBy, str]] = ..., started_at_ms: _Optional[int] = ..., ended_at_ms: _Optional[int] = ..., cpu_ms: _Optional[int] = ..., stdout_bytes: _Optional[int] = ..., stderr_bytes: _Optional[int] = ..., pty: _Optional[bool] = ..., stdin_open: _Optional[bool] = ..., ready: _Optional[bool] = ..., notes: _Optional[_Iterable[str]] = ...) -> None: ...

class ListProcessesRequest(_message.Message):
    __slots__ = ("session_id",)
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    def __init__(self, session_id: _Optional[str] = ...) -> None: ...

class ListProcessesResponse(_message.Message):
    __slots__ = ("processes",)
    PROCESSES_FIELD_NUMBER: _ClassVar[int]
    processes: _containers.RepeatedCompositeFieldContainer[Process]
    def __init__(self, processes: _Optional[_Iterable[_Union[Process, _Mapping]]] = ...) -> None: ...

class ReadProcessOutputRequest(_message.Message):
    __slots__ = ("session_id", "process_id", "stdout_offset", "stderr_offset", "follow")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    FOLLOW_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    process_id: str
    stdout_offset: int
    stderr_offset: int
    follow: bool
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., follow: _Optional[bool] = ...) -> None: ...

class ProcessOutput(_message.Message):
    __slots__ = ("chunk", "end")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    END_FIELD_NUMBER: _ClassVar[int]
    chunk: ProcessOutputChunk
    end: ProcessOutputEnd
    def __init__(self, chunk: _Optional[_Union[ProcessOutputChunk, _Mapping]] = ..., end: _Optional[_Union[ProcessOutputEnd, _Mapping]] = ...) -> None: ...

class ProcessOutputChunk(_message.Message):
    __slots__ = ("stream", "offset", "data", "skipped")
    STREAM_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    SKIPPED_FIELD_NUMBER: _ClassVar[int]
    stream: ProcessStream
    offset: int
    data: bytes
    skipped: int
    def __init__(self, stream: _Optional[_Union[ProcessStream, str]] = ..., offset: _Optional[int] = ..., data: _Optional[bytes] = ..., skipped: _Optional[int] = ...) -> None: ...

class ProcessOutputEnd(_message.Message):
    __slots__ = ("stdout_offset", "stderr_offset", "process")
    STDOUT_OFFSET_FIELD_NUMBER: _ClassVar[int]
    STDERR_OFFSET_FIELD_NUMBER: _ClassVar[int]
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    stdout_offset: int
    stderr_offset: int
    process: Process
    def __init__(self, stdout_offset: _Optional[int] = ..., stderr_offset: _Optional[int] = ..., process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class WriteProcessInputRequest(_message.Message):
    __slots__ = ("session_id", "process_id", "data", "close")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    CLOSE_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    process_id: str
    data: bytes
    close: bool
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., data: _Optional[bytes] = ..., close: _Optional[bool] = ...) -> None: ...

class WriteProcessInputResponse(_message.Message):
    __slots__ = ("written", "closed")
    WRITTEN_FIELD_NUMBER: _ClassVar[int]
    CLOSED_FIELD_NUMBER: _ClassVar[int]
    written: int
    closed: bool
    def __init__(self, written: _Optional[int] = ..., closed: _Optional[bool] = ...) -> None: ...

class ResizeProcessRequest(_message.Message):
    __slots__ = ("session_id", "process_id", "rows", "cols")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    ROWS_FIELD_NUMBER: _ClassVar[int]
    COLS_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    process_id: str
    rows: int
    cols: int
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., rows: _Optional[int] = ..., cols: _Optional[int] = ...) -> None: ...

class ResizeProcessResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class SignalProcessRequest(_message.Message):
    __slots__ = ("session_id", "process_id", "signal")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    process_id: str
    signal: ProcessSignal
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ..., signal: _Optional[_Union[ProcessSignal, str]] = ...) -> None: ...

class SignalProcessResponse(_message.Message):
    __slots__ = ("process",)
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: Process
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...

class StopProcessRequest(_message.Message):
    __slots__ = ("session_id", "process_id")
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PROCESS_ID_FIELD_NUMBER: _ClassVar[int]
    session_id: str
    process_id: str
    def __init__(self, session_id: _Optional[str] = ..., process_id: _Optional[str] = ...) -> None: ...

class StopProcessResponse(_message.Message):
    __slots__ = ("process",)
    PROCESS_FIELD_NUMBER: _ClassVar[int]
    process: Process
    def __init__(self, process: _Optional[_Union[Process, _Mapping]] = ...) -> None: ...
