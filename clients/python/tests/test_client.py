"""The client against a real sandboxd service (see conftest.py): no mocks."""

from __future__ import annotations

import io
import shutil
import socket
import subprocess
import tarfile
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import grpc
import pytest

import sandboxd
from sandboxd.client import _target

from service import Service, start_service, stop_service

TEST_CMD = "python3 -m unittest -v"
CALC = "def add(a, b):\n    return a - b\n"
TEST_CALC = (
    "import unittest\n"
    "from calc import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n"
    "        self.assertEqual(add(2, 3), 5)\n\n\n"
    "if __name__ == '__main__':\n"
    "    unittest.main()\n"
)


def host_bytes(s: sandboxd.Session, path: str) -> Optional[bytes]:
    """A workspace file's bytes as the host sees them (None if absent)."""
    try:
        return (Path(s.workspace_path) / path).read_bytes()
    except FileNotFoundError:
        return None


def refused(cls: type[sandboxd.SandboxdError], reason: str, call: Callable[[], object]) -> sandboxd.SandboxdError:
    """Runs call, which must raise exactly cls with reason; returns the exception."""
    with pytest.raises(sandboxd.SandboxdError) as info:
        call()
    e = info.value
    assert type(e) is cls, f"{type(e).__name__} [{e.reason}] raised, {cls.__name__} expected: {e.message}"
    assert e.reason == reason
    assert e.message and e.code is not None
    return e


# --- the loop ---------------------------------------------------------------


def test_red_read_edit_green_then_report(session: sandboxd.Session) -> None:
    s = session
    assert s.create("calc.py", CALC).total_lines == 2
    s.create("test_calc.py", TEST_CALC)

    red = s.run(TEST_CMD, timeout=120)
    assert not red.ok and red.exit_code == 1 and not red.timed_out
    assert red.killed_by is sandboxd.KilledBy.NONE
    assert "FAILED" in red.stderr.text and "AssertionError: -1 != 5" in red.stderr.text

    got = s.read("calc.py")
    assert got.content == CALC and (got.first_line, got.last_line, got.total_lines) == (1, 2, 2)
    assert not got.truncated

    done = s.edit("calc.py", "return a - b", "return a + b", expected_sha256=got.sha256)
    assert done.replacements == 1 and done.first_changed_line == 2 and done.line_delta == 0
    assert "+    return a + b" in done.diff
    assert host_bytes(s, "calc.py") == b"def add(a, b):\n    return a + b\n"

    green = s.run(TEST_CMD, timeout=120)
    assert green.ok, str(green.stderr)
    assert "OK" in green.stderr.text and green.duration > 0
    assert green.started is not None and green.started.cwd == "/workspace"

    report = s.report(planned=["calc.py"], verify=TEST_CMD)
    assert report.session_id == s.id
    assert report.touched == ("calc.py", "test_calc.py")
    assert report.planned_touched == ("calc.py",)
    assert report.unplanned == ("test_calc.py",)
    assert report.untouched == ()
    assert [c.exit_code for c in report.commands] == [1, 0]
    assert [w.tool for w in report.files_written] == ["CreateFile", "CreateFile", "EditFile"]
    v = report.verification
    assert v is not None and v.ran and v.ran_after_last_write and v.passed and v.exit_code == 0
    assert report.denied == ()
    assert [j.tool for j in report.journal][:1] == ["CreateSession"]
    assert s.report().verification is None


