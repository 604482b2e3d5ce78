"""The client: :func:`connect`, :class:`Client` and :class:`Session`."""

from __future__ import annotations

import codecs
import getpass
import io
import math
import os
import shlex
import signal as _signal
import ssl
import tarfile
import tempfile
from typing import IO, Any, Callable, Iterable, Iterator, List, Mapping, Optional, Sequence, Union

import grpc

from . import _convert as conv
from . import discover
from . import types as t
from .errors import (
    DeadlineExceeded,
    ProcessNotFound,
    SandboxdError,
    SessionNotFound,
    TransportError,
    from_rpc_error,
)
from .v1 import sandbox_pb2 as pb
from .v1 import sandbox_pb2_grpc as pb_grpc

__all__ = ["connect", "Client", "Session", "CommandStream", "BuildStream", "Process", "ProcessStream"]

#: Address used when neither ``addr`` nor ``SANDBOXD_ADDR`` is given and no
#: service answers on a local socket (see :mod:`sandboxd.discover`).
DEFAULT_ADDR = discover.DEFAULT_ADDR
#: Largest message sent or received: the service's own limit (src/server.rs).
MAX_MESSAGE_BYTES = 16 * 1024 * 1024
#: Bytes per message of an upload.
UPLOAD_CHUNK = 1 << 20

StrPath = Union[str, "os.PathLike[str]"]
EditLike = Union[t.Edit, "tuple[str, str]", "tuple[str, str, bool]"]
StepLike = Union[t.PlanStep, "tuple[str, Iterable[StrPath]]", Mapping[str, Any]]
ApprovalRef = Union[str, t.PendingApproval]
Command = Union[str, Sequence[str]]
PtyLike = Union[None, bool, "tuple[int, int]"]
SignalLike = Union[str, int]

_DEFAULT: Any = object()


def connect(
    addr: Optional[str] = None,
    token: Optional[str] = None,
    ca_cert: Optional[StrPath] = None,
    *,
    timeout: Optional[float] = None,
) -> "Client":
    """Opens a client of the sandboxd service at ``addr``.

    ``addr``: ``host:port`` or ``http://host:port`` (plaintext),
    ``https://host:port`` (TLS, trusting the PEM file ``ca_cert``, else
    ``SANDBOXD_CA_CERT``, else the system's roots) or ``unix:/path``;
    default ``SANDBOXD_ADDR``, else the service on this machine: the user's
    own on ``$XDG_RUNTIME_DIR/sandboxd.sock``, else the system's on
    ``/run/sandboxd.sock`` if the user may connect to it, else
    ``127.0.0.1:50051`` (see :mod:`sandboxd.discover`). ``token`` (default
    ``SANDBOXD_TOKEN``, else for a loopback address the token the local
    service made for it, where this user may read it) is sent as
    ``authorization: Bearer <token>`` on every call. ``timeout`` is a
    deadline in seconds for each unary call (commands, builds and transfers
    have none). Nothing is sent until the first call (finding the service
    only connects to local sockets to see that they answer). A loopback
    address found rather than given is used only while the user's own or
    root's service answers there, and a token found in a state directory
    goes only to its owner's service: every connection is checked (see
    :mod:`sandboxd.discover`), and a call that would reach another user's
    listener raises :class:`sandboxd.discover.UntrustedService` with
    nothing sent.
    """
    return Client(addr, token, ca_cert, timeout=timeout)


def _target(addr: str) -> tuple[str, bool]:
    """(grpc target, use TLS) for an address."""
    if addr.startswith("unix:"):
        path = addr[len("unix:") :]
        if path.startswith("//"):
            path = path[2:]
        if not path.startswith("/"):
            raise ValueError(f"{addr!r}: a Unix socket needs an absolute path (unix:/PATH)")
        return f"unix:{path}", False
    for scheme, tls, port in (("http://", False, 80), ("https://", True, 443)):
        if addr.startswith(scheme):
            hostport = addr[len(scheme) :].rstrip("/")
            if "/" in hostport or not hostport:
                raise ValueError(f"{addr!r}: expected {scheme}HOST:PORT")
            if not hostport.rsplit("]", 1)[-1].count(":"):
                hostport = f"{hostport}:{port}"
            return hostport, tls
    if "://" in addr:
        raise ValueError(f"{addr!r}: expected HOST:PORT, http://, https:// or unix:/PATH")
    return addr, False


_CA_BUNDLES = (
    "/etc/ssl/certs/ca-certificates.crt",  # Debian, Ubuntu, Alpine
    "/etc/pki/tls/certs/ca-bundle.crt",  # Fedora, RHEL
    "/etc/ssl/cert.pem",  # macOS, BSDs
)


def _system_roots() -> Optional[bytes]:
    """The system's CA bundle (SSL_CERT_FILE first), or None for grpc's own roots."""
    paths = ssl.get_default_verify_paths()
    for path in (paths.cafile, paths.openssl_cafile, *_CA_BUNDLES):
        if path and os.path.isfile(path):
            with open(path, "rb") as f:
                return f.read()
    return None  # grpc's own bundled roots


def _bearer(token: Optional[str]) -> Optional[list[tuple[str, str]]]:
    """Call metadata carrying ``token`` as the bearer; None without one."""
    return [("authorization", f"Bearer {token}")] if token else None


class _CallDetails(grpc.ClientCallDetails):
    def __init__(self, base: grpc.ClientCallDetails, metadata: Any) -> None:
        self.method = base.method
        self.timeout = base.timeout
        self.metadata = metadata
        self.credentials = base.credentials
        self.wait_for_ready = getattr(base, "wait_for_ready", None)
        self.compression = getattr(base, "compression", None)


class _BearerToken(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg,unused-ignore]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg,unused-ignore]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[type-arg,unused-ignore]
    grpc.StreamStreamClientInterceptor,  # type: ignore[type-arg,unused-ignore]
):
    """Adds ``authorization: Bearer <token>`` to every call that carries no
    credentials of its own (a session's calls carry its token)."""

    def __init__(self, token: str) -> None:
        self._header = ("authorization", f"Bearer {token}")

    def _details(self, d: grpc.ClientCallDetails) -> grpc.ClientCallDetails:
        given = list(d.metadata or ())
        if any(key == "authorization" for key, _ in given):
            return d
        return _CallDetails(d, [*given, self._header])

    def intercept_unary_unary(self, continuation: Any, d: Any, request: Any) -> Any:
        return continuation(self._details(d), request)

    def intercept_unary_stream(self, continuation: Any, d: Any, request: Any) -> Any:
        return continuation(self._details(d), request)

    def intercept_stream_unary(self, continuation: Any, d: Any, requests: Any) -> Any:
        return continuation(self._details(d), requests)

    def intercept_stream_stream(self, continuation: Any, d: Any, requests: Any) -> Any:
        return continuation(self._details(d), requests)


