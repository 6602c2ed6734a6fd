"""The on-disk schema of the SQLite store and its connections (spec §4.8; architecture §4).

One file holds every scope. Tables:

``scopes(scope, epoch)``
    The persisted epoch of each scope (RUN-CMT-6). ``open`` bumps it in its own
    transaction; every append transaction compares the writer's epoch with it.
``commits(seq, scope, commit_id, epoch, run_id, first_idx, count)``
    The ordered log of commits (``seq`` is the global order) and the commit-id index
    (``UNIQUE(scope, commit_id)``). ``run_id``/``first_idx``/``count`` locate the Run
    facts a commit appended (at most one Run per commit), so a replay reads them by key.
``events(scope, stream, idx, type, data, commit_seq)``
    Every event; ``data`` is the typed-envelope bytes (§2.12).
``runs(scope, run_id, head, active)``
    One row per Run stream: its head position and whether it is still active, so that
    ``open`` rebuilds the projection from the active Runs only.
``projection_cache(scope, run_id, position, state)``
    The disposable durable projection cache, written only when a Run is at Open or ends
    (RUN-CMT-2).
``frozen(digest, data)``
    Content-addressed bodies (RUN-WIR-4).

The schema is versioned with ``PRAGMA user_version`` and marked with
``PRAGMA application_id``; an unknown version or a foreign database raises
``SchemaVersionError``.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from ..protocol.errors import SchemaVersionError

__all__ = [
    "SCHEMA_VERSION", "APPLICATION_ID", "DEFAULT_BUSY_TIMEOUT", "connect",
    "ensure_schema",
]

#: The schema version this build reads and writes.
SCHEMA_VERSION = 1
#: ``PRAGMA application_id`` of a runx_actors store ("RNXA").
APPLICATION_ID = 0x524E5841
#: Seconds a connection waits for another connection's write lock.
DEFAULT_BUSY_TIMEOUT = 30.0

_DDL = """
CREATE TABLE scopes (
    scope TEXT PRIMARY KEY,
    epoch INTEGER NOT NULL
);
CREATE TABLE commits (
    seq INTEGER PRIMARY KEY,
    scope TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    epoch INTEGER NOT NULL,
    run_id TEXT,
    first_idx INTEGER NOT NULL DEFAULT 0,
    count INTEGER NOT NULL DEFAULT 0,
    UNIQUE (scope, commit_id)
);
CREATE TABLE events (
    scope TEXT NOT NULL,
    stream TEXT NOT NULL,
    idx INTEGER NOT NULL,
    type TEXT NOT NULL,
    data BLOB NOT NULL,
    commit_seq INTEGER NOT NULL,
    PRIMARY KEY (scope, stream, idx)
) WITHOUT ROWID;
CREATE TABLE runs (
    scope TEXT NOT NULL,
    run_id TEXT NOT NULL,
    head INTEGER NOT NULL,
    active INTEGER NOT NULL,
    PRIMARY KEY (scope, run_id)
) WITHOUT ROWID;
CREATE INDEX runs_active ON runs (scope) WHERE active = 1;
CREATE TABLE projection_cache (
    scope TEXT NOT NULL,
    run_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    state BLOB NOT NULL,
    PRIMARY KEY (scope, run_id)
) WITHOUT ROWID;
CREATE TABLE frozen (
    digest TEXT PRIMARY KEY,
    data BLOB NOT NULL
) WITHOUT ROWID;
"""


def connect(
    path: str | Path, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT, readonly: bool = False,
    cached_statements: int = 128,
) -> sqlite3.Connection:
    """A connection in manual-transaction mode with the store's pragmas.

    ``synchronous=FULL`` on every connection; ``query_only`` for readers. The
    connection may be used from any one thread at a time (``check_same_thread=False``).
    *cached_statements* sizes sqlite3's cache of prepared statements (keyed by SQL text).
    """
    conn = sqlite3.connect(
        str(path), timeout=busy_timeout, isolation_level=None, check_same_thread=False,
        cached_statements=cached_statements,
    )
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
        conn.execute("PRAGMA synchronous = FULL")
        if readonly:
            conn.execute("PRAGMA query_only = 1")
    except BaseException:
        conn.close()
        raise
    return conn


def ensure_schema(conn: sqlite3.Connection) -> None:
    """Create the schema in an empty database, or check an existing one.

    Sets WAL journal mode (persistent). Runs in its own ``BEGIN IMMEDIATE`` transaction,
    so two processes creating the same file at once do not race.

    Raises:
        SchemaVersionError: the database has another ``user_version``, or it holds
            tables but is not a runx_actors store.
    """
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise SchemaVersionError(f"cannot switch the database to WAL mode (got {mode!r})")
    conn.execute("BEGIN IMMEDIATE")
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if version == 0:
            tables = conn.execute(
                "SELECT count(*) FROM sqlite_master WHERE type = 'table'"
            ).fetchone()[0]
            if tables or app_id not in (0, APPLICATION_ID):
                raise SchemaVersionError(
                    "the database is not a runx_actors store (it has tables but no "
                    "schema version)", found=version, supported=SCHEMA_VERSION,
                )
            for statement in _DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        elif version != SCHEMA_VERSION or app_id != APPLICATION_ID:
            raise SchemaVersionError(
                f"unknown store schema version {version} (application id {app_id:#x}); "
                f"this build reads version {SCHEMA_VERSION}",
                found=version, supported=SCHEMA_VERSION, application_id=app_id,
            )
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise
