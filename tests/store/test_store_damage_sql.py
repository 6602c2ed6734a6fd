"""Damage detection on both SQL stores (RUN-STO-2 … RUN-STO-5), and a hypothesis fuzz of
corrupted SQLite stores (issue 12 deliverables 3 and 6).

Each test builds the same small store through the store API (two Runs with frozen input
bodies, several commits, a foreign stream), damages it with SQL, and asserts that
``record()`` / ``open()`` raise a typed error naming table, Run and position, that
``check_store`` reports it, and that nothing was written (the SQLite file's bytes, or
every PostgreSQL table's rows, are unchanged).
"""

from __future__ import annotations

import hashlib
import shutil
import sqlite3
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runx_actors.protocol.canonical import typed_envelope
from runx_actors.protocol.errors import (
    CorruptLogError,
    CorruptRecordError,
    CorruptStoreError,
    RunNotFoundError,
    SchemaVersionError,
)
from runx_actors.protocol.values import AgentInput, NewRun
from runx_actors.store._check import check_store
from runx_actors.store._verify import verify_run
from runx_actors.store.base import ForeignEvent
from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing import builders as b

SCOPE = "s"
TEXTS = {"in-1": "hello", "in-2": "world", "in-3": "again"}
TYPED = (CorruptStoreError, SchemaVersionError, CorruptLogError)


def _input(input_id: str) -> tuple[AgentInput, bytes]:
    text = TEXTS[input_id]
    return AgentInput.text(input_id, text), typed_envelope("agent_input", {"text": text})


async def build(store: Any) -> None:
    """run-1 (created with in-1, then in-2 and in-3 in two commits), run-2, a foreign
    stream; every input body frozen."""
    w = await store.open(SCOPE)
    for i in TEXTS:
        item, body = _input(i)
        await store.frozen.put(item.digest, body)
    one, _ = _input("in-1")
    await w.create_run(NewRun("run-1"), [one], commit_id="create:run-1")
    await w.create_run(NewRun("run-2"), [_input("in-2")[0]], commit_id="create:run-2")
    for i in ("in-2", "in-3"):
        state = (await w.run_store().load("run-1")).state
        cid, cmd = b.accept_input(state, _input(i)[0])
        from runx_actors.protocol.commit import CommitRequest, envelope

        pos = (await w.run_store().load("run-1")).position
        await w.run_store().commit(CommitRequest(pos, envelope("run-1", cid, cmd)))
    await w.append_events("note-1", [ForeignEvent("app/notes", "app/note", {"n": 1})])
    await w.append_events("note-2", [ForeignEvent("app/notes", "app/note", {"n": 2})])


# -- the two backends ---------------------------------------------------------------------


class Backend:
    """Opens the store, runs SQL against it and snapshots its bytes or rows."""

    name = ""

    def open(self) -> Any:
        raise NotImplementedError

    def sql(self, *statements: str) -> None:
        raise NotImplementedError

    def snapshot(self) -> Any:
        raise NotImplementedError

    @property
    def target(self) -> str:
        raise NotImplementedError


class SqliteBackend(Backend):
    name = "sqlite"

    def __init__(self, path: Path) -> None:
        self.path = path

    def open(self) -> Any:
        return open_sqlite_store(self.path)

    def sql(self, *statements: str) -> None:
        conn = sqlite3.connect(self.path, isolation_level=None)
        try:
            for s in statements:
                conn.execute(s)
        finally:
            conn.close()

    def snapshot(self) -> Any:
        wal = Path(str(self.path) + "-wal")
        return (hashlib.sha256(self.path.read_bytes()).hexdigest(),
                wal.read_bytes() if wal.exists() else None)

    @property
    def target(self) -> str:
        return str(self.path)


class PostgresBackend(Backend):
    name = "postgres"

    def __init__(self, dsn: str) -> None:
        self.dsn = dsn

    def open(self) -> Any:
        from runx_actors.store.postgres import open_postgres_store

        return open_postgres_store(self.dsn)

    def sql(self, *statements: str) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for s in statements:
                conn.execute(s.replace("CAST(data AS TEXT)", "encode(data, 'escape')"))  # type: ignore[arg-type]

    def snapshot(self) -> Any:
        import psycopg

        out = {}
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            tables = [r[0] for r in conn.execute(
                "SELECT tablename FROM pg_tables WHERE schemaname = current_schema() "
                "ORDER BY 1")]
            for t in tables:
                out[t] = sorted(map(repr, conn.execute(f"SELECT * FROM {t}").fetchall()))  # type: ignore[arg-type]
        return out

    @property
    def target(self) -> str:
        return self.dsn