def test_file_tools(session: sandboxd.Session) -> None:
    s = session
    s.create("src/app.py", "import os\nprint('hello')\n")
    s.create("src/util.py", "def helper():\n    return 'HELLO'\n")
    s.create("README.md", "hello\n")
    listing = s.list()
    assert {(e.name, e.kind) for e in listing.entries} == {
        ("src", sandboxd.EntryKind.DIR),
        ("README.md", sandboxd.EntryKind.FILE),
    }
    assert [e.name for e in s.list("src").entries] == ["app.py", "util.py"]
    assert set(s.find("*.py").paths) == {"src/app.py", "src/util.py"}
    found = s.search("hello", case_insensitive=True, glob="*.py")
    assert {(m.path, m.line) for m in found.matches} == {("src/app.py", 2), ("src/util.py", 2)}
    window = s.read("src/app.py", offset=2, limit=1)
    assert window.content == "print('hello')\n" and window.first_line == 2 and window.total_lines == 2
    multi = s.edit(
        "src/util.py",
        edits=[sandboxd.Edit("def helper", "def assist"), ("'HELLO'", "'hi'")],
    )
    assert multi.replacements == 2
    assert host_bytes(s, "src/util.py") == b"def assist():\n    return 'hi'\n"
    patch = (
        "diff --git a/README.md b/README.md\n--- a/README.md\n+++ b/README.md\n"
        "@@ -1 +1,2 @@\n hello\n+world\n"
    )
    applied = s.apply_patch(patch)
    assert [(f.path, f.action) for f in applied.files] == [("README.md", sandboxd.PatchAction.MODIFIED)]
    assert host_bytes(s, "README.md") == b"hello\nworld\n"


def test_sessions_attach_and_close(sb: sandboxd.Client) -> None:
    with sb.session(env={"GREETING": "hi"}, default_timeout=45, read_only=False) as s:
        assert s.info.default_timeout == 45.0 and s.info.owns_workspace
        assert s.id in [x.id for x in sb.sessions()]
        other = sb.attach(s.id)
        assert other.id == s.id and not other.close_on_exit
        with other:
            assert other.run("echo $GREETING").stdout.text == "hi\n"
        assert sb.session_info(s.id).id == s.id  # attach did not close it
        workspace = Path(s.workspace_path)
    assert s.closed is not None and s.closed.workspace_removed
    # Removed right after the close answered.
    deadline = time.monotonic() + 20
    while workspace.exists() and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not workspace.exists()
    refused(sandboxd.SessionNotFound, "SESSION_NOT_FOUND", lambda: sb.attach(s.id))
    assert s.close() is s.closed  # idempotent


# --- refusals: one family at a time ----------------------------------------------


EDIT_REFUSALS = [
    (sandboxd.OldStringNotFound, "OLD_STRING_NOT_FOUND", dict(old="return a * b", new="return a + b")),
    (sandboxd.OldStringAmbiguous, "OLD_STRING_AMBIGUOUS", dict(old="a", new="x")),
    (sandboxd.NoChange, "NO_CHANGE", dict(old="return a - b", new="return a - b")),
    (sandboxd.EmptyOldString, "EMPTY_OLD_STRING", dict(old="", new="x")),
    (sandboxd.NoEdits, "NO_EDITS", dict(edits=[])),
    (sandboxd.DuplicateOldString, "DUPLICATE_OLD_STRING", dict(edits=[("add", "x"), ("add", "y")])),
    (sandboxd.EditsOverlap, "EDITS_OVERLAP", dict(edits=[("def add", "x"), ("add(a", "y")])),
    (sandboxd.StaleFile, "STALE_FILE", dict(old="a - b", new="a + b", expected_sha256="0" * 64)),
]


@pytest.fixture(scope="module")
def calc_session(service: Service) -> Iterator[sandboxd.Session]:
    with service.client() as client, client.session() as s:
        s.create("calc.py", CALC)
        yield s


@pytest.mark.parametrize("cls,reason,kw", EDIT_REFUSALS, ids=[r for _, r, _ in EDIT_REFUSALS])
def test_edit_refusals_leave_the_file_unchanged(
    calc_session: sandboxd.Session, cls: type[sandboxd.SandboxdError], reason: str, kw: dict
) -> None:
    s = calc_session
    before = host_bytes(s, "calc.py")
    e = refused(cls, reason, lambda: s.edit("calc.py", **kw))
    assert isinstance(e, sandboxd.EditRefused)
    assert e.metadata.get("path") == "calc.py"
    assert "Nothing was changed" in e.message
    assert host_bytes(s, "calc.py") == before == CALC.encode()


def test_old_string_ambiguous_says_where(calc_session: sandboxd.Session) -> None:
    e = refused(sandboxd.OldStringAmbiguous, "OLD_STRING_AMBIGUOUS", lambda: calc_session.edit("calc.py", "a", "x"))
    assert e.code == grpc.StatusCode.FAILED_PRECONDITION
    assert int(e.metadata["count"]) >= 2 and e.metadata["lines"]


