"""Batch commits through every store (RUN-CMT-9): what a batch writes, and that it
writes all of it or nothing.

* A batch writes exactly the rows its requests committed one by one would write (the
  stores are compared row for row), in ONE durable transaction, and the store passes
  ``store check`` and ``check --log`` (schema v2 chains stay valid).
* A failure injected inside the transaction after the first request's rows (an insert
  that raises on the second request's rows, a ``COMMIT`` that never happens) leaves the
  store byte-identical and the writer's projection unchanged, and the writer usable.
"""

from __future__ import annotations

import copy
import itertools
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from click.testing import CliRunner
from sql_store_helpers import Gate

from runx_actors.check._tracecheck import check_log
from runx_actors.cli import main
from runx_actors.protocol.canonical import sha256_digest, typed_envelope
from runx_actors.protocol.commit import BatchResult, CommitRequest, CommitStatus, envelope
from runx_actors.protocol.errors import StaleRuntimeError
from runx_actors.protocol.values import NewRun, RunStatus
from runx_actors.store import _pg_log, _sqlite_log
from runx_actors.store._check import check_store
from runx_actors.store._scope import ScopeLog
from runx_actors.store.base import commit_batch
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing import builders as b
from runx_actors.testing.conformance import batch_requests

SCOPE = "batch"
RUN = "run-1"


