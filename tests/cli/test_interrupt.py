"""Ctrl-C (SIGINT) stops a long command with the CLI's two lines and exit 130 — never
the code of a finding (1: a counterexample, a failed seed), never a traceback. A fresh
user's tries: ``check`` exited 1 with click's bare "Aborted!", and ``simulate`` reported
the KeyboardInterrupt as a runtime bug ("escaped into the runtime", a FAIL with a replay
command that cannot reproduce it), or kept running."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _cpu_seconds(pid: int) -> float:
    """User + system CPU of *pid* so far (Linux ``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _interrupt_after(args: list[str], busy: float) -> subprocess.CompletedProcess[str]:
    """Start ``runx-actors *args*``, send SIGINT once it has spent *busy* CPU-seconds
    (its imports are done and it is working), and collect what it printed."""
    proc = subprocess.Popen([sys.executable, "-m", "runx_actors", *args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 120
    while proc.poll() is None and _cpu_seconds(proc.pid) < busy:
        assert time.monotonic() < deadline, "the command never got busy"
        time.sleep(0.05)
    assert proc.poll() is None, "the command ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    try:
        out, err = proc.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        proc.kill()
        out, err = proc.communicate()
        pytest.fail(f"still running 60 s after SIGINT: {err[-500:]}")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("args", [
    ["check", "--profile", "deep", "--no-progress"],
    ["check", "--profile", "deep", "--json", "--no-progress"],
    ["simulate", "--seeds", "100000", "--store", "memory"],
    ["simulate", "--seeds", "100000", "--store", "sqlite"],
], ids=["check", "check-json", "simulate-memory", "simulate-sqlite"])
def test_sigint_exits_130_with_two_lines(args: list[str]) -> None:
    done = _interrupt_after(args, busy=2.5)
    assert done.returncode == 130, (done.returncode, done.stdout[-500:], done.stderr[-2000:])
    assert "Traceback" not in done.stderr and "Aborted!" not in done.stderr
    lines = done.stderr.strip().splitlines()
    assert lines[-2] == "runx-actors: interrupted (SIGINT)" and lines[-1].startswith("hint: ")
    assert "FAIL" not in done.stdout and "escaped into the runtime" not in done.stdout


#: Start the command the way its console script or ``python -m`` does, with a Ctrl-C
#: that lands while the module *IMPORTING* is being imported: the process sends itself
#: SIGINT from the import system's finder, and Python raises KeyboardInterrupt inside
#: that import (what a user's Ctrl-C in the first ~0.4 s did, deterministically).
_EARLY_CTRL_C = """
import os, signal, sys
when, way = sys.argv[1], sys.argv[2]
class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == when:
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
        return None
sys.meta_path.insert(0, CtrlC())
sys.argv = ["runx-actors", *sys.argv[3:]]
if way == "console script":
    from importlib.metadata import entry_points
    (script,) = entry_points(group="console_scripts", name="runx-actors")
    sys.exit(script.load()())
import runpy
runpy.run_module("runx_actors", run_name="__main__", alter_sys=True)
"""


@pytest.mark.parametrize("way", ["console script", "python -m runx_actors"])
@pytest.mark.parametrize("importing", ["runx_actors.protocol", "attrs", "click", "rich",
                                       "runx_actors.check", "runx_actors.cli"])
def test_sigint_during_the_imports_exits_130_with_two_lines(way: str, importing: str
                                                            ) -> None:
    """RUN-CLI-1: a Ctrl-C before the CLI's modules are loaded printed a raw
    KeyboardInterrupt traceback (the console script imported runx_actors.cli, and the
    package root the protocol core, before any handler existed)."""
    done = subprocess.run([sys.executable, "-c", _EARLY_CTRL_C, importing, way, "check",
                           "--max-states", "10"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert "Traceback" not in done.stderr, done.stderr[-2000:]
    assert done.returncode == 130, (done.returncode, done.stderr[-2000:])
    assert done.stderr.splitlines() == ["runx-actors: interrupted (SIGINT)",
                                        done.stderr.splitlines()[1]]
    assert done.stderr.splitlines()[1].startswith("hint: ") and done.stdout == ""
