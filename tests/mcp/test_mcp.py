"""`sandboxd mcp` checked with the official MCP Python SDK: the tools and
their schemas, the red -> green loop, refusals as isError results, progress
while a command runs, policy, checkpoints, and the session's end."""

from __future__ import annotations

import hashlib
import signal
import socket
import threading
import json
import os
import time
import tomllib
from pathlib import Path
from typing import Any

import anyio
import jsonschema
import pytest
from mcp_harness import (
    PRIVATE_HOMES,
    ROOT,
    containers,
    mcp_session,
    mounts_under,
    pid_of,
    service_name,
    wait_gone,
    wait_no_containers,
)
from mcp import ClientSession

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
TESTS = (
    "import unittest\n\nfrom calc import add, mul\n\n\n"
    "class CalcTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n"
    "    def test_mul(self):\n        self.assertEqual(mul(2, 3), 6)\n\n\n"
    'if __name__ == "__main__":\n    unittest.main()\n'
)
TEST_COMMAND = "python3 -m unittest -q"

TOOLS = {
    "read_file",
    "create_file",
    "edit_file",
    "list_dir",
    "find_files",
    "search_files",
    "run_command",
    "apply_patch",
    "diff",
    "checkpoint",
    "list_checkpoints",
    "restore_checkpoint",
    "start_process",
    "process_output",
    "send_input",
    "stop_process",
    "list_processes",
    "session_report",
    "reset_sandbox",
    "submit_plan",
}


def project(ws: Path) -> None:
    (ws / "calc.py").write_text(CALC)
    (ws / "test_calc.py").write_text(TESTS)


def text(result: Any) -> str:
    assert len(result.content) == 1, result
    return result.content[0].text


async def call(s: ClientSession, tool: str, **args: Any) -> Any:
    result = await s.call_tool(tool, args)
    assert not result.is_error, f"{tool} failed: {text(result)}"
    return result


async def refused(s: ClientSession, tool: str, reason: str, **args: Any) -> str:
    """Calls a tool that must be refused with `reason`; returns its message."""
    result = await s.call_tool(tool, args)
    assert result.is_error, f"{tool} was not refused: {text(result)}"
    assert result.structured_content["reason"] == reason, result.structured_content
    assert text(result).startswith(f"refused [{reason}]: "), text(result)
    return result.structured_content["message"]


def run(test: Any) -> None:
    anyio.run(test)


def test_tools_list_gives_every_tool_with_a_valid_json_schema(workspace: Path) -> None:
    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            listed = (await s.list_tools()).tools
            assert {t.name for t in listed} == TOOLS
            for tool in listed:
                schema = tool.input_schema
                jsonschema.Draft202012Validator.check_schema(schema)
                assert schema["type"] == "object", tool.name
                assert len(tool.description or "") > 40, tool.name
                for name, prop in schema.get("properties", {}).items():
                    assert prop.get("description"), f"{tool.name}.{name} has no description"
            by_name = {t.name: t for t in listed}
            edit = by_name["edit_file"].input_schema
            assert {"path", "old_string", "new_string", "replace_all", "edits", "expected_sha256"} <= set(
                edit["properties"]
            )
            assert edit["required"] == ["path"]
            # A schema the arguments are checked against: a valid call fits it.
            jsonschema.validate({"path": "a.py", "old_string": "x", "new_string": "y"}, edit)
            with pytest.raises(jsonschema.ValidationError):
                jsonschema.validate({"path": "a.py", "typo": 1}, edit)
            assert by_name["read_file"].annotations.read_only_hint is True
            assert by_name["run_command"].annotations.read_only_hint is False

    run(main)


