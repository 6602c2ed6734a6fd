"""The checker's speed-ups change nothing it explores: each cache and incremental check
gives what the direct computation gives.

* the reference's store-only checks walk only the commits a log added to a shorter one
  (``_invariants._log_report``); the whole-log walk (``_log_report_batch``) is the oracle;
* the core's ``INV-40.record`` resumes ``fold_run`` from the fold of a shorter stream
  (``_core_world._resumed_fold``); ``fold_run`` itself is the oracle;
* commits and the adversary's forgeries are computed once per store and applied to every
  world holding it (``_moves._commit``, ``_moves._forged_moves``); and the search skips the
  key of a self-loop. With every cache off (a fresh table on each lookup, the whole-log
  walk, whole-stream folds) a search gives the same counts and verdict;
* a commit's decision is made once per ``commit_key`` (epoch, projection, commit-id index
  with facts; not the log's ghost data) and redone on each store by appending the same
  group (``_moves._commit_effect``; the core's ``_core_store.decision``); the user's moves
  are computed once per ``(store, inputs sent, duplicates left)`` (``_moves._user_moves``);
  the reduction once per ``(owners, epoch)``, and not at all for a world without a
  fenced writer still driving (``_moves.canonical``); the core's plan and
  recovery targets once per state object. Each key is shown to
  matter: with a key that leaves out one thing the moves read, the comparison of cached
  and direct moves fails.
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
from runx_actors.check.models import _core_store as core_store
from runx_actors.check.models import _core_world as core_world
from runx_actors.check.models import core, load_model
from runx_actors.protocol.commit import fold_run

moves = pytest.importorskip("runx_spec._moves")
invariants = pytest.importorskip("runx_spec._invariants")
semantics = pytest.importorskip("runx_spec._semantics")
reference = pytest.importorskip("runx_spec.reference")

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


def test_the_run_walk_memo_tells_bases_apart() -> None:
    """The memoized walk step (``_invariants._step_run``) is keyed on what it reads of a
    commit, the base included: the same model start with a base that had seen a pending
    input breaks INV-14, and walking the real log first must not hide that."""
    model = load_model("reference", attrs.evolve(SMALL, stale_reads=True))
    breaches = 0
    for w in _worlds(model, 2000):
        log = w.store.log
        for i, c in enumerate(log):
            if any(f.kind == "ModelStepStarted" for f in c.facts):
                late = attrs.evolve(c, base=10**6)
                bumped = attrs.evolve(w.store, log=(*log[:i], late, *log[i + 1:]))
                invariants._log_report(w.store)  # the real log is walked first
                want = invariants._log_report_batch(bumped)
                assert invariants._log_report(bumped) == want
                breaches += "INV-14" in want
    assert breaches  # some bumped start did break INV-14


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
    monkeypatch.setattr(moves, "_user_moves", _user_direct)
    monkeypatch.setattr(moves, "canonical", _canonical_direct)
    monkeypatch.setattr(reference, "canonical", _canonical_direct)
    monkeypatch.setattr(core_store, "decision", core_store.decide_now)
    monkeypatch.setattr(invariants, "_log_report", invariants._log_report_batch)
    monkeypatch.setattr(invariants, "store_verdict", invariants.store_verdict.__wrapped__)
    monkeypatch.setattr(core_world, "_resumed_fold", lambda log, r, stream: None)
    monkeypatch.setattr(core_world, "_RECORDS", _Direct())
    monkeypatch.setattr(core_world, "_VALID", _Direct())
    for table in ("_FACTS", "_STATES", "_STREAMS"):
        monkeypatch.setattr(core_world, table, _Direct())
    monkeypatch.setattr(core_semantics, "PLANS", _Direct())
    monkeypatch.setattr(core_semantics, "EXECUTING", _Direct())
    monkeypatch.setattr(core_forged, "_FOREIGN", _Direct())
    uncached = core_forged.forged_outcomes.__wrapped__  # type: ignore[attr-defined]
    monkeypatch.setattr(core_semantics, "forged_outcomes", uncached)
    monkeypatch.setattr(core, "_store_verdict", core._store_verdict.__wrapped__)
    monkeypatch.setattr(core, "record_report", core_world.record_report.__wrapped__)
    monkeypatch.setattr(core, "state_report", core_world.state_report.__wrapped__)


def _user_direct(ctx: Any, w: Any) -> Iterator[tuple[str, Any]]:
    """``_moves._user_moves`` computing every move on every world."""
    if any(x.alive and x.epoch == w.store.epoch and x.phase != "fenced" for x in w.owners):
        yield from moves._user_now(ctx, w)


def _canonical_direct(w: Any) -> Any:
    """``_moves.canonical`` without its table."""
    return moves._canonical_owners(w)


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


def _cached_and_direct_moves_differ(name: str, config: Any, limit: int) -> bool:
    """Whether, on some world among the first *limit* of a search, the moves computed with
    the caches (warm: filled by the worlds before) differ from the direct computation."""
    model = load_model(name, config)
    for w in _worlds(model, limit):
        warm = list(model.actions(w))
        with pytest.MonkeyPatch.context() as patch:
            _no_caches(patch)
            cold = list(model.actions(w))
        if warm != cold:
            return True
    return False


def test_redone_commits_equal_the_direct_ones_on_the_default_profile() -> None:
    """The decisions shared between stores of one commit key, on the configuration the
    CLI runs: every move of the first worlds equals its direct computation."""
    for name in ("reference", "core"):
        assert not _cached_and_direct_moves_differ(name, PROFILES["default"], 600)


def _commit_key_of_the_projection(self: Any, store: Any) -> Any:
    """A broken ``commit_key``: the epoch and the projection only, without the positions
    (the Prepare CAS reads them) and the commit-id index (the replay lookup reads it).
    (Either one alone is not caught: in these configurations the projection and either
    one determine the other.)"""
    return (store.epoch, store.runs)


def _core_commit_key_of_the_epoch(store: Any) -> Any:
    """A broken core ``commit_key``: the epoch only, without the projection and the index
    (either one alone is not caught: in a correct store each determines the other)."""
    return (store.epoch,)


def _user_key_without_duplicates(w: Any) -> Any:
    """A broken user key: it leaves out whether a duplicate is left (the resubmissions
    need one). (Leaving out the inputs sent is not caught: the store shows them.)"""
    return (w.store, w.inputs_sent)


@pytest.mark.parametrize("broken", ["commit_key", "core_commit_key", "user_key"])
def test_the_comparison_catches_a_key_that_omits_a_read(broken: str,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Each cache key is needed whole: leave out one thing the moves read, and the cached
    moves differ from the direct ones on some world (so the comparisons above, which
    pass, would fail if a key were incomplete)."""
    moves._CACHES.clear()
    if broken == "commit_key":
        monkeypatch.setattr(semantics.ReferenceSemantics, "commit_key",
                            _commit_key_of_the_projection)
        name = "reference"
    elif broken == "core_commit_key":
        monkeypatch.setattr(core_store, "commit_key", _core_commit_key_of_the_epoch)
        monkeypatch.setattr(core_store, "_NUMBER_OF_STORE", {})
        monkeypatch.setattr(core_store, "_NUMBER_OF_KEY", {})
        monkeypatch.setattr(core_store, "_DECISIONS", {})
        name = "core"
    else:
        monkeypatch.setattr(moves, "_user_key", _user_key_without_duplicates)
        name = "reference"
    try:
        assert _cached_and_direct_moves_differ(name, SMALL, 1500)
    finally:
        moves._CACHES.clear()


