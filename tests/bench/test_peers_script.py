"""``bench/peers.py`` keeps running: a tiny invocation of the script, as a user would.

The figures are not judged here (benchmarks are never timed tests); the test checks that
the script still drives our side to completion, reports every row, and that a peer which
is not installed is reported as missing rather than breaking the invocation.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_peers_script_reports_every_row(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--loop", "2", "--loops", "1",
         "--concurrent", "2", "--rounds", "1", "--json"],
        capture_output=True, text=True, timeout=300, cwd=tmp_path, check=True)
    report = json.loads(out.stdout)
    names = [r["row"] for r in report["rows"]]
    assert names[0] == "durable SQLite, 1 at a time"
    assert len(names) == 6
    for row in report["rows"]:
        assert row["ours"] > 0
        assert "synchronous=FULL" in row["ours_durability"] or row["ours_durability"] == "memory"
        if row["peer"] is None:
            assert row["peer_durability"] == "peer not installed"
        else:
            assert row["ratio"] == row["ours"] / row["peer"]


def test_peers_script_refuses_zero_counts(tmp_path: Path) -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "peers.py"), "--loops", "0"],
        capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 2
    assert "every count must be at least 1" in out.stderr
