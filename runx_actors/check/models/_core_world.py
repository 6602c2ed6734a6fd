"""The core model's refinement mapping onto the reference's values, and its own checks.

A core world is the reference's ``World`` (``runx_spec._state``) whose ``store`` is a
:class:`~._core_store.CoreStore` (real facts, real ``MachineState`` snapshots); the
environment parts — owners, the executor's records, Outcomes in flight, the fault budgets,
the user's inputs and the ghosts — are the reference's own values, moved by the
reference's own ``_moves``.

:func:`abstract_world` maps a core world onto a reference world fact by fact and state by
state (a refinement mapping): each real fact becomes the reference's abstract ``Fact``
(kind, step, call, effect, small tag) and each ``MachineState`` the reference's
``RunState``. The reference's invariants then run on the image unchanged; in particular
its INV-40 compares the reference's fold of the abstracted log with the abstracted real
projection, so any disagreement between the real ``evolve`` and the reference's meaning
of a fact is a violation. The environment reads the image too (``CoreSemantics.image``).
"""

from __future__ import annotations

import functools
from typing import Any

from ...protocol import facts as F
from ...protocol._evolve import evolve
from ...protocol.commit import fold_run
from ...protocol.errors import CorruptLogError, EvolveError, ValidationError
from ...protocol.state import (
    MachineState,
    ModelStep,
    Open,
    ToolCallState,
    ToolStep,
    validate_machine_state,
)
from ...protocol.values import (
    ResponsePolicy,
    RunFailedEnd,
    RunStatus,
    RunStoppedEnd,
    ToolCallBinding,
)
from . import _core_spec as spec
from ._core_store import CoreStore, IdentityCache

__all__ = ["abstract_fact", "abstract_state", "abstract_store", "abstract_world",
           "record_report", "state_report", "IMAGE_CACHE"]


# --------------------------------------------------------------------------- abstraction


def _policy(policy: ResponsePolicy) -> str:
    if policy is ResponsePolicy.APPROVAL_REQUIRED:
        return "approval"
    if policy is ResponsePolicy.EXTERNAL_RESPONSE:
        return "external"
    return "direct"


def _opened_call(b: ToolCallBinding) -> Any:
    waiting = b.policy is not ResponsePolicy.DIRECT_EXECUTION
    return spec.state.Call(b.call_id, _policy(b.policy),
                           spec.state.WAITING if waiting else spec.state.PENDING,
                           response=b.response.id if b.response is not None else "")


def _end_of(result: Any) -> tuple[Any, ...]:
    if result.status is RunStatus.COMPLETED:
        return ("completed",)
    if result.status is RunStatus.FAILED:
        return ("failed", result.reason.value)
    return ("stopped", result.reason.value, tuple(result.uncertain_calls), result.uncertain_model)


def _end_fact(fact: F.RunEnded) -> tuple[Any, ...]:
    end = fact.end
    if isinstance(end, RunFailedEnd):
        return ("failed", end.reason.value)
    if isinstance(end, RunStoppedEnd):
        return ("stopped", end.reason.value, tuple(end.uncertain_calls), end.uncertain_model)
    return ("completed",)


def abstract_fact(fact: F.Fact) -> Any:
    """The reference's abstract ``Fact`` for a real fact (computed once per fact object:
    real facts do not cache their hashes, and the stores of a search share their facts)."""
    return _FACTS.call(_abstract_fact, fact)


def _abstract_fact(fact: F.Fact) -> Any:
    """:func:`abstract_fact` without the cache."""
    Fact = spec.state.Fact
    kind = type(fact).__name__
    match fact:
        case F.RunCreated(run_id=rid):
            return Fact(kind, arg=rid)
        case F.InputAccepted(input=i):
            return Fact(kind, arg=i.id)
        case F.ModelStepPrepared():
            return Fact(kind, fact.step_id, arg=tuple(fact.input_ids))
        case F.ModelStepWithdrawn(step_id=s):
            return Fact(kind, s)
        case F.ModelStepFailed():
            return Fact(kind, fact.step_id, "", fact.effect, fact.failure.class_)
        case (F.ModelStepStarted() | F.ModelStepRecovered() | F.ModelStepRejected()
              | F.ModelStepCompleted()):
            return Fact(kind, fact.step_id, "", fact.effect)
        case F.ToolStepOpened():
            return Fact(kind, fact.step_id,
                        arg=(fact.source, tuple(_opened_call(b) for b in fact.calls)))
        case F.ToolCallStarted() | F.ToolCallCompleted():
            return Fact(kind, fact.step_id, fact.call_id, fact.effect)
        case F.ToolCallApproved() | F.ToolCallAnswered():
            return Fact(kind, fact.step_id, fact.call_id)
        case F.ToolCallFailed():
            return Fact(kind, fact.step_id, fact.call_id, fact.effect,
                        (fact.outcome.value, fact.failure.class_))
        case F.RunEnded():
            return Fact(kind, arg=_end_fact(fact))
    raise TypeError(f"not a fact: {fact!r}")


def _call(c: ToolCallState) -> Any:
    failure = c.failure
    return spec.state.Call(
        c.call_id, _policy(c.policy), c.status.value, c.effect,
        failure.outcome.value if failure is not None else "",
        failure.failure.class_ if failure is not None else "",
        c.waiting.id if c.waiting is not None else "")


def _tool_step(step: ToolStep) -> Any:
    return spec.state.ToolStep(step.id, step.source, tuple(_call(c) for c in step.calls))


def _current(cur: Any) -> Any:
    if cur is None:
        return None
    if isinstance(cur, Open):
        return spec.state.OPEN
    if isinstance(cur, ModelStep):
        return spec.state.ModelStep(cur.id, cur.status.value, cur.effect, cur.rejects)
    assert isinstance(cur, ToolStep)
    return _tool_step(cur)


def abstract_state(state: MachineState) -> Any:
    """The reference's ``RunState`` for a real ``MachineState`` (once per state object)."""
    return _STATES.call(_abstract_state, state)


def _abstract_state(state: MachineState) -> Any:
    """:func:`abstract_state` without the cache."""
    return spec.state.RunState(
        state.run_id, state.status.value, _current(state.current),
        tuple(i.id for i in state.pending_inputs), state.model_steps,
        _tool_step(state.last_tool_step) if state.last_tool_step is not None else None,
        _end_of(state.result) if state.result is not None else ())


@functools.lru_cache(maxsize=1 << 15)
def abstract_store(store: CoreStore) -> Any:
    """The reference's ``Store`` for a core store (log, streams, projection, index)."""
    log = tuple(_abstract_commit(c) for c in store.log)
    streams = tuple(_abstract_stream(s) for s in store.streams)
    runs = tuple(abstract_state(snap.state) for snap in store.proj)
    return spec.state.Store(store.epoch, log, streams, runs, store.cids)


@functools.lru_cache(maxsize=1 << 15)
def _abstract_commit(commit: Any) -> Any:
    """A log entry with its facts abstracted (cached: stores share most of their log)."""
    return spec.state.replace(commit, facts=tuple(abstract_fact(f) for f in commit.facts))


def _abstract_stream(stream: tuple[F.Fact, ...]) -> tuple[Any, ...]:
    """A Run's stream abstracted (cached per stream object)."""
    abstracted: tuple[Any, ...] = _STREAMS.call(_abstract_stream_now, stream)
    return abstracted


def _abstract_stream_now(stream: tuple[F.Fact, ...]) -> tuple[Any, ...]:
    return tuple(abstract_fact(f) for f in stream)


_FACTS = IdentityCache(1 << 17)
_STATES = IdentityCache(1 << 17)
_STREAMS = IdentityCache(1 << 16)


#: (world, image) of the last call: the checker asks every invariant of a state in a row
IMAGE_CACHE: list[Any] = [None, None]


def abstract_world(w: Any) -> Any:
    """The reference's ``World`` for a core world (same environment, abstracted store).

    The last image is remembered by identity: the checker evaluates all invariants of one
    state in a row."""
    if IMAGE_CACHE[0] is w:
        return IMAGE_CACHE[1]
    image = spec.state.replace(w, store=abstract_store(w.store))
    IMAGE_CACHE[0], IMAGE_CACHE[1] = w, image
    return image


# --------------------------------------------------------------------------- real checks


