"""Driving `sandboxd mcp` with the official MCP Python SDK (the `mcp`
package), a client sandboxd did not write: it is started as an MCP client
starts it, a child process speaking JSON-RPC on its stdin and stdout. By
default it runs its own private service (as root, with Docker)."""

from __future__ import annotations

import contextlib
import importlib.util
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from mcp import ClientSession, types
from mcp.client.session import ElicitationFnT
from mcp.client.stdio import StdioServerParameters, stdio_client

ROOT = Path(__file__).resolve().parents[2]


def binary() -> str:
    path = os.environ.get("SANDBOXD_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail(
            "SANDBOXD_BIN must name the sandboxd binary (cargo test sets it)",
            pytrace=False,
        )
    return path


@contextlib.asynccontextmanager
async def mcp_session(
    *args: str,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    elicitation_callback: ElicitationFnT | None = None,
) -> AsyncIterator[ClientSession]:
    """`sandboxd mcp ARGS...` as a stdio MCP server, initialised. With an
    `elicitation_callback` the client declares elicitation: a person is at
    it to approve plans and held calls."""
    # The child sees none of the caller's SANDBOXD_* settings unless given.
    base = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXD_")}
    params = StdioServerParameters(
        command=binary(), args=["mcp", *args], env={**base, **(env or {})}, cwd=cwd
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read,
            write,
            elicitation_callback=elicitation_callback,
            client_info=types.Implementation(name="sandboxd-tests", version="1"),
        ) as session:
            await session.initialize()
            yield session


def service_name() -> str:
    """A name for one private service, to find its containers by."""
    return f"sandboxd-mcp-test-{uuid.uuid4().hex[:10]}"


def containers(service: str) -> list[str]:
    """Containers of the service named `service`."""
    out = subprocess.run(
        ["docker", "ps", "-aq", "--filter", f"label=sandboxd.service={service}"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return out.split()


def wait_no_containers(service: str, timeout: float = 30.0) -> list[str]:
    """Waits until none of the service's containers is left; returns what is."""
    deadline = time.monotonic() + timeout
    while (left := containers(service)) and time.monotonic() < deadline:
        time.sleep(0.5)
    return left


def service_fixtures():
    """The Python client's service helpers (one place starts a service)."""
    spec = importlib.util.spec_from_file_location(
        "sandboxd_service", ROOT / "clients" / "python" / "tests" / "service.py"
    )
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up by name.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def pid_of(service: str) -> int:
    """The pid of the `sandboxd mcp` whose private service is `service`."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if b"mcp" in argv and service.encode() in argv:
            return int(entry.name)
    raise AssertionError(f"no sandboxd mcp process runs the service {service}")


def wait_gone(pid: int, timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        # A zombie (exited, not yet reaped by its parent) counts as gone.
        try:
            if Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.2)
    return not Path(f"/proc/{pid}").exists()


def mounts_under(prefix: Path) -> list[str]:
    points = []
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4]
        if point == str(prefix) or point.startswith(f"{prefix}/"):
            points.append(point)
    return points


#: Where private services keep their state (run as root).
PRIVATE_HOMES = Path("/var/lib/sandboxd/mcp")