def test_red_read_edit_green_then_report(workspace: Path) -> None:
    project(workspace)

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            red = await call(s, "run_command", command=TEST_COMMAND)
            assert red.structured_content["exit_code"] != 0
            assert "FAILED (failures=1)" in text(red)

            read = text(await call(s, "read_file", path="calc.py"))
            assert "   2      return a - b" in read
            sha = hashlib.sha256(CALC.encode()).hexdigest()
            assert sha in read

            edit = text(
                await call(
                    s,
                    "edit_file",
                    path="calc.py",
                    old_string="    return a - b",
                    new_string="    return a + b",
                    expected_sha256=sha,
                )
            )
            assert "+    return a + b" in edit

            green = await call(s, "run_command", command=TEST_COMMAND)
            assert green.structured_content["exit_code"] == 0, text(green)
            assert green.structured_content["timed_out"] is False
            assert green.structured_content["killed_by"] == "none"

            report = text(
                await call(s, "session_report", planned_files=["calc.py"], verify_command=TEST_COMMAND)
            )
            assert "ran after the last write and passed" in report
            assert "calc.py" in report
        # The edit landed in the directory itself, and stays after the end.
        assert (workspace / "calc.py").read_text() == CALC.replace("a - b", "a + b")

    run(main)


def test_a_refused_edit_is_an_error_result_and_leaves_the_file_unchanged(workspace: Path) -> None:
    (workspace / "dup.py").write_bytes(b"x = 1\nx = 1\r\n")
    before = (workspace / "dup.py").read_bytes()
    stat = os.stat(workspace / "dup.py")

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            msg = await refused(
                s, "edit_file", "OLD_STRING_NOT_FOUND", path="dup.py", old_string="y = 2", new_string="z"
            )
            assert "Nothing was changed" in msg
            msg = await refused(
                s, "edit_file", "OLD_STRING_AMBIGUOUS", path="dup.py", old_string="x = 1", new_string="z"
            )
            assert "2" in msg
            await refused(
                s,
                "edit_file",
                "STALE_FILE",
                path="dup.py",
                old_string="x = 1\nx",
                new_string="z",
                expected_sha256="0" * 64,
            )
            await refused(s, "read_file", "FILE_NOT_FOUND", path="missing.py")
            await refused(s, "read_file", "PATH_OUTSIDE_WORKSPACE", path="../../etc/passwd")
            # Arguments that do not fit the schema are a refusal too, not a
            # protocol error.
            await refused(s, "edit_file", "INVALID_ARGUMENT", path="dup.py", old_string="x = 1")
            await refused(s, "read_file", "INVALID_ARGUMENT", file="dup.py")
            await refused(
                s,
                "edit_file",
                "INVALID_ARGUMENT",
                path="dup.py",
                old_string="a",
                new_string="b",
                edits=[{"old_string": "c", "new_string": "d"}],
            )
            await refused(s, "no_such_tool", "UNIMPLEMENTED")
            # A call over the transport's 16 MiB is answered, not dropped,
            # and the session goes on.
            msg = await refused(
                s, "create_file", "ARGUMENT_TOO_LARGE", path="big.txt", content="x" * (17 << 20)
            )
            assert "nothing was done" in msg
            await refused(s, "read_file", "FILE_NOT_FOUND", path="big.txt")

    run(main)
    assert not (workspace / "big.txt").exists()
    assert (workspace / "dup.py").read_bytes() == before
    after = os.stat(workspace / "dup.py")
    assert (after.st_mtime_ns, after.st_ino) == (stat.st_mtime_ns, stat.st_ino)


def test_several_edits_apply_together(workspace: Path) -> None:
    project(workspace)

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            await call(
                s,
                "edit_file",
                path="calc.py",
                edits=[
                    {"old_string": "a - b", "new_string": "a + b"},
                    {"old_string": "a * b", "new_string": "b * a"},
                ],
            )
            await call(s, "edit_file", path="calc.py", old_string="b", new_string="B", replace_all=True)

    run(main)
    both = CALC.replace("a - b", "a + b").replace("a * b", "b * a")
    assert (workspace / "calc.py").read_text() == both.replace("b", "B")


def test_a_long_command_sends_progress_and_its_final_result(workspace: Path) -> None:
    notes: list[tuple[float, float | None, str | None, float]] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        notes.append((done, total, message, time.monotonic()))

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            result = await s.call_tool(
                "run_command",
                {
                    "command": "for i in 1 2 3 4; do echo step $i; sleep 1; done; echo done >&2; exit 3",
                    "timeout_seconds": 60,
                },
                progress_callback=progress,
            )
            ended = time.monotonic()
            assert not result.is_error, text(result)
            out = result.structured_content
            assert out["exit_code"] == 3
            assert out["stdout"]["text"] == "step 1\nstep 2\nstep 3\nstep 4\n"
            assert out["stdout"]["total_bytes"] == 28
            assert out["stderr"]["text"] == "done\n"
            assert out["timed_out"] is False
            assert "[exit 3 in " in text(result)
            assert len(notes) >= 2, notes
            # Sent while it ran, in order, toward the timeout.
            assert notes[0][3] < ended - 1.0, notes
            assert [n[0] for n in notes] == sorted(n[0] for n in notes)
            assert all(n[1] == 60.0 for n in notes), notes
            assert any("step" in (n[2] or "") for n in notes), notes

    run(main)


