"""The SessionStore facades both SQL stores share (architecture §4; spec §4.5).

:class:`SqlReader`, :class:`SqlWriter`, :class:`SqlRunStore` and :class:`SqlFrozenStore`
are the same code over either store: they reach the database only through the small
backend interface of :class:`SqlStoreBase`: ``_call`` runs a function of the backend's
log module (``_log``) on a connection in a worker thread, and ``_create_run`` /
``_append_events`` / ``_commit`` queue a writer's job and wait for its answer. The
backends (``sqlite``, ``postgres``) subclass them, naming their own types and keeping the
docstrings that name their own errors. "The module docstring" in the docstrings below is
the backend's (``runx_actors.store.sqlite``, ``runx_actors.store.postgres``): it says how
a cancelled write behaves.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Generic, Protocol, TypeVar

import trio

from ..protocol.commit import (
    MAX_ID_BYTES,
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Snapshot,
    check_batch,
    validate_name,
)
from ..protocol.digests import model_request_from_frozen
from ..protocol.errors import FrozenValueMissingError
from ..protocol.facts import Fact
from ..protocol.values import AgentInput, Digest, ModelRequest, NewRun, RunID, Scope
from ._freeze import batch_bodies, bodies_of
from ._group import WriterStateBase
from ._scope import check_divergence, check_frozen
from .base import ForeignEvent, StreamRecord

__all__ = [
    "LogReads", "SqlStoreBase", "SqlFrozenStore", "SqlReader", "SqlWriter", "SqlRunStore",
]

T = TypeVar("T")
WS = TypeVar("WS", bound=WriterStateBase)
S = TypeVar("S", bound="SqlStoreBase[Any]")


class LogReads(Protocol):
    """The reads of a backend's log module (``_sqlite_log``, ``_pg_log``) the facades use."""

    def record(self, conn: Any, scope: Scope, run_id: RunID) -> Snapshot:
        """The Run's log folded (RUN-CMT-2). Raises RunNotFoundError, CorruptRecordError."""
        ...

    def run_facts(
        self, conn: Any, scope: Scope, run_id: RunID, *, start: int = ...,
        stop: int | None = ...,
    ) -> tuple[Fact, ...]:
        """Facts at positions ``start`` … ``stop - 1``, checked. Raises RunNotFoundError,
        CorruptRecordError."""
        ...

    def tail_facts(self, conn: Any, scope: Scope, run_id: RunID, count: int
                   ) -> tuple[Fact, ...]:
        """The last *count* facts, checked from the row before (RUN-STO-3). Raises
        ValueError (*count* < 1), RunNotFoundError, CorruptRecordError."""
        ...

    def read_stream(self, conn: Any, scope: Scope, stream: str) -> tuple[StreamRecord, ...]:
        """Every event of *stream*, decoded; () when unknown. Raises CorruptRecordError."""
        ...

    def read_cache(self, conn: Any, scope: Scope) -> dict[RunID, Snapshot]:
        """The durable projection cache of *scope*: Run id → snapshot."""
        ...

    def read_epoch(self, conn: Any, scope: Scope) -> int:
        """The scope's persisted epoch (0 when never opened; RUN-CMT-6)."""
        ...

    def frozen_get(self, conn: Any, digest: Digest) -> bytes:
        """The frozen body stored under *digest*. Raises FrozenValueMissingError."""
        ...


class SqlStoreBase(Generic[WS]):
    """The backend interface of the facades, plus the store methods that are the same."""

    _log: LogReads
    #: The current writer of each scope this store opened (for the divergence check).
    _live: dict[Scope, WS]

    async def _call(self, fn: Callable[..., T], *args: Any) -> T:
        """Run ``fn(conn, *args)`` on a connection in a worker thread. Checkpoint."""
        raise NotImplementedError

    async def _create_run(
        self, ws: WS, new_run: NewRun, inputs: Sequence[AgentInput], commit_id: str,
        extra_events: Sequence[ForeignEvent],
    ) -> CommitResult:
        raise NotImplementedError

    async def _append_events(
        self, ws: WS, commit_id: str, events: Sequence[ForeignEvent]
    ) -> CommitStatus:
        raise NotImplementedError

    async def _commit(
        self, ws: WS, request: CommitRequest, bodies: tuple[tuple[Digest, bytes], ...]
    ) -> CommitResult:
        raise NotImplementedError

    async def _commit_batch(
        self, ws: WS, requests: Sequence[CommitRequest],
        bodies: tuple[tuple[tuple[Digest, bytes], ...], ...],
    ) -> BatchResult:
        """Queue one batch job (RUN-CMT-9): all its rows in one transaction. ``bodies[i]``
        are request *i*'s; only those of the requests evaluated are stored."""
        raise NotImplementedError

    @property
    def frozen(self) -> SqlFrozenStore[Any]:
        """The store's frozen-body store (digest → bytes, RUN-WIR-4)."""
        raise NotImplementedError

    async def cached_projection(self, scope: Scope) -> dict[RunID, Snapshot]:
        """The durable projection cache of *scope* (for tests and diagnostics)."""
        return await self._call(self._log.read_cache, scope)

    async def scope_epoch(self, scope: Scope) -> int:
        """The persisted epoch of *scope* (0 if never opened). Checkpoint."""
        return await self._call(self._log.read_epoch, scope)


