"""Small synthetic models whose state spaces are known analytically (checker tests only)."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any

from runx_actors.check import CheckConfig, Invariant, Model, ModelBase, Trace

# --- a walker on a grid --------------------------------------------------------------------


class Grid(ModelBase):
    """A walker on the (n+1) x (n+1) grid from (0, 0); moves right, up, left, down.

    (n+1)**2 states, 4 (n+1)**2 - 4 (n+1) transitions, max depth 2n. With *bug*, the
    invariant NOT-BUG fails at that cell, at distance x + y from the start.
    """

    name = "grid"

    def __init__(self, n: int, bug: tuple[int, int] | None = None) -> None:
        self.n = n
        self.bug = bug

    def initial_states(self) -> list[tuple[int, int]]:
        return [(0, 0)]

    def actions(self, state: tuple[int, int]) -> list[tuple[str, tuple[int, int]]]:
        x, y = state
        n = self.n
        out = []
        if x < n:
            out.append(("walker: right", (x + 1, y)))
        if y < n:
            out.append(("walker: up", (x, y + 1)))
        if x > 0:
            out.append(("walker: left", (x - 1, y)))
        if y > 0:
            out.append(("walker: down", (x, y - 1)))
        return out

    def invariants(self) -> list[Invariant]:
        bug = self.bug
        return [
            Invariant(
                "NOT-BUG",
                "the walker never reaches the bug cell",
                lambda s: f"walker at {s}" if s == bug else None,
            )
        ]

    def describe(self, state: tuple[int, int]) -> dict[str, Any]:
        return {"x": state[0], "y": state[1]}


# --- n processes and a lock ----------------------------------------------------------------

IDLE, TRYING, READY, CRITICAL = "idle", "trying", "ready", "critical"


class Mutex(ModelBase):
    """*procs* symmetric processes sharing a lock: idle → trying → critical → idle.

    Correct: entering is one atomic test-and-set. Racy (``racy=True``): a process that saw
    the lock free becomes READY, and enters later without looking again, so two processes
    can both enter. State: ``(pcs, locked)``.

    Correct version: 2**n + n * 2**(n-1) states; with ``symmetric=True``, 2n + 1.
    """

    name = "mutex"

    def __init__(self, procs: int = 2, *, racy: bool = False, symmetric: bool = False) -> None:
        self.procs = procs
        self.racy = racy
        self.symmetric = symmetric

    def initial_states(self) -> list[tuple[tuple[str, ...], bool]]:
        return [((IDLE,) * self.procs, False)]

    def actions(self, state: tuple[tuple[str, ...], bool]) -> Iterator[tuple[str, Any]]:
        pcs, locked = state
        for i, pc in enumerate(pcs):

            def moved(new_pc: str, new_lock: bool, i: int = i) -> tuple[tuple[str, ...], bool]:
                return ((*pcs[:i], new_pc, *pcs[i + 1 :]), new_lock)

            if pc == IDLE:
                yield f"p{i}: try", moved(TRYING, locked)
            elif pc == TRYING and not locked:
                if self.racy:
                    yield f"p{i}: see lock free", moved(READY, locked)
                else:
                    yield f"p{i}: acquire", moved(CRITICAL, True)
            elif pc == READY:
                yield f"p{i}: enter", moved(CRITICAL, True)
            elif pc == CRITICAL:
                yield f"p{i}: release", moved(IDLE, False)

    def invariants(self) -> list[Invariant]:
        def mutual_exclusion(state: tuple[tuple[str, ...], bool]) -> str | None:
            inside = [f"p{i}" for i, pc in enumerate(state[0]) if pc == CRITICAL]
            return None if len(inside) <= 1 else f"{' and '.join(inside)} are both critical"

        return [Invariant("MUTEX", "at most one process is critical", mutual_exclusion)]

    def canonical(self, state: tuple[tuple[str, ...], bool]) -> Hashable:
        if not self.symmetric:
            return state
        return (tuple(sorted(state[0])), state[1])


# --- counters ------------------------------------------------------------------------------


class Counter(ModelBase):
    """0 → 1 → 2 → … up to *limit* (inclusive; None: forever). One state per value."""

    name = "counter"

    def __init__(self, limit: int | None = None, *, bad: int | None = None) -> None:
        self.limit = limit
        self.bad = bad

    def initial_states(self) -> list[int]:
        return [0]

    def actions(self, state: int) -> list[tuple[str, int]]:
        if self.limit is not None and state >= self.limit:
            return []
        return [("tick", state + 1)]

    def invariants(self) -> list[Invariant]:
        bad = self.bad
        return [Invariant("NOT-BAD", "never the bad value", lambda s: "bad" if s == bad else None)]


class Exploding(ModelBase):
    """A counter whose ``actions`` raises at *at* (a buggy model)."""

    name = "exploding"

    def __init__(self, at: int) -> None:
        self.at = at

    def initial_states(self) -> list[int]:
        return [0]

    def actions(self, state: int) -> list[tuple[str, int]]:
        if state == self.at:
            raise RuntimeError(f"boom at {state}")
        return [("tick", state + 1)]

    def invariants(self) -> list[Invariant]:
        return []


# --- helpers -------------------------------------------------------------------------------


def assert_trace_is_a_path(model: Model[Any], trace: Trace) -> None:
    """Every step of *trace* is an enabled action of the previous state."""
    assert trace.initial in list(model.initial_states())
    current = trace.initial
    for label, state in trace.steps:
        assert (label, state) in list(model.actions(current)), (label, state)
        current = state


def build_mutex(config: CheckConfig, variant: str | None = None) -> Mutex:
    """A ``build_model`` for the registry tests: ``runs + 1`` processes."""
    return Mutex(config.runs + 1, racy=variant == "racy")


VARIANTS: dict[str, str] = {"racy": "check-then-act lock acquisition"}
