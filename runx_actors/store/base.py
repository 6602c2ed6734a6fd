"""Store ports (spec §4.1, §4.8, §4.10; RUN-CMT-1, RUN-CMT-6, RUN-WIR-4).

A ``SessionStore`` opens scopes. Opening bumps the scope's persisted epoch and returns a
``SessionWriter``: this process is now the scope's single writer and every append carries
that epoch. A stale epoch is refused with ``OwnershipLostError`` and writes nothing.
Reads (``SessionReader.record``) need no ownership.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import attrs

from ..protocol.commit import (
    MAX_ID_BYTES,
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Snapshot,
    batch_refusal,
    check_batch,
    validate_name,
)
from ..protocol.errors import ValidationError
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.values import AgentInput, Digest, ModelRequest, NewRun, RunID, Scope

__all__ = [
    "unstorable",
    "ForeignEvent", "StoredEvent", "StreamRecord", "FrozenStore", "RunStore", "SessionWriter",
    "SessionReader", "SessionStore", "RUN_STREAM_PREFIX", "run_stream", "check_foreign",
    "commit_batch", "Committer",
]

RUN_STREAM_PREFIX = "run/"


def run_stream(run_id: RunID) -> str:
    """The stream name of a Run's facts: ``run/<RunID>``."""
    return RUN_STREAM_PREFIX + run_id


@attrs.frozen
class ForeignEvent:
    """An event of another module, appended through the same writer and epoch."""

    stream: str
    type: str
    payload: Any


def unstorable(*keys: str) -> bool:
    """True when a lookup key cannot be stored in a SQL text column: it holds NUL
    (PostgreSQL text cannot) or a lone surrogate (not UTF-8). No row has such a key — a
    name that could hold one is refused where it enters (RUN-WIR-1, ``validate_name``) —
    so a lookup by it answers "absent" instead of the driver's error."""
    for key in keys:
        if "\x00" in key:
            return True
        try:
            key.encode("utf-8")
        except UnicodeEncodeError:
            return True
    return False


def check_foreign(events: Sequence[ForeignEvent]) -> None:
    """Refuse ``run/`` streams and ``twilight/run/`` types (RUN-SCP-2), and a stream or
    type that is not a valid name (RUN-WIR-1, ``validate_name``), with ValidationError."""
    for e in events:
        if not e.stream or not e.type:
            raise ValidationError("foreign event needs a stream and a type", event=e)
        validate_name(e.stream, "foreign stream", MAX_ID_BYTES)  # it may embed a name
        validate_name(e.type, "foreign event type")
        if e.stream.startswith(RUN_STREAM_PREFIX) or e.type.startswith(EVENT_TYPE_PREFIX):
            raise ValidationError("foreign events may not write Run streams or types", event=e)


@attrs.frozen
class StoredEvent:
    """One stored event: ``data`` is the typed-envelope bytes (§2.12)."""

    stream: str
    index: int
    type: str
    data: bytes
    commit_id: str
    epoch: int


@attrs.frozen
class StreamRecord:
    """A decoded event of a (foreign) stream: what ``read_stream`` returns."""

    stream: str
    index: int
    type: str
    payload: Any
    commit_id: str
    epoch: int


class FrozenStore(Protocol):
    """Content-addressed bodies (RUN-WIR-4): ``sha256(data) == digest`` always."""

    async def put(self, digest: Digest, data: bytes) -> None:
        """Store *data* under *digest*; idempotent. ValidationError on a mismatch."""

    async def get(self, digest: Digest) -> bytes:
        """The bytes stored under *digest*; FrozenValueMissingError if absent."""


class RunStore(Protocol):
    """The transactional port of the Run module, bound to a writer (RUN-CMT-1)."""

    @property
    def scope(self) -> Scope:
        """The scope this port commits into (a name valid under RUN-WIR-1)."""

    async def load(self, run_id: RunID) -> Snapshot:
        """The projection's snapshot (or the ended snapshot); RunNotFoundError."""

    async def commit(self, request: CommitRequest) -> CommitResult:
        """Freeze bodies, then evaluate and append atomically (§4.2, §4.3)."""

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        """Commit *requests* (one Run) in order, as one transaction (RUN-CMT-9).

        Each request is evaluated as ``commit`` would on the scope left by the earlier
        ones; the batch stops at the first refusal. The evaluated prefix is appended
        atomically (one durable commit); the refusal is returned in ``error``.
        Raises: ValidationError (empty batch, mixed Runs; nothing written),
        OwnershipLostError and store errors (nothing of the batch written).
        """

    async def frozen_request(self, digest: Digest) -> ModelRequest:
        """The frozen model request; FrozenValueMissingError."""


