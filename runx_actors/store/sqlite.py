"""The embedded default store: SQLite with group commit (architecture §4; spec §4).

``async with open_sqlite_store(path) as store:`` opens (or creates) the database file,
starts the store's writer thread and stops it on exit. The store implements
``SessionStore``: ``await store.open(scope)`` bumps the scope's epoch and returns a
:class:`SqliteWriter`; ``await store.reader(scope)`` returns a :class:`SqliteReader`;
``store.frozen`` is the FrozenStore.

Threads: one writer thread owns the write connection and group-commits the jobs of every
writer (see ``_sqlite_writer``). Reads run in trio worker threads on their own
connections, bounded by a ``CapacityLimiter``. Nothing blocks the trio thread.

Durability: WAL, ``synchronous=FULL``; a caller is answered only after the transaction
holding its commit returned from ``COMMIT``.

Ownership: the epoch lives in the ``scopes`` table; every append transaction
(``BEGIN IMMEDIATE``) compares the writer's epoch with the persisted one first, so the
fencing also holds between processes sharing the file (RUN-CMT-6, INV-28).

Cancellation of writes: a write is queued without a checkpoint in between, so a
cancellation that arrives first leaves nothing queued. Once queued, the write is carried
out whether or not the caller keeps waiting: a caller cancelled while waiting gets
``Cancelled`` and does not learn the result (which may be ACCEPTED). Callers that must
know — settlements — wait inside a shielded scope, or repeat the same command id, which
replays.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import trio

from ..protocol.arguments import check_count, check_seconds
from ..protocol.commit import (
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    validate_name,
)
from ..protocol.errors import StoreOpenError, ValidationError
from ..protocol.values import AgentInput, Digest, NewRun, Scope
from . import _sqlite_log as log
from ._facade import SqlFrozenStore, SqlReader, SqlRunStore, SqlStoreBase, SqlWriter
from ._sqlite_jobs import CheckpointJob
from ._sqlite_schema import (
    DEFAULT_BUSY_TIMEOUT,
    SQLITE_ERRORS,
    busy_error,
    check_header,
    connect,
    corrupt,
    create_store_file,
    ensure_schema,
    is_damage,
)
from ._sqlite_writer import (
    WRITER_CACHED_STATEMENTS,
    AppendJob,
    BatchJob,
    CommitJob,
    CreateJob,
    Job,
    OpenJob,
    PutJob,
    WriterState,
    WriterStatistics,
    WriterThread,
)
from .base import ForeignEvent

_logger = logging.getLogger("runx_actors.store.sqlite")

__all__ = [
    "open_sqlite_store", "SqliteStore", "SqliteWriter", "SqliteReader", "SqliteRunStore",
    "SqliteFrozenStore", "WriterStatistics",
]

T = TypeVar("T")


class _ReaderPool:
    """Read-only connections used from trio worker threads, one call at a time each."""

    def __init__(self, path: str, size: int, busy_timeout: float) -> None:
        self._path = path
        self._busy_timeout = busy_timeout
        self._limiter = trio.CapacityLimiter(size)
        self._lock = threading.Lock()
        self._idle: list[Any] = []
        self._closed = False

    @property
    def in_flight(self) -> int:
        """Reads running on (or waiting for) a reader thread."""
        return int(self._limiter.borrowed_tokens) + int(self._limiter.statistics().tasks_waiting)

    async def run(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` in a worker thread. Checkpoint.

        Cancellation: while waiting for the limiter nothing has run; once the read runs it
        is not abandoned: it completes (reads are short), its result is returned, and the
        cancellation is delivered at the caller's next checkpoint.
        """
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        return await trio.to_thread.run_sync(self._call, fn, args, limiter=self._limiter)

    def _call(self, fn: Callable[..., T], args: tuple[Any, ...]) -> T:
        with self._lock:
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            try:
                conn = connect(self._path, busy_timeout=self._busy_timeout, readonly=True)
            except SQLITE_ERRORS as exc:
                if not is_damage(exc):
                    raise
                raise corrupt(self._path, f"the database is damaged: {exc}",
                              reason="sqlite") from exc
        try:
            return fn(conn, *args)
        except SQLITE_ERRORS as exc:
            if not is_damage(exc):
                raise
            raise corrupt(self._path, f"the database is damaged: {exc}",
                          reason="sqlite") from exc
        finally:
            with self._lock:
                if self._closed:
                    conn.close()
                else:
                    self._idle.append(conn)

    def close(self) -> None:
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for conn in idle:
            conn.close()


