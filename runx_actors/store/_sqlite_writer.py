"""The writer thread of the SQLite store: group commit (architecture §4, spec §4.3, §4.5).

One thread owns the write connection. Callers (trio tasks) queue *jobs*; the thread
takes every queued job, opens ONE ``BEGIN IMMEDIATE`` transaction, runs each job inside
its own savepoint (a refused job is rolled back alone and writes nothing), commits, and
only then answers every caller of the group. A caller is therefore never answered before
its group is durable (``synchronous=FULL``).

Each job evaluates against a *running view*: the writer's in-memory projection overlaid
with the snapshots of the jobs accepted earlier in the same group. The projection itself
is changed only after ``COMMIT`` returned, so a failed transaction leaves it untouched.
Every append checks the scope's persisted epoch inside the transaction first; another
process can only append with a higher epoch, which that check refuses
(``OwnershipLostError``, nothing written).

``open`` jobs bump the epoch and rebuild the projection in a transaction of their own.
"""

from __future__ import annotations

import copy
import queue
import sqlite3
import threading
from collections.abc import Callable, Sequence
from typing import Any, Generic, TypeVar

import attrs
import trio

from ..protocol._codec import encode_fact
from ..protocol.canonical import typed_envelope
from ..protocol.commit import (
    Append,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Replay,
    Snapshot,
    create_group,
    evaluate_commit,
    fold_run,
)
from ..protocol.errors import RunExistsError, ValidationError
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.state import Open
from ..protocol.values import AgentInput, CommandID, Digest, NewRun, RunID, RunStatus, Scope
from . import _sqlite_log as log
from ._scope import Projection
from .base import ForeignEvent, check_foreign, run_stream

__all__ = [
    "WriterState", "WriterStatistics", "Job", "CommitJob", "CreateJob", "AppendJob",
    "OpenJob", "PutJob", "WriterThread",
]

T = TypeVar("T")
#: A tentative projection change: (writer, run, snapshot after the job).
Change = tuple["WriterState", RunID, Snapshot]


class WriterState:
    """One SessionWriter's identity and projection, shared by trio and the writer thread.

    Only the writer thread mutates ``projection`` (after ``COMMIT``), under ``lock``;
    the trio side reads it under the same lock.
    """

    def __init__(self, scope: Scope, epoch: int, projection: Projection) -> None:
        self.scope = scope
        self.epoch = epoch
        self.projection = projection
        self.lock = threading.Lock()

    def get(self, run_id: RunID) -> Snapshot | None:
        with self.lock:
            return self.projection.active.get(run_id)

    def copy(self) -> dict[RunID, Snapshot]:
        with self.lock:
            return dict(self.projection.active)

    def apply(self, run_id: RunID, snapshot: Snapshot) -> None:
        with self.lock:
            self.projection.apply(run_id, snapshot)


@attrs.frozen
class WriterStatistics:
    """A snapshot of the writer's counters (style §2.5).

    ``transactions`` counts committed write transactions, ``jobs`` the jobs they carried
    (accepted or refused), ``accepted`` the commits that appended, ``largest_group`` the
    most jobs in one transaction, ``queued`` the jobs waiting right now.
    """

    transactions: int
    jobs: int
    accepted: int
    largest_group: int
    failed_transactions: int
    queued: int