class SqlFrozenStore(Generic[S]):
    """FrozenStore in the ``frozen`` table (RUN-WIR-4); ``put`` is the backend's."""

    def __init__(self, store: S) -> None:
        self._store = store

    async def get(self, digest: Digest) -> bytes:
        """The stored bytes. Checkpoint. Raises FrozenValueMissingError if absent,
        CorruptRecordError if the stored value is not a BLOB hashing to *digest*."""
        return await self._store._call(self._store._log.frozen_get, digest)

    async def put(self, digest: Digest, data: bytes) -> None:
        """Store *data* under *digest* durably; idempotent. Checkpoint.

        A body already stored intact is not written again; a damaged one under the same
        digest is refused, never kept silently behind ``ON CONFLICT DO NOTHING``
        (RUN-STO-2, RUN-STO-4).

        Raises:
            ValidationError: ``sha256(data)`` is not *digest* (nothing written).
            CorruptRecordError: the stored body under *digest* is damaged (nothing written).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        check_frozen(digest, data)
        try:
            await self.get(digest)
            return
        except FrozenValueMissingError:
            pass
        await self._write(digest, bytes(data))

    async def _write(self, digest: Digest, data: bytes) -> None:
        raise NotImplementedError  # the backend's insert


class SqlReader(Generic[S]):
    """Reads of one scope; need no ownership (§4.5)."""

    def __init__(self, store: S, scope: Scope) -> None:
        self._store = store
        self.scope = scope

    async def record(self, run_id: RunID) -> Snapshot:
        """Fold the Run's log: the authoritative read (RUN-CMT-2). Checkpoint.

        Raises:
            RunNotFoundError: no such Run in this scope.
            ProjectionDivergenceError: the Run is active, the projection of this store's
                current writer of the scope is at the same head, and the states differ.
            CorruptRecordError: a stored row does not decode (names Run and position).
        """
        store = self._store
        snap = await store._call(store._log.record, self.scope, run_id)
        live = store._live.get(self.scope)
        if live is not None:
            check_divergence(run_id, snap, live.get(run_id))
        return snap

    async def run_facts(self, run_id: RunID) -> tuple[Fact, ...]:
        """Every fact of the Run, decoded strictly. Checkpoint.

        Raises: RunNotFoundError, CorruptRecordError.
        """
        return await self._store._call(self._store._log.run_facts, self.scope, run_id)

    async def tail_facts(self, run_id: RunID, count: int) -> tuple[Fact, ...]:
        """The Run's last *count* facts, checked as :meth:`run_facts` checks them from
        the row before the first (``SessionReader.tail_facts``). Checkpoint.

        Raises: RunNotFoundError, CorruptRecordError.
        """
        return await self._store._call(self._store._log.tail_facts, self.scope, run_id,
                                       count)

    async def read_stream(self, stream: str) -> tuple[StreamRecord, ...]:
        """Every event of *stream*, payloads decoded; () for an unknown stream.

        Raises: CorruptRecordError.
        """
        return await self._store._call(self._store._log.read_stream, self.scope, stream)


class SqlWriter(SqlReader[S]):
    """The single writer of a scope at one epoch; ``run_store`` is the backend's."""

    def __init__(self, store: S, ws: WriterStateBase) -> None:
        super().__init__(store, ws.scope)
        self.epoch = ws.epoch
        self._ws = ws

    def run_store(self) -> SqlRunStore[Any]:
        """The RunStore committing through this writer (RUN-CMT-1)."""
        raise NotImplementedError

    def projection(self) -> dict[RunID, Snapshot]:
        """A copy of the active Runs' snapshots (not a checkpoint)."""
        return self._ws.copy()

    def active_runs(self) -> tuple[RunID, ...]:
        """The ids of the scope's active Runs (not a checkpoint)."""
        return tuple(self._ws.copy())

    async def create_run(
        self,
        new_run: NewRun,
        inputs: Sequence[AgentInput] = (),
        *,
        commit_id: str,
        extra_events: Sequence[ForeignEvent] = (),
    ) -> CommitResult:
        """Create a Run plus *extra_events* in one commit (RUN-NEW-1, D-8). Checkpoint.

        Cancellation: see the module docstring.
        Raises: OwnershipLostError (nothing written), RunExistsError, ValidationError (a
        run id or commit id that is not a valid name, RUN-WIR-1: checked before anything
        reads or writes by it).
        """
        validate_name(new_run.run_id, "run id")
        if commit_id:
            validate_name(commit_id, "commit id", MAX_ID_BYTES)
        return await self._store._create_run(self._ws, new_run, inputs, commit_id,
                                             extra_events)

    async def append_events(self, commit_id: str, events: Sequence[ForeignEvent]) -> CommitStatus:
        """Append foreign events under *commit_id* (§4.8). Checkpoint.

        Raises: OwnershipLostError (nothing written), ValidationError (``run/`` streams,
        ``twilight/run/`` types, no events, empty commit id, a commit id, stream or type
        that is not a valid name — RUN-WIR-1, checked before anything reads by it).
        """
        if commit_id:
            validate_name(commit_id, "commit id", MAX_ID_BYTES)
        return await self._store._append_events(self._ws, commit_id, events)

    async def commit(self, request: CommitRequest) -> CommitResult:
        """``run_store().commit(request)`` (RUN-CMT-1)."""
        return await self.run_store().commit(request)

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        """``run_store().commit_batch(requests)`` (RUN-CMT-9)."""
        return await self.run_store().commit_batch(requests)

    async def aclose(self) -> None:
        """Nothing to release (the store owns the connections). Checkpoint."""
        await trio.lowlevel.checkpoint()


