"""The ways in (issue 10): ``runx-actors --version``, ``python -m runx_actors``,
``python -m runx_actors.cli check`` — each does what the command does."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version

import pytest


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, *args], capture_output=True, text=True,
                          timeout=300)


@pytest.mark.parametrize("module", ["runx_actors", "runx_actors.cli"])
def test_version(module: str) -> None:
    out = _run("-m", module, "--version")
    assert out.returncode == 0, out.stderr
    assert out.stdout == f"runx-actors, version {version('runx-actors')}\n"


def test_python_m_cli_check_runs_the_checker() -> None:
    out = _run("-m", "runx_actors.cli", "check", "--max-states", "20")
    # a search stopped at --max-states is incomplete (exit 3); it used to print nothing
    assert out.returncode == 3, out.stderr
    assert "no violation among the 20 explored states" in " ".join(out.stdout.split())


def test_python_m_runx_actors_lists_the_commands() -> None:
    out = _run("-m", "runx_actors", "--help")
    assert out.returncode == 0
    for command in ("check", "demo", "keys", "loop", "runs", "verify"):
        assert f"  {command} " in out.stdout or f"  {command}\n" in out.stdout, command


def test_usage_error_exits_64() -> None:
    out = _run("-m", "runx_actors", "runs", "show")
    assert out.returncode == 64 and "Missing argument" in out.stderr
