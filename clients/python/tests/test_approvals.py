"""Plans and approvals against a real service: an agent and an approver as two
clients of one service that takes an approver token.

The agent works in a session it reaches with the session's own token; the
approver holds the approver token and decides from another thread, as a
person at `sandboxd approvals` would.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Iterator, Optional

import pytest

import sandboxd

from service import Service, start_service, stop_service

#: Longest a test waits for an item to show up for the approver.
SHOW_UP = 20.0
STEPS = [("Make add() add", ["calc.py"]), {"description": "Cover it with a test", "files": ["tests/test_x.py"]}]


@pytest.fixture(scope="module")
def svc() -> Iterator[Service]:
    """A service of its own, with an approver token and a short approval timeout
    (a test that goes wrong fails in seconds, not in ten minutes)."""
    service = start_service("-approvals", "--approval-timeout", "30", pool_size=0, approver=True)
    try:
        yield service
    finally:
        stop_service(service)


@pytest.fixture(scope="module")
def operator(svc: Service) -> Iterator[sandboxd.Client]:
    with svc.client() as c:
        yield c


@pytest.fixture(scope="module")
def approver(svc: Service) -> Iterator[sandboxd.Client]:
    with svc.approver_client() as c:
        c.approvals()  # an approver is present from now on
        yield c


def agent_session(svc: Service, operator: sandboxd.Client, **kw: object) -> tuple[sandboxd.Client, sandboxd.Session]:
    """A session made by the operator, and a client of the agent holding its token alone."""
    made = operator.session(**kw)  # type: ignore[arg-type]
    agent = sandboxd.connect(svc.addr, token=made.token)
    return agent, agent.attach(made.id, token=made.token, close_on_exit=True)


class Approver(threading.Thread):
    """Waits for the first item of ``session_id`` and decides it with ``decide``."""

    def __init__(
        self,
        client: sandboxd.Client,
        session_id: str,
        decide: Callable[[sandboxd.Client, sandboxd.PendingApproval], object],
    ) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.session_id = session_id
        self.decide = decide
        self.seen: Optional[sandboxd.PendingApproval] = None
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        try:
            deadline = time.monotonic() + SHOW_UP
            while time.monotonic() < deadline:
                for item in self.client.approvals(wait=2):
                    if item.session_id == self.session_id:
                        self.seen = item
                        self.decide(self.client, item)
                        return
                time.sleep(0.05)  # only others' items wait: the list answers at once
            raise AssertionError(f"nothing of session {self.session_id} showed up in {SHOW_UP} s")
        except BaseException as e:  # handed to the test's thread
            self.error = e

    def finish(self) -> sandboxd.PendingApproval:
        self.join(SHOW_UP + 10)
        if self.error is not None:
            raise self.error
        assert self.seen is not None
        return self.seen


def test_plan_mode_refuses_a_write(svc: Service, operator: sandboxd.Client) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True)
    with agent, s:
        with pytest.raises(sandboxd.PolicyDenied):
            s.create("calc.py", "x = 1\n")
        assert not (Path(s.workspace_path) / "calc.py").exists()


def test_a_plan_without_verification_is_invalid(svc: Service, operator: sandboxd.Client) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True)
    with agent, s:
        with pytest.raises(sandboxd.InvalidPlan) as e:
            s.submit_plan("Make add() add", STEPS, verification="")
        assert isinstance(e.value, sandboxd.InvalidRequest)
        assert "verification" in e.value.message
        assert s.refresh().plan is None


def test_an_approved_plan_grants_its_files_and_withholds_a_denied_one(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True, deny_writes=["tests/**"])
    with agent, s:
        person = Approver(approver, s.id, lambda c, item: c.approve(item, "go ahead", decided_by="alice"))
        person.start()
        pending: list[sandboxd.PlanPending] = []
        r = s.submit_plan(
            "Make add() add",
            STEPS,
            verification="python3 -m unittest",
            risks=["callers that rely on subtraction"],
            on_pending=pending.append,
        )
        seen = person.finish()

        # What the approver saw: the plan, with the withheld file and its rule.
        assert seen.kind == "plan" and seen.plan is not None
        assert seen.plan.goal == "Make add() add"
        assert [st.files for st in seen.plan.steps] == [("calc.py",), ("tests/test_x.py",)]
        assert seen.plan.verification == "python3 -m unittest"
        assert seen.plan.risks == ("callers that rely on subtraction",)
        assert [w.path for w in seen.withheld] == ["tests/test_x.py"]
        assert "tests/**" in seen.withheld[0].rule

        # What the agent got.
        assert len(pending) == 1 and pending[0].approval_id == seen.approval_id
        assert r.approved and r and r.approval_id == seen.approval_id
        assert r.granted == ("calc.py",)
        assert [path for path, _rule in r.withheld] == ["tests/test_x.py"]
        assert "tests/**" in r.withheld[0].rule
        assert r.decision is not None and "alice" in r.decision.decided_by
        assert r.decision.note == "go ahead"
        assert r.message

        # Writes inside the plan work; outside it, and the withheld file, are refused.
        s.create("calc.py", "def add(a, b):\n    return a + b\n")
        with pytest.raises(sandboxd.PolicyDenied):
            s.create("other.py", "x = 1\n")
        with pytest.raises(sandboxd.PolicyDenied):
            s.create("tests/test_x.py", "x = 1\n")
        assert (Path(s.workspace_path) / "calc.py").exists()
        assert not (Path(s.workspace_path) / "other.py").exists()

        info = s.refresh()
        assert info.plan is not None and info.plan.approval_id == seen.approval_id
        assert info.plan.granted == ("calc.py",)
        assert not info.policy.plan_mode
        report = s.report()
        assert report.plan is not None and report.plan.approval_id == seen.approval_id
        assert report.planned_touched == ("calc.py",)
        assert report.changed_unplanned == () and report.changes_unchecked == ""
        assert report.verification is not None
        assert report.verification.command == "python3 -m unittest"


def test_a_rejected_plan_is_a_result_and_grants_nothing(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True)
    with agent, s:
        person = Approver(approver, s.id, lambda c, item: c.reject(item.approval_id, "split it in two"))
        person.start()
        r = s.submit_plan("Make add() add", STEPS[:1], verification="python3 -m unittest")
        person.finish()
        assert not r.approved and not r
        assert r.reason == "split it in two" and not r.timed_out
        assert r.granted == () and r.plan is None
        assert r.message
        with pytest.raises(sandboxd.PolicyDenied):
            s.create("calc.py", "x = 1\n")


def test_a_plan_withdrawn_by_the_agent_no_longer_waits(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True)

    class GiveUp(Exception):
        pass

    def give_up(p: sandboxd.PlanPending) -> None:
        assert any(item.approval_id == p.approval_id for item in approver.approvals())
        raise GiveUp(p.approval_id)

    with agent, s:
        with pytest.raises(GiveUp) as e:
            s.submit_plan("Make add() add", STEPS[:1], verification="true", on_pending=give_up)
        approval_id = str(e.value)
        deadline = time.monotonic() + 10
        while any(item.approval_id == approval_id for item in approver.approvals()):
            assert time.monotonic() < deadline, "the withdrawn plan still waits"
            time.sleep(0.1)
        with pytest.raises(sandboxd.ApprovalNotFound):
            approver.approve(approval_id)


def test_an_ask_rule_holds_a_write_until_decided(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, ask_writes=["src/**"])
    with agent, s:
        # Rejected: a result with `rejected` set, and nothing written.
        person = Approver(approver, s.id, lambda c, item: c.reject(item, "not there"))
        person.start()
        r = s.create("src/a.py", "x = 1\n")
        seen = person.finish()
        assert seen.kind == "call" and seen.call is not None
        assert seen.call.path == "src/a.py"
        assert "src/**" in seen.call.rule
        assert r.rejected is not None and r.rejected.reason == "not there"
        assert not r.rejected.timed_out and r.rejected.approval_id == seen.approval_id
        assert not (Path(s.workspace_path) / "src" / "a.py").exists()

        # Approved: the write happens.
        person = Approver(approver, s.id, lambda c, item: c.approve(item))
        person.start()
        r = s.create("src/a.py", "x = 1\n")
        person.finish()
        assert r.rejected is None and r.sha256
        assert (Path(s.workspace_path) / "src" / "a.py").read_text() == "x = 1\n"

        # A write no ask rule matches does not wait.
        assert s.create("b.py", "y = 2\n").rejected is None


def test_an_unattended_session_gets_approval_unavailable_at_once(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True, unattended=True, ask_writes=["src/**"])
    with agent, s:
        assert s.info.unattended
        began = time.monotonic()
        with pytest.raises(sandboxd.ApprovalUnavailable) as e:
            s.submit_plan("Make add() add", STEPS[:1], verification="true")
        assert isinstance(e.value, sandboxd.ApprovalRefused)
        assert e.value.message
        assert time.monotonic() - began < 5


def test_an_unattended_ask_rule_call_is_unavailable_at_once(svc: Service, operator: sandboxd.Client) -> None:
    agent, s = agent_session(svc, operator, unattended=True, ask_writes=["src/**"])
    with agent, s:
        with pytest.raises(sandboxd.ApprovalUnavailable):
            s.create("src/a.py", "x = 1\n")
        assert not (Path(s.workspace_path) / "src" / "a.py").exists()


def test_a_session_token_cannot_approve_and_the_approver_token_cannot_work(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, plan_mode=True)
    with agent, s:
        with pytest.raises(sandboxd.NotPermitted):
            agent.approvals()
        with pytest.raises(sandboxd.NotPermitted):
            agent.approve("0000-0")
        with pytest.raises(sandboxd.NotPermitted):
            approver.session()
        with pytest.raises(sandboxd.ApprovalNotFound):
            approver.approve("0000-0")
        with pytest.raises(sandboxd.ApprovalNotFound):
            operator.reject("0000-0", "no such thing")


def test_an_ask_rule_holds_a_command_and_a_rejected_one_never_runs(
    svc: Service, operator: sandboxd.Client, approver: sandboxd.Client
) -> None:
    agent, s = agent_session(svc, operator, ask_commands=["deploy"])
    with agent, s:
        person = Approver(approver, s.id, lambda c, item: c.reject(item, "no deploys today"))
        person.start()
        r = s.run("echo deploy > deployed.txt")
        seen = person.finish()
        assert seen.call is not None and seen.call.tool == "RunCommand"
        assert seen.call.command == "echo deploy > deployed.txt"
        assert r.rejected is not None and r.rejected.reason == "no deploys today"
        assert not r.ok and r.exit_code == -1
        assert not (Path(s.workspace_path) / "deployed.txt").exists()
