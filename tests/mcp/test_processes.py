"""`sandboxd mcp`'s long-running process tools checked with the official MCP
Python SDK: a server started in the background answers the session's
commands and its log is read a piece at a time, a program reading its
input gets a line typed into it, and refusals come back as isError
results with their reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import anyio
import jsonschema
from mcp import ClientSession
from mcp_harness import mcp_session

PROCESS_TOOLS = {"start_process", "process_output", "send_input", "stop_process", "list_processes"}

FETCH = (
    "python3 -c \"import urllib.request; "
    "print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\""
)


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


async def output_until(s: ClientSession, process_id: str, needle: str, tries: int = 6) -> str:
    """Reads new output (waiting for it) until `needle` was shown; returns
    everything shown meanwhile."""
    seen = ""
    for _ in range(tries):
        seen += text(await call(s, "process_output", process_id=process_id, wait_ms=5000))
        if needle in seen:
            return seen
    raise AssertionError(f"{needle!r} never came; shown: {seen}")


def run(test: Any) -> None:
    anyio.run(test)


def test_the_process_tools_are_listed_with_schemas_and_say_when_to_use_them(workspace: Path) -> None:
    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            by_name = {t.name: t for t in (await s.list_tools()).tools}
            assert PROCESS_TOOLS <= set(by_name)
            for name in PROCESS_TOOLS:
                tool = by_name[name]
                jsonschema.Draft202012Validator.check_schema(tool.input_schema)
                for prop, schema in tool.input_schema.get("properties", {}).items():
                    assert schema.get("description"), f"{name}.{prop} has no description"
            start = by_name["start_process"]
            assert "run_command" in start.description and "ready_port" in start.description
            assert start.input_schema["required"] == ["command"]
            assert {"cwd", "env", "stdin", "pty", "ready_port", "ready_match", "ready_timeout_ms"} <= set(
                start.input_schema["properties"]
            )
            assert by_name["process_output"].annotations.read_only_hint is True
            assert by_name["stop_process"].annotations.read_only_hint is False

    run(main)


def test_a_server_in_the_background_answers_and_its_log_is_read_piece_by_piece(workspace: Path) -> None:
    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            started = await call(
                s, "start_process", command="python3 -m http.server 8000", ready_port=8000, ready_timeout_ms=20000
            )
            shown = text(started)
            assert started.structured_content["ready_state"] == "ready", shown
            pid = started.structured_content["process"]["process_id"]
            assert shown.startswith(f"started {pid}, ready after "), shown
            assert f"{pid} running for" in shown and "`python3 -m http.server 8000`" in shown, shown

            fetched = await call(s, "run_command", command=FETCH, timeout_seconds=30)
            assert fetched.structured_content["exit_code"] == 0, text(fetched)
            assert text(fetched).count("200") >= 1

            # http.server logs each request to stderr.
            log = await output_until(s, pid, '"GET / HTTP/1.1" 200')
            assert "stderr (" in log, log
            # Each call shows only what is new: the request is not shown again.
            again = text(await call(s, "process_output", process_id=pid))
            assert "stderr: nothing new" in again, again
            assert "GET /" not in again, again
            # ... unless asked to read from the start.
            whole = await call(s, "process_output", process_id=pid, from_start=True)
            assert "GET / HTTP/1.1" in text(whole)
            assert "GET / HTTP/1.1" in whole.structured_content["stderr"]["text"]

            listed = text(await call(s, "list_processes"))
            assert f"{pid} running for" in listed and "http.server" in listed, listed

            stopped = await call(s, "stop_process", process_id=pid)
            assert f"{pid} was killed by SIGTERM to its process group" in text(stopped), text(stopped)
            assert stopped.structured_content["process"]["state"] == "killed"
            listed = text(await call(s, "list_processes"))
            assert f"{pid} was killed" in listed, listed
            # An ended process takes no input.
            msg = await refused(s, "send_input", "PROCESS_ENDED", process_id=pid, text="x")
            assert pid in msg
            await refused(s, "process_output", "PROCESS_NOT_FOUND", process_id="p99")

    run(main)


def test_a_program_reading_its_input_gets_the_line_sent(workspace: Path) -> None:
    program = (
        "python3 -c \"import sys; line = sys.stdin.readline(); "
        "print('got', line.strip()[::-1], flush=True); sys.exit(len(sys.stdin.read()))\""
    )

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace)) as s:
            started = await call(s, "start_process", command=program, stdin=True)
            pid = started.structured_content["process"]["process_id"]
            assert "input open" in text(started), text(started)

            sent = await call(s, "send_input", process_id=pid, text="hello")
            assert sent.structured_content == {"written": 6, "closed": False}
            got = await output_until(s, pid, "got olleh")
            assert "stdout (" in got

            # The rest of the input, then its end: the program counts it and exits.
            await call(s, "send_input", process_id=pid, text="abc", newline=False, close=True)
            ended = await output_until(s, pid, "exited with code")
            assert f"{pid} exited with code 3" in ended, ended

            # Without stdin a process takes no input.
            quiet = await call(s, "start_process", command="sleep 30")
            quiet_id = quiet.structured_content["process"]["process_id"]
            msg = await refused(s, "send_input", "PROCESS_INPUT_CLOSED", process_id=quiet_id, text="x")
            assert "stdin" in msg
            await call(s, "stop_process", process_id=quiet_id)

    run(main)
