"""Plans and approvals through `sandboxd mcp`, checked with the official MCP
Python SDK: a client that declares elicitation is the person who approves
the session's plans (its callback answers the form); one that does not gets
APPROVAL_UNAVAILABLE at once, never a wait."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import anyio
from mcp import ClientSession, types
from mcp.client.session import ClientRequestContext
from mcp_harness import mcp_session

X = "def add(a, b):\n    return a - b\n"
TEST_X = (
    "import sys\nimport unittest\n\nsys.path.insert(0, 'src')\nfrom x import add\n\n\n"
    "class AddTest(unittest.TestCase):\n"
    "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n\n\n"
    'if __name__ == "__main__":\n    unittest.main()\n'
)
VERIFY = "python3 tests/test_x.py"

PLAN: dict[str, Any] = {
    "goal": "make add() add instead of subtract",
    "steps": [
        {"description": "return a + b in add()", "files": ["src/x.py"]},
        {"description": "cover negative numbers", "files": ["tests/test_x.py"]},
    ],
    "verification": VERIFY,
    "risks": ["callers that relied on the subtraction"],
}


def project(ws: Path) -> None:
    (ws / "src").mkdir()
    (ws / "tests").mkdir()
    (ws / "src" / "x.py").write_text(X)
    (ws / "tests" / "test_x.py").write_text(TEST_X)


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


class Person:
    """The person at the client: answers every form the same way and keeps
    what it was asked."""

    def __init__(self, action: str, content: dict[str, Any] | None = None) -> None:
        self.action = action
        self.content = content
        self.asked: list[types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams), params
        self.asked.append(params)
        return types.ElicitResult(action=self.action, content=self.content)


def run(test: Any) -> None:
    anyio.run(test)


def test_a_plan_approved_at_the_client_lifts_plan_mode_for_its_files_only(workspace: Path) -> None:
    project(workspace)
    person = Person("accept", {"approve": True, "note": "go ahead, keep it small"})

    async def main() -> None:
        async with mcp_session(
            "--workspace",
            str(workspace),
            "--plan-mode",
            "--deny-write",
            "tests/**",
            elicitation_callback=person,
        ) as s:
            # Plan mode: reading works, writing does not.
            await call(s, "read_file", path="src/x.py")
            msg = await refused(s, "edit_file", "POLICY_DENIED", path="src/x.py", old_string="a - b", new_string="a + b")
            assert "plan mode" in msg, msg

            # A plan without its verification is refused, naming it; the
            # person is not asked.
            msg = await refused(s, "submit_plan", "INVALID_PLAN", **{**PLAN, "verification": ""})
            assert "verification" in msg, msg
            assert person.asked == []

            approved = await call(s, "submit_plan", **PLAN)
            out = approved.structured_content
            assert out["outcome"] == "approved", text(approved)
            assert out["granted"] == ["src/x.py"], out
            assert [w["path"] for w in out["withheld"]] == ["tests/test_x.py"], out
            assert "tests/**" in out["withheld"][0]["rule"], out
            assert out["note"] == "go ahead, keep it small", out
            shown = text(approved)
            assert shown.startswith("Plan approved by "), shown
            assert "go ahead, keep it small" in shown and "tests/test_x.py" in shown, shown

            # The person saw the whole plan, and what a rule withholds.
            assert len(person.asked) == 1, person.asked
            asked = person.asked[0]
            for part in (PLAN["goal"], "src/x.py", "tests/test_x.py", VERIFY, PLAN["risks"][0]):
                assert part in asked.message, asked.message
            withheld = asked.message.split("Withheld", 1)[1]
            assert "tests/test_x.py" in withheld and "tests/**" in withheld, asked.message
            schema = asked.requested_schema
            assert schema["properties"]["approve"]["type"] == "boolean", schema
            assert schema["properties"]["note"]["type"] == "string", schema

            # The planned file may be written now; no other, nor the
            # withheld one.
            await call(s, "edit_file", path="src/x.py", old_string="a - b", new_string="a + b")
            msg = await refused(s, "create_file", "POLICY_DENIED", path="other.py", content="x = 1\n")
            assert "plan" in msg, msg
            await refused(s, "edit_file", "POLICY_DENIED", path="tests/test_x.py", old_string="5", new_string="6")

            green = await call(s, "run_command", command=VERIFY)
            assert green.structured_content["exit_code"] == 0, text(green)

            # The report reconciles against the approved plan by itself.
            report = text(await call(s, "session_report"))
            assert "src/x.py" in report, report
            assert "ran after the last write and passed" in report, report

    run(main)
    assert (workspace / "src" / "x.py").read_text() == X.replace("a - b", "a + b")
    assert (workspace / "tests" / "test_x.py").read_text() == TEST_X
    assert not (workspace / "other.py").exists()


def test_a_plan_rejected_at_the_client_says_so_with_the_note_and_grants_nothing(workspace: Path) -> None:
    project(workspace)
    person = Person("accept", {"approve": False, "note": "split it in two plans"})

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace), "--plan-mode", elicitation_callback=person) as s:
            rejected = await call(s, "submit_plan", **PLAN)
            shown = text(rejected)
            assert "not executed" in shown, shown
            assert "rejected by " in shown and ": split it in two plans" in shown, shown
            out = rejected.structured_content
            assert out["outcome"] == "rejected", out
            assert out["rejected"]["reason"] == "split it in two plans", out
            assert len(person.asked) == 1
            # Still in plan mode.
            await refused(s, "edit_file", "POLICY_DENIED", path="src/x.py", old_string="a - b", new_string="a + b")

        # Declining the form is a rejection too, never an approval.
        declining = Person("decline")
        async with mcp_session("--workspace", str(workspace), "--plan-mode", elicitation_callback=declining) as s:
            shown = text(await call(s, "submit_plan", **PLAN))
            assert "not executed" in shown and "declined" in shown, shown
            assert len(declining.asked) == 1

    run(main)
    assert (workspace / "src" / "x.py").read_text() == X


def test_a_client_without_elicitation_gets_approval_unavailable_at_once(workspace: Path) -> None:
    project(workspace)

    async def main() -> None:
        async with mcp_session("--workspace", str(workspace), "--plan-mode") as s:
            await call(s, "list_dir")
            started = time.monotonic()
            msg = await refused(s, "submit_plan", "APPROVAL_UNAVAILABLE", **PLAN)
            assert time.monotonic() - started < 10
            assert "safest option" in msg and "assumption" in msg, msg
            await refused(s, "edit_file", "POLICY_DENIED", path="src/x.py", old_string="a - b", new_string="a + b")

    run(main)
    assert (workspace / "src" / "x.py").read_text() == X


class Judge:
    """A person who approves held writes but not to src/y.py, and no
    command."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def __call__(
        self, context: ClientRequestContext, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        assert isinstance(params, types.ElicitRequestFormParams), params
        self.asked.append(params.message)
        if "Command:" in params.message:
            return types.ElicitResult(action="accept", content={"approve": False, "note": "no deletions here"})
        if "src/y.py" in params.message:
            return types.ElicitResult(action="decline")
        return types.ElicitResult(action="accept", content={"approve": True})


