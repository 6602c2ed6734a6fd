"""Backend-neutral pieces of the SQL logs (spec §4.7, §4.8; RUN-CMT-2, RUN-CMT-6).

``_sqlite_log`` and ``_pg_log`` differ in their SQL text and dialect only. What they share
lives here, over plain Python values (rows already fetched) or over a connection that is
handed back to the backend's own ``run_facts``: decoding event rows (``CorruptRecordError``
naming the scope, Run or stream, and position), the fencing error, the cache form of a
machine state, and the control flow of the reads that rebuild a projection, read the
cache, replay a commit's facts and decode a stream. None opens or ends a transaction.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from typing import Any, Protocol

from ..protocol._codec import decode_fact
from ..protocol._evolve import evolve_all
from ..protocol.canonical import read_envelope
from ..protocol.commit import Snapshot, fold_run
from ..protocol.errors import (
    CorruptRecordError,
    CorruptStoreError,
    EvolveError,
    FrozenValueMissingError,
    OwnershipLostError,
    RunNotFoundError,
    ValidationError,
)
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.state import MachineState
from ..protocol.values import Digest, RunID, RunStatus, Scope
from ._cache import decode_state, encode_state
from ._chain import genesis, link
from ._scope import integral_ints
from .base import StreamRecord, run_stream, unstorable

__all__ = [
    "RunFacts", "CommitRow", "decode_rows", "verify_chain", "select_run_facts",
    "record_checked", "fenced",
    "require_epoch", "check_epoch_row",
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
            scope=scope, run_id=run_id, position=idx, type=type_, table="events",
            row=f"{scope}/{run_stream(run_id)}#{idx}", reason="decode",
        ) from exc
    if type_ != EVENT_TYPE_PREFIX + fact.WIRE_NAME:
        raise CorruptRecordError(
            f"event {idx} of run {run_id!r} in scope {scope!r} has type {type_!r} but holds "
            f"{fact.WIRE_NAME!r}", scope=scope, run_id=run_id, position=idx, type=type_,
            table="events", row=f"{scope}/{run_stream(run_id)}#{idx}", reason="type",
        )
    return fact


def _damaged(scope: Scope, stream: str, idx: int, message: str, *, table: str = "events",
             reason: str, run_id: RunID | None = None) -> CorruptRecordError:
    where = f"run {run_id!r}" if run_id is not None else f"stream {stream!r}"
    return CorruptRecordError(
        f"{where} in scope {scope!r}, position {idx}: {message}", scope=scope,
        run_id=run_id, stream=stream, position=idx, type="", table=table,
        row=f"{scope}/{stream}#{idx}", reason=reason)


def _blob(value: Any) -> bytes | None:
    return bytes(value) if isinstance(value, (bytes, bytearray, memoryview)) else None


def verify_chain(
    scope: Scope, stream: str, rows: Iterable[Sequence[Any]], start: int, *,
    run_id: RunID | None = None,
) -> list[tuple[int, str, bytes]]:
    """Check rows ``(idx, type, data, chain, commit_id, …)`` of *stream* (RUN-STO-3).

    The rows must hold positions *start* - 1 (when *start* > 0: the base row, whose
    chain is trusted and which is not returned), *start*, *start* + 1 …, each row's
    commit must exist (``commit_id`` not None) and each chain must link to the one
    before (``_chain``). Returns the ``(idx, type, data)`` of the rows from *start*.

    Raises:
        CorruptRecordError: ``table="events"`` (a missing position, bytes that are not a
            BLOB, a chain that does not link) or ``table="commits"`` (the row's commit is
            gone); names scope, stream (and Run), position and row.
    """
    out: list[tuple[int, str, bytes]] = []
    prev = genesis(scope, stream) if start == 0 else None
    expected = start - 1 if start > 0 else 0
    for row in rows:
        idx, type_, data, chain, commit_id = row[0], row[1], row[2], row[3], row[4]
        if idx != expected:
            raise _damaged(scope, stream, expected, "the event is missing", reason="gap",
                           run_id=run_id)
        stored = _blob(chain)
        if stored is None:
            raise _damaged(scope, stream, idx, "the chain digest is not a BLOB",
                           reason="chain_type", run_id=run_id)
        if commit_id is None:
            raise _damaged(scope, stream, idx, "the commit that appended this event is not "
                           "in the commit-id index", table="commits", reason="commit_missing",
                           run_id=run_id)
        expected += 1
        if prev is None:
            prev = stored
            continue
        raw = _blob(data)
        if raw is None or not isinstance(type_, str):
            raise _damaged(scope, stream, idx, "the event bytes are not a BLOB",
                           reason="data_type", run_id=run_id)
        if link(prev, str(commit_id), type_, raw) != stored:
            raise _damaged(scope, stream, idx, "the chain digest does not match (the row, "
                           "its commit id or an earlier row was edited, deleted or inserted)",
                           reason="chain", run_id=run_id)
        prev = stored
        out.append((idx, type_, raw))
    return out


def decode_rows(
    scope: Scope, run_id: RunID, rows: Iterable[tuple[int, str, Any]], start: int
) -> tuple[Fact, ...]:
    """Decode ``(idx, type, data)`` rows, which must hold positions *start*, *start* + 1 …"""
    out: list[Fact] = []
    expected = start
    for idx, type_, data in rows:
        if idx != expected:
            raise _damaged(scope, run_stream(run_id), expected, "the event is missing",
                           reason="gap", run_id=run_id)
        out.append(_decode(scope, run_id, idx, type_, data))
        expected += 1
    return tuple(out)


def tail_checked(run_facts: Any, conn: Any, scope: Scope, run_id: RunID, count: int,
                 mark: str) -> tuple[Fact, ...]:
    """``tail_facts`` of both SQL backends: the Run's head first, then *run_facts* from
    ``head + 1 - count`` (checked from the row before); a tail shorter than the head
    promises is re-read from 0, which raises the damage. *mark* is the placeholder.

    Raises: ValueError (*count* < 1), RunNotFoundError, CorruptRecordError,
    CorruptStoreError.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    if unstorable(scope, run_id):
        raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
    row = conn.execute(f"SELECT head FROM runs WHERE scope = {mark} AND run_id = {mark}",
                       (scope, run_id)).fetchone()
    start = max(int(row[0]) + 1 - count, 0) if row is not None else 0
    facts: tuple[Fact, ...] = run_facts(conn, scope, run_id, start=start)
    if start > 0 and len(facts) < count:
        return tuple(run_facts(conn, scope, run_id)[-count:])
    return facts[-count:]


