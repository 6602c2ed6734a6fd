"""``runx-actors store check``: an fsck of a SQLite or PostgreSQL store (RUN-STO-5).

:func:`check_store` reads a whole store in one read-only snapshot and reports every damage
it finds, writing nothing:

* the file or schema: a zero-byte, garbage, truncated or foreign file, another schema
  version, a missing table, SQLite's own ``PRAGMA integrity_check``;
* ``scopes``: an epoch that is not a positive integer, is below the epoch of the scope's
  newest commit, or is missing for a scope that has commits;
* ``events``: per stream, positions 0, 1, 2 … without a gap, each row chained to the one
  before (``_chain``), each row's commit present in ``commits`` and of the same scope; Run
  streams decode, fold, and end at their ``runs`` row's head with its ``active`` flag;
* ``commits`` (the commit-id index) cross-checked against the facts: a commit that names a
  Run must own exactly ``count`` events of that Run from ``first_idx``; a commit without a
  Run must own at least one event;
* ``runs``: every row has a stream;
* ``frozen``: every body is a BLOB hashing to its digest, and every body a Run's facts name
  is present.

The damage found is a :class:`CheckReport` (``problems`` name table, row, scope, Run and
position). Checking stops early only when the store cannot be read at all (its file or
schema); otherwise each stream stops at its first damaged row and the rest is checked.
"""

from __future__ import annotations

import hashlib
import itertools
import os
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import attrs

from ..protocol.commit import fold_run
from ..protocol.errors import CorruptStoreError, RunxError, SchemaVersionError
from ..protocol.facts import Fact
from ..protocol.values import RunStatus
from ._rows import check_epoch_row, decode_rows, verify_chain
from ._verify import fact_digests
from .base import run_stream

__all__ = ["Problem", "redact_dsn", "dsn_secrets", "mask_secrets", "secret_parameters",
           "SECRET_PARAMETERS",
           "CheckReport", "check_store", "check_sqlite", "check_postgres",
           "is_dsn", "StoreMissingError", "StoreUnreachableError", "ScopeNotFoundError",
           "connect_postgres", "CONNECT_TIMEOUT", "REACH_HINTS"]

_RUN_PREFIX = run_stream("")


class StoreMissingError(RunxError):
    """``store check`` was given a path where there is no file, or a PostgreSQL DSN whose
    schema holds none of a store's tables (nothing is created). Attributes: ``path``
    (a DSN: masked)."""


class StoreUnreachableError(RunxError):
    """A PostgreSQL store could not be reached: the server refused the connection, the
    database or role does not exist, authentication failed, the DSN does not parse, or
    the PostgreSQL extra is not installed (RUN-CLI-2). The message names the DSN with its
    password masked (:func:`redact_dsn`); the server's own message is kept, a DSN parse
    error's is not (it may quote the password). Attributes: ``target`` (masked),
    ``reason`` (``unreachable``, ``bad_dsn``, ``no_driver``), ``hint`` (what to do).
    Exit code 1 from the CLI (``check --log``: 66)."""


class ScopeNotFoundError(RunxError):
    """A command's ``--scope`` names a valid scope the store does not have (no epoch row,
    no commit): exit 1, as a Run or loop that is not there (``check --log``: 66).
    Attribute: ``scope``."""

    #: the ``hint:`` line (``host._cli_support.hint_for``)
    hint = "check the scope's name (`runx-actors runs list` lists the store's Runs by scope)"


#: StoreUnreachableError's ``hint`` by ``reason`` (the CLI's ``hint:`` line).
REACH_HINTS = {
    "unreachable": "check the DSN: its host and port must reach a running PostgreSQL "
                   "server, and its dbname and user must exist there and be accepted",
    "bad_dsn": "give a libpq key=value string (host=… dbname=…) or a postgresql:// URL",
    "no_driver": "pip install 'runx-actors[postgres]'",
}


#: Seconds a command waits for a PostgreSQL server to accept a connection (libpq's
#: ``connect_timeout``; a DSN's own ``connect_timeout`` wins).
CONNECT_TIMEOUT = 10