W = TypeVar("W", bound=SqlWriter[Any])


class SqlRunStore(Generic[W]):
    """RunStore bound to a writer (RUN-CMT-1)."""

    def __init__(self, writer: W) -> None:
        self._writer = writer

    @property
    def scope(self) -> Scope:
        """The scope of the writer this RunStore commits through."""
        return self._writer.scope

    async def load(self, run_id: RunID) -> Snapshot:
        """The projection's snapshot, or the ended snapshot folded from the log.

        Checkpoint. Raises RunNotFoundError, CorruptRecordError.
        """
        snap = self._writer._ws.get(run_id)
        if snap is not None:
            await trio.lowlevel.checkpoint()
            return snap
        store: SqlStoreBase[Any] = self._writer._store
        return await store._call(store._log.record, self.scope, run_id)

    async def commit(self, request: CommitRequest) -> CommitResult:
        """Freeze bodies (§4.2), then evaluate and append in a group transaction (§4.3).

        Checkpoint. The bodies are stored in the same transaction, before the facts.
        Cancellation: see the backend's module docstring — once queued, the commit is
        carried out.
        Raises: OwnershipLostError (fenced; nothing written), RunNotFoundError,
        RunTerminalError, CommandConflictError, StaleRuntimeError, or the driver's error
        (``sqlite3`` / psycopg) when the transaction failed (unknown outcome: replay once).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        bodies = bodies_of(request.envelope.command)
        store: SqlStoreBase[Any] = self._writer._store
        return await store._commit(self._writer._ws, request, bodies)

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        """Freeze the bodies (§4.2), then evaluate the batch and append its evaluated
        prefix in ONE transaction (RUN-CMT-9). Checkpoint.

        The batch is one writer job: its bodies and rows are written together (in a
        group transaction it may share with other jobs), the caller is answered after
        ``COMMIT``, and the projection moves only then. Cancellation: as ``commit``.

        Returns: BatchResult — one result per evaluated request, and the refusal that
        ended the batch (RunNotFoundError, RunTerminalError, CommandConflictError,
        StaleRuntimeError, ValidationError) in ``error``.
        Raises: ValidationError (empty batch, mixed Runs; nothing queued),
        OwnershipLostError (fenced; nothing of the batch written), or the driver's error
        when the transaction failed (nothing of the batch written, or an unknown outcome
        if the connection died at ``COMMIT``: replay the batch once).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        check_batch(requests)
        bodies, error = batch_bodies(requests)
        if not bodies:  # as ``commit``: a body that cannot be frozen is refused first
            await trio.lowlevel.checkpoint()
            return BatchResult((), error)
        store: SqlStoreBase[Any] = self._writer._store
        result = await store._commit_batch(self._writer._ws, requests[:len(bodies)], bodies)
        if result.error is None and error is not None:
            return BatchResult(result.results, error)
        return result

    async def frozen_request(self, digest: Digest) -> ModelRequest:
        """The frozen model request. Checkpoint. Raises FrozenValueMissingError."""
        data = await self._writer._store.frozen.get(digest)
        return model_request_from_frozen(digest, data)
