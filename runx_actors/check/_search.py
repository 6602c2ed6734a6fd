"""Shared machinery of the BFS and DFS searches: bounds, keys, invariants, progress ticks.

The searches themselves (``_bfs``, ``_dfs``) copy what they need from a ``SearchContext``
into local variables, so their inner loops do no attribute lookups and no calls beyond the
model's own.
"""

from __future__ import annotations

import contextlib
import gc
import math
import sys
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import attrs

from ._errors import ModelCodeError
from ._model import Invariant, Model, ModelBase
from ._progress import REPORT_INTERVAL_S, ProgressCallback
from ._result import ProgressSnapshot, StopReason, Violation
from ._trace import Trace

__all__ = ["SearchContext", "Outcome", "TICK_MASK", "frozen_heap"]

TICK_MASK = 0xFF
"""The searches look at the clock once every ``TICK_MASK + 1`` expanded states."""


@attrs.frozen(kw_only=True)
class Outcome:
    """What a search function hands back to ``check_model``."""

    distinct_states: int
    transitions: int
    max_depth: int
    stop_reason: StopReason | None
    violation: Violation | None = None


def _canonical_of(model: Model[Any]) -> Callable[[Any], Hashable] | None:
    """``model.canonical``, or ``None`` when it is the identity (``ModelBase``'s default, or
    a duck-typed model without the method): the searches then skip the call."""
    if getattr(type(model), "canonical", ModelBase.canonical) is ModelBase.canonical:
        return None
    canonical: Callable[[Any], Hashable] = model.canonical
    return canonical


@contextlib.contextmanager
def frozen_heap(ctx: SearchContext) -> Iterator[None]:
    """Keep the cyclic garbage collector off the search's own heap while it runs.

    Everything a search keeps (the visited set, the frontier, the models' caches) lives
    until it ends, yet CPython's collector rescans every tracked object at each full
    collection, and young collections keep promoting them: about a fifth of the CPU of a
    search of the default profile (bench/RESULTS.md, sixth session). With *ctx*'s
    ``freeze`` on, every progress tick (``TICK_MASK + 1`` expansions) moves what is
    tracked to the permanent generation (``gc.freeze``, constant time); young garbage is
    still collected, and reference counting frees everything as before. On the way out
    ``gc.unfreeze`` hands the objects back to the oldest generation, so cycles that became
    garbage meanwhile are collected later. Does nothing when the collector is disabled or
    the caller froze objects itself (those are then left as they are)."""
    if not gc.isenabled() or gc.get_freeze_count():
        yield
        return
    ctx.freeze = True
    try:
        yield
    finally:
        ctx.freeze = False
        gc.unfreeze()


class SearchContext:
    """Everything a search needs, resolved once before the loop starts.

    ``keyfn`` is ``None`` when a state is its own key (no symmetry reduction, exact mode);
    otherwise it maps a state to its deduplication key: ``canonical(state)``, or in compact
    mode ``hash(canonical(state))`` (a 64-bit int).
    """

    __slots__ = (
        "check_deadlock",
        "compact",
        "deadline",
        "fast",
        "final",
        "freeze",
        "invariants",
        "keyfn",
        "max_depth",
        "max_states",
        "model",
        "next_report",
        "report",
        "start",
    )

    def __init__(
        self,
        model: Model[Any],
        *,
        max_states: int | None,
        max_depth: int | None,
        time_limit: float | None,
        check_deadlock: bool,
        compact: bool,
        report: ProgressCallback | None,
    ) -> None:
        self.model = model
        self.invariants: tuple[Invariant, ...] = tuple(model.invariants())
        canonical = _canonical_of(model)
        keyfn: Callable[[Any], Hashable] | None
        if compact:
            if canonical is None:
                keyfn = hash
            else:
                canon = canonical

                def keyfn(state: Any) -> Hashable:
                    return hash(canon(state))
        else:
            keyfn = canonical
        self.keyfn = keyfn
        self.compact = compact
        self.max_states = sys.maxsize if max_states is None else max_states
        self.max_depth = max_depth
        self.check_deadlock = check_deadlock
        fast = getattr(model, "first_violation", None)
        self.fast: Callable[[Any], tuple[Invariant, str] | None] | None = (
            fast if callable(fast) else None)
        final = getattr(model, "is_final", None)
        self.final: Callable[[Any], bool] | None = final if callable(final) else None
        self.report = report
        self.freeze = False
        """Move the heap to the collector's permanent generation at every tick (set by
        ``check_model`` around the search, :func:`frozen_heap`)."""
        self.start = time.perf_counter()
        self.deadline = math.inf if time_limit is None else self.start + time_limit
        self.next_report = self.start + REPORT_INTERVAL_S

    def key(self, state: Any) -> Hashable:
        """The deduplication key of *state* (outside the hot loops)."""
        key: Hashable = state if self.keyfn is None else self.keyfn(state)
        return key

    def first_violation(self, state: Any, trace: Trace | None) -> tuple[Invariant, str] | None:
        """The first invariant *state* violates and its message, or ``None``.

        Raises ``ModelCodeError`` (carrying *trace*) when an invariant raises.
        """
        if self.fast is not None:
            try:
                return self.fast(state)
            except Exception as exc:
                raise self.fault("invariants (first_violation)", state, trace, exc) from exc
        for invariant in self.invariants:
            try:
                message = invariant.check(state)
            except Exception as exc:
                raise self.fault(f"invariant {invariant.name}", state, trace, exc) from exc
            if message is not None:
                return invariant, message
        return None

    def is_deadlock(self, state: Any, trace: Trace | None) -> bool:
        """A state whose every action leads back to itself (or that has none) is a
        deadlock unless the model says it is final (``is_final``: an ended Run, one
        waiting for an answer from outside the system)."""
        if self.final is None:
            return True
        try:
            return not self.final(state)
        except Exception as exc:
            raise self.fault("is_final", state, trace, exc) from exc

    def violation(self, invariant: Invariant, message: str, trace: Trace) -> Violation:
        """The violation of *invariant* at ``trace.final``.

        Raises ``ModelCodeError`` when the check returned neither ``None`` nor a string (a
        boolean predicate passed as a check would otherwise always "fail").
        """
        if not isinstance(message, str):
            error = TypeError(f"check returned {message!r}; expected None or a message string")
            raise self.fault(f"invariant {invariant.name}", trace.final, trace, error) from error
        return Violation(
            invariant=invariant.name,
            message=message,
            description=invariant.description,
            trace=trace,
        )

    def tick(self, distinct: int, transitions: int, depth: int, pending: int) -> bool:
        """Called every ``TICK_MASK + 1`` expansions: report progress when due.

        Returns True when the time limit has passed (the search must stop).
        """
        if self.freeze:
            gc.freeze()
        now = time.perf_counter()
        if self.report is not None and now >= self.next_report:
            self.next_report = now + REPORT_INTERVAL_S
            elapsed = now - self.start
            self.report(
                ProgressSnapshot(
                    distinct_states=distinct,
                    transitions=transitions,
                    depth=depth,
                    pending=pending,
                    elapsed_s=elapsed,
                    states_per_s=distinct / elapsed if elapsed > 0 else 0.0,
                )
            )
        return now >= self.deadline

    def fault(
        self, where: str, state: Any, trace: Trace | None, exc: BaseException
    ) -> ModelCodeError:
        """The error reporting that the model's code raised *exc* in *where*."""
        return ModelCodeError(
            f"model {self.model.name!r} raised {type(exc).__name__} in {where}: {exc}",
            where=where,
            state=state,
            trace=trace,
        )
