"""``check_model``: explore a ``Model`` exhaustively and check its invariants."""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from typing import Any

from ._bfs import bfs
from ._dfs import dfs
from ._model import Model
from ._parallel import parallel_bfs
from ._progress import ProgressCallback, progress_sink
from ._result import CheckResult, CheckStats, Strategy
from ._search import Outcome, SearchContext, frozen_heap

__all__ = ["check_model"]


#: The most worker processes ``check_model`` forks (``--workers``): a typo must not fork a
#: process per state (a fork bomb); more workers than cores only adds overhead.
MAX_WORKERS = 64


def check_model(
    model: Model[Any],
    *,
    strategy: Strategy | str = Strategy.BFS,
    max_states: int | None = None,
    max_depth: int | None = None,
    time_limit: float | None = None,
    check_deadlock: bool = False,
    compact: bool = False,
    progress: bool | ProgressCallback | None = None,
    workers: int = 1,
) -> CheckResult:
    """Explore every state reachable in *model* and check each against its invariants.

    States are deduplicated on ``model.canonical(state)``; each distinct state is checked
    against every invariant once, when first discovered. The search stops at the first
    violation. With ``Strategy.BFS`` its trace is a shortest one.

    While the search runs, what the process holds is moved to the cyclic collector's
    permanent generation every 256 expansions (``gc.freeze``) and handed back when it
    ends (``gc.unfreeze``), unless the collector is disabled or the caller froze objects
    itself (``_search.frozen_heap``): the search's own heap is not rescanned.

    Args:
        strategy: ``Strategy.BFS`` (default) or ``Strategy.DFS`` (or ``"bfs"`` / ``"dfs"``).
        max_states: stop after this many distinct states (>= 1); the result is then
            incomplete (``StopReason.MAX_STATES``) if more existed.
        max_depth: do not follow actions from states this many steps (>= 0) from an initial
            state; incomplete (``StopReason.MAX_DEPTH``) if any such action was enabled.
        time_limit: stop after this many seconds (> 0; checked every 256 expansions);
            incomplete (``StopReason.TIME_LIMIT``).
        check_deadlock: report a reachable state without enabled actions as a violation of
            the pseudo-invariant ``DEADLOCK`` (off: terminal states are fine).
        compact: keep 64-bit hashes of the keys instead of the keys (much less memory for
            large states; two distinct states sharing a hash, about n**2 / 2**65 likely for
            n states, would silently merge them).
        progress: ``None`` (a ``rich`` display on stderr when it is a terminal), ``True``
            (always), ``False`` (never), or a callback receiving a ``ProgressSnapshot`` at
            most four times per second.
        workers: explore with this many forked worker processes (BFS only; 1 to
            :data:`MAX_WORKERS`). The
            result (counts, verdict, counterexample) is the one ``workers=1`` gives; only
            where a time limit cuts differs. Needs the ``fork`` start method (POSIX).

    Returns:
        A ``CheckResult``: ``.ok``, ``.violation`` (invariant, message, trace) and
        ``.stats`` (counts, duration, ``complete``, ``stop_reason``).

    Raises:
        ValueError: a bound out of range, an unknown strategy, ``workers > 1`` with DFS
            or on a platform without ``fork``.
        ModelCodeError: the model's own code raised (``.where``, ``.state``, ``.trace``).
        TraceReplayError: a counterexample could not be rebuilt (``actions`` is not
            deterministic, or a hash collision in compact mode).
    """
    strategy = Strategy(strategy)
    if max_states is not None and max_states < 1:
        raise ValueError(f"max_states must be >= 1, got {max_states}")
    if max_depth is not None and max_depth < 0:
        raise ValueError(f"max_depth must be >= 0, got {max_depth}")
    if time_limit is not None and not time_limit > 0:
        raise ValueError(f"time_limit must be > 0, got {time_limit}")
    if (isinstance(workers, bool) or not isinstance(workers, int)
            or not 1 <= workers <= MAX_WORKERS):
        raise ValueError(f"workers must be an integer from 1 to {MAX_WORKERS}, got "
                         f"{workers!r}")
    if workers > 1 and strategy is not Strategy.BFS:
        raise ValueError("workers > 1 needs the BFS strategy")
    search: Callable[[SearchContext], Outcome]
    if workers > 1:
        search = functools.partial(parallel_bfs, workers=workers)
    else:
        search = bfs if strategy is Strategy.BFS else dfs
    with progress_sink(progress, f"checking {model.name} ({strategy.value})") as report:
        ctx = SearchContext(
            model,
            max_states=max_states,
            max_depth=max_depth,
            time_limit=time_limit,
            check_deadlock=check_deadlock,
            compact=compact,
            report=report,
        )
        with frozen_heap(ctx):
            outcome = search(ctx)
        duration = time.perf_counter() - ctx.start
    stats = CheckStats(
        distinct_states=outcome.distinct_states,
        transitions=outcome.transitions,
        max_depth=outcome.max_depth,
        duration_s=duration,
        states_per_s=outcome.distinct_states / duration if duration > 0 else 0.0,
        complete=outcome.stop_reason is None,
        stop_reason=outcome.stop_reason,
    )
    return CheckResult(
        model=model.name, strategy=strategy, stats=stats, violation=outcome.violation
    )
