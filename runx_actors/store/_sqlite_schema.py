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

import contextlib
import os
import sqlite3
import stat
import uuid
from pathlib import Path

from ..protocol.errors import CorruptStoreError, SchemaVersionError, StoreBusyError

__all__ = [
    "SCHEMA_VERSION", "APPLICATION_ID", "DEFAULT_BUSY_TIMEOUT", "TABLES", "connect",
    "ensure_schema", "create_store_file", "check_header", "check_structure", "corrupt",
    "is_damage", "SQLITE_ERRORS", "busy_error",
]

#: The schema version this build reads and writes. Version 2 added ``events.chain``
#: (RUN-STO-3); a version-1 file is refused with ``SchemaVersionError`` (no migration).
SCHEMA_VERSION = 2
#: ``PRAGMA application_id`` of a runx_actors store ("RNXA").
APPLICATION_ID = 0x524E5841
#: Seconds a connection waits for another connection's write lock.
DEFAULT_BUSY_TIMEOUT = 30.0
#: The first 16 bytes of every SQLite 3 database file.
_SQLITE_HEADER = b"SQLite format 3\x00"

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
    chain BLOB NOT NULL,
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

#: Every table of the schema.
TABLES = ("scopes", "commits", "events", "runs", "projection_cache", "frozen")


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


def corrupt(path: str, message: str, **attrs: object) -> CorruptStoreError:
    """A CorruptStoreError about the store at *path*."""
    return CorruptStoreError(f"{path}: {message}", path=path, **attrs)


#: ``sqlite_errorname`` values that mean the file or its schema is damaged (not a lock,
#: a full disk or an I/O hiccup).
_DAMAGE_CODES = frozenset({"SQLITE_CORRUPT", "SQLITE_NOTADB", "SQLITE_CORRUPT_INDEX",
                           "SQLITE_CORRUPT_SEQUENCE", "SQLITE_CORRUPT_VTAB"})


#: What a ``sqlite3`` call raises on a damaged file: its own errors, and
#: ``UnicodeDecodeError`` when the damaged bytes are in an error message it decodes (a
#: flipped byte in ``sqlite_master``'s SQL text).
SQLITE_ERRORS: tuple[type[Exception], ...] = (sqlite3.DatabaseError, UnicodeDecodeError)


def is_damage(exc: BaseException) -> bool:
    """Whether a ``sqlite3`` error says the database is damaged: a corrupt or non-database
    file, a table or column of the schema that is missing, text that is not UTF-8."""
    if isinstance(exc, UnicodeDecodeError):
        return True
    if not isinstance(exc, sqlite3.DatabaseError):
        return False
    name = str(getattr(exc, "sqlite_errorname", ""))
    if name in _DAMAGE_CODES:
        return True
    text = str(exc)
    return (type(exc) is sqlite3.DatabaseError or "no such table" in text
            or "no such column" in text or "malformed" in text
            or "Could not decode to UTF-8" in text or "unsupported file format" in text)


def busy_error(path: str, exc: BaseException, timeout: float) -> StoreBusyError | None:
    """The StoreBusyError for *exc* when it says another connection holds the lock
    (SQLITE_BUSY / SQLITE_LOCKED and their extended codes, ``database is locked``) after
    *timeout* seconds of waiting, else None."""
    if not isinstance(exc, sqlite3.OperationalError):
        return None
    name = str(getattr(exc, "sqlite_errorname", ""))
    if not (name.startswith(("SQLITE_BUSY", "SQLITE_LOCKED"))
            or "database is locked" in str(exc) or "database table is locked" in str(exc)):
        return None
    error = StoreBusyError(
        f"the store {path!r} is locked by another connection (waited {timeout:g} s): "
        f"{exc}", path=path, reason="busy", timeout=timeout)
    error.__cause__ = exc
    return error


def check_header(path: str) -> None:
    """Refuse a file that cannot be a store before SQLite touches it (RUN-STO-1).

    Raises:
        CorruptStoreError: not a regular file (``reason="not_regular"``), zero bytes,
            shorter than a SQLite header, or not starting with the SQLite magic (garbage);
            ``reason`` says which.
    """
    try:
        # a FIFO would block ``open`` (and SQLite) forever, a device reads without end:
        # only a regular file is read at all
        mode = os.stat(path).st_mode
        if not stat.S_ISREG(mode):
            raise corrupt(path, "the store path is not a regular file (a FIFO, device or "
                                "socket)", reason="not_regular")
        with open(path, "rb") as f:
            head = f.read(100)
    except OSError as exc:
        raise corrupt(path, f"cannot read the store file: {exc.strerror or exc}",
                      reason="unreadable") from None
    if not head:
        raise corrupt(path, "the store file is empty (zero bytes); only a path that does "
                            "not exist gets a new store", reason="zero_bytes")
    if not head.startswith(_SQLITE_HEADER):
        raise corrupt(path, "the file is not a SQLite database", reason="not_sqlite")
    if len(head) < 100:
        raise corrupt(path, "the SQLite header is truncated", reason="truncated")
    if head[18] not in (1, 2) or head[19] not in (1, 2):  # 3+ would open read-only
        raise corrupt(path, f"the SQLite header holds the unknown file format "
                            f"{head[18]}/{head[19]}", reason="header")