class _Vetted(
    grpc.UnaryUnaryClientInterceptor,  # type: ignore[type-arg,unused-ignore]
    grpc.UnaryStreamClientInterceptor,  # type: ignore[type-arg,unused-ignore]
    grpc.StreamUnaryClientInterceptor,  # type: ignore[type-arg,unused-ignore]
    grpc.StreamStreamClientInterceptor,  # type: ignore[type-arg,unused-ignore]
):
    """Refuses every call, before it is made, while a listener of an untrusted
    user holds the relay's port (:class:`sandboxd.discover.UntrustedService`,
    naming the port and the uid). The relay itself checks every connection;
    this names the stranger at once instead of a failed connection."""

    def __init__(self, relay: discover.Relay) -> None:
        self._relay = relay

    def intercept_unary_unary(self, continuation: Any, d: Any, request: Any) -> Any:
        self._relay.check_listener()
        return continuation(d, request)

    def intercept_unary_stream(self, continuation: Any, d: Any, request: Any) -> Any:
        self._relay.check_listener()
        return continuation(d, request)

    def intercept_stream_unary(self, continuation: Any, d: Any, requests: Any) -> Any:
        self._relay.check_listener()
        return continuation(d, requests)

    def intercept_stream_stream(self, continuation: Any, d: Any, requests: Any) -> Any:
        self._relay.check_listener()
        return continuation(d, requests)


def _ms(seconds: Optional[float], what: str) -> int:
    if seconds is None:
        return 0
    if seconds <= 0:
        raise ValueError(f"{what} must be positive seconds, got {seconds!r}")
    return max(1, math.ceil(seconds * 1000))


# Which events of RunCommand carry the output (see Session.stream).
_OUTPUT_MODES = {
    "both": pb.OUTPUT_MODE_BOTH,
    "chunks": pb.OUTPUT_MODE_CHUNKS,
    "result": pb.OUTPUT_MODE_RESULT,
}


def _path(p: Optional[StrPath]) -> str:
    return "" if p is None else os.fspath(p)