class Backend:
    """One store kind: fresh stores, a row-for-row dump, and the target of the checks."""

    def __init__(self, kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> None:
        self.kind = kind
        self._tmp = tmp_path
        self._count = itertools.count()
        self._new_schema: Callable[[], str] | None = None
        if kind == "postgres":
            self._new_schema = request.getfixturevalue("postgres_schema")
        self.targets: list[str] = []

    def store(self) -> AbstractAsyncContextManager[Any]:
        if self.kind == "memory":
            @asynccontextmanager
            async def memory() -> AsyncIterator[MemoryStore]:
                yield MemoryStore()

            self.targets.append("")
            return memory()
        if self.kind == "sqlite":
            path = str(self._tmp / f"store-{next(self._count)}.db")
            self.targets.append(path)
            return open_sqlite_store(path)
        from runx_actors.store.postgres import open_postgres_store

        assert self._new_schema is not None
        dsn = self._new_schema()
        self.targets.append(dsn)
        return open_postgres_store(dsn)

    async def dump(self, store: Any) -> Any:
        """Everything the store holds, comparable with ``==``."""
        if isinstance(store, MemoryStore):
            log = store.scope_log(SCOPE)
            return (
                [(c.commit_id, c.epoch, c.events) for c in log.commits],
                {k: list(v) for k, v in log.streams.items()}, sorted(log.index),
                dict(log.cache), list(log.cache_writes), log.epoch,
                dict(store.frozen.bodies._bodies),
            )
        if self.kind == "sqlite":
            def read() -> list[str]:
                import sqlite3

                conn = sqlite3.connect(store.path)
                try:
                    return list(conn.iterdump())
                finally:
                    conn.close()

            return await trio.to_thread.run_sync(read)

        def read_pg(conn: Any) -> dict[str, list[tuple[Any, ...]]]:
            out = {}
            for table in ("runx_meta", "scopes", "commits", "events", "runs",
                          "projection_cache", "frozen"):
                rows = conn.execute(f"SELECT * FROM {table}").fetchall()
                out[table] = sorted(tuple(bytes(v) if isinstance(v, memoryview) else v
                                          for v in row) for row in rows)
            return out

        return await store._call(read_pg)

    def statistics(self, store: Any) -> Any:
        return store.statistics()


@pytest.fixture(params=["memory", "sqlite", "postgres"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield Backend(request.param, tmp_path, request)


class OneByOne:
    """A RunStore without ``commit_batch``: ``store.base.commit_batch`` commits its
    requests one by one through it (the reference a batch must equal)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    async def commit(self, request: CommitRequest) -> Any:
        return await self.inner.commit(request)


def _statuses(result: BatchResult) -> list[CommitStatus]:
    return [r.status for r in result.results]


async def _freeze_inputs(store: Any, *ids: str) -> None:
    """Store the bodies of the text inputs ``b.agent_input(id)`` (as the runtime does
    before it commits them), so that ``store check`` finds every body a fact names."""
    for input_id in ids:
        data = typed_envelope("agent_input", {"text": input_id})
        assert sha256_digest(data) == b.agent_input(input_id).digest
        await store.frozen.put(sha256_digest(data), data)


async def _workflow(store: Any, writer: Any, rs: Any) -> list[BatchResult]:
    """A Run through a model step, two tool calls and a second model step, as batches
    (settle + the starts it enables, prepare + start), with a replayed batch and one
    refused in the middle."""
    await writer.create_run(NewRun(RUN), [b.agent_input("in-1")], commit_id=f"create:{RUN}")
    out = []
    snap = await writer.run_store().load(RUN)
    chain = batch_requests(RUN, snap, lambda s: b.prepare(s.state, s.position),
                           lambda s: b.start_model(s.state))
    out.append(await commit_batch(rs, chain))
    out.append(await commit_batch(rs, chain))  # replay
    snap = await writer.run_store().load(RUN)
    out.append(await commit_batch(rs, batch_requests(
        RUN, snap,
        lambda s: b.model_result(s.state, tool_calls=[("t-0", "{}"), ("t-1", "{}")]),
        lambda s: b.start_tool(s.state, 0),
        lambda s: b.start_tool(s.state, 1))))
    snap = await writer.run_store().load(RUN)
    tools = batch_requests(RUN, snap, lambda s: b.tool_result(s.state, 0, '{"a":1}'),
                           lambda s: b.tool_result(s.state, 1, '{"a":2}'))
    stale = CommitRequest(snap.position, envelope(RUN, *b.prepare(snap.state, snap.position)))
    out.append(await commit_batch(rs, [*tools, stale]))  # the Prepare's base is stale
    snap = await writer.run_store().load(RUN)
    out.append(await commit_batch(rs, batch_requests(
        RUN, snap, lambda s: b.accept_input(s.state, "in-2"),
        lambda s: b.prepare(s.state, s.position), lambda s: b.start_model(s.state))))
    snap = await writer.run_store().load(RUN)
    out.append(await commit_batch(rs, batch_requests(
        RUN, snap, lambda s: b.model_result(s.state, text="done"))))
    return out


async def test_batch_writes_what_one_by_one_commits_write(backend: Backend) -> None:
    """RUN-CMT-9: the same workflow as batches and as single commits leaves the same
    rows (row for row, chains included), the same results, and the batches take one
    durable transaction each; the batch-written store passes ``store check`` and
    ``check --log``."""
    async with backend.store() as batched, backend.store() as single:
        wb, ws = await batched.open(SCOPE), await single.open(SCOPE)
        await _freeze_inputs(batched, "in-1", "in-2")
        await _freeze_inputs(single, "in-1", "in-2")
        before = backend.statistics(batched).transactions
        got = await _workflow(batched, wb, wb.run_store())
        transactions = backend.statistics(batched).transactions - before
        before = backend.statistics(single).transactions
        want = await _workflow(single, ws, OneByOne(ws.run_store()))
        one_by_one = backend.statistics(single).transactions - before
        assert [(r.results, type(r.error)) for r in got] == \
            [(r.results, type(r.error)) for r in want], f"expected {want}\nactual {got}"
        assert _statuses(got[1]) == [CommitStatus.ALREADY_APPLIED] * 2
        assert isinstance(got[3].error, StaleRuntimeError) and len(got[3].results) == 2
        assert got[-1].results[-1].snapshot.state.status is RunStatus.COMPLETED
        expected, actual = await backend.dump(single), await backend.dump(batched)
        assert actual == expected, f"expected rows {expected}\nactual rows {actual}"
        # One transaction per write: the creation and the 6 batches (the replayed one
        # appends nothing: the memory store does not count it, the SQL stores do).
        appending = 1 + 5
        assert transactions in (appending, appending + 1), transactions
        assert one_by_one - transactions >= 6, (one_by_one, transactions)
    if backend.kind != "memory":
        target = backend.targets[0]
        report = check_store(target)
        assert report.ok, report.problems
        trace = check_log(target)
        assert trace.ok, [v.show() for v in trace.violations]
        assert trace.runs == 1
        for args in (["store", "check", target], ["check", "--log", target]):
            result = CliRunner().invoke(main, args)
            assert result.exit_code == 0, (args, result.output)


async def _setup(store: Any, writer: Any) -> tuple[list[CommitRequest], Any]:
    await _freeze_inputs(store, "in-1", "in-2")
    await writer.create_run(NewRun(RUN), [b.agent_input("in-1")], commit_id=f"create:{RUN}")
    snap = await writer.run_store().load(RUN)
    chain = batch_requests(RUN, snap, lambda s: b.accept_input(s.state, "in-2"),
                           lambda s: b.prepare(s.state, s.position),
                           lambda s: b.start_model(s.state))
    return chain, snap


class Injected(Exception):
    """The failure injected inside the batch's transaction."""


def _inject_second_rows(monkeypatch: pytest.MonkeyPatch, kind: str,
                        chain: list[CommitRequest], at: int) -> list[int]:
    """Make the insert of the batch's rows raise once the second request's rows are
    written (the first request's rows are already in). Returns a hit counter."""
    hits = [0]
    second_id = chain[1].envelope.id
    if kind == "memory":
        real_append = ScopeLog._append

        def append(self: ScopeLog, commit_id: str, *args: Any) -> Any:
            if commit_id == second_id:
                real_append(self, commit_id, *args)  # the rows are in, then it fails
                hits[0] += 1
                raise Injected("memory append")
            return real_append(self, commit_id, *args)

        monkeypatch.setattr(ScopeLog, "_append", append)
    elif kind == "sqlite":
        real_events = _sqlite_log.insert_events

        def events(conn: Any, rows: Any) -> None:
            real_events(conn, rows)
            if any(r[1] == f"run/{RUN}" and r[2] >= at for r in rows):
                hits[0] += 1
                raise Injected("sqlite insert")

        monkeypatch.setattr(_sqlite_log, "insert_events", events)
    else:
        real_pg = _pg_log.insert_events

        def pg_events(conn: Any, scope: str, seq: int, commit_id: str, *args: Any) -> None:
            real_pg(conn, scope, seq, commit_id, *args)
            if commit_id == second_id:
                hits[0] += 1
                raise Injected("postgres insert")

        monkeypatch.setattr(_pg_log, "insert_events", pg_events)
    return hits


async def test_batch_failure_inside_the_transaction_writes_nothing(
        backend: Backend, monkeypatch: pytest.MonkeyPatch) -> None:
    """RUN-CMT-9 atomicity: an insert that fails on the second request's rows, after the
    first request's rows were written, leaves the store byte-identical and the
    projection unchanged; the writer then commits the same batch."""
    async with backend.store() as store:
        w = await store.open(SCOPE)
        chain, snap = await _setup(store, w)
        dump, projection = await backend.dump(store), w.projection()
        hits = _inject_second_rows(monkeypatch, backend.kind, chain, snap.position + 2)
        with pytest.raises(Exception) as raised:
            await w.run_store().commit_batch(chain)
        assert "Injected" in repr(raised.value) or isinstance(raised.value, Injected), \
            raised.value
        assert hits[0] >= 1, "the injected failure was never reached"
        after = await backend.dump(store)
        assert after == dump, f"expected rows {dump}\nactual rows {after}"
        assert w.projection() == projection, (projection, w.projection())
        assert await w.run_store().load(RUN) == snap
        monkeypatch.undo()
        done = await w.run_store().commit_batch(chain)
        assert _statuses(done) == [CommitStatus.ACCEPTED] * 3, done
        assert (await w.record(RUN)) == done.results[-1].snapshot == \
            await w.run_store().load(RUN)
    if backend.kind != "memory":
        assert check_store(backend.targets[0]).ok


@pytest.fixture(params=["sqlite", "postgres"])
def sql_backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    yield Backend(request.param, tmp_path, request)


async def test_batch_commit_that_never_happens_writes_nothing(sql_backend: Backend) -> None:
    """RUN-CMT-9 atomicity at ``COMMIT`` (SQL stores): every row of the batch is written,
    then the transaction fails before ``COMMIT`` — nothing is durable, the projection is
    unchanged, the writer is usable (the batch commits afterwards)."""
    backend = sql_backend
    async with backend.store() as store:
        w = await store.open(SCOPE)
        chain, _snap = await _setup(store, w)
        dump, projection = await backend.dump(store), w.projection()

        def boom() -> None:
            raise Injected("before COMMIT")

        store.set_before_commit_hook(boom)
        with pytest.raises(Exception) as raised:
            await w.run_store().commit_batch(chain)
        assert "before COMMIT" in str(raised.value), raised.value
        store.set_before_commit_hook(None)
        after = await backend.dump(store)
        assert after == dump, f"expected rows {dump}\nactual rows {after}"
        assert w.projection() == projection
        done = await w.run_store().commit_batch(chain)
        assert _statuses(done) == [CommitStatus.ACCEPTED] * 3, done
        assert await w.record(RUN) == done.results[-1].snapshot
    assert check_store(backend.targets[0]).ok


async def test_sqlite_batch_fails_alone_in_a_shared_group(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """RUN-CMT-9 on SQLite: a batch shares a group transaction with another job; when its
    rows fail, the group is re-run job by job and the batch is rolled back alone — the
    other job commits, none of the batch's rows does."""
    async with open_sqlite_store(tmp_path / "group.db") as store:
        w = await store.open(SCOPE)
        chain, snap = await _setup(store, w)
        await w.create_run(NewRun("other"), [b.agent_input("in-1")], commit_id="create:o")
        await _freeze_inputs(store, "in-1", "in-2")
        other = await w.run_store().load("other")
        facts = await w.run_facts(RUN)
        gate = Gate()
        store.set_before_commit_hook(gate)
        results: dict[str, Any] = {}

        async def hold() -> None:  # a group that holds the writer while the others queue
            results["hold"] = await w.append_events("hold", [_foreign()])

        async def batch() -> None:
            try:
                await w.run_store().commit_batch(chain)
            except Injected as exc:
                results["batch"] = exc

        async def single() -> None:
            results["single"] = await w.run_store().commit(CommitRequest(
                0, envelope("other", *b.accept_input(other.state, "in-2"))))

        hits = _inject_second_rows(monkeypatch, "sqlite", chain, snap.position + 2)
        fallbacks = store.statistics().fallback_groups
        async with trio.open_nursery() as nursery:
            nursery.start_soon(hold)
            await gate.wait_reached()
            store.set_before_commit_hook(None)
            nursery.start_soon(batch)
            nursery.start_soon(single)
            await trio.testing.wait_all_tasks_blocked()
            assert store.statistics().queued == 2  # both wait for the held group
            gate.release.set()
        assert hits[0] >= 2, hits  # the multi-row write, then the batch alone
        assert store.statistics().fallback_groups == fallbacks + 1
        assert isinstance(results["batch"], Injected)
        assert results["single"].status is CommitStatus.ACCEPTED
        assert await w.run_facts(RUN) == facts
        assert await w.run_store().load(RUN) == snap
        assert (await w.record("other")) == results["single"].snapshot
    assert check_store(str(tmp_path / "group.db")).ok


def _foreign() -> Any:
    from runx_actors.store.base import ForeignEvent

    return ForeignEvent("app/notes", "app/note", 1)


async def test_memory_batch_projection_unchanged_on_failure(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The memory store takes back a half-applied batch exactly (commits, streams, the
    commit-id index, the durable cache and its write log)."""
    store = MemoryStore()
    w = await store.open(SCOPE)
    chain, _snap = await _setup(store, w)
    log = store.scope_log(SCOPE)
    before = copy.deepcopy((log.commits, log.streams, log.index, log.cache, log.cache_writes))
    _inject_second_rows(monkeypatch, "memory", chain, 0)
    with pytest.raises(Injected):
        await w.run_store().commit_batch(chain)
    assert (log.commits, log.streams, log.index, log.cache, log.cache_writes) == before
    assert store.statistics().transactions == 1  # the creation only
