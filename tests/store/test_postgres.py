"""PostgreSQL-specific behaviour: fencing between store instances ("hosts"), replay after a
lost response, group commit under concurrency, corruption, schema, and the runtime end to
end. The server comes from the session fixture in ``conftest.py``; every test works in a
fresh schema. What both SQL stores share is in ``test_sql_stores.py``."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from typing import Any

import pytest
import trio
import trio.testing

try:
    import psycopg
except ImportError:  # pragma: no cover - without the dev extra
    if os.environ.get("CI"):
        raise  # CI must not skip the PostgreSQL tests
    pytest.skip("psycopg is not installed (pip install -e '.[dev]')", allow_module_level=True)

from sql_store_helpers import SCOPE, TIMEOUT
from sql_store_helpers import Gate as _Gate
from sql_store_helpers import commit as _commit
from sql_store_helpers import create as _create

from runx_actors.executors import (
    call_tools,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.protocol.commit import CommitResult, CommitStatus
from runx_actors.protocol.errors import (
    CorruptRecordError,
    OwnershipLostError,
    RunNotFoundError,
    SchemaVersionError,
)
from runx_actors.protocol.values import RunStatus
from runx_actors.runtime import LoopDisposition, open_runtime
from runx_actors.store.base import ForeignEvent
from runx_actors.store.postgres import (
    PostgresStore,
    PostgresWriter,
    open_postgres_store,
)
from runx_actors.testing import builders as b

NewSchema = Callable[[], str]


def _sql(dsn: str, query: str, *params: Any) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        cur = conn.execute(query, params)  # type: ignore[arg-type]
        return cur.fetchall() if cur.description is not None else []


async def _count(dsn: str, table: str) -> int:
    rows = await trio.to_thread.run_sync(_sql, dsn, f"SELECT count(*) FROM {table}")
    return int(rows[0][0])


class _LostResponse(Exception):
    """Stands for a connection that died after the server committed."""


def _lose_response() -> None:
    raise _LostResponse("connection lost after COMMIT")


# -- fencing between two store instances (two pools: two "hosts") ------------------------


async def test_second_host_fences_the_first(postgres_schema: NewSchema) -> None:
    dsn = postgres_schema()
    async with open_postgres_store(dsn) as host_a, open_postgres_store(dsn) as host_b:
        a = await host_a.open(SCOPE)
        await _create(a, "run-1", "in-1")
        stale = await a.run_store().load("run-1")
        commits, events = await _count(dsn, "commits"), await _count(dsn, "events")

        b_writer = await host_b.open(SCOPE)
        assert b_writer.epoch == a.epoch + 1
        assert b_writer.projection() == a.projection()
        with pytest.raises(OwnershipLostError) as lost:
            await _commit(a, "run-1", b.prepare(stale.state, stale.position))
        assert (lost.value.epoch, lost.value.current_epoch) == (  # type: ignore[attr-defined]
            a.epoch, b_writer.epoch)
        # a whole group of the old owner is refused at once
        outcomes: list[object] = []

        async def attempt(coro: Any) -> None:
            try:
                outcomes.append(await coro)
            except OwnershipLostError as exc:
                outcomes.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(attempt, _create(a, "run-2"))
            nursery.start_soon(attempt, a.append_events(
                "evt-1", [ForeignEvent("app/notes", "app/note", 1)]))
            nursery.start_soon(attempt, _commit(
                a, "run-1", b.accept_input(stale.state, "in-2"), base=0))
        assert len(outcomes) == 3
        assert all(isinstance(o, OwnershipLostError) for o in outcomes)
        assert len({id(o) for o in outcomes}) == 3  # each caller raises its own error
        # nothing was written; the old owner still reads
        assert (await _count(dsn, "commits"), await _count(dsn, "events")) == (commits, events)
        assert await a.record("run-1") == stale
        assert await a.run_store().load("run-1") == stale
        with pytest.raises(RunNotFoundError):
            await b_writer.record("run-2")
        # the new owner uses the ids the fenced commits could not
        prepared = await _commit(b_writer, "run-1", b.prepare(stale.state, stale.position))
        assert prepared.status is CommitStatus.ACCEPTED
        assert (await _create(b_writer, "run-2")).status is CommitStatus.ACCEPTED
        assert await host_a.scope_epoch(SCOPE) == b_writer.epoch


async def test_open_waits_for_a_group_in_flight(postgres_schema: NewSchema) -> None:
    """The epoch bump takes the scope's row lock: a group of the old owner that holds it
    commits first and is in the new owner's projection; the next one is fenced."""
    dsn = postgres_schema()
    async with open_postgres_store(dsn) as host_a, open_postgres_store(dsn) as host_b:
        a = await host_a.open(SCOPE)
        await _create(a, "run-1", "in-1")
        snap = await a.run_store().load("run-1")
        gate = _Gate()
        host_a.set_before_commit_hook(gate)
        results: dict[str, Any] = {}

        async def old_commit() -> None:
            results["old"] = await _commit(a, "run-1", b.accept_input(snap.state, "in-2"))

        async def takeover() -> None:
            results["new"] = await host_b.open(SCOPE)

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(old_commit)
                await gate.wait_reached()
                nursery.start_soon(takeover)
                await trio.sleep(0.3)  # the bump waits on the row lock
                assert "new" not in results
                host_a.set_before_commit_hook(None)
                gate.release.set()
        assert results["old"].status is CommitStatus.ACCEPTED
        new: PostgresWriter = results["new"]
        assert new.projection()["run-1"] == results["old"].snapshot
        with pytest.raises(OwnershipLostError):
            await _commit(a, "run-1", b.accept_input(results["old"].snapshot.state, "in-3"))