def test_except_clauses_users_write(calc_session: sandboxd.Session) -> None:
    try:
        calc_session.edit("calc.py", "nope", "x")
    except sandboxd.OldStringNotFound as e:
        assert str(e).startswith("[OLD_STRING_NOT_FOUND] old_string cannot be found in calc.py")
    else:
        pytest.fail("no exception")


def test_file_refusals(calc_session: sandboxd.Session) -> None:
    s = calc_session
    refused(sandboxd.FileExists, "FILE_EXISTS", lambda: s.create("calc.py", "x"))
    refused(sandboxd.FileNotFound, "FILE_NOT_FOUND", lambda: s.read("missing.py"))
    e = refused(sandboxd.PathOutsideWorkspace, "PATH_OUTSIDE_WORKSPACE", lambda: s.read("../../etc/passwd"))
    assert e.code == grpc.StatusCode.PERMISSION_DENIED and isinstance(e, sandboxd.FileRefused)
    refused(sandboxd.NotADirectory, "NOT_A_DIRECTORY", lambda: s.list("calc.py"))
    refused(sandboxd.NotAFile, "NOT_A_FILE", lambda: s.read("."))
    refused(sandboxd.LineOutOfRange, "LINE_OUT_OF_RANGE", lambda: s.read("calc.py", offset=99))
    assert host_bytes(s, "calc.py") == CALC.encode()


def test_policy_refusals(sb: sandboxd.Client) -> None:
    with sb.session(read_only=True) as s:
        e = refused(sandboxd.PolicyDenied, "POLICY_DENIED", lambda: s.create("a.py", "x"))
        assert e.metadata.get("rule") == "read_only" and isinstance(e, sandboxd.PolicyRefused)
        refused(sandboxd.PolicyDenied, "POLICY_DENIED", lambda: s.run("true"))
        assert s.list().entries == ()
    with sb.session(deny_writes=["tests/**"]) as s:
        e = refused(sandboxd.PolicyDenied, "POLICY_DENIED", lambda: s.create("tests/test_x.py", "x"))
        assert e.metadata.get("glob") == "tests/**"
        assert host_bytes(s, "tests/test_x.py") is None
        s.create("src/x.py", "x\n")
        e = refused(sandboxd.CommandRefused, "COMMAND_REFUSED", lambda: s.run("rm -rf /"))
        assert isinstance(e, sandboxd.PolicyRefused)
        assert [d.reason for d in s.report().denied] == ["POLICY_DENIED", "COMMAND_REFUSED"]
    refused(sandboxd.ImageNotAllowed, "IMAGE_NOT_ALLOWED", lambda: sb.session(image="alpine:latest"))
    refused(sandboxd.PolicyDenied, "POLICY_DENIED", lambda: sb.delete_environment("nope"))


def test_session_refusals(sb: sandboxd.Client, service: Service) -> None:
    refused(sandboxd.SessionNotFound, "SESSION_NOT_FOUND", lambda: sb.attach("no-such-session"))
    # A missing directory under the allowed root.
    missing = str(service.roots / "no-such-dir")
    e = refused(sandboxd.InvalidWorkspace, "INVALID_WORKSPACE", lambda: sb.session(missing))
    assert isinstance(e, sandboxd.SessionRefused) and e.metadata["path"] == missing
    # Outside any allowed root, existing or not: refused before it is looked at.
    refused(sandboxd.PathOutsideWorkspace, "PATH_OUTSIDE_WORKSPACE", lambda: sb.session("/etc"))
    refused(sandboxd.PathOutsideWorkspace, "PATH_OUTSIDE_WORKSPACE", lambda: sb.session("/no/such/dir"))
    # A lent directory works, and the session sees its files.
    lent = service.roots / "project"
    lent.mkdir()
    (lent / "a.txt").write_text("lent\n")
    with sb.session(str(lent)) as s:
        assert s.read("a.txt").content == "lent\n"


