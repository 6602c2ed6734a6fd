"""The writer thread of the SQLite store: group commit (architecture §4, spec §4.3, §4.5).

One thread owns the write connection. Callers (trio tasks) queue *jobs*; the thread
takes every queued job, opens ONE ``BEGIN IMMEDIATE`` transaction, runs the group,
commits, and only then answers every caller of the group. A caller is therefore never
answered before its group is durable (``synchronous=FULL``).

A group runs in two phases. First every job is *evaluated* in memory against a running
view: the writer's projection overlaid with what the jobs accepted earlier in the same
group wrote (snapshots, commit ids, stream heads); the commit ids and Runs the group
names are looked up in one statement per scope before. A job that is refused writes
nothing, so it needs no savepoint. Then the rows of every accepted job are written with
one multi-row statement per table (commits, events, runs, projection cache, frozen
bodies), whatever the number of jobs. Should a write fail (a constraint, a Run's head
that is not the projection's — nothing a correct projection produces), the transaction
is rolled back and the group re-run job by job, each in its own savepoint, so the
failing job is refused alone and the others commit (the original per-job isolation).

The projection itself is changed only after ``COMMIT`` returned, so a failed transaction
leaves it untouched. Every append checks the scope's persisted epoch inside the
transaction first; another process can only append with a higher epoch, which that
check refuses (``OwnershipLostError``, nothing written).

``open`` jobs bump the epoch and rebuild the projection in a transaction of their own.
"""

from __future__ import annotations

import copy
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
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