class SqliteFrozenStore(SqlFrozenStore["SqliteStore"]):
    """FrozenStore in the ``frozen`` table (RUN-WIR-4)."""

    async def _write(self, digest: Digest, data: bytes) -> None:
        await self._store._submit(PutJob(digest, data))


class SqliteStore(SqlStoreBase[WriterState]):
    """A SessionStore in one SQLite file. Obtain it from :func:`open_sqlite_store`."""

    _log = log

    def __init__(self, path: str, writer: WriterThread, readers: _ReaderPool) -> None:
        self.path = path
        self._writer = writer
        self._readers = readers
        self._frozen = SqliteFrozenStore(self)
        self._live: dict[Scope, WriterState] = {}
        self._closed = False

    @property
    def frozen(self) -> SqliteFrozenStore:
        return self._frozen

    @property
    def writer_thread(self) -> threading.Thread:
        """The thread that owns the write connection (started and stopped by the store)."""
        return self._writer.thread

    def statistics(self) -> WriterStatistics:
        """Counters of the writer thread (transactions, jobs, group sizes, jobs in flight)."""
        return self._writer.statistics()

    def io_in_flight(self) -> int:
        """Operations handed to a thread whose answer trio has not received yet: writer
        jobs in flight plus reads running on reader threads. A count, never blocks; used
        by test clocks that must not jump virtual time while real I/O is running."""
        return self._writer.statistics().in_flight + self._readers.in_flight

    def set_before_commit_hook(self, hook: Callable[[], None] | None) -> None:
        """Test hook run in the writer thread right before each ``COMMIT``."""
        self._writer.before_commit = hook

    async def _submit(self, job: Job[T]) -> T:
        """Queue *job* for the writer thread and wait for its answer. Checkpoint.

        Cancellation: see the module docstring (queued means it will be carried out).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if self._closed:
            raise trio.ClosedResourceError("the store is closed")
        self._writer.submit(job)
        await job.done.wait()
        return job.outcome()

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        return await self._readers.run(fn, *args)

    async def _create_run(
        self, ws: WriterState, new_run: NewRun, inputs: Sequence[AgentInput], commit_id: str,
        extra_events: Sequence[ForeignEvent],
    ) -> CommitResult:
        return await self._submit(CreateJob(ws, new_run, inputs, commit_id, extra_events))

    async def _append_events(
        self, ws: WriterState, commit_id: str, events: Sequence[ForeignEvent]
    ) -> CommitStatus:
        return await self._submit(AppendJob(ws, commit_id, events))

    async def _commit(
        self, ws: WriterState, request: CommitRequest, bodies: tuple[tuple[Digest, bytes], ...]
    ) -> CommitResult:
        return await self._submit(CommitJob(ws, request, bodies))

    async def _commit_batch(
        self, ws: WriterState, requests: Sequence[CommitRequest],
        bodies: tuple[tuple[tuple[Digest, bytes], ...], ...],
    ) -> BatchResult:
        return await self._submit(BatchJob(ws, requests, bodies))

    async def open(self, scope: Scope) -> SqliteWriter:
        """Bump *scope*'s persisted epoch and return its writer (RUN-CMT-6). Checkpoint.

        The projection is rebuilt from the durable cache plus the log tail, in the same
        transaction as the bump. Every earlier writer of the scope, in this process or
        another, is fenced from now on.

        Cancellation: before the request is queued nothing happens; once queued the bump
        is carried out even if the caller is cancelled (earlier writers are then fenced
        and the new writer is simply not returned).

        Raises: ValidationError (empty scope, or not a valid name: RUN-WIR-1),
        CorruptRecordError, CorruptLogError.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        if not scope:
            raise ValidationError("scope must be non-empty")
        validate_name(scope, "scope")
        epoch, projection, cached = await self._submit(OpenJob(scope))
        ws = WriterState(scope, epoch, projection, cached)
        self._live[scope] = ws
        return SqliteWriter(self, ws)

    async def reader(self, scope: Scope) -> SqliteReader:
        """A reader of *scope*; needs no ownership. Checkpoint."""
        await trio.lowlevel.checkpoint()
        return SqliteReader(self, scope)

    async def aclose(self) -> None:
        """Stop the writer thread after the queued jobs, and close every connection.

        Checkpoint. Idempotent. Runs shielded: cancellation is delivered afterwards.
        """
        with trio.CancelScope(shield=True):
            if not self._closed:
                self._closed = True
                self._writer.stop()
                await trio.to_thread.run_sync(self._writer.thread.join)
                self._readers.close()
            await trio.lowlevel.checkpoint()