class Client:
    """A connection to the sandboxd service. Use :func:`connect` to make one.

    A context manager: the channel is closed on exit.
    """

    def __init__(
        self,
        addr: Optional[str] = None,
        token: Optional[str] = None,
        ca_cert: Optional[StrPath] = None,
        *,
        timeout: Optional[float] = None,
    ) -> None:
        given = addr or os.environ.get("SANDBOXD_ADDR")
        self.addr: str = given or discover.address()
        found_token: Optional[discover.FoundToken] = None
        if token is None:
            token = os.environ.get("SANDBOXD_TOKEN")
            if not token:
                found_token = discover.found_token(self.addr)
                token = found_token.token if found_token else None
        token = (token or "").strip() or None
        target, tls = _target(self.addr)
        # A found address, or a token from a state directory, goes only to a
        # trusted service, on every connection (see sandboxd.discover).
        self._relay = discover.relay_for(self.addr, found=not given, token=found_token)
        if self._relay is not None:
            target, tls = f"unix:{self._relay.path}", False
        options = [
            ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
            ("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
            ("grpc.primary_user_agent", "sandboxd-python"),
        ]
        if target.startswith("unix:"):
            # grpc-core would send the socket's percent-encoded path as
            # :authority, which the service's HTTP/2 stack refuses.
            options.append(("grpc.default_authority", "localhost"))
        if tls:
            ca = ca_cert if ca_cert is not None else os.environ.get("SANDBOXD_CA_CERT") or None
            if ca is not None:
                with open(ca, "rb") as f:
                    roots: Optional[bytes] = f.read()
            else:
                roots = _system_roots()
            creds = grpc.ssl_channel_credentials(root_certificates=roots)
            self._channel = grpc.secure_channel(target, creds, options=options)
        else:
            self._channel = grpc.insecure_channel(target, options=options)
        channel: grpc.Channel = self._channel
        if token is not None:
            channel = grpc.intercept_channel(channel, _BearerToken(token))
        if self._relay is not None:
            channel = grpc.intercept_channel(channel, _Vetted(self._relay))
        self._timeout = timeout
        #: The generated stub (raw protobuf messages, errors as grpc.RpcError);
        #: carries the token like every other call.
        self.stub = pb_grpc.SandboxStub(channel)  # type: ignore[no-untyped-call,unused-ignore]

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<sandboxd.Client {self.addr}>"

    def close(self) -> None:
        """Closes the channel; running calls are cancelled."""
        self._channel.close()
        if self._relay is not None:
            self._relay.close()

    def _call(
        self,
        method: Callable[..., Any],
        request: Any,
        timeout: Optional[float] = _DEFAULT,
        metadata: Optional[Sequence[tuple[str, str]]] = None,
    ) -> Any:
        try:
            return method(request, timeout=self._timeout if timeout is _DEFAULT else timeout, metadata=metadata)
        except grpc.RpcError as e:
            refused = self._relay.refused() if self._relay is not None else None
            raise (refused or from_rpc_error(e)) from None

    # --- sessions -----------------------------------------------------------

    def session(
        self,
        workspace: Optional[StrPath] = None,
        *,
        environment: Optional[str] = None,
        image: Optional[str] = None,
        read_only: bool = False,
        plan_mode: bool = False,
        deny_writes: Iterable[str] = (),
        allow_writes: Iterable[str] = (),
        guard_patterns: Iterable[str] = (),
        ask_writes: Iterable[str] = (),
        ask_commands: Iterable[str] = (),
        ask_tools: Iterable[str] = (),
        unattended: bool = False,
        env: Optional[Mapping[str, str]] = None,
        ttl: Optional[float] = None,
        default_timeout: Optional[float] = None,
        memory_bytes: Optional[int] = None,
        cpus: Optional[float] = None,
        pids: Optional[int] = None,
        disk_bytes: Optional[int] = None,
        inodes: Optional[int] = None,
    ) -> "Session":
        """Creates a session; closed on leaving a ``with`` block (or by :meth:`Session.close`).

        ``workspace``: an existing host directory under a root the operator
        allowed; default a fresh workspace the service removes on close.
        ``environment`` or ``image`` (not both) choose what commands run in.
        ``read_only`` (never writes, takes no plan), ``plan_mode``
        (read-only until a person approves a plan: :meth:`Session.submit_plan`),
        ``deny_writes`` (globs such as ``"tests/**"``),
        ``allow_writes`` and ``guard_patterns`` (regexes the slip guard
        refuses) add to the operator's rules. ``ask_writes`` (globs),
        ``ask_commands`` (regexes) and ``ask_tools`` (``"CreateFile"``,
        ``"EditFile"``, ``"ApplyPatch"``, ``"RunCommand"``) make the calls
        they match wait for a person's approval (:meth:`approvals`);
        ``unattended``: nobody watches, so such calls and plans are refused
        at once with ApprovalUnavailable. ``env`` is every command's
        environment. ``ttl`` is the idle time in seconds before the service
        closes the session; ``default_timeout`` the seconds a command may take
        when :meth:`Session.run` gives none. ``memory_bytes``, ``cpus`` (e.g.
        1.5), ``pids``, ``disk_bytes`` and ``inodes`` limit the container and
        workspace. None means the server default throughout.
        """
        req = pb.CreateSessionRequest(
            image=image or "",
            workspace_path=_path(workspace),
            limits=pb.Limits(
                memory_bytes=memory_bytes or 0,
                nano_cpus=round(cpus * 1e9) if cpus else 0,
                pids=pids or 0,
                disk_bytes=disk_bytes or 0,
                inodes=inodes or 0,
            ),
            env=dict(env or {}),
            ttl_seconds=math.ceil(ttl) if ttl else 0,
            read_only=read_only,
            policy=pb.Policy(
                read_only=read_only,
                plan_mode=plan_mode,
                deny_writes=list(deny_writes),
                allow_writes=list(allow_writes),
                guard_patterns=list(guard_patterns),
                ask_writes=list(ask_writes),
                ask_commands=list(ask_commands),
                ask_tools=list(ask_tools),
            ),
            default_timeout_ms=_ms(default_timeout, "default_timeout"),
            environment=environment or "",
            unattended=unattended,
        )
        info = conv.session(self._call(self.stub.CreateSession, req))
        return Session(self, info, close_on_exit=True)

    def attach(self, session_id: str, *, token: Optional[str] = None, close_on_exit: bool = False) -> "Session":
        """An existing session (SessionNotFound if none, or if it is not this
        caller's); not closed on exit unless asked. ``token``: the session's
        own token (default ``SANDBOXD_SESSION_TOKEN``, when ``SANDBOXD_SESSION``
        names this session or is unset), sent on its calls instead of the
        client's token; without one the client's is sent."""
        if token is None and os.environ.get("SANDBOXD_SESSION", session_id) == session_id:
            token = os.environ.get("SANDBOXD_SESSION_TOKEN")
        token = (token or "").strip() or None
        info = self.session_info(session_id, token=token)
        return Session(self, info, close_on_exit=close_on_exit, token=token)

    def session_info(self, session_id: str, *, token: Optional[str] = None) -> t.SessionInfo:
        """The service's description of a session (``token``: the session's own)."""
        req = pb.GetSessionRequest(session_id=session_id)
        return conv.session(self._call(self.stub.GetSession, req, metadata=_bearer(token)))

    def sessions(self) -> list[t.SessionInfo]:
        """Every open session."""
        resp = self._call(self.stub.ListSessions, pb.ListSessionsRequest())
        return [conv.session(s) for s in resp.sessions]

    # --- approvals ----------------------------------------------------------

    def approvals(self, wait: float = 0) -> list[t.PendingApproval]:
        """The plans and ``ask`` calls waiting for a person, oldest first. When
        none waits, waits up to ``wait`` seconds (at most 60) for one. For
        approvers only: the operator's token or the approver token
        (NotPermitted otherwise); each call marks an approver as present."""
        if wait < 0:
            raise ValueError(f"wait must be >= 0 seconds, got {wait!r}")
        wait_ms = math.ceil(min(wait, 60) * 1000)
        # The call's own deadline must outlast the wait it asks for.
        timeout = self._timeout + wait if self._timeout is not None and wait else self._timeout
        resp = self._call(self.stub.ListPendingApprovals, pb.ListPendingApprovalsRequest(wait_ms=wait_ms), timeout)
        return [conv.pending_approval(p) for p in resp.pending]

    def approve(self, approval: ApprovalRef, note: str = "", *, decided_by: Optional[str] = None) -> t.DecideResult:
        """Approves a waiting plan or call (its id, or the item from
        :meth:`approvals`); ApprovalNotFound if it no longer waits.
        ``decided_by`` (default the login name) is recorded in the journal."""
        return self._decide(approval, pb.VERDICT_APPROVE, note, decided_by)

    def reject(self, approval: ApprovalRef, note: str = "", *, decided_by: Optional[str] = None) -> t.DecideResult:
        """Rejects a waiting plan or call; the agent sees ``note`` as the reason."""
        return self._decide(approval, pb.VERDICT_REJECT, note, decided_by)

    def _decide(self, approval: ApprovalRef, verdict: "pb.Verdict", note: str, decided_by: Optional[str]) -> t.DecideResult:
        approval_id = approval.approval_id if isinstance(approval, t.PendingApproval) else approval
        req = pb.DecideRequest(
            approval_id=approval_id,
            verdict=verdict,
            note=note,
            decided_by=_login_name() if decided_by is None else decided_by,
        )
        return conv.decided(self._call(self.stub.Decide, req))

    # --- environments -------------------------------------------------------

    def environments(self) -> list[t.Environment]:
        """Every built environment."""
        resp = self._call(self.stub.ListEnvironments, pb.ListEnvironmentsRequest())
        return [conv.environment(e) for e in resp.environments]

    def build_environment(
        self,
        name: str,
        *,
        dockerfile: Optional[str] = None,
        context: Optional[bytes] = None,
        setup_script: Optional[str] = None,
        base: Optional[str] = None,
        timeout: Optional[float] = None,
        output_cap: Optional[int] = None,
    ) -> "BuildStream":
        """Builds environment ``name`` from a Dockerfile (with ``context``, a
        plain tar of what it copies) or a ``setup_script`` run on ``base``.

        Returns an iterator of :class:`~sandboxd.types.BuildEvent`, ending with
        :class:`~sandboxd.types.BuildDone` (also in ``.done``); a failed build
        raises (BuildFailed, BuildTimedOut, ...). Needs the operator's permission.
        """
        req = pb.BuildEnvironmentRequest(
            name=name,
            dockerfile=dockerfile or "",
            context=context or b"",
            setup_script=setup_script or "",
            base=base or "",
            timeout_seconds=math.ceil(timeout) if timeout else 0,
            output_cap=output_cap or 0,
        )
        return BuildStream(self._stream_call(self.stub.BuildEnvironment, req))

    def delete_environment(self, name: str) -> t.Environment:
        """Removes every build of environment ``name``."""
        resp = self._call(self.stub.DeleteEnvironment, pb.DeleteEnvironmentRequest(name=name))
        return conv.environment(resp.environment)

    def _stream_call(
        self, method: Callable[..., Any], request: Any, metadata: Optional[Sequence[tuple[str, str]]] = None
    ) -> Any:
        try:
            return method(request, metadata=metadata)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None


class _EventStream:
    """Iterator over a server stream; cancels the call when dropped or closed."""

    def __init__(self, call: Any) -> None:
        self._call = call
        self._finished = False
        self._cancelled = False

    def __iter__(self) -> "_EventStream":
        return self

    def _next_message(self) -> Optional[Any]:
        """The next message, or None at the end of the stream."""
        if self._finished:
            return None
        try:
            return next(self._call)
        except StopIteration:
            self._finished = True
            return None
        except grpc.RpcError as e:
            self._finished = True
            if self._cancelled:
                return None
            raise from_rpc_error(e) from None

    def cancel(self) -> None:
        """Cancels the call (the service stops what it was doing); idempotent."""
        if not self._finished:
            self._cancelled = True
            self._finished = True
            self._call.cancel()

    close = cancel

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: object) -> None:
        self.cancel()

    def __del__(self) -> None:
        try:
            self.cancel()
        except Exception:
            pass


