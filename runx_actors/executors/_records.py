"""Execution records of the LocalExecutor (spec §6.11; RUN-EXE-14) and its statistics."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from ..effect import (
    Assignment,
    AssignmentKey,
    ExecutionRef,
    ExecutionStatus,
    ModelAssignment,
    Outcome,
    OutcomeResult,
)
from ._streams import ProgressRing

__all__ = ["LocalExecutorStatistics", "Record", "content_of"]


@attrs.frozen(kw_only=True)
class LocalExecutorStatistics:
    """A snapshot of a LocalExecutor's counters.

    ``accepted``: dispatches that created a record; ``started``: executions started,
    restarts and retries included; ``live``: records not yet settled; ``retained``:
    settled records still readable; ``tombstones``: abort tombstones held; ``evicted``:
    settled records dropped by retention; ``settlement_head``: newest notice sequence.
    """

    epoch: str
    accepted: int
    started: int
    live: int
    retained: int
    tombstones: int
    evicted: int
    settlement_head: int


class Record:
    """The execution record of one accepted key; touched only from the trio thread.

    ``history`` holds the execution-ledger event names (§6.11); ``worker`` numbers the
    worker that currently owns the record (a lost or superseded worker never settles it);
    ``stop`` is what a cancel/dispose/close settles the record with; ``retry_after`` the
    pause (seconds) the last attempt's provider asked for, if any.
    """

    __slots__ = ("acknowledged", "assignment", "attempts", "content", "execution",
                 "history", "key", "orphaned", "outcome", "retry_after", "ring", "running",
                 "scope", "status", "stop", "superseded", "worker")

    def __init__(self, assignment: Assignment, content: tuple[Any, ...],
                 execution: ExecutionRef, ring: ProgressRing) -> None:
        self.assignment = assignment
        #: The AssignmentKey (scope, Run, effect) this record executes: one object shared
        #: by the record table, the progress ring, the Outcome and the settlement log
        #: (``assignment.key`` builds a new one on every read).
        self.key: AssignmentKey = ring.key
        self.content = content
        self.status = ExecutionStatus.ACCEPTED
        self.outcome: Outcome | None = None
        self.acknowledged = False
        self.execution = execution
        self.superseded: tuple[ExecutionRef, ...] = ()
        self.scope = trio.CancelScope()
        self.stop: OutcomeResult | None = None
        self.orphaned = False
        self.running = False
        self.worker = 0
        self.attempts = 0
        self.retry_after: float | None = None  # the last attempt's Retry-After (seconds)
        self.history: list[str] = []
        self.ring = ring

    def note_retry_after(self, seconds: float) -> None:
        """Remember the Retry-After of the attempt that just failed."""
        self.retry_after = seconds


def content_of(a: Assignment) -> tuple[Any, ...]:
    """What must match for a re-dispatch to be "the same Assignment" (INV-36).

    The inline request is represented by its digest (checked against it on acceptance)
    and the opaque target is left out: it is resolved again on every start (RUN-LOP-9).
    """
    body = a.body
    if isinstance(body, ModelAssignment):
        return (a.step_id, a.call_id, "model", body.model, body.request_digest)
    return (a.step_id, a.call_id, "tool", body)
