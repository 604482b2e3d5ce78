"""A real sandboxd service for the tests, started from $SANDBOXD_BIN.

One service is shared by the whole run (it may build the default image on
its first start); each test makes its own sessions. The service runs as
root with Docker, keeps its state in a fresh temporary directory, and is
stopped with SIGTERM at the end (it removes its containers on a clean stop).
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator, Optional

import pytest

import sandboxd

#: How long a first start may take (it may build the default image).
START_TIMEOUT = 300.0
#: How long a clean stop may take before the service is killed.
STOP_TIMEOUT = 60.0


@dataclass
class Service:
    """A running sandboxd service started by the tests."""

    name: str
    addr: str
    token: str
    tmp: Path
    proc: subprocess.Popen
    log: Path
    ca_cert: Optional[Path] = None
    #: The approver token (``approver=True``): it may list and decide
    #: approvals, and nothing else.
    approver_token: Optional[str] = None

    @property
    def roots(self) -> Path:
        """The root under which this service lends existing directories."""
        return self.tmp / "roots"

    def client(self, **kw: object) -> sandboxd.Client:
        return sandboxd.connect(self.addr, token=self.token, ca_cert=self.ca_cert, **kw)  # type: ignore[arg-type]

    def approver_client(self, **kw: object) -> sandboxd.Client:
        """A client holding the approver token (the service was started with ``approver=True``)."""
        assert self.approver_token is not None, "start the service with approver=True"
        return sandboxd.connect(self.addr, token=self.approver_token, ca_cert=self.ca_cert, **kw)  # type: ignore[arg-type]

    def log_tail(self, lines: int = 40) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def _binary() -> str:
    path = os.environ.get("SANDBOXD_BIN")
    if not path:
        pytest.fail(
            "SANDBOXD_BIN is not set: point it at a sandboxd binary "
            "(e.g. SANDBOXD_BIN=target/debug/sandboxd) to run the Python client's tests",
            pytrace=False,
        )
    if not (os.path.isfile(path) and os.access(path, os.X_OK)):
        pytest.fail(f"SANDBOXD_BIN={path} is not an executable file", pytrace=False)
    return path


def _listening_on(log: Path, proc: subprocess.Popen, deadline: float) -> Optional[str]:
    """The address a service given ``--listen 127.0.0.1:0`` took, from its
    "sandboxd listening" line (a port found free beforehand could be taken by
    another test before the service binds it); None if it exited or stayed
    silent past the deadline."""
    while time.monotonic() < deadline:
        for line in log.read_text(errors="replace").splitlines():
            found = re.search(r"sandboxd listening.*\baddr=(\S+)", line)
            if found:
                return found.group(1)
        if proc.poll() is not None:
            return None
        time.sleep(0.05)
    return None


def _mounts_under(prefix: Path) -> list[str]:
    """Mount points under prefix, deepest first."""
    found = []
    with open("/proc/self/mounts") as f:
        for line in f:
            point = line.split()[1].replace("\\040", " ")
            if point == str(prefix) or point.startswith(str(prefix) + "/"):
                found.append(point)
    return sorted(found, key=len, reverse=True)


def start_service(
    label: str,
    *extra: str,
    listen: Optional[str] = None,
    pool_size: int = 1,
    ca_cert: Optional[Path] = None,
    approver: bool = False,
) -> Service:
    """Starts `sandboxd serve` (on a free loopback port unless ``listen``) and
    waits until it answers. ``ca_cert``: the service serves TLS signed by it.
    ``approver``: it also takes an approver token (``--approver-token-file``),
    kept in ``Service.approver_token``."""
    binary = _binary()
    name = f"sandboxd-pytest-{os.getpid()}{label}"
    tmp = Path(tempfile.mkdtemp(prefix=f"{name}-"))
    token = secrets.token_urlsafe(32)
    token_file = tmp / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    approver_token: Optional[str] = None
    approver_flags: list[str] = []
    if approver:
        approver_token = secrets.token_urlsafe(32)
        approver_file = tmp / "approver-token"
        approver_file.write_text(approver_token + "\n")
        approver_file.chmod(0o600)
        approver_flags = ["--approver-token-file", str(approver_file)]
    # Unless told where, the service picks its port: its log names it.
    pick = listen is None
    if listen is None:
        listen = "127.0.0.1:0"
    log = tmp / "serve.log"
    # Existing directories may be lent from here (tmp is 0700, root's).
    roots = tmp / "roots"
    roots.mkdir(mode=0o700)
    # The service reads SANDBOXD_* from its environment: give it none of the caller's.
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXD_")}
    cmd = [
        binary,
        "serve",
        "--listen",
        listen,
        "--state-dir",
        str(tmp / "state"),
        "--service-name",
        name,
        "--token-file",
        str(token_file),
        "--pool-size",
        str(pool_size),
        "--allow-root",
        str(roots),
        *approver_flags,
        *extra,
    ]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + START_TIMEOUT
    if pick:
        took = _listening_on(log, proc, deadline)
        if took is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"sandboxd did not listen ({' '.join(cmd)}):\n{log.read_text(errors='replace')}", pytrace=False)
        listen = took
    if listen.startswith("unix:"):
        addr = listen
    elif ca_cert is not None:
        addr = f"https://{listen}"
    else:
        addr = listen
    service = Service(
        name=name,
        addr=addr,
        token=token,
        tmp=tmp,
        proc=proc,
        log=log,
        ca_cert=ca_cert,
        approver_token=approver_token,
    )
    last: Optional[Exception] = None
    failure: Optional[str] = None
    try:
        with service.client(timeout=5) as probe:
            while failure is None:
                if proc.poll() is not None:
                    failure = f"sandboxd exited with {proc.returncode} while starting ({' '.join(cmd)})"
                    break
                try:
                    probe.sessions()
                    return service
                except (sandboxd.TransportError, sandboxd.ServiceFault) as e:
                    last = e
                if time.monotonic() > deadline:
                    failure = f"sandboxd did not answer on {addr} within {START_TIMEOUT:.0f} s (last error: {last})"
                time.sleep(0.5)
    except BaseException:  # any other answer (or Ctrl-C): leave nothing running
        stop_service(service)
        raise
    tail = service.log_tail()
    stop_service(service)
    pytest.fail(f"{failure}:\n{tail}", pytrace=False)


def stop_service(service: Service) -> None:
    """SIGTERM, wait; kill -9 and clean up after it only as a last resort."""
    proc = service.proc
    killed = False
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            killed = True
    leftovers = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=sandboxd.service={service.name}"],
        capture_output=True,
        text=True,
    ).stdout.split()
    if leftovers:
        subprocess.run(["docker", "rm", "-f", *leftovers], capture_output=True)
    for point in _mounts_under(service.tmp):
        subprocess.run(["umount", "-l", point], capture_output=True)
    if not _mounts_under(service.tmp):
        shutil.rmtree(service.tmp, ignore_errors=True)
    if killed:
        print(f"sandboxd {service.name} had to be killed; removed {len(leftovers)} container(s)")


