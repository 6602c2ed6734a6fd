"""Backend-neutral pieces of the SQL logs (spec §4.7, §4.8; RUN-CMT-2, RUN-CMT-6).

``_sqlite_log`` and ``_pg_log`` differ in their SQL text and dialect only. What they share
lives here, over plain Python values (rows already fetched) or over a connection that is
handed back to the backend's own ``run_facts``: decoding event rows (``CorruptRecordError``
naming the scope, Run or stream, and position), the fencing error, the cache form of a
machine state, and the control flow of the reads that rebuild a projection, read the
cache, replay a commit's facts and decode a stream. None opens or ends a transaction.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any, Protocol

from ..protocol._codec import decode_fact, decode_value, encode_value
from ..protocol._evolve import evolve
from ..protocol.canonical import read_envelope
from ..protocol.commit import Snapshot, fold_run
from ..protocol.errors import (
    CorruptRecordError,
    EvolveError,
    FrozenValueMissingError,
    OwnershipLostError,
    RunNotFoundError,
    ValidationError,
)
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.state import MachineState
from ..protocol.values import Digest, RunID, RunStatus, Scope
from ._scope import integral_ints
from .base import StreamRecord, run_stream

__all__ = [
    "RunFacts", "CommitRow", "decode_rows", "select_run_facts", "fenced", "require_epoch",
    "encode_state", "decode_state", "cache_entries", "commit_facts", "rebuild_projection",
    "stream_records", "frozen_body", "head_of",
]


class RunFacts(Protocol):
    """A backend's ``run_facts(conn, scope, run_id, *, start, stop)``."""

    def __call__(
        self, conn: Any, scope: Scope, run_id: RunID, *, start: int = 0,
        stop: int | None = None,
    ) -> tuple[Fact, ...]: ...


#: A commit-id index entry: the Run it appended to (None for foreign-only commits), the
#: position of its first Run fact and how many Run facts it appended.
CommitRow = tuple[RunID | None, int, int]


# -- Run events ------------------------------------------------------------------------


def _decode(scope: Scope, run_id: RunID, idx: int, type_: str, data: Any) -> Fact:
    try:
        fact: Fact = decode_fact(bytes(data))
    except Exception as exc:
        raise CorruptRecordError(
            f"event {idx} of run {run_id!r} in scope {scope!r} does not decode: {exc}",
            scope=scope, run_id=run_id, position=idx, type=type_,
        ) from exc
    if type_ != EVENT_TYPE_PREFIX + fact.WIRE_NAME:
        raise CorruptRecordError(
            f"event {idx} of run {run_id!r} in scope {scope!r} has type {type_!r} but holds "
            f"{fact.WIRE_NAME!r}", scope=scope, run_id=run_id, position=idx, type=type_,
        )
    return fact


def decode_rows(
    scope: Scope, run_id: RunID, rows: Iterable[tuple[int, str, Any]], start: int
) -> tuple[Fact, ...]:
    """Decode ``(idx, type, data)`` rows, which must hold positions *start*, *start* + 1 …"""
    out: list[Fact] = []
    expected = start
    for idx, type_, data in rows:
        if idx != expected:
            raise CorruptRecordError(
                f"run {run_id!r} in scope {scope!r} has no event at position {expected}",
                scope=scope, run_id=run_id, position=expected, type="",
            )
        out.append(_decode(scope, run_id, idx, type_, data))
        expected += 1
    return tuple(out)


def select_run_facts(
    conn: Any, sql: str, stop_sql: str, scope: Scope, run_id: RunID, start: int,
    stop: int | None,
) -> tuple[Fact, ...]:
    """Run *sql* (``SELECT idx, type, data`` of the Run's stream from *start* on; its
    parameters are scope, stream, start) plus *stop_sql* when *stop* is given, in ``idx``
    order, and decode the rows; RunNotFoundError when *start* is 0 and there are none."""
    params: tuple[Any, ...] = (scope, run_stream(run_id), start)
    if stop is not None:
        sql += stop_sql
        params += (stop,)
    rows = conn.execute(sql + " ORDER BY idx", params).fetchall()
    if not rows and start == 0:
        raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
    return decode_rows(scope, run_id, rows, start)


def commit_facts(
    run_facts: RunFacts, conn: Any, scope: Scope, commit_id: str, run_id: RunID,
    row: CommitRow,
) -> tuple[Fact, ...]:
    """The facts the commit of index entry *row* appended to *run_id*'s stream."""
    owner, first, count = row
    if owner != run_id or count == 0:
        return ()
    facts = run_facts(conn, scope, run_id, start=first, stop=first + count)
    if len(facts) != count:
        raise CorruptRecordError(
            f"commit {commit_id!r} of run {run_id!r} lost events", scope=scope,
            run_id=run_id, position=first + len(facts), type="",
        )
    return facts


