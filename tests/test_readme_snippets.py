"""Every Python snippet of README.md runs (issue 10).

The snippets of one section (``##`` or ``###`` heading) are one program, run in order in
a fresh directory; a ``text`` block right after a section's last snippet is its expected
output. The quickstart's snippet is ``examples/quickstart.py`` verbatim (checked and run
by ``tests/examples/test_quickstart.py``); the PostgreSQL snippet runs against the test
cluster (skipped without PostgreSQL, failing when ``CI`` is set). The ``runs show`` and
``runs timeline`` outputs the README shows are the real ones on the quickstart's store.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
QUICKSTART = ROOT / "examples" / "quickstart.py"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```$", re.S | re.M)


def _sections() -> list[tuple[str, list[tuple[str, str]]]]:
    """(heading, [(language, body), …]) for every section with a fenced block."""
    text = README.read_text(encoding="utf-8")
    parts = re.split(r"^(#{2,3} .*)$", text, flags=re.M)
    out = []
    for heading, body in zip(parts[1::2], parts[2::2], strict=True):
        blocks = [(m.group(1), m.group(2)) for m in FENCE.finditer(body)]
        if blocks:
            out.append((heading.lstrip("# ").strip(), blocks))
    return out


def _programs() -> dict[str, tuple[str, str | None]]:
    """heading → (program, expected stdout or None) for sections with Python snippets."""
    programs = {}
    for heading, blocks in _sections():
        python = [body for lang, body in blocks if lang == "python"]
        if not python or python == [QUICKSTART.read_text()]:
            continue
        expected = None
        last = max(i for i, (lang, _) in enumerate(blocks) if lang == "python")
        if last + 1 < len(blocks) and blocks[last + 1][0] == "text":
            expected = blocks[last + 1][1]
        programs[heading] = ("\n\n".join(python), expected)
    return programs


def _run(program: str, cwd: Path, env: dict[str, str] | None = None) -> str:
    script = cwd / "snippet.py"
    script.write_text(program, encoding="utf-8")
    out = subprocess.run([sys.executable, str(script)], cwd=cwd, capture_output=True,
                         text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    return out.stdout


def test_every_python_snippet_is_covered() -> None:
    """Each Python block is the quickstart (run elsewhere) or part of a program run here."""
    per_section = {h: sum(lang == "python" for lang, _ in b) for h, b in _sections()}
    quickstart = sum(body == QUICKSTART.read_text()
                     for _, blocks in _sections() for lang, body in blocks if lang == "python")
    assert quickstart == 1
    assert sum(per_section[h] for h in _programs()) + quickstart == sum(per_section.values())
    assert len(_programs()) >= 3  # API in brief, the trio app, PostgreSQL


@pytest.mark.parametrize("heading", [h for h in _programs() if "PostgreSQL" not in h])
def test_snippets_run(heading: str, tmp_path: Path) -> None:
    program, expected = _programs()[heading]
    stdout = _run(program, tmp_path)
    if expected is not None:
        assert stdout == expected


def test_postgres_snippet_runs(tmp_path: Path) -> None:
    from runx_actors.testing.postgres import DSN_ENV, find_postgres_bin, postgres_dsn_for_tests

    if not os.environ.get(DSN_ENV) and find_postgres_bin() is None:
        if os.environ.get("CI"):
            pytest.fail("no PostgreSQL (CI is set: this test may not be skipped)")
        pytest.skip("no PostgreSQL server binaries")
    (program, _), = [v for h, v in _programs().items() if "PostgreSQL" in h]
    with postgres_dsn_for_tests() as dsn:
        stdout = _run(program, tmp_path, env={**os.environ, "RUNX_POSTGRES_DSN": dsn})
    assert stdout == "ok\n"


def test_readme_runs_outputs_are_real(tmp_path: Path) -> None:
    subprocess.run([sys.executable, str(QUICKSTART)], cwd=tmp_path, check=True,
                   capture_output=True, timeout=120)
    text = README.read_text(encoding="utf-8")
    for command in ("runs show run-1", "runs timeline run-1"):
        pattern = rf"^\$ runx-actors {command} --store quickstart.sqlite3\n(.*?)^(?:\$|```)"
        shown = re.search(pattern, text, re.S | re.M)
        assert shown is not None, command
        real = subprocess.run([sys.executable, "-m", "runx_actors", *command.split(),
                               "--store", "quickstart.sqlite3"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120, check=True)
        assert [line.rstrip() for line in real.stdout.splitlines()] == \
            [line.rstrip() for line in shown.group(1).splitlines()], command
