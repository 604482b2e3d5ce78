"""examples/agent_loop.py runs red -> green against the test service."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from service import Service

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "agent_loop.py"


def test_agent_loop_example(service: Service) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXD_")}
    env.update(SANDBOXD_ADDR=service.addr, SANDBOXD_TOKEN=service.token)
    done = subprocess.run(
        [sys.executable, str(EXAMPLE)], env=env, capture_output=True, text=True, timeout=300
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out
    assert "red -> green" in done.stdout
    assert "FAILED" in done.stdout and "OK" in done.stdout


def test_agent_loop_example_flags_and_failure(service: Service) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SANDBOXD_")}
    done = subprocess.run(
        [sys.executable, str(EXAMPLE), "--addr", service.addr, "--token", "wrong"],
        env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 1
    assert "UNAUTHENTICATED" in done.stderr