class CommandStream(_EventStream):
    """The events of one command, as they arrive.

    Yields :class:`~sandboxd.types.Started`, then
    :class:`~sandboxd.types.OutputChunk` s, and last the
    :class:`~sandboxd.types.CommandResult` (also kept in ``.result``). A
    command an ``ask`` rule held and a person rejected yields only that
    result, with ``rejected`` set (it never ran).
    Leaving the loop early (``break``, an exception), :meth:`cancel` or the
    end of a ``with`` block cancels the call, and the service kills the
    command.
    """

    def __init__(self, call: Any, command: str) -> None:
        super().__init__(call)
        self.command = command
        self.started: Optional[t.Started] = None
        self.result: Optional[t.CommandResult] = None

    def __enter__(self) -> "CommandStream":
        return self

    def __iter__(self) -> "CommandStream":
        return self

    def __next__(self) -> t.CommandEvent:
        while True:
            if self.result is not None:
                raise StopIteration
            msg = self._next_message()
            if msg is None:
                if self._cancelled:
                    raise StopIteration
                raise TransportError(
                    f"the stream of command {self.command!r} ended without its exit",
                    reason=None,
                )
            which = msg.WhichOneof("event")
            if which == "started":
                self.started = conv.started(msg.started)
                return self.started
            if which == "stdout":
                return t.OutputChunk("stdout", msg.stdout.data)
            if which == "stderr":
                return t.OutputChunk("stderr", msg.stderr.data)
            if which == "exit":
                self.result = conv.command_result(msg.exit, self.command, self.started)
                self._finished = True  # the last event: nothing left to cancel
                return self.result
            if which == "rejected":
                # An ask rule held the command and it was rejected: it never ran.
                self.result = conv.rejected_command(msg.rejected, self.command, self.started)
                self._finished = True
                return self.result
            # An event kind newer than this client: skip it.


class BuildStream(_EventStream):
    """The events of an environment build; the last is :class:`~sandboxd.types.BuildDone`
    (also kept in ``.done``). Leaving the loop early cancels the build."""

    def __init__(self, call: Any) -> None:
        super().__init__(call)
        self.done: Optional[t.BuildDone] = None

    def __enter__(self) -> "BuildStream":
        return self

    def __iter__(self) -> "BuildStream":
        return self

    def __next__(self) -> t.BuildEvent:
        while True:
            msg = self._next_message()
            if msg is None:
                raise StopIteration
            event = conv.build_event(msg)
            if isinstance(event, t.BuildDone):
                self.done = event
            if event is not None:
                return event

    def wait(self) -> t.BuildDone:
        """Consumes the remaining events and returns the final one."""
        for _ in self:
            pass
        if self.done is None:
            raise TransportError("the build's stream ended without its result", reason=None)
        return self.done


class ProcessStream(_EventStream):
    """A long-running process's output as it comes (:meth:`Process.follow`).

    Yields :class:`~sandboxd.types.ProcessChunk` s until the process ends;
    then ``.info`` holds the process as it ended. Leaving the loop early
    (``break``, an exception), :meth:`cancel` or the end of a ``with`` block
    only stops reading: the process runs on.
    """

    def __init__(self, call: Any, process: "Process") -> None:
        super().__init__(call)
        self._process = process
        self._decoders = {
            "stdout": codecs.getincrementaldecoder("utf-8")(errors="replace"),
            "stderr": codecs.getincrementaldecoder("utf-8")(errors="replace"),
        }
        self._pending: List[t.ProcessChunk] = []
        #: The process as it ended; None until the stream ends.
        self.info: Optional[t.ProcessInfo] = None

    def __enter__(self) -> "ProcessStream":
        return self

    def __iter__(self) -> "ProcessStream":
        return self

    def __next__(self) -> t.ProcessChunk:
        while True:
            if self._pending:
                return self._pending.pop(0)
            if self.info is not None:
                raise StopIteration
            msg = self._next_message()
            if msg is None:
                if self._cancelled:
                    raise StopIteration
                raise TransportError(
                    f"the output of process {self._process.id} ended without its last message",
                    reason=None,
                )
            which = msg.WhichOneof("kind")
            if which == "chunk":
                c = msg.chunk
                name = "stderr" if c.stream == pb.PROCESS_STREAM_STDERR else "stdout"
                decoder = self._decoders[name]
                prefix = ""
                if c.skipped:
                    # Bytes are missing before this chunk: a character cut
                    # there can never be finished.
                    prefix = decoder.decode(b"", final=True)
                    decoder.reset()
                text = prefix + decoder.decode(c.data)
                self._process._offsets[name] = c.offset + len(c.data)
                return t.ProcessChunk(name, c.data, text, c.offset, c.skipped)  # type: ignore[arg-type]
            if which == "end":
                self._finished = True  # the last message: nothing left to cancel
                self.info = conv.process_info(msg.end.process)
                self._process.last_info = self.info
                self._process._offsets = {"stdout": msg.end.stdout_offset, "stderr": msg.end.stderr_offset}
                for name, decoder in self._decoders.items():
                    rest = decoder.decode(b"", final=True)
                    if rest:
                        self._pending.append(t.ProcessChunk(name, b"", rest, self._process._offsets[name], 0))  # type: ignore[arg-type]
            # A message kind newer than this client: skip it.


_SIGNALS = {
    "INT": pb.PROCESS_SIGNAL_INT,
    "TERM": pb.PROCESS_SIGNAL_TERM,
    "KILL": pb.PROCESS_SIGNAL_KILL,
}


def _signal_of(sig: SignalLike) -> int:
    """The wire signal for "INT", "SIGTERM", signal.SIGKILL..."""
    if isinstance(sig, int):
        try:
            name = _signal.Signals(sig).name
        except ValueError:
            name = str(sig)
    else:
        name = sig.upper()
    name = name[3:] if name.startswith("SIG") else name
    if name not in _SIGNALS:
        raise ValueError(f"signal {sig!r}: give INT, TERM or KILL")
    return _SIGNALS[name]