@runtime_checkable
class SessionReader(Protocol):
    """The read side of one scope (RUN-CMT-2, RUN-STO-3): every read is of durable rows,
    checked as it is read; it takes no epoch and fences nobody."""

    async def record(self, run_id: RunID) -> Snapshot:
        """Fold the Run's log (authoritative); RunNotFoundError; ProjectionDivergenceError."""

    async def run_facts(self, run_id: RunID) -> tuple[Fact, ...]:
        """Every fact of the Run, decoded strictly."""

    async def tail_facts(self, run_id: RunID, count: int) -> tuple[Fact, ...]:
        """The Run's last *count* facts (every fact when it has fewer; *count* ≥ 1), in
        order, decoded strictly, and checked as :meth:`run_facts` checks its rows from the
        one before the first returned (the chain, the commits, the Run's head: RUN-STO-3).
        Costs O(*count*), not O(log). Raises RunNotFoundError, CorruptRecordError."""

    async def read_stream(self, stream: str) -> tuple[StreamRecord, ...]:
        """Every event of *stream* in order, payloads decoded (empty if no such stream)."""


class SessionWriter(Protocol):
    """The owner of one scope at one epoch (RUN-CMT-6): ``scope`` its name, ``epoch`` the
    epoch :meth:`SessionStore.open` bumped to. Every write checks the epoch in the same
    transaction; a later ``open`` of the scope fences this writer
    (OwnershipLostError, nothing written)."""

    scope: Scope
    epoch: int

    def run_store(self) -> RunStore:
        """The transactional port of the Run module, bound to this writer (RUN-CMT-1)."""

    def projection(self) -> dict[RunID, Snapshot]:
        """Read-only copy of the active Runs' snapshots."""

    async def create_run(
        self,
        new_run: NewRun,
        inputs: Sequence[AgentInput] = (),
        *,
        commit_id: str,
        extra_events: Sequence[ForeignEvent] = (),
    ) -> CommitResult:
        """Create *new_run* with its first *inputs* and *extra_events* (foreign streams,
        RUN-NEW-1) as one durable commit under *commit_id* (idempotent: a commit id
        already in the log returns ALREADY_APPLIED with the Run's snapshot and the facts it
        committed, RUN-CMT-3). Raises ValidationError (an empty or invalid id, RUN-WIR-1;
        nothing written), OwnershipLostError (fenced; nothing written), RunExistsError
        (the Run exists under another commit id)."""

    async def append_events(self, commit_id: str, events: Sequence[ForeignEvent]) -> CommitStatus:
        """Append foreign *events* (non-``run/`` streams) as one durable commit under
        *commit_id*: ACCEPTED, or ALREADY_APPLIED when the id is known (RUN-CMT-3).
        Raises ValidationError (no events, a ``run/`` stream, an invalid name; nothing
        written), OwnershipLostError (fenced; nothing written)."""

    async def aclose(self) -> None:
        """Release what the writer holds of its own (the built-in stores hold nothing:
        the store owns the connections). Idempotent; a checkpoint."""


class SessionStore(Protocol):
    """A durable home for scopes (RUN-CMT-1): ``open`` takes a scope over, ``reader``
    reads it, ``frozen`` holds the content-addressed bodies (RUN-WIR-4)."""

    async def open(self, scope: Scope) -> SessionWriter:
        """Bump the scope's epoch and return its writer (rebuilding the projection)."""

    async def reader(self, scope: Scope) -> SessionReader:
        """A reader of *scope*; no epoch is taken (a scope never opened has no Runs:
        RunNotFoundError, empty streams)."""

    @property
    def frozen(self) -> FrozenStore:
        """The store's content-addressed bodies (RUN-WIR-4)."""




class Committer(Protocol):
    """What :func:`commit_batch` needs of a store at least: ``commit`` (any RunStore)."""

    async def commit(self, request: CommitRequest) -> CommitResult:
        """Freeze bodies, then evaluate and append atomically (§4.2, §4.3)."""


async def commit_batch(store: Committer, requests: Sequence[CommitRequest]) -> BatchResult:
    """Commit a batch through *store* (RUN-CMT-9).

    Uses ``store.commit_batch`` when the store has one (one transaction). Otherwise (a
    RunStore written before batches) it commits the requests one by one with
    ``store.commit``, stopping at the first refusal: the same BatchResult, but without
    the shared transaction (a crash can leave a prefix of the batch durable).

    Raises:
        ValidationError: empty batch or requests naming different Runs (nothing written).
        OwnershipLostError, store errors: as ``commit`` (earlier requests of the batch
            may be durable on the fallback path).
    """
    method = getattr(store, "commit_batch", None)
    if method is not None:
        result: BatchResult = await method(requests)
        return result
    check_batch(requests)
    results: list[CommitResult] = []
    for request in requests:
        try:
            results.append(await store.commit(request))
        except Exception as exc:
            if not batch_refusal(exc):
                raise
            return BatchResult(results, exc)
    return BatchResult(results, None)
