"""Failure scenarios from the field (design/failure-scenarios.md, scenarios 1-8).

"Crash" of an owner process = its runtime and its drivers are cancelled together (the
executor, a separate service, keeps what it was running); "restart" = a new writer of the
same scope on the same store (``store.open``: the epoch goes up) followed by takeover.
Every test runs over the memory and the SQLite store.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from runtime_harness import (
    MODEL,
    RUN,
    SCOPE,
    GatedModel,
    GateRunStore,
    Probe,
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
    call_tools,
    open_local_executor,
    reply,
    tool_call,
)
from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol.commit import CommitRequest, CommitStatus, envelope
from runx_actors.protocol.errors import (
    OutcomeCollectedError,
    OutcomeNotReadyError,
    OwnershipLostError,
    RunAlreadyRunningError,
    ValidationError,
)
from runx_actors.protocol.ids import derive_settlement_command_id
from runx_actors.protocol.state import ModelStep, ToolStep
from runx_actors.protocol.values import (
    FailureClass,
    ResponsePolicy,
    RunStatus,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolReplay,
    ToolScheduling,
)
from runx_actors.runtime import (
    BUDGET_EXCEEDED,
    ActorRuntime,
    EventKind,
    LoopDisposition,
    MemoryDispatchLedger,
    MissingPolicy,
    Reconciler,
    Settings,
    open_runtime,
    recover_interrupted,
)
from runx_actors.testing import builders as b
from runx_actors.testing.faults import AmbiguousCommitError, FaultyRunStore

HANG = 600


def _key(effect_id: str, run_id: str = RUN) -> effect.AssignmentKey:
    return effect.AssignmentKey(SCOPE, run_id, effect_id)


def _calls(state: Any) -> tuple[Any, ...]:
    cur = state.current
    if isinstance(cur, ToolStep):
        return cur.calls
    assert state.last_tool_step is not None
    return state.last_tool_step.calls  # type: ignore[no-any-return]


async def _settled_at_executor(executor: Any, key: effect.AssignmentKey) -> effect.Outcome:
    """Wait (on the mock clock) until the executor holds *key*'s Outcome."""
    while True:
        try:
            return await executor.get_outcome(key)  # type: ignore[no-any-return]
        except OutcomeNotReadyError:
            await trio.sleep(0.01)


# -- 1 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("fused", [True, False], ids=["fused", "unfused"])
@pytest.mark.parametrize("point", ["outcome_unread", "commit_pending", "commit_applied",
                                   "executor_restarted"])
