"""Fixtures of the `sandboxd mcp` tests: a directory to lend, and a
running `sandboxd serve` for the `--addr` mode."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from mcp_harness import service_fixtures


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A project directory to lend to a session: private to its owner, as
    the service demands of a directory it lends."""
    tmp_path.chmod(0o700)
    ws = tmp_path / "project"
    ws.mkdir()
    return ws


@pytest.fixture(scope="session")
def remote_service() -> Iterator[object]:
    """A running `sandboxd serve` with a token, for `sandboxd mcp --addr`."""
    fixtures = service_fixtures()
    svc = fixtures.start_service("-mcp")
    try:
        yield svc
    finally:
        fixtures.stop_service(svc)
