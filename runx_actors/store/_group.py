"""Group-commit pieces both SQL stores share (architecture §4; spec §4.3, §4.5).

A writer's identity and projection (:class:`WriterStateBase`), the counters of group
transactions and their snapshot (:class:`GroupCounters`, :class:`GroupStatistics`), the
base of a queued job (:class:`JobBase`) and the event rows a job appends. The group
mechanics themselves — threads, connections, transactions, locking — stay with each
backend (``_sqlite_writer``, ``_pg_writer``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs
import trio

from ..protocol._codec import encode_fact
from ..protocol.canonical import typed_envelope
from ..protocol.commit import Snapshot
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.values import RunID, Scope
from ._scope import Projection
from .base import ForeignEvent

__all__ = [
    "WriterStateBase", "GroupStatistics", "GroupCounters", "JobBase", "run_items",
    "foreign_rows",
]

T = TypeVar("T")


class WriterStateBase:
    """One SessionWriter's identity (scope, epoch) and projection.

    ``get`` and ``copy`` read the projection under ``lock``: a no-op here; a backend whose
    projection is changed from another thread sets a real lock.
    """

    def __init__(self, scope: Scope, epoch: int, projection: Projection) -> None:
        self.scope = scope
        self.epoch = epoch
        self.projection = projection
        self.lock: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()

    def get(self, run_id: RunID) -> Snapshot | None:
        with self.lock:
            return self.projection.active.get(run_id)

    def copy(self) -> dict[RunID, Snapshot]:
        with self.lock:
            return dict(self.projection.active)


@attrs.frozen
class GroupStatistics:
    """The counters every store's statistics carry (see the backends' subclasses)."""

    transactions: int
    jobs: int
    accepted: int
    largest_group: int
    failed_transactions: int
    queued: int


class GroupCounters:
    """Running counters of group transactions (mutated by the one task or thread that
    runs the groups)."""

    def __init__(self) -> None:
        self.transactions = 0
        self.jobs = 0
        self.accepted = 0
        self.largest = 0
        self.failed = 0

    def committed(self, jobs: int, accepted: int) -> None:
        """Count a committed transaction of *jobs* jobs, *accepted* of which appended."""
        self.transactions += 1
        self.jobs += jobs
        self.accepted += accepted
        self.largest = max(self.largest, jobs)

    def fields(self) -> dict[str, int]:
        """The ``GroupStatistics`` fields but ``queued``."""
        return {"transactions": self.transactions, "jobs": self.jobs,
                "accepted": self.accepted, "largest_group": self.largest,
                "failed_transactions": self.failed}


class JobBase(Generic[T]):
    """A unit of a group; ``done`` is set (in trio) once answered."""

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: T | None = None
        self.error: BaseException | None = None

    def outcome(self) -> T:
        """The result, or raise the error (trio side, after ``done``)."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def run_items(facts: Sequence[Fact]) -> list[tuple[str, bytes]]:
    """The ``(type, data)`` of each Run fact's event."""
    return [(EVENT_TYPE_PREFIX + f.WIRE_NAME, encode_fact(f)) for f in facts]


def foreign_rows(
    head: Callable[[str], int], events: Sequence[ForeignEvent]
) -> list[tuple[str, int, str, bytes]]:
    """The ``(stream, idx, type, data)`` rows of foreign *events*; *head* gives a stream's
    current head (-1 if empty), asked once per stream."""
    heads: dict[str, int] = {}
    rows = []
    for e in events:
        if e.stream not in heads:
            heads[e.stream] = head(e.stream)
        heads[e.stream] += 1
        rows.append((e.stream, heads[e.stream], e.type, typed_envelope(e.type, e.payload)))
    return rows