async def test_field_1_outcome_persisted_then_crash(store, store_factory, autojump_clock,
                                                   point: str, fused: bool) -> None:
    """The tool finished and its Outcome is recorded at the executor; the owner dies at
    *point* before its settlement is known to be committed; a new owner takes over.

    *fused* (RUN-LOP-11): the settlement is committed in one batch with the next
    PrepareModelRequest and StartModelExecution; a crash once it applied leaves that
    model start durable but never dispatched, which takeover recovers."""
    replay = ToolReplay.ALLOWED if point == "executor_restarted" else ToolReplay.UNKNOWN
    probe = Probe(result="charged")
    tools = [probe_tool("charge", probe, replay=replay)]
    model = GatedModel([call_tools(tool_call("charge", {"cents": 5})), reply("done")])
    entered = trio.Event()

    async def hang_settlement(request: CommitRequest, *_: Any) -> None:
        if isinstance(request.envelope.command, C.SubmitToolResult):
            entered.set()
            await trio.sleep_forever()  # the process hangs here until it dies

    async def never_read(outcome: effect.Outcome) -> None:
        if isinstance(outcome.result, effect.ToolExecutionSucceeded):
            await trio.sleep_forever()  # recorded at the executor, never seen by this owner

    def wrap(w: Any) -> Any:
        return WrappedWriter(w, GateRunStore(w.run_store()))

    with trio.fail_after(HANG):
        async with open_local_executor(tools=tools, models={MODEL: model}) as ex:
            # -- the first owner, which crashes ------------------------------------------
            # The hung settlement gives up at settle_timeout with TooSlowError; the drive's
            # caller, cancelled by the crash, raises it with its Cancelled (RUN-ACT-5).
            try:
                with trio.CancelScope() as crash:
                    async with open_wrapped_env(store, tools=tools, local=ex, wrap=wrap,
                                                proxy=True,
                                                settings=Settings(
                                                    settle_timeout=5.0,
                                                    fused_commits=fused)) as old:
                        if point in ("outcome_unread", "executor_restarted"):
                            old.executor.on_outcome = never_read
                        elif point == "commit_pending":
                            old.faults.before = hang_settlement
                        else:
                            old.faults.after = hang_settlement
                        await old.create()
                        async with trio.open_nursery() as nursery:
                            nursery.start_soon(old.drive)
                            await probe.started.wait()
                            (started,) = of_type(await old.facts(), F.ToolCallStarted)
                            key = _key(started.effect)
                            first = await _settled_at_executor(ex, key)
                            if point in ("commit_pending", "commit_applied"):
                                await entered.wait()
                            crash.cancel()
            except* trio.TooSlowError:
                assert point in ("commit_pending", "commit_applied")
            else:
                assert point not in ("commit_pending", "commit_applied")
            assert crash.cancelled_caught
            assert isinstance(first.result, effect.ToolExecutionSucceeded)

            # -- the new owner: a restarted process (SQLite: the file opened anew) --------
            async with store_factory() as restarted:
                writer = await restarted.open(SCOPE)
                log_before = await writer.run_facts(RUN)
                committed = len(of_type(log_before, F.ToolCallCompleted))
                assert committed == (1 if point == "commit_applied" else 0)
                if point == "executor_restarted":
                    await _replay_on_restarted_executor(restarted, writer, tools, model, key, first)
                else:
                    reconciler = Reconciler(ex)
                    recovered_model = fused and point == "commit_applied"
                    assert await recover_interrupted(writer, reconciler) == int(recovered_model)
                    assert reconciler.kept == ([] if point == "commit_applied" else [key])
                    async with ActorRuntime(writer, ex) as rt:
                        if reconciler.kept:  # the host settles what takeover kept
                            kept = await rt.watcher.await_outcome(key)
                            assert kept == first
                            result = await rt.deliver(kept)
                            assert result.disposition is LoopDisposition.DELIVERED
                        result = await rt.run(RUN).drive(transcript(writer, restarted, tools))
                        assert result.disposition is LoopDisposition.FINISHED
                        assert rt.live_actors() == frozenset()
                    assert probe.calls == 1  # never run again
                    assert ex.history(key).count("execution_running") == 1

                facts = await writer.run_facts(RUN)
                assert len(of_type(facts, F.ToolCallStarted)) == 1
                settlements = [f for f in facts
                               if isinstance(f, F.ToolCallCompleted | F.ToolCallFailed)]
                assert len(settlements) == 1 and isinstance(settlements[0], F.ToolCallCompleted)
                state = (await writer.record(RUN)).state
                assert state.status is RunStatus.COMPLETED
                assert [c.status for c in _calls(state)] == [ToolCallStatus.COMPLETED]
                await writer.aclose()


async def _replay_on_restarted_executor(store: Any, writer: Any, tools: Any, model: Any,
                                        key: effect.AssignmentKey,
                                        first: effect.Outcome) -> None:
    """The executor lost its record too; the tool may be replayed: the new owner
    redispatches it under the same key, and the first run's Outcome is dropped."""
    again = Probe(result="charged")
    new_tools = [probe_tool("charge", again, replay=ToolReplay.ALLOWED)]
    async with open_local_executor(tools=new_tools, models={MODEL: model}) as fresh:
        async with ActorRuntime(writer, fresh) as rt:
            ledger = MemoryDispatchLedger()
            reconciler = Reconciler(fresh, missing=MissingPolicy.REDISPATCH_MISSING,
                                    ledger=ledger,
                                    redispatch=lambda k: rt.run(k.run_id).redispatch(k),
                                    epoch=writer.epoch)
            assert await recover_interrupted(writer, reconciler) == 0
            assert reconciler.kept == [key]
            second = await rt.watcher.await_outcome(key)
            assert second.key == first.key  # the same effect key both times
            assert (await rt.deliver(second)).disposition is LoopDisposition.DELIVERED
            assert (await rt.deliver(first)).disposition is LoopDisposition.DROPPED
            result = await rt.run(RUN).drive(transcript(writer, store, new_tools))
            assert result.disposition is LoopDisposition.FINISHED
            assert rt.live_actors() == frozenset()
        assert again.calls == 1
        assert (await ledger.load(key)).dispatched == 1