@asynccontextmanager
async def open_sqlite_store(
    path: str | os.PathLike[str],
    *,
    readers: int = 4,
    busy_timeout: float = DEFAULT_BUSY_TIMEOUT,
    max_group: int = 512,
) -> AsyncIterator[SqliteStore]:
    """Open the SQLite store at *path* (created if missing) for the duration of the block.

    Starts the writer thread (it owns the write connection) and stops it on exit, after
    it has finished the queued jobs. *readers* bounds concurrent read connections;
    *max_group* bounds how many jobs share one transaction. *busy_timeout* (seconds)
    bounds how long opening and each write wait for a lock another connection holds
    (another process using the same file); past it they raise StoreBusyError.

    Only a *path* that does not exist gets a new store; an existing file is checked
    before anything is written (RUN-STO-1, RUN-STO-2).

    *path* is a ``str`` or an ``os.PathLike`` of ``str`` naming a file; bytes are
    refused (a store path is text: it is shown in errors and receipts).

    Raises:
        ValidationError: *path* is not a ``str``/``os.PathLike[str]`` (``None``, ``5``,
            ``b"x"``), is empty, contains NUL, or is one of SQLite's special names
            (``:memory:`` or any name starting with ``:``, a ``file:`` URI), or
            *readers*/*max_group* is not an integer >= 1, *busy_timeout* not a finite
            number of seconds >= 0 (attribute ``argument``). Checked before any file is
            created.
        StoreOpenError: *path* is a directory, its directory does not exist (it is not
            created), or the OS refuses to create or open the file (``path``,
            ``reason``). Nothing was written.
        SchemaVersionError: the file holds an unknown schema version or is a SQLite
            database that is not a store (foreign).
        CorruptStoreError: the file is zero bytes, garbage, truncated or otherwise
            damaged, a table is missing, or a scope's epoch is invalid (``path``,
            ``table``, ``row``, ``reason`` name it). Nothing was written.
        StoreBusyError: another connection held the lock past *busy_timeout* (here, or
            from a write of the store later). Nothing was written.
    """
    name = store_path(path)
    check_count(readers, "readers", minimum=1)
    check_count(max_group, "max_group", minimum=1)
    check_seconds(busy_timeout, "busy_timeout")
    try:
        conn = await trio.to_thread.run_sync(_open_writer_connection, name, busy_timeout)
    except sqlite3.OperationalError as exc:
        busy = busy_error(name, exc, busy_timeout)
        if busy is None:
            raise
        raise busy from exc
    writer = WriterThread(conn, trio.lowlevel.current_trio_token(), max_group=max_group,
                          path=name, busy_timeout=busy_timeout)
    writer.start()
    store = SqliteStore(name, writer, _ReaderPool(name, readers, busy_timeout))
    try:
        yield store
    finally:
        await store.aclose()


def store_path(path: object) -> str:
    """*path* as the text of a store file, checked before any file is touched.

    Raises ValidationError (attribute ``argument="path"``) for anything but a
    ``str``/``os.PathLike[str]`` (bytes included: refused, not decoded), an empty path, a
    NUL, and SQLite's special names: ``:memory:`` and every name starting with ``:``
    (SQLite reserves them), and ``file:`` URIs (the store opens plain paths only)."""
    if isinstance(path, os.PathLike):
        path = os.fspath(path)
    if not isinstance(path, str):
        raise ValidationError(f"the store path must be a str or os.PathLike[str], not "
                              f"{type(path).__name__} {repr(path)[:64]}", argument="path",
                              value=repr(path)[:64])
    if not path:
        raise ValidationError("the store path is empty", argument="path", value=path)
    if "\x00" in path:
        raise ValidationError(f"the store path {path[:64]!r} contains NUL", argument="path",
                              value=path[:64])
    if path.startswith(":") or path.lower().startswith("file:"):
        raise ValidationError(f"the store path {path[:64]!r} is a SQLite special name, not "
                              "a file (name a file, e.g. ./store.sqlite3)", argument="path",
                              value=path[:64])
    return path


