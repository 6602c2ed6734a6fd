"""Loop internals, concurrency and recovery (spec §8.4, scenarios 57-79, 81-83, 87).

Scenarios 80 and 84-86 belong to the executor tests. Every test runs over the memory and
the SQLite store; "another owner" is a second ``store.open`` of the scope (a new writer
with a higher epoch) and takeover is ``recover_interrupted(writer, Reconciler(...))``.
"""

from __future__ import annotations

import pytest
import trio
from runtime_harness import (
    MODEL,
    RUN,
    SCOPE,
    GatedModel,
    GateRunStore,
    LosingRunStore,
    Probe,
    ProxyExecutor,
    RecordingBuilder,
    Sink,
    WrappedWriter,
    attempts_of,
    command_type,
    create,
    kinds,
    of_type,
    open_env,
    open_wrapped_env,
    probe_tool,
    start,
    transcript,
)

from runx_actors import effect
from runx_actors.executors import (
    ModelError,
    call_tools,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol.errors import (
    DispatchRejectedError,
    DispatchUnknownError,
    DriveCancelledError,
    EffectNotExecutingError,
    ExecutionNotFoundError,
    FrozenValueMissingError,
    ModelUnavailableError,
    OwnershipLostError,
    PrepareStalledError,
    RunAlreadyRunningError,
    RunNotFoundError,
    RuntimeClosedError,
    ValidationError,
)
from runx_actors.protocol.ids import derive_effect_id, derive_settlement_command_id
from runx_actors.protocol.state import ModelStep, Open
from runx_actors.protocol.values import (
    FailureClass,
    ModelStepStatus,
    RunReason,
    RunStatus,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolResult,
    ToolScheduling,
)
from runx_actors.runtime import (
    ActorRuntime,
    EventKind,
    LoopDisposition,
    Reconciler,
    Settings,
    TargetRequest,
    recover_interrupted,
)
from runx_actors.testing import builders as b

#: Mock seconds after which a test that should have finished is declared hung.
HANG = 600


def _key(effect_id: str, run_id: str = RUN, scope: str = SCOPE) -> effect.AssignmentKey:
    return effect.AssignmentKey(scope, run_id, effect_id)


async def _crashed_owner(store, executor, run_id: str, started: trio.Event) -> None:  # type: ignore[no-untyped-def]
    """An owner process that creates *run_id*, drives it until *started* is set, and
    then crashes: its runtime and its drive are cancelled together, the executor (a
    separate service) keeps whatever it was running."""
    from runx_actors.runtime import open_runtime

    with trio.CancelScope() as crash:
        async with open_runtime(store, executor, scope=SCOPE, model=MODEL) as app:
            await app.create_run(run_id, ["go"])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(app.drive, run_id)
                await started.wait()
                crash.cancel()
    assert crash.cancelled_caught


# -- 57-61: ownership and takeover ------------------------------------------------------


async def test_ownership_loss_cancels_workers_and_stops_settling(store, autojump_clock) -> None:
    gate_fast, gate_slow = trio.Event(), trio.Event()
    fast, slow = Probe(gate=gate_fast), Probe(gate=gate_slow)
    tools = [probe_tool("fast", fast), probe_tool("slow", slow)]
    model = GatedModel([call_tools(tool_call("fast"), tool_call("slow")), reply("x")])
    sink = Sink()
    with trio.fail_after(HANG):
        async with open_env(store, tools=tools, model=model, sink=sink) as env:
            await env.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, env.drive)
                await fast.started.wait()
                await slow.started.wait()
                started = of_type(await env.facts(), F.ToolCallStarted)
                assert len(started) == 2
                new_owner = await store.open(SCOPE)  # takeover: the old writer is fenced
                t0 = trio.current_time()
                gate_fast.set()  # the first Outcome's settlement is fenced
                await box.wait()
                assert trio.current_time() - t0 < 1.0  # promptly: not after slow ends
            assert isinstance(box.error, OwnershipLostError)
            assert env.runtime.live_actors() == frozenset()

            slow_key = _key(started[1].effect)
            assert "cancel_requested" in env.local.history(slow_key)
            assert isinstance((await env.local.get_outcome(slow_key)).result, effect.Cancelled)
            assert slow.calls == 1 and slow.finished == 1  # cancelled, not released
            assert sink.of(EventKind.TOOL_COMPLETED) == []
            facts = await env.facts()
            assert of_type(facts, F.ToolCallCompleted) == []
            assert of_type(facts, F.ToolCallFailed) == []

            # The new owner (a new process: its executor never saw these keys) disposes.
            async with open_local_executor(tools=tools, models={MODEL: model}) as fresh:
                assert await recover_interrupted(new_owner, Reconciler(fresh)) == 2
            after = (await new_owner.run_facts(RUN))[len(facts):]
            assert kinds(after) == [F.ToolCallFailed, F.ToolCallFailed]
            assert {f.effect for f in after} == {s.effect for s in started}
            assert all(f.outcome is ToolFailureOutcome.UNKNOWN for f in after)
            assert all(f.failure.class_ == FailureClass.EFFECT_UNKNOWN for f in after)
            await new_owner.aclose()


async def test_ownership_loss_on_model_settlement_is_not_retried(store, autojump_clock) -> None:
    gate = trio.Event()
    model = GatedModel([reply("late")], gate=gate)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, model=model) as env:
            await env.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, env.drive)
                await model.started.wait()
                step = (await env.run_store.load(RUN)).state.current
                assert isinstance(step, ModelStep)
                fence = await store.open(SCOPE)
                gate.set()
                await box.wait()
            assert isinstance(box.error, OwnershipLostError)
            settlement = derive_settlement_command_id(step.effect)
            assert attempts_of(env.faults, settlement) == 1
            assert of_type(await fence.run_facts(RUN), F.ModelStepCompleted) == []
            assert env.runtime.live_actors() == frozenset()
            await fence.aclose()


async def test_takeover_disposes_executing_call_and_fences_old_owner(store, autojump_clock) -> None:
    gate = trio.Event()
    old_probe, new_probe = Probe(gate=gate), Probe()
    old_model = GatedModel([call_tools(tool_call("slow"))])
    new_model = GatedModel([reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("slow", old_probe)], model=old_model) as old:
            await old.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, old.drive)
                await old_probe.started.wait()
                (started,) = of_type(await old.facts(), F.ToolCallStarted)
                key = _key(started.effect)

                new_tools = [probe_tool("slow", new_probe)]
                async with open_local_executor(tools=new_tools,
                                               models={MODEL: new_model}) as fresh:
                    writer = await store.open(SCOPE)
                    assert await recover_interrupted(writer, Reconciler(fresh)) == 1
                    assert await recover_interrupted(writer, Reconciler(fresh)) == 0
                    assert fresh.history(key) == ("execution_aborted",)  # INV-31
                    state = (await writer.record(RUN)).state
                    assert state.status is RunStatus.ACTIVE
                    assert isinstance(state.current, Open)
                    assert state.last_tool_step is not None
                    (call,) = state.last_tool_step.calls
                    assert call.status is ToolCallStatus.FAILED
                    assert call.failure is not None
                    assert call.failure.outcome is ToolFailureOutcome.UNKNOWN
                    assert call.effect == started.effect

                    async with ActorRuntime(writer, fresh) as rt:
                        result = await rt.run(RUN).drive(transcript(writer, store, new_tools))
                        assert result.disposition is LoopDisposition.FINISHED
                        assert result.result is not None
                        assert result.result.status is RunStatus.COMPLETED
                        assert rt.live_actors() == frozenset()
                    settled = await writer.run_facts(RUN)

                    gate.set()  # the old owner's tool ends; its settlement is fenced
                    await box.wait()
                    assert isinstance(box.error, OwnershipLostError)
                    assert await writer.run_facts(RUN) == settled
                    await writer.aclose()
            assert old_probe.calls == 1 and new_probe.calls == 0
            assert old.runtime.live_actors() == frozenset()


async def test_takeover_reattaches_running_attempt(store, autojump_clock) -> None:
    gate = trio.Event()
    model = GatedModel([reply("done")], gate=gate)
    with trio.fail_after(HANG):
        async with open_local_executor(models={MODEL: model}) as ex:
            await _crashed_owner(store, ex, RUN, model.started)
            writer = await store.open(SCOPE)
            before = await writer.run_facts(RUN)
            step = (await writer.record(RUN)).state.current
            assert isinstance(step, ModelStep) and step.status is ModelStepStatus.EXECUTING
            key = _key(step.effect)

            reconciler = Reconciler(ex)
            assert await recover_interrupted(writer, reconciler) == 0
            assert reconciler.kept == [key]
            assert await writer.run_facts(RUN) == before
            state = (await writer.record(RUN)).state
            assert state.current == step  # still EXECUTING under its original effect

            async with ActorRuntime(writer, ex) as rt:
                gate.set()
                outcome = await rt.watcher.await_outcome(key)
                result = await rt.deliver(outcome)
                assert result.disposition is LoopDisposition.FINISHED
                assert result.result is not None
                assert result.result.status is RunStatus.COMPLETED
                assert rt.live_actors() == frozenset()
            facts = await writer.run_facts(RUN)
            assert of_type(facts, F.ModelStepRecovered) == []
            (completed,) = of_type(facts, F.ModelStepCompleted)
            assert completed.effect == step.effect
            assert model.calls == 1
            assert ex.statistics().accepted == 1
            await writer.aclose()


async def test_takeover_disposes_when_attach_is_missing(store, autojump_clock) -> None:
    old_model = GatedModel([reply("never")], gate=trio.Event())
    new_model = GatedModel([reply("done")])
    with trio.fail_after(HANG):
        async with open_local_executor(models={MODEL: old_model}) as old_ex:
            await _crashed_owner(store, old_ex, RUN, old_model.started)
        async with open_local_executor(models={MODEL: new_model}) as fresh:
            writer = await store.open(SCOPE)
            step = (await writer.record(RUN)).state.current
            assert isinstance(step, ModelStep) and step.status is ModelStepStatus.EXECUTING
            assert await recover_interrupted(writer, Reconciler(fresh)) == 1

            state = (await writer.record(RUN)).state
            assert isinstance(state.current, Open)
            assert state.model_steps == 0
            recovered = of_type(await writer.run_facts(RUN), F.ModelStepRecovered)
            assert [(f.step_id, f.effect) for f in recovered] == [(step.id, step.effect)]

            async with ActorRuntime(writer, fresh) as rt:
                handle = rt.run(RUN)
                builder = transcript(writer, store)
                advanced = await handle.advance(builder)
                assert advanced.disposition is LoopDisposition.DISPATCHED
                (key,) = advanced.dispatched
                assert key != _key(step.effect)
                new_step = (await writer.record(RUN)).state.current
                assert isinstance(new_step, ModelStep) and new_step.id != step.id
                assert key == _key(new_step.effect)
                result = await handle.deliver(await rt.watcher.await_outcome(key))
                assert result.disposition is LoopDisposition.FINISHED
                assert rt.live_actors() == frozenset()
            assert new_model.calls == 1
            await writer.aclose()


# -- 62-66: settings, drivers, windows ----------------------------------------------------


async def test_settings_leave_empty_scheduling_mode(store, autojump_clock) -> None:
    assert Settings().scheduling == ToolScheduling("", 0)
    gates = trio.Event(), trio.Event()
    probes = Probe(gate=gates[0]), Probe(gate=gates[1])
    tools = [probe_tool("one", probes[0]), probe_tool("two", probes[1])]
    model = GatedModel([call_tools(tool_call("one"), tool_call("two")), reply("ok")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=tools, model=model) as env:
            await env.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, env.drive)
                await probes[0].started.wait()
                await probes[1].started.wait()  # both at once: "" acts as parallel
                for gate in gates:
                    gate.set()
                await box.wait()
            assert box.value.disposition is LoopDisposition.FINISHED
            (opened,) = of_type(await env.facts(), F.ToolStepOpened)
            assert opened.scheduling.mode == ""
            assert opened.scheduling == ToolScheduling("", 0)
            assert env.runtime.live_actors() == frozenset()


async def test_second_driver_of_same_run_is_refused(store, autojump_clock) -> None:
    gate = trio.Event()
    probe = Probe(gate=gate)
    model = GatedModel([call_tools(tool_call("slow")), reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("slow", probe)], model=model) as env:
            await env.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, env.drive)
                await probe.started.wait()
                with pytest.raises(RunAlreadyRunningError):
                    await env.drive()
                with pytest.raises(RunAlreadyRunningError):
                    await env.advance()

                (started,) = of_type(await env.facts(), F.ToolCallStarted)
                outcome = effect.Outcome(_key(started.effect), effect.ToolExecutionSucceeded(
                    ToolResult('"from elsewhere"')))
                delivered = await env.handle().deliver(outcome)  # queued, then served
                assert delivered.disposition is LoopDisposition.DELIVERED
                assert not box.done.is_set()
                state = (await env.run_store.load(RUN)).state
                assert isinstance(state.current, Open)  # the call is settled
                gate.set()  # the executor's own Outcome arrives later: dropped
                await box.wait()
            assert box.error is None
            assert box.value.disposition is LoopDisposition.FINISHED
            assert len(of_type(await env.facts(), F.ToolCallCompleted)) == 1
            assert probe.calls == 1
            assert env.runtime.live_actors() == frozenset()


async def test_model_catalog_error_recovers_with_fresh_runtime(store, autojump_clock) -> None:
    with trio.fail_after(HANG):
        # open_runtime refuses an unserved default model at open (RUN-ACT-8): the
        # runtime is built by hand to reach the drive-time refusal
        async with open_wrapped_env(store, models={"other": GatedModel([reply("x")])}) as broken:
            await broken.create()
            with pytest.raises(ModelUnavailableError):
                await broken.drive()
            assert broken.runtime.live_actors() == frozenset()
        model = GatedModel([reply("done")])
        async with open_env(store, model=model) as env:
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None and result.result.status is RunStatus.COMPLETED
            facts = await env.facts()
            assert kinds(facts) == [F.RunCreated, F.InputAccepted, F.ModelStepPrepared,
                                    F.ModelStepStarted, F.ModelStepCompleted, F.RunEnded]
            assert model.calls == 1
            assert env.runtime.live_actors() == frozenset()


async def test_parallel_bounded(store, autojump_clock) -> None:
    probe = Probe(hold=1.0)
    model = GatedModel([call_tools(*(tool_call("work", {"n": i}) for i in range(4))),
                        reply("done")])
    settings = Settings(scheduling=ToolScheduling("parallel", 2))
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("work", probe)], model=model,
                            settings=settings) as env:
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert probe.calls == 4
            assert probe.peak == 2
            (opened,) = of_type(await env.facts(), F.ToolStepOpened)
            assert opened.scheduling == ToolScheduling("parallel", 2)
            assert env.runtime.live_actors() == frozenset()


async def test_tool_start_stale_is_not_an_error(store, autojump_clock) -> None:
    probe = Probe()
    tools = [probe_tool("work", probe)]
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    # unfused (RUN-LOP-11): a fused start is committed with the model's result, so
    # nobody can settle the call between them; the race needs the separate start
    settings = Settings(fused_commits=False)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, proxy=True,
                                    settings=settings) as env:
            declined: list[str] = []

            async def race(assignment: effect.Assignment) -> None:
                # Between the loop's load and its StartToolCall, someone else settles
                # the call: the start is refused as stale.
                if isinstance(assignment.body, effect.ToolAssignment) and not declined:
                    state = (await env.run_store.load(RUN)).state
                    command_id, command = b.decline(state, assignment.call_id,
                                                    failure_class="invalid_arguments")
                    await env.run_store.inner.commit(_request(state, command_id, command))
                    declined.append(assignment.call_id)

            env.executor.on_validate = race
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None and result.result.status is RunStatus.COMPLETED
            starts = [r for r in env.faults.attempts if command_type(r) == "StartToolCall"]
            assert len(starts) == 1  # attempted once, refused, not replayed
            facts = await env.facts()
            assert of_type(facts, F.ToolCallStarted) == []
            (failed,) = of_type(facts, F.ToolCallFailed)
            assert failed.call_id == declined[0] and failed.effect == ""
            assert probe.calls == 0 and env.executor.tool_dispatches() == []
            assert env.runtime.live_actors() == frozenset()


def _request(state, command_id, command):  # type: ignore[no-untyped-def]
    from runx_actors.protocol.commit import CommitRequest, envelope

    return CommitRequest(0, envelope(state.run_id, command_id, command))


# -- 67-70: lost responses, malformed results, cancellation ---------------------------------


async def test_start_replays_after_two_lost_responses(store, autojump_clock) -> None:
    model = GatedModel([reply("done")])
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, model=model, proxy=True) as env:
            env.faults.fail_after(lambda r: isinstance(r.envelope.command,
                                                       C.PrepareModelRequest))
            env.faults.fail_after(lambda r: isinstance(r.envelope.command,
                                                       C.StartModelExecution))
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            facts = await env.facts()
            assert len(of_type(facts, F.ModelStepPrepared)) == 1
            (started,) = of_type(facts, F.ModelStepStarted)
            by_type = [command_type(r) for r in env.faults.attempts]
            assert by_type.count("PrepareModelRequest") == 2
            assert by_type.count("StartModelExecution") == 2
            prepare_ids = {r.envelope.id for r in env.faults.attempts
                           if command_type(r) == "PrepareModelRequest"}
            assert len(prepare_ids) == 1  # the replay used the same command id
            assert len(env.executor.model_dispatches()) == 1
            assert env.executor.model_dispatches()[0].effect == started.effect
            assert model.calls == 1
            assert env.local.statistics().accepted == 1
            assert env.runtime.live_actors() == frozenset()


async def test_settlement_replays_without_repeating_tool(store, autojump_clock) -> None:
    probe = Probe(result=42)
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    tools = [probe_tool("work", probe)]
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model) as env:
            env.faults.fail_after(lambda r: isinstance(r.envelope.command, C.SubmitToolResult))
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            facts = await env.facts()
            (started,) = of_type(facts, F.ToolCallStarted)
            assert len(of_type(facts, F.ToolCallCompleted)) == 1
            settlement = derive_settlement_command_id(started.effect)
            assert attempts_of(env.faults, settlement) == 2
            assert probe.calls == 1
            key = _key(started.effect)
            assert env.local.history(key).count("execution_running") == 1
            assert env.local.history(key).count("outcome_acknowledged") == 1
            assert env.runtime.live_actors() == frozenset()


async def test_malformed_model_result_disposition_fails_run(store, autojump_clock) -> None:
    model = GatedModel([ModelError(effect.FailureCode.MALFORMED_RESULT, "bad json")],
                       repeat_last=True)
    with trio.fail_after(HANG):
        async with open_env(store, model=model,
                            settings=Settings(malformed_retries=2)) as env:
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None
            assert result.result.status is RunStatus.FAILED
            assert result.result.reason is RunReason.MALFORMED_MODEL_RESULT
            assert result.result.failure is not None
            assert result.result.failure.class_ == FailureClass.MALFORMED_MODEL_RESULT
            assert model.calls == 3
            facts = await env.facts()
            (prepared,) = of_type(facts, F.ModelStepPrepared)
            started = of_type(facts, F.ModelStepStarted)
            assert [s.effect for s in started] == [
                derive_effect_id(RUN, prepared.step_id, "", n) for n in range(3)]
            rejected = of_type(facts, F.ModelStepRejected)
            assert [r.effect for r in rejected] == [s.effect for s in started]
            assert isinstance(facts[-1], F.RunEnded)
            assert env.runtime.live_actors() == frozenset()


async def test_mid_execution_cancel_recovers_model_step(store, autojump_clock) -> None:
    gate = trio.Event()
    model = GatedModel([reply("done")], gate=gate)
    with trio.fail_after(HANG):
        async with open_env(store, model=model) as env:
            await env.create()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(env.drive)
                    await model.started.wait()
                    step = (await env.run_store.load(RUN)).state.current
                    assert isinstance(step, ModelStep)
                    scope.cancel()
            assert scope.cancelled_caught
            assert env.runtime.live_actors() == frozenset()
            key = _key(step.effect)
            assert isinstance((await env.local.get_outcome(key)).result
                              if not env.local.history(key).count("outcome_acknowledged")
                              else effect.Cancelled(), effect.Cancelled)
            facts = await env.facts()
            assert kinds(facts)[-2:] == [F.ModelStepStarted, F.ModelStepRecovered]
            state = await env.state()
            assert isinstance(state.current, Open) and state.model_steps == 0
            assert state.status is RunStatus.ACTIVE

            gate.set()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None and result.result.status is RunStatus.COMPLETED
            assert model.calls == 2
            assert len(of_type(await env.facts(), F.ModelStepPrepared)) == 2
            assert env.runtime.live_actors() == frozenset()


# -- 71-72: targets ---------------------------------------------------------------------


async def test_target_resolved_per_effect(store, autojump_clock) -> None:
    requests: list[TargetRequest] = []

    async def resolver(request: TargetRequest) -> None:
        requests.append(request)
        return None

    probe = Probe()
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("work", probe)], model=model,
                            settings=Settings(target_resolver=resolver)) as env:
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            facts = await env.facts()
            starts = [f for f in facts if isinstance(f, F.ModelStepStarted | F.ToolCallStarted)]
            assert [r.kind for r in requests] == ["model", "tool", "model"]
            assert [r.effect for r in requests] == [f.effect for f in starts]
            assert all(r.session == SCOPE and r.run_id == RUN for r in requests)
            assert requests[0].model == MODEL and requests[0].call_id == ""
            assert requests[1].tool_ref == "work"
            assert requests[1].call_id == starts[1].call_id
            assert requests[1].step_id == starts[1].step_id
            assert env.runtime.live_actors() == frozenset()


async def test_advance_copies_opaque_target_into_assignment(store, autojump_clock) -> None:
    target = effect.TargetRef("workspace", "ws-opaque-17")
    seen: list[object] = []

    async def resolver(request: TargetRequest) -> effect.TargetRef | None:
        return target if request.kind == "tool" else None

    async def work(context, **_: object) -> str:  # type: ignore[no-untyped-def]
        seen.append(context.target)
        return "ok"

    tool = python_tool(work, ref="work", context=True)
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[tool], model=model, proxy=True,
                            settings=Settings(target_resolver=resolver)) as env:
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            (dispatched,) = env.executor.tool_dispatches()
            assert dispatched.target == target
            assert [a.target for a in env.executor.model_dispatches()] == [None, None]
            assert seen == [target]
            facts = await env.facts()
            assert target.id not in repr(facts)  # the target enters no fact
            assert env.runtime.live_actors() == frozenset()


# -- 73-79: advance, deliver, read errors ---------------------------------------------------


async def test_advance_dispatches_and_deliver_settles(store, autojump_clock) -> None:
    model = GatedModel([reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, model=model) as env:
            await env.create()
            first = await env.advance()
            assert first.disposition is LoopDisposition.DISPATCHED
            (key,) = first.dispatched
            assert env.runtime.live_actors() == frozenset()
            again = await env.advance()
            assert again.disposition is LoopDisposition.WAITING
            assert again.execution_recovery is True
            assert again.reason == "execution_recovery"
            outcome = await env.runtime.watcher.await_outcome(key)
            result = await env.handle().deliver(outcome)
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None and result.result.status is RunStatus.COMPLETED
            assert env.local.history(key).count("outcome_acknowledged") == 1
            assert model.calls == 1
            assert env.runtime.live_actors() == frozenset()


async def test_outcome_read_error_preserves_executing_step(store, autojump_clock) -> None:
    model = GatedModel([reply("done")])
    reads: list[effect.AssignmentKey] = []

    async def flaky(key: effect.AssignmentKey) -> None:
        reads.append(key)
        if len(reads) <= 3:
            raise OSError("connection reset")  # transient: retried silently
        raise ExecutionNotFoundError("evicted", key=key)

    with trio.fail_after(HANG):
        async with open_env(store, model=model, proxy=True) as env:
            env.executor.on_get_outcome = flaky
            await env.create()
            with pytest.raises(ExecutionNotFoundError):
                await env.drive()
            assert len(reads) == 4
            facts = await env.facts()
            assert isinstance(facts[-1], F.ModelStepStarted)
            state = await env.state()
            assert isinstance(state.current, ModelStep)
            assert state.current.status is ModelStepStatus.EXECUTING
            assert state.status is RunStatus.ACTIVE
            assert env.runtime.live_actors() == frozenset()


async def test_deliver_drops_stale_outcome(store, autojump_clock) -> None:
    probe = Probe()
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    tools = [probe_tool("work", probe)]
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model) as env:
            await env.create()
            handle = env.handle()
            (model_key,) = (await env.advance()).dispatched
            model_outcome = await env.runtime.watcher.await_outcome(model_key)
            assert (await handle.deliver(model_outcome)).disposition is LoopDisposition.DELIVERED
            (tool_key,) = (await env.advance()).dispatched

            async def dropped(outcome: effect.Outcome) -> None:
                attempts, facts = len(env.faults.attempts), await env.facts()
                result = await env.runtime.deliver(outcome)
                assert result.disposition is LoopDisposition.DROPPED
                assert len(env.faults.attempts) == attempts  # no commit at all
                assert await env.facts() == facts

            succeeded = effect.ToolExecutionSucceeded(ToolResult('"x"'))
            await dropped(model_outcome)  # a settled effect
            await dropped(effect.Outcome(_key("e-unknown"), succeeded))  # an unknown effect
            await dropped(effect.Outcome(_key(tool_key.effect, scope="other"), succeeded))
            await dropped(effect.Outcome(_key(tool_key.effect, run_id="run-x"), succeeded))

            tool_outcome = await env.runtime.watcher.await_outcome(tool_key)
            assert (await handle.deliver(tool_outcome)).disposition is LoopDisposition.DELIVERED
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            await dropped(tool_outcome)  # an ended Run
            await dropped(model_outcome)
            assert env.runtime.live_actors() == frozenset()


async def _executing_model(env) -> effect.AssignmentKey:  # type: ignore[no-untyped-def]
    await env.create()
    result = await env.advance()
    assert result.disposition is LoopDisposition.DISPATCHED
    (key,) = result.dispatched
    return key  # type: ignore[no-any-return]


async def test_deliver_cancelled_model_recovers(store, autojump_clock) -> None:
    model = GatedModel([reply("never")], gate=trio.Event())
    with trio.fail_after(HANG):
        async with open_env(store, model=model) as env:
            key = await _executing_model(env)
            result = await env.handle().deliver(effect.Outcome(key, effect.Cancelled("stop")))
            assert result.disposition is LoopDisposition.DELIVERED
            facts = await env.facts()
            assert isinstance(facts[-1], F.ModelStepRecovered)
            assert facts[-1].effect == key.effect
            state = await env.state()
            assert isinstance(state.current, Open) and state.model_steps == 0
            assert env.runtime.live_actors() == frozenset()


async def test_deliver_missing_frozen_body_recovers_and_raises(store, autojump_clock) -> None:
    model = GatedModel([reply("never")], gate=trio.Event())
    with trio.fail_after(HANG):
        async with open_env(store, model=model) as env:
            key = await _executing_model(env)
            outcome = effect.Outcome(key, effect.ModelFailed(
                effect.FailureCode.FROZEN_VALUE_MISSING, "gone"))
            with pytest.raises(FrozenValueMissingError) as caught:
                await env.handle().deliver(outcome)
            assert caught.value.result.disposition is LoopDisposition.DELIVERED
            facts = await env.facts()
            assert isinstance(facts[-1], F.ModelStepRecovered)
            state = await env.state()
            assert isinstance(state.current, Open) and state.model_steps == 0
            assert env.runtime.live_actors() == frozenset()


@pytest.mark.parametrize("detected_by", ["loop", "executor"])
async def test_drive_stops_after_one_missing_body_recovery(store, autojump_clock,
                                                           detected_by: str) -> None:
    if detected_by == "loop":
        model = GatedModel([reply("never")])
        wrap = lambda writer: WrappedWriter(writer, LosingRunStore(writer.run_store()))  # noqa: E731
    else:
        model = GatedModel([ModelError(effect.FailureCode.FROZEN_VALUE_MISSING, "lost")],
                           repeat_last=True)
        wrap = None
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, model=model, wrap=wrap) as env:
            await env.create()
            with pytest.raises(FrozenValueMissingError):
                await env.drive()
            facts = await env.facts()
            assert len(of_type(facts, F.ModelStepRecovered)) == 1
            assert len(of_type(facts, F.ModelStepPrepared)) == 1
            assert isinstance(facts[-1], F.ModelStepRecovered)
            assert model.calls == (0 if detected_by == "loop" else 1)
            state = await env.state()
            assert isinstance(state.current, Open) and state.status is RunStatus.ACTIVE
            assert env.runtime.live_actors() == frozenset()


async def test_model_completion_withdraws_on_unknown(store, autojump_clock) -> None:
    model = GatedModel([reply("never")], gate=trio.Event())
    with trio.fail_after(HANG):
        async with open_env(store, model=model) as env:
            key = await _executing_model(env)
            result = await env.runtime.deliver(effect.Outcome(key, effect.Unknown("lost")))
            assert result.disposition is LoopDisposition.DELIVERED
            facts = await env.facts()
            assert isinstance(facts[-1], F.ModelStepRecovered)
            assert of_type(facts, F.ModelStepFailed) == []
            state = await env.state()
            assert state.status is RunStatus.ACTIVE
            assert isinstance(state.current, Open) and state.model_steps == 0
            assert env.runtime.live_actors() == frozenset()


# -- 81-83, 87 -----------------------------------------------------------------------------


async def test_run_finished_emitted(store, autojump_clock) -> None:
    sink = Sink()
    probe = Probe()
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("work", probe)], model=model) as env:
            await env.create()
            result = await env.handle().drive(env.builder, sink=sink)
            assert result.disposition is LoopDisposition.FINISHED
            (finished,) = sink.of(EventKind.RUN_FINISHED)
            assert finished.run_id == RUN and finished.session == SCOPE
            assert finished.payload is not None
            assert sink.events[-1] is finished
            committed = sink.of(EventKind.AGENT_COMMITTED)
            assert len({e.command_id for e in committed}) == len(committed)
            assert [f for e in committed for f in e.committed] == list(
                (await env.facts())[2:])  # every loop commit, in log order
            assert env.runtime.live_actors() == frozenset()


async def test_aliased_tool_ref_executes(store, autojump_clock) -> None:
    probe = Probe(result="found")
    search = probe_tool("web.search.v2", probe, name="search")
    model = GatedModel([call_tools(tool_call("search", {"q": "trio"})), reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[search], model=model, proxy=True) as env:
            await env.create()
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            (opened,) = of_type(await env.facts(), F.ToolStepOpened)
            (binding,) = opened.calls
            assert binding.tool_ref == "web.search.v2"
            assert binding.definition_digest == search.definition_digest
            (dispatched,) = env.executor.tool_dispatches()
            assert dispatched.body.tool_ref == "web.search.v2"
            assert probe.calls == 1 and probe.arguments == [{"q": "trio"}]
            state = await env.state()
            assert state.last_tool_step is not None
            assert state.last_tool_step.calls[0].status is ToolCallStatus.COMPLETED
            assert env.runtime.live_actors() == frozenset()


async def test_nil_model_result_fails_run(store, autojump_clock) -> None:
    model = GatedModel([reply("never")], gate=trio.Event())
    with trio.fail_after(HANG):
        async with open_env(store, model=model) as env:
            key = await _executing_model(env)
            result = await env.handle().deliver(effect.Outcome(key, None))
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None
            assert result.result.status is RunStatus.FAILED
            assert result.result.failure is not None
            assert result.result.failure.class_ == FailureClass.PROVIDER_FAILURE
            facts = await env.facts()
            assert kinds(facts)[-2:] == [F.ModelStepFailed, F.RunEnded]
            assert facts[-2].failure.class_ == FailureClass.PROVIDER_FAILURE
            assert env.runtime.live_actors() == frozenset()


async def test_runtime_releases_slots(store, autojump_clock) -> None:
    gate = trio.Event()
    probe = Probe(gate=gate)

    def respond(request):  # type: ignore[no-untyped-def]
        # each Run: first ask for the tool, then answer once its result is in
        if '"role":"tool"' in request.body:
            return reply("done")
        return call_tools(tool_call("slow"))

    models = {MODEL: GatedModel([respond], repeat_last=True)}
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("slow", probe)], models=models) as env:
            runtime = env.runtime
            runs = ["run-a", "run-b", "run-c"]
            for run_id in runs:
                await env.create(run_id)
            assert runtime.live_actors() == frozenset()

            # advance and deliver, one at a time
            (key,) = (await env.advance("run-a")).dispatched
            assert runtime.live_actors() == frozenset()
            outcome = await runtime.watcher.await_outcome(key)
            assert (await runtime.deliver(outcome)).disposition is LoopDisposition.DELIVERED
            assert runtime.live_actors() == frozenset()

            # concurrent drives, a second driver refused, deliveries while driving
            async with trio.open_nursery() as nursery:
                boxes = [start(nursery, env.drive, run_id) for run_id in runs]
                await probe.wait_calls(3)
                assert runtime.live_actors() == frozenset(runs)
                with pytest.raises(RunAlreadyRunningError):
                    await env.drive("run-b")
                stray = effect.Outcome(_key("e-none", "run-c"), effect.Unknown(""))
                assert (await runtime.deliver(stray)).disposition is LoopDisposition.DROPPED
                env.handle("run-c").cancel_drive()
                gate.set()
                for box in boxes:
                    await box.wait()
            assert [type(box.error) for box in boxes] == [type(None), type(None),
                                                          DriveCancelledError]
            assert runtime.live_actors() == frozenset()

            # errors release the slot too
            with pytest.raises(RunNotFoundError):
                await env.drive("run-missing")
            missing = effect.Outcome(_key("e-x", "run-missing"), effect.Unknown(""))
            assert (await runtime.deliver(missing)).disposition is LoopDisposition.DROPPED
            assert runtime.live_actors() == frozenset()

            # a drive cancelled by its caller
            with trio.CancelScope() as scope:
                scope.cancel()
                await env.drive("run-c")
            assert runtime.live_actors() == frozenset()
            assert runtime.statistics() == ()


# -- §5 behaviours the numbered scenarios leave implicit ------------------------------------


async def test_advance_caller_cancel_settles_what_it_dispatched(store, autojump_clock) -> None:
    """§5.5: a cancelled advance starts no further call; what it already dispatched is
    cancelled at the executor and its Outcome settled before Cancelled is re-raised."""
    held, release = trio.Event(), trio.Event()
    probes = Probe(), Probe()
    tools = [probe_tool("one", probes[0]), probe_tool("two", probes[1])]
    model = GatedModel([call_tools(tool_call("one"), tool_call("two")), reply("x")])

    async def hold_first_tool(assignment: effect.Assignment) -> None:
        if isinstance(assignment.body, effect.ToolAssignment) and not held.is_set():
            held.set()
            await release.wait()

    with trio.fail_after(HANG):
        async with open_env(store, tools=tools, model=model, proxy=True) as env:
            await env.create()
            (key,) = (await env.advance()).dispatched
            await env.handle().deliver(await env.runtime.watcher.await_outcome(key))
            env.executor.on_dispatch = hold_first_tool
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(env.advance)
                    await held.wait()  # inside the shielded start section of call one
                    scope.cancel()
                    release.set()
            assert scope.cancelled_caught
            assert env.runtime.live_actors() == frozenset()
            facts = await env.facts()
            (started,) = of_type(facts, F.ToolCallStarted)  # call two never started
            (failed,) = of_type(facts, F.ToolCallFailed)
            assert failed.effect == started.effect
            assert failed.outcome is ToolFailureOutcome.UNKNOWN  # settled Cancelled
            assert "cancel_requested" in env.local.history(_key(started.effect))
            state = await env.state()
            assert [c.status for c in state.current.calls] == [  # type: ignore[union-attr]
                ToolCallStatus.FAILED, ToolCallStatus.PENDING]


async def test_drain_timeout_releases_caller_while_actor_drains(store, autojump_clock) -> None:
    """§5.9 D-1: when the effect ignores the cancel, the caller is released after
    ``drain_timeout``; the actor keeps draining, a new driver is refused meanwhile, and
    the late Outcome is still settled."""
    gate = trio.Event()
    probe = Probe(gate=gate)
    model = GatedModel([call_tools(tool_call("stubborn")), reply("done")])

    async def ignore_cancel(key: effect.AssignmentKey) -> None:
        await trio.lowlevel.checkpoint()

    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("stubborn", probe)], model=model,
                            proxy=True, settings=Settings(drain_timeout=5.0)) as env:
            env.executor.cancel = ignore_cancel
            await env.create()
            with trio.CancelScope() as scope:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(env.drive)
                    await probe.started.wait()
                    t0 = trio.current_time()
                    scope.cancel()
            assert 5.0 <= trio.current_time() - t0 < 6.0
            assert env.runtime.live_actors() == frozenset({RUN})  # still draining
            with pytest.raises(RunAlreadyRunningError):
                await env.drive()
            gate.set()
            while env.runtime.live_actors():
                await trio.sleep(1.0)
            assert len(of_type(await env.facts(), F.ToolCallCompleted)) == 1
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert env.runtime.live_actors() == frozenset()


async def test_settle_timeout_leaves_effect_executing(store, autojump_clock) -> None:
    """§5.4 D-2: a hung settlement commit ends the drive with the typed
    SettleTimeoutError (also a trio.TooSlowError; RUN-ACT-3) after ``settle_timeout``; the
    step stays EXECUTING for recovery to decide."""
    from runx_actors.protocol.errors import SettleTimeoutError

    model = GatedModel([reply("done")])

    def wrap(writer):  # type: ignore[no-untyped-def]
        return WrappedWriter(writer, GateRunStore(writer.run_store()))

    async def hang(request) -> None:  # type: ignore[no-untyped-def]
        if command_type(request) == "SubmitModelResult":
            await trio.sleep_forever()

    with trio.fail_after(HANG):
        async with open_wrapped_env(store, model=model, wrap=wrap,
                                    settings=Settings(settle_timeout=3.0)) as env:
            env.faults.before = hang
            await env.create()
            t0 = trio.current_time()
            with pytest.raises(SettleTimeoutError) as caught:
                await env.drive()
            assert isinstance(caught.value, trio.TooSlowError)
            assert "settle_timeout (3 s)" in str(caught.value)
            assert 3.0 <= trio.current_time() - t0 < 4.0
            state = await env.state()
            assert isinstance(state.current, ModelStep)
            assert state.current.status is ModelStepStatus.EXECUTING
            assert (await env.advance()).execution_recovery is True
            assert env.runtime.live_actors() == frozenset()


async def test_dispatch_unknown_is_raised_after_the_batch_settles(store, autojump_clock) -> None:
    """§5.7 D-4: call two's dispatch is unknown; call one (dispatched earlier in the
    batch) is still awaited and settled, then the drive raises DispatchUnknownError and
    call two stays EXECUTING (needs recovery)."""
    probes = Probe(), Probe()
    tools = [probe_tool("one", probes[0]), probe_tool("two", probes[1])]
    model = GatedModel([call_tools(tool_call("one"), tool_call("two")), reply("x")])

    async def lose_two(assignment: effect.Assignment) -> None:
        if isinstance(assignment.body, effect.ToolAssignment) and \
                assignment.body.tool_ref == "two":
            raise DispatchUnknownError("no answer", dispatched=())

    with trio.fail_after(HANG):
        async with open_env(store, tools=tools, model=model, proxy=True) as env:
            env.executor.on_dispatch = lose_two
            await env.create()
            with pytest.raises(DispatchUnknownError):
                await env.drive()
            state = await env.state()
            one, two = state.current.calls  # type: ignore[union-attr]
            assert one.status is ToolCallStatus.COMPLETED
            assert two.status is ToolCallStatus.EXECUTING
            assert probes[0].calls == 1 and probes[1].calls == 0
            assert (await env.advance()).execution_recovery is True
            assert env.runtime.live_actors() == frozenset()


async def test_model_dispatch_rejection_recovers_the_step(store, autojump_clock) -> None:
    """§5.6 step 5: a definite rejection → RecoverModelExecution, then the error."""
    model = GatedModel([reply("x")])

    async def reject_all(assignment: effect.Assignment) -> None:
        raise DispatchRejectedError("refused")

    with trio.fail_after(HANG):
        async with open_env(store, model=model, proxy=True) as env:
            env.executor.on_dispatch = reject_all
            await env.create()
            with pytest.raises(DispatchRejectedError):
                await env.drive()
            facts = await env.facts()
            assert kinds(facts)[-2:] == [F.ModelStepStarted, F.ModelStepRecovered]
            state = await env.state()
            assert isinstance(state.current, Open) and state.model_steps == 0
            assert model.calls == 0
            assert env.runtime.live_actors() == frozenset()


async def test_bounded_mailbox_serves_waiting_senders(store, autojump_clock) -> None:
    """§5.1: with a mailbox of one, settlement requests sent during a drive wait for
    room and are all served in turn."""
    gate = trio.Event()
    probe = Probe(gate=gate)
    tools = [probe_tool("slow", probe)]
    model = GatedModel([call_tools(tool_call("slow")), reply("done")])
    with trio.fail_after(HANG):
        async with open_local_executor(tools=tools, models={MODEL: model}) as ex:
            from runx_actors.runtime import open_runtime

            async with open_runtime(store, ex, scope=SCOPE, model=MODEL, tools=tools,
                                    mailbox_size=1) as app:
                await app.create_run(RUN, ["go"])
                async with trio.open_nursery() as nursery:
                    driving = start(nursery, app.drive, RUN)
                    await probe.started.wait()
                    strays = [start(nursery, app.runtime.deliver, effect.Outcome(
                        _key(f"e-stray-{i}"), effect.Unknown(""))) for i in range(5)]
                    for box in strays:
                        await box.wait()
                    assert [b.value.disposition for b in strays] == [LoopDisposition.DROPPED] * 5
                    gate.set()
                    await driving.wait()
                assert driving.value.disposition is LoopDisposition.FINISHED
                assert app.runtime.live_actors() == frozenset()


async def test_progress_frames_relayed_as_provisional_events(store, autojump_clock) -> None:
    """§5.9 / §5.13: a drive relays the progress frames of the keys it waits for to its
    sink as provisional events (the ScriptedModel streams its content as one delta)."""
    from runx_actors.executors import ScriptedModel

    async def report(context, **_: object) -> str:  # type: ignore[no-untyped-def]
        context.progress({"pct": 50})
        await trio.sleep(1.0)
        return "done"

    tool = python_tool(report, ref="report", context=True)
    model = ScriptedModel([call_tools(tool_call("report")), reply("streamed")])
    sink = Sink()
    with trio.fail_after(HANG):
        async with open_env(store, tools=[tool], model=model) as env:
            await env.create()
            result = await env.handle().drive(env.builder, sink=sink)
            assert result.disposition is LoopDisposition.FINISHED
            deltas = sink.of(EventKind.MODEL_TEXT_DELTA)
            progress = sink.of(EventKind.TOOL_PROGRESS)
            assert len(deltas) == 1 and len(progress) == 1
            starts = [f for f in await env.facts()
                      if isinstance(f, F.ModelStepStarted | F.ToolCallStarted)]
            assert deltas[0].effect == starts[2].effect  # the second model call
            assert progress[0].effect == starts[1].effect
            for event in deltas + progress:
                assert event.durability.value == "provisional"
                assert event.run_id == RUN and event.session == SCOPE
                assert event.sequence == 1 and event.generation == 0
                assert event.payload is not None
            finished = sink.of(EventKind.RUN_FINISHED)[0]
            assert sink.events.index(deltas[0]) < sink.events.index(finished)
            assert env.runtime.live_actors() == frozenset()


async def test_scheduling_frozen_on_tool_step_governs_later_drivers(store,
                                                                   autojump_clock) -> None:
    """INV-37: the scheduling in force when the model result was settled (the handle's
    settings: sequential) governs the ToolStep in a later runtime with other settings."""
    probe = Probe(hold=1.0)
    tools = [probe_tool("work", probe)]
    model = GatedModel([call_tools(*(tool_call("work", {"n": i}) for i in range(3))),
                        reply("done")])
    sequential = Settings(scheduling=ToolScheduling("sequential", 0))
    with trio.fail_after(HANG):
        async with open_env(store, tools=tools, model=model) as env:
            await env.create()
            handle = env.handle(settings=sequential)
            (key,) = (await handle.advance(env.builder)).dispatched
            await handle.deliver(await env.runtime.watcher.await_outcome(key))
            (opened,) = of_type(await env.facts(), F.ToolStepOpened)
            assert opened.scheduling == ToolScheduling("sequential", 0)
        async with open_env(store, tools=tools, model=model) as later:  # default settings
            result = await later.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert probe.calls == 3 and probe.peak == 1
            assert later.runtime.live_actors() == frozenset()


async def test_hook_and_resolver_failures_write_nothing(store, autojump_clock) -> None:
    """RUN-LOP-10 / INV-24: a failing BeforePrepare hook or an invalid TargetRef stops
    the operation before any fact of that step is written."""
    hints: list[object] = []

    async def flaky_hook(run_store, hint) -> None:  # type: ignore[no-untyped-def]
        hints.append(hint)
        if len(hints) == 1:
            raise RuntimeError("hook failed")

    async def bad_target(request: TargetRequest) -> effect.TargetRef:
        return effect.TargetRef("workspace", "")

    model = GatedModel([reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, model=model,
                            settings=Settings(before_prepare=flaky_hook)) as env:
            await env.create()
            created = await env.facts()
            with pytest.raises(RuntimeError):
                await env.drive()
            assert await env.facts() == created
            with pytest.raises(ValidationError):
                await env.handle(settings=Settings(target_resolver=bad_target)).drive(
                    env.builder)
            assert kinds(await env.facts())[len(created):] == [F.ModelStepPrepared]
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert model.calls == 1
            assert env.runtime.live_actors() == frozenset()


async def test_prepare_refused_without_progress_raises_stalled(store, autojump_clock) -> None:
    """INV-42: a Prepare refused while the position stays put → PrepareStalledError."""
    import attrs

    class DropsInputs:
        def __init__(self, inner) -> None:  # type: ignore[no-untyped-def]
            self.inner = inner

        async def build(self, hint):  # type: ignore[no-untyped-def]
            return attrs.evolve(await self.inner.build(hint), input_ids=())

    with trio.fail_after(HANG):
        async with open_env(store, model=GatedModel([reply("x")])) as env:
            await env.create()
            created = await env.facts()
            with pytest.raises(PrepareStalledError):
                await env.drive(RUN, DropsInputs(env.builder))
            assert await env.facts() == created
            assert env.runtime.live_actors() == frozenset()


async def test_sink_exception_never_affects_a_commit(store, autojump_clock) -> None:
    class Broken:
        def emit(self, event: object) -> None:
            raise RuntimeError("sink down")

    with trio.fail_after(HANG):
        async with open_env(store, model=GatedModel([reply("x")])) as env:
            await env.create()
            result = await env.handle().drive(env.builder, sink=Broken())
            assert result.disposition is LoopDisposition.FINISHED
            assert isinstance((await env.facts())[-1], F.RunEnded)


async def test_business_stop_then_cancel_drive(store, autojump_clock) -> None:
    """§5.9: CancelRun first, then cancel the drive: the in-flight effect is settled in
    the log by the cancel group; its Outcome arrives for a terminal Run and is dropped."""
    gate = trio.Event()
    probe = Probe(gate=gate)
    model = GatedModel([call_tools(tool_call("slow")), reply("x")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("slow", probe)], model=model) as env:
            await env.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, env.drive)
                await probe.started.wait()
                stopped = await env.app.cancel(RUN)
                env.handle().cancel_drive()
                await box.wait()
            assert isinstance(box.error, DriveCancelledError)
            facts = await env.facts()
            assert list(facts[-len(stopped.facts):]) == list(stopped.facts)  # nothing after
            assert kinds(stopped.facts) == [F.ToolCallFailed, F.RunEnded]
            (started,) = of_type(facts, F.ToolCallStarted)
            outcome = await env.local.get_outcome(_key(started.effect))  # dropped: unacked
            assert isinstance(outcome.result, effect.Cancelled)
            assert env.runtime.live_actors() == frozenset()


async def test_cancel_drive_leaves_no_actor_behind(store, autojump_clock) -> None:
    """INV-43: once drive() has raised DriveCancelledError, the slot table is empty even
    though the cancel left a wake-up message in the actor's mailbox."""
    building, go_on = trio.Event(), trio.Event()

    async def hold() -> None:
        building.set()
        await go_on.wait()

    with trio.fail_after(HANG):
        async with open_env(store, model=GatedModel([reply("x")])) as env:
            await env.create()
            builder = RecordingBuilder(env.builder, before_build=hold)

            async def cancel_while_building() -> None:
                await building.wait()
                env.handle().cancel_drive()
                go_on.set()

            async with trio.open_nursery() as nursery:
                nursery.start_soon(cancel_while_building)
                with pytest.raises(DriveCancelledError):
                    await env.drive(RUN, builder)
                assert env.runtime.live_actors() == frozenset()
            assert of_type(await env.facts(), F.ModelStepStarted) == []


async def test_redispatch_requires_an_executing_target(store, autojump_clock) -> None:
    """§5.10: redispatch of a key that is not executing → EffectNotExecutingError; of an
    executing key → the same Assignment again, which the executor deduplicates."""
    with trio.fail_after(HANG):
        async with open_env(store, model=GatedModel([reply("x")], gate=trio.Event())) as env:
            await env.create()
            with pytest.raises(EffectNotExecutingError):
                await env.handle().redispatch(_key("e-none"))
            (key,) = (await env.advance()).dispatched
            before = await env.facts()
            await env.handle().redispatch(key)
            assert await env.facts() == before  # no fact is written
            assert env.local.statistics().accepted == 1
            assert env.runtime.live_actors() == frozenset()


async def test_closed_runtime_refuses_requests(store, autojump_clock) -> None:
    with trio.fail_after(HANG):
        async with open_local_executor(models={MODEL: GatedModel([reply("x")])}) as ex:
            writer = await store.open(SCOPE)
            await create(writer)
            async with ActorRuntime(writer, ex) as runtime:
                pass
            with pytest.raises(RuntimeClosedError):
                await runtime.run(RUN).drive(transcript(writer, store))
            assert runtime.live_actors() == frozenset()
            await writer.aclose()


async def test_runtime_shutdown_answers_a_waiting_caller(store, autojump_clock) -> None:
    """A caller outside the runtime's scope, waiting on a drive when the runtime closes,
    gets RuntimeClosedError (never a Cancelled that belongs to the runtime)."""
    gate = trio.Event()
    probe = Probe(gate=gate)
    tools = [probe_tool("slow", probe)]
    model = GatedModel([call_tools(tool_call("slow")), reply("x")])
    with trio.fail_after(HANG):
        async with open_local_executor(tools=tools, models={MODEL: model}) as ex:
            writer = await store.open(SCOPE)
            await create(writer)
            async with trio.open_nursery() as outer:
                async with ActorRuntime(writer, ex) as runtime:
                    box = start(outer, runtime.run(RUN).drive, transcript(writer, store, tools))
                    await probe.started.wait()
                await box.wait()
            assert isinstance(box.error, RuntimeClosedError)
            assert runtime.live_actors() == frozenset()
            await writer.aclose()


async def test_kept_effect_read_error_leaves_runtime_running(store, autojump_clock) -> None:
    """§6.10: a definitive read error for an effect takeover kept leaves the target
    EXECUTING; it does not take the new owner's runtime down."""
    gate = trio.Event()
    model = GatedModel([reply("x")], gate=gate)

    async def not_found(key: effect.AssignmentKey) -> None:
        raise ExecutionNotFoundError("evicted", key=key)

    with trio.fail_after(HANG):
        async with open_local_executor(models={MODEL: model}) as ex:
            await _crashed_owner(store, ex, RUN, model.started)
            reading = ProxyExecutor(ex)
            reading.on_get_outcome = not_found
            from runx_actors.runtime import open_runtime

            async with open_runtime(store, reading, scope=SCOPE, model=MODEL) as app:
                assert app.recovered == 0
                await trio.sleep(60.0)  # the kept key is read (and fails) meanwhile
                result = await app.drive(RUN)
                assert result.execution_recovery is True
                state = (await app.record(RUN)).state
                assert isinstance(state.current, ModelStep)
                assert state.current.status is ModelStepStatus.EXECUTING
                assert app.runtime.live_actors() == frozenset()