# -- 2 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("moment", ["model_start_barrier", "tool_start_barrier",
                                    "tool_running"])
async def test_field_2_sweep_adopts_live_run(store, autojump_clock, moment: str) -> None:
    """A Run is being driven by owner A when owner B opens the scope and runs its
    takeover sweep. The sweep creates no second execution: the Run's starts stay one per
    effect, A is fenced, and B finishes the Run; inside B a second driver is refused."""
    probe = Probe(result="ok")
    tools = [probe_tool("work", probe)]
    model = GatedModel([call_tools(tool_call("work")), reply("done")])
    swept = trio.Event()
    reached = trio.Event()
    sink = Sink()

    async def hold_dispatch(assignment: effect.Assignment) -> None:
        kind = "model" if isinstance(assignment.body, effect.ModelAssignment) else "tool"
        if moment == f"{kind}_start_barrier" and not reached.is_set():
            reached.set()  # the start fact is committed, the dispatch not yet made
            await swept.wait()

    with trio.fail_after(HANG):
        async with open_local_executor(tools=tools, models={MODEL: model}) as ex:
            async with open_env(store, tools=tools, local_executor=ex, proxy=True) as a:
                a.executor.on_dispatch = hold_dispatch
                if moment == "tool_running":
                    probe.gate = trio.Event()
                await a.create()
                async with trio.open_nursery() as nursery:
                    box = start(nursery, a.drive)
                    if moment == "tool_running":
                        await probe.started.wait()
                    else:
                        await reached.wait()
                    async with open_runtime(store, ex, scope=SCOPE, model=MODEL, tools=tools,
                                            sink=sink) as app_b:
                        swept.set()
                        if probe.gate is not None:
                            probe.gate.set()
                        await box.wait()
                        # A stops: fenced, or (tool_running) B settled and acknowledged
                        # the Outcome first, so A's read of it is definitive
                        assert isinstance(box.error, OwnershipLostError | OutcomeCollectedError)
                        if moment != "tool_running":
                            assert isinstance(box.error, OwnershipLostError)
                        with pytest.raises(ValidationError):
                            ActorRuntime(app_b.writer, ex)  # one runtime per writer

                        if moment == "tool_running":  # B settles the effect it kept
                            await sink.wait_for(EventKind.TOOL_COMPLETED)
                        async with trio.open_nursery() as inner:
                            driving = start(inner, app_b.drive, RUN)
                            second = start(inner, app_b.drive, RUN)
                            await driving.wait()
                            await second.wait()
                        results = [driving, second]
                        refused = [r for r in results
                                   if isinstance(r.error, RunAlreadyRunningError)]
                        finished = [r for r in results if r.error is None]
                        assert len(finished) == 1 and len(refused) <= 1
                        assert finished[0].value.disposition is LoopDisposition.FINISHED
                        assert app_b.runtime.live_actors() == frozenset()
                        facts = await app_b.writer.run_facts(RUN)
                    assert a.runtime.live_actors() == frozenset()

            started = of_type(facts, F.ModelStepStarted) + of_type(facts, F.ToolCallStarted)
            assert len({f.effect for f in started}) == len(started)  # one start per effect
            assert len(of_type(facts, F.ToolCallStarted)) == 1
            assert probe.calls == (0 if moment == "tool_start_barrier" else 1)
            for fact in started:
                assert ex.history(_key(fact.effect)).count("execution_running") <= 1
            assert isinstance(facts[-1], F.RunEnded)


# -- 3 -----------------------------------------------------------------------------------