@attrs.frozen(kw_only=True)
class Problem:
    """One damage found: the ``table`` and ``row`` (its key as text), the ``scope``, Run
    and ``position`` where they apply, a ``reason`` code and a one-line ``message``."""

    table: str
    reason: str
    message: str
    row: str | None = None
    scope: str | None = None
    run_id: str | None = None
    position: int | None = None

    def to_json(self) -> dict[str, Any]:
        """The problem as a JSON object (every field, ``--json``)."""
        return attrs.asdict(self)


@attrs.frozen(kw_only=True)
class CheckReport:
    """What :func:`check_store` found. ``ok`` iff there is no problem; the counts are of
    what was read (``scopes``, ``runs``, ``streams``, ``events``, ``commits``, ``frozen``)."""

    target: str
    backend: str
    problems: tuple[Problem, ...]
    scopes: int = 0
    runs: int = 0
    streams: int = 0
    events: int = 0
    commits: int = 0
    frozen: int = 0

    @property
    def ok(self) -> bool:
        """True when no problem was found (exit 0)."""
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        """The ``--json`` document: ``ok``, ``target``, ``backend``, the counts and
        ``problems`` (a list of :class:`Problem` objects)."""
        return {"ok": self.ok, "target": self.target, "backend": self.backend,
                "scopes": self.scopes, "runs": self.runs, "streams": self.streams,
                "events": self.events, "commits": self.commits, "frozen": self.frozen,
                "problems": [p.to_json() for p in self.problems]}


def is_dsn(target: str) -> bool:
    """Whether *target* names a PostgreSQL database (a ``postgres[ql]://`` URL or a
    ``key=value`` connection string) rather than a SQLite path."""
    return target.startswith(("postgresql://", "postgres://")) or (
        "=" in target and any(k in target for k in ("dbname=", "host=", "user=")))


def _problem_of(exc: BaseException, table: str = "") -> Problem:
    a = getattr(exc, "__dict__", {})
    return Problem(table=str(a.get("table") or table), reason=str(a.get("reason") or
                   type(exc).__name__), message=str(exc), row=a.get("row"),
                   scope=a.get("scope"), run_id=a.get("run_id"),
                   position=a.get("position"))