class _Tx:
    """The state of one group transaction: connection plus the running overlay."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.overlay: dict[tuple[int, RunID], tuple[WriterState, Snapshot]] = {}
        self._epochs: dict[Scope, int] = {}

    def check_epoch(self, ws: WriterState) -> None:
        """``log.check_epoch`` with the persisted epoch read once per scope and group.

        Exact: the group holds the write lock (``BEGIN IMMEDIATE``) from its first job to
        ``COMMIT``, no job of a group writes ``scopes`` (only ``OpenJob`` does, and it
        runs alone), so the persisted epoch cannot move inside the transaction.
        """
        current = self._epochs.get(ws.scope)
        if current is None:
            current = self._epochs[ws.scope] = log.read_epoch(self.conn, ws.scope)
        log.require_epoch(ws.scope, ws.epoch, current)

    def active(self, ws: WriterState, run_id: RunID) -> Snapshot | None:
        hit = self.overlay.get((id(ws), run_id))
        if hit is not None:
            snap = hit[1]
            return snap if snap.state.status is RunStatus.ACTIVE else None
        return ws.projection.active.get(run_id)

    def load(self, ws: WriterState, run_id: RunID) -> Snapshot:
        snap = self.active(ws, run_id)
        if snap is not None:
            return snap
        return log.record(self.conn, ws.scope, run_id)

    def stage(self, changes: Sequence[Change]) -> None:
        for ws, run_id, snap in changes:
            self.overlay[(id(ws), run_id)] = (ws, snap)


class _View:
    """``CommitView`` over the running overlay and the log inside the transaction."""

    def __init__(self, tx: _Tx, ws: WriterState) -> None:
        self._tx = tx
        self._ws = ws

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[Fact, ...] | None:
        return log.commit_run_facts(self._tx.conn, self._ws.scope, command_id, run_id)

    def active(self, run_id: RunID) -> Snapshot | None:
        return self._tx.active(self._ws, run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        return log.stream_exists(self._tx.conn, self._ws.scope, run_id)


class Job(Generic[T]):
    """A unit of work for the writer thread; ``done`` is set (in trio) once answered."""

    #: Jobs that must run in a transaction of their own.
    alone = False

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        #: Set by the writer thread when the answer was handed to trio.
        self.answered = False

    def run(self, tx: _Tx) -> tuple[T, Sequence[Change]]:
        raise NotImplementedError

    def outcome(self) -> T:
        """The result, or raise the error (trio side, after ``done``)."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def _run_items(facts: Sequence[Fact]) -> list[tuple[str, bytes]]:
    return [(EVENT_TYPE_PREFIX + f.WIRE_NAME, encode_fact(f)) for f in facts]


def _append_foreign(
    tx: _Tx, scope: Scope, seq: int, events: Sequence[ForeignEvent]
) -> None:
    heads: dict[str, int] = {}
    rows = []
    for e in events:
        if e.stream not in heads:
            heads[e.stream] = log.stream_head(tx.conn, scope, e.stream)
        heads[e.stream] += 1
        rows.append((e.stream, heads[e.stream], e.type, typed_envelope(e.type, e.payload)))
    log.insert_events(tx.conn, scope, seq, rows)


class CommitJob(Job[CommitResult]):
    """Freeze bodies, then evaluate and append one command (§4.2, §4.3)."""

    def __init__(self, ws: WriterState, request: CommitRequest,
                 bodies: Sequence[tuple[Digest, bytes]]) -> None:
        super().__init__()
        self.ws = ws
        self.request = request
        self.bodies = bodies

    def run(self, tx: _Tx) -> tuple[CommitResult, Sequence[Change]]:
        ws, request = self.ws, self.request
        tx.check_epoch(ws)
        for digest, data in self.bodies:
            log.frozen_put(tx.conn, digest, data)
        run_id = request.envelope.run_id
        before = tx.active(ws, run_id)
        decision = evaluate_commit(_View(tx, ws), request, scope=ws.scope)
        if isinstance(decision, Replay):
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(ws, run_id),
                                decision.facts), ()
        assert isinstance(decision, Append)
        facts, snap = decision.facts, decision.snapshot
        first = snap.position - len(facts) + 1
        seq = log.insert_commit(tx.conn, ws.scope, request.envelope.id, ws.epoch, run_id,
                                first, len(facts))
        stream = run_stream(run_id)
        log.insert_events(tx.conn, ws.scope, seq, [
            (stream, first + i, type_, data) for i, (type_, data) in enumerate(_run_items(facts))
        ])
        log.advance_run(tx.conn, ws.scope, run_id, first - 1, snap)
        was_open = before is not None and isinstance(before.state.current, Open)
        log.write_cache(tx.conn, ws.scope, run_id, snap, was_open=was_open)
        return CommitResult(CommitStatus.ACCEPTED, snap, facts), ((ws, run_id, snap),)