async def test_field_3_checkpoint_race_loser_stops(store, autojump_clock) -> None:
    """Owners A and B compute the same step. B commits first; A's commit is refused
    (fenced), A takes B's state from the log and dispatches nothing on its own."""
    computing = trio.Event()
    go_on = trio.Event()

    async def slow_build() -> None:
        computing.set()
        await go_on.wait()

    gate = trio.Event()
    model = GatedModel([reply("b wins")], gate=gate)
    with trio.fail_after(HANG):
        async with open_local_executor(models={MODEL: model}) as ex:
            async with open_env(store, local_executor=ex, proxy=True) as a:
                await a.create()
                builder_a = RecordingBuilder(a.builder, before_build=slow_build)
                async with trio.open_nursery() as nursery:
                    box = start(nursery, a.drive, RUN, builder_a)
                    await computing.wait()  # A loaded the Run and is building its Prepare
                    async with open_env(store, local_executor=ex, proxy=True) as b_env:
                        advanced = await b_env.advance()
                        assert advanced.disposition is LoopDisposition.DISPATCHED
                        go_on.set()
                        await box.wait()
                        assert isinstance(box.error, OwnershipLostError)
                        assert a.executor.dispatched == []  # A dispatched nothing

                        winner = (await b_env.writer.record(RUN))
                        seen_by_a = await a.writer.record(RUN)  # reads need no ownership
                        assert seen_by_a == winner
                        assert isinstance(winner.state.current, ModelStep)
                        assert len(of_type(await a.facts(), F.ModelStepPrepared)) == 1
                        assert len(b_env.executor.model_dispatches()) == 1

                        gate.set()
                        (key,) = advanced.dispatched
                        outcome = await b_env.runtime.watcher.await_outcome(key)
                        result = await b_env.handle().deliver(outcome)
                        assert result.disposition is LoopDisposition.FINISHED
                        assert b_env.runtime.live_actors() == frozenset()
                    assert a.runtime.live_actors() == frozenset()
            assert model.calls == 1 and ex.statistics().accepted == 1


async def test_field_3_checkpoint_race_stale_prepare_takes_winner_state(store,
                                                                       autojump_clock) -> None:
    """Same owner, but the base moves under the Prepare (an application input lands
    while the step is computed): the stale Prepare is refused, the loop reloads and its
    next Prepare is built from the new state; the stale request is never sent."""
    computing = trio.Event()
    go_on = trio.Event()
    builds = 0

    async def slow_first_build() -> None:
        nonlocal builds
        builds += 1
        if builds == 1:
            computing.set()
            await go_on.wait()

    model = GatedModel([reply("both read")])
    with trio.fail_after(HANG):
        async with open_env(store, model=model, proxy=True) as env:
            await env.app.create_run(RUN, ["first"])
            builder = RecordingBuilder(env.builder, before_build=slow_first_build)
            async with trio.open_nursery() as nursery:
                box = start(nursery, env.drive, RUN, builder)
                await computing.wait()
                await env.app.accept_input(RUN, "second")
                go_on.set()
                await box.wait()
            assert box.error is None
            assert box.value.disposition is LoopDisposition.FINISHED
            facts = await env.facts()
            (prepared,) = of_type(facts, F.ModelStepPrepared)
            assert len(prepared.input_ids) == 2
            assert len(builder.hints) == 2
            assert [len(h.inputs) for h in builder.hints] == [1, 2]
            assert model.calls == 1 and len(env.executor.model_dispatches()) == 1
            assert env.runtime.live_actors() == frozenset()


# -- 4 -----------------------------------------------------------------------------------


async def test_field_4_slow_writer_after_takeover(store, store_factory,
                                                  autojump_clock) -> None:
    """A's settlement append is delayed; B takes over and commits; A's append then
    arrives and is refused; nothing of A is in the log after B's takeover and A starts
    and settles nothing more."""
    gates = trio.Event(), trio.Event()
    probes = Probe(gate=gates[0], result="one"), Probe(gate=gates[1], result="two")
    tools = [probe_tool("one", probes[0]), probe_tool("two", probes[1])]
    model = GatedModel([call_tools(tool_call("one"), tool_call("two")), reply("never")])
    release = trio.Event()
    delayed = trio.Event()
    sink = Sink()

    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, proxy=True, sink=sink,
                                    wrap=lambda w: WrappedWriter(
                                        w, GateRunStore(w.run_store()))) as a:
            async def mark(request: CommitRequest) -> None:
                if isinstance(request.envelope.command, C.SubmitToolResult):
                    delayed.set()

            a.faults.before = mark
            a.faults.delay(lambda r: isinstance(r.envelope.command, C.SubmitToolResult),
                           release)
            await a.create()
            async with trio.open_nursery() as nursery:
                box = start(nursery, a.drive)
                await probes[0].started.wait()
                await probes[1].started.wait()
                started = of_type(await a.facts(), F.ToolCallStarted)
                gates[0].set()
                await delayed.wait()  # A's settlement of "one" is on its way, slowly

                b_model = GatedModel([reply("b done")])
                b_tools = [probe_tool("one", Probe()), probe_tool("two", Probe())]
                async with open_local_executor(tools=b_tools,
                                               models={MODEL: b_model}) as ex_b:
                    async with store_factory() as other:
                        writer_b = await other.open(SCOPE)
                        taken_at = len(await writer_b.run_facts(RUN))
                        assert await recover_interrupted(writer_b, Reconciler(ex_b)) == 2
                        dispatched_before = len(a.executor.dispatched)

                        release.set()  # A's delayed append arrives now
                        await box.wait()
                        assert isinstance(box.error, OwnershipLostError)
                        assert len(a.executor.dispatched) == dispatched_before
                        assert attempts_of(a.faults, derive_settlement_command_id(
                            started[0].effect)) == 1  # refused, never replayed

                        after = (await writer_b.run_facts(RUN))[taken_at:]
                        assert kinds(after) == [F.ToolCallFailed, F.ToolCallFailed]
                        assert all(f.outcome is ToolFailureOutcome.UNKNOWN for f in after)
                        assert sink.of(EventKind.TOOL_COMPLETED) == []

                        async with ActorRuntime(writer_b, ex_b) as rt_b:
                            result = await rt_b.run(RUN).drive(transcript(writer_b, other,
                                                                          b_tools))
                            assert result.disposition is LoopDisposition.FINISHED
                            assert rt_b.live_actors() == frozenset()
                        facts = await writer_b.run_facts(RUN)
                        assert of_type(facts, F.ToolCallCompleted) == []
                        assert b_model.calls == 1 and model.calls == 1
                        await writer_b.aclose()
            second_key = _key(started[1].effect)
            assert "cancel_requested" in a.local.history(second_key)
            assert a.runtime.live_actors() == frozenset()


