"""A real headless Chromium, driven over the DevTools protocol (CDP) with
nothing but a websocket: Debian's `chromium` package is installed when it
is missing, started with its own profile in a temporary directory, and
stopped by its pid. No browser is downloaded from anywhere else."""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Optional

from websockets.sync.client import ClientConnection, connect

#: The viewport every page is seen (and photographed) at.
WIDTH, HEIGHT = 1280, 800
#: How long the browser may take to start.
START_TIMEOUT = 60.0


class CdpError(Exception):
    """The browser answered a command with an error."""


def ensure_chromium() -> str:
    """The path of Debian's chromium, installed with apt-get when missing."""
    found = shutil.which("chromium")
    if found:
        return found
    if os.geteuid() != 0:
        raise RuntimeError("chromium is missing and only root may install it: apt-get install chromium")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    install = ["apt-get", "install", "-y", "-qq", "--no-install-recommends", "chromium"]
    if subprocess.run(install, env=env, capture_output=True).returncode != 0:
        # The package lists may be missing or stale: refresh them once.
        subprocess.run(["apt-get", "update", "-qq"], env=env, capture_output=True)
        done = subprocess.run(install, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"apt-get install chromium failed:\n{done.stdout}\n{done.stderr}")
    found = shutil.which("chromium")
    if not found:
        raise RuntimeError("chromium was installed but is not on PATH")
    return found


def _get_json(url: str) -> Any:
    # Loopback only: no proxy from the environment may stand between.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=10) as reply:
        return json.load(reply)


