"""SQLite-specific behaviour: schema, corruption, the writer thread, group commit, two
processes. What both SQL stores share is in ``test_sql_stores.py``."""

from __future__ import annotations

import functools
import hashlib
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from sql_store_helpers import SCOPE, TIMEOUT
from sql_store_helpers import Gate as _Gate
from sql_store_helpers import commit as _commit
from sql_store_helpers import create as _create
from sql_store_helpers import runs as _runs

from runx_actors.protocol.commit import (
    CommitResult,
    CommitStatus,
    create_group,
    fold_run,
)
from runx_actors.protocol.errors import (
    CommandConflictError,
    CorruptRecordError,
    OwnershipLostError,
    ProjectionDivergenceError,
    RunExistsError,
    RunNotFoundError,
    SchemaVersionError,
    StaleRuntimeError,
)
from runx_actors.protocol.values import NewRun, RunStatus
from runx_actors.store.base import ForeignEvent
from runx_actors.store.sqlite import SqliteStore, open_sqlite_store
from runx_actors.testing import builders as b
from runx_actors.testing.builders import Built


def _raw(path: Path) -> sqlite3.Connection:
    return sqlite3.connect(str(path), isolation_level=None)


# -- schema and corruption ---------------------------------------------------------------


async def test_unknown_schema_version(tmp_path: Path) -> None:
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        await store.open(SCOPE)
    with _raw(path) as conn:
        conn.execute("PRAGMA user_version = 99")
    with pytest.raises(SchemaVersionError) as err:
        async with open_sqlite_store(path):
            pass  # pragma: no cover
    assert err.value.found == 99  # type: ignore[attr-defined]


async def test_foreign_database_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "other.db"
    with _raw(path) as conn:
        conn.execute("CREATE TABLE notes (x)")
    with pytest.raises(SchemaVersionError):
        async with open_sqlite_store(path):
            pass  # pragma: no cover


async def test_corrupt_row_is_named(tmp_path: Path) -> None:
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1", "in-2")
        await _create(w, "run-2", "in-1")
    with _raw(path) as conn:
        conn.execute("UPDATE events SET data = x'7631' WHERE stream = 'run/run-1' AND idx = 2")
        conn.execute("UPDATE events SET type = 'twilight/run/run_ended' "
                     "WHERE stream = 'run/run-2' AND idx = 1")
    async with open_sqlite_store(path) as store:
        reader = await store.reader(SCOPE)
        with pytest.raises(CorruptRecordError) as err:
            await reader.record("run-1")
        assert (err.value.run_id, err.value.position) == ("run-1", 2)  # type: ignore[attr-defined]
        with pytest.raises(CorruptRecordError) as err:
            await reader.run_facts("run-2")
        assert (err.value.run_id, err.value.position) == ("run-2", 1)  # type: ignore[attr-defined]


# -- the writer thread ---------------------------------------------------------------------


