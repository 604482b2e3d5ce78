#!/usr/bin/env python3
"""A scripted coding-agent loop over sandboxd (no model): red, read, edit, green.

An agent is a loop: the model picks a tool call, the loop runs it and hands
back what came of it, a result or a refusal's message (written for a model),
until the model is done. Here the model's turns are scripted, so the loop
shows the wiring: tools are plain methods of a `sandboxd.Session`, and every
refusal is a `sandboxd.SandboxdError` whose `.reason` and `.message` go back
to the model as they are.

    pip install ./clients/python
    python examples/agent_loop.py --addr 127.0.0.1:50051 --token "$(cat /var/lib/sandboxd/sandboxd/token)"

Exits 0 only if the tests went red, then green after the edit.
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import Any, Callable

import sandboxd

TEST_CMD = "python3 -m unittest -v"

PROJECT = {
    "calc.py": "def add(a, b):\n    return a - b\n",
    "test_calc.py": (
        "import unittest\n"
        "from calc import add\n\n\n"
        "class AddTest(unittest.TestCase):\n"
        "    def test_add(self):\n"
        "        self.assertEqual(add(2, 3), 5)\n"
    ),
}


def observe(call: Callable[[], Any]) -> tuple[bool, Any, str]:
    """Runs one tool call; returns (succeeded, result, what the model would be told)."""
    try:
        result = call()
    except sandboxd.SandboxdError as e:
        return False, e, f"refused [{e.reason}]: {e.message}"
    if isinstance(result, sandboxd.CommandResult):
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        text = f"[{status} in {result.duration:.2f} s]\n{result.stdout}{result.stderr}"
    elif isinstance(result, sandboxd.ReadResult):
        lines = result.content.splitlines()
        text = "\n".join(f"{n:5}  {line}" for n, line in enumerate(lines, result.first_line))
        text += f"\n-- {result.message} (sha256 {result.sha256[:12]}...)"
    elif isinstance(result, sandboxd.EditResult):
        text = f"{result.message}\n{result.diff}"
    else:
        text = getattr(result, "message", "") or repr(result)
    return True, result, text


def show(turn: int, tool: str, told: str) -> None:
    print(f"--- turn {turn}: {tool}")
    print(told.rstrip())
    print()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--addr", default=os.environ.get("SANDBOXD_ADDR"), help="service address (default: $SANDBOXD_ADDR, else the service on this machine)")
    parser.add_argument("--token", default=os.environ.get("SANDBOXD_TOKEN"), help="bearer token (default: $SANDBOXD_TOKEN)")
    parser.add_argument("--ca-cert", default=os.environ.get("SANDBOXD_CA_CERT"), help="CA certificate (PEM) for https:// addresses")
    args = parser.parse_args()

    try:
        with sandboxd.connect(args.addr, token=args.token, ca_cert=args.ca_cert) as sb, sb.session() as s:
            print(f"session {s.id} over {s.workspace_path}\n")
            for path, content in PROJECT.items():
                s.create(path, content)

            # Turn 1: the model runs the tests.
            ok, red, told = observe(lambda: s.run(TEST_CMD, timeout=120))
            show(1, f"run {TEST_CMD!r}", told)
            went_red = ok and not red.ok

            # Turn 2: it reads the code under test.
            ok, read, told = observe(lambda: s.read("calc.py"))
            show(2, "read calc.py", told)
            if not ok:
                return 1

            # Turn 3: it fixes the bug with an exact-match edit, guarded by the
            # sha256 it read (a file changed meanwhile would be refused, unchanged).
            ok, _, told = observe(
                lambda: s.edit("calc.py", "return a - b", "return a + b", expected_sha256=read.sha256),
            )
            show(3, "edit calc.py", told)

            # Turn 4: it runs the tests again.
            ok, green, told = observe(lambda: s.run(TEST_CMD, timeout=120))
            show(4, f"run {TEST_CMD!r}", told)
            went_green = ok and green.ok

            report = s.report(planned=["calc.py"], verify=TEST_CMD)
            print("--- report")
            for w in report.files_written:
                before = w.sha256_before[:12] or "(new)"
                print(f"  wrote {w.path}: {before} -> {w.sha256_after[:12]} ({w.tool})")
            for c in report.commands:
                print(f"  ran {c.command!r}: exit {c.exit_code} in {c.duration:.2f} s")
            for d in report.denied:
                print(f"  refused {d.tool} [{d.reason}]")
            print(f"  planned and touched: {', '.join(report.planned_touched) or '-'}")
            print(f"  touched, not planned: {', '.join(report.unplanned) or '-'}")
            v = report.verification
            verified = v is not None and v.ran_after_last_write and v.passed
            if v is not None:
                print(f"  verification {v.command!r}: ran after the last write: {v.ran_after_last_write}, passed: {v.passed}")
    except sandboxd.SandboxdError as e:
        print(f"sandboxd: {e}", file=sys.stderr)
        return 1

    print()
    if went_red and went_green and verified:
        print("red -> green: the fix is verified")
        return 0
    print(f"expected red then green; got red={went_red} green={went_green} verified={verified}")
    return 1


if __name__ == "__main__":
    sys.exit(main())
