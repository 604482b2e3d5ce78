"""Long-running processes through the client, against a real service: a
server in the background and a client in the foreground, a REPL on a
terminal, a program reading its input, readiness that never comes, and
the refusals."""

from __future__ import annotations

import dataclasses
import threading
import time
from typing import Callable

import pytest

import sandboxd

FETCH = (
    "python3 -c \"import urllib.request; "
    "print(urllib.request.urlopen('http://127.0.0.1:8000/').status)\""
)


def refused(cls: type[sandboxd.SandboxdError], reason: str, call: Callable[[], object]) -> sandboxd.SandboxdError:
    """Runs call, which must raise exactly cls with reason; returns the exception."""
    with pytest.raises(sandboxd.SandboxdError) as info:
        call()
    e = info.value
    assert type(e) is cls, f"{type(e).__name__} [{e.reason}] raised, {cls.__name__} expected: {e.message}"
    assert e.reason == reason
    assert isinstance(e, sandboxd.ProcessRefused)
    assert e.message and e.code is not None
    return e


def follow_until(p: sandboxd.Process, needle: str, timeout: float = 30.0) -> str:
    """Follows the process's output until `needle` shows; returns the text
    seen. Gives up (and fails) after `timeout` seconds."""
    seen = ""
    with p.follow() as chunks:
        timer = threading.Timer(timeout, chunks.cancel)
        timer.start()
        try:
            for chunk in chunks:
                seen += chunk.text
                if needle in seen:
                    return seen
        finally:
            timer.cancel()
    raise AssertionError(f"{needle!r} never came; seen: {seen!r}")


def test_a_server_in_the_background_answers_the_sessions_commands(session: sandboxd.Session) -> None:
    s = session
    with s.start("python3 -m http.server 8000", ready_port=8000, ready_timeout=20) as server:
        assert server.ready_state is sandboxd.ReadyState.READY
        assert server.ready and server.id.startswith("p")
        assert server.ready_time > 0
        info = server.info()
        assert info.running and info.ready and not info.pty and not info.stdin_open

        fetched = s.run(FETCH, timeout=30)
        assert fetched.ok, fetched.stderr
        assert fetched.stdout.text.strip() == "200"

        # http.server writes its access log to stderr.
        deadline = time.monotonic() + 10
        while '"GET / HTTP/1.1" 200' not in (out := server.output()).stderr and time.monotonic() < deadline:
            time.sleep(0.2)
        assert '"GET / HTTP/1.1" 200' in out.stderr, out
        assert out.stderr_skipped == 0 and out.info.running

        assert [p.id for p in s.processes()] == [server.id]
        ended = server.stop()
    assert ended.state is sandboxd.ProcessState.KILLED
    assert ended.killed_by is sandboxd.KilledBy.PROCESS_GROUP_TERM
    assert ended.exit_code == 128 + 15 and ended.ended_at is not None
    assert not ended.running and not ended.ok
    # The output stays readable after the end; stopping again says how it ended.
    assert "GET / HTTP/1.1" in server.output().stderr
    assert server.stop() == ended
    assert s.processes()[0].state is sandboxd.ProcessState.KILLED


def test_a_repl_on_a_terminal_answers(session: sandboxd.Session) -> None:
    with session.start("python3 -i -q", pty=True) as repl:
        assert repl.last_info is not None and repl.last_info.pty and repl.last_info.stdin_open
        follow_until(repl, ">>> ")
        repl.write("print(6*7)\n")
        seen = follow_until(repl, "42\r\n")
        # The terminal echoes the line typed, and the answer follows it.
        assert seen.index("print(6*7)") < seen.index("42\r\n"), seen
        repl.resize(40, 120)
        repl.write("import shutil; print(shutil.get_terminal_size())\n")
        assert "columns=120, lines=40" in follow_until(repl, "lines=40")
        # Ctrl-D ends the REPL.
        repl.close_input()
        ended = repl.wait(timeout=30)
    assert ended.state is sandboxd.ProcessState.EXITED and ended.exit_code == 0, ended
    out = repl.output()
    assert "42" in out.stdout and out.stderr == ""


def test_cat_echoes_its_input_and_ends_when_it_is_closed(session: sandboxd.Session) -> None:
    cat = session.start("cat", stdin=True)
    assert cat.ready_state is sandboxd.ReadyState.NOT_ASKED and cat.ready
    assert cat.write("hello\n") == 6
    assert follow_until(cat, "hello\n") == "hello\n"
    assert cat.write("caf\u00e9 ".encode() + b"\xe2\x82", close=False) == 8
    cat.write(b"\xac\n", close=True)
    ended = cat.wait(timeout=30)
    assert ended.ok and ended.exit_code == 0 and not ended.stdin_open, ended
    # A follow goes on where the last one stopped; a euro sign written in
    # two pieces comes whole.
    rest = "".join(c.text for c in cat.follow())
    assert rest == "caf\u00e9 \u20ac\n", rest
    assert cat.output().stdout == "hello\ncaf\u00e9 \u20ac\n"
    assert "".join(c.text for c in cat.follow(from_start=True)) == "hello\ncaf\u00e9 \u20ac\n"

    refused(sandboxd.ProcessEnded, "PROCESS_ENDED", lambda: cat.write("more"))
    refused(sandboxd.ProcessEnded, "PROCESS_ENDED", lambda: cat.signal("INT"))


def test_signals_and_refusals(session: sandboxd.Session) -> None:
    s = session
    sleeper = s.start("sleep 300")
    with pytest.raises(TimeoutError):
        sleeper.wait(timeout=0.5)
    assert sleeper.info().running
    refused(sandboxd.ProcessInputClosed, "PROCESS_INPUT_CLOSED", lambda: sleeper.write("x"))
    refused(sandboxd.NotATerminal, "NOT_A_TERMINAL", lambda: sleeper.resize(10, 10))
    with pytest.raises(ValueError):
        sleeper.signal("HUP")
    sleeper.signal("INT")
    ended = sleeper.wait(timeout=30)
    assert ended.state is sandboxd.ProcessState.KILLED and ended.exit_code == 128 + 2, ended

    ghost = sandboxd.Process(s, dataclasses.replace(ended, id="p99"))
    refused(sandboxd.ProcessNotFound, "PROCESS_NOT_FOUND", ghost.stop)
    refused(sandboxd.ProcessNotFound, "PROCESS_NOT_FOUND", lambda: s.process("p99"))
    assert s.process(sleeper.id).last_info == ended
    with pytest.raises(ValueError):
        s.start("true", ready_port=80, ready_match="x")


def test_readiness_that_never_comes_leaves_the_process_running(session: sandboxd.Session) -> None:
    s = session
    slow = s.start("echo starting; sleep 300", ready_port=8080, ready_timeout=1)
    assert slow.ready_state is sandboxd.ReadyState.TIMED_OUT
    assert not slow.ready
    assert "starting" in slow.stdout_tail
    assert slow.info().running
    slow.stop()

    quick = s.start("echo booting; sleep 0.5; echo 'listening on 9000'; sleep 300", ready_match=r"listening on \d+")
    assert quick.ready_state is sandboxd.ReadyState.READY and quick.ready
    assert "listening on 9000" in quick.stdout_tail
    quick.stop()

    broken = s.start("echo no config >&2; exit 3", ready_port=8000)
    assert broken.ready_state is sandboxd.ReadyState.EXITED
    assert "no config" in broken.stderr_tail
    ended = broken.wait()
    assert ended.state is sandboxd.ProcessState.EXITED and ended.exit_code == 3
