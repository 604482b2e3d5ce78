"""``sandboxd.connect()`` with no arguments finds the service on this machine:
the user's own on ``$XDG_RUNTIME_DIR/sandboxd.sock``, and the system
service's group socket for a member of its group (run as a throwaway user
made here), while a user outside the group is refused and falls through to
the default address.

These services listen on Unix sockets without a token (the socket's mode
decides who may connect), need no Docker, and keep no warm containers.
"""

from __future__ import annotations

import grp
import os
import secrets
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Iterator, Optional

import pytest
from service import Service, _binary, stop_service

import sandboxd
from sandboxd import discover

#: A Docker host where no daemon listens: the file tools work without one.
NO_DOCKER = "unix:///nonexistent/sandboxd-test-docker.sock"


def _serve(tmp: Path, socket: Path, *extra: str) -> Service:
    """Starts `sandboxd serve` on ``socket`` with no token and waits until it listens."""
    name = f"sandboxd-pytest-discover-{os.getpid()}-{secrets.token_hex(3)}"
    log = tmp / "serve.log"
    roots = tmp / "roots"
    roots.mkdir(mode=0o700, exist_ok=True)
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXD_")}
    cmd = [
        _binary(),
        "serve",
        "--listen",
        f"unix:{socket}",
        "--state-dir",
        str(tmp / "state"),
        "--service-name",
        name,
        "--pool-size",
        "0",
        "--docker-host",
        NO_DOCKER,
        "--allow-root",
        str(roots),
        *extra,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    svc = Service(name=name, addr=f"unix:{socket}", token="", tmp=tmp, proc=proc, log=log)
    deadline = time.monotonic() + 120
    while not socket.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            tail = svc.log_tail()
            stop_service(svc)
            pytest.fail(f"sandboxd did not listen on {socket}:\n{tail}", pytrace=False)
        time.sleep(0.05)
    return svc


@pytest.fixture
def no_addr(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nothing in the environment names a service."""
    for var in ("SANDBOXD_ADDR", "SANDBOXD_TOKEN", "SANDBOXD_CA_CERT", "SANDBOXD_SESSION", "SANDBOXD_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)


def test_connect_finds_the_users_own_service(no_addr: None, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sandboxd-pytest-discover-"))
    runtime = tmp / "runtime"
    runtime.mkdir(mode=0o700)
    socket = runtime / "sandboxd.sock"
    svc = _serve(tmp, socket)
    try:
        workspace = svc.roots / "project"
        workspace.mkdir()
        (workspace / "a.txt").write_text("hello\n")
        with sandboxd.connect(svc.addr) as explicit, explicit.session(workspace) as made:
            monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
            with sandboxd.connect() as sb:
                assert sb.addr == f"unix:{socket}"
                assert made.id in [s.id for s in sb.sessions()]
                assert sb.attach(made.id).read("a.txt").content == "hello\n"
            # A socket there that is someone else's is passed by.
            os.chown(socket, 65534, -1)
            assert discover.address() != f"unix:{socket}"
            os.chown(socket, os.geteuid(), -1)
            assert discover.address() == f"unix:{socket}"
    finally:
        stop_service(svc)
    # So is one nobody listens on any more.
    assert discover.address() != f"unix:{socket}"


def _account(*cmd: str) -> None:
    """Runs useradd/groupadd and the like, retried while another holds the lock."""
    for _ in range(20):
        done = subprocess.run(cmd, capture_output=True, text=True)
        if done.returncode == 0:
            return
        time.sleep(0.25)
    raise AssertionError(f"{cmd} failed: {done.stderr}")


@pytest.fixture
def group() -> Iterator[str]:
    """A system group made for the test, deleted after it."""
    name = f"sandboxd-test-{secrets.token_hex(4)}"
    _account("groupadd", "--system", name)
    try:
        yield name
    finally:
        subprocess.run(["groupdel", name], capture_output=True)


def _user(groups: Optional[str]) -> str:
    name = f"sbxd-test-{secrets.token_hex(4)}"
    extra = ["--groups", groups] if groups else []
    _account(
        "useradd",
        "--system",
        "--no-create-home",
        "--no-user-group",
        "--shell",
        "/usr/sbin/nologin",
        *extra,
        name,
    )
    return name


@pytest.fixture
def member(group: str) -> Iterator[str]:
    """A user in ``group`` (a supplementary group, as ``usermod -aG`` makes it)."""
    name = _user(group)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


@pytest.fixture
def outsider() -> Iterator[str]:
    """A user in no group of the test's."""
    name = _user(None)
    try:
        yield name
    finally:
        subprocess.run(["userdel", name], capture_output=True)


#: Run by this interpreter as root: it loads the client (the virtual
#: environment may be closed to other users) and makes one failing call so
#: that what grpc loads lazily is loaded too, drops to the user named in argv
#: (their groups, gid, uid), and only then connects with no arguments, the
#: system socket being argv[2] instead of /run/sandboxd.sock.
AS_USER = textwrap.dedent(
    """
    import os, pwd, socket, sys
    import grpc, sandboxd
    from sandboxd import discover

    with sandboxd.connect("unix:/nonexistent/sandboxd.sock", token="x", timeout=5) as warm_up:
        try:
            warm_up.sessions()
        except sandboxd.TransportError:
            pass
    user = pwd.getpwnam(sys.argv[1])
    os.setgroups(os.getgrouplist(user.pw_name, user.pw_gid))
    os.setgid(user.pw_gid)
    os.setuid(user.pw_uid)
    discover.SYSTEM_SOCKET = sys.argv[2]
    with socket.socket(socket.AF_UNIX) as s:
        try:
            s.connect(sys.argv[2])
            print("connect: ok")
        except PermissionError:
            print("connect: permission denied")
    with sandboxd.connect(timeout=10) as sb:
        print("addr:", sb.addr)
        if sb.addr.startswith("unix:"):
            print("sessions:", len(sb.sessions()))
    """
)


def _run_as(user: str, socket: Path) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SANDBOXD_", "XDG_"))}
    done = subprocess.run(
        [sys.executable, "-c", AS_USER, user, str(socket)],
        capture_output=True,
        text=True,
        env=env,
        cwd="/",
        timeout=120,
    )
    assert done.returncode == 0, f"as {user}: {done.stdout}\n{done.stderr}"
    return done.stdout


def test_connect_reaches_the_group_socket_as_a_member(no_addr: None, group: str, member: str, outsider: str) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="sandboxd-pytest-discover-"))
    # Others may pass through to the socket; the socket decides.
    tmp.chmod(0o711)
    socket = tmp / "sandboxd.sock"
    svc = _serve(tmp, socket, "--socket-group", group)
    try:
        st = socket.stat()
        assert (oct(st.st_mode & 0o777), st.st_gid) == (oct(0o660), grp.getgrnam(group).gr_gid)
        said = _run_as(member, socket)
        assert "connect: ok" in said, said
        assert f"addr: unix:{socket}" in said, said
        assert "sessions: 0" in said, said
        said = _run_as(outsider, socket)
        assert "connect: permission denied" in said, said
        assert f"addr: {discover.DEFAULT_ADDR}" in said, said
    finally:
        stop_service(svc)