async def test_writer_thread_is_owned(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db") as store:
        thread = store.writer_thread
        assert thread.is_alive() and thread.name == "runx-sqlite-writer"
        w = await store.open(SCOPE)
    assert not thread.is_alive()
    with pytest.raises(trio.ClosedResourceError):
        await _create(w, "run-1")


async def test_group_commit_groups_and_answers_after_commit(tmp_path: Path) -> None:
    """50 concurrent commits of 50 Runs share at most two transactions, and no caller is
    answered before the transaction holding its commit is visible to another connection."""
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        w = await _runs(store, 50)
        gate = _Gate()
        store.set_before_commit_hook(gate)
        before = store.statistics()
        answered: list[str] = []

        def visible(command_id: str) -> bool:
            with _raw(path) as conn:
                row = conn.execute("SELECT 1 FROM commits WHERE commit_id = ?",
                                   (command_id,)).fetchone()
            return row is not None

        async def one(i: int) -> None:
            run_id = f"run-{i}"
            built = b.accept_input((await w.run_store().load(run_id)).state, "in-2")
            result = await _commit(w, run_id, built)
            assert result.status is CommitStatus.ACCEPTED
            # Answered only after COMMIT: another connection already sees the commit.
            assert await trio.to_thread.run_sync(visible, built[0])
            answered.append(run_id)

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                for i in range(50):
                    nursery.start_soon(one, i)
                await gate.wait_reached()
                await trio.testing.wait_all_tasks_blocked()
                # The first group's transaction is held open: nobody is answered, and
                # its commits are invisible to other connections.
                assert answered == []
                assert not await trio.to_thread.run_sync(visible, b.accept_input(
                    (await w.run_store().load("run-0")).state, "in-2")[0])
                store.set_before_commit_hook(None)
                gate.release.set()
        after = store.statistics()
        assert sorted(answered) == sorted(f"run-{i}" for i in range(50))
        assert after.transactions - before.transactions <= 2
        assert after.largest_group >= 25
        assert after.accepted - before.accepted == 50


async def test_refused_request_does_not_affect_its_group(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db") as store:
        w = await _runs(store, 4)
        states = {f"run-{i}": await w.run_store().load(f"run-{i}") for i in range(4)}
        gate = _Gate()
        store.set_before_commit_hook(gate)
        outcomes: dict[str, object] = {}

        async def attempt(run_id: str, built: Built, base: int) -> None:
            try:
                outcomes[run_id] = (await _commit(w, run_id, built, base)).status
            except Exception as exc:
                outcomes[run_id] = type(exc)

        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(attempt, "run-0",
                                   b.accept_input(states["run-0"].state, "x"), 0)
                await gate.wait_reached()
                s1, s2, s3 = states["run-1"], states["run-2"], states["run-3"]
                nursery.start_soon(attempt, "run-1", b.prepare(s1.state, 0), 0)  # stale
                nursery.start_soon(attempt, "run-2", b.accept_input(s2.state, "y"), 0)
                nursery.start_soon(attempt, "run-3", b.accept_input(s3.state, "in-1"), 0)
                await trio.testing.wait_all_tasks_blocked()
                before = store.statistics()
                store.set_before_commit_hook(None)
                gate.release.set()
        assert outcomes == {
            "run-0": CommitStatus.ACCEPTED, "run-1": StaleRuntimeError,
            "run-2": CommitStatus.ACCEPTED, "run-3": CommandConflictError,
        }
        after = store.statistics()
        assert after.transactions - before.transactions == 2
        positions = {r: (await (await store.reader(SCOPE)).record(r)).position for r in states}
        assert positions == {"run-0": 2, "run-1": 1, "run-2": 2, "run-3": 1}


# -- two processes -------------------------------------------------------------------------

_OPEN_ONLY = textwrap.dedent("""
    import sys, trio
    from runx_actors.store.sqlite import open_sqlite_store

    async def main(path):
        async with open_sqlite_store(path) as store:
            w = await store.open("s")
            print(w.epoch, flush=True)

    trio.run(main, sys.argv[1])
""")

_OPEN_WAIT_COMMIT = textwrap.dedent("""
    import sys, trio
    from runx_actors.protocol.errors import OwnershipLostError
    from runx_actors.protocol.values import NewRun
    from runx_actors.store.sqlite import open_sqlite_store

    async def main(path):
        async with open_sqlite_store(path) as store:
            w = await store.open("s")
            print("opened", w.epoch, flush=True)
            await trio.to_thread.run_sync(sys.stdin.readline)
            try:
                await w.create_run(NewRun("run-b"), [], commit_id="create:run-b")
                print("accepted", flush=True)
            except OwnershipLostError as exc:
                print("fenced", exc.epoch, exc.current_epoch, flush=True)

    trio.run(main, sys.argv[1])
""")


async def test_other_process_open_fences_our_writer(tmp_path: Path) -> None:
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        w = await _runs(store, 1)
        snap = await w.run_store().load("run-0")
        with trio.fail_after(TIMEOUT):
            proc = await trio.run_process([sys.executable, "-c", _OPEN_ONLY, str(path)],
                                          capture_stdout=True)
        assert int(proc.stdout) == w.epoch + 1
        with pytest.raises(OwnershipLostError) as lost:
            await _commit(w, "run-0", b.prepare(snap.state, snap.position))
        assert lost.value.current_epoch == w.epoch + 1  # type: ignore[attr-defined]
        with pytest.raises(OwnershipLostError):
            await _create(w, "run-x")
        # Nothing was written; the old owner can still read.
        assert (await w.record("run-0")) == snap
        with _raw(path) as conn:
            assert conn.execute("SELECT count(*) FROM commits").fetchone()[0] == 1
            assert conn.execute("SELECT count(*) FROM events").fetchone()[0] == 2


async def _read_line(stream: trio.abc.ReceiveStream, buffer: bytearray) -> str:
    while b"\n" not in buffer:
        chunk = await stream.receive_some()
        if not chunk:
            raise EOFError(bytes(buffer))
        buffer += chunk
    line, _, rest = bytes(buffer).partition(b"\n")
    buffer[:] = rest
    return line.decode()


async def test_our_open_fences_other_process(tmp_path: Path) -> None:
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        await store.open(SCOPE)
        with trio.fail_after(TIMEOUT):
            async with trio.open_nursery() as nursery:
                proc = await nursery.start(functools.partial(
                    trio.run_process, [sys.executable, "-c", _OPEN_WAIT_COMMIT, str(path)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, check=True,
                ))
                assert proc.stdin is not None and proc.stdout is not None
                buffer = bytearray()
                opened = (await _read_line(proc.stdout, buffer)).split()
                assert opened == ["opened", "2"]
                ours = await store.open(SCOPE)
                assert ours.epoch == 3
                await proc.stdin.send_all(b"go\n")
                assert (await _read_line(proc.stdout, buffer)).split() == ["fenced", "2", "3"]
                await proc.stdin.aclose()
        with pytest.raises(RunNotFoundError):
            await (await store.reader(SCOPE)).record("run-b")
        assert (await _create(ours, "run-b")).status is CommitStatus.ACCEPTED


# -- one group: the running overlay and the multi-row write ---------------------------------


async def _one_group(store: SqliteStore, *calls: Callable[[], Awaitable[object]]
                     ) -> list[object]:
    """Run *calls* (in this order) as ONE group transaction; return each outcome (the
    value or the exception). A frozen-body put holds the writer in the group before."""
    gate = _Gate()
    store.set_before_commit_hook(gate)
    outcomes: list[object] = [None] * len(calls)

    async def one(i: int) -> None:
        try:
            outcomes[i] = await calls[i]()
        except Exception as exc:
            outcomes[i] = exc

    body = b"hold"
    digest = "sha256:" + hashlib.sha256(body).hexdigest()
    with trio.fail_after(TIMEOUT):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(store.frozen.put, digest, body)
            await gate.wait_reached()
            before = store.statistics()
            for i in range(len(calls)):
                nursery.start_soon(one, i)
                await trio.testing.wait_all_tasks_blocked()
            store.set_before_commit_hook(None)
            gate.release.set()
    after = store.statistics()
    assert after.transactions - before.transactions == 2  # the held one, then ours
    assert after.largest_group >= len(calls)
    return outcomes


async def test_group_sees_a_run_created_earlier_in_the_group(tmp_path: Path) -> None:
    """A create, a commit on the new Run, a create replay and a duplicate create, all in
    one group: later jobs read the earlier ones' writes (nothing is in the file yet)."""
    async with open_sqlite_store(tmp_path / "db") as store:
        w = await store.open(SCOPE)
        created = fold_run(create_group(NewRun("new"), [b.agent_input("in-1")]), run_id="new")
        accept = b.accept_input(created, "in-2")
        out = await _one_group(
            store,
            lambda: _create(w, "new", "in-1"),
            lambda: _commit(w, "new", accept, base=1),
            lambda: _create(w, "new", "in-1"),  # same commit id: replays
            lambda: w.create_run(NewRun("new"), [], commit_id="other"),  # exists
        )
        first, accepted, replay, exists = out
        assert isinstance(first, CommitResult) and first.status is CommitStatus.ACCEPTED
        assert isinstance(accepted, CommitResult)
        assert accepted.status is CommitStatus.ACCEPTED and accepted.snapshot.position == 2
        assert isinstance(replay, CommitResult)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == first.facts and replay.snapshot == accepted.snapshot
        assert isinstance(exists, RunExistsError)
        record = await w.record("new")
        assert record == accepted.snapshot == w.projection()["new"]


async def test_group_replays_a_commit_of_the_same_group(tmp_path: Path) -> None:
    """A cancel and its duplicate in one group: the duplicate replays the first one's
    facts and answers the ended snapshot, which is not in the file yet."""
    async with open_sqlite_store(tmp_path / "db") as store:
        w = await _runs(store, 1)
        cancel = b.cancel(command_id="cancel:run-0")
        first, second = await _one_group(
            store, lambda: _commit(w, "run-0", cancel, base=1),
            lambda: _commit(w, "run-0", cancel, base=1))
        assert isinstance(first, CommitResult) and isinstance(second, CommitResult)
        assert first.status is CommitStatus.ACCEPTED
        assert second.status is CommitStatus.ALREADY_APPLIED
        assert second.facts == first.facts
        assert second.snapshot == first.snapshot
        assert second.snapshot.state.status is RunStatus.STOPPED
        assert "run-0" not in w.projection()
        assert await store.cached_projection(SCOPE) == {}


async def test_group_appends_to_one_stream_in_order(tmp_path: Path) -> None:
    """Two appends to one foreign stream in one group get consecutive positions (the
    stream head is read through the group's overlay); a repeated id replays."""
    async with open_sqlite_store(tmp_path / "db") as store:
        w = await store.open(SCOPE)
        await w.append_events("a0", [ForeignEvent("host/x", "host/t", {"n": 0})])

        def append(cid: str, n: int) -> Callable[[], Awaitable[object]]:
            return lambda: w.append_events(cid, [ForeignEvent("host/x", "host/t", {"n": n}),
                                                 ForeignEvent("host/y", "host/t", {"n": n})])

        out = await _one_group(store, append("a1", 1), append("a2", 2), append("a1", 3))
        assert out == [CommitStatus.ACCEPTED, CommitStatus.ACCEPTED,
                       CommitStatus.ALREADY_APPLIED]
        x = await w.read_stream("host/x")
        assert [(r.index, r.payload["n"], r.commit_id) for r in x] == [
            (0, 0, "a0"), (1, 1, "a1"), (2, 2, "a2")]
        y = await w.read_stream("host/y")
        assert [(r.index, r.payload["n"]) for r in y] == [(0, 1), (1, 2)]


async def test_group_writes_rows_in_few_statements(tmp_path: Path) -> None:
    """A group of 30 commits costs a handful of statements, not several per job."""
    async with open_sqlite_store(tmp_path / "db") as store:
        w = await _runs(store, 30)
        states = {f"run-{i}": (await w.run_store().load(f"run-{i}")).state for i in range(30)}
        statements: list[str] = []
        store._writer._conn.set_trace_callback(statements.append)
        try:
            out = await _one_group(store, *[
                functools.partial(_commit, w, run_id, b.accept_input(state, "in-2"), 1)
                for run_id, state in states.items()])
        finally:
            store._writer._conn.set_trace_callback(None)
        assert all(isinstance(r, CommitResult) and r.status is CommitStatus.ACCEPTED
                   for r in out)
        # the held group (BEGIN, put, COMMIT) plus ours: BEGIN, epoch, ids, commits,
        # events, runs, COMMIT
        assert len(statements) <= 12, statements
        for run_id in states:
            assert (await w.record(run_id)).position == 2


async def test_group_write_failure_falls_back_to_one_job_at_a_time(tmp_path: Path) -> None:
    """A Run whose stored head is not the projection's fails the group's multi-row
    write; the group is re-run job by job and only that job is refused."""
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        w = await _runs(store, 3)
        states = {f"run-{i}": (await w.run_store().load(f"run-{i}")).state for i in range(3)}
        with _raw(path) as conn:
            conn.execute("UPDATE runs SET head = 7 WHERE run_id = 'run-1'")
        out = await _one_group(store, *[
            functools.partial(_commit, w, run_id, b.accept_input(state, "in-2"), 1)
            for run_id, state in states.items()])
        assert [type(r) for r in out] == [CommitResult, ProjectionDivergenceError,
                                          CommitResult]
        assert out[1].run_id == "run-1"  # type: ignore[attr-defined]
        assert store.statistics().fallback_groups == 1
        with pytest.raises(CorruptRecordError) as damaged:  # record() checks the head too
            await w.record("run-1")
        assert (damaged.value.table, damaged.value.position) == ("events", 2)  # type: ignore[attr-defined]
        with _raw(path) as conn:
            conn.execute("UPDATE runs SET head = 1 WHERE run_id = 'run-1'")
        positions = {r: (await w.record(r)).position for r in states}
        assert positions == {"run-0": 2, "run-1": 1, "run-2": 2}
        assert w.projection()["run-1"].position == 1


async def test_group_write_in_chunks(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """More rows than one statement takes: the multi-row writes are chunked."""
    from runx_actors.store import _sqlite_log

    monkeypatch.setattr(_sqlite_log, "MAX_ROWS", 2)
    path = tmp_path / "db"
    async with open_sqlite_store(path) as store:
        w = await _runs(store, 5)
        states = {f"run-{i}": (await w.run_store().load(f"run-{i}")).state for i in range(5)}
        calls: list[Callable[[], Awaitable[object]]] = [
            functools.partial(_commit, w, run_id, b.accept_input(state, "in-2"), 1)
            for run_id, state in states.items()]
        calls += [functools.partial(_commit, w, f"run-{i}", b.cancel(command_id=f"c:{i}"), 2)
                  for i in range(3)]
        calls += [functools.partial(_create, w, f"new-{i}", "in-1") for i in range(5)]
        out = await _one_group(store, *calls)
        assert all(isinstance(r, CommitResult) and r.status is CommitStatus.ACCEPTED
                   for r in out), out
        expected = w.projection()
        assert sorted(expected) == ["new-0", "new-1", "new-2", "new-3", "new-4", "run-3",
                                    "run-4"]
        assert sorted(await store.cached_projection(SCOPE)) == sorted(expected)
    async with open_sqlite_store(path) as store:
        w2 = await store.open(SCOPE)
        assert w2.projection() == expected
        assert (await w2.record("run-0")).position == 3


async def test_known_frozen_body_is_not_written_again(tmp_path: Path) -> None:
    async with open_sqlite_store(tmp_path / "db") as store:
        body = b"body"
        digest = "sha256:" + hashlib.sha256(body).hexdigest()
        await store.frozen.put(digest, body)
        statements: list[str] = []
        store._writer._conn.set_trace_callback(statements.append)
        try:
            await store.frozen.put(digest, body)
        finally:
            store._writer._conn.set_trace_callback(None)
        assert not any("frozen" in s for s in statements), statements
        assert await store.frozen.get(digest) == body


async def test_clean_close_caches_every_active_run_at_its_head(tmp_path: Path) -> None:
    """RUN-CMT-2: closing a writer that still owns its scope caches every active Run at
    its head (one row each, so the next open folds no tail); the reopened projection is
    the same; a fenced writer's close writes nothing."""
    path = tmp_path / "s.sqlite3"
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        await _create(w, "open", "in-1")
        await _create(w, "mid", "in-1")
        snap = await w.run_store().load("mid")
        await _commit(w, "mid", b.prepare(snap.state, snap.position))
        await _commit(w, "mid", b.start_model((await w.run_store().load("mid")).state))
        before = await store.cached_projection(SCOPE)
        assert before["mid"].position < (await w.run_store().load("mid")).position
        expected = w.projection()
        await w.aclose()
        cached = await store.cached_projection(SCOPE)
        assert cached == expected  # every active Run, at its head
    async with open_sqlite_store(path) as store:
        w2 = await store.open(SCOPE)
        assert w2.projection() == expected
        w3 = await store.open(SCOPE)  # fences w2
        transactions = store.statistics().transactions
        await w2.aclose()  # fenced: no checkpoint transaction at all
        assert store.statistics().transactions == transactions
        await w3.aclose()
        assert store.statistics().transactions == transactions + 1


def _audit_cache_writes(path: Path) -> None:
    """Record every write of a projection_cache row (insert, update, delete) in an extra
    table of the store file, by triggers (the store ignores tables it does not know)."""
    with _raw(path) as conn:
        conn.executescript("""
            CREATE TABLE cache_audit (run_id TEXT, op TEXT, position INTEGER);
            CREATE TRIGGER cache_ins AFTER INSERT ON projection_cache
                BEGIN INSERT INTO cache_audit VALUES (new.run_id, 'insert', new.position); END;
            CREATE TRIGGER cache_upd AFTER UPDATE ON projection_cache
                BEGIN INSERT INTO cache_audit VALUES (new.run_id, 'update', new.position); END;
            CREATE TRIGGER cache_del AFTER DELETE ON projection_cache
                BEGIN INSERT INTO cache_audit VALUES (old.run_id, 'delete', old.position); END;
        """)


def _cache_writes(path: Path) -> list[tuple[str, str, int]]:
    """The cache writes recorded since the last call (and forget them)."""
    with _raw(path) as conn:
        rows = conn.execute("SELECT run_id, op, position FROM cache_audit ORDER BY rowid")
        out = [tuple(r) for r in rows]
        conn.execute("DELETE FROM cache_audit")
    return out  # type: ignore[return-value]


async def _audited_empty_store(tmp_path: Path) -> Path:
    """A store file whose scope was opened once (no Run), with its cache writes audited."""
    path = tmp_path / "s.sqlite3"
    async with open_sqlite_store(path) as store:
        await store.open(SCOPE)
    _audit_cache_writes(path)
    return path


async def test_clean_close_rewrites_no_entry_that_holds_its_snapshot(tmp_path: Path) -> None:
    """RUN-CMT-2: a restart that changes nothing writes no cache row when it closes —
    every entry it loaded at the head holds its Run's snapshot (the close rewrote all
    10,000 entries of the bench's restart, identical bytes, each time); a Run that moved
    since the open is written again at its new head, and only it."""
    path = tmp_path / "s.sqlite3"
    expected = await _cached_store(path)
    _audit_cache_writes(path)
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        assert w.projection() == expected
        await w.aclose()
    assert _cache_writes(path) == []
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        assert w.projection() == expected
        await _commit(w, "run-b", b.start_model((await w.run_store().load("run-b")).state))
        moved = w.projection()
        await w.aclose()
    assert _cache_writes(path) == [("run-b", "update", moved["run-b"].position)]
    assert {r: s.position for r, s in (await _cached(path)).items()} == {
        r: s.position for r, s in moved.items()}
    async with open_sqlite_store(path) as store:
        assert (await store.open(SCOPE)).projection() == moved


async def test_clean_close_writes_an_entry_written_since_open_once(tmp_path: Path) -> None:
    """A Run that arrived at Open during the writer's life has its entry written by that
    commit (RUN-CMT-2); the close does not write it a second time."""
    path = await _audited_empty_store(tmp_path)
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        await _create(w, "run-a", "in-1")
        position = (await w.run_store().load("run-a")).position
        assert _cache_writes(path) == [("run-a", "insert", position)]
        await w.aclose()
    assert _cache_writes(path) == []


async def test_clean_close_writes_a_run_moved_past_its_entry_in_the_same_group(
        tmp_path: Path) -> None:
    """One group writes a Run's entry (a tool result brings it to Open) and then moves
    it on (the next step is prepared, no entry): the entry is not the Run's snapshot,
    so the close writes the Run at its head."""
    from runx_actors.testing.conformance import batch_requests

    path = await _audited_empty_store(tmp_path)
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        await _create(w, "run-a", "in-1")
        rs = w.run_store()
        for step in (lambda s: b.prepare(s.state, s.position), lambda s: b.start_model(s.state),
                     lambda s: b.model_result(s.state, tool_calls=[("t", "{}")]),
                     lambda s: b.start_tool(s.state, 0)):
            await _commit(w, "run-a", step(await rs.load("run-a")))
        _cache_writes(path)
        snap = await rs.load("run-a")
        await rs.commit_batch(batch_requests("run-a", snap,
                                             lambda s: b.tool_result(s.state, 0, "{}"),
                                             lambda s: b.prepare(s.state, s.position)))
        head = (await rs.load("run-a")).position
        [(run_id, op, at_open)] = _cache_writes(path)  # the batch wrote the Open entry
        assert (run_id, op) == ("run-a", "update") and at_open < head
        await w.aclose()
    assert _cache_writes(path) == [("run-a", "update", head)]


async def test_clean_close_writes_an_entry_the_open_folded_a_tail_onto(
        tmp_path: Path) -> None:
    """A writer that did not close cleanly (fenced) leaves a Run's entry behind its head;
    the next open folds the tail onto it, so the entry is not the Run's snapshot and that
    writer's close writes it at the head."""
    path = tmp_path / "s.sqlite3"
    await _cached_store(path)
    _audit_cache_writes(path)
    async with open_sqlite_store(path) as store:
        w1 = await store.open(SCOPE)
        await _commit(w1, "run-b", b.start_model((await w1.run_store().load("run-b")).state))
        w2 = await store.open(SCOPE)  # fences w1: its close writes nothing
        await w1.aclose()
        assert _cache_writes(path) == []
        head = w2.projection()["run-b"].position
        assert (await _cached(path))["run-b"].position < head
        await w2.aclose()
    assert _cache_writes(path) == [("run-b", "update", head)]


@pytest.mark.parametrize("entry", ["damaged", "missing"])
async def test_clean_close_rewrites_an_entry_the_open_could_not_use(
        tmp_path: Path, entry: str) -> None:
    """An entry the open refused (damaged) or did not find is not the Run's snapshot:
    the close writes it, and the next open loads it again."""
    path = tmp_path / "s.sqlite3"
    expected = await _cached_store(path)
    raw = _cache_rows(path)["run-b"]
    if entry == "damaged":
        _put_cache(path, "run-b", _DAMAGES["truncated"](raw))
    else:
        with _raw(path) as conn:
            conn.execute("DELETE FROM projection_cache WHERE run_id = 'run-b'")
    _audit_cache_writes(path)
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        assert w.projection() == expected
        await w.aclose()
    assert _cache_writes(path) == [
        ("run-b", "update" if entry == "damaged" else "insert", expected["run-b"].position)]
    assert _cache_rows(path)["run-b"] == raw


# -- damaged and forged cache entries at open (RUN-CMT-2) ---------------------------------


async def _cached_store(path: Path) -> dict[str, Any]:
    """Three active Runs cached at their heads by a clean close; their projection."""
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        for run_id in ("run-a", "run-b", "run-c"):
            await _create(w, run_id, "in-1")
            snap = await w.run_store().load(run_id)
            await _commit(w, run_id, b.prepare(snap.state, snap.position))
        expected = dict(w.projection())
        await w.aclose()  # a clean close: every entry at its Run's head
    assert {r: s.position for r, s in (await _cached(path)).items()} == {
        r: s.position for r, s in expected.items()}
    return expected


async def _cached(path: Path) -> dict[str, Any]:
    async with open_sqlite_store(path) as store:
        return dict(await store.cached_projection(SCOPE))


def _cache_rows(path: Path) -> dict[str, bytes]:
    with _raw(path) as conn:
        return {r: bytes(s) for r, s in conn.execute(
            "SELECT run_id, state FROM projection_cache WHERE scope = ?", (SCOPE,))}


def _put_cache(path: Path, run_id: str, state: bytes) -> None:
    with _raw(path) as conn:
        conn.execute("UPDATE projection_cache SET state = ? WHERE scope = ? AND run_id = ?",
                     (state, SCOPE, run_id))


_DAMAGES: dict[str, Callable[[bytes], bytes]] = {
    "truncated": lambda raw: raw[:-7],
    "a byte flipped inside the JSON": lambda raw: raw[:20] + bytes([raw[20] ^ 0x20]) + raw[21:],
    "an unknown key": lambda raw: raw[:-1] + b',"extra":1}',
    "an enum value edited": lambda raw: raw.replace(b'"active"', b'"actived"'),
    "a lone surrogate": lambda raw: raw.replace(b'"run-', b'"\\ud800run-', 1),
}


@pytest.mark.parametrize("damage", sorted(_DAMAGES))
async def test_damaged_cache_entry_is_refused_and_the_run_folded(
        tmp_path: Path, damage: str) -> None:
    """A cache entry that passes the ``c1:`` prefix but not the strict codec's rules is
    refused; the Run is folded from its log, so the reopened projection is the log's."""
    path = tmp_path / "s.sqlite3"
    expected = await _cached_store(path)
    raw = _cache_rows(path)["run-b"]
    damaged = _DAMAGES[damage](raw)
    assert damaged != raw and damaged.startswith(b"c1:")
    _put_cache(path, "run-b", damaged)
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        assert w.projection() == expected
        assert (await w.record("run-b")).state == expected["run-b"].state


@pytest.mark.parametrize("cell", ["text", "integer"])
async def test_a_cache_cell_of_another_type_is_refused_and_the_run_folded(
        tmp_path: Path, cell: str) -> None:
    """The helper's find: a cache cell holding TEXT (the entry's own characters) instead
    of a BLOB crashed the open with TypeError; it is now not a cache entry, and the Run
    is folded from its log. (An integer cell was already no entry — ``bytes(7)`` is seven
    NULs — and is pinned beside it; only the TEXT case fails without the fix.)"""
    path = tmp_path / "s.sqlite3"
    expected = await _cached_store(path)
    raw = _cache_rows(path)["run-b"]
    value: object = raw.decode("utf-8") if cell == "text" else 7
    with _raw(path) as conn:
        conn.execute("UPDATE projection_cache SET state = ? WHERE scope = ? AND run_id = ?",
                     (value, SCOPE, "run-b"))
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        assert w.projection() == expected
        assert (await w.record("run-b")).state == expected["run-b"].state


async def test_forged_valid_cache_entry_is_caught_by_record(tmp_path: Path) -> None:
    """A forged entry that the strict codec accepts is trusted by the open (the cache is
    not checked against the log there), and ``record`` — the authority — refuses the
    difference with ProjectionDivergenceError (RUN-CMT-2)."""
    from runx_actors.store._cache import decode_state, encode_state

    path = tmp_path / "s.sqlite3"
    expected = await _cached_store(path)
    state = decode_state(_cache_rows(path)["run-b"])
    assert state is not None and state == expected["run-b"].state
    _put_cache(path, "run-b", encode_state(attrs.evolve(state, model_steps=41)))
    async with open_sqlite_store(path) as store:
        w = await store.open(SCOPE)
        assert w.projection()["run-b"].state.model_steps == 41
        with pytest.raises(ProjectionDivergenceError):
            await w.record("run-b")
        assert (await w.record("run-a")).state == expected["run-a"].state