class _Walk:
    """The checks over an open connection in a read snapshot (backend-neutral SQL with
    ``?`` placeholders; *param* is the backend's)."""

    def __init__(self, conn: Any, param: str, scope: str | None) -> None:
        self.conn = conn
        self.param = param
        self.scope = scope
        self.problems: list[Problem] = []
        self.run_owned: dict[tuple[int, str], tuple[int, int]] = {}
        self.counts = dict.fromkeys(("scopes", "runs", "streams", "events", "commits",
                                     "frozen"), 0)

    def rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[Sequence[Any]]:
        cur = self.conn.execute(sql.replace("?", self.param), tuple(params))
        while True:
            chunk = cur.fetchmany(512)
            if not chunk:
                return
            yield from chunk

    def _where(self, column: str) -> tuple[str, tuple[Any, ...]]:
        return (f" WHERE {column} = ?", (self.scope,)) if self.scope is not None else ("", ())

    def run(self) -> None:
        self.check_scopes()
        per_commit = self.check_streams()
        self.check_commits(per_commit)

    # -- scopes ------------------------------------------------------------------------

    def check_scopes(self) -> None:
        where, params = self._where("scope")
        last: dict[str, int] = {}
        for scope, epoch in self.rows(
                "SELECT scope, MAX(epoch) FROM commits" + where + " GROUP BY scope", params):
            last[str(scope)] = int(epoch)
        scopes: set[str] = set()
        for scope, epoch in self.rows("SELECT scope, epoch FROM scopes" + where, params):
            scopes.add(str(scope))
            self.counts["scopes"] += 1
            try:
                check_epoch_row(str(scope), epoch, last.get(str(scope), 0))
            except CorruptStoreError as exc:
                self.problems.append(_problem_of(exc, "scopes"))
        for scope in sorted(set(last) - scopes):
            try:
                check_epoch_row(scope, None, last[scope])
            except CorruptStoreError as exc:
                self.problems.append(_problem_of(exc, "scopes"))

    # -- streams -----------------------------------------------------------------------

    def check_streams(self) -> dict[int, int]:
        """Check every stream; returns how many events reference each commit seq, and
        fills ``run_owned``: ``(seq, run id) -> (first idx, events)`` of Run events."""
        where, params = self._where("e.scope")
        runs: dict[tuple[str, str], tuple[int, bool]] = {}
        rwhere, rparams = self._where("scope")
        for scope, run_id, head, active in self.rows(
                "SELECT scope, run_id, head, active FROM runs" + rwhere, rparams):
            runs[(str(scope), str(run_id))] = (int(head), bool(active))
        self.counts["runs"] = len(runs)
        seen_runs: set[tuple[str, str]] = set()
        per_commit: dict[int, int] = {}
        needed: dict[str, tuple[str, str, int]] = {}
        rows = self.rows(
            "SELECT e.scope, e.stream, e.idx, e.type, e.data, e.chain, c.commit_id, "
            "e.commit_seq, c.scope FROM events AS e LEFT JOIN commits AS c "
            "ON c.seq = e.commit_seq" + where + " ORDER BY e.scope, e.stream, e.idx", params)
        for (scope, stream), group in itertools.groupby(rows, key=lambda r: (r[0], r[1])):
            scope, stream = str(scope), str(stream)
            batch = list(group)
            self.counts["streams"] += 1
            self.counts["events"] += len(batch)
            run_id = stream[len(_RUN_PREFIX):] if stream.startswith(_RUN_PREFIX) else None
            for row in batch:
                seq = int(row[7])
                per_commit[seq] = per_commit.get(seq, 0) + 1
                if run_id is not None:
                    first, n = self.run_owned.get((seq, run_id), (int(row[2]), 0))
                    self.run_owned[(seq, run_id)] = (min(first, int(row[2])), n + 1)
                if row[8] is not None and row[8] != scope:
                    self.problems.append(Problem(
                        table="commits", reason="commit_scope", row=str(seq), scope=scope,
                        position=int(row[2]), message=f"event {stream}#{row[2]} of scope "
                        f"{scope!r} belongs to commit {seq} of scope {row[8]!r}"))
            try:
                checked = verify_chain(scope, stream, [r[2:7] for r in batch], 0,
                                       run_id=run_id)
            except CorruptStoreError as exc:
                self.problems.append(_problem_of(exc, "events"))
                if run_id is not None:
                    seen_runs.add((scope, run_id))
                continue
            if run_id is None:
                continue
            seen_runs.add((scope, run_id))
            self.check_run(scope, run_id, checked, runs.get((scope, run_id)), needed)
        for scope, run_id in sorted(set(runs) - seen_runs):
            self.problems.append(Problem(
                table="runs", reason="stream_missing", row=f"{scope}/{run_id}", scope=scope,
                run_id=run_id, position=0,
                message=f"run {run_id!r} in scope {scope!r} has a 'runs' row but no events"))
        self.check_frozen(needed)
        return per_commit

    def check_run(self, scope: str, run_id: str, checked: list[tuple[int, str, bytes]],
                  run_row: tuple[int, bool] | None,
                  needed: dict[str, tuple[str, str, int]]) -> None:
        stream = run_stream(run_id)
        last = checked[-1][0] if checked else -1
        if run_row is None:
            self.problems.append(Problem(
                table="runs", reason="run_missing", row=f"{scope}/{run_id}", scope=scope,
                run_id=run_id, position=last,
                message=f"run {run_id!r} in scope {scope!r} has events but no 'runs' row"))
            return
        head, active = run_row
        if head != last:
            table, position = ("events", last + 1) if last < head else ("runs", head)
            self.problems.append(Problem(
                table=table, reason="head", row=f"{scope}/{stream}#{position}", scope=scope,
                run_id=run_id, position=position,
                message=f"run {run_id!r} in scope {scope!r}: the 'runs' head is {head} but "
                        f"the stream ends at {last}"))
            return
        try:
            facts: tuple[Fact, ...] = decode_rows(scope, run_id, checked, 0)
            state = fold_run(facts, run_id=run_id)
        except RunxError as exc:
            problem = _problem_of(exc, "events")
            self.problems.append(attrs.evolve(
                problem, scope=problem.scope or scope, run_id=problem.run_id or run_id,
                position=problem.position if problem.position is not None
                else getattr(exc, "index", None)))
            return
        if (state.status is RunStatus.ACTIVE) != active:
            self.problems.append(Problem(
                table="runs", reason="active", row=f"{scope}/{run_id}", scope=scope,
                run_id=run_id, position=head,
                message=f"run {run_id!r} in scope {scope!r} is {state.status.value} but its "
                        f"'runs' row says active={active}"))
        for position, fact in enumerate(facts):
            for _, digest in fact_digests(fact):
                needed.setdefault(digest, (scope, run_id, position))

    def check_frozen(self, needed: dict[str, tuple[str, str, int]]) -> None:
        present: set[str] = set()
        for digest, data in self.rows("SELECT digest, data FROM frozen"):
            digest = str(digest)
            if self.scope is not None and digest not in needed:
                continue
            self.counts["frozen"] += 1
            present.add(digest)
            if not isinstance(data, (bytes, bytearray, memoryview)):
                self.problems.append(Problem(
                    table="frozen", reason="data_type", row=digest,
                    message=f"frozen body {digest} is stored as {type(data).__name__}, not "
                            "bytes"))
            elif "sha256:" + hashlib.sha256(bytes(data)).hexdigest() != digest:
                self.problems.append(Problem(
                    table="frozen", reason="digest", row=digest,
                    message=f"frozen body {digest} does not hash to its digest"))
        for digest, (scope, run_id, position) in sorted(needed.items()):
            if digest not in present:
                self.problems.append(Problem(
                    table="frozen", reason="missing", row=digest, scope=scope, run_id=run_id,
                    position=position, message=f"run {run_id!r} in scope {scope!r}, fact "
                    f"{position}: the frozen body {digest} is missing"))

    # -- the commit-id index -----------------------------------------------------------

    def check_commits(self, per_commit: dict[int, int]) -> None:
        where, params = self._where("scope")
        for seq, scope, commit_id, run_id, first, count in self.rows(
                "SELECT seq, scope, commit_id, run_id, first_idx, count FROM commits" + where
                + " ORDER BY seq", params):
            self.counts["commits"] += 1
            seq = int(seq)
            key = f"{scope}/{commit_id}"
            if run_id is None:
                if not per_commit.get(seq):
                    self.problems.append(Problem(
                        table="commits", reason="commit_events", row=key, scope=scope,
                        message=f"commit {commit_id!r} (seq {seq}) of scope {scope!r} owns "
                                "no events"))
                continue
            run_owned = self.run_owned.get((seq, str(run_id)), (int(first), 0))
            if run_owned != (int(first), int(count)):
                self.problems.append(Problem(
                    table="commits", reason="commit_events", row=key, scope=scope,
                    run_id=str(run_id), position=int(first),
                    message=f"commit {commit_id!r} (seq {seq}) of run {run_id!r} says it "
                            f"appended {count} events from {first}, the events say "
                            f"{run_owned[1]} from {run_owned[0]}"))


