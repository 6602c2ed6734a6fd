"""The in-memory store: the reference every other store is held to (spec §4; RUN-CMP-2).

All state lives in :class:`~runx_actors.store._scope.ScopeLog` objects, which never
await, so every commit is atomic. Each public coroutine is a checkpoint.
"""

from __future__ import annotations

from collections.abc import Sequence

import trio

from ..protocol.commit import (
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Snapshot,
    check_batch,
    validate_name,
)
from ..protocol.digests import model_request_from_frozen
from ..protocol.errors import ValidationError
from ..protocol.facts import Fact
from ..protocol.values import AgentInput, Digest, ModelRequest, NewRun, RunID, Scope
from ._freeze import batch_bodies, bodies_of
from ._group import GroupStatistics
from ._scope import FrozenBodies, Projection, ScopeLog
from .base import ForeignEvent, StreamRecord

__all__ = ["MemoryStore", "MemoryFrozenStore", "MemoryWriter", "MemoryRunStore", "MemoryReader"]


class MemoryFrozenStore:
    """FrozenStore kept in a dict (RUN-WIR-4)."""

    def __init__(self) -> None:
        self.bodies = FrozenBodies()

    async def put(self, digest: Digest, data: bytes) -> None:
        """Store *data* under *digest*. Checkpoint. Raises ValidationError on a mismatch."""
        await trio.lowlevel.checkpoint()
        self.bodies.put(digest, data)

    async def get(self, digest: Digest) -> bytes:
        """Checkpoint. Raises FrozenValueMissingError if absent."""
        await trio.lowlevel.checkpoint()
        return self.bodies.get(digest)


class MemoryStore:
    """A SessionStore in memory. ``scope_log(scope)`` exposes the log for tests;
    ``log_class`` is the ScopeLog class a new scope gets (a subclass can swap in a
    deliberately broken log to check that a test catches it)."""

    log_class: type[ScopeLog] = ScopeLog

    def __init__(self) -> None:
        self._scopes: dict[Scope, ScopeLog] = {}
        self._live: dict[Scope, Projection] = {}
        self._frozen = MemoryFrozenStore()

    @property
    def frozen(self) -> MemoryFrozenStore:
        """The content-addressed bodies of every scope (RUN-WIR-4), in memory."""
        return self._frozen

    def scope_log(self, scope: Scope) -> ScopeLog:
        """*scope*'s log (created empty on first use; no epoch is taken). Callers have
        validated the name (RUN-WIR-1); tests use it to damage the log on purpose."""
        log = self._scopes.get(scope)
        if log is None:
            log = self._scopes[scope] = self.log_class(scope)
        return log

    async def open(self, scope: Scope) -> MemoryWriter:
        """Bump *scope*'s epoch and return its writer (RUN-CMT-6). Checkpoint."""
        await trio.lowlevel.checkpoint()
        if not scope:
            raise ValidationError("scope must be non-empty")
        validate_name(scope, "scope")
        epoch, projection = self.scope_log(scope).open()
        self._live[scope] = projection
        return MemoryWriter(self, scope, epoch, projection)

    async def reader(self, scope: Scope) -> MemoryReader:
        """A reader of *scope* (RUN-CMT-2); no epoch is taken. Checkpoint."""
        await trio.lowlevel.checkpoint()
        return MemoryReader(self, scope)

    def live_projection(self, scope: Scope) -> Projection | None:
        """The projection of *scope*'s current writer (None before its first open); tests
        compare it with the folded log (RUN-CMT-2)."""
        return self._live.get(scope)

    def statistics(self) -> GroupStatistics:
        """Counters of the atomic appends of every scope (RUN-CMT-9): ``transactions``
        is what a durable store would fsync (a commit, a batch, a creation, foreign
        events), ``accepted`` the commit records they appended, ``largest_group`` the
        most commit records one batch appended. ``jobs`` equals ``transactions``."""
        logs = list(self._scopes.values())
        transactions = sum(log.transactions for log in logs)
        return GroupStatistics(
            transactions=transactions, jobs=transactions,
            accepted=sum(log.appended for log in logs),
            largest_group=max((log.largest_batch for log in logs), default=0),
            failed_transactions=0, queued=0)

    async def cached_projection(self, scope: Scope) -> dict[RunID, Snapshot]:
        """The durable projection cache of *scope* (for tests and diagnostics). Checkpoint."""
        await trio.lowlevel.checkpoint()
        return dict(self.scope_log(scope).cache)


class MemoryReader:
    """Reads need no ownership (§4.5)."""

    def __init__(self, store: MemoryStore, scope: Scope) -> None:
        self._store = store
        self.scope = scope

    async def record(self, run_id: RunID) -> Snapshot:
        """Fold the Run's log; RunNotFoundError; ProjectionDivergenceError. Checkpoint."""
        await trio.lowlevel.checkpoint()
        log = self._store.scope_log(self.scope)
        return log.record(run_id, self._store.live_projection(self.scope))

    async def run_facts(self, run_id: RunID) -> tuple[Fact, ...]:
        """Every fact of the Run, decoded strictly. RunNotFoundError. Checkpoint."""
        await trio.lowlevel.checkpoint()
        return self._store.scope_log(self.scope).facts(run_id)

    async def tail_facts(self, run_id: RunID, count: int) -> tuple[Fact, ...]:
        """The Run's last *count* facts (all when fewer), decoded strictly.
        RunNotFoundError. Checkpoint."""
        await trio.lowlevel.checkpoint()
        return self._store.scope_log(self.scope).facts(run_id, tail=count)

    async def read_stream(self, stream: str) -> tuple[StreamRecord, ...]:
        """Every event of *stream*, payloads decoded; () for an unknown stream."""
        await trio.lowlevel.checkpoint()
        return self._store.scope_log(self.scope).read_stream(stream)