# -- unknown outcomes and replay ------------------------------------------------------------


async def test_replay_after_lost_response(postgres_schema: NewSchema) -> None:
    """COMMIT succeeded but the answer was lost: the caller gets the error, the projection
    is not advanced, and the replay of the same id answers ALREADY_APPLIED with the
    original facts and today's snapshot; later commits build on it."""
    async with open_postgres_store(postgres_schema()) as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        snap = await w.run_store().load("run-1")
        built = b.accept_input(snap.state, "in-2")
        store.set_after_commit_hook(_lose_response)
        with pytest.raises(_LostResponse):
            await _commit(w, "run-1", built)
        with pytest.raises(_LostResponse):
            await _create(w, "run-2", "in-1")
        store.set_after_commit_hook(None)
        assert store.statistics().failed_transactions == 2
        assert w.projection()["run-1"] == snap  # not published: the outcome was unknown
        recorded = await w.record("run-1")
        assert recorded.position == snap.position + 1  # ... but it was committed

        replay = await _commit(w, "run-1", built, base=snap.position)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert [f.WIRE_NAME for f in replay.facts] == ["input_accepted"]
        assert replay.snapshot == recorded == w.projection()["run-1"]
        created = await _create(w, "run-2", "in-1")
        assert created.status is CommitStatus.ALREADY_APPLIED
        assert w.projection()["run-2"] == created.snapshot
        after = await _commit(w, "run-1", b.accept_input(replay.snapshot.state, "in-3"))
        assert after.status is CommitStatus.ACCEPTED
        assert after.snapshot == await w.record("run-1")


async def test_replay_on_another_host_after_crash(postgres_schema: NewSchema) -> None:
    """Host A commits and dies before answering; host B takes the scope over and the
    same command id replays there."""
    dsn = postgres_schema()
    async with open_postgres_store(dsn) as host_a:
        a = await host_a.open(SCOPE)
        await _create(a, "run-1", "in-1")
        snap = await a.run_store().load("run-1")
        built = b.prepare(snap.state, snap.position)
        first = await _commit(a, "run-1", built)
    async with open_postgres_store(dsn) as host_b:
        new = await host_b.open(SCOPE)
        replay = await _commit(new, "run-1", built, base=snap.position)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == first.facts and replay.snapshot == first.snapshot


# -- concurrency ----------------------------------------------------------------------------


