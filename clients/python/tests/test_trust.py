"""Whose service a client reaches: an address it found (not given) only if the
listener is the user's own or root's, and a token read from a state directory
only to its owner's listener, checked on every connection, so that another
local user holding the port (before the first call, or after the service
stopped and the channel reconnects) is sent nothing and is named in an
:class:`sandboxd.discover.UntrustedService` error.

The tests run as root; the stranger is uid 65534, listening with the system's
Python through ``setpriv``. The user's own service is a stand-in grpc server
in this process (no Docker needed). The fallback address is this process's
``discover.DEFAULT_ADDR``, set per test.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from concurrent import futures
from pathlib import Path
from typing import Iterator, Optional

import grpc
import pytest

import sandboxd
from sandboxd import discover
from sandboxd.v1 import sandbox_pb2 as pb
from sandboxd.v1 import sandbox_pb2_grpc as pb_grpc

STRANGER = 65534

#: Listens on the port given (0: any) and prints it; when its stdin ends,
#: reads what is already on its way and prints "<connections> <bytes>".
LISTENER = r"""
import select, socket, sys
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", int(sys.argv[1])))
s.listen(64)
print(s.getsockname()[1], flush=True)
conns, seen, total, stopping = [], 0, 0, False
while True:
    waiting = [s] + conns + ([] if stopping else [sys.stdin])
    r, _, _ = select.select(waiting, [], [], 0.3 if stopping else 60)
    if not r:
        break
    if sys.stdin in r:
        stopping = True
    for x in r:
        if x is s:
            c, _ = s.accept()
            conns.append(c)
            seen += 1
        elif x is not sys.stdin:
            try:
                d = x.recv(65536)
            except OSError:
                d = b""
            total += len(d)
            if not d:
                conns.remove(x)
                x.close()
print(seen, total, flush=True)
"""


class Stranger:
    """A listener of uid 65534 on 127.0.0.1."""

    def __init__(self, port: int = 0) -> None:
        if os.geteuid() != 0:
            pytest.fail("these tests run as root: they start a listener as another user")
        self.proc = subprocess.Popen(
            [
                "setpriv",
                f"--reuid={STRANGER}",
                f"--regid={STRANGER}",
                "--clear-groups",
                "/usr/bin/python3",
                "-c",
                LISTENER,
                str(port),
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        self.port = int(self.proc.stdout.readline())

    def received(self) -> tuple[int, int]:
        """Stops it: (connections accepted, bytes received)."""
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.close()
        line = self.proc.stdout.readline()
        self.proc.wait(timeout=10)
        seen, total = (int(n) for n in line.split())
        return seen, total

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


@pytest.fixture
def stranger() -> Iterator[list[Stranger]]:
    """Strangers the test starts, killed after it."""
    started: list[Stranger] = []
    yield started
    for s in started:
        s.kill()


class _Own(pb_grpc.SandboxServicer):
    """The user's own service, as far as these tests call it."""

    def ListSessions(self, request: pb.ListSessionsRequest, context: grpc.ServicerContext) -> pb.ListSessionsResponse:
        return pb.ListSessionsResponse()


def _serve(port: int = 0) -> tuple[grpc.Server, int]:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    pb_grpc.add_SandboxServicer_to_server(_Own(), server)  # type: ignore[no-untyped-call,unused-ignore]
    port = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    return server, port


