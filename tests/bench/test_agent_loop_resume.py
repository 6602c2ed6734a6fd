"""``bench/agent_loop.py``'s restart measurement keeps running: a tiny invocation, fresh
and same-process rounds alternated over one store, as the RESULTS section runs it.

The figures are not judged (benchmarks are never timed tests); the test checks that every
round resumed every Run (each kept key watched, no recovery commit) and reports what the
round's open found on disk and the close measured apart from the restart.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_restart_rounds_report_every_run_resumed(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "agent_loop.py"), "--resume-only", "20",
         "--resume-rounds", "3", "--resume-process", "both", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=True)
    report = json.loads(out.stdout)
    rounds = report["rounds"]
    assert [r["process"] for r in rounds] == ["same", "fresh", "same"]
    for r in rounds:
        assert (r["active"], r["watched_keys"], r["recovery_commits"]) == (20, 20, 0)
        assert 0 < r["open_seconds"] <= r["resume_seconds"]
        assert r["close_seconds"] >= 0 and r["close_cpu_seconds"] >= 0
        assert r["store_bytes"] > 0
        assert r["wal_bytes"] == 0  # every earlier round closed its store: WAL folded in
