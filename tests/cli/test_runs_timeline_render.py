"""The timeline page renders in headless Chromium (APP-INS-2): the browser lays out every
span and mark (the page's inline script counts the non-empty bounding boxes into
``<body data-drawn>``), and the page asks for nothing over the network.

Needs Debian's ``chromium`` (``.ci/run`` installs it); skipped without it, but with ``CI``
set a missing browser is a failure.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from runs_scenario import build_store

from runx_actors.cli import main

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]


def _chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        if os.environ.get("CI"):
            pytest.fail("chromium is not installed (CI is set: this test may not be skipped)")
        pytest.skip("chromium is not installed")
    return found


def _dump_dom(browser: str, page: Path, profile: Path) -> str:
    out = subprocess.run(
        [browser, *FLAGS, f"--user-data-dir={profile}", "--dump-dom", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_timeline_page_is_drawn_by_chromium(tmp_path: Path) -> None:
    browser = _chromium()
    store = build_store(tmp_path / "runs.sqlite3")
    page = tmp_path / "busy.html"
    out = CliRunner().invoke(main, ["runs", "timeline", "busy", "--store", str(store),
                                    "--format", "html", "-o", str(page)])
    assert out.exit_code == 0, out.output
    source = page.read_text()
    # self-contained: no URL to fetch (the SVG namespace is an identifier, not a fetch)
    urls = set(re.findall(r"(?:src|href)\s*=\s*[\"']([^\"']+)", source))
    assert urls == set()
    assert "http://www.w3.org/2000/svg" in source
    assert re.findall(r"https?://[^\"' ]+", source) == ["http://www.w3.org/2000/svg"]

    dom = _dump_dom(browser, page, tmp_path / "profile")
    spans = re.findall(r'<rect class="span (\w+) (\w+)" data-lane="([^"]+)"', dom)
    marks = re.findall(r'<path class="mark (\w+)" data-lane="([^"]+)"', dom)
    drawn = re.search(r'<body[^>]*data-drawn="(\d+)"', dom)
    assert drawn is not None, "the page's script did not run"
    assert int(drawn.group(1)) == len(spans) + len(marks)  # every element has a box
    assert ("model", "completed", "model") in spans
    assert ("tool", "completed", "tool #1") in spans  # lookup, in its own lane …
    assert ("wait", "approved", "tool #2") in spans   # … deploy waited for approval …
    assert ("tool", "unknown", "tool #2") in spans    # … and was lost with its owner
    assert ("approval", "tool #2") in marks and ("recovery", "tool #2") in marks
    assert ("takeover", "run") in marks and ("end", "run") in marks
    assert len(re.findall(r'<rect class="epoch" data-epoch="(\d)"', dom)) == 2
