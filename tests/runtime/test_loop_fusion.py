"""Fused commits of the actor loop (RUN-LOP-11, over RUN-CMT-9's batch commit).

One agent-loop iteration (model step -> one tool call -> next model step) costs two
durable transactions: [SubmitModelResult, StartToolCall] and [SubmitToolResult,
PrepareModelRequest, StartModelExecution]. Each command keeps its own derived id, the
log is the one the unfused loop writes, and what must be durable before a dispatch is
durable before it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
import trio
from runtime_harness import (
    RUN,
    SCOPE,
    GatedModel,
    GateRunStore,
    Probe,
    RecordingBuilder,
    WrappedWriter,
    command_type,
    of_type,
    open_wrapped_env,
    probe_tool,
)

from runx_actors import effect
from runx_actors.executors import call_tools, reply, tool_call
from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol.canonical import decode_frozen
from runx_actors.protocol.commit import BatchResult, CommitRequest, CommitStatus
from runx_actors.protocol.errors import OwnershipLostError, StaleRuntimeError
from runx_actors.protocol.values import RunStatus, ToolCallStatus
from runx_actors.runtime import LoopDisposition, Settings, TranscriptBuilder, accept_input
from runx_actors.testing import builders as b
from runx_actors.testing.faults import AmbiguousCommitError

HANG = 60

PREPARE, START_MODEL = "PrepareModelRequest", "StartModelExecution"
SUBMIT_MODEL, START_TOOL, SUBMIT_TOOL = "SubmitModelResult", "StartToolCall", "SubmitToolResult"


class CountingRunStore(GateRunStore):
    """Records every durable transaction it is asked for: a commit is one, a batch
    commit is one (RUN-CMT-9). ``transactions`` lists each as its command types."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.transactions: list[tuple[str, ...]] = []

    async def commit(self, request: CommitRequest) -> Any:
        self.transactions.append((command_type(request),))
        return await super().commit(request)

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        self.transactions.append(tuple(command_type(r) for r in requests))
        return await super().commit_batch(requests)


def counting(writer: Any) -> WrappedWriter:
    return WrappedWriter(writer, CountingRunStore(writer.run_store()))


def script(iterations: int) -> GatedModel:
    return GatedModel([call_tools(tool_call("t", {"n": i})) for i in range(iterations)]
                      + [reply("done")])


class LogOnlyBuilder:
    """A TranscriptBuilder that does not opt in to fused commits (no ``reads_pending``):
    it reads the store's log only, so the last tool result must be durable first."""

    def __init__(self, inner: TranscriptBuilder) -> None:
        self.inner = inner

    async def build(self, hint: Any) -> Any:
        assert hint.pending == ()  # never handed facts it did not ask for
        return await self.inner.build(hint)


async def _loop(store: Any, *, iterations: int, settings: Settings | None = None,
                builder: Any = None) -> tuple[list[tuple[str, ...]], tuple[Any, ...], Any]:
    probe = Probe(result={"ok": True})
    tools = [probe_tool("t", probe)]
    model = script(iterations)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    settings=settings) as env:
            await env.create(RUN, "go")
            before = list(env.faults.transactions)
            use = builder(env.builder) if builder is not None else None
            result = await env.drive(builder=use)
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result.status is RunStatus.COMPLETED
            assert probe.calls == iterations and model.calls == iterations + 1
            assert before == []
            return list(env.faults.transactions), await env.facts(), model


# -- two transactions per iteration --------------------------------------------------------


