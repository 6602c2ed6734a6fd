"""The controlled scheduler over the real runtime: determinism, replay, the oracles
firing on a broken store, strategies, and the fixed seed sets (ci / dev / slow)."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sim_support import DEEP, needs_fixes

from model_tests._broken import UnfencedMemoryStore
from runx_actors.testing.simulation import (
    Config,
    ReplayChoices,
    Schedule,
    ScheduleFormatError,
    choices_for,
    explore,
    replay,
    run_schedule,
    shrink,
)

#: The ci seed set: a few seconds per store.
CI_SEEDS = {"memory": range(0, 10), "sqlite": range(0, 3)}
DEV_SEEDS = {"memory": range(0, 300), "sqlite": range(0, 60)}


def _labels(result: object) -> list[tuple[str, str]]:
    return [(s.label, s.fault) for s in result.trace]  # type: ignore[attr-defined]


@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_a_seed_replays_exactly(store: str) -> None:
    """The same seed gives the same trace; its schedule string replays it step by step
    (SQLite thread calls included: no choice is made while one is in flight)."""
    cfg = Config(seed=3, store=store)
    first = run_schedule(cfg, choices_for("random", 3, cfg))
    second = run_schedule(cfg, choices_for("random", 3, cfg))
    assert _labels(first) == _labels(second)
    again = replay(Schedule.parse(str(first.schedule)))
    assert _labels(again) == _labels(first)
    assert again.signature() == first.signature()
    assert first.steps > 50  # the workload really ran


def test_schedule_text_round_trips_and_refuses_garbage() -> None:
    s = Schedule(Config(seed=5, store="sqlite", runs=2, steps=90, faults=True,
                        only="crash+hang"), (0, 0, 0, 3, 1, 1, 0))
    assert str(s) == "v1/sqlite/seed=5/runs=2/steps=90/faults=1/only=crash+hang/0*3,3,1*2,0"
    assert Schedule.parse(str(s)) == s
    for bad in ("", "v2/memory/seed=1/runs=1/steps=10/faults=1/-",
                "v1/memory/seed=1/runs=0/steps=10/faults=1/-",
                "v1/memory/seed=1/runs=1/steps=10/faults=2/-",
                "v1/memory/seed=1/runs=1/steps=10/faults=1/1*99999999",
                "v1/memory/seed=1/runs=1/steps=10/faults=1/a,b"):
        with pytest.raises(ScheduleFormatError):
            Schedule.parse(bad)


def test_the_fencing_oracle_fires_on_a_store_without_fencing() -> None:
    """A memory store that never checks the epoch: after a second owner opened the scope
    the old owner's commits are accepted, and the simulator reports ``fenced-commit``;
    the real store under the same schedule does not."""
    cfg = Config(seed=7, only="takeover+hang")
    broken = run_schedule(cfg, choices_for("random", 7, cfg), make_store=UnfencedMemoryStore)
    assert "fenced-commit" in broken.signature()
    assert broken.stats["takeovers"] >= 1
    real = run_schedule(cfg, ReplayChoices(broken.schedule.choices))
    assert "fenced-commit" not in real.signature()
    small = shrink(broken, budget=8,
                   keep=lambda r: "fenced-commit" in r.signature())
    assert len(small.schedule.choices) <= len(broken.schedule.choices)


@pytest.mark.parametrize("strategy", ["pct", "exhaustive"])
def test_other_strategies_explore(strategy: str) -> None:
    cfg = Config(faults=False, runs=2)
    run = explore(cfg, strategy=strategy, seeds=range(4))
    assert run.schedules == 4 and not run.failures
    assert run.steps > 4 * 30


@given(st.lists(st.integers(0, 6), max_size=120))
@settings(max_examples=300 if DEEP else 6)
def test_hypothesis_drives_the_choice_sequence_fault_free(choices: list[int]) -> None:
    """Hypothesis picks the decisions (so it shrinks them): without faults, every
    interleaving ends every Run or leaves it waiting for the application."""
    result = run_schedule(Config(seed=1, faults=False, runs=2), ReplayChoices(choices))
    assert result.ok, [v.to_dict() for v in result.violations]


@needs_fixes
@pytest.mark.parametrize("store", ["memory", "sqlite"])
def test_fixed_seed_set_holds_every_invariant(store: str) -> None:
    """The ci seed set (deeper under the dev profile): real runtime, faults on."""
    seeds = (DEV_SEEDS if DEEP else CI_SEEDS)[store]
    run = explore(Config(store=store), strategy="random", seeds=seeds)
    assert not run.failures, [(r.schedule.config.seed, [v.to_dict() for v in r.violations])
                              for r in run.failures[:3]]


@needs_fixes
def test_pct_seed_set_holds_every_invariant() -> None:
    run = explore(Config(), strategy="pct", seeds=range(100, 106))
    assert not run.failures, [str(r.schedule) for r in run.failures[:3]]


def _slow_selected(config: pytest.Config) -> bool:
    expr = str(config.getoption("-m") or "")
    return ("slow" in expr and "not slow" not in expr) or bool(os.environ.get("RUNX_SIM_SEEDS"))


@pytest.mark.slow
@needs_fixes
@pytest.mark.parametrize("store,count", [("memory", 2000), ("sqlite", 500)])
def test_thousands_of_seeds(request: pytest.FixtureRequest, store: str, count: int) -> None:
    """``pytest -m slow tests/simulation``: thousands of seeds (RUNX_SIM_SEEDS=N
    overrides the count). Not part of the default run."""
    if not _slow_selected(request.config):
        pytest.skip("run with -m slow (or RUNX_SIM_SEEDS=N)")
    count = int(os.environ.get("RUNX_SIM_SEEDS", count))
    run = explore(Config(store=store), strategy="random", seeds=range(10_000, 10_000 + count))
    assert not run.failures, [str(r.schedule) for r in run.failures[:5]]


#: every fault kind except the misbehaving models (bounded-time has its own seeds)
ALL_BUT_HOSTILE = ("crash+takeover+close_runtime+store_closed+lost_request+applied_unanswered"
                   "+raise+retryable+hang+abandon+raises+check_raises+duplicate+lost+model_error")


@needs_fixes
@given(st.lists(st.integers(0, 4), max_size=300), st.integers(0, 1000))
@settings(max_examples=300 if DEEP else 6)
def test_hypothesis_drives_the_choice_sequence_with_faults(choices: list[int],
                                                           seed: int) -> None:
    """Hypothesis picks order and faults (every non-zero fault decision injects one), so a
    failure it finds is shrunk by hypothesis itself."""
    result = run_schedule(Config(seed=seed, only=ALL_BUT_HOSTILE), ReplayChoices(choices))
    assert result.ok, [v.to_dict() for v in result.violations]


@pytest.mark.parametrize("runs,seed", [(32, 0), (64, 2)])
def test_a_progressing_fault_free_world_is_not_a_liveness_finding(runs: int, seed: int) -> None:
    """The liveness budget and the runtime's settle/drain timeouts scale with ``runs``:
    32 fault-free Runs need ~1,300-1,500 released points (more than the fixed 1,200 the
    budget was), and at 64 one Run's settlement waits behind 63 others' steps (it took
    more than the fixed 5 s settle_timeout of virtual time: SettleTooSlow). Both were
    reported as findings of a world that was still progressing."""
    cfg = Config(seed=seed, runs=runs, faults=False)
    result = run_schedule(cfg, choices_for("random", seed, cfg))
    assert result.ok, [v.to_dict() for v in result.violations]
    assert result.steps > 1200  # more than the old fixed budget, all of it progress


def test_the_budgets_keep_small_workloads_as_they_were() -> None:
    """Up to 10 Runs the liveness budget is the 1,200 points it always was, up to 8 the
    timeouts are 5 s / 10 s: existing schedules replay unchanged."""
    small = Config(runs=3)
    assert (small.liveness_budget, small.settle, small.drain) == (1200, 5.0, 10.0)
    big = Config(runs=64)
    assert big.liveness_budget == 64 * 120 and big.drain == 80.0 and big.settle == 40.0
    assert Config(runs=64, liveness_steps=50, drain_timeout=3.0).liveness_budget == 50


def test_the_liveness_oracle_still_catches_a_run_that_never_ends_at_64_runs(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken variant: run-63's model asks for a tool on every turn, so that Run is
    stuck in its loop forever while the 63 others end. The scaled budget is still a
    bound: the world exhausts it and the oracle names run-63 (and no other Run)."""
    from runx_actors.executors import call_tools, tool_call
    from runx_actors.testing.simulation import _world

    honest = _world.SimModel.complete

    async def complete(self: _world.SimModel, request: object) -> object:
        if self.plan.run_id != "run-63":
            return await honest(self, request)
        await self.world.op("model run-63 (stuck)", ())
        return call_tools(tool_call("echo", {"n": 0, "run": "run-63"}))

    monkeypatch.setattr(_world.SimModel, "complete", complete)
    cfg = Config(seed=0, runs=64, faults=False)
    result = run_schedule(cfg, choices_for("random", 0, cfg))
    assert {(v.invariant, v.run_id) for v in result.violations} == {("liveness", "run-63")}
    assert f"after {cfg.liveness_budget} fault-free steps" in result.violations[0].message


def test_only_refuses_an_unknown_fault_kind() -> None:
    """``only`` is checked against the kinds the simulator has: a typo would inject no
    fault at all and report success."""
    from runx_actors.testing.simulation import FAULT_KINDS, UnknownFaultError

    for bad in ("nope", "crash+nope", "crash+", "+"):
        with pytest.raises(UnknownFaultError, match="known kinds: crash"):
            Config(only=bad)
    assert Config(only="+".join(FAULT_KINDS)).allows("hostile")
    with pytest.raises(ScheduleFormatError, match="unknown fault kind 'nope'"):
        Schedule.parse("v1/memory/seed=1/runs=3/steps=400/faults=1/only=nope/-")
    with pytest.raises(ScheduleFormatError, match="empty fault list"):
        Schedule.parse("v1/memory/seed=1/runs=3/steps=400/faults=1/only=/-")
