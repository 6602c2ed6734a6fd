"""The schema of the PostgreSQL store and its connection pool (spec §4.8; architecture §4).

The tables live in the connection's current schema (the first existing schema of
``search_path``; choose another one with ``options=-csearch_path=<name>`` in the DSN). They
mirror the SQLite store's tables (see ``_sqlite_schema``):

``runx_meta(key, value)``
    ``schema_version`` → ``"2"``: the version this build reads and writes (2 added
    ``events.chain``, RUN-STO-3; a version-1 store is refused, there is no migration).
``scopes(scope, epoch)``
    The persisted epoch of each scope (RUN-CMT-6). ``open`` bumps it; every append
    transaction locks the row (``SELECT … FOR UPDATE``) and compares epochs first.
``commits(seq, scope, commit_id, epoch, run_id, first_idx, count)``
    The log of commits (``seq`` orders them) and the commit-id index
    (``UNIQUE (scope, commit_id)``); ``run_id``/``first_idx``/``count`` locate the Run
    facts a commit appended, so a replay reads them by key.
``events(scope, stream, idx, type, data, commit_seq, chain)``
    Every event; ``data`` is the typed-envelope bytes (§2.12), ``chain`` the digest that
    links the row to the one before it (``_chain``, RUN-STO-3).
``runs(scope, run_id, head, active)``
    One row per Run stream: its head and whether it is active (``open`` folds the active
    Runs only).
``projection_cache(scope, run_id, position, state)``
    The disposable projection cache, written only at Open or when a Run ends (RUN-CMT-2).
``frozen(digest, data)``
    Content-addressed bodies (RUN-WIR-4), shared by every scope.

Schema creation runs under a transaction-scoped advisory lock, so stores opening the same
empty database at once do not race.
"""

from __future__ import annotations

from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from ..protocol.errors import CorruptStoreError, SchemaVersionError

__all__ = ["SCHEMA_VERSION", "TABLES", "make_pool", "ensure_schema", "check_structure",
           "is_damage"]

#: The schema version this build reads and writes.
SCHEMA_VERSION = 2
#: Every table of the schema.
TABLES = ("runx_meta", "scopes", "commits", "events", "runs", "projection_cache", "frozen")
#: Key of the advisory lock held while the schema is created or checked ("RNXA").
_SCHEMA_LOCK = 0x524E5841

_DDL = """
CREATE TABLE runx_meta (
    key TEXT PRIMARY KEY,
    value TEXT NOT NULL
);
CREATE TABLE scopes (
    scope TEXT PRIMARY KEY,
    epoch BIGINT NOT NULL
);
CREATE TABLE commits (
    seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    scope TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    epoch BIGINT NOT NULL,
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
    data BYTEA NOT NULL,
    commit_seq BIGINT NOT NULL,
    chain BYTEA NOT NULL,
    PRIMARY KEY (scope, stream, idx)
);
CREATE TABLE runs (
    scope TEXT NOT NULL,
    run_id TEXT NOT NULL,
    head INTEGER NOT NULL,
    active BOOLEAN NOT NULL,
    PRIMARY KEY (scope, run_id)
);
CREATE INDEX runs_active ON runs (scope) WHERE active;
CREATE TABLE projection_cache (
    scope TEXT NOT NULL,
    run_id TEXT NOT NULL,
    position INTEGER NOT NULL,
    state BYTEA NOT NULL,
    PRIMARY KEY (scope, run_id)
);
CREATE TABLE frozen (
    digest TEXT PRIMARY KEY,
    data BYTEA NOT NULL
);
"""


def _configure(conn: psycopg.Connection[Any]) -> None:
    """Every pooled connection: autocommit outside explicit transactions, durable commits."""
    conn.autocommit = True
    conn.execute("SET synchronous_commit = on")


def make_pool(dsn: str, *, min_size: int, max_size: int, timeout: float) -> ConnectionPool:
    """A closed pool of *dsn* connections (open it with ``pool.open(wait=True)``)."""
    return ConnectionPool(
        dsn, min_size=min_size, max_size=max_size, open=False, configure=_configure,
        timeout=timeout, name="runx-postgres",
    )


def ensure_schema(conn: psycopg.Connection[Any]) -> None:
    """Create the tables in an empty current schema, or check an existing store's version.

    Raises:
        SchemaVersionError: the store has another schema version, or the current schema
            holds tables but no ``runx_meta`` (it is not a runx_actors store), or no schema
            of ``search_path`` exists.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_SCHEMA_LOCK,))
        row = conn.execute("SELECT current_schema()").fetchone()
        schema = row[0] if row is not None else None
        if schema is None:
            raise SchemaVersionError("no schema of the connection's search_path exists")
        tables = {
            name for (name,) in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,)
            )
        }
        if "runx_meta" not in tables:
            if tables:
                raise SchemaVersionError(
                    f"schema {schema!r} is not a runx_actors store (it has tables but no "
                    "runx_meta)", found=0, supported=SCHEMA_VERSION,
                )
            for statement in _DDL.split(";"):
                if statement.strip():
                    conn.execute(statement)
            conn.execute("INSERT INTO runx_meta (key, value) VALUES ('schema_version', %s)",
                         (str(SCHEMA_VERSION),))
            return
        got = conn.execute(
            "SELECT value FROM runx_meta WHERE key = 'schema_version'"
        ).fetchone()
        found = int(got[0]) if got is not None and str(got[0]).isdigit() else -1
        if found != SCHEMA_VERSION:
            hint = (" (written by an older build; there is no migration: keep it with that "
                    "build, or start a new store)" if 0 < found < SCHEMA_VERSION else "")
            raise SchemaVersionError(
                f"unknown store schema version {found} in schema {schema!r}; this build "
                f"reads version {SCHEMA_VERSION}{hint}", found=found,
                supported=SCHEMA_VERSION,
            )
        check_structure(conn, schema, tables)


def is_damage(exc: BaseException) -> bool:
    """Whether a psycopg error says the store's schema is damaged (a table or column of
    the schema is missing, or a column has another type)."""
    return isinstance(exc, (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedColumn,
                            psycopg.errors.DatatypeMismatch))


def check_structure(conn: psycopg.Connection[Any], schema: str, tables: set[str]) -> None:
    """Check an existing store's tables and epochs (RUN-STO-1, RUN-STO-2); reads only.

    Raises:
        CorruptStoreError: a table is missing (``table``), or a scope's epoch is not a
            positive integer (``table="scopes"``, ``row`` = the scope).
    """
    for table in TABLES:
        if table not in tables:
            raise CorruptStoreError(f"schema {schema!r}: the table {table!r} is missing",
                                    table=table, path=schema, reason="missing_table")
    row = conn.execute("SELECT scope, epoch FROM scopes WHERE epoch < 1 LIMIT 1").fetchone()
    if row is not None:
        raise CorruptStoreError(f"schema {schema!r}: scope {row[0]!r} has the invalid epoch "
                                f"{row[1]!r}", table="scopes", row=str(row[0]),
                                scope=row[0], path=schema, reason="bad_epoch")