class Process:
    """A long-running process of a session: a server, a watcher, a REPL.
    Made by :meth:`Session.start` (or :meth:`Session.process` for one
    already running).

    A context manager: leaving a ``with`` block stops the process if it
    still runs. It also ends with its session (closed, reset or timed out).
    """

    def __init__(
        self,
        session: "Session",
        info: Optional[t.ProcessInfo],
        *,
        ready_state: t.ReadyState = t.ReadyState.NOT_ASKED,
        ready_time: float = 0.0,
        stdout_tail: str = "",
        stderr_tail: str = "",
        rejected: Optional[t.Rejection] = None,
    ) -> None:
        self._session = session
        #: "p" and a number; empty when the start was rejected.
        self.id: str = info.id if info is not None else ""
        #: The process as last described (by start, a stop, a wait, the end of
        #: a follow or :meth:`info`); None when the start was rejected.
        self.last_info: Optional[t.ProcessInfo] = info
        #: How the start waited for readiness.
        self.ready_state = ready_state
        #: Seconds from the start to ready (0 unless ``ready_state`` is READY).
        self.ready_time = ready_time
        #: Its output when the start answered: at most the last 4000
        #: characters of each stream.
        self.stdout_tail = stdout_tail
        self.stderr_tail = stderr_tail
        #: An ``ask`` rule held the start and a person rejected it: nothing
        #: was started (``id`` is empty).
        self.rejected = rejected
        # Where follow() goes on from, per stream.
        self._offsets: dict[str, int] = {"stdout": 0, "stderr": 0}

    def __repr__(self) -> str:
        state = self.last_info.state if self.last_info is not None else "rejected"
        return f"<sandboxd.Process {self.id or '-'} {state}>"

    def __enter__(self) -> "Process":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.id or (self.last_info is not None and not self.last_info.running):
            return
        try:
            self.stop()
        except SandboxdError:
            if exc_type is None:
                raise

    @property
    def ready(self) -> bool:
        """Its readiness condition held when the start answered (or it had none)."""
        return self.last_info is not None and self.last_info.ready

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        return self._session._call(method, request)

    def _stub(self) -> Any:
        return self._session._stub

    def info(self) -> t.ProcessInfo:
        """The process now, as the service lists it."""
        for info in self._session.processes():
            if info.id == self.id:
                self.last_info = info
                return info
        raise _no_process(self.id)

    def _read(self, stdout_offset: int, stderr_offset: int, follow: bool, timeout: Optional[float] = None) -> Any:
        req = pb.ReadProcessOutputRequest(
            session_id=self._session.id,
            process_id=self.id,
            stdout_offset=stdout_offset,
            stderr_offset=stderr_offset,
            follow=follow,
        )
        try:
            return self._stub().ReadProcessOutput(req, metadata=self._session._metadata, timeout=timeout)
        except grpc.RpcError as e:
            raise from_rpc_error(e) from None

    def output(self) -> t.ProcessOutput:
        """Everything of its output the service keeps, as text (it stays
        readable after the process ended, until the session closes)."""
        stream = _EventStream(self._read(0, 0, follow=False))
        parts: dict[int, List[bytes]] = {pb.PROCESS_STREAM_STDOUT: [], pb.PROCESS_STREAM_STDERR: []}
        skipped = {pb.PROCESS_STREAM_STDOUT: 0, pb.PROCESS_STREAM_STDERR: 0}
        try:
            while True:
                msg = stream._next_message()
                if msg is None:
                    raise TransportError(f"the output of process {self.id} ended without its last message", reason=None)
                which = msg.WhichOneof("kind")
                if which == "chunk":
                    parts[msg.chunk.stream].append(msg.chunk.data)
                    skipped[msg.chunk.stream] += msg.chunk.skipped
                elif which == "end":
                    stream._finished = True
                    self.last_info = conv.process_info(msg.end.process)

                    def text(s: int) -> str:
                        return b"".join(parts[s]).decode("utf-8", errors="replace")

                    return t.ProcessOutput(
                        stdout=text(pb.PROCESS_STREAM_STDOUT),
                        stderr=text(pb.PROCESS_STREAM_STDERR),
                        stdout_skipped=skipped[pb.PROCESS_STREAM_STDOUT],
                        stderr_skipped=skipped[pb.PROCESS_STREAM_STDERR],
                        info=self.last_info,
                    )
        finally:
            stream.cancel()

    def follow(self, *, from_start: bool = False) -> ProcessStream:
        """Its output as it comes, until it ends: an iterator of
        :class:`~sandboxd.types.ProcessChunk` (see :class:`ProcessStream`).

        Starts where the last ``follow`` of this object stopped (from the
        start the first time, or with ``from_start``), so a loop left early
        and followed again misses nothing the service still keeps.
        """
        if from_start:
            self._offsets = {"stdout": 0, "stderr": 0}
        call = self._read(self._offsets["stdout"], self._offsets["stderr"], follow=True)
        return ProcessStream(call, self)

    def wait(self, timeout: Optional[float] = None) -> t.ProcessInfo:
        """Waits until the process ends and returns how it ended. Raises
        :class:`TimeoutError` if it still runs after ``timeout`` seconds (it
        is left running). Does not move where :meth:`follow` goes on from."""
        now = self.info()
        if not now.running:
            return now
        call = self._read(now.stdout_bytes, now.stderr_bytes, follow=True, timeout=timeout)
        stream = _EventStream(call)
        try:
            while True:
                try:
                    msg = stream._next_message()
                except DeadlineExceeded:
                    raise TimeoutError(f"process {self.id} still runs after {timeout} s") from None
                if msg is None:
                    raise TransportError(f"the output of process {self.id} ended without its last message", reason=None)
                if msg.WhichOneof("kind") == "end":
                    stream._finished = True
                    self.last_info = conv.process_info(msg.end.process)
                    return self.last_info
        finally:
            stream.cancel()

    def write(self, data: Union[str, bytes], close: bool = False) -> int:
        """Writes ``data`` (a str is sent as UTF-8) to its input, a pipe
        (started with ``stdin``) or its terminal (``pty``), then closes the
        input if ``close``. Returns once the process took it: the bytes
        written. ProcessNotReading if it does not read them within 10 s."""
        raw = data.encode("utf-8") if isinstance(data, str) else bytes(data)
        req = pb.WriteProcessInputRequest(session_id=self._session.id, process_id=self.id, data=raw, close=close)
        return int(self._call(self._stub().WriteProcessInput, req).written)

    def close_input(self) -> None:
        """Closes its input: end of file on a pipe, Ctrl-D on a terminal."""
        self.write(b"", close=True)

    def resize(self, rows: int, cols: int) -> None:
        """Sets the size of its terminal (NotATerminal unless started with ``pty``)."""
        req = pb.ResizeProcessRequest(session_id=self._session.id, process_id=self.id, rows=rows, cols=cols)
        self._call(self._stub().ResizeProcess, req)

    def signal(self, sig: SignalLike) -> t.ProcessInfo:
        """Sends ``"INT"``, ``"TERM"`` or ``"KILL"`` (or ``signal.SIGINT``...)
        to its whole process group; returns the process as it is then (it may
        not have ended yet: :meth:`wait` for that)."""
        req = pb.SignalProcessRequest(session_id=self._session.id, process_id=self.id, signal=_signal_of(sig))
        self.last_info = conv.process_info(self._call(self._stub().SignalProcess, req).process)
        return self.last_info

    def stop(self) -> t.ProcessInfo:
        """Stops it (SIGTERM to its group, 2 s of grace, then SIGKILL) and
        returns how it ended; for one that already ended, how it did."""
        req = pb.StopProcessRequest(session_id=self._session.id, process_id=self.id)
        self.last_info = conv.process_info(self._call(self._stub().StopProcess, req).process)
        return self.last_info


def _no_process(process_id: str) -> ProcessNotFound:
    """What the service says of an unknown process, for one missing from its list."""
    return ProcessNotFound(
        f"The session has no process {process_id!r}. Nothing was changed. "
        "Session.processes() lists every process the session started.",
        code=grpc.StatusCode.NOT_FOUND,
        metadata={"process_id": process_id},
        domain="sandboxd",
    )


def _pty(pty: PtyLike) -> Optional[Any]:
    if pty is None or pty is False:
        return None
    if pty is True:
        return pb.Pty()
    rows, cols = pty
    return pb.Pty(rows=rows, cols=cols)