#: Statements the writer connection keeps prepared: multi-row statements are cached per
#: row count (up to ``_sqlite_log.MAX_ROWS``) and table.
WRITER_CACHED_STATEMENTS = 1024

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
    most jobs in one transaction, ``queued`` the jobs waiting right now,
    ``fallback_groups`` the groups whose multi-row write failed and that were re-run job
    by job.
    """

    transactions: int
    jobs: int
    accepted: int
    largest_group: int
    failed_transactions: int
    queued: int
    fallback_groups: int = 0


@attrs.define
class _Commit:
    """One commit record a job appends, with its events ``(stream, idx, type, data)``."""

    scope: Scope
    commit_id: str
    epoch: int
    run_id: RunID | None
    first: int
    facts: tuple[Fact, ...]
    events: list[tuple[str, int, str, bytes]]


RunKey = tuple[Scope, RunID]


class _Plan:
    """The rows one job writes; ``merge`` folds the plans of a group into one.

    Runs and cache entries are keyed by Run, so a Run committed twice in a group is
    written once: its head moves from the first job's old head to the last job's, and
    the cache gets the last job's entry (or deletion).
    """

    __slots__ = ("advances", "cache", "changes", "commits", "frozen", "new_runs")

    def __init__(self) -> None:
        self.frozen: dict[Digest, bytes] = {}
        self.commits: list[_Commit] = []
        #: New Runs: key -> (head, active).
        self.new_runs: dict[RunKey, tuple[int, int]] = {}
        #: Existing Runs: key -> (old head, new head, active).
        self.advances: dict[RunKey, tuple[int, int, int]] = {}
        #: key -> the snapshot to cache, or None to drop the entry.
        self.cache: dict[RunKey, Snapshot | None] = {}
        self.changes: list[Change] = []

    def merge(self, other: _Plan) -> None:
        for digest, data in other.frozen.items():
            self.frozen.setdefault(digest, data)
        self.commits += other.commits
        self.new_runs.update(other.new_runs)
        for key, (old, head, active) in other.advances.items():
            if key in self.new_runs:
                self.new_runs[key] = (head, active)
            elif key in self.advances:
                self.advances[key] = (self.advances[key][0], head, active)
            else:
                self.advances[key] = (old, head, active)
        self.cache.update(other.cache)
        self.changes += other.changes

    def cache_after(self, scope: Scope, run_id: RunID, snap: Snapshot, *,
                    was_open: bool = False) -> None:
        """Keep the durable cache (RUN-CMT-2): drop the entry when the Run ended, write
        it when the Run *arrives* at Open (created, or a step closed); nothing in the
        middle of a step. An input accepted while already at Open (``was_open``) writes
        nothing either: a rebuild folds it from the log tail."""
        if snap.state.status is not RunStatus.ACTIVE:
            self.cache[(scope, run_id)] = None
        elif isinstance(snap.state.current, Open) and not was_open:
            self.cache[(scope, run_id)] = snap


class _Tx:
    """The state of one group transaction: connection plus the running overlay.

    The overlay holds what the jobs accepted so far in this group wrote: each Run's
    newest snapshot (active or ended), the commit-id index entries, foreign stream
    heads. Reads look there first, then at what was looked up at the start of the group
    (``prefetch``), then at the database.
    """

    def __init__(self, conn: sqlite3.Connection, frozen_known: set[Digest] | None = None
                 ) -> None:
        self.conn = conn
        #: Digests of bodies committed earlier by this writer (bodies are never deleted).
        self.frozen_known: set[Digest] = frozen_known if frozen_known is not None else set()
        self.overlay: dict[tuple[int, RunID], Snapshot] = {}
        self.index: dict[tuple[Scope, str], _Commit] = {}
        self.heads: dict[tuple[Scope, str], int] = {}
        self.known_commits: dict[tuple[Scope, str], log.CommitRow | None] = {}
        self.known_runs: dict[RunKey, bool] = {}
        #: The newest commit seq written (None until read from the database).
        self.seq: int | None = None
        self._epochs: dict[Scope, int] = {}

    def check_epoch(self, ws: WriterState) -> None:
        """``log.check_epoch`` with the persisted epoch read once per scope and group.

        Exact: the group holds the write lock (``BEGIN IMMEDIATE``) from its first job to
        ``COMMIT``, no job of a group writes ``scopes`` (only ``OpenJob`` does, and it
        runs alone), so the persisted epoch cannot move inside the transaction.
        """
        current = self._epochs.get(ws.scope)
        if current is None:
            if self.seq is None:
                current, self.seq = log.read_epoch_and_seq(self.conn, ws.scope)
            else:
                current = log.read_epoch(self.conn, ws.scope)
            self._epochs[ws.scope] = current
        log.require_epoch(ws.scope, ws.epoch, current)

    def prefetch(self, jobs: Sequence[Job[Any]]) -> None:
        """Look up, per scope, every commit id and created Run the group names."""
        ids: dict[Scope, list[str]] = {}
        runs: dict[Scope, list[RunID]] = {}
        for job in jobs:
            if job.commit_key is not None:
                scope, cid = job.commit_key
                if cid:
                    ids.setdefault(scope, []).append(cid)
            if job.new_run_key is not None:
                runs.setdefault(job.new_run_key[0], []).append(job.new_run_key[1])
        for scope, cids in ids.items():
            found = log.lookup_commits(self.conn, scope, cids)
            for cid in cids:
                self.known_commits[(scope, cid)] = found.get(cid)
        for scope, run_ids in runs.items():
            existing = log.existing_runs(self.conn, scope, run_ids)
            for run_id in run_ids:
                self.known_runs[(scope, run_id)] = run_id in existing

    # -- reads through the overlay -----------------------------------------------------

    def active(self, ws: WriterState, run_id: RunID) -> Snapshot | None:
        snap = self.overlay.get((id(ws), run_id))
        if snap is not None:
            return snap if snap.state.status is RunStatus.ACTIVE else None
        return ws.projection.active.get(run_id)

    def load(self, ws: WriterState, run_id: RunID) -> Snapshot:
        snap = self.overlay.get((id(ws), run_id))
        if snap is not None:
            return snap
        snap = ws.projection.active.get(run_id)
        if snap is not None:
            return snap
        return log.record(self.conn, ws.scope, run_id)

    def stream_exists(self, ws: WriterState, run_id: RunID) -> bool:
        if (id(ws), run_id) in self.overlay or run_id in ws.projection.active:
            return True
        key = (ws.scope, run_id)
        known = self.known_runs.get(key)
        if known is None:
            known = self.known_runs[key] = log.stream_exists(self.conn, ws.scope, run_id)
        return known

    def _commit_row(self, scope: Scope, commit_id: str) -> log.CommitRow | None:
        key = (scope, commit_id)
        if key in self.known_commits:
            return self.known_commits[key]
        row = self.known_commits[key] = log.lookup_commits(
            self.conn, scope, [commit_id]).get(commit_id)
        return row

    def commit_exists(self, scope: Scope, commit_id: str) -> bool:
        return (scope, commit_id) in self.index or self._commit_row(scope, commit_id) is not None

    def replay_facts(self, scope: Scope, commit_id: str, run_id: RunID
                     ) -> tuple[Fact, ...] | None:
        """The facts *commit_id* appended to *run_id*'s stream, or None if unknown."""
        staged = self.index.get((scope, commit_id))
        if staged is not None:
            return staged.facts if staged.run_id == run_id else ()
        row = self._commit_row(scope, commit_id)
        if row is None:
            return None
        return log.commit_facts(self.conn, scope, commit_id, run_id, row)

    def stream_head(self, scope: Scope, stream: str) -> int:
        key = (scope, stream)
        head = self.heads.get(key)
        if head is None:
            head = self.heads[key] = log.stream_head(self.conn, scope, stream)
        return head

    # -- writes ------------------------------------------------------------------------

    def stage(self, plan: _Plan) -> None:
        """Make an accepted job's writes visible to the later jobs of the group."""
        for ws, run_id, snap in plan.changes:
            self.overlay[(id(ws), run_id)] = snap
            self.known_runs[(ws.scope, run_id)] = True
        for c in plan.commits:
            self.index[(c.scope, c.commit_id)] = c
            for stream, idx, _, _ in c.events:
                self.heads[(c.scope, stream)] = idx

    def write(self, plan: _Plan) -> None:
        """Write *plan*'s rows: one multi-row statement per table (and chunk).

        Raises:
            ProjectionDivergenceError: a Run's stored head is not the projection's.
            sqlite3.Error: a constraint (e.g. a commit id or event position that exists).
        """
        conn = self.conn
        bodies = [(digest, data) for digest, data in plan.frozen.items()
                  if digest not in self.frozen_known]
        if bodies:
            log.frozen_put_many(conn, bodies)
        if plan.commits:
            seq = self.seq if self.seq is not None else log.max_seq(conn)
            commits, events = [], []
            for c in plan.commits:
                seq += 1
                commits.append((seq, c.scope, c.commit_id, c.epoch, c.run_id, c.first,
                                len(c.facts)))
                scope = c.scope
                events += [(scope, stream, idx, type_, data, seq)
                           for stream, idx, type_, data in c.events]
            log.insert_commits(conn, commits)
            log.insert_events(conn, events)
            self.seq = seq
        if plan.new_runs:
            log.insert_runs(conn, [(scope, run_id, head, active)
                                   for (scope, run_id), (head, active)
                                   in plan.new_runs.items()])
        if plan.advances:
            log.advance_runs(conn, [(scope, run_id, old, head, active)
                                    for (scope, run_id), (old, head, active)
                                    in plan.advances.items()])
        if plan.cache:
            put = [(scope, run_id, snap.position, log.encode_state(snap.state))
                   for (scope, run_id), snap in plan.cache.items() if snap is not None]
            drop: dict[Scope, list[RunID]] = {}
            for (scope, run_id), snap in plan.cache.items():
                if snap is None:
                    drop.setdefault(scope, []).append(run_id)
            if put:
                log.put_cache(conn, put)
            for scope, run_ids in drop.items():
                log.delete_cache(conn, scope, run_ids)