#: ``sqlite_errorname`` values that mean the file cannot be created or opened at its
#: path (not that it is damaged): StoreOpenError.
_CANNOT_OPEN = frozenset({"SQLITE_CANTOPEN", "SQLITE_READONLY", "SQLITE_PERM",
                          "SQLITE_READONLY_DIRECTORY", "SQLITE_CANTOPEN_ISDIR"})


def _cannot_open(path: str, exc: BaseException) -> StoreOpenError | None:
    """The StoreOpenError for *exc* raised while creating or opening *path*, or None
    when *exc* says something else (damage, a lock …)."""
    if isinstance(exc, sqlite3.Error):
        if str(getattr(exc, "sqlite_errorname", "")) not in _CANNOT_OPEN:
            return None
        detail = str(exc)
    elif isinstance(exc, OSError):
        detail = exc.strerror or str(exc)
    else:
        return None
    return StoreOpenError(f"cannot open the store at {path!r}: {detail}", path=path,
                          reason="cannot_open")


def _open_writer_connection(path: str, busy_timeout: float) -> Any:
    """Create the store if *path* does not exist, else check it before anything can be
    written: header, identity, version, tables, epochs (RUN-STO-1, RUN-STO-2).

    Raises StoreOpenError (a directory, a missing parent directory, a path the OS will not
    let SQLite create or open), before anything is written."""
    if os.path.isdir(path):
        raise StoreOpenError(f"cannot open the store at {path!r}: it is a directory (name "
                             "a file in it)", path=path, reason="is_directory")
    parent = os.path.dirname(os.path.abspath(path))
    if not os.path.isdir(parent):
        what = "is not a directory" if os.path.lexists(parent) else "does not exist"
        raise StoreOpenError(f"cannot open the store at {path!r}: {parent!r} {what} (a "
                             "directory is not created)", path=path,
                             reason="missing_directory")
    try:
        create_store_file(path)
    except (sqlite3.Error, OSError) as exc:
        refused = _cannot_open(path, exc)
        if refused is None:
            raise
        raise refused from exc
    check_header(path)
    try:
        conn = connect(path, busy_timeout=busy_timeout,
                       cached_statements=WRITER_CACHED_STATEMENTS)
    except SQLITE_ERRORS as exc:
        refused = _cannot_open(path, exc)
        if refused is not None:
            raise refused from exc
        if not is_damage(exc):
            raise
        raise corrupt(path, f"the database is damaged: {exc}", reason="sqlite") from exc
    try:
        ensure_schema(conn, path)
    except BaseException:
        conn.close()
        raise
    return conn


class SqliteReader(SqlReader["SqliteStore"]):
    """Reads of one scope; need no ownership (§4.5)."""


class SqliteWriter(SqliteReader, SqlWriter["SqliteStore"]):
    """The single writer of a scope at one epoch (obtained from ``SqliteStore.open``)."""

    def __init__(self, store: SqliteStore, ws: WriterState) -> None:
        super().__init__(store, ws)
        self._run_store = SqliteRunStore(self)

    def run_store(self) -> SqliteRunStore:
        return self._run_store

    async def aclose(self) -> None:
        """Checkpoint the projection: cache every active Run's snapshot at its head, in
        one transaction, so the next ``open`` of the scope loads one cache row per Run
        and folds no log tail (RUN-CMT-2; the cache is disposable, a crash only costs
        the fold). Nothing is written once another writer took the scope or the store
        is closed. Checkpoint. Runs shielded (at most 30 s). Raises nothing: a failed
        checkpoint is logged and costs the next open the tail fold.
        """
        store = self._store
        with trio.CancelScope(shield=True), trio.move_on_after(30.0):
            try:
                if not store._closed and store._live.get(self.scope) is self._ws:
                    await store._submit(CheckpointJob(self._ws))
            except Exception as exc:  # the cache is disposable (RUN-CMT-2)
                _logger.info("projection checkpoint of scope %r skipped: %r", self.scope, exc)
        await trio.lowlevel.checkpoint()


class SqliteRunStore(SqlRunStore[SqliteWriter]):
    """RunStore bound to a SqliteWriter (RUN-CMT-1)."""
