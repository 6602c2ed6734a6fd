"""Synchronous reads and appends of the SQLite log (spec §4.7, §4.8; RUN-CMT-2).

Plain functions over an ``sqlite3.Connection``: the writer thread calls them inside its
group transaction, readers call them from worker threads. None of them opens or ends a
transaction; the caller owns that. Rows that do not decode raise ``CorruptRecordError``
naming the scope, Run and position.
"""

from __future__ import annotations

import functools
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
from ..protocol.state import MachineState
from ..protocol.values import Digest, RunID, RunStatus, Scope
from ._scope import integral_ints
from .base import StreamRecord, run_stream

__all__ = [
    "read_epoch", "read_epoch_and_seq", "max_seq", "check_epoch", "require_epoch",
    "bump_epoch", "run_facts", "record", "stream_exists", "lookup_commits", "existing_runs",
    "commit_facts", "insert_commits", "insert_events", "insert_runs", "advance_runs",
    "stream_head", "put_cache", "delete_cache", "read_cache", "rebuild_projection",
    "frozen_put", "frozen_put_many", "frozen_get", "encode_state", "decode_state",
]


# -- epochs ----------------------------------------------------------------------------


def read_epoch(conn: sqlite3.Connection, scope: Scope) -> int:
    """The persisted epoch of *scope* (0 if it was never opened)."""
    row = conn.execute("SELECT epoch FROM scopes WHERE scope = ?", (scope,)).fetchone()
    return int(row[0]) if row is not None else 0


def read_epoch_and_seq(conn: sqlite3.Connection, scope: Scope) -> tuple[int, int]:
    """*scope*'s persisted epoch and the newest commit sequence number, in one statement."""
    row = conn.execute(
        "SELECT (SELECT epoch FROM scopes WHERE scope = ?), (SELECT MAX(seq) FROM commits)",
        (scope,),
    ).fetchone()
    return int(row[0] or 0), int(row[1] or 0)


def max_seq(conn: sqlite3.Connection) -> int:
    """The newest commit sequence number (0 for an empty log)."""
    row = conn.execute("SELECT MAX(seq) FROM commits").fetchone()
    return int(row[0] or 0)


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


#: Rows per multi-row statement. One statement per chunk: sqlite3 releases the GIL once
#: per ``sqlite3_step``, so one multi-row statement costs one hand-off where
#: ``executemany`` costs one per row. Each distinct row count is one cached statement.
MAX_ROWS = 64


@functools.lru_cache(maxsize=4096)
def _sql(head: str, width: int, n: int, tail: str) -> str:
    row = "(" + ",".join("?" * width) + ")"
    return head + ",".join([row] * n) + tail


def _rows(
    conn: sqlite3.Connection, head: str, width: int, rows: Sequence[Sequence[Any]],
    tail: str = "",
) -> int:
    """``head VALUES (…), (…) tail`` over *rows* in chunks; returns the rows changed."""
    changed = 0
    for i in range(0, len(rows), MAX_ROWS):
        chunk = rows[i:i + MAX_ROWS]
        cur = conn.execute(_sql(head, width, len(chunk), tail),
                           [value for row in chunk for value in row])
        changed += cur.rowcount
    return changed


def _in(
    conn: sqlite3.Connection, head: str, scope: Scope, keys: Sequence[str]
) -> list[Any]:
    """``head (?, ?, …)`` over *keys* in chunks (*head* ends with ``IN``); one key is
    compared with ``=`` (no ephemeral IN-list)."""
    if len(keys) == 1:
        return conn.execute(head[:-2] + "= ?", (scope, keys[0])).fetchall()
    out: list[Any] = []
    for i in range(0, len(keys), MAX_ROWS):
        chunk = keys[i:i + MAX_ROWS]
        sql = head + " (" + ",".join("?" * len(chunk)) + ")"
        out += conn.execute(sql, (scope, *chunk)).fetchall()
    return out


#: A commit-id index entry: the Run it appended to (None for foreign-only commits), the
#: position of its first Run fact and how many Run facts it appended.
CommitRow = tuple[RunID | None, int, int]


def lookup_commits(
    conn: sqlite3.Connection, scope: Scope, commit_ids: Sequence[str]
) -> dict[str, CommitRow]:
    """The index entries of those *commit_ids* that *scope* knows."""
    rows = _in(conn, "SELECT commit_id, run_id, first_idx, count FROM commits "
                     "WHERE scope = ? AND commit_id IN", scope, commit_ids)
    return {cid: (run_id, first, count) for cid, run_id, first, count in rows}


def existing_runs(conn: sqlite3.Connection, scope: Scope, run_ids: Sequence[RunID]) -> set[RunID]:
    """Those of *run_ids* that have a stream in *scope* (active or ended)."""
    rows = _in(conn, "SELECT run_id FROM runs WHERE scope = ? AND run_id IN", scope, run_ids)
    return {row[0] for row in rows}