@pytest.fixture(params=["sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Backend:
    if request.param == "sqlite":
        return SqliteBackend(tmp_path / "store.sqlite3")
    new_schema = request.getfixturevalue("postgres_schema")
    return PostgresBackend(new_schema())


@asynccontextmanager
async def built(backend: Backend) -> AsyncIterator[Backend]:
    async with backend.open() as store:
        await build(store)
    yield backend


async def _open_and(backend: Backend, fn: Callable[[Any], Awaitable[Any]]) -> Any:
    """``fn(store)`` on an open store; a lone error out of the PostgreSQL store's nursery
    is re-raised unwrapped."""
    try:
        async with backend.open() as store:
            return await fn(store)
    except BaseExceptionGroup as group:
        leaf: BaseException = group
        while isinstance(leaf, BaseExceptionGroup) and len(leaf.exceptions) == 1:
            leaf = leaf.exceptions[0]
        if leaf is group:
            raise
        raise leaf from None


async def _record(backend: Backend, run_id: str = "run-1") -> Any:
    async def go(store: Any) -> Any:
        reader = await store.reader(SCOPE)
        return await reader.record(run_id)
    return await _open_and(backend, go)


# -- the damages ---------------------------------------------------------------------------

ROW_DAMAGE = {
    # name: (SQL, table, run, position)
    "commit_row_deleted": (["DELETE FROM commits WHERE commit_id = 'create:run-1'"],
                           "commits", "run-1", 0),
    "last_fact_deleted": (["DELETE FROM events WHERE stream = 'run/run-1' AND idx = "
                           "(SELECT MAX(idx) FROM events WHERE stream = 'run/run-1')"],
                          "events", "run-1", 3),
    "middle_fact_deleted_and_renumbered": (
        ["DELETE FROM events WHERE stream = 'run/run-1' AND idx = 1",
         "UPDATE events SET idx = idx - 1 WHERE stream = 'run/run-1' AND idx > 1",
         "UPDATE runs SET head = head - 1 WHERE run_id = 'run-1'"], "events", "run-1", 1),
    "fact_edited_decodable": (
        ["UPDATE events SET data = CAST(replace(CAST(data AS TEXT), 'in-1', 'in-9') AS BLOB) "
         "WHERE stream = 'run/run-1' AND idx = 1"], "events", "run-1", 1),
    "rows_swapped_between_runs": (
        ["UPDATE events SET stream = 'run/run-x' WHERE stream = 'run/run-2' AND idx = 1",
         "UPDATE events SET stream = 'run/run-2' WHERE stream = 'run/run-1' AND idx = 1",
         "UPDATE events SET stream = 'run/run-1' WHERE stream = 'run/run-x'"],
        "events", "run-1", 1),
    "commit_id_edited": (["UPDATE commits SET commit_id = 'create:run-9' WHERE commit_id = "
                          "'create:run-1'"], "events", "run-1", 0),
}


def _pg_sql(statements: list[str]) -> list[str]:
    return [s.replace("CAST(replace(CAST(data AS TEXT), 'in-1', 'in-9') AS BLOB)",
                      "convert_to(replace(convert_from(data, 'UTF8'), 'in-1', 'in-9'), "
                      "'UTF8')") for s in statements]


@pytest.mark.parametrize("damage", sorted(ROW_DAMAGE))
async def test_record_and_check_name_the_damaged_row(backend: Backend, damage: str) -> None:
    statements, table, run_id, position = ROW_DAMAGE[damage]
    async with built(backend):
        backend.sql(*(_pg_sql(statements) if backend.name == "postgres" else statements))
        before = backend.snapshot()
        with pytest.raises(CorruptRecordError) as info:
            await _record(backend, run_id)
        err = info.value
        assert (err.table, err.run_id, err.position) == (table, run_id, position), err  # type: ignore[attr-defined]
        report = await trio.to_thread.run_sync(check_store, backend.target)
        assert not report.ok
        assert any(p.run_id == run_id for p in report.problems), report.problems
        assert backend.snapshot() == before


async def test_clean_store_checks_ok(backend: Backend) -> None:
    async with built(backend):
        before = backend.snapshot()
        report = await trio.to_thread.run_sync(check_store, backend.target)
        assert report.ok, report.problems
        assert (report.runs, report.streams, report.commits) == (2, 3, 6)
        assert report.events == 4 + 2 + 2
        assert backend.snapshot() == before
        scoped = await trio.to_thread.run_sync(
            lambda: check_store(backend.target, scope="nope"))
        assert scoped.ok and scoped.runs == 0


@pytest.mark.parametrize("statements, table", [
    (["UPDATE scopes SET epoch = -5"], "scopes"),
    (["UPDATE scopes SET epoch = 0"], "scopes"),
    (["DROP TABLE frozen"], "frozen"),
    (["DROP TABLE commits"], "commits"),
])
async def test_open_refuses_a_damaged_store(backend: Backend, statements: list[str],
                                            table: str) -> None:
    async with built(backend):
        backend.sql(*statements)
        before = backend.snapshot()
        with pytest.raises(CorruptStoreError) as info:
            await _open_and(backend, lambda store: store.open(SCOPE))
        assert info.value.table == table  # type: ignore[attr-defined]
        report = await trio.to_thread.run_sync(check_store, backend.target)
        assert [p.table for p in report.problems] == [table]
        assert backend.snapshot() == before


async def test_epoch_behind_its_commits_is_refused(backend: Backend) -> None:
    async with built(backend):
        backend.sql("UPDATE commits SET epoch = 7 WHERE commit_id = 'note-2'")
        before = backend.snapshot()
        with pytest.raises(CorruptStoreError) as info:
            await _open_and(backend, lambda store: store.open(SCOPE))
        assert (info.value.table, info.value.reason) == ("scopes", "epoch_behind")  # type: ignore[attr-defined]
        assert backend.snapshot() == before
        report = await trio.to_thread.run_sync(check_store, backend.target)
        assert [p.reason for p in report.problems] == ["epoch_behind"]


async def test_missing_and_edited_bodies(backend: Backend) -> None:
    item, _ = _input("in-3")
    async with built(backend):
        backend.sql(f"DELETE FROM frozen WHERE digest = '{item.digest}'")
        async def go(store: Any) -> None:
            reader = await store.reader(SCOPE)
            with pytest.raises(CorruptRecordError) as info:
                await verify_run(reader, store.frozen, "run-1")
            err = info.value
            assert (err.table, err.row, err.run_id, err.position) == (  # type: ignore[attr-defined]
                "frozen", item.digest, "run-1", 3)
            await verify_run(reader, store.frozen, "run-2")
        await _open_and(backend, go)
        report = await trio.to_thread.run_sync(check_store, backend.target)
        assert [(p.table, p.reason, p.row) for p in report.problems] == [
            ("frozen", "missing", item.digest)]


async def test_put_refuses_a_damaged_body_under_its_digest(backend: Backend) -> None:
    """``frozen.put`` of a body whose stored copy is damaged raises CorruptRecordError and
    writes nothing, instead of keeping the damage behind ``ON CONFLICT DO NOTHING``; an
    intact copy makes the put a no-op (RUN-STO-2, RUN-STO-4)."""
    item, body = _input("in-3")
    async with built(backend):
        backend.sql(f"UPDATE frozen SET data = {_bytes_literal(backend, b'{}')} "
                    f"WHERE digest = '{item.digest}'")

        async def go(store: Any) -> None:
            with pytest.raises(CorruptRecordError) as info:
                await store.frozen.put(item.digest, body)
            assert info.value.row == item.digest  # type: ignore[attr-defined]
            other, other_body = _input("in-1")  # intact: put is a no-op, no error
            await store.frozen.put(other.digest, other_body)
            assert await store.frozen.get(other.digest) == other_body

        before = backend.snapshot()
        await _open_and(backend, go)
        if backend.name == "sqlite":  # nothing was written (opening alone writes nothing)
            assert backend.snapshot() == before


def _bytes_literal(backend: Backend, data: bytes) -> str:
    return (f"X'{data.hex()}'" if backend.name == "sqlite"
            else f"'\\x{data.hex()}'::bytea")


async def test_foreign_stream_damage(backend: Backend) -> None:
    async with built(backend):
        backend.sql("DELETE FROM events WHERE stream = 'app/notes' AND idx = 0",
                    "UPDATE events SET idx = 0 WHERE stream = 'app/notes'")
        async def go(store: Any) -> None:
            reader = await store.reader(SCOPE)
            with pytest.raises(CorruptRecordError) as info:
                await reader.read_stream("app/notes")
            assert (info.value.stream, info.value.position) == ("app/notes", 0)  # type: ignore[attr-defined]
        await _open_and(backend, go)


async def test_retried_command_after_index_loss_is_refused(backend: Backend) -> None:
    """A deleted commits row would let a retried command append again: opening the
    scope (which folds its active Runs) now refuses, before the epoch is bumped."""
    async with built(backend):
        backend.sql("DELETE FROM commits WHERE commit_id = 'create:run-2'")
        before = backend.snapshot()
        with pytest.raises(CorruptRecordError) as info:
            await _open_and(backend, lambda store: store.open(SCOPE))
        assert (info.value.table, info.value.run_id) == ("commits", "run-2")  # type: ignore[attr-defined]
        assert backend.snapshot() == before


# -- fuzz: random damage to a SQLite store -----------------------------------------------

_TEMPLATE: dict[str, Path] = {}


async def _template(tmp: Path) -> Path:
    if "path" not in _TEMPLATE:
        path = tmp / "template.sqlite3"
        async with open_sqlite_store(path) as store:
            await build(store)
        _TEMPLATE["path"] = path
    return _TEMPLATE["path"]


_EDITS = st.one_of(
    st.tuples(st.just("flip"), st.integers(0, 10**6), st.integers(1, 255)),
    st.tuples(st.just("delete"), st.sampled_from(
        ["events", "commits", "frozen", "runs", "scopes"]), st.integers(0, 20)),
    st.tuples(st.just("edit"), st.sampled_from(
        ["events.data", "events.chain", "events.type", "events.idx", "events.commit_seq",
         "commits.commit_id", "commits.first_idx", "commits.count", "commits.run_id",
         "frozen.data", "runs.head", "scopes.epoch", "commits.epoch"]),
        st.integers(0, 20), st.integers(-3, 3)),
)


def _apply(path: Path, edit: tuple[Any, ...]) -> bool:
    """Apply one edit; False when it changed nothing."""
    kind = edit[0]
    if kind == "flip":
        data = bytearray(path.read_bytes())
        offset = edit[1] % len(data)
        data[offset] ^= edit[2]
        path.write_bytes(bytes(data))
        return True
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        if kind == "delete":
            table, k = edit[1], edit[2]
            keys = conn.execute(f"SELECT rowid FROM {table}").fetchall() \
                if table in ("commits", "scopes") else None
            if keys is not None:
                if not keys:
                    return False
                return conn.execute(f"DELETE FROM {table} WHERE rowid = ?",
                                    (keys[k % len(keys)][0],)).rowcount > 0
            rows = conn.execute(f"SELECT * FROM {table}").fetchall()
            if not rows:
                return False
            row = rows[k % len(rows)]
            cols = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
            pk = [c[1] for c in conn.execute(f"PRAGMA table_info({table})") if c[5]]
            cond = " AND ".join(f"{c} = ?" for c in pk)
            return conn.execute(f"DELETE FROM {table} WHERE {cond}",
                                [row[cols.index(c)] for c in pk]).rowcount > 0
        column, k, delta = edit[1], edit[2], edit[3]
        table, col = column.split(".")
        cols = [c[1] for c in conn.execute(f"PRAGMA table_info({table})")]
        pk = [c[1] for c in conn.execute(f"PRAGMA table_info({table})") if c[5]]
        rows = conn.execute(f"SELECT * FROM {table}").fetchall()
        if not rows:
            return False
        row = rows[k % len(rows)]
        old = row[cols.index(col)]
        if isinstance(old, bytes):
            new: Any = old[:-1] + bytes([(old[-1] + (delta or 1)) % 256]) if old else b"x"
        elif isinstance(old, int):
            new = old + (delta or 1)
        elif isinstance(old, str):
            new = old + "x" if delta >= 0 else old.upper() if old != old.upper() else old[:-1]
        else:
            new = "x"
        if new == old:
            return False
        cond = " AND ".join(f"{c} = ?" for c in pk)
        try:
            return conn.execute(f"UPDATE {table} SET {col} = ? WHERE {cond}",
                                [new, *[row[cols.index(c)] for c in pk]]).rowcount > 0
        except sqlite3.IntegrityError:
            return False
    except sqlite3.DatabaseError:
        return True  # the file is already too damaged for SQL: still a damage to detect
    finally:
        conn.close()


async def _read_everything(path: Path) -> None:
    async with open_sqlite_store(path) as store:
        reader = await store.reader(SCOPE)
        for run_id in ("run-1", "run-2"):
            await reader.record(run_id)
            await verify_run(reader, store.frozen, run_id)
        await reader.read_stream("app/notes")
        await store.open(SCOPE)


FUZZ_COUNTS = {"tried": 0, "unchanged_noop": 0, "detected": 0}


@settings(suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(edit=_EDITS)
def test_fuzz_corrupted_sqlite_store(tmp_path: Path, edit: tuple[Any, ...]) -> None:
    """Random byte flips, row deletes and edits: a damage the store can see is refused
    with a typed error and leaves the file byte-identical; ``store check`` agrees with the
    store (whatever ``record``/``open`` refuses, the fsck reports too)."""
    template = trio.run(_template, tmp_path)
    path = tmp_path / f"fuzz-{FUZZ_COUNTS['tried']}.sqlite3"
    FUZZ_COUNTS["tried"] += 1
    shutil.copy(template, path)
    if not _apply(path, edit):
        FUZZ_COUNTS["unchanged_noop"] += 1
        return
    before = hashlib.sha256(path.read_bytes()).digest()
    report = check_store(str(path))
    assert hashlib.sha256(path.read_bytes()).digest() == before
    try:
        trio.run(_read_everything, path)
    except (*TYPED, RunNotFoundError) as exc:
        FUZZ_COUNTS["detected"] += 1
        assert hashlib.sha256(path.read_bytes()).digest() == before, \
            f"a refused store was written ({type(exc).__name__}: {exc})"
        assert not report.ok, f"store check missed what {type(exc).__name__} saw: {exc}"
        return
    # Read fine: only a change the store cannot see (a flip in free space, the
    # disposable projection cache) — or the open() above bumped the epoch legitimately.
    if report.ok:
        return
    # check saw damage the reads did not touch: it must name a table
    assert all(p.table for p in report.problems)


async def test_store_check_cli_on_both_backends(backend: Backend) -> None:
    """``runx-actors store check`` exits 0 on the clean store and 3 once a row is edited,
    with the same report as the library, for a SQLite path and a PostgreSQL DSN."""
    import json

    from click.testing import CliRunner

    from runx_actors.cli import main

    def run(*args: str) -> Any:
        return CliRunner().invoke(main, ["store", "check", backend.target, *args])

    async with built(backend):
        clean = await trio.to_thread.run_sync(run, "--json")
        assert clean.exit_code == 0, clean.output
        assert json.loads(clean.stdout)["ok"] is True
        backend.sql("UPDATE runs SET head = 9 WHERE run_id = 'run-2'")
        damaged = await trio.to_thread.run_sync(run, "--json")
        assert damaged.exit_code == 3, damaged.output
        (problem,) = json.loads(damaged.stdout)["problems"]
        assert (problem["table"], problem["run_id"], problem["reason"]) == (
            "events", "run-2", "head")
        text = await trio.to_thread.run_sync(run, "--scope", SCOPE)
        assert text.exit_code == 3 and text.stdout.startswith("damaged: ")
        assert "run=run-2" in text.stdout


def test_store_check_cli_unreachable_server() -> None:
    from click.testing import CliRunner

    from runx_actors.cli import main

    result = CliRunner().invoke(
        main, ["store", "check", "postgresql://runx@127.0.0.1:1/nope?connect_timeout=2"])
    assert result.exit_code == 1, result.output
    assert "cannot reach the PostgreSQL store" in result.stderr  # RUN-CLI-2


async def test_old_schema_version_is_refused_with_a_message(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite3"
    async with open_sqlite_store(path) as store:
        await build(store)
    SqliteBackend(path).sql("PRAGMA user_version = 1")
    before = SqliteBackend(path).snapshot()
    with pytest.raises(SchemaVersionError) as info:
        async with open_sqlite_store(path):
            pass  # pragma: no cover
    assert (info.value.found, info.value.supported) == (1, 2)  # type: ignore[attr-defined]
    assert "older build" in str(info.value)
    assert SqliteBackend(path).snapshot() == before
    report = check_store(str(path))
    assert [p.table for p in report.problems] == ["file"]
