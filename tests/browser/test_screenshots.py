"""The screenshots of docs/web/ can still be taken: every page shows what
it should, and each picture is a PNG of the whole 1280x800 viewport."""

from __future__ import annotations

import struct
import tempfile
from pathlib import Path
from typing import Any

import screenshots
from devtools import HEIGHT, WIDTH, Page
from web_harness import WebService


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


def test_the_screenshots_can_be_taken(page: Page, served: WebService, client: Any) -> None:
    with tempfile.TemporaryDirectory(prefix="sandboxd-shots-") as out:
        shots = screenshots.take(served, page, client, Path(out))
        assert [p.name for p in shots] == [f"{n}.png" for n in screenshots.NAMES]
        for path in shots:
            assert png_size(path) == (WIDTH, HEIGHT), path
            # A blank page compresses to almost nothing.
            assert path.stat().st_size > 10_000, f"{path} looks blank ({path.stat().st_size} bytes)"