def check_structure(conn: sqlite3.Connection, path: str) -> None:
    """Check an existing store's identity, version, tables and epochs (read only).

    Raises:
        SchemaVersionError: a SQLite database that is not a runx_actors store (foreign),
            or a store of another schema version.
        CorruptStoreError: a table is missing, the file is damaged, or a scope's epoch is
            not a positive integer (``table="scopes"``, ``row`` = the scope).
    """
    try:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id != APPLICATION_ID:
            raise SchemaVersionError(
                f"{path}: the database is not a runx_actors store (application id "
                f"{app_id:#x})", found=version, supported=SCHEMA_VERSION,
                application_id=app_id, path=path)
        if version != SCHEMA_VERSION:
            hint = (" (written by an older build; there is no migration: keep it with that "
                    "build, or start a new store)" if 0 < version < SCHEMA_VERSION else "")
            raise SchemaVersionError(
                f"{path}: unknown store schema version {version}; this build reads version "
                f"{SCHEMA_VERSION}{hint}", found=version, supported=SCHEMA_VERSION,
                application_id=app_id, path=path)
        names = {row[0] for row in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table'")}
        for table in TABLES:
            if table not in names:
                raise corrupt(path, f"the table {table!r} is missing", table=table,
                              reason="missing_table")
        row = conn.execute(
            "SELECT scope, epoch FROM scopes WHERE typeof(epoch) != 'integer' OR epoch < 1 "
            "LIMIT 1").fetchone()
        if row is not None:
            raise corrupt(path, f"scope {row[0]!r} has the invalid epoch {row[1]!r}",
                          table="scopes", row=str(row[0]), scope=row[0], reason="bad_epoch")
    except SQLITE_ERRORS as exc:
        if not is_damage(exc):
            raise
        raise corrupt(path, f"the database is damaged: {exc}", reason="sqlite") from exc


def _create_schema(conn: sqlite3.Connection) -> None:
    mode = conn.execute("PRAGMA journal_mode = WAL").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":
        raise SchemaVersionError(f"cannot switch the database to WAL mode (got {mode!r})")
    conn.execute("BEGIN IMMEDIATE")
    try:
        for statement in _DDL.split(";"):
            if statement.strip():
                conn.execute(statement)
        conn.execute(f"PRAGMA application_id = {APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
        conn.execute("COMMIT")
    except BaseException:
        conn.execute("ROLLBACK")
        raise


def create_store_file(path: str) -> None:
    """Create a new store at *path* if nothing exists there (RUN-STO-1).

    The schema is built in a temporary file beside *path*, closed (the WAL checkpointed),
    then hard-linked to *path*, which fails if *path* appeared meanwhile; so a file at
    *path* is always a complete store or someone else's, never half-initialised. A path
    that exists is left alone (the caller checks it).
    """
    if os.path.lexists(path):
        return
    tmp = f"{path}.{uuid.uuid4().hex}.tmp"
    try:
        conn = connect(tmp)
        try:
            _create_schema(conn)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            conn.execute("PRAGMA journal_mode = WAL")
        finally:
            conn.close()
        try:
            os.link(tmp, path)
        except FileExistsError:
            pass  # another process created it first: the caller checks that one
        except OSError:  # a filesystem without hard links: no-clobber is best effort
            if not os.path.lexists(path):
                os.rename(tmp, path)
    finally:
        for name in (tmp, tmp + "-wal", tmp + "-shm"):
            with contextlib.suppress(FileNotFoundError):
                os.unlink(name)


def ensure_schema(conn: sqlite3.Connection, path: str = "") -> None:
    """Check an existing store on its write connection, and put it in WAL mode.

    *path* names the file in errors. A new store is made by :func:`create_store_file`
    before; this never creates tables.

    Raises:
        SchemaVersionError: foreign database or another schema version.
        CorruptStoreError: see :func:`check_structure`; or the store is not in WAL mode
            (its header was changed).
    """
    check_structure(conn, path)
    mode = conn.execute("PRAGMA journal_mode").fetchone()
    if mode is None or str(mode[0]).lower() != "wal":  # every store is created in WAL mode
        raise corrupt(path, f"the store is not in WAL mode (got {mode!r})", reason="not_wal")