def select_run_facts(
    conn: Any, sql: str, stop_sql: str, scope: Scope, run_id: RunID, start: int,
    stop: int | None,
) -> tuple[Fact, ...]:
    """Run *sql* plus *stop_sql* when *stop* is given, in ``idx`` order, check the rows'
    chain and commits, check the Run's head when reading to the end, and decode them.

    *sql* selects ``idx, type, data, chain, commit_id, head`` of the Run's stream from a
    position on (the events left-joined with their commit, ``head`` the ``runs`` row's);
    its parameters are scope, run id, scope, stream, first position (*start* - 1 when
    *start* > 0, so the chain of the row before is known). RunNotFoundError when *start*
    is 0 and there are no rows and no ``runs`` row; CorruptRecordError when the ``runs``
    row is there but the stream is empty.

    Raises: RunNotFoundError, CorruptRecordError, CorruptStoreError (``table="runs"``).
    """
    if unstorable(scope, run_id):
        raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
    stream = run_stream(run_id)
    params: tuple[Any, ...] = (scope, run_id, scope, stream, max(start - 1, 0))
    if stop is not None:
        sql += stop_sql
        params += (stop,)
    rows = conn.execute(sql + " ORDER BY e.idx", params).fetchall()
    if not rows and start == 0:
        # a ``runs`` row without a stream is damage (every event deleted), not an
        # unknown Run; the placeholder style (``?`` / ``%s``) is *stop_sql*'s
        mark = "%s" if "%s" in stop_sql else "?"
        known = conn.execute(f"SELECT head FROM runs WHERE scope = {mark} AND run_id = {mark}",
                             (scope, run_id)).fetchone()
        if known is not None:
            raise _damaged(scope, stream, 0, f"the Run's events are missing (its head is "
                           f"{known[0]!r})", reason="tail_missing", run_id=run_id)
        raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
    checked = verify_chain(scope, stream, rows, start, run_id=run_id)
    if stop is None and rows:
        last, head = rows[-1][0], rows[-1][5]
        if head is None:
            raise CorruptStoreError(
                f"run {run_id!r} in scope {scope!r} has events but no row in 'runs'",
                scope=scope, run_id=run_id, position=last, table="runs",
                row=f"{scope}/{run_id}", reason="run_missing")
        if last < head:
            raise _damaged(scope, stream, last + 1, f"the event is missing (the Run's head "
                           f"is {head})", reason="tail_missing", run_id=run_id)
        if last > head:
            raise _damaged(scope, stream, head, f"the Run's head is {head} but the stream "
                           f"holds {last + 1} events", table="runs", reason="head",
                           run_id=run_id)
    return tuple(_decode(scope, run_id, idx, type_, data) for idx, type_, data in checked)


