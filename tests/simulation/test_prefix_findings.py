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


BY_ID = {f["id"]: f for f in FINDINGS}
STORES = pytest.mark.parametrize("store", ["memory", "sqlite"])


def _stays_fixed(ident: str, store: str) -> None:
    finding = BY_ID[ident]
    wanted = set(finding["invariants"])
    cfg = Config(seed=int(finding["seed"]), store=store, only=str(finding["only"]))
    searched = run_schedule(cfg, choices_for("random", cfg.seed, cfg))
    shrunk = replay(Schedule.parse(str(finding["schedule"]).replace(
        "v1/memory", f"v1/{store}")))
    for result in (searched, shrunk):
        broken = [v.to_dict() for v in result.violations if v.invariant in wanted]
        assert not broken, (ident, broken)


@needs_fixes
@STORES
def test_sim_isolation_and_no_crash_loop(store: str) -> None:
    """D1: a tool check that raises fails that call, not the drive; no crash loop."""
    _stays_fixed("D1", store)


@needs_fixes
@STORES
@pytest.mark.parametrize("ident", ["D2a", "D2b"])
def test_sim_cancel_reaches_the_work(store: str, ident: str) -> None:
    """D2: after CancelRun the drive returns within drain_timeout and no retry starts."""
    _stays_fixed(ident, store)


@needs_fixes
@STORES
@pytest.mark.parametrize("ident", ["D3a", "D3b"])
def test_sim_every_request_is_answered(store: str, ident: str) -> None:
    """D3: callers of a closing runtime get a library error, also those waiting for room."""
    _stays_fixed(ident, store)


@needs_fixes
@STORES
def test_sim_transient_is_not_final(store: str) -> None:
    """D4: a redispatch into a closed runtime is not a give-up."""
    _stays_fixed("D4", store)


@needs_fixes
@STORES
def test_sim_errors_are_not_masked(store: str) -> None:
    """D5: a builder error raised while the caller is cancelled reaches the caller."""
    _stays_fixed("D5", store)


@needs_fixes
@STORES
def test_sim_bounded_time(store: str) -> None:
    """D6: a model that hangs forever or keeps asking for an unknown tool ends the Run."""
    _stays_fixed("D6", store)


def test_findings_file_lists_every_defect() -> None:
    ids = {f["id"] for f in FINDINGS}
    assert {"D1", "D2a", "D2b", "D3a", "D3b", "D4", "D5", "D6"} <= ids
    text = (Path(__file__).with_name("PREFIX_FINDINGS.md")).read_text()
    assert all(f"## {i}." in text for i in ids)
