"""Fixtures: one real sandboxd service for the whole run (see `service`),
a client of it, and a fresh session per test."""

from __future__ import annotations

from typing import Iterator

import pytest
from service import Service, start_service, stop_service

import sandboxd


@pytest.fixture(scope="session")
def service() -> Iterator[Service]:
    """The shared sandboxd service."""
    svc = start_service("")
    try:
        yield svc
    finally:
        stop_service(svc)


@pytest.fixture(scope="session")
def sb(service: Service) -> Iterator[sandboxd.Client]:
    """A client of the shared service, with the right token."""
    with service.client() as client:
        yield client


@pytest.fixture
def session(sb: sandboxd.Client) -> Iterator[sandboxd.Session]:
    """A fresh session, closed after the test."""
    with sb.session() as s:
        yield s


@pytest.fixture
def no_env_token(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests choose their tokens themselves."""
    for var in ("SANDBOXD_TOKEN", "SANDBOXD_ADDR", "SANDBOXD_CA_CERT"):
        monkeypatch.delenv(var, raising=False)