async def test_two_transactions_per_iteration(store: Any, autojump_clock: Any) -> None:
    """model -> 1 tool -> model costs 2 transactions (5 unfused, 4 with a builder that
    does not read pending facts); the log is the same fact for fact either way."""
    n = 3
    fused, fused_facts, fused_model = await _loop(store, iterations=n)
    iteration = [(SUBMIT_MODEL, START_TOOL), (SUBMIT_TOOL, PREPARE, START_MODEL)]
    assert fused == [(PREPARE,), (START_MODEL,)] + iteration * n + [(SUBMIT_MODEL,)]
    assert len(fused) == 2 + 2 * n + 1

    # the same Run unfused, in a fresh scope of another store instance: same log
    from runx_actors.store.memory import MemoryStore

    plain, plain_facts, plain_model = await _loop(
        MemoryStore(), iterations=n, settings=Settings(fused_commits=False))
    single = [(SUBMIT_MODEL,), (START_TOOL,), (SUBMIT_TOOL,), (PREPARE,), (START_MODEL,)]
    assert plain == [(PREPARE,), (START_MODEL,)] + single * n + [(SUBMIT_MODEL,)]
    assert plain_facts == fused_facts  # same facts, same ids, same request digests
    # the builder saw the settled result before it was durable: the same prompts
    assert [r.body for r in plain_model.requests] == [r.body for r in fused_model.requests]

    # a builder without the opt-in: the model's result still fuses with the tool start
    log_only, log_only_facts, _ = await _loop(MemoryStore(), iterations=n,
                                              builder=LogOnlyBuilder)
    assert log_only == ([(PREPARE,), (START_MODEL,)]
                        + [(SUBMIT_MODEL, START_TOOL), (SUBMIT_TOOL,), (PREPARE,),
                           (START_MODEL,)] * n + [(SUBMIT_MODEL,)])
    assert log_only_facts == fused_facts


async def test_memory_store_counts_two_transactions_per_iteration(autojump_clock: Any) -> None:
    """The store's own counter (RUN-CMT-9): 2 more transactions per extra iteration."""
    from runx_actors.store.memory import MemoryStore

    counts = {}
    for fused in (True, False):
        for n in (1, 3):
            store = MemoryStore()
            await _loop(store, iterations=n, settings=Settings(fused_commits=fused))
            counts[fused, n] = store.statistics().transactions
    assert (counts[True, 3] - counts[True, 1]) / 2 == 2
    assert (counts[False, 3] - counts[False, 1]) / 2 == 5


async def test_before_prepare_hook_is_never_fused(store: Any, autojump_clock: Any) -> None:
    """A before_prepare hook reads the store: the tool result is durable before it."""
    seen: list[int] = []

    async def hook(run_store: Any, hint: Any) -> None:
        snapshot = await run_store.load(hint.run_id)
        seen.append(snapshot.position)
        assert hint.pending == ()

    transactions, facts, _ = await _loop(store, iterations=2,
                                         settings=Settings(before_prepare=hook))
    assert transactions == ([(PREPARE,), (START_MODEL,)]
                            + [(SUBMIT_MODEL, START_TOOL), (SUBMIT_TOOL,), (PREPARE,),
                               (START_MODEL,)] * 2 + [(SUBMIT_MODEL,)])
    assert len(seen) == 3
    completed = of_type(facts, F.ToolCallCompleted)
    assert len(completed) == 2


async def test_parallel_calls_start_in_one_batch(store: Any, autojump_clock: Any) -> None:
    """All calls the window admits start in the model result's batch; a sequential
    window fuses each settlement with the next call's start."""
    probe = Probe()
    tools = [probe_tool("t", probe)]
    for mode, expected in (
        ("parallel", [(SUBMIT_MODEL, START_TOOL, START_TOOL, START_TOOL), (SUBMIT_TOOL,),
                      (SUBMIT_TOOL,), (SUBMIT_TOOL, PREPARE, START_MODEL)]),
        ("sequential", [(SUBMIT_MODEL, START_TOOL), (SUBMIT_TOOL, START_TOOL),
                        (SUBMIT_TOOL, START_TOOL), (SUBMIT_TOOL, PREPARE, START_MODEL)]),
    ):
        from runx_actors.protocol.values import ToolScheduling

        model = GatedModel([call_tools(*(tool_call("t", {"n": i}) for i in range(3))),
                            reply("done")])
        settings = Settings(scheduling=ToolScheduling(mode=mode))
        run_id = f"run-{mode}"
        with trio.fail_after(HANG):
            async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                        settings=settings) as env:
                await env.create(run_id, "go")
                result = await env.drive(run_id)
                assert result.disposition is LoopDisposition.FINISHED
                assert env.faults.transactions == [(PREPARE,), (START_MODEL,), *expected,
                                                   (SUBMIT_MODEL,)]
                facts = await env.facts(run_id)
                assert len(of_type(facts, F.ToolCallStarted)) == 3
                assert len(of_type(facts, F.ToolCallCompleted)) == 3
    assert probe.calls == 6


# -- the start barrier ---------------------------------------------------------------------