@functools.lru_cache(maxsize=1 << 15)
def record_report(store: CoreStore) -> str | None:
    """INV-40 on the real core: ``fold_run`` of each stream (the authoritative ``record``)
    equals the projection's snapshot, state and position."""
    for r, stream in enumerate(store.streams):
        state = _resumed_fold(store.log, r, stream)
        refused: str | None = None
        if state is None:  # not resumable, or it does not fold: fold the whole stream
            state, refused = _RECORDS.call(_record, stream, r)
        if refused is not None:
            return refused
        snap = store.proj[r]
        if snap.position != len(stream) - 1:
            return f"run-{r}: projection at position {snap.position}, log at {len(stream) - 1}"
        if state != snap.state:
            return f"run-{r}: record differs from the projection"
    return None


_RECORDS = IdentityCache()
_VALID = IdentityCache()


#: a Run's commits (a tuple of log entries, whose hashes are cached) -> the fold of their
#: facts, or None when they do not fold
_FOLDS: dict[tuple[Any, ...], MachineState | None] = {}
_FOLDS_LIMIT = 1 << 17


def _resumed_fold(log: tuple[Any, ...], r: int, stream: tuple[F.Fact, ...]) -> Any:
    """``fold_run(stream)`` resumed from the fold of the same Run's commits one commit
    shorter (cached), when *stream* is exactly the facts of Run *r*'s commits in *log*;
    None when it is not, or when the facts do not fold (the caller then folds the whole
    stream with ``fold_run`` itself, for its verdict and message).

    The resumed fold is ``fold_run``'s loop: ``evolve`` fact after fact from
    ``evolve(None, RunCreated)``, the first fact a ``RunCreated``; a left fold, so resuming
    it from the fold of a prefix gives what folding the whole stream gives
    (``tests/check/test_check_speed.py`` compares the two on every stream of a search)."""
    commits = tuple(c for c in log if c.run == r)
    i = 0
    for c in commits:
        for f in c.facts:
            if i >= len(stream) or stream[i] is not f:
                return None
            i += 1
    if i != len(stream) or not commits:
        return None
    return _fold_commits(commits)


def _fold_commits(commits: tuple[Any, ...]) -> Any:
    """The fold of the facts of *commits* (one Run's, in log order), or None when they
    are empty or do not fold. Cached per tuple of commits; resumes the shorter one."""
    if commits in _FOLDS:
        return _FOLDS[commits]
    state = _fold_commits(commits[:-1]) if len(commits) > 1 else None
    failed = len(commits) > 1 and state is None
    facts = commits[-1].facts
    if not failed:
        try:
            for fact in facts:
                if state is None and not isinstance(fact, F.RunCreated):
                    failed = True  # fold_run: the first fact is not run_created
                    break
                state = evolve(state, fact)
        except EvolveError:
            failed = True
    result = None if failed else state
    if len(_FOLDS) >= _FOLDS_LIMIT:
        _FOLDS.clear()
    _FOLDS[commits] = result
    return result


def _record(stream: tuple[F.Fact, ...], r: int) -> tuple[Any, str | None]:
    """``(fold_run(stream), None)``, or ``(None, message)`` when it raises
    ``CorruptLogError``. Cached per stream object (``_RECORDS``): far fewer distinct streams
    than stores (the default profile: 883 streams in 4,702 stores), and ``fold_run`` is a
    pure function."""
    try:
        return fold_run(stream, run_id=f"run-{r}"), None
    except CorruptLogError as exc:
        return None, (f"run-{r}: record fails: fact {exc.attrs.get('index')} "
                      f"({exc.attrs.get('wire_name')}) does not fold: {exc.message}")


@functools.lru_cache(maxsize=1 << 15)
def state_report(store: CoreStore) -> str | None:
    """INV-3 and the call table of §2.5 on every projected ``MachineState``."""
    for r, snap in enumerate(store.proj):
        state = snap.state
        problem = _VALID.call(_validation_problem, state)
        if problem is not None:
            return f"run-{r}: {problem}"
    return None


def _validation_problem(state: MachineState) -> str | None:
    """``validate_machine_state``'s message for *state*, or None when it passes."""
    try:
        validate_machine_state(state)
    except ValidationError as exc:
        return f"{exc.message}"
    return None
