"""`sandboxd mcp` as a developer runs it on a workstation: an ordinary user
in the `docker` group, over a project in their home, with no service
running and no root anywhere. The official MCP SDK drives it: red, edit,
green, a refused edit, progress; afterwards, what the agent made belongs
to the developer."""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from mcp import ClientSession, types
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_harness import binary
from test_mcp import CALC, TEST_COMMAND, TESTS, call, refused, run, text


@dataclass
class Developer:
    name: str
    uid: int
    gid: int
    home: Path
    sandboxd: Path


@pytest.fixture
def developer() -> Iterator[Developer]:
    """A user made for the test: in the docker group, home closed to
    others, the binary where they may run it; removed after."""
    base = Path(tempfile.mkdtemp(prefix="sandboxd-developer-"))
    base.chmod(0o755)
    name = "sbx" + uuid.uuid4().hex[:9]
    home = base / "home"
    subprocess.run(
        ["useradd", "--no-create-home", "--shell", "/bin/sh", "--groups", "docker", "--home-dir", str(home), name],
        check=True,
    )
    try:
        pw = pwd.getpwnam(name)
        home.mkdir()
        os.chown(home, pw.pw_uid, pw.pw_gid)
        home.chmod(0o700)
        bindir = base / "bin"
        bindir.mkdir()
        bindir.chmod(0o755)
        shutil.copy2(binary(), bindir / "sandboxd")
        yield Developer(name, pw.pw_uid, pw.pw_gid, home, bindir / "sandboxd")
    finally:
        subprocess.run(["userdel", name], check=False)
        shutil.rmtree(base, ignore_errors=True)


def as_developer(dev: Developer, path: Path, text_: str) -> None:
    path.write_text(text_)
    os.chown(path, dev.uid, dev.gid)


@contextlib.asynccontextmanager
async def developer_mcp(dev: Developer, project: Path) -> AsyncIterator[ClientSession]:
    """`sandboxd mcp --workspace PROJECT`, started as the developer."""
    params = StdioServerParameters(
        command="runuser",
        args=[
            "-u", dev.name, "--",
            "env", "-i", f"HOME={dev.home}", "PATH=/usr/local/bin:/usr/bin:/bin",
            str(dev.sandboxd), "mcp", "--workspace", str(project),
        ],
        cwd=project,
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(
            read, write, client_info=types.Implementation(name="sandboxd-tests", version="1")
        ) as session:
            await session.initialize()
            yield session


def test_a_developer_without_root_runs_red_edit_green_over_their_own_project(developer: Developer) -> None:
    dev = developer
    project = dev.home / "proj"
    project.mkdir()
    os.chown(project, dev.uid, dev.gid)
    as_developer(dev, project / "calc.py", CALC)
    as_developer(dev, project / "test_calc.py", TESTS)
    notes: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        notes.append(done)

    async def main() -> None:
        async with developer_mcp(dev, project) as s:
            red = await call(s, "run_command", command=TEST_COMMAND)
            assert red.structured_content["exit_code"] != 0, text(red)
            before = (project / "calc.py").read_bytes()
            await refused(s, "edit_file", "OLD_STRING_NOT_FOUND", path="calc.py", old_string="a / b", new_string="x")
            assert (project / "calc.py").read_bytes() == before
            await call(s, "edit_file", path="calc.py", old_string="a - b", new_string="a + b")
            green = await call(s, "run_command", command=TEST_COMMAND)
            assert green.structured_content["exit_code"] == 0, text(green)
            await call(s, "create_file", path="notes/todo.txt", content="more tests\n")
            slow = await s.call_tool(
                "run_command",
                {"command": "for i in 1 2 3; do echo step $i; sleep 1; done; mkdir -p out && id -u > out/who"},
                progress_callback=progress,
            )
            assert not slow.is_error, text(slow)
            assert slow.structured_content["exit_code"] == 0, text(slow)
            assert notes, "no progress while the command ran"

    run(main)
    assert "a + b" in (project / "calc.py").read_text()
    assert (project / "out/who").read_text().strip() == str(dev.uid), "commands run as the developer"
    for made in ["calc.py", "notes", "notes/todo.txt", "out", "out/who"]:
        st = os.lstat(project / made)
        assert (st.st_uid, st.st_gid) == (dev.uid, dev.gid), made
    # The private service left nothing running.
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        ps = subprocess.run(["pgrep", "-u", dev.name], capture_output=True, text=True)
        if not ps.stdout.strip():
            break
        time.sleep(0.5)
    assert not ps.stdout.strip(), f"processes of the developer left: {ps.stdout}"