async def test_start_barrier_holds_for_fused_starts(store: Any, autojump_clock: Any) -> None:
    """Every dispatch finds its start fact already in the store's log: the batch that
    starts an effect returned (committed) before the effect was sent."""
    probe = Probe()
    tools = [probe_tool("t", probe)]
    model = GatedModel([call_tools(tool_call("t", {"n": 1}), tool_call("t", {"n": 2})),
                        call_tools(tool_call("t", {"n": 3})), reply("done")])
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    proxy=True) as env:
            inner = env.writer.inner
            checked: list[str] = []
            early: list[str] = []

            async def durable_first(assignment: effect.Assignment) -> None:
                facts = await inner.run_facts(assignment.run_id)
                started = {f.effect for f in facts
                           if isinstance(f, F.ModelStepStarted | F.ToolCallStarted)}
                (checked if assignment.effect in started else early).append(
                    assignment.effect)

            env.executor.on_dispatch = durable_first
            await env.create(RUN, "go")
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            assert early == []
            assert len(checked) == 3 + 3  # 3 tool starts, 3 model starts
            assert (SUBMIT_MODEL, START_TOOL, START_TOOL) in env.faults.transactions
            assert (SUBMIT_TOOL, PREPARE, START_MODEL) in env.faults.transactions


# -- crashes on either side of the batch ---------------------------------------------------


def _batch_with(kind: type) -> Any:
    """A FaultyRunStore rule matching a batch (or commit) holding a *kind* command."""
    return lambda r: isinstance(r.envelope.command, kind)


@pytest.mark.parametrize("kind", [C.SubmitModelResult, C.SubmitToolResult],
                         ids=["model_result", "tool_result"])
async def test_error_before_batch_writes_nothing(store: Any, autojump_clock: Any,
                                                 kind: type) -> None:
    """The fused batch fails before it applied, and so does its one replay: nothing of
    it is written; the Outcome is delivered again and the Run completes, every effect
    started once."""
    probe = Probe(result="r")
    tools = [probe_tool("t", probe)]
    model = script(1)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    proxy=True) as env:
            env.faults.fail_before(_batch_with(kind), times=2)
            await env.create(RUN, "go")
            before = len(await env.facts())
            with pytest.raises(AmbiguousCommitError):
                await env.drive()
            failed = [t for t in env.faults.transactions if command_type_in(t, kind)]
            assert len(failed) == 2 and len(failed[0]) > 1  # a fused batch, replayed once
            facts = await env.facts()
            assert not any(isinstance(f, F.ModelStepCompleted if kind is C.SubmitModelResult
                                      else F.ToolCallCompleted) for f in facts)
            state = await env.state()
            if kind is C.SubmitModelResult:
                assert of_type(facts, F.ToolStepOpened) == []  # no start written either
                key = _key(of_type(facts, F.ModelStepStarted)[0].effect)
            else:
                assert len(of_type(facts, F.ModelStepPrepared)) == 1
                (started,) = of_type(facts, F.ToolCallStarted)
                key = _key(started.effect)
                (call,) = state.current.calls
                assert call.status is ToolCallStatus.EXECUTING
            assert len(facts) > before
            # the host delivers the Outcome again (the executor kept it)
            outcome = await env.runtime.watcher.await_outcome(key)
            delivered = await env.runtime.deliver(outcome)
            assert delivered.disposition is LoopDisposition.DELIVERED
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            facts = await env.facts()
            _one_start_per_effect(facts)
            assert probe.calls == 1 and model.calls == 2
            assert len(env.executor.tool_dispatches()) == 1
            assert len(env.executor.model_dispatches()) == 2


def command_type_in(transaction: tuple[str, ...], kind: type) -> bool:
    """True for a fused batch (more than one command) holding a *kind* command."""
    return kind.__name__ in transaction and len(transaction) > 1


@pytest.mark.parametrize("kind", [C.SubmitModelResult, C.SubmitToolResult],
                         ids=["model_result", "tool_result"])
