"""Regression seeds: each defect the simulator found on the pre-fix tree
(``PREFIX_FINDINGS.md``) replayed over both stores. Before the shell's issue-9 fixes these
fail (``xfail``); after them none of the listed invariants may break again.

For every finding two schedules run: the seed as the random strategy drew it (the search
that found the defect) and the shrunk schedule replayed exactly.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from sim_support import needs_fixes

from runx_actors.testing.simulation import Config, Schedule, choices_for, replay, run_schedule

FINDINGS = json.loads((Path(__file__).with_name("prefix_findings.json")).read_text())


def _cases() -> list[object]:
    return [pytest.param(f, store, id=f"{f['id']}-{store}")
            for f in FINDINGS for store in ("memory", "sqlite")]


@needs_fixes
@pytest.mark.parametrize("finding,store", _cases())
def test_prefix_finding_stays_fixed(finding: dict[str, object], store: str) -> None:
    wanted = set(finding["invariants"])  # type: ignore[arg-type]
    cfg = Config(seed=int(finding["seed"]), store=store,  # type: ignore[call-overload]
                 only=str(finding["only"]))
    searched = run_schedule(cfg, choices_for("random", cfg.seed, cfg))
    shrunk = replay(Schedule.parse(str(finding["schedule"]).replace(
        "v1/memory", f"v1/{store}")))
    for result in (searched, shrunk):
        broken = [v.to_dict() for v in result.violations if v.invariant in wanted]
        assert not broken, broken


def test_findings_file_lists_every_defect() -> None:
    ids = {f["id"] for f in FINDINGS}
    assert {"D1", "D2a", "D2b", "D3a", "D3b", "D4", "D5", "D6"} <= ids
    text = (Path(__file__).with_name("PREFIX_FINDINGS.md")).read_text()
    assert all(f"## {i}." in text for i in ids)
