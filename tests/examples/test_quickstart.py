"""The README's quickstart program runs as shown, twice, on the same SQLite file."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "examples" / "quickstart.py"
EXPECTED_FACTS = [
    "run_created", "input_accepted", "model_step_prepared", "model_step_started",
    "model_step_completed", "tool_step_opened", "tool_call_started", "tool_call_completed",
    "model_step_prepared", "model_step_started", "model_step_completed", "run_ended",
]


def _run(cwd: pathlib.Path) -> list[str]:
    out = subprocess.run([sys.executable, str(QUICKSTART)], cwd=cwd, capture_output=True,
                         text=True, timeout=120, check=True)
    return out.stdout.splitlines()


def test_quickstart_runs_and_replays(tmp_path: pathlib.Path) -> None:
    first = _run(tmp_path)
    assert first[0] == "finished completed"
    assert first[1] == "answer: 2 + 3 = 5"  # the tool's 5 reaches the model as an int
    assert [line.strip() for line in first[2:]] == EXPECTED_FACTS
    assert (tmp_path / "quickstart.sqlite3").exists()
    # the second invocation replays creation and finds the Run finished: same log
    assert _run(tmp_path) == first


def test_readme_shows_the_quickstart_program() -> None:
    readme = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", readme, re.S)
    assert any(b.strip() == QUICKSTART.read_text().strip() for b in blocks), (
        "README.md must show examples/quickstart.py verbatim")