def record_checked(run_facts: RunFacts, conn: Any, scope: Scope, run_id: RunID,
                   mark: str) -> Snapshot:
    """The Run's whole stream folded (the authoritative read, RUN-CMT-2), its ``runs``
    row's ``active`` flag checked against the fold (RUN-STO-3): a parked Run marked ended
    would otherwise be refused as "has ended" after its command opened the scope.

    *mark* is the backend's placeholder (``?`` / ``%s``). The flag is a second statement;
    a Run that ends between the two reads looks inconsistent once, so a mismatch is read
    again before it is called damage (a Run only ever goes from active to ended).

    Raises: RunNotFoundError, CorruptRecordError, CorruptLogError, CorruptStoreError
        (``table="runs"``, ``reason="active"``).
    """
    for _ in range(2):
        facts = run_facts(conn, scope, run_id)
        state = fold_run(facts, run_id=run_id)
        row = conn.execute(f"SELECT active FROM runs WHERE scope = {mark} AND run_id = {mark}",
                           (scope, run_id)).fetchone()
        if row is None or bool(row[0]) == (state.status is RunStatus.ACTIVE):
            return Snapshot(state, len(facts) - 1)
    raise CorruptStoreError(
        f"run {run_id!r} in scope {scope!r} is {state.status.value} but its 'runs' row "
        f"says active={row[0]!r}", scope=scope, run_id=run_id, position=len(facts) - 1,
        table="runs", row=f"{scope}/{run_id}", reason="active")


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
            run_id=run_id, position=first + len(facts), type="", table="events",
            row=f"{scope}/{run_stream(run_id)}#{first + len(facts)}", reason="commit_events",
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


#: The largest epoch a scope may persist: one below SQLite's and PostgreSQL's 64-bit
#: integer maximum, so the next open can still bump it (``epoch + 1`` past 2**63 - 1
#: overflows in SQL: SQLite turns it into a REAL, PostgreSQL raises).
MAX_EPOCH = 2**63 - 1


def check_epoch_row(scope: Scope, epoch: Any, last_commit_epoch: int) -> None:
    """Validate *scope*'s persisted epoch (None: no ``scopes`` row) against the epoch of
    its newest commit (0: none) (RUN-STO-2). A valid epoch is an int in
    ``1 … MAX_EPOCH - 1``.

    Raises:
        CorruptStoreError: ``table="scopes"``, ``row`` = the scope.
    """
    if epoch is None:
        if last_commit_epoch:
            raise CorruptStoreError(
                f"scope {scope!r} has commits (up to epoch {last_commit_epoch}) but no "
                "epoch row", table="scopes", row=scope, scope=scope, reason="epoch_missing")
        return
    if (isinstance(epoch, bool) or not isinstance(epoch, int) or epoch < 1
            or epoch >= MAX_EPOCH):
        raise CorruptStoreError(f"scope {scope!r} has the invalid epoch {epoch!r}",
                                table="scopes", row=scope, scope=scope, reason="bad_epoch")
    if epoch < last_commit_epoch:
        raise CorruptStoreError(
            f"scope {scope!r} is at epoch {epoch} but has a commit of epoch "
            f"{last_commit_epoch}", table="scopes", row=scope, scope=scope,
            reason="epoch_behind")


def require_epoch(scope: Scope, epoch: int, current: int) -> None:
    """Raise OwnershipLostError unless *epoch* is *current*, the persisted epoch."""
    if current != epoch:
        raise fenced(scope, epoch, current)