async def test_ambiguous_error_after_batch_replays(store: Any, autojump_clock: Any,
                                                   kind: type) -> None:
    """The fused batch applied but its answer was lost: the one replay answers
    ALREADY_APPLIED for every command, and no effect is started or sent twice."""
    probe = Probe(result="r")
    tools = [probe_tool("t", probe)]
    model = script(1)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    proxy=True) as env:
            replies: list[tuple[str, Any]] = []

            async def record(request: CommitRequest, result: Any) -> None:
                if isinstance(request.envelope.command, kind):
                    replies.append((request.envelope.id, result.status))

            env.faults.after = record
            env.faults.fail_after(_batch_with(kind), times=1)
            await env.create(RUN, "go")
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            batches = [t for t in env.faults.transactions if command_type_in(t, kind)]
            assert len(batches) == 2 and batches[0] == batches[1] and len(batches[0]) > 1
            # the first answer was lost (applied); the replay's says it was applied
            fused_id = replies[0][0]
            assert [st for cid, st in replies if cid == fused_id] == [
                CommitStatus.ALREADY_APPLIED]
            assert sum(1 for r in env.faults.attempts if r.envelope.id == fused_id) == 2
            ids = [r.envelope.id for r in env.faults.attempts]
            assert all(ids.count(i) <= 2 for i in ids)
            facts = await env.facts()
            _one_start_per_effect(facts)
            assert probe.calls == 1 and model.calls == 2
            assert len(env.executor.tool_dispatches()) == 1
            assert len(env.executor.model_dispatches()) == 2


@pytest.mark.parametrize("kind", [C.SubmitModelResult, C.SubmitToolResult],
                         ids=["model_result", "tool_result"])
async def test_fenced_batch_dispatches_nothing(store: Any, autojump_clock: Any,
                                               kind: type) -> None:
    """Another writer opens the scope just before the fused batch: OwnershipLostError,
    nothing of the batch is written and nothing it would have started is sent."""
    probe = Probe(result="r")
    tools = [probe_tool("t", probe)]
    model = script(1)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    proxy=True) as env:
            fenced: list[str] = []

            async def fence(request: CommitRequest) -> None:
                if isinstance(request.envelope.command, kind) and not fenced:
                    fenced.append(request.envelope.id)
                    await store.open(SCOPE)

            env.faults.before = fence
            await env.create(RUN, "go")
            with pytest.raises(OwnershipLostError):
                await env.drive()
            assert fenced
            facts = await env.facts()
            if kind is C.SubmitModelResult:
                assert of_type(facts, F.ToolStepOpened) == []
                assert env.executor.tool_dispatches() == [] and probe.calls == 0
            else:
                assert of_type(facts, F.ToolCallCompleted) == []
                assert len(of_type(facts, F.ModelStepPrepared)) == 1
                assert len(env.executor.model_dispatches()) == 1 and model.calls == 1
            assert env.runtime.live_actors() == frozenset()


# -- refusals inside a batch, failures while planning it -----------------------------------


async def test_refused_prepare_keeps_the_settlement(store: Any, autojump_clock: Any) -> None:
    """An input arrives just before the fused batch: its PrepareModelRequest (built for
    the old position) is refused as stale, the settlement before it is committed, and
    the loop prepares again at the new position, consuming the input."""
    probe = Probe(result="r")
    tools = [probe_tool("t", probe)]
    model = script(1)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    proxy=True) as env:
            results: list[BatchResult] = []
            inner = env.faults.inner
            sent: list[str] = []

            async def late_input(request: CommitRequest) -> None:
                if isinstance(request.envelope.command, C.SubmitToolResult) and not sent:
                    sent.append("in-2")  # through the inner store: no hook, no batch
                    await accept_input(inner, RUN, [b.agent_input("in-2")])

            original = env.faults.commit_batch

            async def keep(requests: Sequence[CommitRequest]) -> BatchResult:
                batch = await original(requests)
                results.append(batch)
                return batch

            env.faults.commit_batch = keep
            env.faults.before = late_input
            await env.create(RUN, "go")
            result = await env.drive()
            assert result.disposition is LoopDisposition.FINISHED
            (refused,) = [batch for batch in results if batch.error is not None]
            assert isinstance(refused.error, StaleRuntimeError)
            (settled,) = refused.results  # the prefix: the settlement, committed
            assert of_type(settled.facts, F.ToolCallCompleted)
            facts = await env.facts()
            prepared = of_type(facts, F.ModelStepPrepared)
            assert len(prepared) == 2 and prepared[1].input_ids == ("in-2",)
            _one_start_per_effect(facts)
            assert probe.calls == 1 and model.calls == 2


class Boom(Exception):
    pass