def _report(target: str, backend: str, walk: _Walk | None,
            problems: Iterable[Problem] = ()) -> CheckReport:
    found = tuple(problems) + (tuple(walk.problems) if walk is not None else ())
    counts = walk.counts if walk is not None else {}
    return CheckReport(target=target, backend=backend, problems=found, **counts)


def check_sqlite(path: str, *, scope: str | None = None) -> CheckReport:
    """Check the SQLite store at *path* (a file, or a store directory holding
    ``runs.sqlite3``) without writing to it.

    Raises:
        StoreMissingError: nothing exists at *path* (nothing is created).
    """
    from ._sqlite_schema import (
        SQLITE_ERRORS,
        check_header,
        check_structure,
        connect,
        is_damage,
    )

    if os.path.isdir(path):
        path = os.path.join(path, "runs.sqlite3")
    if not os.path.lexists(path):
        raise StoreMissingError(f"there is no store at {path!r}", path=path)
    try:
        check_header(path)
    except CorruptStoreError as exc:
        return _report(path, "sqlite", None, [_problem_of(exc, "file")])
    try:
        # A reader like the store's own (``query_only``): closing it as the last
        # connection removes an empty ``-wal`` again; ``mode=ro`` would leave one behind.
        conn = connect(path, readonly=True)
    except SQLITE_ERRORS as exc:
        return _report(path, "sqlite", None, [Problem(table="file", reason="sqlite",
                                                      message=f"{path}: {exc}")])
    walk: _Walk | None = None
    try:
        try:
            check_structure(conn, path)
            mode = conn.execute("PRAGMA journal_mode").fetchone()
            if mode is None or str(mode[0]).lower() != "wal":
                return _report(path, "sqlite", None, [Problem(
                    table="file", reason="not_wal",
                    message=f"{path}: the store is not in WAL mode (got {mode!r})")])
            bad = [str(r[0]) for r in conn.execute("PRAGMA integrity_check").fetchall()]
            if bad != ["ok"]:
                return _report(path, "sqlite", None, [Problem(
                    table="file", reason="integrity", message=f"{path}: integrity_check: "
                    + "; ".join(bad[:5]))])
            conn.execute("BEGIN")
            walk = _Walk(conn, "?", scope)
            walk.run()
        except (CorruptStoreError, SchemaVersionError) as exc:
            return _report(path, "sqlite", walk, [_problem_of(exc, "file")])
        except SQLITE_ERRORS as exc:
            if not is_damage(exc):
                raise
            return _report(path, "sqlite", walk, [Problem(
                table="file", reason="sqlite", message=f"{path}: the database is damaged: "
                f"{exc}")])
    finally:
        conn.close()
    return _report(path, "sqlite", walk)