# -- the projection cache --------------------------------------------------------------
# The cache form and its decoder live in ``_cache`` (a fast decoder of the cache's shape,
# the strict codec's answer in every case); ``encode_state``/``decode_state`` are
# re-exported here for the backends.


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
    orphan: tuple[RunID, int] | None = None,
    cached: set[RunID] | None = None,
) -> dict[RunID, Snapshot]:
    """The active Runs' snapshots from ``(run_id, head, cached position, cached state)``
    rows of the active Runs: cache entry plus the log tail, else a full fold.

    *cached*, when given, receives the ids of the Runs whose snapshot is their cache
    entry as it is stored: cached at the head, decoded and taken with no tail (a clean
    close's entry). A writer need not write those entries again (SQLite's checkpoint).

    *orphan* is the first ``(run_id, position)`` of an active Run's event whose commit
    is not in the commit-id index, or None (one query over the scope, by the caller):
    a cache entry skips the log before its position, so the index is checked apart —
    without its row a retried command would append again (RUN-STO-2, RUN-CMT-5).

    Raises: CorruptRecordError, CorruptLogError.
    """
    if orphan is not None:
        run_id, idx = orphan
        raise _damaged(scope, run_stream(run_id), idx, "the commit that appended "
                       "this event is not in the commit-id index", table="commits",
                       reason="commit_missing", run_id=run_id)
    out: dict[RunID, Snapshot] = {}
    for run_id, head, cached_position, cached_data in rows:
        state = None
        as_stored = False
        if cached_data is not None and cached_position is not None and cached_position <= head:
            state = _from_cache(run_facts, conn, scope, run_id, head, cached_position,
                                cached_data)
            # the entry itself, no tail folded onto it (None: refused, folded below)
            as_stored = state is not None and cached_position == head
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
            if as_stored and cached is not None:
                cached.add(run_id)
    return out


def _from_cache(
    run_facts: RunFacts, conn: Any, scope: Scope, run_id: RunID, head: int, position: int,
    data: Any,
) -> MachineState | None:
    state = decode_state(data)
    if state is None or state.run_id != run_id:
        return None
    if position == head:
        return state  # cached at the head (a clean close): no tail to read
    tail = run_facts(conn, scope, run_id, start=position + 1)
    if len(tail) != head - position:
        return None
    try:
        return evolve_all(state, tail)  # a run of inputs in one pass (RUN-INP-2)
    except EvolveError:
        return None


# -- frozen bodies and streams ---------------------------------------------------------


def frozen_body(digest: Digest, row: Any) -> bytes:
    """The body of a ``SELECT data FROM frozen`` row (RUN-WIR-4, RUN-STO-2).

    Raises:
        FrozenValueMissingError: *row* is None (no such body).
        CorruptRecordError: the stored value is not a BLOB, or does not hash to *digest*
            (``table="frozen"``, ``row`` = the digest).
    """
    if row is None:
        raise FrozenValueMissingError(f"no frozen body {digest}", digest=digest)
    data = _blob(row[0])
    if data is None:
        raise CorruptRecordError(
            f"frozen body {digest} is stored as {type(row[0]).__name__}, not bytes",
            table="frozen", row=digest, digest=digest, reason="data_type")
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise CorruptRecordError(f"frozen body {digest} does not hash to its digest",
                                 table="frozen", row=digest, digest=digest, reason="digest")
    return data


def stream_records(
    scope: Scope, stream: str, rows: Iterable[Sequence[Any]]
) -> tuple[StreamRecord, ...]:
    """Check and decode ``(idx, type, data, chain, commit_id, epoch)`` rows of *stream*
    (the events left-joined with their commit, in ``idx`` order from 0).

    Raises:
        CorruptRecordError: the chain does not verify (see :func:`verify_chain`) or an
            event does not decode (names the stream and index).
    """
    rows = list(rows)
    checked = verify_chain(scope, stream, rows, 0)
    out = []
    for (idx, type_, data), row in zip(checked, rows, strict=True):
        commit_id, epoch = row[4], row[5]
        try:
            _, payload = read_envelope(data, record=type_)
        except ValidationError as exc:
            raise CorruptRecordError(f"event {stream}#{idx} does not decode",
                                     scope=scope, stream=stream, position=idx,
                                     type=type_, table="events",
                                     row=f"{scope}/{stream}#{idx}", reason="decode") from exc
        out.append(StreamRecord(stream, idx, type_, integral_ints(payload), str(commit_id),
                                int(epoch)))
    return tuple(out)