def test_a_command_past_its_timeout_is_stopped_and_says_so(workspace: Path) -> None:
    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            started = time.monotonic()
            result = await call(s, "run_command", command="echo before; sleep 60", timeout_seconds=1)
            assert time.monotonic() - started < 30
            out = result.structured_content
            assert out["timed_out"] is True
            assert out["killed_by"] != "none"
            assert out["stdout"]["text"] == "before\n"
            assert "timed out" in text(result)

    run(main)


def test_output_past_the_cap_keeps_its_start_and_end(workspace: Path) -> None:
    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            result = await call(
                s, "run_command", command="seq 1 100000; echo LAST", output_cap=1000
            )
            out = result.structured_content["stdout"]
            assert out["truncated"] is True
            assert out["total_bytes"] == 588900
            assert out["text"].startswith("1\n2\n")
            assert out["tail"].endswith("LAST\n")
            assert "bytes omitted" in text(result)
            assert len(text(result)) < 2000

    run(main)


def test_policy_flags_carry_through(workspace: Path) -> None:
    project(workspace)
    (workspace / "tests").mkdir()

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace), "--read-only") as s:
            await call(s, "read_file", path="calc.py")
            await refused(s, "edit_file", "POLICY_DENIED", path="calc.py", old_string="a - b", new_string="a + b")
            await refused(s, "run_command", "POLICY_DENIED", command="touch x")
        async with mcp_session("--workspace", str(workspace), "--deny-write", "tests/**") as s:
            await refused(s, "create_file", "POLICY_DENIED", path="tests/test_new.py", content="x")
            await call(s, "create_file", path="src_new.py", content="x = 1\n")

    run(main)
    assert (workspace / "calc.py").read_text() == CALC
    assert not (workspace / "tests" / "test_new.py").exists()
    assert not (workspace / "x").exists()


def test_checkpoint_diff_and_restore(workspace: Path) -> None:
    project(workspace)

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            made = await call(s, "checkpoint", label="before the fix")
            checkpoint_id = made.structured_content["checkpoint_id"]
            assert checkpoint_id and checkpoint_id in text(made)
            await call(s, "edit_file", path="calc.py", old_string="a - b", new_string="a + b")
            await call(s, "run_command", command="echo new > made.txt")
            diff = text(await call(s, "diff"))
            assert "diff --git a/calc.py b/calc.py" in diff
            assert "+    return a + b" in diff
            assert "made.txt" in diff
            stat = text(await call(s, "diff", since_checkpoint=checkpoint_id, stat=True))
            assert "M calc.py" in stat and "A made.txt" in stat
            listed = text(await call(s, "list_checkpoints"))
            assert checkpoint_id in listed and "before the fix" in listed
            await call(s, "restore_checkpoint", checkpoint_id=checkpoint_id)
            after = text(await call(s, "diff", since_checkpoint=checkpoint_id, stat=True))
            assert "calc.py" not in after and "made.txt" not in after, after
            await refused(s, "restore_checkpoint", "CHECKPOINT_NOT_FOUND", checkpoint_id="nope")

    run(main)
    assert (workspace / "calc.py").read_text() == CALC
    assert not (workspace / "made.txt").exists()