class _View:
    """``CommitView`` over the running overlay and the log inside the transaction."""

    def __init__(self, tx: _Tx, ws: WriterState) -> None:
        self._tx = tx
        self._ws = ws

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[Fact, ...] | None:
        return self._tx.replay_facts(self._ws.scope, command_id, run_id)

    def active(self, run_id: RunID) -> Snapshot | None:
        return self._tx.active(self._ws, run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        return self._tx.stream_exists(self._ws, run_id)


class Job(Generic[T]):
    """A unit of work for the writer thread; ``done`` is set (in trio) once answered.

    ``run`` evaluates the job against the running view and returns its answer plus the
    rows to write; it writes nothing itself (except ``alone`` jobs, which run in a
    savepoint of their own).
    """

    #: Jobs that must run in a transaction of their own.
    alone = False
    #: ``(scope, commit id)`` the job looks up first, for the group's prefetch.
    commit_key: tuple[Scope, str] | None = None
    #: ``(scope, run id)`` of a Run the job creates, for the group's prefetch.
    new_run_key: RunKey | None = None

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: T | None = None
        self.error: BaseException | None = None
        #: Set by the writer thread when the answer was handed to trio.
        self.answered = False

    def run(self, tx: _Tx) -> tuple[T, _Plan]:
        raise NotImplementedError

    def outcome(self) -> T:
        """The result, or raise the error (trio side, after ``done``)."""
        if self.error is not None:
            raise self.error
        return self.result  # type: ignore[return-value]


def _run_items(facts: Sequence[Fact]) -> list[tuple[str, bytes]]:
    return [(EVENT_TYPE_PREFIX + f.WIRE_NAME, encode_fact(f)) for f in facts]


def _foreign_rows(
    tx: _Tx, scope: Scope, events: Sequence[ForeignEvent]
) -> list[tuple[str, int, str, bytes]]:
    heads: dict[str, int] = {}
    rows = []
    for e in events:
        if e.stream not in heads:
            heads[e.stream] = tx.stream_head(scope, e.stream)
        heads[e.stream] += 1
        rows.append((e.stream, heads[e.stream], e.type, typed_envelope(e.type, e.payload)))
    return rows


def _active(snap: Snapshot) -> int:
    return int(snap.state.status is RunStatus.ACTIVE)


class CommitJob(Job[CommitResult]):
    """Freeze bodies, then evaluate and append one command (§4.2, §4.3)."""

    def __init__(self, ws: WriterState, request: CommitRequest,
                 bodies: Sequence[tuple[Digest, bytes]]) -> None:
        super().__init__()
        self.ws = ws
        self.request = request
        self.bodies = bodies
        self.commit_key = (ws.scope, request.envelope.id)

    def run(self, tx: _Tx) -> tuple[CommitResult, _Plan]:
        ws, request = self.ws, self.request
        tx.check_epoch(ws)
        plan = _Plan()
        for digest, data in self.bodies:
            plan.frozen.setdefault(digest, data)
        run_id = request.envelope.run_id
        before = tx.active(ws, run_id)
        decision = evaluate_commit(_View(tx, ws), request, scope=ws.scope)
        if isinstance(decision, Replay):
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(ws, run_id),
                                decision.facts), plan
        assert isinstance(decision, Append)
        facts, snap = decision.facts, decision.snapshot
        first = snap.position - len(facts) + 1
        stream = run_stream(run_id)
        plan.commits.append(_Commit(
            ws.scope, request.envelope.id, ws.epoch, run_id, first, facts,
            [(stream, first + i, type_, data) for i, (type_, data) in enumerate(_run_items(facts))],
        ))
        plan.advances[(ws.scope, run_id)] = (first - 1, snap.position, _active(snap))
        was_open = before is not None and isinstance(before.state.current, Open)
        plan.cache_after(ws.scope, run_id, snap, was_open=was_open)
        plan.changes.append((ws, run_id, snap))
        return CommitResult(CommitStatus.ACCEPTED, snap, facts), plan


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
        self.commit_key = (ws.scope, commit_id)
        self.new_run_key = (ws.scope, new_run.run_id)

    def run(self, tx: _Tx) -> tuple[CommitResult, _Plan]:
        ws, run_id = self.ws, self.new_run.run_id
        tx.check_epoch(ws)
        if not self.commit_id:
            raise ValidationError("create_run needs a commit id")
        plan = _Plan()
        prior = tx.replay_facts(ws.scope, self.commit_id, run_id)
        if prior is not None:
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(ws, run_id), prior), plan
        if tx.stream_exists(ws, run_id):
            raise RunExistsError(f"run {run_id} exists", run_id=run_id)
        group = create_group(self.new_run, self.inputs)
        check_foreign(self.extra_events)
        snap = Snapshot(fold_run(group, run_id=run_id), len(group) - 1)
        stream = run_stream(run_id)
        events = [(stream, i, type_, data) for i, (type_, data) in enumerate(_run_items(group))]
        events += _foreign_rows(tx, ws.scope, self.extra_events)
        plan.commits.append(_Commit(ws.scope, self.commit_id, ws.epoch, run_id, 0, group,
                                    events))
        plan.new_runs[(ws.scope, run_id)] = (snap.position, _active(snap))
        plan.cache_after(ws.scope, run_id, snap)
        plan.changes.append((ws, run_id, snap))
        return CommitResult(CommitStatus.ACCEPTED, snap, group), plan


