"""Exceptions: one class per sandboxd reason, each under a family.

Every non-OK status raises a :class:`SandboxdError` carrying ``reason`` (the
``google.rpc.ErrorInfo`` reason, e.g. ``"OLD_STRING_NOT_FOUND"``),
``message`` (the service's message, written for a model, verbatim), ``code``
(a :class:`grpc.StatusCode`) and ``metadata`` (the ErrorInfo metadata).

The class is chosen by reason (:data:`BY_REASON`); a reason this client does
not know yet raises its family, chosen by the gRPC code, or the base class.
A status without an ErrorInfo (the service was never reached, a deadline
passed) raises a :class:`TransportError` with ``reason`` None.
"""

from __future__ import annotations

import types
from typing import Any, ClassVar, Mapping, Optional

import grpc

from ._status import DETAILS_KEY, decode_status

#: ``ErrorInfo.domain`` of every sandboxd error.
DOMAIN = "sandboxd"

_UNSET: Any = object()
_REGISTRY: dict[str, type[SandboxdError]] = {}


class SandboxdError(Exception):
    """A call failed. Base class of every sandboxd exception."""

    #: The reason this class stands for (None for families and transport errors).
    REASON: ClassVar[Optional[str]] = None

    reason: Optional[str]
    message: str
    code: Optional[grpc.StatusCode]
    metadata: dict[str, str]
    domain: Optional[str]

    def __init_subclass__(cls, reason: Optional[str] = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        cls.REASON = reason
        if reason is not None:
            if reason in _REGISTRY:
                raise TypeError(f"two classes for reason {reason}")
            _REGISTRY[reason] = cls

    def __init__(
        self,
        message: str,
        *,
        reason: Optional[str] = _UNSET,
        code: Optional[grpc.StatusCode] = None,
        metadata: Optional[Mapping[str, str]] = None,
        domain: Optional[str] = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.reason = type(self).REASON if reason is _UNSET else reason
        self.code = code
        self.metadata = dict(metadata or {})
        self.domain = domain

    def __str__(self) -> str:
        if self.reason:
            return f"[{self.reason}] {self.message}"
        if self.code is not None:
            return f"[{self.code.name}] {self.message}"
        return self.message

    def __repr__(self) -> str:
        return f"{type(self).__name__}(reason={self.reason!r}, message={self.message!r})"

    def __reduce__(self) -> Any:
        return (
            _rebuild,
            (type(self), self.message, self.reason, self.code, self.metadata, self.domain),
        )


def _rebuild(cls: type[SandboxdError], message: str, reason: Any, code: Any, metadata: Any, domain: Any) -> SandboxdError:
    return cls(message, reason=reason, code=code, metadata=metadata, domain=domain)


# --- families -----------------------------------------------------------------


class EditRefused(SandboxdError):
    """An exact-match edit was refused; the file is unchanged."""


class FileRefused(SandboxdError):
    """A path or file could not be used as asked (missing, exists, not text, outside...)."""


class PolicyRefused(SandboxdError):
    """The session's or the operator's rules forbid the call."""


class SessionRefused(SandboxdError):
    """The session or its workspace cannot be used or made."""


class LimitRefused(SandboxdError):
    """The request asks for more than a limit allows."""


class InvalidRequest(SandboxdError):
    """The request itself is wrong (a bad argument, pattern, policy or encoding)."""


class AuthRefused(SandboxdError):
    """The call was not authenticated."""


class ServiceFault(SandboxdError):
    """The service or its host failed; the request may succeed later."""


class EnvironmentRefused(SandboxdError):
    """An environment could not be built, found, used or deleted."""


class ArchiveRefused(SandboxdError):
    """An upload or download was refused; nothing was extracted."""


class PatchRefused(SandboxdError):
    """A patch was refused; no file was changed."""


class CheckpointRefused(SandboxdError):
    """A checkpoint, restore or change listing was refused."""


class ApprovalRefused(SandboxdError):
    """A plan or call that needs a person could not be put to one, or a
    decision was refused. (A person's rejection is a result, not this.)"""


class ProcessRefused(SandboxdError):
    """A call about a long-running process was refused; nothing was sent or started."""


class TransportError(SandboxdError, reason="TRANSPORT"):
    """The call failed in transport: the service was unreachable, a deadline
    passed, the call was cancelled, or the transport refused it.
    ``reason`` is None when the status carried no ErrorInfo."""


# --- edits --------------------------------------------------------------------


class OldStringNotFound(EditRefused, reason="OLD_STRING_NOT_FOUND"):
    """An edit's old text does not occur in the file."""


class OldStringAmbiguous(EditRefused, reason="OLD_STRING_AMBIGUOUS"):
    """An edit's old text occurs more than once (metadata: count, lines)."""


class EditsOverlap(EditRefused, reason="EDITS_OVERLAP"):
    """Two edits of one call touch the same text."""


class DuplicateOldString(EditRefused, reason="DUPLICATE_OLD_STRING"):
    """Two edits of one call have the same old text."""


class EmptyOldString(EditRefused, reason="EMPTY_OLD_STRING"):
    """An edit's old text is empty."""


class NoChange(EditRefused, reason="NO_CHANGE"):
    """An edit's new text equals its old text."""


class NoEdits(EditRefused, reason="NO_EDITS"):
    """The call carries no edit."""


class StaleFile(EditRefused, reason="STALE_FILE"):
    """The file changed since it was read (expected_sha256 differs)."""


# --- files and paths ----------------------------------------------------------


class FileExists(FileRefused, reason="FILE_EXISTS"):
    """create() was given a path that exists."""


class FileNotFound(FileRefused, reason="FILE_NOT_FOUND"):
    """The path does not exist."""


class NotText(FileRefused, reason="NOT_TEXT"):
    """The file is not UTF-8 text."""


class FileTooLarge(FileRefused, reason="FILE_TOO_LARGE"):
    """The file (or an edit's result) is over the file tools' size limit."""


class NotAFile(FileRefused, reason="NOT_A_FILE"):
    """The path is not a regular file."""


class NotADirectory(FileRefused, reason="NOT_A_DIRECTORY"):
    """The path is not a directory."""


class LineOutOfRange(FileRefused, reason="LINE_OUT_OF_RANGE"):
    """read()'s offset is past the end of the file."""


class InvalidPath(FileRefused, reason="INVALID_PATH"):
    """The path is malformed (absolute, empty, NUL...)."""


class PathOutsideWorkspace(FileRefused, reason="PATH_OUTSIDE_WORKSPACE"):
    """The path leads out of the workspace (``..``, a symlink, a disallowed root)."""


# --- policy -------------------------------------------------------------------


class PolicyDenied(PolicyRefused, reason="POLICY_DENIED"):
    """A rule forbids it: read_only, deny_writes, allow_writes, or builds not allowed."""


class CommandRefused(PolicyRefused, reason="COMMAND_REFUSED"):
    """The slip guard refused the command (``rm -rf /``, ``git push``...)."""


class ImageNotAllowed(PolicyRefused, reason="IMAGE_NOT_ALLOWED"):
    """The image is not one the operator allows."""


# --- sessions -----------------------------------------------------------------


class SessionNotFound(SessionRefused, reason="SESSION_NOT_FOUND"):
    """No open session has this id (closed, expired, or never made)."""


class TooManySessions(SessionRefused, reason="TOO_MANY_SESSIONS"):
    """The service holds as many sessions as it may."""


class InvalidWorkspace(SessionRefused, reason="INVALID_WORKSPACE"):
    """The workspace directory cannot be used (not allowed, unsafe, unreadable)."""


class WorkspaceGone(SessionRefused, reason="WORKSPACE_GONE"):
    """The session's workspace is no longer there."""


# --- limits -------------------------------------------------------------------


class LimitExceeded(LimitRefused, reason="LIMIT_EXCEEDED"):
    """A requested value is over the operator's ceiling (metadata: field, max)."""


class MessageTooLarge(LimitRefused, reason="MESSAGE_TOO_LARGE"):
    """The request is larger than the service accepts."""


# --- invalid requests ---------------------------------------------------------


class InvalidArgument(InvalidRequest, reason="INVALID_ARGUMENT"):
    """A field of the request is invalid (metadata: field)."""


class InvalidPattern(InvalidRequest, reason="INVALID_PATTERN"):
    """A glob or regular expression does not parse."""


class InvalidPolicy(InvalidRequest, reason="INVALID_POLICY"):
    """The session's policy does not parse (a bad glob or pattern)."""


class MalformedRequest(InvalidRequest, reason="MALFORMED_REQUEST"):
    """The request does not decode (e.g. invalid UTF-8)."""


class Unimplemented(InvalidRequest, reason="UNIMPLEMENTED"):
    """The service does not offer this method."""


class InvalidPlan(InvalidRequest, reason="INVALID_PLAN"):
    """A plan lacks a goal, files or a verification command (the message names
    what); nothing of it was kept."""


# --- auth ---------------------------------------------------------------------


class Unauthenticated(AuthRefused, reason="UNAUTHENTICATED"):
    """The call carried no valid bearer token."""


class NotPermitted(AuthRefused, reason="NOT_PERMITTED"):
    """A session's token was used for a call beyond its session."""


# --- service faults -----------------------------------------------------------


class SandboxUnavailable(ServiceFault, reason="SANDBOX_UNAVAILABLE"):
    """Commands cannot run now (Docker unreachable...); file tools still work."""


class IoError(ServiceFault, reason="IO_ERROR"):
    """The service hit an I/O error on its host."""


# --- environments -------------------------------------------------------------


class EnvironmentNotFound(EnvironmentRefused, reason="ENVIRONMENT_NOT_FOUND"):
    """No environment has this name."""


class EnvironmentInUse(EnvironmentRefused, reason="ENVIRONMENT_IN_USE"):
    """The environment is used by open sessions, so it was kept."""


class BuildFailed(EnvironmentRefused, reason="BUILD_FAILED"):
    """A build step failed (metadata: step); the message has the tail of its output."""


class BuildTimedOut(EnvironmentRefused, reason="BUILD_TIMED_OUT"):
    """The build passed its time limit."""


class InvalidRecipe(EnvironmentRefused, reason="INVALID_RECIPE"):
    """The Dockerfile, setup script or context is not acceptable."""


class BuildContextTooLarge(EnvironmentRefused, reason="BUILD_CONTEXT_TOO_LARGE"):
    """The build context is over the operator's ceiling."""


class ImageNotFound(EnvironmentRefused, reason="IMAGE_NOT_FOUND"):
    """The image (or a build's base) is not present locally; nothing is pulled."""


# --- archives -----------------------------------------------------------------


class ArchiveEntryUnsafe(ArchiveRefused, reason="ARCHIVE_ENTRY_UNSAFE"):
    """An entry would land outside its place (absolute, ``..``, below a symlink, a device...)."""


class ArchiveEntryInvalid(ArchiveRefused, reason="ARCHIVE_ENTRY_INVALID"):
    """An entry's name is duplicate, not UTF-8, too long or too deep."""


class ArchiveTooLarge(ArchiveRefused, reason="ARCHIVE_TOO_LARGE"):
    """The archive is over a ceiling (bytes, a file's size, entries)."""


class ArchiveBomb(ArchiveRefused, reason="ARCHIVE_BOMB"):
    """The gzip stream expands past the allowed ratio."""


class ArchiveMalformed(ArchiveRefused, reason="ARCHIVE_MALFORMED"):
    """The data is not a (whole) tar or tar.gz archive."""


class ArchiveConflict(ArchiveRefused, reason="ARCHIVE_CONFLICT"):
    """An entry is a file where the workspace has a directory, or the reverse."""


class ArchiveHeaderTooLarge(ArchiveRefused, reason="ARCHIVE_HEADER_TOO_LARGE"):
    """An extension record (a long name or link, PAX headers) is past its bound (metadata: limit)."""


class TransferTooSlow(ArchiveRefused, reason="TRANSFER_TOO_SLOW"):
    """An upload or download fell below the minimum pace while holding a slot (metadata: limit)."""


class DownloadTooLarge(ArchiveRefused, reason="DOWNLOAD_TOO_LARGE"):
    """The download passed max_bytes."""


# --- patches ------------------------------------------------------------------


class PatchMalformed(PatchRefused, reason="PATCH_MALFORMED"):
    """The patch does not parse (metadata: line)."""


class PatchUnsupported(PatchRefused, reason="PATCH_UNSUPPORTED"):
    """The patch holds a binary patch or a copy."""


class PatchContextMismatch(PatchRefused, reason="PATCH_CONTEXT_MISMATCH"):
    """A hunk does not match the file (metadata: path, hunk)."""


class PatchContextAmbiguous(PatchRefused, reason="PATCH_CONTEXT_AMBIGUOUS"):
    """A hunk matches at several places (metadata: path, hunk)."""


class PatchSearchBudget(PatchRefused, reason="PATCH_SEARCH_BUDGET"):
    """Finding the patch's hunks away from where they say took more than the budget (metadata: limit)."""


# --- checkpoints and restores -------------------------------------------------


class CheckpointNotFound(CheckpointRefused, reason="CHECKPOINT_NOT_FOUND"):
    """No checkpoint of this session has this id."""


class TooManyCheckpoints(CheckpointRefused, reason="TOO_MANY_CHECKPOINTS"):
    """The session holds as many checkpoints as it may."""


class CheckpointStoreFull(CheckpointRefused, reason="CHECKPOINT_STORE_FULL"):
    """The checkpoint store passed the session's disk quota."""


class TreeTooDeep(CheckpointRefused, reason="TREE_TOO_DEEP"):
    """The workspace is too deep (or a path too long) to checkpoint."""


class TreeTooLarge(CheckpointRefused, reason="TREE_TOO_LARGE"):
    """The workspace holds too many entries to checkpoint."""


class ScanLimitReached(CheckpointRefused, reason="SCAN_LIMIT_REACHED"):
    """Reading the workspace passed the bytes or time one scan may take (metadata: limit, bound)."""


class CheckpointMemoryFull(CheckpointRefused, reason="CHECKPOINT_MEMORY_FULL"):
    """The session's pictures (its checkpoints and starting point) fill their memory share."""


class NoStartingPoint(CheckpointRefused, reason="NO_STARTING_POINT"):
    """The session's starting picture is missing, so changes cannot be listed."""


class RestoreFailed(CheckpointRefused, reason="RESTORE_FAILED"):
    """A restore failed midway and was undone."""


class CommandRunning(CheckpointRefused, reason="COMMAND_RUNNING"):
    """A command is running, so the restore was refused (see stop_commands)."""


# --- approvals ----------------------------------------------------------------


class ApprovalUnavailable(ApprovalRefused, reason="APPROVAL_UNAVAILABLE"):
    """Nobody can approve (the session is unattended, or no approver was seen
    lately): proceed on the safest option and state the assumption."""


class ApprovalNotFound(ApprovalRefused, reason="APPROVAL_NOT_FOUND"):
    """No such item waits for a decision: it was decided, timed out or withdrawn."""


# --- long-running processes ---------------------------------------------------


class ProcessNotFound(ProcessRefused, reason="PROCESS_NOT_FOUND"):
    """The session has no process of that id."""


class TooManyProcesses(ProcessRefused, reason="TOO_MANY_PROCESSES"):
    """The session runs its limit of processes (the message names them): stop one first."""


class TooManyStreams(LimitRefused, reason="TOO_MANY_STREAMS"):
    """The caller holds its limit of calls open at once: read or cancel some first."""


class RepliesUnread(LimitRefused, reason="REPLIES_UNREAD"):
    """The session's earlier replies are not read and hold its budget: read or cancel them first."""


class TooManyReaders(ProcessRefused, reason="TOO_MANY_READERS"):
    """The session (or the service) has its limit of open output streams: close one first."""


class ReaderStalled(ProcessRefused, reason="READER_STALLED"):
    """This output stream went unread for a minute and lost its place: read again from its offsets."""


class ProcessEnded(ProcessRefused, reason="PROCESS_ENDED"):
    """The process has ended, so it takes no input, resize or signal."""


class ProcessInputClosed(ProcessRefused, reason="PROCESS_INPUT_CLOSED"):
    """The process's input was closed, or it was started without one (see ``stdin``)."""


class ProcessNotReading(ProcessRefused, reason="PROCESS_NOT_READING"):
    """The process did not take its input in time; ``metadata["written"]`` is what it took."""


class NotATerminal(ProcessRefused, reason="NOT_A_TERMINAL"):
    """The process does not run on a terminal, so it has no size to set."""


class ProcessesUnavailable(ProcessRefused, reason="PROCESSES_UNAVAILABLE"):
    """The service cannot run long-running processes here (no in-container supervisor)."""


# --- transport (no ErrorInfo, or reason TRANSPORT) ----------------------------


class Unavailable(TransportError):
    """The service could not be reached (connection refused, closed...)."""


class DeadlineExceeded(TransportError):
    """The call's deadline passed."""


class Cancelled(TransportError, reason="CANCELLED"):
    """The call was cancelled (by the caller, or while the workspace was read)."""


#: Every reason this client knows, mapped to its class.
BY_REASON: Mapping[str, type[SandboxdError]] = types.MappingProxyType(_REGISTRY)

_TRANSPORT_BY_CODE: dict[grpc.StatusCode, type[SandboxdError]] = {
    grpc.StatusCode.UNAVAILABLE: Unavailable,
    grpc.StatusCode.DEADLINE_EXCEEDED: DeadlineExceeded,
    grpc.StatusCode.CANCELLED: Cancelled,
    grpc.StatusCode.UNAUTHENTICATED: Unauthenticated,
}

_FAMILY_BY_CODE: dict[grpc.StatusCode, type[SandboxdError]] = {
    grpc.StatusCode.UNAUTHENTICATED: AuthRefused,
    grpc.StatusCode.PERMISSION_DENIED: PolicyRefused,
    grpc.StatusCode.INVALID_ARGUMENT: InvalidRequest,
    grpc.StatusCode.RESOURCE_EXHAUSTED: LimitRefused,
    grpc.StatusCode.UNAVAILABLE: ServiceFault,
    grpc.StatusCode.INTERNAL: ServiceFault,
}


def error_class(reason: Optional[str], code: Optional[grpc.StatusCode] = None) -> type[SandboxdError]:
    """The class raised for a sandboxd reason (None: no ErrorInfo) and gRPC code."""
    if reason is None:
        return _TRANSPORT_BY_CODE.get(code, TransportError) if code is not None else TransportError
    cls = _REGISTRY.get(reason)
    if cls is TransportError and code is not None:
        return _TRANSPORT_BY_CODE.get(code, TransportError)
    if cls is not None:
        return cls
    return _FAMILY_BY_CODE.get(code, SandboxdError) if code is not None else SandboxdError


def from_rpc_error(err: grpc.RpcError) -> SandboxdError:
    """The exception for a failed gRPC call (a grpc.RpcError that is a grpc.Call)."""
    code: Optional[grpc.StatusCode] = err.code() if hasattr(err, "code") else None
    message: str = (err.details() if hasattr(err, "details") else None) or ""
    trailing: Any = err.trailing_metadata() if hasattr(err, "trailing_metadata") else None
    status = None
    for key, value in trailing or ():
        if key == DETAILS_KEY and isinstance(value, bytes):
            status = decode_status(value)
            break
    info = status.error_info if status is not None else None
    if status is not None and status.message:
        message = status.message
    if info is not None and info.domain == DOMAIN:
        cls = error_class(info.reason, code)
    else:
        cls = error_class(None, code)
    return cls(
        message or (code.name if code is not None else "call failed"),
        reason=info.reason if info is not None else None,
        code=code,
        metadata=info.metadata if info is not None else None,
        domain=info.domain if info is not None else None,
    )
