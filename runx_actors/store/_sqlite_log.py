"""Synchronous reads and appends of the SQLite log (spec §4.7, §4.8; RUN-CMT-2).

Plain functions over an ``sqlite3.Connection``: the writer thread calls them inside its
group transaction, readers call them from worker threads. None of them opens or ends a
transaction; the caller owns that. Rows that do not decode raise ``CorruptRecordError``
naming the scope, Run and position.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterable, Sequence
from typing import Any

from ..protocol._codec import decode_fact, decode_value, encode_value
from ..protocol._evolve import evolve
from ..protocol.canonical import read_envelope
from ..protocol.commit import Snapshot, fold_run
from ..protocol.errors import (
    CorruptRecordError,
    EvolveError,
    FrozenValueMissingError,
    OwnershipLostError,
    ProjectionDivergenceError,
    RunNotFoundError,
    ValidationError,
)
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.state import MachineState, Open
from ..protocol.values import Digest, RunID, RunStatus, Scope
from ._scope import integral_ints
from .base import StreamRecord, run_stream

__all__ = [
    "read_epoch", "check_epoch", "require_epoch", "bump_epoch", "run_facts", "record",
    "stream_exists", "commit_exists", "commit_run_facts", "insert_commit", "insert_events",
    "insert_run",
    "advance_run", "stream_head", "write_cache", "read_cache", "rebuild_projection",
    "frozen_put", "frozen_get", "encode_state", "decode_state",
]


# -- epochs ----------------------------------------------------------------------------


def read_epoch(conn: sqlite3.Connection, scope: Scope) -> int:
    """The persisted epoch of *scope* (0 if it was never opened)."""
    row = conn.execute("SELECT epoch FROM scopes WHERE scope = ?", (scope,)).fetchone()
    return int(row[0]) if row is not None else 0


def check_epoch(conn: sqlite3.Connection, scope: Scope, epoch: int) -> None:
    """Raise OwnershipLostError unless *epoch* is the persisted one (RUN-CMT-6, INV-28).

    Called inside the append transaction, after ``BEGIN IMMEDIATE`` took the write lock,
    so no other connection can move the epoch between this check and the append.
    """
    require_epoch(scope, epoch, read_epoch(conn, scope))


def require_epoch(scope: Scope, epoch: int, current: int) -> None:
    """Raise OwnershipLostError unless *epoch* is *current*, the persisted epoch."""
    if current != epoch:
        raise OwnershipLostError(
            f"scope {scope!r} is owned by epoch {current}, not {epoch}",
            scope=scope, epoch=epoch, current_epoch=current,
        )


def bump_epoch(conn: sqlite3.Connection, scope: Scope) -> int:
    """Increment *scope*'s persisted epoch and return the new value."""
    row = conn.execute(
        "INSERT INTO scopes (scope, epoch) VALUES (?, 1) "
        "ON CONFLICT (scope) DO UPDATE SET epoch = epoch + 1 RETURNING epoch",
        (scope,),
    ).fetchone()
    return int(row[0])


# -- Run streams -----------------------------------------------------------------------


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


def _decode_rows(
    scope: Scope, run_id: RunID, rows: Iterable[tuple[int, str, Any]], start: int
) -> tuple[Fact, ...]:
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


def run_facts(
    conn: sqlite3.Connection, scope: Scope, run_id: RunID, *, start: int = 0,
    stop: int | None = None,
) -> tuple[Fact, ...]:
    """The Run's facts at positions ``start`` … ``stop - 1`` (all from *start* by default).

    Raises:
        RunNotFoundError: *start* is 0 and the Run has no stream.
        CorruptRecordError: a row does not decode, or a position is missing.
    """
    sql = "SELECT idx, type, data FROM events WHERE scope = ? AND stream = ? AND idx >= ?"
    params: tuple[Any, ...] = (scope, run_stream(run_id), start)
    if stop is not None:
        sql += " AND idx < ?"
        params += (stop,)
    rows = conn.execute(sql + " ORDER BY idx", params).fetchall()
    if not rows and start == 0:
        raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
    return _decode_rows(scope, run_id, rows, start)


