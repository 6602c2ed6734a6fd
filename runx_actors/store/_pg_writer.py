"""Group transactions of the PostgreSQL store (architecture §4; spec §4.3, §4.5; RUN-CMT-6).

Each writer (one scope at one epoch) has a queue of *jobs*. A flush takes every queued
job of that writer and runs them in ONE transaction on a pooled connection, in a worker
thread (:func:`run_group`):

1. ``SELECT epoch FROM scopes WHERE scope = … FOR UPDATE`` locks the scope's row and
   compares the writer's epoch with the persisted one. A mismatch refuses every job of
   the group with ``OwnershipLostError`` and writes nothing. The row lock is held until
   ``COMMIT``, so no ``open`` (which bumps the row) can slip between check and append.
2. Each job runs in its own savepoint: a refused job is rolled back alone.
3. ``COMMIT`` (``synchronous_commit = on``); only then are the callers answered.

Jobs evaluate against a *running view*: the writer's projection overlaid with the
snapshots of earlier jobs of the same group. The projection itself is changed on the trio
side after ``COMMIT`` returned, by the only task that changes it (the writer's flush), so a
failed transaction leaves it untouched.

A group whose transaction fails has an *unknown outcome* (the connection may have died
after the server committed). Its Runs are marked *suspect*; the next group of the writer
refolds them from the log inside its transaction (under the row lock) before evaluating
anything, so a replay of the same command id returns ALREADY_APPLIED with today's
snapshot and the projection never lags behind the log.

This module repeats the *order* of steps of ``_sqlite_jobs``' jobs (epoch, bodies,
``evaluate_commit``, commit row, events, head, cache) over ``_pg_log``; the logic itself is
the shared pure ``evaluate_commit`` / ``create_group`` / ``fold_run``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import attrs
from psycopg_pool import ConnectionPool

from ..protocol.commit import (
    Append,
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Replay,
    Snapshot,
    create_group,
    evaluate_batch,
    evaluate_commit,
    fold_run,
)
from ..protocol.errors import RunExistsError, RunNotFoundError, ValidationError
from ..protocol.facts import Fact
from ..protocol.state import Open
from ..protocol.values import AgentInput, CommandID, Digest, NewRun, RunID, RunStatus, Scope
from . import _pg_log as log
from ._group import JobBase, WriterStateBase, foreign_rows, run_items
from ._scope import Projection, batch_results
from .base import ForeignEvent, check_foreign, run_stream

__all__ = [
    "PgWriterState", "Hooks", "Job", "CommitJob", "BatchJob", "CreateJob", "AppendJob",
    "GroupResult",
    "run_group", "open_scope",
]

T = TypeVar("T")
#: A projection change: the Run and its snapshot after the job (None: no such Run).
Change = tuple[RunID, Snapshot | None]


class PgWriterState(WriterStateBase):
    """One writer's identity, projection and queue. Trio-side only: the projection is
    read by worker threads of this writer's flush, and changed by the flush between them."""

    def __init__(self, scope: Scope, epoch: int, projection: Projection) -> None:
        super().__init__(scope, epoch, projection)
        self.pending: list[Job[Any]] = []
        self.flushing = False
        #: Runs whose projection entry may lag the log (a group's outcome was unknown).
        self.suspect: set[RunID] = set()
        #: ``stream -> (idx, chain)`` of the newest row this writer committed to each
        #: stream (rows are immutable: an entry stays valid for its idx), so an append
        #: needs no read for its chain (RUN-STO-3). Bounded.
        self.chain_heads: dict[str, tuple[int, bytes]] = {}

    def apply(self, changes: Sequence[Change]) -> None:
        """Apply a committed transaction's ``(run_id, snapshot)`` changes to the writer's
        projection (RUN-CMT-2), after the commit is durable."""
        for run_id, snap in changes:
            if snap is None:
                self.projection.active.pop(run_id, None)
            else:
                self.projection.apply(run_id, snap)


