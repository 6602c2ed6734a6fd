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


#: R3 (PREFIX_FINDINGS.md): the caller of drive(run) is cancelled while the read of its
#: effect's Outcome is lost; a later drive of the same Run, which met no fault, was refused
#: with RunAlreadyRunningError until the Watcher asked again. Found by PCT (seed 20098 on
#: the unfused loop, seed 132 once commits were fused); the shrunk schedule of 20098.
R3_REPLAY = ("v1/memory/seed=20098/runs=3/steps=400/faults=1/"
             "0*7,2,1,4,0,4,0,4*3,0,4,0,4*2,0,4*2,5,0*2,3*2,2")


@pytest.mark.parametrize("seed", [20098, 132])
def test_sim_a_new_drive_waits_for_an_abandoned_one(seed: int) -> None:
    """R3: a drive of a Run whose previous drive was abandoned waits for it to wind down
    (at most drain_timeout) instead of failing with RunAlreadyRunningError."""
    cfg = Config(seed=seed, store="memory")
    for result in (run_schedule(cfg, choices_for("pct", seed, cfg)),
                   replay(Schedule.parse(R3_REPLAY)) if seed == 20098 else None):
        if result is None:
            continue
        broken = [v.to_dict() for v in result.violations]
        assert not broken, (seed, broken)