class AppendJob(Job[CommitStatus]):
    """Append foreign events under a commit id (§4.8); a known id replays."""

    def __init__(self, ws: WriterState, commit_id: str,
                 events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.ws = ws
        self.commit_id = commit_id
        self.events = tuple(events)
        self.commit_key = (ws.scope, commit_id)

    def run(self, tx: _Tx) -> tuple[CommitStatus, _Plan]:
        ws = self.ws
        tx.check_epoch(ws)
        if not self.commit_id:
            raise ValidationError("append_events needs a commit id")
        plan = _Plan()
        if tx.commit_exists(ws.scope, self.commit_id):
            return CommitStatus.ALREADY_APPLIED, plan
        check_foreign(self.events)
        if not self.events:
            raise ValidationError("append_events needs at least one event")
        plan.commits.append(_Commit(ws.scope, self.commit_id, ws.epoch, None, 0, (),
                                    _foreign_rows(tx, ws.scope, self.events)))
        return CommitStatus.ACCEPTED, plan


class OpenJob(Job[tuple[int, Projection]]):
    """Bump the scope's epoch and rebuild its projection (its own transaction)."""

    alone = True

    def __init__(self, scope: Scope) -> None:
        super().__init__()
        self.scope = scope

    def run(self, tx: _Tx) -> tuple[tuple[int, Projection], _Plan]:
        epoch = log.bump_epoch(tx.conn, self.scope)
        return (epoch, Projection(log.rebuild_projection(tx.conn, self.scope))), _Plan()


class PutJob(Job[None]):
    """Store a frozen body (idempotent); the digest was checked by the caller."""

    def __init__(self, digest: Digest, data: bytes) -> None:
        super().__init__()
        self.digest = digest
        self.data = data

    def run(self, tx: _Tx) -> tuple[None, _Plan]:
        plan = _Plan()
        plan.frozen[self.digest] = self.data
        return None, plan


_STOP = object()
#: At most this many digests are remembered as committed (then forgotten at once).
_FROZEN_KNOWN_MAX = 65536


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
        self._fallbacks = 0
        #: Digests of frozen bodies this writer committed: a body is content-addressed
        #: and never deleted, so a known one is not inserted again (bounded).
        self._frozen_known: set[Digest] = set()
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
            queued=self._queue.qsize(), fallback_groups=self._fallbacks,
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
        """Evaluate every job, then write the group's rows at once (module docstring)."""
        if any(job.alone for job in jobs):
            self._execute_each(jobs)
            return
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        tx = _Tx(conn, self._frozen_known)
        tx.prefetch(jobs)
        group: _Plan | None = None
        for job in jobs:
            try:
                value, plan = job.run(tx)
            except Exception as exc:
                job.error = exc
                continue
            job.result = value
            tx.stage(plan)
            if group is None:
                group = plan
            else:
                group.merge(plan)
        if group is None:
            group = _Plan()
        try:
            tx.write(group)
        except Exception:
            # Nothing a correct projection produces: find the job at fault, alone.
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            for job in jobs:
                job.result = None
                job.error = None
            self._fallbacks += 1
            self._execute_each(jobs)
            return
        self._commit(jobs, group.changes, group.frozen)

    def _execute_each(self, jobs: Sequence[Job[Any]]) -> None:
        """Run *jobs* one by one, each in its own savepoint: a job whose writes fail is
        rolled back alone."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        tx = _Tx(conn, self._frozen_known)
        changes: list[Change] = []
        frozen: list[Digest] = []
        for job in jobs:
            conn.execute("SAVEPOINT job")
            seq = tx.seq
            try:
                value, plan = job.run(tx)
                tx.write(plan)
            except Exception as exc:
                job.error = exc
                conn.execute("ROLLBACK TO job")
                conn.execute("RELEASE job")
                tx.seq = seq
                continue
            conn.execute("RELEASE job")
            job.result = value
            tx.stage(plan)
            changes += plan.changes
            frozen += plan.frozen
        self._commit(jobs, changes, frozen)

    def _commit(self, jobs: Sequence[Job[Any]], changes: Sequence[Change],
                frozen: Iterable[Digest]) -> None:
        conn = self._conn
        if self.before_commit is not None:
            self.before_commit()
        if not conn.in_transaction:
            raise sqlite3.OperationalError("the group transaction was rolled back")
        conn.execute("COMMIT")
        # Durable: publish to the projections; the caller answers afterwards.
        for ws, run_id, snap in changes:
            ws.apply(run_id, snap)
        if len(self._frozen_known) > _FROZEN_KNOWN_MAX:
            self._frozen_known.clear()
        self._frozen_known.update(frozen)
        self._accepted += len(changes)
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
