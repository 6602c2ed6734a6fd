"""Synchronous reads and appends of the SQLite log (spec §4.7, §4.8; RUN-CMT-2).

Plain functions over an ``sqlite3.Connection``: the writer thread calls them inside its
group transaction, readers call them from worker threads. None of them opens or ends a
transaction; the caller owns that. Rows that do not decode raise ``CorruptRecordError``
naming the scope, Run and position.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import Sequence
from typing import Any

from ..protocol.commit import Snapshot
from ..protocol.errors import ProjectionDivergenceError
from ..protocol.facts import Fact
from ..protocol.values import Digest, RunID, Scope
from . import _rows as shared
from ._rows import CommitRow, decode_state, encode_state, require_epoch
from .base import StreamRecord, unstorable

__all__ = [
    "read_epoch", "read_epoch_and_seq", "max_seq", "check_epoch", "require_epoch",
    "bump_epoch", "run_facts", "tail_facts", "record", "stream_exists", "lookup_commits",
    "existing_runs",
    "commit_facts", "insert_commits", "insert_events", "insert_runs", "advance_runs",
    "stream_head", "put_cache", "delete_cache", "read_cache", "rebuild_projection",
    "frozen_put", "frozen_put_many", "frozen_get", "encode_state", "decode_state", "CommitRow",
    "read_stream", "event_chain", "last_commit_epoch",
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


def bump_epoch(conn: sqlite3.Connection, scope: Scope) -> int:
    """Increment *scope*'s persisted epoch and return the new value.

    The persisted epoch is validated first (RUN-STO-2): it must be a positive integer and
    not below the epoch of the scope's newest commit; a scope with commits must have an
    epoch row.

    Raises:
        CorruptStoreError: ``table="scopes"``; nothing is written.
    """
    current = conn.execute("SELECT epoch FROM scopes WHERE scope = ?", (scope,)).fetchone()
    shared.check_epoch_row(scope, None if current is None else current[0],
                           last_commit_epoch(conn, scope))
    row = conn.execute(
        "INSERT INTO scopes (scope, epoch) VALUES (?, 1) "
        "ON CONFLICT (scope) DO UPDATE SET epoch = epoch + 1 RETURNING epoch",
        (scope,),
    ).fetchone()
    return int(row[0])


# -- Run streams -----------------------------------------------------------------------


def run_facts(
    conn: sqlite3.Connection, scope: Scope, run_id: RunID, *, start: int = 0,
    stop: int | None = None,
) -> tuple[Fact, ...]:
    """The Run's facts at positions ``start`` … ``stop - 1`` (all from *start* by default).

    Raises:
        RunNotFoundError: *start* is 0 and the Run has no stream.
        CorruptRecordError: a row does not decode, or a position is missing.
    """
    return shared.select_run_facts(conn, _RUN_FACTS, " AND e.idx < ?", scope, run_id,
                                   start, stop)



def tail_facts(
    conn: sqlite3.Connection, scope: Scope, run_id: RunID, count: int,
) -> tuple[Fact, ...]:
    """The Run's last *count* facts, checked from the row before: ``_rows.tail_checked``
    (``SessionReader.tail_facts``, RUN-STO-3; raises as it does)."""
    return shared.tail_checked(run_facts, conn, scope, run_id, count, "?")

#: The rows of a Run stream with their commit ids and the Run's head, in one statement
#: (one snapshot: a concurrent commit cannot fall between the events and the head).
_RUN_FACTS = (
    "SELECT e.idx, e.type, e.data, e.chain, c.commit_id, "
    "(SELECT head FROM runs WHERE scope = ? AND run_id = ?) "
    "FROM events AS e LEFT JOIN commits AS c ON c.seq = e.commit_seq "
    "WHERE e.scope = ? AND e.stream = ? AND e.idx >= ?"
)


def record(conn: sqlite3.Connection, scope: Scope, run_id: RunID) -> Snapshot:
    """Fold the Run's whole stream (the authoritative read, RUN-CMT-2).

    Raises: RunNotFoundError, CorruptRecordError, CorruptLogError, CorruptStoreError (the
    ``runs`` row's ``active`` flag contradicts the fold; ``_rows.record_checked``).
    """
    return shared.record_checked(run_facts, conn, scope, run_id, "?")


def stream_exists(conn: sqlite3.Connection, scope: Scope, run_id: RunID) -> bool:
    """True when *scope* has a ``runs`` row for *run_id* (RunExistsError's test in
    create_run, RUN-NEW-1). One indexed read on the writer's connection."""
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
    return shared.commit_facts(run_facts, conn, scope, commit_id, run_id, row)


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
    conn: sqlite3.Connection, rows: Sequence[tuple[Scope, str, int, str, bytes, int, bytes]]
) -> None:
    """Insert ``(scope, stream, idx, type, data, commit_seq, chain)`` rows (a duplicate key
    fails)."""
    _rows(conn, "INSERT INTO events (scope, stream, idx, type, data, commit_seq, chain) "
                "VALUES ", 7, rows)