async def test_concurrent_commits_of_many_runs(postgres_schema: NewSchema) -> None:
    """60 Runs in two scopes commit concurrently: all are accepted, each scope's commits
    are group-committed, and the projection equals the log."""
    async with open_postgres_store(postgres_schema(), max_size=4) as store:
        writers = [await store.open("s1"), await store.open("s2")]
        runs = [(w, f"run-{i}") for w in writers for i in range(30)]
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for w, run_id in runs:
                    nursery.start_soon(_create, w, run_id, "in-1")
        before = store.statistics()
        results: dict[tuple[str, str], CommitResult] = {}

        async def drive(w: PostgresWriter, run_id: str) -> None:
            for n in range(3):
                state = (await w.run_store().load(run_id)).state
                result = await _commit(w, run_id, b.accept_input(state, f"x{n}"))
                assert result.status is CommitStatus.ACCEPTED
                results[w.scope, run_id] = result

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for w, run_id in runs:
                    nursery.start_soon(drive, w, run_id)
        after = store.statistics()
        assert after.accepted - before.accepted == 180
        assert after.transactions - before.transactions < 180  # groups of several
        assert after.largest_group > 1
        for w in writers:
            for run_id in (r for ww, r in runs if ww is w):
                record = await w.record(run_id)
                assert record.position == 4
                assert record == w.projection()[run_id] == results[w.scope, run_id].snapshot


# -- corruption, schema, close --------------------------------------------------------------


async def test_corrupt_row_is_named(postgres_schema: NewSchema) -> None:
    dsn = postgres_schema()
    async with open_postgres_store(dsn) as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1", "in-2")
        await _create(w, "run-2", "in-1")
        await w.append_events("evt-1", [ForeignEvent("app/notes", "app/note", {"n": 1})])
    await trio.to_thread.run_sync(
        _sql, dsn, "UPDATE events SET data = '\\x7631'::bytea "
        "WHERE stream = 'run/run-1' AND idx = 2")
    await trio.to_thread.run_sync(
        _sql, dsn, "UPDATE events SET type = 'twilight/run/run_ended' "
        "WHERE stream = 'run/run-2' AND idx = 1")
    await trio.to_thread.run_sync(
        _sql, dsn, "UPDATE events SET data = '\\x00'::bytea WHERE stream = 'app/notes'")
    async with open_postgres_store(dsn) as store:
        reader = await store.reader(SCOPE)
        with pytest.raises(CorruptRecordError) as err:
            await reader.record("run-1")
        assert (err.value.run_id, err.value.position) == ("run-1", 2)  # type: ignore[attr-defined]
        with pytest.raises(CorruptRecordError) as err:
            await reader.run_facts("run-2")
        assert (err.value.run_id, err.value.position) == ("run-2", 1)  # type: ignore[attr-defined]
        with pytest.raises(CorruptRecordError) as err:
            await reader.read_stream("app/notes")
        assert (err.value.stream, err.value.position) == ("app/notes", 0)  # type: ignore[attr-defined]