# -- 5 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("new_owner", ["disposes", "redispatches"])
async def test_field_5_late_outcome_of_superseded_attempt(store, store_factory, autojump_clock,
                                                          new_owner: str) -> None:
    gate = trio.Event()
    old_probe, new_probe = Probe(gate=gate, result="old"), Probe(result="new")
    old_tools = [probe_tool("job", old_probe, replay=ToolReplay.ALLOWED)]
    new_tools = [probe_tool("job", new_probe, replay=ToolReplay.ALLOWED)]
    with trio.fail_after(HANG):
        async with open_local_executor(tools=old_tools, models={MODEL: GatedModel(
                [call_tools(tool_call("job"))])}) as old_ex:
            with trio.CancelScope() as crash:  # the first owner dies mid-call
                async with open_env(store, tools=old_tools, local_executor=old_ex) as old:
                    await old.create()
                    async with trio.open_nursery() as nursery:
                        nursery.start_soon(old.drive)
                        await old_probe.started.wait()
                        (started,) = of_type(await old.facts(), F.ToolCallStarted)
                        crash.cancel()
            key = _key(started.effect)

            new_model = GatedModel([reply("done")])
            async with open_local_executor(tools=new_tools,
                                           models={MODEL: new_model}) as new_ex:
                async with store_factory() as restarted:
                    writer = await restarted.open(SCOPE)
                    async with ActorRuntime(writer, new_ex) as rt:
                        if new_owner == "disposes":
                            assert await recover_interrupted(writer, Reconciler(new_ex)) == 1
                            assert new_ex.history(key) == ("execution_aborted",)
                        else:
                            ledger = MemoryDispatchLedger()
                            reconciler = Reconciler(
                                new_ex, missing=MissingPolicy.REDISPATCH_MISSING, ledger=ledger,
                                redispatch=lambda k: rt.run(k.run_id).redispatch(k),
                                epoch=writer.epoch)
                            assert await recover_interrupted(writer, reconciler) == 0
                            assert reconciler.kept == [key]
                            second = await rt.watcher.await_outcome(key)
                            assert second.key == key
                            assert (await rt.deliver(second)).disposition is \
                                LoopDisposition.DELIVERED
                        settled = await writer.run_facts(RUN)

                        gate.set()  # the superseded attempt ends now, late
                        late = await _settled_at_executor(old_ex, key)
                        assert late.key == key  # both attempts carried the same key
                        assert isinstance(late.result, effect.ToolExecutionSucceeded)
                        dropped = await rt.deliver(late)
                        assert dropped.disposition is LoopDisposition.DROPPED
                        assert await writer.run_facts(RUN) == settled  # it wrote nothing

                        result = await rt.run(RUN).drive(transcript(writer, restarted, new_tools))
                        assert result.disposition is LoopDisposition.FINISHED
                        assert rt.live_actors() == frozenset()
                    facts = await writer.run_facts(RUN)
                    await writer.aclose()
            settlements = [f for f in facts
                           if isinstance(f, F.ToolCallCompleted | F.ToolCallFailed)]
            assert len(settlements) == 1 and settlements[0].effect == key.effect
            if new_owner == "disposes":
                assert settlements[0].outcome is ToolFailureOutcome.UNKNOWN
                assert new_probe.calls == 0
            else:
                assert isinstance(settlements[0], F.ToolCallCompleted)
                assert new_probe.calls == 1
            assert old_probe.calls == 1


