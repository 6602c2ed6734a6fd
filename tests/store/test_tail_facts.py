"""``SessionReader.tail_facts`` (the last facts of a Run, read in O(count)) and the answer
read that uses it (APP-RES-1).

Every store: the tail equals the end of ``run_facts`` for every count, an unknown Run is
RunNotFoundError, a count below 1 is refused. SQL stores: damage inside the tail (an
edited chain, a deleted row, the last row deleted) is CorruptRecordError, as
``run_facts`` reports it. ``read_answer`` finds the last completed model step whether it
is in the tail or further back (then it reads the whole log), compared with an answer the
test finds by scanning the facts itself.
"""

from __future__ import annotations

import sqlite3
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from sql_store_helpers import commit, create

from runx_actors.protocol import facts as F
from runx_actors.protocol.errors import CorruptRecordError, RunNotFoundError
from runx_actors.runtime._app import read_answer
from runx_actors.store.base import run_stream
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing import builders as b

SCOPE = "s"
RUN = "run-1"


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path
            ) -> tuple[str, Callable[[], AbstractAsyncContextManager[Any]],
                       Callable[[str], None]]:
    """(kind, open the store, run raw SQL on it)."""
    if request.param == "memory":
        @asynccontextmanager
        async def memory() -> AsyncIterator[MemoryStore]:
            yield MemoryStore()

        def no_sql(query: str) -> None:
            raise AssertionError("the memory store has no SQL")

        return "memory", memory, no_sql
    if request.param == "postgres":
        dsn = request.getfixturevalue("postgres_schema")()
        from runx_actors.store.postgres import open_postgres_store

        def pg(query: str) -> None:
            import psycopg

            with psycopg.connect(dsn, autocommit=True) as conn:
                assert conn.execute(query).rowcount == 1, query  # type: ignore[arg-type]

        return "postgres", lambda: open_postgres_store(dsn), pg
    path = tmp_path / "db"

    def lite(query: str) -> None:
        with sqlite3.connect(str(path), isolation_level=None) as conn:
            assert conn.execute(query).rowcount == 1, query

    return "sqlite", lambda: open_sqlite_store(path), lite


async def _state(w: Any) -> Any:
    return (await w.run_store().load(RUN)).state


async def _life(w: Any, *, tools_after: bool) -> None:
    """A Run with a completed model step; with *tools_after*, three tool calls started
    and settled after it (more than ``read_answer``'s tail), else it ends there."""
    await create(w, RUN, "in-1")
    await commit(w, RUN, b.prepare(await _state(w), (await w.run_store().load(RUN)).position,
                                   tools=("noop",)))
    await commit(w, RUN, b.start_model(await _state(w)))
    calls = [("noop", "{}"), ("noop", "{}"), ("noop", "{}")] if tools_after else []
    await commit(w, RUN, b.model_result(await _state(w), text="the answer",
                                        tool_calls=calls, finish_reason="stop"))
    if tools_after:
        for i in range(3):
            await commit(w, RUN, b.start_tool(await _state(w), i))
        for i in range(3):
            await commit(w, RUN, b.tool_result(await _state(w), i, '{"ok":true}'))


async def test_the_tail_is_the_end_of_the_log(backend: Any) -> None:
    _, open_store, _ = backend
    async with open_store() as store:
        w = await store.open(SCOPE)
        await _life(w, tools_after=True)
        reader = await store.reader(SCOPE)
        every = await reader.run_facts(RUN)
        assert len(every) >= 10
        for count in range(1, len(every) + 3):
            assert await reader.tail_facts(RUN, count) == every[-count:], count
            assert await w.tail_facts(RUN, count) == every[-count:], count
        with pytest.raises(RunNotFoundError):
            await reader.tail_facts("no-such-run", 2)
        with pytest.raises(RunNotFoundError):  # PostgreSQL text cannot hold NUL: no such Run
            await reader.tail_facts("no\x00such", 2)
        with pytest.raises(RunNotFoundError):  # a lone surrogate is not UTF-8: no such Run
            await reader.tail_facts("no\ud800such", 2)
        with pytest.raises(ValueError):
            await reader.tail_facts(RUN, 0)


@pytest.mark.parametrize("damage", ["chain", "deleted_inside", "deleted_last"])
async def test_damage_in_the_tail_is_reported(backend: Any, damage: str) -> None:
    kind, open_store, sql = backend
    if kind == "memory":
        pytest.skip("the memory store holds no rows to damage")
    async with open_store() as store:
        w = await store.open(SCOPE)
        await _life(w, tools_after=True)
        head = (await w.run_store().load(RUN)).position
    stream = run_stream(RUN)
    where = f"scope = '{SCOPE}' AND stream = '{stream}'"
    if damage == "chain":
        sql(f"UPDATE events SET chain = data WHERE {where} AND idx = {head - 1}")
    elif damage == "deleted_inside":
        sql(f"DELETE FROM events WHERE {where} AND idx = {head - 1}")
    else:
        sql(f"DELETE FROM events WHERE {where} AND idx = {head}")
    async with open_store() as store:
        reader = await store.reader(SCOPE)
        with pytest.raises(CorruptRecordError):
            await reader.tail_facts(RUN, 3)


def _oracle(facts: Any) -> tuple[str, str] | None:
    """The last ModelStepCompleted's (step id, finish reason), found by a plain scan."""
    found = None
    for fact in facts:
        if type(fact).__name__ == "ModelStepCompleted":
            found = (fact.step_id, fact.finish_reason)
    return found


@pytest.mark.parametrize("tools_after", [False, True])
async def test_read_answer_finds_the_last_model_step(backend: Any, tools_after: bool) -> None:
    _, open_store, _ = backend
    async with open_store() as store:
        w = await store.open(SCOPE)
        await _life(w, tools_after=tools_after)
        reader = await store.reader(SCOPE)
        facts = await reader.run_facts(RUN)
        expected = _oracle(facts)
        assert expected is not None
        # the fixture reaches both paths: in the tail, and only further back
        in_tail = any(isinstance(f, F.ModelStepCompleted) for f in facts[-4:])
        assert in_tail is (not tools_after)
        answer = await read_answer(reader, store.frozen, RUN)
        assert answer is not None
        assert (answer.step_id, answer.finish_reason) == expected
        assert answer.text == "the answer"


async def test_read_answer_of_a_run_without_a_model_step(backend: Any) -> None:
    _, open_store, _ = backend
    async with open_store() as store:
        w = await store.open(SCOPE)
        await create(w, RUN, "in-1")
        assert await read_answer(await store.reader(SCOPE), store.frozen, RUN) is None


async def test_the_tail_reads_only_the_tail(backend: Any) -> None:
    """The cost claim: rows before the tail's base are not read. Damage there (an edited
    chain at position 2) is what ``run_facts`` and ``store check`` report; the tail read,
    which never reaches it, does not (that is the O(count) read, not a weaker check of
    what it returns)."""
    kind, open_store, sql = backend
    if kind == "memory":
        pytest.skip("the memory store holds no rows to damage")
    async with open_store() as store:
        w = await store.open(SCOPE)
        await _life(w, tools_after=True)
        every = await w.run_facts(RUN)
    sql(f"UPDATE events SET chain = data WHERE scope = '{SCOPE}' "
        f"AND stream = '{run_stream(RUN)}' AND idx = 2")
    async with open_store() as store:
        reader = await store.reader(SCOPE)
        with pytest.raises(CorruptRecordError):
            await reader.run_facts(RUN)
        assert await reader.tail_facts(RUN, 3) == every[-3:]