async def test_builder_error_commits_the_settlement_alone(store: Any,
                                                          autojump_clock: Any) -> None:
    """The opted-in builder raises while the fused batch is planned: the tool result is
    committed on its own (as without fusion) and the builder's error is raised; the
    next drive completes."""
    probe = Probe(result="r")
    tools = [probe_tool("t", probe)]
    model = script(1)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting) as env:
            builds: list[Any] = []

            class Failing:
                reads_pending = True

                async def build(self, hint: Any) -> Any:
                    builds.append(hint)
                    if len(builds) == 2:
                        assert hint.pending  # the settlement it would have fused
                        raise Boom("prompt service down")
                    return await env.builder.build(hint)

            await env.create(RUN, "go")
            with pytest.raises(Boom):
                await env.drive(builder=Failing())
            assert (SUBMIT_TOOL,) in env.faults.transactions
            facts = await env.facts()
            assert len(of_type(facts, F.ToolCallCompleted)) == 1
            assert len(of_type(facts, F.ModelStepPrepared)) == 1
            result = await env.drive(builder=Failing())
            assert result.disposition is LoopDisposition.FINISHED
            assert probe.calls == 1 and model.calls == 2


async def test_pending_facts_reach_only_opted_in_builders(store: Any,
                                                          autojump_clock: Any) -> None:
    """A builder wrapped by one that does not declare ``reads_pending`` never gets
    pending facts; the TranscriptBuilder does and builds what the log would give."""
    probe = Probe(result={"v": 42})
    tools = [probe_tool("t", probe)]
    model = GatedModel([call_tools(tool_call("t")), reply("done"),  # run-1
                        call_tools(tool_call("t")), reply("done")])  # run-2
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model) as env:
            recording = RecordingBuilder(env.builder)
            await env.create(RUN, "go")
            assert (await env.drive(builder=recording)).disposition is \
                LoopDisposition.FINISHED
            assert all(h.pending == () for h in recording.hints)

            pending_hints: list[Any] = []

            class Spy:
                reads_pending = True

                async def build(self, hint: Any) -> Any:
                    pending_hints.append(hint)
                    return await env.builder.build(hint)

            await env.create("run-2", "go")
            assert (await env.drive("run-2", builder=Spy())).disposition is \
                LoopDisposition.FINISHED
            first, second = pending_hints
            assert first.pending == () and first.pending_bodies == ()
            (completed,) = second.pending  # the settlement fused with this prepare
            assert isinstance(completed, F.ToolCallCompleted)
            data = second.pending_body(completed.output_digest)
            assert data is not None
            assert decode_frozen("tool_output", completed.output_digest, data) == {
                "output": {"v": 42}}
            assert second.pending_body("sha256:" + "0" * 64) is None
            # what the builder got is what the log says once it is durable
            facts = await env.facts("run-2")
            assert completed in facts
            assert bytes(await store.frozen.get(completed.output_digest)) == data


def _key(effect_id: str) -> effect.AssignmentKey:
    return effect.AssignmentKey(SCOPE, RUN, effect_id)


def _one_start_per_effect(facts: Sequence[Any]) -> None:
    starts = [f.effect for f in facts if isinstance(f, F.ModelStepStarted | F.ToolCallStarted)]
    assert len(starts) == len(set(starts))



async def test_drive_cancelled_while_building_starts_no_model(store: Any,
                                                              autojump_clock: Any) -> None:
    """``cancel_drive`` while the fused prompt is built: as with advance, the Prepare is
    committed with the settlement but no model effect starts."""
    from runx_actors.protocol.errors import DriveCancelledError

    probe = Probe(result="r")
    tools = [probe_tool("t", probe)]
    model = script(1)
    with trio.fail_after(HANG):
        async with open_wrapped_env(store, tools=tools, model=model, wrap=counting,
                                    proxy=True) as env:
            builds: list[Any] = []

            class Cancelling:
                reads_pending = True

                async def build(self, hint: Any) -> Any:
                    builds.append(hint)
                    if len(builds) == 2:
                        env.handle().cancel_drive()
                    return await env.builder.build(hint)

            await env.create(RUN, "go")
            with pytest.raises(DriveCancelledError):
                await env.drive(builder=Cancelling())
            assert (SUBMIT_TOOL, PREPARE) in env.faults.transactions
            facts = await env.facts()
            assert len(of_type(facts, F.ModelStepPrepared)) == 2
            assert len(of_type(facts, F.ModelStepStarted)) == 1
            assert len(env.executor.model_dispatches()) == 1 and model.calls == 1
            result = await env.drive(builder=Cancelling())
            assert result.disposition is LoopDisposition.FINISHED
            _one_start_per_effect(await env.facts())