def _edits(
    old: Optional[str], new: Optional[str], replace_all: bool, edits: Optional[Iterable[EditLike]]
) -> list[Any]:
    if edits is not None:
        if old is not None or new is not None:
            raise TypeError("give old and new, or edits=[...], not both")
        out: List[Any] = []
        for e in edits:
            if not isinstance(e, t.Edit):
                e = t.Edit(*e)
            out.append(pb.Edit(old_string=e.old, new_string=e.new, replace_all=e.replace_all))
        return out
    if old is None or new is None:
        raise TypeError("edit() needs old and new (or edits=[...])")
    return [pb.Edit(old_string=old, new_string=new, replace_all=replace_all)]


def _command(command: Command) -> str:
    return command if isinstance(command, str) else shlex.join(command)


def _checkpoint_id(c: Union[str, t.Checkpoint]) -> str:
    return c.id if isinstance(c, t.Checkpoint) else c


def _login_name() -> str:
    """Who decides, for the journal: the login name, or "" when there is none."""
    try:
        return getpass.getuser()
    except Exception:  # no $USER and no passwd entry (a bare container)
        return ""


def _step(step: StepLike) -> Any:
    """A plan step from a PlanStep, a (description, files) pair or a dict."""
    description: str
    files: Any
    if isinstance(step, t.PlanStep):
        description, files = step.description, step.files
    elif isinstance(step, Mapping):
        description, files = step.get("description", ""), step.get("files", ())
    else:
        description, files = step
    if isinstance(files, (str, os.PathLike)):
        files = [files]  # one file, not its characters
    return pb.PlanStep(description=description, files=[_path(f) for f in files])