def event_chain(conn: sqlite3.Connection, scope: Scope, stream: str, idx: int) -> bytes | None:
    """The stored chain digest of event *idx* of *stream* (None if there is no such row)."""
    row = conn.execute("SELECT chain FROM events WHERE scope = ? AND stream = ? AND idx = ?",
                       (scope, stream, idx)).fetchone()
    return None if row is None or not isinstance(row[0], bytes) else bytes(row[0])


def last_commit_epoch(conn: sqlite3.Connection, scope: Scope) -> int:
    """The epoch of *scope*'s newest commit (0 if none); epochs never decrease along
    ``seq`` within a scope, so this is the highest."""
    row = conn.execute("SELECT epoch FROM commits WHERE scope = ? ORDER BY seq DESC LIMIT 1",
                       (scope,)).fetchone()
    return 0 if row is None else int(row[0])


def stream_head(conn: sqlite3.Connection, scope: Scope, stream: str) -> int:
    """The index of the newest event of *stream* (-1 if the stream is empty)."""
    row = conn.execute(
        "SELECT MAX(idx) FROM events WHERE scope = ? AND stream = ?", (scope, stream)
    ).fetchone()
    return shared.head_of(row)


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
    return shared.cache_entries(conn.execute(
        "SELECT run_id, position, state FROM projection_cache WHERE scope = ?", (scope,)
    ))


def rebuild_projection(
    conn: sqlite3.Connection, scope: Scope, cached: set[RunID] | None = None,
) -> dict[RunID, Snapshot]:
    """The active Runs' snapshots: cache entry plus the log tail, else a full fold.

    Only Runs marked active are read, so the cost is bounded by the active Runs. A cache
    entry that does not decode or does not fold with its tail is ignored (it is
    disposable). *cached* receives the Runs whose stored entry is their snapshot
    (``_rows.rebuild_projection``).

    Raises: CorruptRecordError, CorruptLogError.
    """
    rows = conn.execute(
        "SELECT r.run_id, r.head, c.position, c.state FROM runs AS r "
        "LEFT JOIN projection_cache AS c ON c.scope = r.scope AND c.run_id = r.run_id "
        "WHERE r.scope = ? AND r.active = 1",
        (scope,),
    ).fetchall()
    orphan = conn.execute(
        "SELECT r.run_id, e.idx FROM runs AS r "
        "JOIN events AS e ON e.scope = r.scope AND e.stream = 'run/' || r.run_id "
        "LEFT JOIN commits AS c ON c.seq = e.commit_seq "
        "WHERE r.scope = ? AND r.active = 1 AND c.seq IS NULL ORDER BY r.run_id, e.idx LIMIT 1",
        (scope,),
    ).fetchone()
    return shared.rebuild_projection(run_facts, conn, scope, rows,
                                     None if orphan is None else (orphan[0], orphan[1]),
                                     cached)


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
    return shared.frozen_body(
        digest, conn.execute("SELECT data FROM frozen WHERE digest = ?", (digest,)).fetchone())


def read_stream(conn: sqlite3.Connection, scope: Scope, stream: str) -> tuple[StreamRecord, ...]:
    """Every event of *stream* in order with its payload decoded (foreign or Run stream).

    Raises:
        CorruptRecordError: an event does not decode (names the stream and index).
    """
    if unstorable(scope, stream):
        return ()
    rows = conn.execute(
        "SELECT e.idx, e.type, e.data, e.chain, c.commit_id, c.epoch FROM events e "
        "LEFT JOIN commits c ON c.seq = e.commit_seq "
        "WHERE e.scope = ? AND e.stream = ? ORDER BY e.idx", (scope, stream)).fetchall()
    return shared.stream_records(scope, stream, rows)