def record(conn: sqlite3.Connection, scope: Scope, run_id: RunID) -> Snapshot:
    """Fold the Run's whole stream (the authoritative read, RUN-CMT-2).

    Raises: RunNotFoundError, CorruptRecordError, CorruptLogError.
    """
    facts = run_facts(conn, scope, run_id)
    return Snapshot(fold_run(facts, run_id=run_id), len(facts) - 1)


def stream_exists(conn: sqlite3.Connection, scope: Scope, run_id: RunID) -> bool:
    row = conn.execute(
        "SELECT 1 FROM runs WHERE scope = ? AND run_id = ?", (scope, run_id)
    ).fetchone()
    return row is not None


def commit_exists(conn: sqlite3.Connection, scope: Scope, commit_id: str) -> bool:
    row = conn.execute(
        "SELECT 1 FROM commits WHERE scope = ? AND commit_id = ?", (scope, commit_id)
    ).fetchone()
    return row is not None


def commit_run_facts(
    conn: sqlite3.Connection, scope: Scope, commit_id: str, run_id: RunID
) -> tuple[Fact, ...] | None:
    """The facts *commit_id* appended to *run_id*'s stream, or None if the id is unknown."""
    row = conn.execute(
        "SELECT run_id, first_idx, count FROM commits WHERE scope = ? AND commit_id = ?",
        (scope, commit_id),
    ).fetchone()
    if row is None:
        return None
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


# -- appends ---------------------------------------------------------------------------


def insert_commit(
    conn: sqlite3.Connection, scope: Scope, commit_id: str, epoch: int,
    run_id: RunID | None = None, first_idx: int = 0, count: int = 0,
) -> int:
    """Append a commit record; returns its log sequence number."""
    cur = conn.execute(
        "INSERT INTO commits (scope, commit_id, epoch, run_id, first_idx, count) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        (scope, commit_id, epoch, run_id, first_idx, count),
    )
    seq = cur.lastrowid
    assert seq is not None
    return seq


def insert_events(
    conn: sqlite3.Connection, scope: Scope, seq: int,
    events: Sequence[tuple[str, int, str, bytes]],
) -> None:
    """Insert ``(stream, idx, type, data)`` rows of commit *seq* (a duplicate key fails)."""
    conn.executemany(
        "INSERT INTO events (scope, stream, idx, type, data, commit_seq) "
        "VALUES (?, ?, ?, ?, ?, ?)",
        [(scope, stream, idx, type_, data, seq) for stream, idx, type_, data in events],
    )


def stream_head(conn: sqlite3.Connection, scope: Scope, stream: str) -> int:
    """The index of the newest event of *stream* (-1 if the stream is empty)."""
    row = conn.execute(
        "SELECT MAX(idx) FROM events WHERE scope = ? AND stream = ?", (scope, stream)
    ).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


def insert_run(conn: sqlite3.Connection, scope: Scope, run_id: RunID, snap: Snapshot) -> None:
    conn.execute(
        "INSERT INTO runs (scope, run_id, head, active) VALUES (?, ?, ?, ?)",
        (scope, run_id, snap.position, int(snap.state.status is RunStatus.ACTIVE)),
    )


def advance_run(
    conn: sqlite3.Connection, scope: Scope, run_id: RunID, old: int, snap: Snapshot
) -> None:
    """Move the Run's head from *old* to ``snap.position``.

    Raises:
        ProjectionDivergenceError: the stored head is not *old* (the writer's projection
            does not reflect the log); the caller's savepoint is rolled back.
    """
    cur = conn.execute(
        "UPDATE runs SET head = ?, active = ? WHERE scope = ? AND run_id = ? AND head = ?",
        (snap.position, int(snap.state.status is RunStatus.ACTIVE), scope, run_id, old),
    )
    if cur.rowcount != 1:
        raise ProjectionDivergenceError(
            f"run {run_id!r}: the log head is not the projection's position {old}",
            run_id=run_id, scope=scope, position=old,
        )


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