def test_limit_refusals(sb: sandboxd.Client, session: sandboxd.Session) -> None:
    e = refused(sandboxd.LimitExceeded, "LIMIT_EXCEEDED", lambda: sb.session(ttl=10**7))
    assert e.metadata["field"] == "ttl_seconds" and isinstance(e, sandboxd.LimitRefused)
    e = refused(sandboxd.LimitExceeded, "LIMIT_EXCEEDED", lambda: session.run("true", timeout=10**6))
    assert e.metadata["field"] == "timeout_ms"


def test_invalid_requests(sb: sandboxd.Client, session: sandboxd.Session, service: Service) -> None:
    e = refused(sandboxd.InvalidPattern, "INVALID_PATTERN", lambda: session.search("("))
    assert isinstance(e, sandboxd.InvalidRequest) and e.metadata["pattern"] == "("
    refused(sandboxd.InvalidPolicy, "INVALID_POLICY", lambda: sb.session(deny_writes=["["]))
    e = refused(sandboxd.InvalidArgument, "INVALID_ARGUMENT", lambda: session.checkpoint("x" * 300))
    assert e.metadata["field"] == "label"
    # A method the service does not offer: refused by the transport, with a reason.
    channel = grpc.insecure_channel(service.addr)
    try:
        nope = channel.unary_unary("/sandboxd.v1.Sandbox/NoSuchMethod")
        with pytest.raises(grpc.RpcError) as raw:
            nope(b"", metadata=[("authorization", f"Bearer {service.token}")], timeout=10)
    finally:
        channel.close()
    e = sandboxd.errors.from_rpc_error(raw.value)
    assert type(e) is sandboxd.Unimplemented and e.reason == "UNIMPLEMENTED"


def test_environment_refusals(sb: sandboxd.Client) -> None:
    e = refused(sandboxd.EnvironmentNotFound, "ENVIRONMENT_NOT_FOUND", lambda: sb.session(environment="nope"))
    assert e.metadata == {"name": "nope"} and isinstance(e, sandboxd.EnvironmentRefused)
    # The engine's store is shared (an operator's environments show here
    # too): the listing answers, and the refused name is not in it.
    listed = sb.environments()
    assert all(isinstance(env, sandboxd.Environment) for env in listed)
    assert "nope" not in {env.name for env in listed}


def test_archives(session: sandboxd.Session, tmp_path: Path) -> None:
    s = session
    (tmp_path / "proj" / "pkg").mkdir(parents=True)
    (tmp_path / "proj" / "pkg" / "mod.py").write_text("X = 1\n")
    (tmp_path / "proj" / "top.txt").write_text("top\n")
    up = s.upload(tmp_path / "proj", destination="in")
    assert up.files == 2 and up.destination == "in"
    assert host_bytes(s, "in/pkg/mod.py") == b"X = 1\n"
    down = s.download("in")
    with tarfile.open(fileobj=io.BytesIO(down.data)) as tar:
        names = {m.name.rstrip("/") for m in tar.getmembers()}
    assert {"pkg/mod.py", "top.txt"} <= {n.removeprefix("./").removeprefix("in/") for n in names}
    assert down.files == 2
    target = tmp_path / "out.tar.gz"
    assert s.download(gzip=True, to=target).data == b""
    assert target.read_bytes()[:2] == b"\x1f\x8b"

    e = refused(sandboxd.ArchiveMalformed, "ARCHIVE_MALFORMED", lambda: s.upload(b"this is not a tar" * 64))
    assert isinstance(e, sandboxd.ArchiveRefused)
    evil = io.BytesIO()
    with tarfile.open(fileobj=evil, mode="w") as tar:
        info = tarfile.TarInfo("../evil.txt")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"hi"))
    e = refused(sandboxd.ArchiveEntryUnsafe, "ARCHIVE_ENTRY_UNSAFE", lambda: s.upload(evil.getvalue()))
    assert e.metadata["entry"] == "../evil.txt"
    refused(sandboxd.DownloadTooLarge, "DOWNLOAD_TOO_LARGE", lambda: s.download(max_bytes=1))