async def test_schema_is_checked(postgres_schema: NewSchema) -> None:
    dsn = postgres_schema()
    async with open_postgres_store(dsn) as store:
        await store.open(SCOPE)
    await trio.to_thread.run_sync(
        _sql, dsn, "UPDATE runx_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(SchemaVersionError) as err:
        async with open_postgres_store(dsn):
            pass  # pragma: no cover
    assert err.value.found == 99  # type: ignore[attr-defined]

    other = postgres_schema()
    await trio.to_thread.run_sync(_sql, other, "CREATE TABLE notes (x int)")
    with pytest.raises(SchemaVersionError):
        async with open_postgres_store(other):
            pass  # pragma: no cover


def _free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


@pytest.mark.parametrize("broken", ["refused port", "missing database", "bad dsn",
                                    "lost after the probe"])
async def test_an_unreachable_database_is_typed_and_masked(
        postgres_dsn: str, monkeypatch: Any, broken: str) -> None:
    """RUN-CLI-2 for the API: ``open_postgres_store`` raises the CLI's
    StoreUnreachableError (never psycopg_pool.PoolTimeout or a psycopg error), and its
    message and ``target`` never hold the password."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    import runx_actors.store.postgres as pg
    from runx_actors.store.postgres import StoreUnreachableError

    params = {**conninfo_to_dict(postgres_dsn), "password": "s3cret"}
    refused = make_conninfo(**{**params, "host": "127.0.0.1", "port": _free_port()})
    dsn = {"refused port": refused,
           "missing database": make_conninfo(**{**params, "dbname": "missing_db"}),
           "bad dsn": "host=127.0.0.1 password='s3cret",
           "lost after the probe": make_conninfo(**params)}[broken]
    if broken == "lost after the probe":  # the server answers the probe, then is gone
        real = pg.make_pool
        monkeypatch.setattr(pg, "make_pool", lambda _dsn, **kw: real(refused, **kw))
    with pytest.raises(StoreUnreachableError) as err:
        async with open_postgres_store(dsn, timeout=1):
            pass  # pragma: no cover
    exc = err.value
    assert exc.reason == ("bad_dsn" if broken == "bad dsn" else "unreachable")
    assert "s3cret" not in str(exc) and "s3cret" not in exc.target  # type: ignore[attr-defined]
    assert exc.hint  # type: ignore[attr-defined]
    if broken != "bad dsn":
        assert "password=***" in exc.target  # type: ignore[attr-defined]
        assert isinstance(exc.__cause__, Exception)
    if broken == "missing database":
        assert "missing_db" in str(exc)


async def test_closed_store_refuses(postgres_schema: NewSchema) -> None:
    async with open_postgres_store(postgres_schema()) as store:
        w = await store.open(SCOPE)
    assert isinstance(store, PostgresStore)
    with pytest.raises(trio.ClosedResourceError):
        await _create(w, "run-1")
    with pytest.raises(trio.ClosedResourceError):
        await store.open(SCOPE)


# -- the runtime end to end -----------------------------------------------------------------


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


ADDER = python_tool(add, ref="math.add", name="add", parameters={
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
})


class TinyModel:
    """The quickstart's deterministic model: asks for ``add``, then answers."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: Any) -> Any:
        self.calls += 1
        messages = json.loads(request.body)["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        if not results:
            return call_tools(tool_call("add", {"a": 2, "b": 3}))
        return reply(f"2 + 3 = {results[-1]['content']:g}")


async def test_runtime_end_to_end(postgres_schema: NewSchema) -> None:
    """The quickstart's Run, driven through ``open_runtime`` on the PostgreSQL store; a
    second runtime (a restart, on a new pool) finds it finished and calls nothing."""
    dsn = postgres_schema()
    facts = []
    for attempt in range(2):
        model = TinyModel()
        with trio.fail_after(TIMEOUT):
            async with open_postgres_store(dsn) as store, \
                    open_local_executor(tools=[ADDER], models={"tiny": model}) as executor, \
                    open_runtime(store, executor, scope="quickstart", model="tiny",
                                 tools=[ADDER]) as rt:
                await rt.create_run("run-1", ["What is 2 + 3?"])
                result = await rt.drive("run-1")
                assert result.disposition is LoopDisposition.FINISHED
                assert result.result.status is RunStatus.COMPLETED
                facts.append([f.WIRE_NAME for f in await rt.writer.run_facts("run-1")])
        assert model.calls == (2 if attempt == 0 else 0)
    assert facts[0] == facts[1]
    assert facts[0][0] == "run_created" and facts[0][-1] == "run_ended"
    assert "tool_call_completed" in facts[0]


async def test_body_error_leaves_the_store_unwrapped(postgres_schema: NewSchema) -> None:
    """RUN-ACT-10: the block's own error comes out of open_postgres_store as itself; a
    failure of a task in the store's nursery comes out in an ExceptionGroup."""
    dsn = postgres_schema()
    error = ValueError("from the body")
    with pytest.raises(ValueError) as caught:
        async with open_postgres_store(dsn):
            raise error
    assert caught.value is error

    async def fail() -> None:
        raise KeyError("background")

    with pytest.raises(BaseExceptionGroup) as group:
        async with open_postgres_store(dsn) as store:
            store._nursery.start_soon(fail)
            await trio.sleep_forever()
    assert group.group_contains(KeyError)