class CreateJob(Job[CommitResult]):
    """Create a Run plus foreign events in one commit (§4.9, D-8)."""

    def __init__(self, ws: WriterState, new_run: NewRun, inputs: Sequence[AgentInput],
                 commit_id: str, extra_events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.ws = ws
        self.new_run = new_run
        self.inputs = tuple(inputs)
        self.commit_id = commit_id
        self.extra_events = tuple(extra_events)

    def run(self, tx: _Tx) -> tuple[CommitResult, Sequence[Change]]:
        ws, run_id = self.ws, self.new_run.run_id
        tx.check_epoch(ws)
        if not self.commit_id:
            raise ValidationError("create_run needs a commit id")
        prior = log.commit_run_facts(tx.conn, ws.scope, self.commit_id, run_id)
        if prior is not None:
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(ws, run_id), prior), ()
        if log.stream_exists(tx.conn, ws.scope, run_id):
            raise RunExistsError(f"run {run_id} exists", run_id=run_id)
        group = create_group(self.new_run, self.inputs)
        check_foreign(self.extra_events)
        snap = Snapshot(fold_run(group, run_id=run_id), len(group) - 1)
        seq = log.insert_commit(tx.conn, ws.scope, self.commit_id, ws.epoch, run_id, 0,
                                len(group))
        stream = run_stream(run_id)
        log.insert_events(tx.conn, ws.scope, seq, [
            (stream, i, type_, data) for i, (type_, data) in enumerate(_run_items(group))
        ])
        _append_foreign(tx, ws.scope, seq, self.extra_events)
        log.insert_run(tx.conn, ws.scope, run_id, snap)
        log.write_cache(tx.conn, ws.scope, run_id, snap)
        return CommitResult(CommitStatus.ACCEPTED, snap, group), ((ws, run_id, snap),)