def test_patch_refusals(calc_session: sandboxd.Session) -> None:
    s = calc_session
    e = refused(sandboxd.PatchMalformed, "PATCH_MALFORMED", lambda: s.apply_patch("not a patch\n"))
    assert isinstance(e, sandboxd.PatchRefused)
    wrong = "--- a/calc.py\n+++ b/calc.py\n@@ -1 +1 @@\n-def sub(a, b):\n+def add(a, b):\n"
    e = refused(sandboxd.PatchContextMismatch, "PATCH_CONTEXT_MISMATCH", lambda: s.apply_patch(wrong))
    assert e.metadata == {"path": "calc.py", "hunk": "1"}
    assert host_bytes(s, "calc.py") == CALC.encode()


def test_checkpoint_restore_changes_round_trip(session: sandboxd.Session) -> None:
    s = session
    s.create("a.txt", "one\n")
    cp = s.checkpoint("before")
    assert cp.label == "before" and cp.files == 1 and cp.bytes == 4 and cp.id
    s.edit("a.txt", "one", "two")
    s.create("b.txt", "new\n")
    assert s.run("rm a.txt && mkdir d && echo x > d/c.txt").ok

    ch = s.changes(since=cp)
    assert ch.since_checkpoint == cp.id
    assert [(c.path, c.kind) for c in ch.changes] == [
        ("a.txt", sandboxd.ChangeKind.DELETED),
        ("b.txt", sandboxd.ChangeKind.ADDED),
        ("d/c.txt", sandboxd.ChangeKind.ADDED),
    ]
    assert ch.changes[1].mode_after == 0o100644 and ch.changes[1].omitted is None
    assert b"+new" in ch.patch and b"-one" in ch.patch
    since_start = s.changes()
    assert since_start.since_checkpoint is None and {c.path for c in since_start.changes} == {"b.txt", "d/c.txt"}

    assert [c.id for c in s.checkpoints()] == [cp.id]
    back = s.restore(cp)
    assert back.digest == cp.digest and back.checkpoint.id == cp.id
    assert host_bytes(s, "a.txt") == b"one\n" and host_bytes(s, "b.txt") is None
    assert not (Path(s.workspace_path) / "d").exists()
    assert s.changes(since=cp).changes == ()

    refused(sandboxd.CheckpointNotFound, "CHECKPOINT_NOT_FOUND", lambda: s.restore("nope"))
    assert s.delete_checkpoint(cp).id == cp.id
    e = refused(sandboxd.CheckpointNotFound, "CHECKPOINT_NOT_FOUND", lambda: s.changes(since=cp))
    assert isinstance(e, sandboxd.CheckpointRefused)


def test_restore_under_a_running_command(session: sandboxd.Session) -> None:
    s = session
    s.create("a.txt", "one\n")
    cp = s.checkpoint()
    s.edit("a.txt", "one", "two")
    with s.stream("sleep 30") as events:
        assert isinstance(next(events), sandboxd.Started)
        refused(sandboxd.CommandRunning, "COMMAND_RUNNING", lambda: s.restore(cp))
        back = s.restore(cp, stop_commands=True)
        assert back.stopped_commands == 1
        *_, last = events
        assert isinstance(last, sandboxd.CommandResult) and not last.ok
    assert host_bytes(s, "a.txt") == b"one\n"


# --- commands ---------------------------------------------------------------


def test_streaming_output_arrives_before_the_end(session: sandboxd.Session) -> None:
    t0 = time.monotonic()
    seen: list[tuple[float, object]] = []
    for event in session.stream("echo one; sleep 2; echo two >&2", timeout=60):
        seen.append((time.monotonic() - t0, event))
    events = [e for _, e in seen]
    assert isinstance(events[0], sandboxd.Started)
    assert isinstance(events[-1], sandboxd.CommandResult) and events[-1].ok
    chunks = [(at, e) for at, e in seen if isinstance(e, sandboxd.OutputChunk)]
    assert [(e.stream, e.data) for _, e in chunks] == [("stdout", "one\n"), ("stderr", "two\n")]
    first_at, end_at = chunks[0][0], seen[-1][0]
    assert end_at - first_at > 1.0, f"first chunk at {first_at:.2f} s, exit at {end_at:.2f} s"
    result = events[-1]
    assert result.stdout.text == "one\n" and result.stderr.text == "two\n" and result.duration >= 2.0


