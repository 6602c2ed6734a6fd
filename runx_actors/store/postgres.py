"""The PostgreSQL run store: many runtimes on many hosts, one database (architecture §4).

``async with open_postgres_store(dsn) as store:`` opens a ``psycopg_pool.ConnectionPool``
to *dsn*, creates the tables in the connection's current schema if it is empty (or checks
their version), and closes the pool on exit. The store has the same surface as the SQLite
store (:mod:`runx_actors.store.sqlite`): ``await store.open(scope)`` bumps the scope's
epoch and returns a :class:`PostgresWriter`; ``await store.reader(scope)`` returns a
:class:`PostgresReader`; ``store.frozen`` is the FrozenStore. Install the ``postgres``
extra (``pip install 'runx-actors[postgres]'``: psycopg 3 and psycopg-pool).

Threads: every database call runs psycopg's synchronous API in a trio worker thread
(``trio.to_thread.run_sync``) on a pooled connection; at most *max_size* at once. Nothing
blocks the trio thread.

Group commit: each writer queues its commits; one flush at a time per writer takes every
queued job and runs them in ONE transaction, each job in its own savepoint (a refused job
writes nothing, the others commit). Writers of different scopes flush in parallel on
different connections. See ``_pg_writer``.

Durability: ``synchronous_commit = on`` on every connection; a caller is answered only
after the transaction holding its commit returned from ``COMMIT``.

Ownership (RUN-CMT-6, INV-28): the epoch lives in the ``scopes`` table. ``open`` bumps it;
every group transaction first locks the scope's row (``SELECT … FOR UPDATE``) and compares
the writer's epoch with the persisted one, so a writer superseded by any other store
instance — another pool, process or host — gets ``OwnershipLostError`` and writes nothing.

Cancellation of writes: a write is queued without a checkpoint in between, so a
cancellation that arrives first leaves nothing queued. Once queued, the write is carried
out whether or not the caller keeps waiting: a caller cancelled while waiting gets
``Cancelled`` and does not learn the result (which may be ACCEPTED). Callers that must
know — settlements — wait inside a shielded scope, or repeat the same command id, which
replays. A psycopg error from a write means the outcome is unknown (the server may have
committed before the connection died): replay once with the same command id; the writer
refolds the Runs of the failed group from the log first, so the replay answers
ALREADY_APPLIED with the original facts or applies the command now.
"""

from __future__ import annotations

import copy
import math
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import attrs
import psycopg
import trio
from psycopg_pool import ConnectionPool, PoolTimeout

from .._scoped import body_errors_unwrapped
from ..protocol.commit import (
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    validate_name,
)
from ..protocol.errors import CorruptStoreError, ValidationError
from ..protocol.values import AgentInput, Digest, NewRun, Scope
from . import _pg_log as log
from ._check import (
    REACH_HINTS,
    StoreUnreachableError,
    connect_postgres,
    mask_secrets,
    redact_dsn,
)
from ._facade import SqlFrozenStore, SqlReader, SqlRunStore, SqlStoreBase, SqlWriter
from ._group import GroupCounters, GroupStatistics
from ._pg_schema import ensure_schema, is_damage, make_pool
from ._pg_writer import (
    AppendJob,
    BatchJob,
    CommitJob,
    CreateJob,
    GroupResult,
    Hooks,
    Job,
    PgWriterState,
    open_scope,
    run_group,
)
from .base import ForeignEvent

__all__ = [
    "open_postgres_store", "PostgresStore", "PostgresWriter", "PostgresReader",
    "PostgresRunStore", "PostgresFrozenStore", "PostgresStatistics", "StoreUnreachableError",
]

T = TypeVar("T")


@attrs.frozen
class PostgresStatistics(GroupStatistics):
    """A snapshot of the store's group-commit counters (style §2.5).

    ``transactions`` counts committed group transactions (each one ``COMMIT`` with
    ``synchronous_commit = on``), ``jobs`` the jobs they carried (accepted or refused; a
    batch commit is one job, RUN-CMT-9), ``accepted`` the commit records appended,
    ``largest_group`` the most jobs in one transaction, ``failed_transactions`` the
    groups whose transaction failed (outcome unknown), ``queued`` the jobs waiting now.
    """


