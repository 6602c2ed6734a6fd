"""Loop features end to end (spec §8.3, scenarios 42-56).

Each test drives real Run actors (``open_runtime``) over the memory and the SQLite store
with the LocalExecutor and a scripted model. Assertions are on types, attributes, fact
sequences of the log, LoopResult dispositions and executor statistics; never on text.
"""

from __future__ import annotations

import attrs
import pytest
import trio
from runtime_harness import (
    RUN,
    SCOPE,
    GatedModel,
    Probe,
    RecordingBuilder,
    Sink,
    kinds,
    of_type,
    open_env,
    open_wrapped_env,
    probe_tool,
    start,
)

from runx_actors import effect
from runx_actors.executors import ToolError, ToolUnknownError, call_tools, reply, tool_call
from runx_actors.protocol import facts as F
from runx_actors.protocol.commit import CommitRequest, envelope
from runx_actors.protocol.errors import (
    DispatchRetryableError,
    ModelUnavailableError,
    StaleRuntimeError,
)
from runx_actors.protocol.plan import waiting_calls
from runx_actors.protocol.state import ModelStep, Open, ToolStep
from runx_actors.protocol.values import (
    FailureClass,
    ModelStepStatus,
    ResponsePolicy,
    RunReason,
    RunStatus,
    ToolCallStatus,
    ToolFailureOutcome,
)
from runx_actors.runtime import (
    EventKind,
    LoopDisposition,
    Settings,
    approve,
)
from runx_actors.testing import builders as b


async def _assert_idle(env) -> None:  # type: ignore[no-untyped-def]
    assert env.runtime.live_actors() == frozenset()  # INV-43


async def test_model_call_completes(store, autojump_clock) -> None:
    model = GatedModel([reply("hello", input_tokens=2, output_tokens=3)])
    async with open_env(store, model=model) as env:
        await env.app.create_run(RUN, ["hi"])
        result = await env.drive()

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None
        assert result.result.status is RunStatus.COMPLETED
        assert result.result.usage.total == 5
        assert kinds(await env.facts()) == [
            F.RunCreated, F.InputAccepted, F.ModelStepPrepared, F.ModelStepStarted,
            F.ModelStepCompleted, F.RunEnded,
        ]
        assert model.calls == 1
        assert env.local.statistics().accepted == 1
        await _assert_idle(env)


async def test_tool_round_trip_completes(store, autojump_clock) -> None:
    probe = Probe(result={"sum": 5})
    echo = probe_tool("echo", probe)
    model = GatedModel([
        call_tools(tool_call("echo", {"a": 2}), input_tokens=1, output_tokens=1),
        reply("5", input_tokens=1),
    ])
    async with open_env(store, tools=[echo], model=model) as env:
        await env.app.create_run(RUN, ["add"])
        builder = RecordingBuilder(env.app.builder)
        result = await env.drive(builder=builder)

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None and result.result.status is RunStatus.COMPLETED
        assert model.calls == 2
        assert probe.calls == 1 and probe.arguments == [{"a": 2}]
        assert result.result.usage.total == 3
        state = await env.state()
        assert state.usage.total == 3
        assert state.last_tool_step is not None
        assert [h.source_step for h in builder.hints] == ["", state.last_tool_step.id]
        facts = await env.facts()
        (opened,) = of_type(facts, F.ToolStepOpened)
        assert opened.step_id == state.last_tool_step.id
        assert len(of_type(facts, F.ToolCallStarted)) == 1
        assert len(of_type(facts, F.ToolCallCompleted)) == 1
        await _assert_idle(env)