class AppendJob(Job[CommitStatus]):
    """Append foreign events under a commit id (§4.8); a known id replays."""

    def __init__(self, ws: WriterState, commit_id: str,
                 events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.ws = ws
        self.commit_id = commit_id
        self.events = tuple(events)

    def run(self, tx: _Tx) -> tuple[CommitStatus, Sequence[Change]]:
        ws = self.ws
        tx.check_epoch(ws)
        if not self.commit_id:
            raise ValidationError("append_events needs a commit id")
        if log.commit_exists(tx.conn, ws.scope, self.commit_id):
            return CommitStatus.ALREADY_APPLIED, ()
        check_foreign(self.events)
        if not self.events:
            raise ValidationError("append_events needs at least one event")
        seq = log.insert_commit(tx.conn, ws.scope, self.commit_id, ws.epoch)
        _append_foreign(tx, ws.scope, seq, self.events)
        return CommitStatus.ACCEPTED, ()


class OpenJob(Job[tuple[int, Projection]]):
    """Bump the scope's epoch and rebuild its projection (its own transaction)."""

    alone = True

    def __init__(self, scope: Scope) -> None:
        super().__init__()
        self.scope = scope

    def run(self, tx: _Tx) -> tuple[tuple[int, Projection], Sequence[Change]]:
        epoch = log.bump_epoch(tx.conn, self.scope)
        return (epoch, Projection(log.rebuild_projection(tx.conn, self.scope))), ()


class PutJob(Job[None]):
    """Store a frozen body (idempotent); the digest was checked by the caller."""

    def __init__(self, digest: Digest, data: bytes) -> None:
        super().__init__()
        self.digest = digest
        self.data = data

    def run(self, tx: _Tx) -> tuple[None, Sequence[Change]]:
        log.frozen_put(tx.conn, self.digest, self.data)
        return None, ()


_STOP = object()


def _wake(jobs: Sequence[Job[Any]]) -> None:
    for job in jobs:
        job.done.set()


class WriterThread:
    """The thread that owns the write connection (see the module docstring).

    ``submit`` is called from trio; ``stop`` queues a sentinel after which the thread
    finishes the jobs already queued, closes the connection and exits.
    """

    def __init__(self, conn: sqlite3.Connection, token: trio.lowlevel.TrioToken, *,
                 max_group: int = 512, name: str = "runx-sqlite-writer") -> None:
        self._conn = conn
        self._token = token
        self._max_group = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._transactions = 0
        self._failed = 0
        self._jobs = 0
        self._accepted = 0
        self._largest = 0
        #: Test hook: called in the writer thread after the group's jobs ran, before
        #: ``COMMIT``. Lets tests hold a transaction open.
        self.before_commit: Callable[[], None] | None = None
        self._died: BaseException | None = None

    @property
    def thread(self) -> threading.Thread:
        return self._thread

    def start(self) -> None:
        self._thread.start()

    def submit(self, job: Job[Any]) -> None:
        """Queue *job* (never blocks).

        Raises:
            RuntimeError: the writer thread died (its error is the ``__cause__``).
        """
        if self._died is not None:
            raise RuntimeError("the store's writer thread died") from self._died
        self._queue.put(job)

    def stop(self) -> None:
        self._queue.put(_STOP)

    def statistics(self) -> WriterStatistics:
        return WriterStatistics(
            transactions=self._transactions, jobs=self._jobs, accepted=self._accepted,
            largest_group=self._largest, failed_transactions=self._failed,
            queued=self._queue.qsize(),
        )

    # -- the thread ------------------------------------------------------------------

    def _main(self) -> None:
        batch: list[Any] = []
        try:
            stop = False
            while not stop:
                batch = [self._queue.get()]
                while len(batch) < self._max_group:
                    try:
                        batch.append(self._queue.get_nowait())
                    except queue.Empty:
                        break
                jobs = [j for j in batch if j is not _STOP]
                stop = len(jobs) != len(batch)
                for group in _groups(jobs):
                    self._process(group)
                batch = []
        except BaseException as exc:  # pragma: no cover - a bug in the writer itself
            # Never leave a caller waiting forever: fail what is in hand and queued.
            self._died = exc
            pending = [j for j in batch if j is not _STOP and not j.answered]
            while True:
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
                if item is not _STOP:
                    pending.append(item)
            for job in pending:
                job.result = None
                job.error = RuntimeError("the store's writer thread died")
            self._answer(pending)
            raise
        finally:
            self._conn.close()

    def _answer(self, jobs: Sequence[Job[Any]]) -> None:
        for job in jobs:
            job.answered = True
        try:
            self._token.run_sync_soon(_wake, jobs)
        except trio.RunFinishedError:  # pragma: no cover - the store outlived its trio run
            pass

    def _process(self, jobs: Sequence[Job[Any]]) -> None:
        """Run *jobs* as one transaction and answer every caller afterwards."""
        try:
            self._execute(jobs)
        except Exception as exc:
            # Nothing of this group is durable. Refused jobs keep their own refusal;
            # every other job gets the transaction's error ("unknown": replay once).
            self._failed += 1
            try:
                if self._conn.in_transaction:
                    self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass
            for job in jobs:
                if job.error is None:
                    job.result = None
                    job.error = copy.copy(exc)
        self._answer(jobs)

    def _execute(self, jobs: Sequence[Job[Any]]) -> None:
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        tx = _Tx(conn)
        staged: list[Sequence[Change]] = []
        for job in jobs:
            conn.execute("SAVEPOINT job")
            try:
                value, changes = job.run(tx)
            except Exception as exc:
                job.error = exc
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
                continue
            conn.execute("RELEASE job")
            job.result = value
            tx.stage(changes)
            staged.append(changes)
        if self.before_commit is not None:
            self.before_commit()
        if not conn.in_transaction:
            raise sqlite3.OperationalError("the group transaction was rolled back")
        conn.execute("COMMIT")
        # Durable: publish to the projections; the caller answers afterwards.
        for changes in staged:
            for ws, run_id, snap in changes:
                ws.apply(run_id, snap)
            if changes:
                self._accepted += 1
        self._transactions += 1
        self._jobs += len(jobs)
        self._largest = max(self._largest, len(jobs))


def _groups(jobs: Sequence[Job[Any]]) -> list[list[Job[Any]]]:
    """Split *jobs* (in order) into transactions: ``alone`` jobs get their own."""
    out: list[list[Job[Any]]] = []
    current: list[Job[Any]] = []
    for job in jobs:
        if job.alone:
            if current:
                out.append(current)
                current = []
            out.append([job])
        else:
            current.append(job)
    if current:
        out.append(current)
    return out