def test_calls_an_ask_rule_holds_are_put_to_the_person_and_a_rejection_is_not_executed(
    workspace: Path,
) -> None:
    project(workspace)
    judge = Judge()
    flags = ("--workspace", str(workspace), "--ask-write", "src/**", "--ask-command", "^rm ")

    async def main() -> None:
        async with mcp_session(*flags, elicitation_callback=judge) as s:
            await call(s, "edit_file", path="src/x.py", old_string="a - b", new_string="a + b")
            assert len(judge.asked) == 1 and "src/x.py" in judge.asked[0], judge.asked
            assert "src/**" in judge.asked[0], judge.asked

            made = await s.call_tool("create_file", {"path": "src/y.py", "content": "y = 1\n"})
            assert made.is_error, text(made)
            assert text(made).startswith("not executed: create_file of src/y.py was rejected by "), text(made)
            assert "declined" in text(made), text(made)

            ran = await s.call_tool("run_command", {"command": "rm -f src/x.py"})
            assert ran.is_error, text(ran)
            shown = text(ran)
            assert shown.startswith("not executed: run_command of `rm -f src/x.py` was rejected by "), shown
            assert ": no deletions here" in shown, shown
            assert ran.structured_content["rejected"]["reason"] == "no deletions here"

            # What no rule holds is not put to the person.
            await call(s, "create_file", path="notes.txt", content="n\n")
            assert len(judge.asked) == 3, judge.asked

        # Without a person at the client, a held call is refused at once.
        async with mcp_session(*flags) as s:
            await call(s, "list_dir")
            started = time.monotonic()
            await refused(s, "edit_file", "APPROVAL_UNAVAILABLE", path="src/x.py", old_string="a + b", new_string="a")
            assert time.monotonic() - started < 10

    run(main)
    assert (workspace / "src" / "x.py").read_text() == X.replace("a - b", "a + b")
    assert not (workspace / "src" / "y.py").exists()
    assert (workspace / "notes.txt").read_text() == "n\n"


def test_over_addr_the_operators_token_lets_the_person_at_the_client_approve(
    remote_service: Any,
) -> None:
    addr = f"http://{remote_service.addr}"
    person = Person("accept", {"approve": True, "note": "ok"})
    plan = {**PLAN, "steps": [{"description": "write the note", "files": ["note.txt"]}]}

    async def main() -> None:
        env = {"SANDBOXD_TOKEN": remote_service.token}
        async with mcp_session("--addr", addr, "--plan-mode", env=env, elicitation_callback=person) as s:
            await refused(s, "create_file", "POLICY_DENIED", path="note.txt", content="hi\n")
            approved = await call(s, "submit_plan", **plan)
            assert approved.structured_content["granted"] == ["note.txt"], text(approved)
            assert len(person.asked) == 1
            await call(s, "create_file", path="note.txt", content="hi\n")

    run(main)


def test_a_held_call_the_model_cancels_takes_its_form_off_the_screen(workspace: Path) -> None:
    """The model gives up on a call an ask rule holds: the service withdraws
    it, and the bridge cancels the form it put to the person, so no answer
    is given to a question nobody asks any more."""
    project(workspace)
    seen: dict[str, anyio.Event] = {"asked": anyio.Event(), "cancelled": anyio.Event()}

    async def person(context: ClientRequestContext, params: types.ElicitRequestParams) -> types.ElicitResult:
        seen["asked"].set()
        try:
            await anyio.sleep(300)
        except anyio.get_cancelled_exc_class():
            seen["cancelled"].set()
            raise
        return types.ElicitResult(action="accept", content={"approve": True})

    async def main() -> None:
        flags = ("--workspace", str(workspace), "--ask-write", "src/**")
        async with mcp_session(*flags, elicitation_callback=person) as s:
            async with anyio.create_task_group() as tg:

                async def held() -> None:
                    await s.call_tool("create_file", {"path": "src/y.py", "content": "y = 1\n"})

                tg.start_soon(held)
                with anyio.fail_after(60):
                    await seen["asked"].wait()
                # The model cancels its call (the SDK sends notifications/cancelled).
                tg.cancel_scope.cancel()
            with anyio.fail_after(30):
                await seen["cancelled"].wait()
            # The session goes on.
            await call(s, "list_dir")

    run(main)
    assert not (workspace / "src" / "y.py").exists()
