"""Screenshots of the web view at 1280x800, for docs/web/: the login page,
the sessions (one of them running a command), a session with a refused
edit among its calls and its changes tab, a command's page with its output
arriving, and the health page. Each page is checked for what it should show before it is
taken.

By hand, as root with Docker, in a virtualenv holding the client and the
test tools (see docs/web/README.md):

    SANDBOXD_BIN=target/debug/sandboxd python tests/browser/screenshots.py [OUT_DIR]

OUT_DIR defaults to docs/web. tests/browser/test_screenshots.py takes the
same pictures into a temporary directory on every run."""

from __future__ import annotations

import contextlib
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any

import sandboxd
from devtools import Browser, Page
from web_harness import ROOT, Background, WebService, login, running_link

#: The pictures, in the order they are taken.
NAMES = ("login", "sessions", "session", "changes", "command", "health")

#: A command that runs for a while, printing as it goes.
TESTS = (
    "for i in $(seq 1 24); do echo \"test suite::case_$i ... ok\"; sleep 0.5; done; "
    "echo 'test result: ok. 24 passed; 0 failed'"
)

APP = """import sys


def greet(name):
    return "Hello, " + name


if __name__ == "__main__":
    print(greet(sys.argv[1] if len(sys.argv) > 1 else "world"))
"""


def _shot(page: Page, out: Path, name: str) -> Path:
    path = out / f"{name}.png"
    page.pump(0.3)  # let the page settle (fonts, the first refresh)
    page.screenshot(path)
    return path


def take(web: WebService, page: Page, client: Any, out: Path) -> list[Path]:
    """Sets the scene on `web` with `client`, and photographs it with
    `page` (logged in or not) into `out`; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    shots: list[Path] = []
    page.navigate(f"{web.web}/login")
    assert page.evaluate("document.getElementById('token') !== null"), "no login form"
    shots.append(_shot(page, out, "login"))
    login(page, web.web, web.token)

    # A project lent to a session: its changes are a diff against it.
    project = Path(tempfile.mkdtemp(prefix="project-", dir=web.service.roots))
    (project / "app.py").write_text(APP)
    try:
        _scene(web, page, client, project, out, shots)
    finally:
        shutil.rmtree(project, ignore_errors=True)
    return shots


def _scene(web: WebService, page: Page, client: Any, project: Path, out: Path, shots: list[Path]) -> None:
    with client.session() as busy, client.session(project) as worked, client.session() as quiet:
        quiet.run("uname -a")
        worked.run("ls -la")
        worked.create("NOTES.md", "Greets whoever is named on the command line.\n")
        worked.edit("app.py", '"Hello, " + name', 'f"Hello, {name}!"')
        # Two refusals, which the picture shows highlighted.
        with contextlib.suppress(sandboxd.OldStringNotFound):
            worked.edit("app.py", "def welcome(name):", "def welcome(name: str):")
        with contextlib.suppress(sandboxd.FileNotFound):
            worked.edit("README.md", "Usage", "How to use")
        worked.run("grep -n greet app.py")
        worked.run("test -f README.md")
        run = Background(busy.run, TESTS, timeout=120)
        try:
            command = running_link(page, web.web, busy.id)

            page.navigate(f"{web.web}/")
            page.wait_for("document.querySelector('#sessions .status-running') !== null", 15, "a running session")
            for s in (busy, worked, quiet):
                assert s.id in page.text("#sessions")
            shots.append(_shot(page, out, "sessions"))

            page.navigate(f"{web.web}/sessions/{worked.id}")
            assert page.evaluate("document.querySelectorAll('tr.refused').length") == 2, page.text("main")
            shots.append(_shot(page, out, "session"))

            page.navigate(f"{web.web}/sessions/{worked.id}/changes")
            marked = "['add', 'del'].map(c => document.querySelectorAll('pre.diff span.' + c).length)"
            assert all(page.evaluate(marked)), page.text("main")
            shots.append(_shot(page, out, "changes"))

            page.navigate(f"{web.web}{command}")
            page.wait_for(
                "document.getElementById('stdout').textContent.split('\\n').length > 8",
                30,
                "a few lines of output",
            )
            assert page.text("#ended") == "Running…"
            shots.append(_shot(page, out, "command"))

            page.navigate(f"{web.web}/health")
            assert "Sessions open" in page.text("main")
            shots.append(_shot(page, out, "health"))
        finally:
            busy.close()
            with contextlib.suppress(Exception):
                run.join()  # the session was closed under it


def main() -> None:
    out = Path(sys.argv[1]) if len(sys.argv) > 1 else ROOT / "docs" / "web"
    import web_harness

    web = web_harness.start()
    try:
        with Browser() as browser, web.client() as client:
            assert browser.page is not None
            for path in take(web, browser.page, client, out):
                print(path)
    finally:
        web.stop()


if __name__ == "__main__":
    main()