@attrs.define
class Hooks:
    """Test hooks run in the worker thread: ``before_commit`` right before ``COMMIT``,
    ``after_commit`` right after it returned (an exception there stands for a response
    lost after the server committed: the group's outcome becomes unknown)."""

    before_commit: Callable[[], None] | None = None
    after_commit: Callable[[], None] | None = None


class _Tx:
    """One group transaction: connection, writer, and the running overlay."""

    def __init__(self, conn: log.Conn, scope: Scope, epoch: int,
                 active: Mapping[RunID, Snapshot],
                 chain_heads: Mapping[str, tuple[int, bytes]] | None = None) -> None:
        self.conn = conn
        self.scope = scope
        self.epoch = epoch
        self._active = active
        self.overlay: dict[RunID, Snapshot | None] = {}
        #: Chains known before the group, those of the jobs accepted so far, and those
        #: of the job running now (merged into ``accepted`` when its savepoint is
        #: released, dropped when it is rolled back).
        self.chains = log.ChainCache(chain_heads or {})

    def active(self, run_id: RunID) -> Snapshot | None:
        if run_id in self.overlay:
            snap = self.overlay[run_id]
            return snap if snap is not None and snap.state.status is RunStatus.ACTIVE else None
        return self._active.get(run_id)

    def load(self, run_id: RunID) -> Snapshot:
        snap = self.active(run_id)
        if snap is not None:
            return snap
        return log.record(self.conn, self.scope, run_id)

    def stage(self, changes: Sequence[Change]) -> None:
        for run_id, snap in changes:
            self.overlay[run_id] = snap


class _View:
    """``CommitView`` over the running overlay and the log inside the transaction."""

    def __init__(self, tx: _Tx) -> None:
        self._tx = tx

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[Fact, ...] | None:
        return log.commit_run_facts(self._tx.conn, self._tx.scope, command_id, run_id)

    def active(self, run_id: RunID) -> Snapshot | None:
        return self._tx.active(run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        return log.stream_exists(self._tx.conn, self._tx.scope, run_id)


class Job(JobBase[T]):
    """A unit of a writer's group; ``done`` is set (in trio) once answered."""

    #: The Run the job may change (marked suspect when the outcome is unknown).
    run_id: RunID | None = None

    def run(self, tx: _Tx) -> tuple[T, Sequence[Change]]:
        """Do the job inside transaction *tx*: its result and the projection changes to
        apply once *tx* commits. Raises what the job refuses (nothing is then written)."""
        raise NotImplementedError


def _append_foreign(tx: _Tx, seq: int, commit_id: str, events: Sequence[ForeignEvent]
                    ) -> None:
    rows = foreign_rows(lambda stream: log.stream_head(tx.conn, tx.scope, stream), events)
    log.insert_events(tx.conn, tx.scope, seq, commit_id, rows, tx.chains)


class CommitJob(Job[CommitResult]):
    """Freeze bodies, then evaluate and append one command (§4.2, §4.3)."""

    def __init__(self, request: CommitRequest, bodies: Sequence[tuple[Digest, bytes]]) -> None:
        super().__init__()
        self.request = request
        self.bodies = bodies
        self.run_id = request.envelope.run_id

    def run(self, tx: _Tx) -> tuple[CommitResult, Sequence[Change]]:
        """See :meth:`Job.run`."""
        request, run_id = self.request, self.request.envelope.run_id
        for digest, data in self.bodies:
            log.frozen_put(tx.conn, digest, data)
        before = tx.active(run_id)
        decision = evaluate_commit(_View(tx), request, scope=tx.scope)
        if isinstance(decision, Replay):
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(run_id),
                                decision.facts), ()
        assert isinstance(decision, Append)
        _write_append(tx, request, decision, before)
        return (CommitResult(CommitStatus.ACCEPTED, decision.snapshot, decision.facts),
                ((run_id, decision.snapshot),))