def test_core_store_hash_agrees_with_equality() -> None:
    """``CoreStore.__hash__`` (snapshot hashes per object, streams left out): equal stores
    built from other objects hash alike, and a store whose projection alone differs (what
    ``replay_reapplies`` makes) hashes differently from the one it came from."""
    model = load_model("core", SMALL)
    compared = 0
    for w in _worlds(model, 300):
        store = w.store
        copy = core_store.CoreStore(
            store.epoch, tuple(attrs.evolve(c) for c in store.log),
            tuple(tuple(attrs.evolve(f) for f in s) for s in store.streams),
            tuple(attrs.evolve(p, state=attrs.evolve(p.state)) for p in store.proj),
            frozenset(store.cids), store.loads)
        assert copy == store and copy.proj[0] is not store.proj[0]
        assert hash(copy) == hash(store)
        compared += 1
    assert compared == 300
    store = next(iter(model.initial_states())).store
    snap = store.proj[0]
    other = store.with_projection(0, attrs.evolve(snap, state=attrs.evolve(
        snap.state, model_steps=snap.state.model_steps + 1)))
    assert other != store and hash(other) != hash(store)


def test_the_plan_cache_is_per_implementation() -> None:
    """The core's plans are cached per (implementation, state object, run, position): a
    broken planner checked after the correct one in the same process still plans its own
    way (with the implementation left out of the key, ``start_despite_inputs`` would
    reuse the correct plans and not be caught)."""
    config = CheckConfig(runs=1, calls=1, crashes=0, takeovers=0, duplicates=0, inputs=1,
                         adversarial=False)
    assert check_model(load_model("core", config), progress=False).ok
    result = check_model(load_model("core", config, "start_despite_inputs"), progress=False)
    assert result.violation is not None and result.violation.invariant == "INV-14"