class Browser:
    """A headless Chromium of our own, and one page (tab) in it."""

    def __init__(self) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="sandboxd-browser-"))
        self.log = self.profile / "chromium.log"
        self.proc: Optional[subprocess.Popen] = None
        self.page: Optional[Page] = None

    def start(self) -> "Browser":
        chromium = ensure_chromium()
        args = [
            chromium,
            "--headless=new",
            "--no-sandbox",
            "--remote-debugging-port=0",
            f"--user-data-dir={self.profile / 'profile'}",
            f"--window-size={WIDTH},{HEIGHT}",
            "--no-first-run",
            "--no-default-browser-check",
            "--no-proxy-server",
            "--disable-gpu",
            "--disable-extensions",
            "--disable-sync",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-dev-shm-usage",
            "--mute-audio",
            "--hide-scrollbars",
            "about:blank",
        ]
        with open(self.log, "wb") as out:
            # Its own process group: its helpers can be found by its pid.
            self.proc = subprocess.Popen(
                args, stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        port_file = self.profile / "profile" / "DevToolsActivePort"
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            if self.proc.poll() is not None:
                raise RuntimeError(f"chromium exited with {self.proc.returncode}:\n{self.log_tail()}")
            lines = port_file.read_text().split() if port_file.exists() else []
            if lines:
                port = int(lines[0])
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"chromium wrote no DevToolsActivePort in {START_TIMEOUT:.0f} s:\n{self.log_tail()}")
            time.sleep(0.1)
        target = None
        while target is None:
            targets = _get_json(f"http://127.0.0.1:{port}/json")
            target = next((t for t in targets if t.get("type") == "page"), None)
            if target is None:
                if time.monotonic() > deadline:
                    raise RuntimeError(f"chromium shows no page target: {targets}")
                time.sleep(0.1)
        self.page = Page(target["webSocketDebuggerUrl"])
        return self

    def log_tail(self, lines: int = 30) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        """Closes the connection, ends chromium (its pid, then what is left
        of its process group) and removes its profile."""
        if self.page is not None:
            self.page.close()
        proc = self.proc
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(15)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if proc is not None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(self.profile, ignore_errors=True)

    def __enter__(self) -> "Browser":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class Page:
    """One page target: commands sent as CDP JSON, events kept in order.

    A JavaScript dialog (alert, confirm, prompt) is recorded in
    ``dialogs`` and dismissed at once, so a page that opens one cannot
    hang the tests; ``exceptions`` keeps the page's uncaught errors and
    ``refused`` what the page's security policy refused to load or run."""

    def __init__(self, ws_url: str) -> None:
        self.ws: ClientConnection = connect(ws_url, max_size=None, proxy=None, open_timeout=30, legacy=True)
        self.next_id = 0
        self.events: list[dict] = []
        self.dialogs: list[str] = []
        self.exceptions: list[str] = []
        self.refused: list[str] = []
        self.call("Page.enable")
        self.call("Runtime.enable")
        self.call("Log.enable")
        self.call(
            "Emulation.setDeviceMetricsOverride",
            {"width": WIDTH, "height": HEIGHT, "deviceScaleFactor": 1, "mobile": False},
        )

    def close(self) -> None:
        self.ws.close()

    def _send(self, method: str, params: Optional[dict]) -> int:
        self.next_id += 1
        self.ws.send(json.dumps({"id": self.next_id, "method": method, "params": params or {}}))
        return self.next_id

    def _event(self, message: dict) -> None:
        self.events.append(message)
        method = message.get("method")
        params = message.get("params", {})
        if method == "Page.javascriptDialogOpening":
            self.dialogs.append(f"{params.get('type')}: {params.get('message')}")
            self._send("Page.handleJavaScriptDialog", {"accept": False})
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.exceptions.append(details.get("exception", {}).get("description") or details.get("text", "?"))
        elif method == "Log.entryAdded":
            entry = params.get("entry", {})
            text = entry.get("text", "")
            if entry.get("source") == "security" or "Content Security Policy" in text:
                self.refused.append(text)

    def call(self, method: str, params: Optional[dict] = None, timeout: float = 30.0) -> dict:
        """Sends a command and waits for its answer, keeping the events
        that come meanwhile."""
        want = self._send(method, params)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError(f"{method}: no answer in {timeout} s")
            message = json.loads(self.ws.recv(timeout=left))
            if "method" in message:
                self._event(message)
            elif message.get("id") == want:
                if "error" in message:
                    raise CdpError(f"{method}: {message['error']}")
                return message.get("result", {})

    def pump(self, seconds: float) -> None:
        """Takes in the events that arrive within `seconds`."""
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = json.loads(self.ws.recv(timeout=left))
            except TimeoutError:
                return
            if "method" in message:
                self._event(message)

    def clear(self) -> None:
        """Forgets the events, dialogs and errors seen so far."""
        self.events.clear()
        self.dialogs.clear()
        self.exceptions.clear()
        self.refused.clear()

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page (awaited)."""
        result = self.call(
            "Runtime.evaluate", {"expression": expression, "returnByValue": True, "awaitPromise": True}
        )
        if "exceptionDetails" in result:
            raise CdpError(f"{expression!r} threw: {result['exceptionDetails']}")
        return result.get("result", {}).get("value")

    def wait_for(self, expression: str, timeout: float = 10.0, what: str = "") -> Any:
        """Evaluates `expression` every 100 ms until it is truthy (a page
        being replaced meanwhile is waited out); its value."""
        deadline = time.monotonic() + timeout
        last: Any = None
        while True:
            try:
                last = self.evaluate(expression)
                if last:
                    return last
            except CdpError as e:  # the page was being replaced
                last = e
            if time.monotonic() > deadline:
                raise AssertionError(f"{what or expression} not seen in {timeout} s (last: {last!r})")
            self.pump(0.1)

    def navigate(self, url: str, timeout: float = 30.0) -> None:
        """Opens `url` and waits until it has loaded."""
        self.evaluate("window.__loaded = false")
        result = self.call("Page.navigate", {"url": url})
        if result.get("errorText"):
            raise CdpError(f"navigating to {url}: {result['errorText']}")
        self.wait_loaded(timeout)

    def wait_loaded(self, timeout: float = 30.0) -> None:
        """Waits until a new document (not the one marked before) is
        complete, and its deferred scripts ran."""
        self.wait_for(
            "window.__loaded === undefined && document.readyState === 'complete'",
            timeout,
            "the page loaded",
        )

    def text(self, selector: str) -> Optional[str]:
        """The textContent of the first element matching `selector`."""
        return self.evaluate(f"(e => e && e.textContent)(document.querySelector({json.dumps(selector)}))")

    def screenshot(self, path: Path) -> bytes:
        """A PNG of the viewport, written to `path`."""
        data = base64.b64decode(self.call("Page.captureScreenshot", {"format": "png"})["data"])
        path.write_bytes(data)
        return data

    def poll(self, check: Callable[[], Any], timeout: float = 10.0, what: str = "") -> Any:
        """Calls `check` every 100 ms until it returns something truthy."""
        deadline = time.monotonic() + timeout
        while True:
            got = check()
            if got:
                return got
            if time.monotonic() > deadline:
                raise AssertionError(f"{what or check} not seen in {timeout} s")
            self.pump(0.1)
