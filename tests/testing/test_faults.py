"""The fault-injecting wrappers of ``runx_actors.testing.faults`` (stores and executors)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
import trio.testing

from runx_actors import effect
from runx_actors.executors import (
    call_tools,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.protocol import commands as C
from runx_actors.protocol.commit import CommitRequest, CommitStatus, envelope
from runx_actors.protocol.errors import (
    DispatchRetryableError,
    DispatchUnknownError,
    OutcomeNotReadyError,
)
from runx_actors.protocol.values import ModelRequest, ModelResult, NewRun, RunStatus
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore
from runx_actors.testing import builders as b
from runx_actors.testing import executor_conformance as suite
from runx_actors.testing.faults import AmbiguousCommitError, FaultyExecutor, FaultyStore


def _always(_: Any) -> bool:
    return True


async def test_duplicated_dispatches_still_pass_the_executor_suite() -> None:
    """A dispatch delivered twice is one more idempotent re-dispatch (INV-36)."""
    def factory(tools: Any) -> Any:
        from contextlib import asynccontextmanager

        @asynccontextmanager
        async def cm() -> Any:
            async with open_local_executor(tools=list(tools)) as ex:
                faulty = FaultyExecutor(ex)
                faulty.duplicate_dispatch(_always, times=100)
                yield faulty

        return cm()

    for name in ("test_executor_dispatch_is_idempotent", "test_executor_abort_tombstones",
                 "test_executor_acknowledge", "test_executor_progress"):
        await suite.SCENARIOS[name](factory)


async def test_injected_dispatch_faults() -> None:
    probe = suite.Probe()
    async with open_local_executor(tools=probe.tools) as ex:
        faulty = FaultyExecutor(ex)
        assert isinstance(faulty, effect.Acknowledger | effect.ProgressPort)  # passes through
        a = probe.assignment(probe.count, {"x": 1})
        faulty.refuse_dispatch(lambda x: x.key == a.key)
        with pytest.raises(DispatchRetryableError):
            await faulty.dispatch(a)
        assert await ex.get_status(a.key) is effect.ExecutionStatus.NOT_FOUND  # never seen
        faulty.lose_dispatch_receipt(lambda x: x.key == a.key)
        with pytest.raises(DispatchUnknownError):
            await faulty.dispatch(a)  # accepted nevertheless
        outcome = await suite.outcome_of(faulty, a.key)
        await faulty.dispatch(a)  # the receipt was lost, the key is known: nothing new
        assert probe.starts == ["count"]
        faulty.flaky_reads(lambda k: k == a.key, times=2)
        for _ in range(2):
            with pytest.raises(OutcomeNotReadyError):
                await faulty.get_outcome(a.key)
        assert await faulty.get_outcome(a.key) == outcome
        assert faulty.dispatches == [a, a, a]


async def test_faulty_store_plan_applies_to_every_writer() -> None:
    store = FaultyStore(MemoryStore())
    first = await store.open("s")
    await first.create_run(NewRun("run-1"), [b.agent_input("in-1")], commit_id="create")
    snap = await first.run_store().load("run-1")
    store.plan.fail_after(lambda r: isinstance(r.envelope.command, C.PrepareModelRequest))
    second = await store.open("s")  # opened after the rule: shares it; fences `first`
    cid, cmd = b.prepare(snap.state, snap.position)
    request = CommitRequest(snap.position, envelope("run-1", cid, cmd))
    with pytest.raises(AmbiguousCommitError):
        await second.run_store().commit(request)
    assert (await second.run_store().commit(request)).status is CommitStatus.ALREADY_APPLIED
    assert store.writers == [first, second]
    assert store.plan.attempts == [request, request]


class _OneTool:
    async def complete(self, request: ModelRequest) -> ModelResult:
        done = any(m["role"] == "tool" for m in json.loads(request.body)["messages"])
        await trio.lowlevel.checkpoint()
        return reply("done") if done else call_tools(tool_call("count", {}))


async def test_runtime_survives_a_lost_dispatch_receipt() -> None:
    """RUN-EXE-3: DispatchUnknownError reaches the caller and leaves the call EXECUTING;
    the loop neither dispatches it again nor compensates on its own: driving again waits
    for execution recovery, and the tool (accepted by the executor) ran once."""
    runs: list[int] = []

    async def count() -> dict[str, int]:
        runs.append(1)
        await trio.lowlevel.checkpoint()
        return {"n": len(runs)}

    tool = python_tool(count, ref="count")
    async with open_local_executor(tools=[tool], models={"m": _OneTool()}) as ex:
        faulty = FaultyExecutor(ex)
        faulty.lose_dispatch_receipt(lambda a: a.kind == "tool")
        async with open_runtime(MemoryStore(), faulty, scope="s", model="m",
                                tools=[tool]) as rt:
            await rt.create_run("run-1", ["go"])
            with pytest.raises(DispatchUnknownError):
                await rt.drive("run-1")
            executing = (await rt.snapshot("run-1")).state.current
            assert [c.status.value for c in executing.calls] == ["executing"]
            with trio.fail_after(30):
                result = await rt.drive("run-1")
            snap = await rt.snapshot("run-1")
    assert snap.state.status is RunStatus.ACTIVE
    assert (result.disposition.value, result.reason) == ("waiting", "execution_recovery")
    assert runs == [1]
    assert sum(1 for a in faulty.dispatches if a.kind == "tool") == 1


async def test_faulty_run_store_batches() -> None:
    """RUN-CMT-9: the rules apply to a batch when any of its requests matches:
    fail_before writes nothing of it, fail_after commits all of it then raises (the
    batch replays), a delay holds the whole batch; a store without ``commit_batch``
    goes through ``store.base.commit_batch``'s one-by-one fallback."""
    from runx_actors.store.base import commit_batch
    from runx_actors.testing.conformance import batch_requests

    store = FaultyStore(MemoryStore())
    writer = await store.open("s")
    await writer.create_run(NewRun("r"), [b.agent_input("in-1")], commit_id="c")
    rs = writer.run_store()
    snap = await rs.load("r")
    chain = batch_requests("r", snap, lambda s: b.accept_input(s.state, "in-2"),
                           lambda s: b.prepare(s.state, s.position))
    is_prepare = lambda r: isinstance(r.envelope.command, C.PrepareModelRequest)  # noqa: E731
    reader = await store.reader("s")
    store.plan.fail_before(is_prepare)
    with pytest.raises(AmbiguousCommitError):
        await rs.commit_batch(chain)
    assert len(await reader.run_facts("r")) == 2, "fail_before wrote part of the batch"
    store.plan.fail_after(is_prepare)
    with pytest.raises(AmbiguousCommitError):
        await rs.commit_batch(chain)
    assert len(await reader.run_facts("r")) == 4, "fail_after did not commit the batch"
    again = await rs.commit_batch(chain)
    assert [r.status for r in again.results] == [CommitStatus.ALREADY_APPLIED] * 2
    assert store.plan.attempts == chain * 3

    gate = trio.Event()
    later = batch_requests("r", await rs.load("r"), lambda s: b.start_model(s.state))
    store.plan.delay(lambda r: r is later[0], gate)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(rs.commit_batch, later)
        await trio.testing.wait_all_tasks_blocked()
        assert len(await reader.run_facts("r")) == 4, "a delayed batch committed"
        gate.set()
    assert len(await reader.run_facts("r")) == 5

    class OneByOne:  # a third-party RunStore without commit_batch
        def __init__(self, inner: Any) -> None:
            self.inner = inner
            self.commits = 0

        async def commit(self, request: CommitRequest) -> Any:
            self.commits += 1
            return await self.inner.commit(request)

    plain = OneByOne(writer.inner.run_store())
    snap = await rs.load("r")
    cancel = CommitRequest(0, envelope("r", *b.cancel(snap.state, "cancelled")))
    late = CommitRequest(0, envelope("r", *b.accept_input(snap.state, "in-9")))
    result = await commit_batch(plain, [cancel, late, late])
    assert plain.commits == 2 and len(result.results) == 1
    assert result.results[0].snapshot.state.status is RunStatus.STOPPED
    assert type(result.error).__name__ == "RunTerminalError"
