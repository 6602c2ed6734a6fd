"""Throughput of the model checker: distinct states per second.

    python bench/check.py [--quick] [--time-limit SECONDS] [--workers N]

Runs ``check_model`` on synthetic models (tuple states; frozen attrs states with symmetry
reduction) and on the registered models (``reference``, ``core``) that are importable,
in the bare ``CheckConfig()``, the ``default`` profile and the bare one with three calls
(64-bit fingerprints, as the CLI), and prints one table with wall and CPU time (on a
loaded machine states per CPU-second is the figure to compare). Not a test: nothing here
asserts a time. With ``--workers N`` the registered models' default profile also runs with
N worker processes (``check_model(workers=N)``); its CPU column then adds the workers' CPU
time (``RUSAGE_CHILDREN``) to the coordinator's.
"""

from __future__ import annotations

import argparse
import resource
import time
from collections.abc import Callable, Hashable, Iterator
from typing import Any

import attrs
from rich.console import Console
from rich.table import Table

from runx_actors.check import (
    PROFILES,
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

#: The registered models' configurations: the bare environment (``CheckConfig()``), the
#: ``default`` profile (what ``runx-actors check`` runs) and the bare one with three calls.
CONFIGS: tuple[tuple[str, CheckConfig], ...] = (
    ("bare", CheckConfig()),
    ("profile default", PROFILES["default"]),
    ("bare, calls=3", CheckConfig(calls=3)),
)

Case = tuple[str, Callable[[], Model[Any]], Strategy, bool, int]


def _cases(quick: bool, workers: int) -> list[Case]:
    """(title, build, strategy, compact, workers). The registered models run as the CLI
    runs them: BFS over 64-bit fingerprints."""
    grid, procs = (150, 10) if quick else (500, 14)
    cases: list[Case] = []
    for strategy in Strategy:
        cases.append((f"grid n={grid}", lambda: Grid(grid), strategy, False, 1))
        cases.append((f"mutex n={procs}", lambda: Mutex(procs, symmetric=False), strategy,
                      False, 1))
    cases.append((f"mutex n={procs} symmetric", lambda: Mutex(procs, symmetric=True),
                  Strategy.BFS, False, 1))
    for name in model_names():
        for label, config in CONFIGS if not quick else CONFIGS[:2]:

            def build(name: str = name, config: CheckConfig = config) -> Model[Any]:
                return load_model(name, config, None)

            cases.append((f"{name} ({label})", build, Strategy.BFS, True, 1))
            if workers > 1 and config == PROFILES["default"]:
                cases.append((f"{name} ({label}, {workers} workers)", build, Strategy.BFS,
                              True, workers))
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
    parser.add_argument("--workers", type=int, default=1,
                        help="also run the models' default profile with N worker processes")
    args = parser.parse_args()
    console = Console()
    if not console.is_terminal:
        console = Console(width=160)
    notes: list[str] = []
    table = Table(title="runx_actors.check throughput")
    for column in ("model", "strategy", "distinct states", "transitions", "max depth",
                   "time (s)", "CPU (s)", "states/s", "states/CPU-s", "complete"):
        table.add_column(column, justify="left" if column == "model" else "right")
    for title, build, strategy, compact, workers in _cases(args.quick, args.workers):
        try:
            model = build()
        except CheckError as exc:
            table.add_row(title, strategy.value, "[dim]skipped[/]")
            notes.append(f"{title}: {exc.message}")
            continue
        started, cpu_started = time.perf_counter(), time.process_time()
        children = resource.getrusage(resource.RUSAGE_CHILDREN)
        result: CheckResult = check_model(
            model, strategy=strategy, time_limit=args.time_limit, progress=False,
            compact=compact, workers=workers,
        )
        elapsed = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (time.process_time() - cpu_started + after.ru_utime - children.ru_utime
               + after.ru_stime - children.ru_stime)
        stats = result.stats
        table.add_row(
            title,
            strategy.value,
            f"{stats.distinct_states:,}",
            f"{stats.transitions:,}",
            str(stats.max_depth),
            f"{elapsed:.2f}",
            f"{cpu:.2f}",
            f"{stats.states_per_s:,.0f}",
            f"{stats.distinct_states / cpu:,.0f}" if cpu > 0 else "-",
            _completeness(result),
        )
    console.print(table)
    for note in notes:
        console.print(f"[dim]skipped {note}[/]")


if __name__ == "__main__":
    main()