def test_the_file_tools_list_find_search_and_patch(workspace: Path) -> None:
    project(workspace)
    (workspace / "pkg").mkdir()
    (workspace / "pkg" / "util.py").write_text("def helper():\n    return 41\n")

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            listing = text(await call(s, "list_dir"))
            assert "calc.py" in listing and "pkg/" in listing
            found = text(await call(s, "find_files", pattern="*.py"))
            assert set(found.split()) == {"calc.py", "test_calc.py", "pkg/util.py"}
            matches = text(await call(s, "search_files", pattern=r"return \d+"))
            assert matches.strip() == "pkg/util.py:2:     return 41"
            none = text(await call(s, "search_files", pattern="nowhere"))
            assert none.startswith("no matches")
            patch = (
                "diff --git a/pkg/util.py b/pkg/util.py\n--- a/pkg/util.py\n+++ b/pkg/util.py\n"
                "@@ -1,2 +1,2 @@\n def helper():\n-    return 41\n+    return 42\n"
            )
            applied = text(await call(s, "apply_patch", patch=patch))
            assert "pkg/util.py" in applied
            await refused(s, "apply_patch", "PATCH_CONTEXT_MISMATCH", patch=patch)

    run(main)
    assert (workspace / "pkg" / "util.py").read_text() == "def helper():\n    return 42\n"


def test_the_session_ends_with_the_client_and_the_directory_stays(workspace: Path) -> None:
    project(workspace)
    name = service_name()

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace), "--service-name", name) as s:
            await call(s, "run_command", command="sleep 300 > /dev/null 2>&1 &")
            assert containers(name), "the session has a container while it is open"

    run(main)
    assert wait_no_containers(name) == []
    assert (workspace / "calc.py").read_text() == CALC
    assert sorted(p.name for p in workspace.iterdir()) == ["calc.py", "test_calc.py"]


def test_a_fresh_workspace_is_empty_and_removed(workspace: Path) -> None:
    name = service_name()

    async def main() -> None:
        async with mcp_session("--fresh", "--service-name", name) as s:
            await call(s, "create_file", path="note.txt", content="hi\n")
            result = await call(s, "run_command", command="pwd; cat note.txt")
            assert result.structured_content["stdout"]["text"] == "/workspace\nhi\n"
            assert containers(name)

    run(main)
    assert wait_no_containers(name) == []


def test_a_running_service_over_addr_with_its_token(remote_service: Any, workspace: Path) -> None:
    addr = f"http://{remote_service.addr}"

    async def main() -> None:
        async with mcp_session("--addr", addr, env={"SANDBOXD_TOKEN": remote_service.token}) as s:
            await call(s, "create_file", path="a.txt", content="remote\n")
            result = await call(s, "run_command", command="cat a.txt")
            assert result.structured_content["stdout"]["text"] == "remote\n"
        async with mcp_session("--addr", addr, env={"SANDBOXD_TOKEN": "wrong"}) as s:
            await refused(s, "list_dir", "UNAUTHENTICATED")

    run(main)
    with remote_service.client() as sb:
        assert sb.sessions() == [], "the session was closed when the client left"


def test_the_example_configurations_start_a_working_server_over_the_current_directory(
    workspace: Path,
) -> None:
    """examples/mcp: the Claude Code and Codex CLI configurations, run as
    those clients run them (from the project directory)."""
    project(workspace)
    claude = json.loads((ROOT / "examples/mcp/claude-code.mcp.json").read_text())["mcpServers"]["sandboxd"]
    codex = tomllib.loads((ROOT / "examples/mcp/codex-config.toml").read_text())["mcp_servers"]["sandboxd"]
    for config in (claude, codex):
        assert config["command"] == "sandboxd"
        assert config["args"][0] == "mcp"

        async def main() -> None:
            async with mcp_session(*config["args"][1:], cwd=workspace) as s:
                found = text(await call(s, "find_files", pattern="*.py"))
                assert set(found.split()) == {"calc.py", "test_calc.py"}
                await refused(s, "create_file", "POLICY_DENIED", path="tests/test_x.py", content="")

        run(main)