def test_breaking_out_cancels_the_command(session: sandboxd.Session) -> None:
    t0 = time.monotonic()
    for event in session.stream("echo start; sleep 30; echo never", timeout=60):
        if isinstance(event, sandboxd.OutputChunk):
            break
    deadline = time.monotonic() + 20
    while True:
        commands = session.report().commands
        if commands or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert len(commands) == 1 and commands[0].cancelled, commands
    assert commands[0].duration < 20
    assert session.run("echo after").stdout.text == "after\n"
    assert time.monotonic() - t0 < 25


def test_run_on_output_and_lists(session: sandboxd.Session) -> None:
    chunks: list[sandboxd.OutputChunk] = []
    r = session.run(["printf", r"%s\n", "it's", "quoted"], on_output=chunks.append)
    assert r.ok and r.stdout.text == "it's\nquoted\n" and r.command == "printf '%s\\n' 'it'\"'\"'s' quoted"
    assert "".join(c.data for c in chunks) == r.stdout.text


def test_output_travels_once_when_asked(session: sandboxd.Session) -> None:
    expected = "".join(f"{i}\n" for i in range(1, 2001))
    events = list(session.stream("seq 1 2000", stdout_cap=100_000, output="chunks"))
    chunks = "".join(e.data for e in events if isinstance(e, sandboxd.OutputChunk))
    result = events[-1]
    assert chunks == expected and result.stdout.text == "" and result.stdout.total_bytes == len(expected)
    events = list(session.stream("seq 1 2000", stdout_cap=100_000, output="result"))
    assert not [e for e in events if isinstance(e, sandboxd.OutputChunk)]
    assert events[-1].stdout.text == expected
    # run() without a watcher asks for the result only, and gets it whole.
    assert session.run("seq 1 2000", stdout_cap=100_000).stdout.text == expected
    with pytest.raises(ValueError):
        session.stream("true", output="twice")


def test_timeout(session: sandboxd.Session) -> None:
    t0 = time.monotonic()
    r = session.run("sleep 60", timeout=1)
    elapsed = time.monotonic() - t0
    assert r.timed_out and not r.ok and r.exit_code != 0
    assert r.killed_by is sandboxd.KilledBy.PROCESS_GROUP_TERM
    assert elapsed < 20, elapsed
    assert r.notes and "timeout" in r.notes[0]
    assert r.started is not None and r.started.timeout == 1.0


def test_output_caps(session: sandboxd.Session) -> None:
    r = session.run("python3 -c \"print('a' * 5000 + 'END')\"", stdout_cap=100)
    out = r.stdout
    assert r.ok and out.truncated and out.total_bytes == 5004
    assert len(out.text) == 75 and len(out.tail) == 25 and out.tail.endswith("END\n")
    assert out.omitted_bytes == 5004 - 100
    assert "[... 4904 bytes omitted ...]" in str(out)
    assert any("cap" in n for n in r.notes)


def test_exit_code_and_env(session: sandboxd.Session) -> None:
    r = session.run("echo $FOO; exit 3", env={"FOO": "bar"}, cwd=".")
    assert r.exit_code == 3 and not r.ok and r.stdout.text == "bar\n" and not r.timed_out


def test_reset(session: sandboxd.Session) -> None:
    first = session.run("true").started
    assert first is not None
    fresh = session.reset()
    assert fresh.container_id and fresh.container_id != first.container_id


# --- auth and transport -----------------------------------------------------


def test_auth(service: Service, no_env_token: None) -> None:
    with sandboxd.connect(service.addr) as anonymous:
        e = refused(sandboxd.Unauthenticated, "UNAUTHENTICATED", anonymous.sessions)
        assert e.code == grpc.StatusCode.UNAUTHENTICATED and isinstance(e, sandboxd.AuthRefused)
    with sandboxd.connect(service.addr, token="wrong-token") as wrong:
        refused(sandboxd.Unauthenticated, "UNAUTHENTICATED", lambda: wrong.session())
        with pytest.raises(sandboxd.Unauthenticated):
            wrong.attach("x")
    with sandboxd.connect(service.addr, token=service.token) as right:
        assert isinstance(right.sessions(), list)