def write_cache(
    conn: sqlite3.Connection, scope: Scope, run_id: RunID, snap: Snapshot, *,
    was_open: bool = False,
) -> None:
    """Keep the durable cache (RUN-CMT-2): drop the entry when the Run ended, write it
    when the Run *arrives* at Open (created, or a step closed); nothing in the middle of
    a step. An input accepted while already at Open (``was_open``) writes nothing either:
    a rebuild folds it from the log tail."""
    if snap.state.status is not RunStatus.ACTIVE:
        conn.execute(
            "DELETE FROM projection_cache WHERE scope = ? AND run_id = ?", (scope, run_id)
        )
    elif isinstance(snap.state.current, Open) and not was_open:
        conn.execute(
            "INSERT INTO projection_cache (scope, run_id, position, state) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (scope, run_id) DO UPDATE SET position = excluded.position, "
            "state = excluded.state",
            (scope, run_id, snap.position, encode_state(snap.state)),
        )


def read_cache(conn: sqlite3.Connection, scope: Scope) -> dict[RunID, Snapshot]:
    """Every decodable entry of *scope*'s durable projection cache."""
    out: dict[RunID, Snapshot] = {}
    for run_id, position, data in conn.execute(
        "SELECT run_id, position, state FROM projection_cache WHERE scope = ?", (scope,)
    ):
        state = decode_state(data)
        if state is not None:
            out[run_id] = Snapshot(state, position)
    return out


def rebuild_projection(conn: sqlite3.Connection, scope: Scope) -> dict[RunID, Snapshot]:
    """The active Runs' snapshots: cache entry plus the log tail, else a full fold.

    Only Runs marked active are read, so the cost is bounded by the active Runs. A cache
    entry that does not decode or does not fold with its tail is ignored (it is
    disposable).

    Raises: CorruptRecordError, CorruptLogError.
    """
    rows = conn.execute(
        "SELECT r.run_id, r.head, c.position, c.state FROM runs AS r "
        "LEFT JOIN projection_cache AS c ON c.scope = r.scope AND c.run_id = r.run_id "
        "WHERE r.scope = ? AND r.active = 1",
        (scope,),
    ).fetchall()
    out: dict[RunID, Snapshot] = {}
    for run_id, head, cached_position, cached_data in rows:
        state = None
        if cached_data is not None and cached_position <= head:
            state = _from_cache(conn, scope, run_id, head, cached_position, cached_data)
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
    conn: sqlite3.Connection, scope: Scope, run_id: RunID, head: int, position: int,
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


# -- frozen bodies ---------------------------------------------------------------------


def frozen_put(conn: sqlite3.Connection, digest: Digest, data: bytes) -> None:
    """Insert a body; an existing digest is left as it is (idempotent)."""
    conn.execute(
        "INSERT INTO frozen (digest, data) VALUES (?, ?) ON CONFLICT (digest) DO NOTHING",
        (digest, bytes(data)),
    )


def frozen_get(conn: sqlite3.Connection, digest: Digest) -> bytes:
    """Raises FrozenValueMissingError if absent."""
    row = conn.execute("SELECT data FROM frozen WHERE digest = ?", (digest,)).fetchone()
    if row is None:
        raise FrozenValueMissingError(f"no frozen body {digest}", digest=digest)
    return bytes(row[0])


def read_stream(conn: sqlite3.Connection, scope: Scope, stream: str) -> tuple[StreamRecord, ...]:
    """Every event of *stream* in order with its payload decoded (foreign or Run stream).

    Raises:
        CorruptRecordError: an event does not decode (names the stream and index).
    """
    rows = conn.execute(
        "SELECT e.idx, e.type, e.data, c.commit_id, c.epoch FROM events e "
        "JOIN commits c ON c.seq = e.commit_seq "
        "WHERE e.scope = ? AND e.stream = ? ORDER BY e.idx", (scope, stream)).fetchall()
    out = []
    for idx, type_, data, commit_id, epoch in rows:
        try:
            _, payload = read_envelope(bytes(data), record=type_)
        except ValidationError as exc:
            raise CorruptRecordError(f"event {stream}#{idx} does not decode",
                                     scope=scope, stream=stream, position=idx,
                                     type=type_) from exc
        out.append(StreamRecord(stream, idx, type_, integral_ints(payload), commit_id, epoch))
    return tuple(out)