def head_of(row: Any) -> int:
    """The ``MAX(idx)`` row of a stream as its head (-1 if the stream is empty)."""
    return -1 if row is None or row[0] is None else int(row[0])


# -- epochs ----------------------------------------------------------------------------


def fenced(scope: Scope, epoch: int, current: int) -> OwnershipLostError:
    """The OwnershipLostError of a writer at *epoch* when *current* is persisted."""
    return OwnershipLostError(
        f"scope {scope!r} is owned by epoch {current}, not {epoch}",
        scope=scope, epoch=epoch, current_epoch=current,
    )


def require_epoch(scope: Scope, epoch: int, current: int) -> None:
    """Raise OwnershipLostError unless *epoch* is *current*, the persisted epoch."""
    if current != epoch:
        raise fenced(scope, epoch, current)


# -- the projection cache --------------------------------------------------------------

#: Prefix of a cache entry. The cache is not a protocol format: it is disposable, plain
#: JSON of ``encode_value`` (fast; not canonical), and an entry this build cannot decode
#: is ignored (the Run is folded from its stream instead).
_CACHE_FORMAT = b"c1:"


def encode_state(state: MachineState) -> bytes:
    """The cache form of *state*."""
    text = json.dumps(encode_value(state, MachineState), ensure_ascii=False,
                      separators=(",", ":"))
    return _CACHE_FORMAT + text.encode("utf-8")


def decode_state(data: Any) -> MachineState | None:
    """Decode a cache entry; None if it is not in a form this build reads."""
    raw = bytes(data)
    if not raw.startswith(_CACHE_FORMAT):
        return None
    try:
        return decode_value(MachineState, json.loads(raw[len(_CACHE_FORMAT):]))
    except Exception:
        return None


def cache_entries(rows: Iterable[tuple[RunID, int, Any]]) -> dict[RunID, Snapshot]:
    """The decodable ones of ``(run_id, position, state)`` cache rows."""
    out: dict[RunID, Snapshot] = {}
    for run_id, position, data in rows:
        state = decode_state(data)
        if state is not None:
            out[run_id] = Snapshot(state, position)
    return out


def rebuild_projection(
    run_facts: RunFacts, conn: Any, scope: Scope,
    rows: Iterable[tuple[RunID, int, int | None, Any]],
) -> dict[RunID, Snapshot]:
    """The active Runs' snapshots from ``(run_id, head, cached position, cached state)``
    rows of the active Runs: cache entry plus the log tail, else a full fold.

    Raises: CorruptRecordError, CorruptLogError.
    """
    out: dict[RunID, Snapshot] = {}
    for run_id, head, cached_position, cached_data in rows:
        state = None
        if cached_data is not None and cached_position is not None and cached_position <= head:
            state = _from_cache(run_facts, conn, scope, run_id, head, cached_position,
                                cached_data)
        if state is None:
            facts = run_facts(conn, scope, run_id)
            if len(facts) - 1 != head:
                raise CorruptRecordError(
                    f"run {run_id!r} in scope {scope!r}: head {head} but "
                    f"{len(facts)} events", scope=scope, run_id=run_id, position=head, type="",
                )
            state = fold_run(facts, run_id=run_id)
        if state.status is RunStatus.ACTIVE:
            out[run_id] = Snapshot(state, head)
    return out


def _from_cache(
    run_facts: RunFacts, conn: Any, scope: Scope, run_id: RunID, head: int, position: int,
    data: Any,
) -> MachineState | None:
    state = decode_state(data)
    if state is None or state.run_id != run_id:
        return None
    tail = run_facts(conn, scope, run_id, start=position + 1)
    if len(tail) != head - position:
        return None
    try:
        for fact in tail:
            state = evolve(state, fact)
    except EvolveError:
        return None
    return state


# -- frozen bodies and streams ---------------------------------------------------------


def frozen_body(digest: Digest, row: Any) -> bytes:
    """The body of a ``SELECT data FROM frozen`` row; FrozenValueMissingError if None."""
    if row is None:
        raise FrozenValueMissingError(f"no frozen body {digest}", digest=digest)
    return bytes(row[0])


def stream_records(
    scope: Scope, stream: str, rows: Iterable[tuple[int, str, Any, str, int]]
) -> tuple[StreamRecord, ...]:
    """Decode ``(idx, type, data, commit_id, epoch)`` rows of *stream*.

    Raises:
        CorruptRecordError: an event does not decode (names the stream and index).
    """
    out = []
    for idx, type_, data, commit_id, epoch in rows:
        try:
            _, payload = read_envelope(bytes(data), record=type_)
        except ValidationError as exc:
            raise CorruptRecordError(f"event {stream}#{idx} does not decode",
                                     scope=scope, stream=stream, position=idx,
                                     type=type_) from exc
        out.append(StreamRecord(stream, idx, type_, integral_ints(payload), commit_id,
                                int(epoch)))
    return tuple(out)
