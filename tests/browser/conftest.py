"""Fixtures of the browser tests: one service with its web view, one
headless Chromium logged in to it, and a client to make sessions with."""

from __future__ import annotations

from typing import Any, Iterator

import pytest
import web_harness
from devtools import Browser, Page


@pytest.fixture(scope="session")
def served() -> Iterator[web_harness.WebService]:
    """The service under test (stopped at the end: its containers go)."""
    svc = web_harness.start()
    try:
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def browser() -> Iterator[Browser]:
    """Chromium (installed with apt-get when missing), ended by its pid."""
    b = Browser()
    try:
        b.start()
    except BaseException:
        b.stop()
        raise
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture(scope="session")
def logged_in(browser: Browser, served: web_harness.WebService) -> Page:
    """The browser's page, logged in with the service's token."""
    assert browser.page is not None
    web_harness.login(browser.page, served.web, served.token)
    return browser.page


@pytest.fixture
def page(logged_in: Page) -> Iterator[Page]:
    """The logged-in page, its events of earlier tests forgotten; a test
    fails if a page it saw threw an uncaught error, or had something
    refused by its security policy (an inline style or script, say)."""
    logged_in.clear()
    yield logged_in
    logged_in.pump(0.2)
    assert not logged_in.exceptions, f"the pages threw: {logged_in.exceptions}"
    assert not logged_in.refused, f"the security policy refused: {logged_in.refused}"


@pytest.fixture
def client(served: web_harness.WebService) -> Iterator[Any]:
    with served.client() as c:
        yield c