def test_a_killed_server_leaves_what_the_next_start_removes(workspace: Path, tmp_path: Path) -> None:
    """kill -9 mid-session leaves a container and the private service's
    state, but no mount of the directory (its pin is mounted only while a
    container starts); the next `sandboxd mcp` removes them all, and the
    directory is as the session left it."""
    project(workspace)
    name = service_name()
    home = PRIVATE_HOMES / name

    async def killed() -> None:
        async with mcp_session("--workspace", str(workspace), "--service-name", name) as s:
            await call(s, "run_command", command="echo kept > made.txt; sleep 600 > /dev/null 2>&1 &")
            pid = pid_of(name)
            os.kill(pid, signal.SIGKILL)
            assert wait_gone(pid)

    try:
        run(killed)
    except BaseException:
        pass  # the server died under the client: that is the point
    assert containers(name), "a killed server leaves its container"
    assert home.is_dir(), "and its state"
    assert mounts_under(home) == [], "but no mount of the lent directory"

    other = tmp_path / "other"
    other.mkdir()

    async def next_start() -> None:
        async with mcp_session("--workspace", str(other)) as s:
            await call(s, "list_dir")

    run(next_start)
    assert containers(name) == []
    assert not home.exists()
    assert mounts_under(home) == []
    assert (workspace / "made.txt").read_text() == "kept\n"
    assert (workspace / "calc.py").read_text() == CALC


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT, signal.SIGTERM])
def test_a_signal_ends_the_session_and_removes_everything(workspace: Path, sig: signal.Signals) -> None:
    name = service_name()

    async def signalled() -> None:
        async with mcp_session("--workspace", str(workspace), "--service-name", name) as s:
            await call(s, "run_command", command="sleep 600 > /dev/null 2>&1 &")
            pid = pid_of(name)
            os.kill(pid, sig)
            assert wait_gone(pid), f"{sig.name} did not end the server"

    try:
        run(signalled)
    except BaseException:
        pass  # the server went away under the client: that is the point
    assert containers(name) == []
    assert not (PRIVATE_HOMES / name).exists()


def test_a_live_servers_name_is_not_taken_nor_its_state_swept(workspace: Path, tmp_path: Path) -> None:
    name = service_name()
    other = tmp_path / "other"
    other.mkdir()

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace), "--service-name", name) as first:
            await call(first, "run_command", command="true")
            async with mcp_session("--workspace", str(other), "--service-name", name) as second:
                msg = await refused(second, "list_dir", "SANDBOX_UNAVAILABLE")
                assert "live service" in msg
            async with mcp_session("--workspace", str(other)) as third:
                await call(third, "list_dir")
            # The first is untouched by the others' sweeps.
            assert containers(name)
            await call(first, "run_command", command="true")

    run(main)
    assert wait_no_containers(name) == []


def test_a_hung_engine_does_not_hang_the_server(workspace: Path, tmp_path: Path) -> None:
    """An engine that accepts and never answers: the server still starts
    the protocol, and SIGTERM ends it within its grace period (a second
    signal at once)."""
    engine = tmp_path / "hung.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(engine))
    listener.listen(64)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(listener.accept()[0]) for _ in range(64)], daemon=True).start()
    name = service_name()
    timings: dict[str, float] = {}

    async def main() -> None:
        env = {"DOCKER_HOST": f"unix://{engine}"}
        async with mcp_session("--workspace", str(workspace), "--service-name", name, env=env) as s:
            assert {t.name for t in (await s.list_tools()).tools} == TOOLS
            pid = pid_of(name)
            started = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            assert wait_gone(pid, timeout=60)
            timings["term"] = time.monotonic() - started

    try:
        run(main)
    except BaseException:
        pass
    assert timings, "the server was not stopped"
    assert timings["term"] < 45, timings

    async def twice() -> None:
        env = {"DOCKER_HOST": f"unix://{engine}"}
        async with mcp_session("--workspace", str(workspace), "--service-name", name + "-2", env=env):
            pid = pid_of(name + "-2")
            os.kill(pid, signal.SIGTERM)
            time.sleep(0.5)
            started = time.monotonic()
            os.kill(pid, signal.SIGTERM)
            assert wait_gone(pid, timeout=60)
            timings["twice"] = time.monotonic() - started

    try:
        run(twice)
    except BaseException:
        pass
    assert timings.get("twice", 99) < 10, timings
    listener.close()
    for conn in held:
        conn.close()

    # What the given-up openings left, the next start removes.
    async def next_start() -> None:
        async with mcp_session("--fresh") as s:
            await call(s, "list_dir")

    run(next_start)
    assert not (PRIVATE_HOMES / name).exists()
    assert not (PRIVATE_HOMES / f"{name}-2").exists()
