"""Synchronous reads and appends of the PostgreSQL log (spec §4.7, §4.8; RUN-CMT-2).

Plain functions over a psycopg connection, the PostgreSQL twins of ``_sqlite_log``: the
group transaction calls them between ``BEGIN`` and ``COMMIT``, readers call them from
worker threads. None opens or ends a transaction. Rows that do not decode raise
``CorruptRecordError`` naming the scope, Run (or stream) and position.

Backend-neutral pieces are not duplicated: row decoding, the fencing error, the cache form
of a state and the control flow of the reads live in ``_rows`` (shared with
``_sqlite_log``). Only the SQL differs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import psycopg

from ..protocol.commit import Snapshot
from ..protocol.errors import CorruptRecordError, ProjectionDivergenceError
from ..protocol.facts import Fact
from ..protocol.state import Open
from ..protocol.values import Digest, RunID, RunStatus, Scope
from . import _rows as shared
from ._chain import genesis, link
from ._rows import encode_state, fenced
from .base import StreamRecord, unstorable

__all__ = [
    "Conn", "read_epoch", "lock_epoch", "fenced", "bump_epoch", "run_facts", "tail_facts", "record",
    "stream_exists", "commit_exists", "commit_run_facts", "insert_commit", "insert_events",
    "insert_run", "advance_run", "stream_head", "write_cache", "read_cache",
    "rebuild_projection", "frozen_put", "frozen_get", "read_stream", "last_commit_epoch",
    "ChainCache",
]

Conn = psycopg.Connection[Any]


# -- epochs ----------------------------------------------------------------------------


def read_epoch(conn: Conn, scope: Scope) -> int:
    """The persisted epoch of *scope* (0 if it was never opened)."""
    row = conn.execute("SELECT epoch FROM scopes WHERE scope = %s", (scope,)).fetchone()
    return int(row[0]) if row is not None else 0


def lock_epoch(conn: Conn, scope: Scope) -> int:
    """Lock *scope*'s row until the transaction ends and return its epoch (0: no row).

    ``FOR UPDATE`` waits for a concurrent ``open`` (which bumps the row) or another
    writer's group to finish, then reads the newest committed epoch, so no other
    transaction can move the epoch between this read and the append (RUN-CMT-6).
    """
    row = conn.execute(
        "SELECT epoch FROM scopes WHERE scope = %s FOR UPDATE", (scope,)
    ).fetchone()
    return int(row[0]) if row is not None else 0


def last_commit_epoch(conn: Conn, scope: Scope) -> int:
    """The epoch of *scope*'s newest commit (0 if none; epochs never decrease along
    ``seq`` within a scope)."""
    row = conn.execute("SELECT epoch FROM commits WHERE scope = %s ORDER BY seq DESC LIMIT 1",
                       (scope,)).fetchone()
    return 0 if row is None else int(row[0])


def bump_epoch(conn: Conn, scope: Scope) -> int:
    """Increment *scope*'s persisted epoch (locking its row) and return the new value.

    The persisted epoch is validated first (RUN-STO-2, see ``_rows.check_epoch_row``).

    Raises:
        CorruptStoreError: ``table="scopes"``; the caller's transaction is rolled back.
    """
    current = conn.execute("SELECT epoch FROM scopes WHERE scope = %s FOR UPDATE",
                           (scope,)).fetchone()
    shared.check_epoch_row(scope, None if current is None else current[0],
                           last_commit_epoch(conn, scope))
    row = conn.execute(
        "INSERT INTO scopes (scope, epoch) VALUES (%s, 1) "
        "ON CONFLICT (scope) DO UPDATE SET epoch = scopes.epoch + 1 RETURNING epoch",
        (scope,),
    ).fetchone()
    assert row is not None
    return int(row[0])


# -- Run streams -----------------------------------------------------------------------


def run_facts(
    conn: Conn, scope: Scope, run_id: RunID, *, start: int = 0, stop: int | None = None,
) -> tuple[Fact, ...]:
    """The Run's facts at positions ``start`` … ``stop - 1`` (all from *start* by default).

    Raises:
        RunNotFoundError: *start* is 0 and the Run has no stream.
        CorruptRecordError: a row does not decode, or a position is missing.
    """
    return shared.select_run_facts(conn, _RUN_FACTS, " AND e.idx < %s", scope, run_id,
                                   start, stop)



def tail_facts(conn: Conn, scope: Scope, run_id: RunID, count: int) -> tuple[Fact, ...]:
    """The Run's last *count* facts, checked from the row before: ``_rows.tail_checked``
    (``SessionReader.tail_facts``, RUN-STO-3; raises as it does)."""
    return shared.tail_checked(run_facts, conn, scope, run_id, count, "%s")


#: The rows of a Run stream with their commit ids and the Run's head, in one statement.
_RUN_FACTS = (
    "SELECT e.idx, e.type, e.data, e.chain, c.commit_id, "
    "(SELECT head FROM runs WHERE scope = %s AND run_id = %s) "
    "FROM events AS e LEFT JOIN commits AS c ON c.seq = e.commit_seq "
    "WHERE e.scope = %s AND e.stream = %s AND e.idx >= %s"
)


def record(conn: Conn, scope: Scope, run_id: RunID) -> Snapshot:
    """Fold the Run's whole stream (the authoritative read, RUN-CMT-2).

    Raises: RunNotFoundError, CorruptRecordError, CorruptLogError, CorruptStoreError (the
    ``runs`` row's ``active`` flag contradicts the fold; ``_rows.record_checked``).
    """
    return shared.record_checked(run_facts, conn, scope, run_id, "%s")


def stream_exists(conn: Conn, scope: Scope, run_id: RunID) -> bool:
    """True when *scope* has a ``runs`` row for *run_id* (RUN-NEW-1: creation refuses it)."""
    row = conn.execute(
        "SELECT 1 FROM runs WHERE scope = %s AND run_id = %s", (scope, run_id)
    ).fetchone()
    return row is not None


def commit_exists(conn: Conn, scope: Scope, commit_id: str) -> bool:
    """True when *scope*'s commit-id index holds *commit_id* (a known id replays, §4.8)."""
    row = conn.execute(
        "SELECT 1 FROM commits WHERE scope = %s AND commit_id = %s", (scope, commit_id)
    ).fetchone()
    return row is not None


def commit_run_facts(
    conn: Conn, scope: Scope, commit_id: str, run_id: RunID
) -> tuple[Fact, ...] | None:
    """The facts *commit_id* appended to *run_id*'s stream, or None if the id is unknown."""
    row = conn.execute(
        "SELECT run_id, first_idx, count FROM commits WHERE scope = %s AND commit_id = %s",
        (scope, commit_id),
    ).fetchone()
    if row is None:
        return None
    return shared.commit_facts(run_facts, conn, scope, commit_id, run_id, tuple(row))


# -- appends ---------------------------------------------------------------------------


def insert_commit(
    conn: Conn, scope: Scope, commit_id: str, epoch: int, run_id: RunID | None = None,
    first_idx: int = 0, count: int = 0,
) -> int:
    """Append a commit record; returns its log sequence number."""
    row = conn.execute(
        "INSERT INTO commits (scope, commit_id, epoch, run_id, first_idx, count) "
        "VALUES (%s, %s, %s, %s, %s, %s) RETURNING seq",
        (scope, commit_id, epoch, run_id, first_idx, count),
    ).fetchone()
    assert row is not None
    return int(row[0])


class ChainCache:
    """Chain digests a group already knows, ``stream -> (idx, chain)`` (RUN-STO-3): the
    writer's committed heads (read only), the accepted jobs' (``accepted``) and the
    running job's (``pending``: kept or discarded with its savepoint)."""

    def __init__(self, heads: Mapping[str, tuple[int, bytes]]) -> None:
        self.heads = heads
        self.accepted: dict[str, tuple[int, bytes]] = {}
        self.pending: dict[str, tuple[int, bytes]] = {}

    def get(self, stream: str, idx: int) -> bytes | None:
        """The chain of row *idx* of *stream*, if known."""
        for known in (self.pending, self.accepted, self.heads):
            entry = known.get(stream)
            if entry is not None and entry[0] == idx:
                return entry[1]
        return None

    def keep(self) -> None:
        """The running job was accepted: its chains stay."""
        self.accepted.update(self.pending)
        self.pending = {}

    def discard(self) -> None:
        """The running job was refused (its savepoint rolled back): its chains go."""
        self.pending = {}


def _chain_before(conn: Conn, scope: Scope, stream: str, idx: int) -> bytes:
    if idx == 0:
        return genesis(scope, stream)
    row = conn.execute("SELECT chain FROM events WHERE scope = %s AND stream = %s AND idx = %s",
                       (scope, stream, idx - 1)).fetchone()
    if row is None or not isinstance(row[0], (bytes, memoryview)):
        raise CorruptRecordError(
            f"stream {stream!r} in scope {scope!r} has no event {idx - 1} to chain to",
            scope=scope, stream=stream, position=idx - 1, type="", table="events",
            row=f"{scope}/{stream}#{idx - 1}", reason="gap")
    return bytes(row[0])


def insert_events(
    conn: Conn, scope: Scope, seq: int, commit_id: str,
    events: Sequence[tuple[str, int, str, bytes]], chains: ChainCache | None = None,
) -> None:
    """Insert ``(stream, idx, type, data)`` rows of commit *seq* (*commit_id*), each with
    its chain digest (RUN-STO-3): the row before comes from *chains* when known, else is
    read inside the transaction. New chains go to ``chains.pending``. A duplicate key
    fails."""
    cache = chains if chains is not None else ChainCache({})
    rows = []
    for stream, idx, type_, data in events:
        prev = genesis(scope, stream) if idx == 0 else cache.get(stream, idx - 1)
        if prev is None:
            prev = _chain_before(conn, scope, stream, idx)
        chain = link(prev, commit_id, type_, data)
        cache.pending[stream] = (idx, chain)
        rows.append((scope, stream, idx, type_, data, seq, chain))
    with conn.cursor() as cur:
        cur.executemany(
            "INSERT INTO events (scope, stream, idx, type, data, commit_seq, chain) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s)", rows)


def stream_head(conn: Conn, scope: Scope, stream: str) -> int:
    """The index of the newest event of *stream* (-1 if the stream is empty)."""
    row = conn.execute(
        "SELECT MAX(idx) FROM events WHERE scope = %s AND stream = %s", (scope, stream)
    ).fetchone()
    return shared.head_of(row)


def insert_run(conn: Conn, scope: Scope, run_id: RunID, snap: Snapshot) -> None:
    """Add the Run's index row: head = *snap*'s position, active from its status."""
    conn.execute(
        "INSERT INTO runs (scope, run_id, head, active) VALUES (%s, %s, %s, %s)",
        (scope, run_id, snap.position, snap.state.status is RunStatus.ACTIVE),
    )


def advance_run(conn: Conn, scope: Scope, run_id: RunID, old: int, snap: Snapshot) -> None:
    """Move the Run's head from *old* to ``snap.position``.

    Raises:
        ProjectionDivergenceError: the stored head is not *old* (the writer's projection
            does not reflect the log); the caller's savepoint is rolled back.
    """
    cur = conn.execute(
        "UPDATE runs SET head = %s, active = %s "
        "WHERE scope = %s AND run_id = %s AND head = %s",
        (snap.position, snap.state.status is RunStatus.ACTIVE, scope, run_id, old),
    )
    if cur.rowcount != 1:
        raise ProjectionDivergenceError(
            f"run {run_id!r}: the log head is not the projection's position {old}",
            run_id=run_id, scope=scope, position=old,
        )


# -- the projection cache --------------------------------------------------------------


def write_cache(
    conn: Conn, scope: Scope, run_id: RunID, snap: Snapshot, *, was_open: bool = False,
) -> None:
    """Keep the durable cache (RUN-CMT-2): drop the entry when the Run ended, write it when
    the Run *arrives* at Open; nothing mid-step, nothing for an input accepted at Open."""
    if snap.state.status is not RunStatus.ACTIVE:
        conn.execute(
            "DELETE FROM projection_cache WHERE scope = %s AND run_id = %s", (scope, run_id)
        )
    elif isinstance(snap.state.current, Open) and not was_open:
        conn.execute(
            "INSERT INTO projection_cache (scope, run_id, position, state) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (scope, run_id) DO UPDATE SET "
            "position = excluded.position, state = excluded.state",
            (scope, run_id, snap.position, encode_state(snap.state)),
        )


def read_cache(conn: Conn, scope: Scope) -> dict[RunID, Snapshot]:
    """Every decodable entry of *scope*'s durable projection cache."""
    return shared.cache_entries(conn.execute(
        "SELECT run_id, position, state FROM projection_cache WHERE scope = %s", (scope,)
    ))


def rebuild_projection(conn: Conn, scope: Scope) -> dict[RunID, Snapshot]:
    """The active Runs' snapshots: cache entry plus the log tail, else a full fold.

    A cache entry that does not decode or does not fold with its tail is ignored.

    Raises: CorruptRecordError, CorruptLogError.
    """
    rows = conn.execute(
        "SELECT r.run_id, r.head, c.position, c.state FROM runs AS r "
        "LEFT JOIN projection_cache AS c ON c.scope = r.scope AND c.run_id = r.run_id "
        "WHERE r.scope = %s AND r.active",
        (scope,),
    ).fetchall()
    orphan = conn.execute(
        "SELECT r.run_id, e.idx FROM runs AS r "
        "JOIN events AS e ON e.scope = r.scope AND e.stream = 'run/' || r.run_id "
        "LEFT JOIN commits AS c ON c.seq = e.commit_seq "
        "WHERE r.scope = %s AND r.active AND c.seq IS NULL ORDER BY r.run_id, e.idx LIMIT 1",
        (scope,),
    ).fetchone()
    return shared.rebuild_projection(run_facts, conn, scope, rows,
                                     None if orphan is None else (orphan[0], orphan[1]))


# -- frozen bodies and foreign streams -------------------------------------------------


def frozen_put(conn: Conn, digest: Digest, data: bytes) -> None:
    """Insert a body; an existing digest is left as it is (idempotent)."""
    conn.execute(
        "INSERT INTO frozen (digest, data) VALUES (%s, %s) ON CONFLICT (digest) DO NOTHING",
        (digest, bytes(data)),
    )


def frozen_get(conn: Conn, digest: Digest) -> bytes:
    """Raises FrozenValueMissingError if absent."""
    return shared.frozen_body(
        digest, conn.execute("SELECT data FROM frozen WHERE digest = %s", (digest,)).fetchone())


def read_stream(conn: Conn, scope: Scope, stream: str) -> tuple[StreamRecord, ...]:
    """Every event of *stream* in order with its payload decoded (foreign or Run stream).

    Raises:
        CorruptRecordError: an event does not decode (names the stream and index).
    """
    if unstorable(scope, stream):
        return ()
    rows = conn.execute(
        "SELECT e.idx, e.type, e.data, e.chain, c.commit_id, c.epoch FROM events e "
        "LEFT JOIN commits c ON c.seq = e.commit_seq "
        "WHERE e.scope = %s AND e.stream = %s ORDER BY e.idx", (scope, stream)).fetchall()
    return shared.stream_records(scope, stream, rows)