def check_postgres(dsn: str, *, scope: str | None = None) -> CheckReport:
    """Check the PostgreSQL store at *dsn* in one ``REPEATABLE READ READ ONLY``
    transaction (nothing is written).

    Raises:
        StoreMissingError: the connection's schema holds none of a store's tables (a
            schema with some of them is damaged: ``missing_table`` problems).
        StoreUnreachableError: see :func:`connect_postgres`.
    """
    target = redact_dsn(dsn)
    with connect_postgres(dsn) as conn:  # first: it says when psycopg is not installed
        import psycopg

        from ._pg_schema import SCHEMA_VERSION, TABLES, is_damage

        conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ READ ONLY")
        row = conn.execute("SELECT current_schema()").fetchone()
        schema = row[0] if row is not None else None
        if schema is None:
            return _report(target, "postgres", None, [Problem(
                table="schema", reason="no_schema",
                message="no schema of the connection's search_path exists")])
        tables = {str(r[0]) for r in conn.execute(
            "SELECT tablename FROM pg_tables WHERE schemaname = %s", (schema,))}
        missing = [t for t in TABLES if t not in tables]
        if len(missing) == len(TABLES):  # no table of a store: none was ever made here
            raise StoreMissingError(f"there is no store in {target} (schema {schema!r} has "
                                    "none of a store's tables)", path=target)
        if missing:
            return _report(target, "postgres", None, [Problem(
                table=t, reason="missing_table",
                message=f"schema {schema!r}: the table {t!r} is missing") for t in missing])
        got = conn.execute("SELECT value FROM runx_meta WHERE key = 'schema_version'"
                           ).fetchone()
        if got is None or got[0] != str(SCHEMA_VERSION):
            return _report(target, "postgres", None, [Problem(
                table="runx_meta", reason="schema_version", row="schema_version",
                message=f"schema {schema!r}: schema version {got and got[0]!r}; this build "
                        f"reads {SCHEMA_VERSION}")])
        walk = _Walk(conn, "%s", scope)
        try:
            walk.run()
        except psycopg.Error as exc:
            if not is_damage(exc):
                raise
            return _report(target, "postgres", walk, [Problem(
                table="schema", reason="postgres", message=f"the store is damaged: {exc}")])
        return _report(target, "postgres", walk)


#: The libpq connection parameters whose value is a secret, masked wherever a DSN is
#: printed: those libpq itself marks as password fields (``dispchar`` ``"*"``: password,
#: sslpassword, oauth_client_secret in libpq 18), and the SCRAM keys (libpq 18's
#: scram_client_key / scram_server_key: each authenticates like the password; libpq only
#: hides them as debug options). File *paths* (passfile, sslkey, sslcert, sslrootcert,
#: sslcrl, sslkeylogfile) are not secrets: they stay readable, they help diagnose.
SECRET_PARAMETERS = frozenset({"password", "sslpassword", "oauth_client_secret",
                               "scram_client_key", "scram_server_key"})


def secret_parameters() -> frozenset[str]:
    """:data:`SECRET_PARAMETERS` plus every option the installed libpq marks as a
    password field (so a secret a newer libpq adds is masked too)."""
    try:
        from psycopg import pq

        marked = {o.keyword.decode() for o in pq.Conninfo.get_defaults()
                  if o.dispchar == b"*"}
    except Exception:  # no psycopg / libpq: the fixed list
        marked = set()
    return SECRET_PARAMETERS | marked