def commit_facts(
    conn: sqlite3.Connection, scope: Scope, commit_id: str, run_id: RunID, row: CommitRow
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


# -- appends (multi-row; the writer thread assigns ``seq``) -----------------------------


def insert_commits(
    conn: sqlite3.Connection,
    rows: Sequence[tuple[int, Scope, str, int, RunID | None, int, int]],
) -> None:
    """Insert ``(seq, scope, commit_id, epoch, run_id, first_idx, count)`` rows.

    ``seq`` is the next free rowid, as SQLite would assign it; a known id fails
    (``UNIQUE``)."""
    _rows(conn, "INSERT INTO commits (seq, scope, commit_id, epoch, run_id, first_idx, count) "
                "VALUES ", 7, rows)


def insert_events(
    conn: sqlite3.Connection, rows: Sequence[tuple[Scope, str, int, str, bytes, int]]
) -> None:
    """Insert ``(scope, stream, idx, type, data, commit_seq)`` rows (a duplicate key fails)."""
    _rows(conn, "INSERT INTO events (scope, stream, idx, type, data, commit_seq) VALUES ",
          6, rows)


def stream_head(conn: sqlite3.Connection, scope: Scope, stream: str) -> int:
    """The index of the newest event of *stream* (-1 if the stream is empty)."""
    row = conn.execute(
        "SELECT MAX(idx) FROM events WHERE scope = ? AND stream = ?", (scope, stream)
    ).fetchone()
    return -1 if row is None or row[0] is None else int(row[0])


def insert_runs(conn: sqlite3.Connection, rows: Sequence[tuple[Scope, RunID, int, int]]) -> None:
    """Insert ``(scope, run_id, head, active)`` rows of new Runs."""
    _rows(conn, "INSERT INTO runs (scope, run_id, head, active) VALUES ", 4, rows)


def advance_runs(
    conn: sqlite3.Connection, rows: Sequence[tuple[Scope, RunID, int, int, int]]
) -> None:
    """Move each Run's head: ``(scope, run_id, old, head, active)`` rows.

    Raises:
        ProjectionDivergenceError: a stored head is not its row's *old* (the writer's
            projection does not reflect the log); names the Run when there is one row.
    """
    if len(rows) == 1:  # the plain UPDATE is cheaper than UPDATE … FROM (VALUES …)
        scope, run_id, old, head, active = rows[0]
        changed = conn.execute(
            "UPDATE runs SET head = ?, active = ? WHERE scope = ? AND run_id = ? AND head = ?",
            (head, active, scope, run_id, old),
        ).rowcount
    else:
        changed = _rows(
            conn, "UPDATE runs SET head = v.column4, active = v.column5 FROM (VALUES ", 5,
            rows, ") AS v WHERE runs.scope = v.column1 AND runs.run_id = v.column2 "
            "AND runs.head = v.column3",
        )
    if changed != len(rows):
        scope, run_id, old = rows[0][:3] if len(rows) == 1 else ("", "", -1)
        raise ProjectionDivergenceError(
            f"run {run_id!r}: the log head is not the projection's position {old}"
            if len(rows) == 1 else f"{len(rows) - changed} of {len(rows)} Runs: the log "
            "head is not the projection's position",
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


def put_cache(
    conn: sqlite3.Connection, rows: Sequence[tuple[Scope, RunID, int, bytes]]
) -> None:
    """Upsert ``(scope, run_id, position, state)`` cache entries (RUN-CMT-2: written
    only when a Run *arrives* at Open; the writer decides which)."""
    _rows(conn, "INSERT INTO projection_cache (scope, run_id, position, state) VALUES ", 4,
          rows, " ON CONFLICT (scope, run_id) DO UPDATE SET position = excluded.position, "
          "state = excluded.state")


def delete_cache(conn: sqlite3.Connection, scope: Scope, run_ids: Sequence[RunID]) -> None:
    """Drop the cache entries of ended Runs (a primary-key search per Run)."""
    for i in range(0, len(run_ids), MAX_ROWS):
        chunk = run_ids[i:i + MAX_ROWS]
        conn.execute("DELETE FROM projection_cache WHERE scope = ? AND run_id IN ("
                     + ",".join("?" * len(chunk)) + ")", (scope, *chunk))


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


def frozen_put_many(conn: sqlite3.Connection, rows: Sequence[tuple[Digest, bytes]]) -> None:
    """``frozen_put`` of several bodies in one statement per chunk."""
    _rows(conn, "INSERT INTO frozen (digest, data) VALUES ", 2, rows,
          " ON CONFLICT (digest) DO NOTHING")


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
