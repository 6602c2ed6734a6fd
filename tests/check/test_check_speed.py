"""The checker's speed-ups change nothing it explores: each cache and incremental check
gives what the direct computation gives.

* the reference's store-only checks walk only the commits a log added to a shorter one
  (``_invariants._log_report``); the whole-log walk (``_log_report_batch``) is the oracle;
* the core's ``INV-40.record`` resumes ``fold_run`` from the fold of a shorter stream
  (``_core_world._resumed_fold``); ``fold_run`` itself is the oracle;
* commits and the adversary's forgeries are computed once per store and applied to every
  world holding it (``_moves._commit``, ``_moves._forged_moves``); and the search skips the
  key of a self-loop. With every cache off (a fresh table on each lookup, the whole-log
  walk, whole-stream folds) a search gives the same counts and verdict.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from typing import Any

import attrs
import pytest

from runx_actors.check import PROFILES, CheckConfig, check_model
from runx_actors.check.models import _core_forged as core_forged
from runx_actors.check.models import _core_semantics as core_semantics
from runx_actors.check.models import _core_world as core_world
from runx_actors.check.models import core, load_model
from runx_actors.protocol.commit import fold_run

moves = pytest.importorskip("runx_spec._moves")
invariants = pytest.importorskip("runx_spec._invariants")

#: a small configuration with every kind of move (crash, takeover, duplicate, inputs,
#: approvals, cancel, failures, malformed answers, the adversary)
SMALL = CheckConfig(runs=1, calls=1, crashes=1, takeovers=1, duplicates=1, inputs=1,
                    approvals=False, malformed=True, cancel=True, failures=True,
                    adversarial=True)


def _worlds(model: Any, limit: int) -> Iterator[Any]:
    """The first *limit* distinct worlds of a breadth-first search of *model*."""
    start = list(model.initial_states())
    seen = {model.canonical(s) for s in start}
    queue = collections.deque(start)
    count = 0
    while queue and count < limit:
        w = queue.popleft()
        count += 1
        yield w
        for _, nxt in model.actions(w):
            key = model.canonical(nxt)
            if key not in seen:
                seen.add(key)
                queue.append(nxt)


@pytest.mark.parametrize("variant", [None, "replay_reapplies", "no_epoch_check",
                                     "run_ended_while_executing"])
def test_incremental_log_report_equals_the_whole_log_walk(variant: str | None) -> None:
    model = load_model("reference", SMALL, variant)
    breaches: collections.Counter[str] = collections.Counter()
    stores = {w.store for w in _worlds(model, 1500)}
    for store in stores:
        want = invariants._log_report_batch(store)
        assert invariants._log_report(store) == want
        breaches.update(want.keys())
    if variant is not None:  # the comparison covered stores that break something
        assert breaches, f"{variant}: no store with a log-level breach was compared"


def test_core_image_log_report_equals_the_whole_log_walk() -> None:
    model = load_model("core", SMALL, "complete_non_executing")
    for w in _worlds(model, 800):
        image = core_world.abstract_store(w.store)
        assert invariants._log_report(image) == invariants._log_report_batch(image)


@pytest.mark.parametrize("variant", [None, "complete_non_executing", "replay_reapplies"])
def test_resumed_fold_equals_fold_run(variant: str | None) -> None:
    model = load_model("core", SMALL, variant)
    resumed = 0
    for w in _worlds(model, 800):
        store = w.store
        for r, stream in enumerate(store.streams):
            state = core_world._resumed_fold(store.log, r, stream)
            if state is not None:
                resumed += 1
                assert state == fold_run(stream, run_id=f"run-{r}")
        assert core_world.record_report(store) == _record_report_whole(store)
    assert resumed > 0


def _record_report_whole(store: Any) -> str | None:
    """``record_report`` folding every stream from scratch (no resumed fold)."""
    for r, stream in enumerate(store.streams):
        state, refused = core_world._record(stream, r)
        if refused is not None:
            return refused
        snap = store.proj[r]
        if snap.position != len(stream) - 1:
            return f"run-{r}: projection at position {snap.position}, log at {len(stream) - 1}"
        if state != snap.state:
            return f"run-{r}: record differs from the projection"
    return None


def test_resumed_fold_refuses_a_stream_that_is_not_the_log() -> None:
    model = load_model("core", SMALL)
    w = next(iter(model.initial_states()))
    store = w.store
    stream = store.streams[0]
    assert core_world._resumed_fold(store.log, 0, stream) == fold_run(stream)
    assert core_world._resumed_fold(store.log, 0, stream[:-1]) is None  # shorter
    assert core_world._resumed_fold(store.log, 0, (*stream, stream[-1])) is None  # longer
    copies = tuple(attrs.evolve(f) for f in stream)  # equal facts, other objects
    assert copies == stream
    assert core_world._resumed_fold(store.log, 0, copies) is None


def test_actions_with_warm_caches_equal_cold_ones() -> None:
    for name in ("reference", "core"):
        model = load_model(name, SMALL)
        for w in _worlds(model, 400):
            warm = list(model.actions(w))
            with pytest.MonkeyPatch.context() as patch:
                _no_caches(patch)
                cold = list(model.actions(w))
            assert [label for label, _ in warm] == [label for label, _ in cold]
            assert [nxt for _, nxt in warm] == [nxt for _, nxt in cold]


class _Direct:
    """An ``IdentityCache`` that computes every time."""

    def call(self, func: Any, *args: Any) -> Any:
        return func(*args)


def _no_caches(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every cache and incremental check of the speed-ups off (and the per-store caches
    that would answer from the run before)."""
    monkeypatch.setattr(moves, "_cache", lambda ctx, what: _NoCache())
    monkeypatch.setattr(moves, "_commit", moves._commit_now)
    monkeypatch.setattr(moves, "_forged_moves", _forged_direct)
    monkeypatch.setattr(invariants, "_log_report", invariants._log_report_batch)
    monkeypatch.setattr(invariants, "store_verdict", invariants.store_verdict.__wrapped__)
    monkeypatch.setattr(core_world, "_resumed_fold", lambda log, r, stream: None)
    monkeypatch.setattr(core_world, "_RECORDS", _Direct())
    monkeypatch.setattr(core_world, "_VALID", _Direct())
    monkeypatch.setattr(core_forged, "_FOREIGN", _Direct())
    uncached = core_forged.forged_outcomes.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(core_semantics, "forged_outcomes", uncached)
    monkeypatch.setattr(core, "_store_verdict", core._store_verdict.__wrapped__)
    monkeypatch.setattr(core, "record_report", core_world.record_report.__wrapped__)
    monkeypatch.setattr(core, "state_report", core_world.state_report.__wrapped__)