async def test_known_tool_failure_continues(store, autojump_clock) -> None:
    probe = Probe(error=ToolError("not_found", "no such record"))
    lookup = probe_tool("lookup", probe)
    model = GatedModel([call_tools(tool_call("lookup", {"id": 7})), reply("sorry")])
    async with open_env(store, tools=[lookup], model=model) as env:
        await env.app.create_run(RUN, ["find 7"])
        result = await env.drive()

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None and result.result.status is RunStatus.COMPLETED
        assert model.calls == 2 and probe.calls == 1
        state = await env.state()
        assert state.last_tool_step is not None
        (call,) = state.last_tool_step.calls
        assert call.status is ToolCallStatus.FAILED
        assert call.failure is not None
        assert call.failure.outcome is ToolFailureOutcome.KNOWN
        assert call.failure.failure.class_ == "not_found"
        (failed,) = of_type(await env.facts(), F.ToolCallFailed)
        assert failed.outcome is ToolFailureOutcome.KNOWN and failed.effect == call.effect
        await _assert_idle(env)


async def test_unknown_tool_ref_continues(store, autojump_clock) -> None:
    model = GatedModel([call_tools(tool_call("not_offered", {})), reply("ok")])
    async with open_env(store, model=model) as env:
        await env.app.create_run(RUN, ["go"])
        result = await env.drive()

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None and result.result.status is RunStatus.COMPLETED
        facts = await env.facts()
        assert of_type(facts, F.ToolCallStarted) == []
        (failed,) = of_type(facts, F.ToolCallFailed)
        assert failed.effect == ""  # declined: no effect, no start (INV-22)
        assert failed.failure.class_ == FailureClass.TOOL_LOOKUP_FAILED
        assert failed.outcome is ToolFailureOutcome.KNOWN
        (opened,) = of_type(facts, F.ToolStepOpened)
        assert opened.calls[0].tool_ref == "not_offered"
        assert opened.calls[0].policy is ResponsePolicy.DIRECT_EXECUTION
        assert model.calls == 2
        assert env.local.statistics().accepted == 2  # the two model calls only
        await _assert_idle(env)


async def test_unknown_tool_outcome_continues(store, autojump_clock) -> None:
    probe = Probe(error=ToolUnknownError("timeout", "payment gateway silent"))
    pay = probe_tool("pay", probe)
    model = GatedModel([call_tools(tool_call("pay", {"amount": 3})), reply("checked")])
    async with open_env(store, tools=[pay], model=model) as env:
        await env.app.create_run(RUN, ["pay"])
        result = await env.drive()

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None and result.result.status is RunStatus.COMPLETED
        state = await env.state()
        assert state.last_tool_step is not None
        (call,) = state.last_tool_step.calls
        assert call.status is ToolCallStatus.FAILED
        assert call.failure is not None
        assert call.failure.outcome is ToolFailureOutcome.UNKNOWN
        assert call.failure.failure.class_ == FailureClass.EFFECT_UNKNOWN
        assert model.calls == 2 and probe.calls == 1
        await _assert_idle(env)


async def test_unknown_tool_outcome_leaves_sibling_running(store, autojump_clock) -> None:
    gate = trio.Event()
    flaky = Probe(error=ToolUnknownError("unavailable"))
    slow = Probe(gate=gate, result="slow done")
    tools = [probe_tool("flaky", flaky), probe_tool("slow", slow)]
    model = GatedModel([call_tools(tool_call("flaky"), tool_call("slow")), reply("done")])
    sink = Sink()
    async with open_env(store, tools=tools, model=model, sink=sink) as env:
        await env.app.create_run(RUN, ["both"])
        async with trio.open_nursery() as nursery:
            box = start(nursery, env.drive)
            await sink.wait_for(EventKind.TOOL_COMPLETED, 1)

            state = await env.state()
            assert state.status is RunStatus.ACTIVE
            first, second = state.current.calls  # type: ignore[union-attr]
            assert first.status is ToolCallStatus.FAILED
            assert first.failure is not None
            assert first.failure.outcome is ToolFailureOutcome.UNKNOWN
            assert second.status is ToolCallStatus.EXECUTING
            assert slow.running == 1
            assert not box.done.is_set()

            gate.set()
            await box.wait()
        assert box.error is None
        assert box.value.disposition is LoopDisposition.FINISHED
        state = await env.state()
        assert state.status is RunStatus.COMPLETED
        assert state.last_tool_step is not None
        assert [c.status for c in state.last_tool_step.calls] == [
            ToolCallStatus.FAILED, ToolCallStatus.COMPLETED]
        assert slow.calls == 1 and flaky.calls == 1
        await _assert_idle(env)


@pytest.mark.parametrize("refusals", [2, 3])
async def test_retryable_dispatch_refusal(store, autojump_clock, refusals: int) -> None:
    probe = Probe()
    tools = [probe_tool("work", probe)]
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    offers: list[effect.AssignmentKey] = []

    async def refuse(assignment: effect.Assignment) -> None:
        if isinstance(assignment.body, effect.ToolAssignment):
            offers.append(assignment.key)
            if len(offers) <= refusals:
                raise DispatchRetryableError("busy, try again")

    async with open_env(store, tools=tools, model=model, proxy=True) as env:
        env.executor.on_dispatch = refuse
        await env.app.create_run(RUN, ["work"])
        result = await env.drive()

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None and result.result.status is RunStatus.COMPLETED
        state = await env.state()
        assert state.last_tool_step is not None
        (call,) = state.last_tool_step.calls
        assert len(set(offers)) == 1  # every offer carried the same key
        if refusals < Settings().dispatch.offers:
            assert len(offers) == refusals + 1
            assert probe.calls == 1
            assert call.status is ToolCallStatus.COMPLETED
        else:
            assert len(offers) == Settings().dispatch.offers
            assert probe.calls == 0
            assert call.status is ToolCallStatus.FAILED
            assert call.failure is not None
            assert call.failure.outcome is ToolFailureOutcome.KNOWN
            assert call.failure.failure.class_ == FailureClass.EXECUTION_FAILED
        assert len(of_type(await env.facts(), F.ToolCallStarted)) == 1
        await _assert_idle(env)


async def test_cancel_stops_idle_run(store, autojump_clock) -> None:
    model = GatedModel([reply("never asked")])
    async with open_env(store, model=model) as env:
        await env.app.create_run(RUN, ["hi"])
        state = await env.state()
        assert isinstance(state.current, Open)

        committed = await env.app.cancel(RUN)
        assert kinds(committed.facts) == [F.RunEnded]
        result = await env.drive()

        assert result.disposition is LoopDisposition.FINISHED
        assert result.result is not None
        assert result.result.status is RunStatus.STOPPED
        assert result.result.reason is RunReason.CANCELLED
        assert result.result.uncertain_calls == ()
        assert result.result.uncertain_model == ""
        assert model.calls == 0
        assert env.local.statistics().accepted == 0
        await _assert_idle(env)


async def test_cancel_projects_executing_tool(store, autojump_clock) -> None:
    gate = trio.Event()
    probe = Probe(gate=gate)
    model = GatedModel([call_tools(tool_call("slow")), reply("never")])
    async with open_env(store, tools=[probe_tool("slow", probe)], model=model) as env:
        await env.app.create_run(RUN, ["go"])
        async with trio.open_nursery() as nursery:
            box = start(nursery, env.drive)
            await probe.started.wait()
            (started,) = of_type(await env.facts(), F.ToolCallStarted)

            committed = await env.app.cancel(RUN)
            assert kinds(committed.facts) == [F.ToolCallFailed, F.RunEnded]
            failed, ended = committed.facts
            assert failed.outcome is ToolFailureOutcome.UNKNOWN
            assert failed.effect == started.effect
            assert ended.end.uncertain_calls == (started.call_id,)

            gate.set()  # too late: the cancel reached the tool at the executor (RUN-ACT-4)
            await box.wait()
        assert box.error is None
        assert box.value.disposition is LoopDisposition.FINISHED
        assert box.value.result.status is RunStatus.STOPPED
        assert box.value.result.uncertain_calls == (started.call_id,)
        before = await env.facts()
        assert of_type(before, F.ToolCallCompleted) == []

        key = effect.AssignmentKey(SCOPE, RUN, started.effect)
        late = await env.local.get_outcome(key)  # never acknowledged: it was dropped
        assert isinstance(late.result, effect.Cancelled)  # RUN-ACT-4: the work was stopped
        dropped = await env.runtime.deliver(late)
        assert dropped.disposition is LoopDisposition.DROPPED
        assert await env.facts() == before
        assert model.calls == 1 and probe.calls == 1
        await _assert_idle(env)


async def test_cancel_projects_executing_model(store, autojump_clock) -> None:
    gate = trio.Event()
    model = GatedModel([reply("late")], gate=gate)
    async with open_env(store, model=model) as env:
        await env.app.create_run(RUN, ["go"])
        async with trio.open_nursery() as nursery:
            box = start(nursery, env.drive)
            await model.started.wait()
            step = (await env.state()).current
            assert isinstance(step, ModelStep) and step.status is ModelStepStatus.EXECUTING

            committed = await env.app.cancel(RUN)
            assert kinds(committed.facts) == [F.ModelStepFailed, F.RunEnded]
            failed, ended = committed.facts
            assert failed.effect == step.effect
            assert failed.failure.class_ == FailureClass.EFFECT_UNKNOWN
            assert ended.end.uncertain_model == step.id
            assert ended.end.reason is RunReason.CANCELLED
            gate.set()
            await box.wait()
        assert box.error is None
        assert box.value.result.status is RunStatus.STOPPED
        assert box.value.result.uncertain_model == step.id
        assert of_type(await env.facts(), F.ModelStepCompleted) == []
        await _assert_idle(env)


async def test_approval_waits_then_resumes(store, autojump_clock) -> None:
    probe = Probe(result="paid")
    pay = probe_tool("pay", probe, policy=ResponsePolicy.APPROVAL_REQUIRED)
    model = GatedModel([call_tools(tool_call("pay", {"amount": 10})), reply("paid")])
    async with open_env(store, tools=[pay], model=model) as env:
        await env.app.create_run(RUN, ["pay 10"])
        first = await env.drive()

        assert first.disposition is LoopDisposition.WAITING
        assert first.execution_recovery is False
        state = (await env.run_store.load(RUN)).state
        (request,) = waiting_calls(state)
        (call,) = state.current.calls  # type: ignore[union-attr]
        assert call.status is ToolCallStatus.WAITING and request.call_id == call.call_id
        assert of_type(await env.facts(), F.ToolCallStarted) == []
        assert probe.calls == 0

        command_id, command = b.approve(state, 0)
        wrong = attrs.evolve(command, response_digest="sha256:" + "0" * 64)
        position = (await env.run_store.load(RUN)).position
        with pytest.raises(StaleRuntimeError):
            await env.run_store.commit(CommitRequest(0, envelope(RUN, command_id, wrong)))
        assert (await env.run_store.load(RUN)).position == position

        approved = await approve(env.run_store, request)
        assert kinds(approved.facts) == [F.ToolCallApproved]
        (call,) = approved.snapshot.state.current.calls
        assert call.status is ToolCallStatus.PENDING

        second = await env.drive()
        assert second.disposition is LoopDisposition.FINISHED
        assert second.result is not None and second.result.status is RunStatus.COMPLETED
        assert probe.calls == 1 and model.calls == 2
        assert len(of_type(await env.facts(), F.ToolCallStarted)) == 1
        await _assert_idle(env)


async def test_approval_reject_is_permission_denied(store, autojump_clock) -> None:
    probe = Probe()
    pay = probe_tool("pay", probe, policy=ResponsePolicy.APPROVAL_REQUIRED)
    model = GatedModel([call_tools(tool_call("pay", {"amount": 10})), reply("ok")])
    async with open_env(store, tools=[pay], model=model) as env:
        await env.app.create_run(RUN, ["pay"])
        assert (await env.drive()).disposition is LoopDisposition.WAITING

        rejected = await env.app.reject(RUN, reason="no")
        assert kinds(rejected.facts) == [F.ToolCallFailed]
        (failed,) = rejected.facts
        assert failed.outcome is ToolFailureOutcome.KNOWN
        assert failed.failure.class_ == FailureClass.PERMISSION_DENIED
        assert failed.effect == ""
        state = await env.state()
        assert state.status is RunStatus.ACTIVE
        assert isinstance(state.current, Open)
        assert probe.calls == 0
        assert of_type(await env.facts(), F.ToolCallStarted) == []
        await _assert_idle(env)


async def test_approval_yields_after_direct_execution(store, autojump_clock) -> None:
    direct = Probe(result="looked up")
    guarded = Probe(result="paid")
    tools = [probe_tool("lookup", direct),
             probe_tool("pay", guarded, policy=ResponsePolicy.APPROVAL_REQUIRED)]
    model = GatedModel([call_tools(tool_call("pay", {"n": 1}), tool_call("lookup", {"n": 2})),
                        reply("done")])
    sink = Sink()
    async with open_env(store, tools=tools, model=model, sink=sink) as env:
        await env.app.create_run(RUN, ["both"])
        result = await env.drive()

        assert result.disposition is LoopDisposition.WAITING
        assert result.execution_recovery is False
        state = (await env.run_store.load(RUN)).state
        assert isinstance(state.current, ToolStep)
        pay_call, lookup_call = state.current.calls
        assert pay_call.status is ToolCallStatus.WAITING
        assert lookup_call.status is ToolCallStatus.COMPLETED
        assert direct.calls == 1 and guarded.calls == 0
        assert [e.call_id for e in sink.of(EventKind.TOOL_STARTED)] == [lookup_call.call_id]
        assert [e.call_id for e in sink.of(EventKind.TOOL_COMPLETED)] == [lookup_call.call_id]
        assert [r.call_id for r in waiting_calls(state)] == [pay_call.call_id]
        await _assert_idle(env)


async def test_catalog_resolve_error_leaves_run_active(store, autojump_clock) -> None:
    # open_runtime refuses an unserved default model at open (RUN-ACT-8): build the
    # runtime by hand to reach the drive-time refusal of a step that froze it
    async with open_wrapped_env(store, models={"other-model": GatedModel([reply("x")])}) as env:
        await env.create(RUN, "hi")
        with pytest.raises(ModelUnavailableError):
            await env.drive()

        state = await env.state()
        assert state.status is RunStatus.ACTIVE
        assert isinstance(state.current, ModelStep)
        assert state.current.status is ModelStepStatus.PREPARED
        facts = await env.facts()
        assert kinds(facts) == [F.RunCreated, F.InputAccepted, F.ModelStepPrepared]
        assert env.local.statistics().accepted == 0
        await _assert_idle(env)


async def test_context_cancel_before_run_leaves_run_active(store, autojump_clock) -> None:
    model = GatedModel([reply("never")])
    async with open_env(store, model=model) as env:
        await env.app.create_run(RUN, ["hi"])
        before = await env.facts()
        raised = False
        with trio.CancelScope() as scope:
            scope.cancel()
            try:
                await env.drive()
            except trio.Cancelled:
                raised = True
                raise
        assert raised and scope.cancelled_caught
        assert await env.facts() == before
        state = await env.state()
        assert state.status is RunStatus.ACTIVE and isinstance(state.current, Open)
        assert model.calls == 0
        await _assert_idle(env)
        # a later drive in a live scope still works
        result = await env.drive()
        assert result.disposition is LoopDisposition.FINISHED
        await _assert_idle(env)