def test_session_tokens(service: Service, no_env_token: None, monkeypatch: pytest.MonkeyPatch) -> None:
    with service.client() as admin, admin.session() as a, admin.session() as b:
        assert a.token and a.token.startswith("sbxs_") and a.token != b.token
        a.create("mine.txt", "a's\n")
        b.create("theirs.txt", "b's\n")
        # Only CreateSession's reply carries the token.
        assert a.info.session_token == a.token and admin.session_info(a.id).session_token == ""
        with sandboxd.connect(service.addr, token=a.token) as holder:
            # Its own session: found, read, run; another's: not found, unchanged.
            own = holder.attach(a.id)
            assert own.read("mine.txt").content == "a's\n"
            assert own.run("cat mine.txt").stdout.text == "a's\n"
            refused(sandboxd.SessionNotFound, "SESSION_NOT_FOUND", lambda: holder.attach(b.id))
            theirs = sandboxd.Session(holder, a.info, close_on_exit=False)
            theirs.id = b.id
            refused(sandboxd.SessionNotFound, "SESSION_NOT_FOUND", lambda: theirs.read("theirs.txt"))
            refused(sandboxd.SessionNotFound, "SESSION_NOT_FOUND", lambda: theirs.run("rm theirs.txt"))
            refused(sandboxd.SessionNotFound, "SESSION_NOT_FOUND", theirs.close)
            assert host_bytes(b, "theirs.txt") == b"b's\n"
            assert [s.id for s in holder.sessions()] == [a.id]
            e = refused(sandboxd.NotPermitted, "NOT_PERMITTED", lambda: holder.session())
            assert isinstance(e, sandboxd.AuthRefused)
            refused(sandboxd.NotPermitted, "NOT_PERMITTED", holder.environments)
        # A session's calls carry its own token, whatever the client's.
        with sandboxd.connect(service.addr, token="not-the-token") as stranger:
            refused(sandboxd.Unauthenticated, "UNAUTHENTICATED", stranger.sessions)
            assert stranger.attach(a.id, token=a.token).read("mine.txt").content == "a's\n"
            monkeypatch.setenv("SANDBOXD_SESSION_TOKEN", a.token)
            assert stranger.attach(a.id).read("mine.txt").content == "a's\n"
            # Taken from the environment for the session SANDBOXD_SESSION names only.
            monkeypatch.setenv("SANDBOXD_SESSION", b.id)
            refused(sandboxd.Unauthenticated, "UNAUTHENTICATED", lambda: stranger.attach(a.id))
            monkeypatch.setenv("SANDBOXD_SESSION", a.id)
            assert stranger.attach(a.id).read("mine.txt").content == "a's\n"
        # The operator's token reaches both.
        monkeypatch.delenv("SANDBOXD_SESSION_TOKEN")
        assert {s.id for s in admin.sessions()} >= {a.id, b.id}
        assert admin.attach(b.id).read("theirs.txt").content == "b's\n"
    # A closed session's token admits nothing.
    with sandboxd.connect(service.addr, token=a.token) as late:
        refused(sandboxd.Unauthenticated, "UNAUTHENTICATED", late.sessions)