class MemoryWriter(MemoryReader):
    """The single writer of a scope at one epoch."""

    def __init__(self, store: MemoryStore, scope: Scope, epoch: int, projection: Projection):
        super().__init__(store, scope)
        self.epoch = epoch
        self._projection = projection
        self._run_store = MemoryRunStore(self)

    @property
    def log(self) -> ScopeLog:
        """The scope's log this writer appends to (shared with later writers)."""
        return self._store.scope_log(self.scope)

    def run_store(self) -> MemoryRunStore:
        """The RunStore port bound to this writer (RUN-CMT-1)."""
        return self._run_store

    def projection(self) -> dict[RunID, Snapshot]:
        """A copy of the active Runs' snapshots, by Run id (RUN-CMT-2)."""
        return dict(self._projection.active)

    def active_runs(self) -> tuple[RunID, ...]:
        """The ids of the Runs still active in this writer's projection."""
        return tuple(self._projection.active)

    async def create_run(
        self,
        new_run: NewRun,
        inputs: Sequence[AgentInput] = (),
        *,
        commit_id: str,
        extra_events: Sequence[ForeignEvent] = (),
    ) -> CommitResult:
        """Create a Run (RUN-NEW-1, D-8). Checkpoint.

        Raises: OwnershipLostError, RunExistsError, ValidationError.
        """
        await trio.lowlevel.checkpoint()
        return self.log.create_run(self.epoch, self._projection, new_run, inputs, commit_id,
                                   extra_events)

    async def append_events(self, commit_id: str, events: Sequence[ForeignEvent]) -> CommitStatus:
        """Append foreign events (§4.8). Raises OwnershipLostError, ValidationError."""
        await trio.lowlevel.checkpoint()
        return self.log.append_events(self.epoch, commit_id, events)

    async def commit(self, request: CommitRequest) -> CommitResult:
        """``run_store().commit(request)`` (RUN-CMT-1)."""
        return await self._run_store.commit(request)

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        """``run_store().commit_batch(requests)`` (RUN-CMT-9)."""
        return await self._run_store.commit_batch(requests)

    async def aclose(self) -> None:
        """Nothing to release (the log belongs to the store). Checkpoint."""
        await trio.lowlevel.checkpoint()


class MemoryRunStore:
    """RunStore bound to a MemoryWriter (RUN-CMT-1)."""

    def __init__(self, writer: MemoryWriter) -> None:
        self._writer = writer

    @property
    def scope(self) -> Scope:
        """The writer's scope."""
        return self._writer.scope

    async def load(self, run_id: RunID) -> Snapshot:
        """Snapshot from the projection, or the ended snapshot. RunNotFoundError."""
        await trio.lowlevel.checkpoint()
        return self._writer.log.load(run_id, self._writer._projection)

    async def commit(self, request: CommitRequest) -> CommitResult:
        """Freeze bodies (§4.2), then evaluate and append atomically (§4.3). Checkpoint.

        Raises: OwnershipLostError (fenced; nothing written), RunNotFoundError,
        RunTerminalError, CommandConflictError, StaleRuntimeError.
        """
        bodies = bodies_of(request.envelope.command)
        await trio.lowlevel.checkpoint()
        # One checkpoint per commit: bodies and facts are stored without a checkpoint in
        # between (a cancellation at the checkpoint leaves nothing written).
        w = self._writer
        frozen = w._store.frozen.bodies
        for digest, data in bodies:
            frozen.put(digest, data)
        return w.log.commit(w.epoch, w._projection, request)

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        """Freeze the bodies (§4.2), then evaluate the batch and append its evaluated
        prefix atomically (RUN-CMT-9; see ``ScopeLog.commit_batch``). One checkpoint,
        before anything is stored: a cancellation there leaves nothing written.

        Returns: BatchResult (the refusal that ended the batch in ``error``).
        Raises: ValidationError (empty batch, mixed Runs; nothing written),
        OwnershipLostError (fenced; nothing of the batch written).
        """
        check_batch(requests)
        bodies, error = batch_bodies(requests)
        await trio.lowlevel.checkpoint()
        if not bodies:  # as ``commit``: a body that cannot be frozen is refused first
            return BatchResult((), error)
        w = self._writer
        frozen = w._store.frozen.bodies
        new = [d for each in bodies for d, _ in each if d not in frozen]
        for each in bodies:
            for digest, data in each:
                frozen.put(digest, data)
        try:
            result = w.log.commit_batch(w.epoch, w._projection, requests[:len(bodies)])
        except BaseException:
            frozen.discard(new)  # a failed batch leaves the store as it was
            raise
        if result.error is None and error is not None:
            return BatchResult(result.results, error)
        return result

    async def frozen_request(self, digest: Digest) -> ModelRequest:
        """The frozen model request. Raises FrozenValueMissingError."""
        data = await self._writer._store.frozen.get(digest)
        return model_request_from_frozen(digest, data)