class PostgresFrozenStore(SqlFrozenStore["PostgresStore"]):
    """FrozenStore in the ``frozen`` table, shared by every scope (RUN-WIR-4)."""

    async def _write(self, digest: Digest, data: bytes) -> None:
        await self._store._call(log.frozen_put, digest, data)


class PostgresStore(SqlStoreBase[PgWriterState]):
    """A SessionStore in one PostgreSQL schema. Obtain it from :func:`open_postgres_store`."""

    _log = log

    def __init__(self, pool: ConnectionPool, nursery: trio.Nursery, *, max_size: int,
                 max_group: int) -> None:
        self._pool = pool
        self._nursery = nursery
        self._limiter = trio.CapacityLimiter(max_size)
        self._max_group = max_group
        self._frozen = PostgresFrozenStore(self)
        self._live: dict[Scope, PgWriterState] = {}
        self._hooks = Hooks()
        self._closed = False
        self._flushes = 0
        self._idle = trio.Event()
        self._idle.set()
        self._writers: list[PgWriterState] = []
        self._counters = GroupCounters()

    @property
    def frozen(self) -> PostgresFrozenStore:
        return self._frozen

    @property
    def pool(self) -> ConnectionPool:
        """The connection pool (owned by the store; for diagnostics)."""
        return self._pool

    def statistics(self) -> PostgresStatistics:
        """Counters of the group transactions (see :class:`PostgresStatistics`)."""
        return PostgresStatistics(
            **self._counters.fields(), queued=sum(len(ws.pending) for ws in self._writers),
        )

    def set_before_commit_hook(self, hook: Callable[[], None] | None) -> None:
        """Test hook run in the worker thread right before each group's ``COMMIT``."""
        self._hooks.before_commit = hook

    def set_after_commit_hook(self, hook: Callable[[], None] | None) -> None:
        """Test hook run in the worker thread right after each group's ``COMMIT``; an
        exception from it stands for a response lost after the server committed."""
        self._hooks.after_commit = hook

    # -- calls into worker threads ---------------------------------------------------

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a pooled connection in a worker thread. Checkpoint.

        Cancellation: while waiting for a thread nothing has run; once running, the call
        completes, its result is returned and the cancellation is delivered at the
        caller's next checkpoint.
        """
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        return await trio.to_thread.run_sync(self._with_conn, fn, args, limiter=self._limiter)

    def _with_conn(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._pool.connection() as conn:
            try:
                return fn(conn, *args)
            except psycopg.Error as exc:
                raise _typed(exc) from exc

    async def _submit(self, ws: PgWriterState, job: Job[T]) -> T:
        """Queue *job* in *ws*'s group and wait for its answer. Checkpoint.

        Cancellation: see the module docstring (queued means it will be carried out).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        ws.pending.append(job)
        if not ws.flushing:
            ws.flushing = True
            if self._flushes == 0:
                self._idle = trio.Event()
            self._flushes += 1
            self._nursery.start_soon(self._flush, ws)
        await job.done.wait()
        return job.outcome()

    async def _create_run(
        self, ws: PgWriterState, new_run: NewRun, inputs: Sequence[AgentInput],
        commit_id: str, extra_events: Sequence[ForeignEvent],
    ) -> CommitResult:
        return await self._submit(ws, CreateJob(new_run, inputs, commit_id, extra_events))

    async def _append_events(
        self, ws: PgWriterState, commit_id: str, events: Sequence[ForeignEvent]
    ) -> CommitStatus:
        return await self._submit(ws, AppendJob(commit_id, events))

    async def _commit(
        self, ws: PgWriterState, request: CommitRequest,
        bodies: tuple[tuple[Digest, bytes], ...],
    ) -> CommitResult:
        return await self._submit(ws, CommitJob(request, bodies))

    async def _commit_batch(
        self, ws: PgWriterState, requests: Sequence[CommitRequest],
        bodies: tuple[tuple[tuple[Digest, bytes], ...], ...],
    ) -> BatchResult:
        return await self._submit(ws, BatchJob(requests, bodies))

    async def _flush(self, ws: PgWriterState) -> None:
        """Run *ws*'s queued jobs group by group until its queue is empty (shielded)."""
        with trio.CancelScope(shield=True):
            try:
                while ws.pending:
                    batch = ws.pending[: self._max_group]
                    del ws.pending[: self._max_group]
                    await self._run_batch(ws, batch)
            finally:
                ws.flushing = False
                self._flushes -= 1
                if self._flushes == 0:
                    self._idle.set()

    async def _run_batch(self, ws: PgWriterState, batch: list[Job[Any]]) -> None:
        suspect = frozenset(ws.suspect)
        try:
            result: GroupResult = await trio.to_thread.run_sync(
                run_group, self._pool, ws.scope, ws.epoch, ws.projection.active, suspect,
                batch, self._hooks, ws.chain_heads, limiter=self._limiter,
            )
        except BaseException as exc:
            # Unknown outcome: nothing is published; the group's Runs are refolded from
            # the log by the writer's next group. Refused jobs keep their own refusal.
            self._counters.failed += 1
            ws.suspect.update(job.run_id for job in batch if job.run_id is not None)
            for job in batch:
                if job.error is None:
                    job.result = None
                    job.error = _copy_error(_typed(exc))
            if not isinstance(exc, Exception):
                raise
        else:
            # Durable: publish to the projection, then answer.
            ws.apply(result.changes)
            ws.suspect.difference_update(result.refreshed)
            if len(ws.chain_heads) > _CHAIN_HEADS_MAX:
                ws.chain_heads.clear()
            ws.chain_heads.update(result.chains)
            self._counters.committed(len(batch), result.accepted)
        finally:
            for job in batch:
                job.done.set()

    # -- the SessionStore port -------------------------------------------------------

    async def open(self, scope: Scope) -> PostgresWriter:
        """Bump *scope*'s persisted epoch and return its writer (RUN-CMT-6). Checkpoint.

        The projection is rebuilt from the durable cache plus the log tail, in the same
        transaction as the bump. Every earlier writer of the scope, in this store or any
        other store instance on the same database, is fenced from now on.

        Cancellation: before the thread starts nothing happens; once it runs the bump is
        carried out even if the caller is cancelled (earlier writers are then fenced and
        the new writer is simply not returned).

        Raises: ValidationError (empty scope, or not a valid name: RUN-WIR-1),
        CorruptRecordError, CorruptLogError, or a
        psycopg error (unknown outcome: opening again is always safe).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if not scope:
            raise ValidationError("scope must be non-empty")
        validate_name(scope, "scope")
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        try:
            epoch, projection = await trio.to_thread.run_sync(
                open_scope, self._pool, scope, limiter=self._limiter
            )
        except psycopg.Error as exc:
            raise _typed(exc) from exc
        ws = PgWriterState(scope, epoch, projection)
        self._live[scope] = ws
        self._writers = [w for w in self._writers if w.pending or w.flushing] + [ws]
        return PostgresWriter(self, ws)

    async def reader(self, scope: Scope) -> PostgresReader:
        """A reader of *scope*; needs no ownership. Checkpoint."""
        await trio.lowlevel.checkpoint()
        return PostgresReader(self, scope)

    async def aclose(self) -> None:
        """Finish the queued groups, then close the pool. Checkpoint. Idempotent.

        Runs shielded: cancellation is delivered afterwards.
        """
        with trio.CancelScope(shield=True):
            if not self._closed:
                self._closed = True
                await self._idle.wait()
                await trio.to_thread.run_sync(self._pool.close)
            await trio.lowlevel.checkpoint()


#: At most this many stream chain heads are remembered per writer (then forgotten).
_CHAIN_HEADS_MAX = 65536


def _typed(exc: BaseException) -> BaseException:
    """*exc* as a CorruptStoreError when it says the schema is damaged (RUN-STO-1)."""
    if is_damage(exc):
        err = CorruptStoreError(f"the store is damaged: {exc}", reason="postgres")
        err.__cause__ = exc
        return err
    return exc


def _copy_error(exc: BaseException) -> BaseException:
    """A copy of *exc* for one more waiting caller (each task raises its own object)."""
    try:
        return copy.copy(exc)
    except Exception:  # pragma: no cover - an exception type that cannot be copied
        return exc


@body_errors_unwrapped
@asynccontextmanager
async def open_postgres_store(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 8,
    max_group: int = 512,
    timeout: float = 30.0,
) -> AsyncIterator[PostgresStore]:
    """Open the PostgreSQL store at *dsn* (a libpq connection string or URI) for the block.

    Opens a pool of *min_size* … *max_size* connections (every database call of the store
    uses one, in a worker thread; *max_size* also bounds concurrent calls), creates the
    schema if the current schema is empty, and on exit finishes the queued groups and
    closes the pool. *max_group* bounds how many jobs of one writer share a transaction;
    *timeout* (seconds) bounds waiting for the pool to open and for a free connection.

    Raises:
        ValidationError: a size is not positive or ``min_size > max_size``.
        SchemaVersionError: the schema holds an unknown version or is not a store.
        StoreUnreachableError: (``runx_actors.store.postgres.StoreUnreachableError``) the
            database cannot be reached: *dsn* does not parse (``reason="bad_dsn"``), or
            the server refuses the connection, the database or role does not exist,
            authentication fails, or no connection came within *timeout*
            (``reason="unreachable"``). The message and ``target`` show *dsn* with its
            password masked (``password=***``); the driver's error is ``__cause__``
            (none for a DSN that does not parse: its message may quote the password).
            One connection is tried first (libpq's ``connect_timeout``: *timeout*
            rounded up, unless *dsn* sets one), so a refused port fails at once rather
            than after *timeout* (RUN-CLI-2).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """
    if min_size < 1 or max_size < min_size or max_group < 1 or timeout <= 0:
        raise ValidationError("need 1 <= min_size <= max_size, max_group >= 1, timeout > 0")
    pool = await trio.to_thread.run_sync(
        lambda: _open_pool(dsn, min_size=min_size, max_size=max_size, timeout=timeout))
    async with trio.open_nursery() as nursery:
        store = PostgresStore(pool, nursery, max_size=max_size, max_group=max_group)
        try:
            yield store
        finally:
            await store.aclose()


def _open_pool(dsn: str, *, min_size: int, max_size: int, timeout: float) -> ConnectionPool:
    """An open pool of *dsn* whose schema holds a store (created in an empty schema).
    One connection is tried first, because a pool retries a refused connection until
    *timeout* and then raises an untyped ``PoolTimeout``; every way of not reaching the
    database is :class:`StoreUnreachableError` with the password masked."""
    connect_postgres(dsn, connect_timeout=math.ceil(timeout)).close()
    pool = make_pool(dsn, min_size=min_size, max_size=max_size, timeout=timeout)
    try:
        pool.open(wait=True, timeout=timeout)
        with pool.connection() as conn:
            ensure_schema(conn)
    except BaseException as exc:
        pool.close()
        if isinstance(exc, psycopg.OperationalError):  # PoolTimeout is one
            target = redact_dsn(dsn)  # reachable a moment ago, no longer
            detail = ("no connection within "
                      f"{timeout:g} s" if isinstance(exc, PoolTimeout)
                      else mask_secrets(str(exc), dsn))
            raise StoreUnreachableError(
                f"cannot reach the PostgreSQL store {target}: {' '.join(detail.split())}",
                target=target, reason="unreachable", hint=REACH_HINTS["unreachable"]
            ) from exc
        raise
    return pool


class PostgresReader(SqlReader["PostgresStore"]):
    """Reads of one scope; need no ownership (§4.5)."""


class PostgresWriter(PostgresReader, SqlWriter["PostgresStore"]):
    """The single writer of a scope at one epoch (obtained from ``PostgresStore.open``)."""

    def __init__(self, store: PostgresStore, ws: PgWriterState) -> None:
        super().__init__(store, ws)
        self._run_store = PostgresRunStore(self)

    def run_store(self) -> PostgresRunStore:
        return self._run_store


class PostgresRunStore(SqlRunStore[PostgresWriter]):
    """RunStore bound to a PostgresWriter (RUN-CMT-1)."""
