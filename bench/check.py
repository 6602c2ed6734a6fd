"""Throughput of the model checker: distinct states per second.

    python bench/check.py [--quick] [--time-limit SECONDS]

Runs ``check_model`` on synthetic models (tuple states; frozen attrs states with symmetry
reduction) and on the registered models (``reference``, ``core``) that are importable,
at the default ``CheckConfig`` and a larger one, and prints one table. Not a test: nothing
here asserts a time.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import attrs
from rich.console import Console
from rich.table import Table

from runx_actors.check import (
    CheckConfig,
    CheckError,
    CheckResult,
    Invariant,
    Model,
    ModelBase,
    Strategy,
    check_model,
)
from runx_actors.check.models import load_model, model_names

# --- synthetic models ----------------------------------------------------------------------


class Grid(ModelBase):
    """A walker on an (n+1)^2 grid: tuple states, four actions, a trivial invariant."""

    name = "grid"

    def __init__(self, n: int) -> None:
        self.n = n

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
        n = self.n
        return [Invariant("IN-GRID", "stays on the grid", lambda s: None if max(s) <= n else "off")]


@attrs.frozen(cache_hash=True)
class Procs:
    pcs: tuple[str, ...]
    locked: bool


class Mutex(ModelBase):
    """*n* processes and a test-and-set lock; frozen attrs states; optional symmetry."""

    def __init__(self, n: int, *, symmetric: bool) -> None:
        self.n = n
        self.symmetric = symmetric
        self.name = f"mutex{'-sym' if symmetric else ''}"

    def initial_states(self) -> list[Procs]:
        return [Procs(("idle",) * self.n, False)]

    def actions(self, state: Procs) -> Iterator[tuple[str, Procs]]:
        pcs = state.pcs
        for i, pc in enumerate(pcs):
            if pc == "idle":
                yield f"p{i}: try", Procs((*pcs[:i], "trying", *pcs[i + 1 :]), state.locked)
            elif pc == "trying" and not state.locked:
                yield f"p{i}: acquire", Procs((*pcs[:i], "critical", *pcs[i + 1 :]), True)
            elif pc == "critical":
                yield f"p{i}: release", Procs((*pcs[:i], "idle", *pcs[i + 1 :]), False)

    def invariants(self) -> list[Invariant]:
        return [
            Invariant(
                "MUTEX",
                "at most one process is critical",
                lambda s: None if s.pcs.count("critical") <= 1 else "two critical",
            )
        ]

    def canonical(self, state: Procs) -> Hashable:
        return (tuple(sorted(state.pcs)), state.locked) if self.symmetric else state


# --- the run -------------------------------------------------------------------------------

LARGER = CheckConfig(runs=1, calls=3, crashes=2, takeovers=1, duplicates=2)


def _cases(quick: bool) -> list[tuple[str, Callable[[], Model[Any]], Strategy]]:
    grid, procs = (150, 10) if quick else (500, 14)
    cases: list[tuple[str, Callable[[], Model[Any]], Strategy]] = []
    for strategy in Strategy:
        cases.append((f"grid n={grid}", lambda: Grid(grid), strategy))
        cases.append((f"mutex n={procs}", lambda: Mutex(procs, symmetric=False), strategy))
    cases.append((f"mutex n={procs} symmetric", lambda: Mutex(procs, symmetric=True), Strategy.BFS))
    for name in model_names():
        for label, config in (("default", CheckConfig()), ("larger", LARGER)):
            if quick and label == "larger":
                continue

            def build(name: str = name, config: CheckConfig = config) -> Model[Any]:
                return load_model(name, config, None)

            cases.append((f"{name} ({label}: {_config(config)})", build, Strategy.BFS))
    return cases


def _config(config: CheckConfig) -> str:
    return ",".join(f"{k}={v}" for k, v in attrs.asdict(config).items())


def _completeness(result: CheckResult) -> str:
    stats = result.stats
    if stats.complete:
        return "yes"
    reason = stats.stop_reason.value if stats.stop_reason is not None else "?"
    if result.violation is not None:
        reason += f": {result.violation.invariant}"
    return f"no ({reason})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller models, no larger configs")
    parser.add_argument("--time-limit", type=float, default=300.0, help="per case, seconds")
    args = parser.parse_args()
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    notes: list[str] = []
    table = Table(title="runx_actors.check throughput")
    for column in ("model", "strategy", "distinct states", "transitions", "max depth",
                   "time (s)", "states/s", "complete"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for title, build, strategy in _cases(args.quick):
        try:
            model = build()
        except CheckError as exc:
            table.add_row(title, strategy.value, "[dim]skipped[/]")
            notes.append(f"{title}: {exc.message}")
            continue
        started = time.perf_counter()
        result: CheckResult = check_model(
            model, strategy=strategy, time_limit=args.time_limit, progress=None
        )
        elapsed = time.perf_counter() - started
        stats = result.stats
        table.add_row(
            title,
            strategy.value,
            f"{stats.distinct_states:,}",
            f"{stats.transitions:,}",
            str(stats.max_depth),
            f"{elapsed:.2f}",
            f"{stats.states_per_s:,.0f}",
            _completeness(result),
        )
    console.print(table)
    for note in notes:
        console.print(f"[dim]skipped {note}[/]")


if __name__ == "__main__":
    main()