# -- 6 -----------------------------------------------------------------------------------


async def test_field_6_ambiguous_commit(store, autojump_clock) -> None:
    # the store applies the commit, the caller sees an error, the caller retries
    writer = await store.open(SCOPE)
    await create(writer, RUN, "in-1", "in-2")
    faults = FaultyRunStore(writer.run_store())
    faults.fail_after(lambda r: True)
    state = (await faults.load(RUN)).state
    command_id, command = b.cancel(command_id="cancel:ambiguous")
    request = CommitRequest(0, envelope(RUN, command_id, command))
    with pytest.raises(AmbiguousCommitError):
        await faults.commit(request)
    first_facts = await writer.run_facts(RUN)
    again = await faults.commit(request)
    assert again.status is CommitStatus.ALREADY_APPLIED
    assert list(again.facts) == list(first_facts[-len(again.facts):])
    assert await writer.run_facts(RUN) == first_facts  # nothing appended twice
    assert len(of_type(first_facts, F.RunEnded)) == 1
    assert state.status is RunStatus.ACTIVE
    await writer.aclose()

    # the loop does the same for every commit it makes: no effect starts twice
    probe = Probe(result="once")
    tools = [probe_tool("work", probe)]
    model = GatedModel([call_tools(tool_call("work"), tool_call("work", {"n": 2})),
                        reply("done")])
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, proxy=True) as env:
            kinds_ = (C.PrepareModelRequest, C.StartModelExecution, C.SubmitModelResult,
                      C.StartToolCall, C.SubmitToolResult)

            def first_response_lost(request: CommitRequest) -> bool:
                # every first attempt of these commands applies, then its answer is lost
                # (a batch commit, RUN-CMT-9, loses the answer of the whole batch when
                # it holds a first attempt; ``attempts`` already lists this one)
                if not isinstance(request.envelope.command, kinds_):
                    return False
                cid = request.envelope.id
                return sum(1 for r in env.faults.attempts if r.envelope.id == cid) == 1

            env.faults.fail_after(first_response_lost, times=1000)
            await env.create("run-2")
            result = await env.drive("run-2")
            assert result.disposition is LoopDisposition.FINISHED
            facts = await env.facts("run-2")
            assert len(of_type(facts, F.ModelStepStarted)) == 2
            assert len(of_type(facts, F.ToolCallStarted)) == 2
            assert len(of_type(facts, F.ToolCallCompleted)) == 2
            assert probe.calls == 2 and model.calls == 2
            assert len(env.executor.tool_dispatches()) == 2
            assert len(env.executor.model_dispatches()) == 2
            ids = [r.envelope.id for r in env.faults.attempts]
            assert all(ids.count(i) <= 2 for i in ids)  # one replay each, at most
            replayed = {command_type(r) for r in env.faults.attempts
                        if ids.count(r.envelope.id) == 2}
            assert {"PrepareModelRequest", "StartModelExecution", "SubmitModelResult",
                    "StartToolCall", "SubmitToolResult"} <= replayed
            assert env.runtime.live_actors() == frozenset()