def dsn_secrets(dsn: str) -> tuple[str, ...]:
    """The secret values of *dsn* (decoded: as libpq reads them from a URI, a quoted or
    a percent-encoded value), longest first; ``()`` when it does not parse. For masking
    a driver message that might echo one."""
    try:
        from psycopg.conninfo import conninfo_to_dict

        params = conninfo_to_dict(dsn)
    except Exception:
        return ()
    secret = secret_parameters()
    values = {str(v) for k, v in params.items() if k in secret and v not in (None, "")}
    return tuple(sorted(values, key=len, reverse=True))


def mask_secrets(text: str, dsn: str) -> str:
    """*text* (a driver's message) with every secret value of *dsn* replaced by ``***``."""
    for value in dsn_secrets(dsn):
        text = text.replace(value, "***")
    return text


def redact_dsn(dsn: str) -> str:
    """*dsn* (a libpq conninfo or a ``postgresql://`` URL) as a conninfo string with every
    secret parameter (:func:`secret_parameters`: password, sslpassword, ...) replaced by
    ``***``; ``<dsn>`` when it does not parse. Every form libpq accepts is covered (URI
    query or userinfo, key=value, quoted, percent-encoded): the DSN is parsed by libpq and
    rebuilt. What is printed of a DSN (``store check``, ``runs``, ``check --log``)."""
    try:
        from psycopg.conninfo import conninfo_to_dict, make_conninfo

        params = conninfo_to_dict(dsn)
    except Exception:
        return "<dsn>"
    secret = secret_parameters()
    for key in params:
        if key in secret:
            params[key] = "***"
    return make_conninfo(**{k: str(v) for k, v in params.items()})


def connect_postgres(dsn: str, *, connect_timeout: int = CONNECT_TIMEOUT,
                     **kwargs: Any) -> Any:
    """One ``psycopg.connect(dsn)`` that fails fast and typed: libpq's ``connect_timeout``
    is *connect_timeout* seconds (default :data:`CONNECT_TIMEOUT`) unless *dsn* sets one;
    *kwargs* go to ``psycopg.connect``.

    Raises:
        StoreUnreachableError: see its docstring (the driver's error is ``__cause__``
            except for a DSN that does not parse, whose message may quote the password).
    """
    target = redact_dsn(dsn)
    try:
        import psycopg
        from psycopg.conninfo import conninfo_to_dict
    except ModuleNotFoundError as exc:
        raise StoreUnreachableError(
            f"{target} is a PostgreSQL DSN, but {exc.name} is not installed "
            "(pip install 'runx-actors[postgres]')", target=target,
            reason="no_driver",
            hint=REACH_HINTS["no_driver"]) from None
    try:
        params = conninfo_to_dict(dsn)
    except psycopg.Error:
        params = None
    if params is None:
        raise StoreUnreachableError(  # libpq's message may quote a piece of the password
            "the PostgreSQL DSN does not parse (a libpq key=value string or a "
            "postgresql:// URL)", target=target, reason="bad_dsn",
            hint=REACH_HINTS["bad_dsn"]) from None
    if "connect_timeout" not in params:
        kwargs["connect_timeout"] = connect_timeout
    try:
        return psycopg.connect(dsn, **kwargs)
    except psycopg.Error as exc:
        detail = " ".join(mask_secrets(str(exc), dsn).split())
        raise StoreUnreachableError(f"cannot reach the PostgreSQL store {target}: {detail}",
                                    target=target, reason="unreachable",
            hint=REACH_HINTS["unreachable"]) from exc


def check_store(target: str, *, scope: str | None = None) -> CheckReport:
    """Check the store *target*: a PostgreSQL DSN (see :func:`is_dsn`) or a SQLite path.

    Raises:
        StoreMissingError: a SQLite path where nothing exists, or a PostgreSQL schema
            without a store's tables.
        StoreUnreachableError: the PostgreSQL server cannot be reached (or the DSN does
            not parse, or psycopg is not installed).
    """
    if is_dsn(target):
        return check_postgres(target, scope=scope)
    return check_sqlite(target, scope=scope)
