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
The jobs and the running view they evaluate against are in ``_sqlite_jobs``.
"""

from __future__ import annotations

import copy
import queue
import sqlite3
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import attrs
import trio

from ..protocol.values import Digest
from ._group import GroupCounters, GroupStatistics
from ._sqlite_jobs import (
    AppendJob,
    BatchJob,
    Change,
    CommitJob,
    CreateJob,
    GroupTx,
    Job,
    OpenJob,
    Plan,
    PutJob,
    WriterState,
)
from ._sqlite_schema import DEFAULT_BUSY_TIMEOUT, busy_error, corrupt, is_damage

__all__ = [
    "WriterState", "WriterStatistics", "Job", "CommitJob", "BatchJob", "CreateJob", "AppendJob",
    "OpenJob", "PutJob", "WriterThread",
]

#: Statements the writer connection keeps prepared: multi-row statements are cached per
#: row count (up to ``_sqlite_log.MAX_ROWS``) and table.
WRITER_CACHED_STATEMENTS = 1024


@attrs.frozen
class WriterStatistics(GroupStatistics):
    """A snapshot of the writer's counters (style §2.5).

    ``transactions`` counts committed write transactions (each one ``COMMIT``, fsynced:
    ``synchronous=FULL``), ``jobs`` the jobs they carried (accepted or refused; a batch
    commit is one job, RUN-CMT-9), ``accepted`` the commit records that appended,
    ``largest_group`` the most jobs in one transaction, ``queued`` the jobs waiting right now,
    ``fallback_groups`` the groups whose multi-row write failed and that were re-run job
    by job, ``in_flight`` the jobs submitted whose answer trio has not received yet
    (queued, being written, or answered but not yet handed back to the trio loop).
    """

    fallback_groups: int = 0
    in_flight: int = 0


_STOP = object()
#: At most this many digests are remembered as committed (then forgotten at once).
_FROZEN_KNOWN_MAX = 65536


class WriterThread:
    """The thread that owns the write connection (see the module docstring).

    ``submit`` is called from trio; ``stop`` queues a sentinel after which the thread
    finishes the jobs already queued, closes the connection and exits.
    """

    def __init__(self, conn: sqlite3.Connection, token: trio.lowlevel.TrioToken, *,
                 max_group: int = 512, name: str = "runx-sqlite-writer",
                 path: str = "", busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> None:
        self._conn = conn
        self._path = path
        self._busy_timeout = busy_timeout
        self._token = token
        self._max_group = max_group
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._main, name=name, daemon=True)
        self._counters = GroupCounters()
        self._fallbacks = 0
        #: Digests of frozen bodies this writer committed: a body is content-addressed
        #: and never deleted, so a known one is not inserted again (bounded).
        self._frozen_known: set[Digest] = set()
        #: ``(scope, stream) -> (idx, chain)`` of the newest row this writer committed to
        #: each stream, so an append needs no read for its chain (bounded).
        self._chain_heads: dict[tuple[str, str], tuple[int, bytes]] = {}
        #: Test hook: called in the writer thread after the group's jobs ran, before
        #: ``COMMIT``. Lets tests hold a transaction open.
        self.before_commit: Callable[[], None] | None = None
        self._died: BaseException | None = None
        #: Jobs submitted and not yet woken; touched only on the trio thread.
        self._in_flight = 0

    @property
    def thread(self) -> threading.Thread:
        """The writer thread (started by :meth:`start`, ended by :meth:`stop`)."""
        return self._thread

    def start(self) -> None:
        """Start the writer thread; it takes jobs from the queue in groups."""
        self._thread.start()

    def submit(self, job: Job[Any]) -> None:
        """Queue *job* (never blocks).

        Raises:
            RuntimeError: the writer thread died (its error is the ``__cause__``).
        """
        if self._died is not None:
            raise RuntimeError("the store's writer thread died") from self._died
        self._in_flight += 1
        self._queue.put(job)

    def stop(self) -> None:
        """Ask the writer thread to end after the jobs already queued (never blocks)."""
        self._queue.put(_STOP)

    def statistics(self) -> WriterStatistics:
        """Counters of the writer (groups, jobs, fallbacks) and what is queued or in flight
        now; a snapshot, read on the trio thread."""
        return WriterStatistics(
            **self._counters.fields(), queued=self._queue.qsize(),
            fallback_groups=self._fallbacks, in_flight=self._in_flight,
        )

    def _wake(self, jobs: Sequence[Job[Any]]) -> None:
        """Runs on the trio thread (``run_sync_soon``): hand the answers back."""
        self._in_flight -= len(jobs)
        for job in jobs:
            job.done.set()

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
            if job.error is not None and is_damage(job.error):
                cause = job.error
                job.error = corrupt(self._path, f"the database is damaged: {cause}",
                                    reason="sqlite")
                job.error.__cause__ = cause
            elif job.error is not None:
                job.error = busy_error(self._path, job.error, self._busy_timeout) or job.error
        try:
            self._token.run_sync_soon(self._wake, jobs)
        except trio.RunFinishedError:  # pragma: no cover - the store outlived its trio run
            pass

    def _process(self, jobs: Sequence[Job[Any]]) -> None:
        """Run *jobs* as one transaction and answer every caller afterwards."""
        try:
            self._execute(jobs)
        except Exception as exc:
            # Nothing of this group is durable. Refused jobs keep their own refusal;
            # every other job gets the transaction's error ("unknown": replay once).
            self._counters.failed += 1
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
        tx = GroupTx(conn, self._frozen_known, self._chain_heads)
        tx.prefetch(jobs)
        group: Plan | None = None
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
            group = Plan()
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
        self._commit(jobs, group.changes, group.frozen, tx, group.cached)

    def _execute_each(self, jobs: Sequence[Job[Any]]) -> None:
        """Run *jobs* one by one, each in its own savepoint: a job whose writes fail is
        rolled back alone."""
        conn = self._conn
        conn.execute("BEGIN IMMEDIATE")
        tx = GroupTx(conn, self._frozen_known, self._chain_heads)
        changes: list[Change] = []
        cached: list[Change] = []
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
            cached += plan.cached
            frozen += plan.frozen
        self._commit(jobs, changes, frozen, tx, cached)

    def _commit(self, jobs: Sequence[Job[Any]], changes: Sequence[Change],
                frozen: Iterable[Digest], tx: GroupTx, cached: Sequence[Change] = ()) -> None:
        conn = self._conn
        if self.before_commit is not None:
            self.before_commit()
        if not conn.in_transaction:
            raise sqlite3.OperationalError("the group transaction was rolled back")
        conn.execute("COMMIT")
        # Durable: publish to the projections; the caller answers afterwards.
        for ws, run_id, snap in changes:
            ws.apply(run_id, snap)
        # then the cache entries written: each holds its Run's snapshot unless a later
        # change of the group moved the Run past it (mark_cached compares identity)
        for ws, run_id, snap in cached:
            ws.mark_cached(run_id, snap)
        if len(self._frozen_known) > _FROZEN_KNOWN_MAX:
            self._frozen_known.clear()
        self._frozen_known.update(frozen)
        if len(self._chain_heads) > _FROZEN_KNOWN_MAX:
            self._chain_heads.clear()
        self._chain_heads.update(tx.chains)
        self._counters.committed(len(jobs), len(changes))


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