def _write_append(tx: _Tx, request: CommitRequest, decision: Append,
                  before: Snapshot | None) -> None:
    """Write one accepted command: commit record, events, the Run's head, the cache
    (*before*: the Run's active snapshot before the command)."""
    run_id = request.envelope.run_id
    facts, snap = decision.facts, decision.snapshot
    first = snap.position - len(facts) + 1
    seq = log.insert_commit(tx.conn, tx.scope, request.envelope.id, tx.epoch, run_id,
                            first, len(facts))
    stream = run_stream(run_id)
    log.insert_events(tx.conn, tx.scope, seq, request.envelope.id, [
        (stream, first + i, type_, data) for i, (type_, data) in enumerate(run_items(facts))
    ], tx.chains)
    log.advance_run(tx.conn, tx.scope, run_id, first - 1, snap)
    was_open = before is not None and isinstance(before.state.current, Open)
    log.write_cache(tx.conn, tx.scope, run_id, snap, was_open=was_open)


class BatchJob(Job[BatchResult]):
    """Freeze bodies, then evaluate a batch of one Run's commands and append its
    evaluated prefix (RUN-CMT-9): one job, one savepoint of the group transaction, so
    its rows are all committed or none."""

    def __init__(self, requests: Sequence[CommitRequest],
                 bodies: Sequence[Sequence[tuple[Digest, bytes]]]) -> None:
        super().__init__()
        self.requests = tuple(requests)
        #: The bodies of each request (only the evaluated requests' are stored, as
        #: ``commit`` stores none of a refused command's).
        self.bodies = bodies
        self.run_id = self.requests[0].envelope.run_id

    def run(self, tx: _Tx) -> tuple[BatchResult, Sequence[Change]]:
        """See :meth:`Job.run`."""
        run_id = self.requests[0].envelope.run_id
        before = tx.active(run_id)
        decisions, error = evaluate_batch(_View(tx), self.requests, scope=tx.scope)
        for each in self.bodies[:len(decisions)]:  # before the facts that name them
            for digest, data in each:
                log.frozen_put(tx.conn, digest, data)
        results = batch_results(decisions, lambda: tx.load(run_id))
        changes: list[Change] = []
        for request, decision in zip(self.requests, decisions, strict=False):
            if isinstance(decision, Append):
                _write_append(tx, request, decision, before)
                before = decision.snapshot
                changes.append((run_id, decision.snapshot))
        return BatchResult(results, error), changes


class CreateJob(Job[CommitResult]):
    """Create a Run plus foreign events in one commit (§4.9, D-8)."""

    def __init__(self, new_run: NewRun, inputs: Sequence[AgentInput], commit_id: str,
                 extra_events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.new_run = new_run
        self.inputs = tuple(inputs)
        self.commit_id = commit_id
        self.extra_events = tuple(extra_events)
        self.run_id = new_run.run_id

    def run(self, tx: _Tx) -> tuple[CommitResult, Sequence[Change]]:
        """See :meth:`Job.run`."""
        run_id = self.new_run.run_id
        if not self.commit_id:
            raise ValidationError("create_run needs a commit id")
        prior = log.commit_run_facts(tx.conn, tx.scope, self.commit_id, run_id)
        if prior is not None:
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(run_id), prior), ()
        if log.stream_exists(tx.conn, tx.scope, run_id):
            raise RunExistsError(f"run {run_id!r} exists", run_id=run_id)
        group = create_group(self.new_run, self.inputs)
        check_foreign(self.extra_events)
        snap = Snapshot(fold_run(group, run_id=run_id), len(group) - 1)
        seq = log.insert_commit(tx.conn, tx.scope, self.commit_id, tx.epoch, run_id, 0,
                                len(group))
        stream = run_stream(run_id)
        log.insert_events(tx.conn, tx.scope, seq, self.commit_id, [
            (stream, i, type_, data) for i, (type_, data) in enumerate(run_items(group))
        ], tx.chains)
        _append_foreign(tx, seq, self.commit_id, self.extra_events)
        log.insert_run(tx.conn, tx.scope, run_id, snap)
        log.write_cache(tx.conn, tx.scope, run_id, snap)
        return CommitResult(CommitStatus.ACCEPTED, snap, group), ((run_id, snap),)