def test_token_and_addr_from_the_environment(service: Service, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SANDBOXD_ADDR", f"http://{service.addr}")
    monkeypatch.setenv("SANDBOXD_TOKEN", service.token)
    with sandboxd.connect() as sb, sb.session() as s:
        assert s.run("echo ok").stdout.text == "ok\n"


def test_transport_errors(service: Service, no_env_token: None) -> None:
    with sandboxd.connect("127.0.0.1:1", token="x") as nowhere:
        with pytest.raises(sandboxd.Unavailable) as info:
            nowhere.sessions()
    e = info.value
    assert e.reason is None and e.code == grpc.StatusCode.UNAVAILABLE and isinstance(e, sandboxd.TransportError)
    # A listener that never answers: the call waits for its deadline.
    with socket.socket() as mute:
        mute.bind(("127.0.0.1", 0))
        mute.listen(1)
        with sandboxd.connect("127.0.0.1:%d" % mute.getsockname()[1], token="x", timeout=0.5) as hurried:
            t0 = time.monotonic()
            with pytest.raises(sandboxd.DeadlineExceeded) as late:
                hurried.sessions()
            assert time.monotonic() - t0 < 10
    assert late.value.reason is None and late.value.code == grpc.StatusCode.DEADLINE_EXCEEDED


def test_addresses() -> None:
    assert _target("127.0.0.1:50051") == ("127.0.0.1:50051", False)
    assert _target("http://localhost:8080/") == ("localhost:8080", False)
    assert _target("https://sandboxd.example:443") == ("sandboxd.example:443", True)
    assert _target("https://sandboxd.example") == ("sandboxd.example:443", True)
    assert _target("https://[::1]:9000") == ("[::1]:9000", True)
    assert _target("unix:/run/sandboxd.sock") == ("unix:/run/sandboxd.sock", False)
    assert _target("unix:///run/sandboxd.sock") == ("unix:/run/sandboxd.sock", False)
    with pytest.raises(ValueError):
        _target("unix:relative.sock")
    with pytest.raises(ValueError):
        _target("ftp://host:1")


def test_sandbox_unavailable_when_docker_is_not() -> None:
    """A second service whose Docker is unreachable: commands fail, file tools work."""
    svc = start_service("-nodocker", "--docker-host", "unix:///nonexistent/docker.sock")
    try:
        with svc.client() as sb, sb.session() as s:
            assert s.info.sandbox_status
            s.create("a.txt", "x\n")
            e = refused(sandboxd.SandboxUnavailable, "SANDBOX_UNAVAILABLE", lambda: s.run("true"))
            assert e.code == grpc.StatusCode.UNAVAILABLE and isinstance(e, sandboxd.ServiceFault)
            assert s.read("a.txt").content == "x\n"
    finally:
        stop_service(svc)


def test_unix_socket(tmp_path: Path) -> None:
    sock = tmp_path / "sandboxd.sock"
    svc = start_service("-unix", listen=f"unix:{sock}", pool_size=0)
    try:
        with sandboxd.connect(f"unix://{sock}", token=svc.token) as sb, sb.session() as s:
            s.create("a.txt", "over a socket\n")
            assert s.read("a.txt").content == "over a socket\n"
    finally:
        stop_service(svc)


def _openssl(*args: str, cwd: Path) -> None:
    subprocess.run(["openssl", *args], cwd=cwd, check=True, capture_output=True)


def test_tls(tmp_path: Path, no_env_token: None) -> None:
    if shutil.which("openssl") is None:
        pytest.skip("openssl is needed to make a test certificate")
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes"]
    _openssl("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.pem", "-days", "1",
             "-subj", "/CN=sandboxd-pytest-ca", cwd=tmp_path)
    _openssl("req", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1", cwd=tmp_path)
    (tmp_path / "ext.cnf").write_text(
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth\n"
    )
    _openssl("x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey", "ca.key", "-CAcreateserial",
             "-out", "server.pem", "-days", "1", "-extfile", "ext.cnf", cwd=tmp_path)
    svc = start_service(
        "-tls",
        "--tls-cert", str(tmp_path / "server.pem"),
        "--tls-key", str(tmp_path / "server.key"),
        pool_size=0,
        ca_cert=tmp_path / "ca.pem",
    )
    try:
        assert svc.addr.startswith("https://127.0.0.1:")
        with sandboxd.connect(svc.addr, token=svc.token, ca_cert=tmp_path / "ca.pem") as sb, sb.session() as s:
            s.create("a.txt", "over TLS\n")
            assert s.read("a.txt").content == "over TLS\n"
        # Without the CA, the service's certificate is not trusted.
        with sandboxd.connect(svc.addr, token=svc.token) as untrusting:
            with pytest.raises(sandboxd.Unavailable):
                untrusting.sessions()
    finally:
        stop_service(svc)