class Session:
    """A session over a workspace. Made by :meth:`Client.session` or :meth:`Client.attach`.

    Paths are relative to the workspace. A context manager: the session is
    closed on exit when it was created here (or ``close_on_exit`` was asked).
    """

    def __init__(
        self, client: Client, info: t.SessionInfo, *, close_on_exit: bool, token: Optional[str] = None
    ) -> None:
        self._client = client
        self._stub = client.stub
        #: The session's own token (from CreateSession, or given to attach):
        #: sent on the session's calls, it admits them for this session alone.
        self.token: Optional[str] = info.session_token or token
        self._metadata = _bearer(self.token)
        #: The session as last described by the service (see :meth:`refresh`).
        self.info = info
        self.id: str = info.id
        self.workspace_path: str = info.workspace_path
        self.close_on_exit = close_on_exit
        self.closed: Optional[t.CloseResult] = None

    def __repr__(self) -> str:
        return f"<sandboxd.Session {self.id} {self.workspace_path}>"

    def __enter__(self) -> "Session":
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if not self.close_on_exit or self.closed is not None:
            return
        try:
            self.close()
        except SessionNotFound:
            pass  # the service closed it already (its idle time passed)
        except SandboxdError:
            if exc_type is None:
                raise

    def _call(self, method: Callable[..., Any], request: Any) -> Any:
        return self._client._call(method, request, metadata=self._metadata)

    def close(self) -> t.CloseResult:
        """Closes the session (a workspace the service made is removed). Idempotent."""
        if self.closed is None:
            resp = self._call(self._stub.CloseSession, pb.CloseSessionRequest(session_id=self.id))
            self.closed = conv.close(resp)
        return self.closed

    def refresh(self) -> t.SessionInfo:
        """Asks the service for the session's state (also stored in ``.info``)."""
        self.info = self._client.session_info(self.id, token=self.token)
        return self.info

    def reset(self) -> t.ResetResult:
        """Replaces the session's container with a fresh one over the same workspace;
        whatever earlier commands left running is gone."""
        return conv.reset(self._call(self._stub.ResetSandbox, pb.ResetSandboxRequest(session_id=self.id)))

    # --- file tools ---------------------------------------------------------

    def read(self, path: StrPath, *, offset: Optional[int] = None, limit: Optional[int] = None) -> t.ReadResult:
        """Reads lines of a UTF-8 text file: from line ``offset`` (1-based,
        default 1), at most ``limit`` lines (default: the server's, 2000)."""
        req = pb.ReadFileRequest(session_id=self.id, path=_path(path), offset=offset or 0, limit=limit or 0)
        return conv.read(self._call(self._stub.ReadFile, req))

    def create(self, path: StrPath, content: str) -> t.CreateResult:
        """Creates a new file (and missing parent directories); FileExists if the path exists.
        A call an ``ask`` rule held and a person rejected returns with ``rejected`` set."""
        req = pb.CreateFileRequest(session_id=self.id, path=_path(path), content=content)
        return conv.create(self._call(self._stub.CreateFile, req))

    def edit(
        self,
        path: StrPath,
        old: Optional[str] = None,
        new: Optional[str] = None,
        *,
        replace_all: bool = False,
        edits: Optional[Iterable[EditLike]] = None,
        expected_sha256: Optional[str] = None,
    ) -> t.EditResult:
        """Replaces ``old`` with ``new`` exactly (``old`` must occur once unless
        ``replace_all``), or applies ``edits=[Edit(old, new), ...]``, all matched
        against the same original, all or nothing. ``expected_sha256`` (from
        :meth:`read`) refuses the edit with StaleFile if the file changed.
        A refusal leaves the file byte-for-byte unchanged."""
        req = pb.EditFileRequest(
            session_id=self.id,
            path=_path(path),
            edits=_edits(old, new, replace_all, edits),
            expected_sha256=expected_sha256 or "",
        )
        return conv.edit(self._call(self._stub.EditFile, req))

    def apply_patch(self, patch: Union[str, bytes]) -> t.PatchResult:
        """Applies a unified diff as ``git diff`` writes it, all or nothing, with no fuzz."""
        if isinstance(patch, bytes):
            patch = patch.decode("utf-8")
        return conv.patch(self._call(self._stub.ApplyPatch, pb.ApplyPatchRequest(session_id=self.id, patch=patch)))

    def list(self, path: StrPath = ".") -> t.Listing:
        """Lists a directory (default the workspace root)."""
        p = _path(path)
        req = pb.ListDirRequest(session_id=self.id, path="" if p in (".", "./") else p)
        return conv.listing(self._call(self._stub.ListDir, req))

    def find(self, pattern: str, *, path: Optional[StrPath] = None, limit: Optional[int] = None) -> t.FindResult:
        """Files whose workspace-relative path matches the glob ``pattern``
        (``"*.py"`` matches at any depth), under ``path``; honours .gitignore."""
        req = pb.FindFilesRequest(session_id=self.id, pattern=pattern, path=_path(path), limit=limit or 0)
        return conv.find(self._call(self._stub.FindFiles, req))

    def search(
        self,
        pattern: str,
        *,
        path: Optional[StrPath] = None,
        glob: Optional[str] = None,
        case_insensitive: bool = False,
        limit: Optional[int] = None,
    ) -> t.SearchResult:
        """Lines matching the regular expression ``pattern`` (Rust syntax), in
        files under ``path`` matching ``glob``; honours .gitignore."""
        req = pb.SearchFilesRequest(
            session_id=self.id,
            pattern=pattern,
            path=_path(path),
            glob=glob or "",
            case_insensitive=case_insensitive,
            limit=limit or 0,
        )
        return conv.search(self._call(self._stub.SearchFiles, req))

    # --- commands -----------------------------------------------------------

    def stream(
        self,
        command: Command,
        *,
        timeout: Optional[float] = None,
        cwd: Optional[StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        stdout_cap: Optional[int] = None,
        stderr_cap: Optional[int] = None,
        output: str = "both",
    ) -> CommandStream:
        """Runs ``command`` and yields its events as they arrive (see
        :class:`CommandStream`); arguments as for :meth:`run`. ``output``
        says which events carry the output, so that it travels once:
        ``"both"`` (chunks, and the whole capped result again in the
        result), ``"chunks"`` (the result's ``stdout``/``stderr`` then hold
        only what the chunks did not: the tail of a cut stream) or
        ``"result"`` (no chunks)."""
        text = _command(command)
        if output not in _OUTPUT_MODES:
            raise ValueError(f"output must be one of {sorted(_OUTPUT_MODES)}, not {output!r}")
        req = pb.RunCommandRequest(
            session_id=self.id,
            command=text,
            cwd=_path(cwd),
            timeout_ms=_ms(timeout, "timeout"),
            env=dict(env or {}),
            stdout_cap=stdout_cap or 0,
            stderr_cap=stderr_cap or 0,
            output=_OUTPUT_MODES[output],
        )
        return CommandStream(self._client._stream_call(self._stub.RunCommand, req, self._metadata), text)

    def run(
        self,
        command: Command,
        *,
        timeout: Optional[float] = None,
        cwd: Optional[StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        stdout_cap: Optional[int] = None,
        stderr_cap: Optional[int] = None,
        on_output: Optional[Callable[[t.OutputChunk], None]] = None,
    ) -> t.CommandResult:
        """Runs ``command`` with ``/bin/sh -c`` in the session's container (a
        list is shell-quoted) and returns its capped result. ``timeout`` in
        seconds (default the session's, else 30 s); ``cwd`` relative to the
        workspace; ``stdout_cap``/``stderr_cap`` characters kept per stream
        (default 4000). ``on_output`` sees each chunk as it arrives. A
        non-zero exit, a timeout or a person's rejection (``rejected`` set,
        the command never ran) is a result, not an exception."""
        # Without a watcher of the chunks, the output travels once, in the result.
        output = "both" if on_output is not None else "result"
        with self.stream(
            command,
            timeout=timeout,
            cwd=cwd,
            env=env,
            stdout_cap=stdout_cap,
            stderr_cap=stderr_cap,
            output=output,
        ) as events:
            for event in events:
                if on_output is not None and isinstance(event, t.OutputChunk):
                    on_output(event)
        assert events.result is not None
        return events.result

    # --- long-running processes ---------------------------------------------

    def start(
        self,
        command: Command,
        *,
        cwd: Optional[StrPath] = None,
        env: Optional[Mapping[str, str]] = None,
        stdin: bool = False,
        pty: PtyLike = None,
        ready_port: Optional[int] = None,
        ready_match: Optional[str] = None,
        ready_timeout: Optional[float] = None,
    ) -> Process:
        """Starts a long-running process (a server, a watcher, a REPL) in the
        session's container and returns while it runs; it has no timeout.

        ``command`` runs with ``/bin/sh -c`` in its own process group (a list
        is shell-quoted); ``cwd`` is relative to the workspace. ``stdin``
        opens a pipe to its input for :meth:`Process.write`. ``pty`` runs it
        on a terminal (``True``: 24x80, or ``(rows, cols)``): everything it
        writes is stdout and its input is always open. With ``ready_port`` (a
        TCP port on the container's loopback that accepts connections) or
        ``ready_match`` (a regular expression, Rust syntax, matched against
        each line of its output), it returns once the process is ready, has
        exited, or ``ready_timeout`` seconds (default 30) passed:
        ``ready_state`` says which, and a process not ready in time is left
        running. TooManyProcesses past the session's limit. A start an
        ``ask`` rule held and a person rejected returns a Process with
        ``rejected`` set (nothing was started).
        """
        if ready_port is not None and ready_match is not None:
            raise ValueError("give ready_port or ready_match, not both")
        if ready_timeout is not None and ready_port is None and ready_match is None:
            raise ValueError("ready_timeout needs ready_port or ready_match")
        ready = None
        if ready_port is not None:
            ready = pb.Readiness(port=ready_port, timeout_ms=_ms(ready_timeout, "ready_timeout"))
        elif ready_match is not None:
            ready = pb.Readiness(output_regex=ready_match, timeout_ms=_ms(ready_timeout, "ready_timeout"))
        req = pb.StartProcessRequest(
            session_id=self.id,
            command=_command(command),
            cwd=_path(cwd),
            env=dict(env or {}),
            stdin=stdin,
            pty=_pty(pty),
            ready=ready,
        )
        resp = self._call(self._stub.StartProcess, req)
        if resp.HasField("rejected"):
            return Process(self, None, rejected=conv.rejection(resp.rejected))
        return Process(
            self,
            conv.process_info(resp.process),
            ready_state=conv.ready_state(resp.ready_state),
            ready_time=resp.ready_ms / 1000.0,
            stdout_tail=resp.stdout_tail,
            stderr_tail=resp.stderr_tail,
        )

    def processes(self) -> List[t.ProcessInfo]:
        """Every process the session started, oldest first: running ones and
        those that ended (with how)."""
        resp = self._call(self._stub.ListProcesses, pb.ListProcessesRequest(session_id=self.id))
        return [conv.process_info(p) for p in resp.processes]

    def process(self, process_id: str) -> Process:
        """A handle on a process the session started (ProcessNotFound if none)."""
        for info in self.processes():
            if info.id == process_id:
                return Process(self, info, ready_state=t.ReadyState.UNKNOWN)
        raise _no_process(process_id)

    # --- plans --------------------------------------------------------------

    def submit_plan(
        self,
        goal: str,
        steps: Iterable[StepLike],
        verification: str,
        risks: Iterable[str] = (),
        *,
        on_pending: Optional[Callable[[t.PlanPending], None]] = None,
    ) -> t.PlanResult:
        """Proposes a plan and waits for a person to decide it.

        ``steps``: ``(description, files)`` pairs, dicts with those keys, or
        :class:`~sandboxd.types.PlanStep` s; ``files`` are exact
        workspace-relative paths. ``verification`` is the command whose
        passing run after the last write verifies the change. Returns a
        :class:`~sandboxd.types.PlanResult`: approved (the session may now
        write ``granted``; ``withheld`` names each planned file a rule keeps
        back, with the rule) or rejected (``reason``, ``timed_out``). A
        rejection is a result, not an exception. ``on_pending`` sees the
        :class:`~sandboxd.types.PlanPending` event (its approval id and the
        files approval would withhold) while the person decides.

        Raises InvalidPlan (nothing kept) when the goal, the files or the
        verification is missing, and ApprovalUnavailable at once when nobody
        can approve. Leaving early (an exception in ``on_pending``, Ctrl-C)
        cancels the call, which withdraws the plan.
        """
        req = pb.SubmitPlanRequest(
            session_id=self.id,
            plan=pb.Plan(
                goal=goal,
                steps=[_step(s) for s in steps],
                verification=verification,
                risks=list(risks),
            ),
        )
        stream = _EventStream(self._client._stream_call(self._stub.SubmitPlan, req, self._metadata))
        withheld: tuple[t.WithheldFile, ...] = ()
        try:
            while True:
                msg = stream._next_message()
                if msg is None:
                    raise TransportError("the plan's stream ended without a decision", reason=None)
                which = msg.WhichOneof("event")
                if which == "pending":
                    pending = conv.plan_pending(msg.pending, msg.message)
                    withheld = pending.withheld
                    if on_pending is not None:
                        on_pending(pending)
                elif which == "approved":
                    stream._finished = True  # the last event: nothing left to cancel
                    return conv.plan_approved(msg.approved, msg.message)
                elif which == "rejected":
                    stream._finished = True
                    return conv.plan_rejected(msg.rejected, msg.message, withheld)
                # An event kind newer than this client: skip it.
        finally:
            stream.cancel()

    # --- report -------------------------------------------------------------

    def report(self, *, planned: Iterable[StrPath] = (), verify: Optional[str] = None) -> t.Report:
        """The session's journal: files written, commands run, refused calls,
        reconciled against the ``planned`` files and the ``verify`` command
        (did it run after the last write, and pass?)."""
        req = pb.GetSessionReportRequest(
            session_id=self.id,
            planned_files=[_path(p) for p in planned],
            verification_command=verify or "",
        )
        return conv.report(self._call(self._stub.GetSessionReport, req))

    # --- history ------------------------------------------------------------

    def changes(
        self, since: Union[str, t.Checkpoint, None] = None, *, max_patch_bytes: Optional[int] = None
    ) -> t.Changes:
        """What changed since the session began (or since checkpoint ``since``),
        with a patch ``git apply`` accepts on the older tree."""
        req = pb.GetChangesRequest(
            session_id=self.id,
            since_checkpoint=_checkpoint_id(since) if since is not None else "",
            max_patch_bytes=max_patch_bytes or 0,
        )
        return conv.changes(self._call(self._stub.GetChanges, req))

    def checkpoint(self, label: str = "") -> t.CheckpointCreated:
        """Keeps the whole workspace so that :meth:`restore` can bring it back."""
        req = pb.CreateCheckpointRequest(session_id=self.id, label=label)
        return conv.checkpoint_created(self._call(self._stub.CreateCheckpoint, req))

    def checkpoints(self) -> List[t.Checkpoint]:
        """The session's checkpoints, oldest first."""
        resp = self._call(self._stub.ListCheckpoints, pb.ListCheckpointsRequest(session_id=self.id))
        return [conv.checkpoint(c) for c in resp.checkpoints]

    def restore(self, checkpoint: Union[str, t.Checkpoint], *, stop_commands: bool = False) -> t.RestoreResult:
        """Brings the workspace back to ``checkpoint`` exactly. Refused
        (CommandRunning) while a command runs, unless ``stop_commands``."""
        req = pb.RestoreCheckpointRequest(
            session_id=self.id, checkpoint_id=_checkpoint_id(checkpoint), stop_commands=stop_commands
        )
        return conv.restore(self._call(self._stub.RestoreCheckpoint, req))

    def delete_checkpoint(self, checkpoint: Union[str, t.Checkpoint]) -> t.Checkpoint:
        """Deletes a checkpoint, freeing its ``own_bytes``."""
        req = pb.DeleteCheckpointRequest(session_id=self.id, checkpoint_id=_checkpoint_id(checkpoint))
        return conv.checkpoint(self._call(self._stub.DeleteCheckpoint, req).checkpoint)

    # --- archives -----------------------------------------------------------

    def upload(
        self, source: Union[StrPath, bytes, IO[bytes]], *, destination: Optional[StrPath] = None
    ) -> t.UploadResult:
        """Extracts a tar or tar.gz archive into the workspace (or ``destination``).

        ``source``: a directory (packed here, symlinks kept as symlinks), an
        archive file's path, an open binary file, or the archive's bytes.
        Every entry is checked before any lands: a refused archive changes nothing.
        """
        header = pb.UploadArchiveRequest(
            header=pb.UploadArchiveHeader(session_id=self.id, destination=_path(destination))
        )

        def chunks(f: IO[bytes]) -> Iterator[Any]:
            yield header
            while True:
                block = f.read(UPLOAD_CHUNK)
                if not block:
                    return
                yield pb.UploadArchiveRequest(chunk=block)

        def send(f: IO[bytes]) -> t.UploadResult:
            try:
                resp = self._stub.UploadArchive(chunks(f), metadata=self._metadata)
            except grpc.RpcError as e:
                raise from_rpc_error(e) from None
            return conv.upload(resp)

        if isinstance(source, (bytes, bytearray, memoryview)):
            return send(io.BytesIO(source))
        if hasattr(source, "read"):
            return send(source)  # type: ignore[arg-type]
        path = os.fspath(source)
        if os.path.isdir(path):
            with tempfile.TemporaryFile() as tmp:
                with tarfile.open(fileobj=tmp, mode="w", format=tarfile.PAX_FORMAT) as tar:
                    for name in sorted(os.listdir(path)):
                        tar.add(os.path.join(path, name), arcname=name)
                tmp.seek(0)
                return send(tmp)
        with open(path, "rb") as f:
            return send(f)

    def download(
        self,
        path: Optional[StrPath] = None,
        *,
        gitignore: bool = False,
        gzip: bool = False,
        max_bytes: Optional[int] = None,
        to: Union[StrPath, IO[bytes], None] = None,
    ) -> t.Download:
        """A tar archive (gzip'd if ``gzip``) of a directory or file of the
        workspace (default all of it), leaving out what .gitignore ignores if
        ``gitignore``. Written to ``to`` (a path or binary file) if given,
        else returned in ``.data``."""
        req = pb.DownloadArchiveRequest(
            session_id=self.id, path=_path(path), gitignore=gitignore, gzip=gzip, max_bytes=max_bytes or 0
        )
        own: Optional[IO[bytes]] = None
        if to is None:
            parts: List[bytes] = []
            write: Callable[[bytes], Any] = parts.append
        elif hasattr(to, "write"):
            write = to.write
            parts = []
        else:
            own = open(os.fspath(to), "wb")
            write = own.write
            parts = []
        stream = _EventStream(self._client._stream_call(self._stub.DownloadArchive, req, self._metadata))
        try:
            while True:
                msg = stream._next_message()
                if msg is None:
                    raise TransportError("the download ended without its summary", reason=None)
                which = msg.WhichOneof("part")
                if which == "chunk":
                    write(msg.chunk)
                elif which == "done":
                    return conv.download(b"".join(parts), msg.done)
        finally:
            stream.cancel()
            if own is not None:
                own.close()
