"""A sandboxd service with its web view on, for a real browser to look at:
started from $SANDBOXD_BIN by the Python client's test helpers (one place
starts a service), with a private state directory and no warm pool."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import threading
import time
import urllib.error
import urllib.request
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from devtools import Page

ROOT = Path(__file__).resolve().parents[2]


def service_helpers() -> Any:
    """clients/python/tests/service.py, loaded as a module."""
    name = "sandboxd_service"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "clients" / "python" / "tests" / "service.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up by name.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass
class WebService:
    """A running service and the address of its web view."""

    service: Any
    #: "http://127.0.0.1:PORT", no trailing slash.
    web: str

    @property
    def token(self) -> str:
        return self.service.token

    def client(self) -> Any:
        return self.service.client()

    def stop(self) -> None:
        service_helpers().stop_service(self.service)


def start(metrics: bool = True) -> WebService:
    """`sandboxd serve` with `--web-listen` on a free loopback port (and
    `--metrics-listen`, so the health page has counters to show); returns
    once the web view answers."""
    helpers = service_helpers()
    # The service picks the ports (one found free beforehand could be taken
    # before it binds); its log names the web view's.
    extra = ["--web-listen", "127.0.0.1:0"]
    if metrics:
        extra += ["--metrics-listen", "127.0.0.1:0"]
    service = helpers.start_service(f"-browser-{uuid.uuid4().hex[:8]}", *extra, pool_size=0)
    logged = re.search(r"web view at .*\baddr=(\S+)", service.log.read_text(errors="replace"))
    if logged is None:
        tail = service.log_tail()
        helpers.stop_service(service)
        raise RuntimeError(f"the service logged no web view address:\n{tail}")
    web = WebService(service, f"http://{logged.group(1)}")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    deadline = time.monotonic() + 30
    while True:
        try:
            with opener.open(f"{web.web}/login", timeout=5) as reply:
                if reply.status == 200:
                    return web
        except (urllib.error.URLError, OSError):
            pass
        if time.monotonic() > deadline:
            tail = service.log_tail()
            web.stop()
            raise RuntimeError(f"the web view on {web.web} did not answer:\n{tail}")
        time.sleep(0.2)


def login(page: Page, web: str, token: str) -> None:
    """Logs the browser in as a person would: the token typed into the
    login form, the form submitted (the cookie is HttpOnly: only the
    service's answer can set it)."""
    page.navigate(f"{web}/login")
    page.evaluate(
        "window.__loaded = false;"
        f"document.getElementById('token').value = {json.dumps(token)};"
        "document.querySelector('form.login button[type=submit]').click()"
    )
    page.wait_loaded()
    path = page.evaluate("location.pathname")
    assert path == "/", f"the login led to {path}, not the sessions page: {page.text('main')}"


class Background:
    """A call run in a thread (a command that takes a while), its result or
    error kept for the end."""

    def __init__(self, target: Any, *args: Any, **kwargs: Any) -> None:
        self.result: Any = None
        self.error: Optional[BaseException] = None

        def run() -> None:
            try:
                self.result = target(*args, **kwargs)
            except BaseException as e:  # kept for join()
                self.error = e

        self.thread = threading.Thread(target=run, daemon=True)
        self.thread.start()

    def join(self, timeout: float = 60.0) -> Any:
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "the call did not finish"
        if self.error is not None:
            raise self.error
        return self.result


def running_link(page: Page, web: str, session: str, timeout: float = 30.0) -> str:
    """The link to the session's running command, from the "Running" list
    on its page (reloaded until the command shows up there)."""
    deadline = time.monotonic() + timeout
    find = """(a => a && a.getAttribute('href'))(document.querySelector('main ul li a[href*="/commands/"]'))"""
    while True:
        page.navigate(f"{web}/sessions/{session}")
        href = page.evaluate(find)
        if href:
            return href
        assert time.monotonic() < deadline, f"no running command is listed: {page.text('main')}"
        page.pump(0.3)