# -- 7 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("decision", ["deny", "allow"])
async def test_field_7_policy_before_dispatch(store, autojump_clock, decision: str) -> None:
    probe = Probe(result="sent")
    send = probe_tool("send", probe, policy=ResponsePolicy.APPROVAL_REQUIRED)

    def no_wildcards(arguments: Any) -> Any:
        if arguments.get("to") == "*":
            return effect.ToolFailure(FailureClass.INVALID_ARGUMENTS, "no broadcast")
        return None

    guarded = Probe(result="mailed")
    mail = probe_tool("mail", guarded, check=no_wildcards)
    model = GatedModel([call_tools(tool_call("send", {"to": "bob"}),
                                   tool_call("mail", {"to": "*"})),
                        reply("done")])
    with trio.fail_after(HANG):
        async with open_env(store, tools=[send, mail], model=model, proxy=True) as env:
            await env.app.create_run(RUN, ["send it"])
            waiting = await env.drive()
            assert waiting.disposition is LoopDisposition.WAITING
            assert waiting.execution_recovery is False
            facts = await env.facts()
            assert of_type(facts, F.ToolCallStarted) == []  # no start before a decision
            assert env.executor.tool_dispatches() == []
            (declined,) = of_type(facts, F.ToolCallFailed)  # the policy refusal is a fact
            assert declined.effect == ""
            assert declined.failure.class_ == FailureClass.INVALID_ARGUMENTS
            assert guarded.calls == 0

            if decision == "deny":
                denied = await env.app.reject(RUN, reason="not now")
                (fact,) = denied.facts
                assert isinstance(fact, F.ToolCallFailed)
                assert fact.failure.class_ == FailureClass.PERMISSION_DENIED
            else:
                approved = await env.app.approve(RUN)
                assert kinds(approved.facts) == [F.ToolCallApproved]
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            facts = await env.facts()
            started = of_type(facts, F.ToolCallStarted)
            if decision == "deny":
                assert started == [] and probe.calls == 0
                assert env.executor.tool_dispatches() == []
            else:
                assert len(started) == 1 and probe.calls == 1
                assert kinds(facts).index(F.ToolCallApproved) < kinds(facts).index(
                    F.ToolCallStarted)
            assert guarded.calls == 0
            assert env.runtime.live_actors() == frozenset()


# -- 8 -----------------------------------------------------------------------------------


@pytest.mark.parametrize("limit", ["budget", "max_parallel", "both"])
async def test_field_8_parallel_calls_over_budget(store, autojump_clock, limit: str) -> None:
    """8 calls in one step (then 1 more in the next) against a budget of 6 calls per
    Run and/or ``max_parallel == 2``; two Runs at once, each with its own counters."""
    budget = 6 if limit in ("budget", "both") else 0
    window = 2 if limit in ("max_parallel", "both") else 0
    settings = Settings(max_tool_calls=budget,
                        scheduling=ToolScheduling("parallel" if window else "", window))
    runs = ["run-a", "run-b"]
    probes = {run_id: Probe(hold=1.0) for run_id in runs}
    tools = [probe_tool(f"work-{run_id}", probes[run_id]) for run_id in runs]

    def respond(request: Any) -> Any:
        # the Run's input names it; turn 1: 8 calls, turn 2: 1 more call, turn 3: answer
        run_id = next(r for r in runs if f"{r}-in" in request.body)
        turns = request.body.count('"role":"assistant"')
        if turns == 0:
            return call_tools(*(tool_call(f"work-{run_id}", {"n": i}) for i in range(8)))
        if turns == 1:
            return call_tools(tool_call(f"work-{run_id}", {"n": 8}))
        return reply("done")

    with trio.fail_after(HANG):
        async with open_env(store, tools=tools, settings=settings,
                            model=GatedModel([respond], repeat_last=True)) as env:
            for run_id in runs:
                await env.create(run_id, f"{run_id}-in")
            async with trio.open_nursery() as nursery:
                boxes = [start(nursery, env.drive, run_id) for run_id in runs]
            assert [box.error for box in boxes] == [None, None]
            assert all(box.value.disposition is LoopDisposition.FINISHED for box in boxes)

            allowed = budget or 9
            for run_id in runs:
                facts = await env.facts(run_id)
                started = of_type(facts, F.ToolCallStarted)
                declined = [f for f in of_type(facts, F.ToolCallFailed) if f.effect == ""]
                assert len(started) == allowed
                assert len(declined) == 9 - allowed
                assert all(f.failure.class_ == BUDGET_EXCEEDED for f in declined)
                assert all(f.outcome is ToolFailureOutcome.KNOWN for f in declined)
                assert {f.call_id for f in declined}.isdisjoint(f.call_id for f in started)
                assert len(of_type(facts, F.ToolCallCompleted)) == allowed
                probe = probes[run_id]
                assert probe.calls == allowed
                assert probe.peak == (window or min(8, allowed))
            assert env.local.statistics().accepted == 2 * (allowed + 3)
            assert env.runtime.live_actors() == frozenset()