class AppendJob(Job[CommitStatus]):
    """Append foreign events under a commit id (§4.8); a known id replays."""

    def __init__(self, commit_id: str, events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.commit_id = commit_id
        self.events = tuple(events)

    def run(self, tx: _Tx) -> tuple[CommitStatus, Sequence[Change]]:
        """See :meth:`Job.run`."""
        if not self.commit_id:
            raise ValidationError("append_events needs a commit id")
        if log.commit_exists(tx.conn, tx.scope, self.commit_id):
            return CommitStatus.ALREADY_APPLIED, ()
        check_foreign(self.events)
        if not self.events:
            raise ValidationError("append_events needs at least one event")
        seq = log.insert_commit(tx.conn, tx.scope, self.commit_id, tx.epoch)
        _append_foreign(tx, seq, self.commit_id, self.events)
        return CommitStatus.ACCEPTED, ()


@attrs.frozen
class GroupResult:
    """What a committed group changes: projection ``changes`` (refolded suspects first,
    then the accepted jobs' snapshots), the suspects it ``refreshed``, and how many jobs
    were ``accepted``."""

    changes: tuple[Change, ...]
    refreshed: frozenset[RunID]
    accepted: int
    #: ``stream -> (idx, chain)`` of the newest rows the group wrote.
    chains: Mapping[str, tuple[int, bytes]] = attrs.field(factory=dict)


def run_group(
    pool: ConnectionPool, scope: Scope, epoch: int, active: Mapping[RunID, Snapshot],
    suspect: frozenset[RunID], jobs: Sequence[Job[Any]], hooks: Hooks,
    chain_heads: Mapping[str, tuple[int, bytes]] | None = None,
) -> GroupResult:
    """Run *jobs* of one writer as one transaction (worker thread; see the module doc).

    Sets each job's ``result`` or ``error``. Returns after ``COMMIT``.

    Raises:
        Exception: the transaction failed or its outcome is unknown; jobs refused on their
            own keep their error, the caller gives the others this one.
    """
    with pool.connection() as conn, conn.transaction():
        current = log.lock_epoch(conn, scope)
        if current != epoch:
            for job in jobs:
                job.error = log.fenced(scope, epoch, current)
            return GroupResult((), frozenset(), 0)
        tx = _Tx(conn, scope, epoch, active, chain_heads)
        refreshed: list[Change] = []
        for run_id in sorted(suspect):
            try:
                snap: Snapshot | None = log.record(conn, scope, run_id)
            except RunNotFoundError:
                snap = None
            except Exception:
                # A Run that does not fold (corrupt) stays suspect; its own commits are
                # refused by the head check (ProjectionDivergenceError), not the group's.
                continue
            refreshed.append((run_id, snap))
        tx.stage(refreshed)
        changes: list[Change] = list(refreshed)
        accepted = 0
        for job in jobs:
            try:
                with conn.transaction():
                    value, job_changes = job.run(tx)
            except Exception as exc:
                job.error = exc
                tx.chains.discard()
                continue
            tx.chains.keep()
            job.result = value
            tx.stage(job_changes)
            changes.extend(job_changes)
            if isinstance(value, BatchResult):
                accepted += len(job_changes)
            elif job_changes or value is CommitStatus.ACCEPTED:
                accepted += 1
        if hooks.before_commit is not None:
            hooks.before_commit()
    if hooks.after_commit is not None:
        hooks.after_commit()
    return GroupResult(tuple(changes), frozenset(r for r, _ in refreshed), accepted,
                       tx.chains.accepted)


def open_scope(pool: ConnectionPool, scope: Scope) -> tuple[int, Projection]:
    """Bump *scope*'s epoch and rebuild its projection in one transaction (worker thread).

    The bump locks the scope's row, so a group of an older writer either committed before
    (and is in the projection) or runs after and is fenced.
    """
    with pool.connection() as conn, conn.transaction():
        epoch = log.bump_epoch(conn, scope)
        return epoch, Projection(log.rebuild_projection(conn, scope))