def _forged_direct(ctx: Any, w: Any) -> Iterator[tuple[str, Any]]:
    """``_moves._forged_moves`` computing every forgery on every world."""
    if any(x.alive and x.epoch == w.store.epoch and x.phase != "fenced" for x in w.owners):
        yield from moves._forged_now(ctx, w)


class _NoCache(dict):  # type: ignore[type-arg]
    """A cache table that forgets everything (every lookup misses)."""

    def __setitem__(self, key: Any, value: Any) -> None:
        pass


@pytest.mark.parametrize("name,variant", [("reference", None), ("core", None),
                                          ("reference", "dispose_orphaned"),
                                          ("core", "complete_non_executing"),
                                          ("core", "terminal_before_replay")])
def test_search_without_caches_gives_the_same_result(name: str, variant: str | None,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    config = PROFILES["quick"] if variant is None else SMALL

    def run() -> Any:
        result = check_model(load_model(name, config, variant), compact=True, progress=False)
        violation = result.violation
        return (result.stats.distinct_states, result.stats.transitions,
                result.stats.max_depth, violation and violation.invariant,
                violation and len(violation.trace.steps))

    fast = run()
    moves._CACHES.clear()
    _no_caches(monkeypatch)
    slow = run()
    assert fast == slow
    if variant is not None:
        assert fast[3] is not None  # the variant is caught, with the same shortest trace