@pytest.fixture
def found(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    """Nothing given: no address, no token, no socket of the user's or the
    system's, and state directories of the test's own."""
    for name in ("SANDBOXD_ADDR", "SANDBOXD_TOKEN", "XDG_RUNTIME_DIR"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SANDBOXD_SERVICE_NAME", f"pytest-trust-{os.getpid()}")
    monkeypatch.setattr(discover, "SYSTEM_SOCKET", str(tmp_path / "none.sock"))
    monkeypatch.setattr(discover, "SYSTEM_STATE_ROOT", str(tmp_path / "system-state"))
    monkeypatch.setattr(discover, "_state_root", lambda: tmp_path / "state")
    yield


def _fallback(monkeypatch: pytest.MonkeyPatch, port: int) -> None:
    monkeypatch.setattr(discover, "DEFAULT_ADDR", f"127.0.0.1:{port}")


def _names_the_stranger(e: BaseException, port: int) -> None:
    text = str(e)
    for needed in (f"127.0.0.1:{port}", f"uid {STRANGER}", "nothing was sent", "SANDBOXD_ADDR", "XDG_RUNTIME_DIR"):
        assert needed in text, f"{needed!r} missing from: {text}"


def test_a_found_address_held_by_another_user_gets_nothing(
    found: None, stranger: list[Stranger], monkeypatch: pytest.MonkeyPatch
) -> None:
    s = Stranger()
    stranger.append(s)
    _fallback(monkeypatch, s.port)
    with sandboxd.connect(token="secret", timeout=5) as c:
        with pytest.raises(discover.UntrustedService) as e:
            c.sessions()
    _names_the_stranger(e.value, s.port)
    assert isinstance(e.value, sandboxd.errors.TransportError)
    assert s.received()[1] == 0


def test_the_relay_refuses_a_stranger_even_when_the_listener_check_is_passed(
    found: None, stranger: list[Stranger], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The port changes hands between the check before the call and the
    # channel's connection: the relay checks the socket that accepted it.
    s = Stranger()
    stranger.append(s)
    _fallback(monkeypatch, s.port)
    monkeypatch.setattr(discover.Relay, "check_listener", lambda self: None)
    with sandboxd.connect(token="secret", timeout=5) as c:
        for _ in range(3):
            with pytest.raises(discover.UntrustedService) as e:
                c.sessions()
            _names_the_stranger(e.value, s.port)
    seen, total = s.received()
    assert seen >= 1 and total == 0, (seen, total)


def test_an_address_given_is_used_as_given(stranger: list[Stranger], monkeypatch: pytest.MonkeyPatch) -> None:
    # The control: the same stranger at an address the user gave gets the call.
    monkeypatch.delenv("SANDBOXD_TOKEN", raising=False)
    s = Stranger()
    stranger.append(s)
    with sandboxd.connect(f"127.0.0.1:{s.port}", token="t", timeout=1) as c:
        with pytest.raises(sandboxd.errors.TransportError) as e:
            c.sessions()
    assert not isinstance(e.value, discover.UntrustedService)
    assert s.received()[1] > 0


def _wait_free(port: int) -> None:
    """Waits until nothing listens on the port any more."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) != 0:
                return
        time.sleep(0.05)
    pytest.fail(f"port {port} is still served")


@pytest.mark.parametrize("listener_check", [True, False])
def test_after_the_service_stops_a_stranger_on_its_port_gets_no_call(
    found: None, stranger: list[Stranger], monkeypatch: pytest.MonkeyPatch, listener_check: bool
) -> None:
    server, port = _serve()
    _fallback(monkeypatch, port)
    if not listener_check:
        monkeypatch.setattr(discover.Relay, "check_listener", lambda self: None)
    with sandboxd.connect(token="secret", timeout=5) as c:
        assert c.sessions() == []
        server.stop(None).wait()
        _wait_free(port)
        s = Stranger(port)
        stranger.append(s)
        # The channel reconnects by itself; every connection is checked.
        for _ in range(5):
            with pytest.raises(discover.UntrustedService) as e:
                c.sessions()
            _names_the_stranger(e.value, port)
    assert s.received()[1] == 0


def test_a_state_directorys_token_goes_only_to_its_owners_listener(
    found: None, stranger: list[Stranger], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # The address is given, the token found beside it: after the service
    # stops, a stranger on its port gets neither the token nor the call.
    server, port = _serve()
    state = tmp_path / "state" / os.environ["SANDBOXD_SERVICE_NAME"]
    state.mkdir(parents=True)
    (state / "listen").write_text(f"127.0.0.1:{port}\n")
    (state / "token").write_text("t0ken\n")
    monkeypatch.setenv("SANDBOXD_ADDR", f"127.0.0.1:{port}")
    found_token = discover.found_token(f"127.0.0.1:{port}")
    assert found_token is not None and found_token.token == "t0ken"
    with sandboxd.connect(timeout=5) as c:
        assert c.sessions() == []
        server.stop(None).wait()
        _wait_free(port)
        s = Stranger(port)
        stranger.append(s)
        for _ in range(3):
            with pytest.raises(discover.UntrustedService) as e:
                c.sessions()
            assert f"uid {STRANGER}" in str(e.value) and str(state) in str(e.value), e.value
    assert s.received()[1] == 0


def test_a_found_service_of_ones_own_is_used_and_the_relay_is_removed(
    found: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    server, port = _serve()
    _fallback(monkeypatch, port)
    try:
        c = sandboxd.connect(timeout=5)
        relay: Optional[discover.Relay] = c._relay
        assert relay is not None
        assert os.stat(os.path.dirname(relay.path)).st_mode & 0o077 == 0
        for _ in range(3):
            assert c.sessions() == []
        c.close()
        assert not os.path.exists(relay.path)
    finally:
        server.stop(None)
