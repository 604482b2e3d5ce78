"""The web view in a real browser: the pages a person opens, kept fresh in
place by the service's script, refusals highlighted as the stylesheet
says, and whatever a command printed shown as text, never run."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
import sandboxd
from devtools import Page
from web_harness import Background, WebService, running_link

#: A command that prints a line a second, after a pause that leaves time
#: to open its page while nothing is printed yet.
STEPS = "sleep 2; for i in 1 2 3 4 5; do echo step $i; sleep 1; done"
#: What the browser could take for markup or a terminal for a command: a
#: script tag and escape sequences, printed and in the command line itself.
HOSTILE = "sleep 2; echo '<script>alert(1)</script>'; printf '\\033[2J'; echo '\x1b[31mred' >&2; sleep 1"

#: The script elements a page may hold: the service's own, and no other.
SCRIPTS = "Array.from(document.querySelectorAll('script')).map(s => s.getAttribute('src'))"


def js(value: Any) -> str:
    return json.dumps(value)


def follow(page: Page, timeout: float = 30.0) -> list[tuple[str, str]]:
    """(stdout, ended) of the command page every 100 ms, until it ended."""
    seen: list[tuple[str, str]] = []
    deadline = time.monotonic() + timeout
    while True:
        out, ended = page.evaluate("['stdout', 'ended'].map(id => document.getElementById(id).textContent)")
        seen.append((out, ended))
        if ended.startswith("Ended"):
            return seen
        assert time.monotonic() < deadline, f"the command page never showed the end: {seen[-1]}"
        page.pump(0.1)


def test_the_sessions_page_lists_sessions_and_refreshes_in_place(page: Page, served: WebService, client: Any) -> None:
    with client.session() as first:
        page.navigate(f"{served.web}/")
        assert page.evaluate("document.title") == "Sessions · sandboxd"
        assert first.id in page.text("#sessions")
        assert page.evaluate(f"document.querySelector('#sessions a[href=\"/sessions/{first.id}\"]') !== null")
        # A mark on this document: a reload would lose it.
        page.evaluate("window.__same = 'same document'")
        with client.session() as second:
            page.wait_for(
                f"document.getElementById('sessions').textContent.includes({js(second.id)})",
                timeout=10,
                what="the second session on the sessions page",
            )
            assert first.id in page.text("#sessions")
            assert page.evaluate("window.__same") == "same document", "the page was reloaded"
        page.wait_for(
            f"!document.getElementById('sessions').textContent.includes({js(second.id)})",
            timeout=10,
            what="the closed session gone from the sessions page",
        )
        assert first.id in page.text("#sessions")
        assert page.evaluate("window.__same") == "same document", "the page was reloaded"


def test_a_running_commands_output_grows_on_its_page(page: Page, served: WebService, client: Any) -> None:
    with client.session() as s:
        run = Background(s.run, STEPS, timeout=60)
        try:
            link = running_link(page, served.web, s.id)
            assert re.fullmatch(rf"/sessions/{s.id}/commands/\d+", link), link
            page.navigate(f"{served.web}{link}")
            assert page.text("#ended") == "Running…", "the command ended before its page was open"
            first = page.text("#stdout")
            assert "step 5" not in first, f"the command was nearly done before its page was open: {first!r}"
            page.evaluate("window.__same = 'same document'")
            seen = follow(page)
        finally:
            result = run.join()
        assert result.exit_code == 0, result
    stdout, ended = seen[-1]
    assert re.fullmatch(r"Ended: exit 0 in \d+ ms", ended), ended
    assert stdout == "".join(f"step {i}\n" for i in range(1, 6)), f"lost or doubled output: {stdout!r}"
    assert any("step 1" in out and end == "Running…" for out, end in seen), "no output was shown while it ran"
    # It grew step by step, in this same document.
    assert len({out for out, _ in seen}) >= 4, f"the output did not grow in steps: {sorted({o for o, _ in seen})}"
    assert page.evaluate("window.__same") == "same document", "the page was reloaded"


def test_a_refused_edit_is_highlighted_with_its_reason(page: Page, served: WebService, client: Any) -> None:
    with client.session() as s:
        s.create("notes.txt", "hello\n")
        s.run("cat notes.txt")
        page.navigate(f"{served.web}/sessions/{s.id}")
        page.evaluate("window.__same = 'same document'")
        with pytest.raises(sandboxd.OldStringNotFound):
            s.edit("notes.txt", "goodbye", "farewell")
        with pytest.raises(sandboxd.FileNotFound):
            s.edit("missing.txt", "a", "b")
        # The timeline refreshes in place: the refusals arrive.
        rows = page.wait_for(
            "(r => r.length >= 2 && r)(Array.from(document.querySelectorAll('tr.refused')).map(t => t.textContent))",
            timeout=10,
            what="two refused rows on the timeline",
        )
        assert page.evaluate("window.__same") == "same document", "the page was reloaded"
        assert any("EditFile" in r and "OLD_STRING_NOT_FOUND" in r for r in rows), rows
        assert any("EditFile" in r and "FILE_NOT_FOUND" in r for r in rows), rows
        style = page.evaluate(
            """(() => {
                const bg = el => getComputedStyle(el).backgroundColor;
                const refused = document.querySelector('tr.refused td');
                const ok = Array.from(document.querySelectorAll('tbody tr'))
                    .find(t => !t.classList.contains('refused') && t.textContent.includes('CreateFile'));
                const reason = document.querySelector('tr.refused .reason');
                return {
                    refused: bg(refused),
                    ok: ok && bg(ok.querySelector('td')),
                    table: bg(document.querySelector('table')),
                    reason: getComputedStyle(reason).color,
                    text: getComputedStyle(document.body).color,
                    reasonShown: reason.getBoundingClientRect().width > 0,
                };
            })()"""
        )
    assert style["ok"] is not None, "the accepted CreateFile is not on the timeline"
    assert style["refused"] not in ("rgba(0, 0, 0, 0)", "transparent"), style
    assert style["refused"] != style["ok"], f"a refused row looks like any other: {style}"
    assert style["refused"] != style["table"], style
    assert style["reason"] != style["text"], f"the reason is not set apart: {style}"
    assert style["reasonShown"], style


def assert_shown_as_text(page: Page, where: str) -> None:
    """The page shows the hostile text, and runs none of it."""
    text = page.evaluate("document.querySelector('main').textContent")
    assert "<script>alert(1)</script>" in text, f"{where}: the printed tag is not shown: {text!r}"
    assert "\x1b" not in text, f"{where}: a raw escape reached the page"
    assert "^[[31mred" in text, f"{where}: the escape is not shown as ^[: {text!r}"
    html = page.evaluate("document.querySelector('main').innerHTML")
    assert "<script" not in html, f"{where}: the printed tag became markup"
    origin = page.evaluate("location.origin")
    assert page.evaluate(SCRIPTS) == ["/assets/live.js"], f"{where}: scripts other than the service's"
    assert page.evaluate("Array.from(document.scripts).map(s => s.src)") == [f"{origin}/assets/live.js"]
    page.pump(0.5)
    assert page.dialogs == [], f"{where}: a dialog opened: {page.dialogs}"


def test_what_a_command_prints_is_shown_as_text_and_never_runs(page: Page, served: WebService, client: Any) -> None:
    # The dialog hook works: a dialog the page opens is seen (and dismissed).
    page.navigate(f"{served.web}/")
    page.evaluate("alert('probe')")
    assert page.dialogs == ["alert: probe"], page.dialogs
    page.clear()
    with client.session() as s:
        run = Background(s.run, HOSTILE, timeout=60)
        try:
            link = running_link(page, served.web, s.id)
            page.navigate(f"{served.web}{link}")
            # Live: the output arrives over the stream while the page is open.
            stdout, ended = follow(page)[-1]
        finally:
            result = run.join()
        assert result.exit_code == 0, result
        assert ended.startswith("Ended: exit 0"), ended
        assert "<script>alert(1)</script>" in stdout, stdout
        assert "^[[2J" in stdout and "\x1b" not in stdout, repr(stdout)
        assert "^[[31mred" in page.text("pre.command"), page.text("pre.command")
        assert_shown_as_text(page, "the live command page")
        # As it ended: rendered by the service.
        page.navigate(f"{served.web}{link}")
        assert "^[[2J" in page.text("#stdout"), page.text("#stdout")
        assert "^[[31mred" in page.text("#stderr"), page.text("#stderr")
        assert_shown_as_text(page, "the ended command page")
        # The session's timeline shows the command line, and links to it.
        page.navigate(f"{served.web}/sessions/{s.id}")
        assert page.evaluate(f"document.querySelector('tbody a[href={js(link)}]') !== null"), page.text("main")
        assert_shown_as_text(page, "the session page")
    assert page.dialogs == []


def test_an_edit_shows_on_the_changes_tab_as_a_marked_diff(page: Page, served: WebService, client: Any) -> None:
    project = Path(tempfile.mkdtemp(prefix="project-", dir=served.service.roots))
    try:
        (project / "greet.py").write_text('print("hello")\n')
        with client.session(project) as s:
            s.edit("greet.py", 'print("hello")', 'print("<b>hi</b>")')
            page.navigate(f"{served.web}/sessions/{s.id}")
            # A person clicks the tab.
            page.evaluate(
                "window.__loaded = false;"
                "Array.from(document.querySelectorAll('nav.tabs a')).find(a => a.textContent === 'Changes').click()"
            )
            page.wait_loaded()
            assert page.evaluate("location.pathname") == f"/sessions/{s.id}/changes"
            assert page.text("nav.tabs .current") == "Changes"
            marked = page.evaluate(
                """(() => {
                    const lines = cls => Array.from(document.querySelectorAll('pre.diff span.' + cls))
                        .map(s => s.textContent);
                    const bg = cls => getComputedStyle(document.querySelector('pre.diff span.' + cls)).backgroundColor;
                    const pre = document.querySelector('pre.diff');
                    return {del: lines('del'), add: lines('add'), meta: lines('meta'),
                            delBg: bg('del'), addBg: bg('add'), ctxBg: getComputedStyle(pre).backgroundColor,
                            markup: pre.querySelectorAll('b').length};
                })()"""
            )
    finally:
        shutil.rmtree(project, ignore_errors=True)
    assert marked["del"] == ['-print("hello")\n'], marked
    assert marked["add"] == ['+print("<b>hi</b>")\n'], marked
    assert any("greet.py" in m for m in marked["meta"]), marked
    assert marked["markup"] == 0, "the diff's text became markup"
    colours = {marked["delBg"], marked["addBg"], marked["ctxBg"]}
    assert len(colours) == 3, f"additions and deletions are not marked apart: {marked}"
