"""Progress reporting of a running search: a callback type and a ``rich`` display.

The checker calls the callback at most ``1 / REPORT_INTERVAL_S`` times per second, so a
display costs nothing per state.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator
from types import TracebackType
from typing import TextIO

from rich.console import Console
from rich.progress import Progress, SpinnerColumn, TaskID, TextColumn, TimeElapsedColumn

from ._result import ProgressSnapshot

__all__ = ["ProgressCallback", "RichProgress", "LineProgress", "REPORT_INTERVAL_S",
           "LINE_INTERVAL_S", "progress_sink"]

ProgressCallback = Callable[[ProgressSnapshot], None]
"""Receives a snapshot of a running search; must be cheap and must not raise."""

REPORT_INTERVAL_S = 0.25
"""Minimum seconds between two progress reports."""

LINE_INTERVAL_S = 5.0
"""Seconds between two plain progress lines (stderr not a terminal: CI logs)."""


class RichProgress:
    """A one-line live display on stderr (spinner, elapsed time, counters).

    Use as a context manager; inside it, the instance is a ``ProgressCallback``. The line
    disappears when the block is left.
    """

    def __init__(self, title: str, *, console: Console | None = None) -> None:
        self._progress = Progress(
            SpinnerColumn(),
            TextColumn("[bold]{task.description}"),
            TimeElapsedColumn(),
            TextColumn("{task.fields[counters]}"),
            console=console or Console(stderr=True),
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._title = title
        self._task: TaskID | None = None

    def __enter__(self) -> RichProgress:
        self._progress.start()
        self._task = self._progress.add_task(self._title, total=None, counters="starting")
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()

    def __call__(self, snapshot: ProgressSnapshot) -> None:
        if self._task is None:
            return
        counters = (
            f"{snapshot.distinct_states:,} states  {snapshot.transitions:,} transitions  "
            f"depth {snapshot.depth}  pending {snapshot.pending:,}  "
            f"{snapshot.states_per_s:,.0f} states/s"
        )
        self._progress.update(self._task, counters=counters, refresh=True)


class LineProgress:
    """Plain progress lines on a stream (default stderr), one every *interval* seconds of
    search time: what a CI log shows while a long check runs. A ``ProgressCallback``."""

    def __init__(self, title: str, *, stream: TextIO | None = None,
                 interval: float = LINE_INTERVAL_S) -> None:
        self._title = title
        self._stream = stream
        self._interval = interval
        self._next = interval

    def __call__(self, snapshot: ProgressSnapshot) -> None:
        if snapshot.elapsed_s < self._next:
            return
        self._next = snapshot.elapsed_s + self._interval
        stream = self._stream if self._stream is not None else sys.stderr
        print(f"{self._title}: {snapshot.elapsed_s:.0f} s  {snapshot.distinct_states:,} "
              f"states  {snapshot.transitions:,} transitions  depth {snapshot.depth}  "
              f"pending {snapshot.pending:,}  {snapshot.states_per_s:,.0f} states/s",
              file=stream, flush=True)


@contextlib.contextmanager
def progress_sink(
    progress: bool | ProgressCallback | None, title: str
) -> Iterator[ProgressCallback | None]:
    """Resolve the ``progress`` argument of ``check_model`` to a callback (or ``None``).

    ``None``: a ``RichProgress`` when stderr is a terminal, else a ``LineProgress`` (a
    plain line every ``LINE_INTERVAL_S`` seconds). ``True``: always a ``RichProgress``.
    ``False``: nothing. A callable: that callable.
    """
    if callable(progress):
        yield progress
        return
    if progress is None:
        if not _stderr_is_terminal():
            yield LineProgress(title)
            return
        progress = True
    if not progress:
        yield None
        return
    with RichProgress(title) as display:
        yield display


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False
