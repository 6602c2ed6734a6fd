"""LocalExecutor: the ExecutionPort contract (spec §6.2-§6.9, §6.11; §8.4 #80, #84-#86;
INV-31, INV-35, INV-36)."""

from __future__ import annotations

import threading
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from local_helpers import model_assignment, outcome_of, rekey, tool_assignment, wait_running

from runx_actors import effect
from runx_actors.executors import (
    LocalExecutor,
    ModelError,
    ScriptedModel,
    ToolError,
    ToolUnknownError,
    open_local_executor,
    python_tool,
    reply,
)
from runx_actors.protocol.errors import (
    DispatchRejectedError,
    ExecutionAbortedError,
    ExecutionNotFoundError,
    OutcomeCollectedError,
    OutcomeNotReadyError,
    SettlementsEvictedError,
    StateConflictError,
)
from runx_actors.protocol.values import (
    ModelRequest,
    ModelResult,
    ResponsePolicy,
    ToolPlacement,
    ToolReplay,
    ToolResult,
    Usage,
)

NUMBERS = {
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
    "additionalProperties": False,
}


def add(a: float, b: float) -> dict[str, float]:
    return {"sum": a + b}


ADD = python_tool(add, ref="math.add", name="add", parameters=NUMBERS,
                  replay=ToolReplay.ALLOWED)


class Counter:
    """An async tool that counts its runs."""

    def __init__(self) -> None:
        self.runs = 0

    async def __call__(self) -> dict[str, int]:
        await trio.lowlevel.checkpoint()
        self.runs += 1
        return {"run": self.runs}


class Blocker:
    """An async tool that runs until released."""

    def __init__(self) -> None:
        self.started = trio.Event()
        self.release = trio.Event()

    async def __call__(self) -> str:
        self.started.set()
        await self.release.wait()
        return "released"


# -- §8.4 #80 ------------------------------------------------------------------------------

async def test_tool_exception_becomes_unknown() -> None:
    """#80: a tool raising an unexpected exception yields ToolExecutionUnknown (the Run
    then records FAILED UNKNOWN); ToolError is a KNOWN failure; ToolUnknownError UNKNOWN."""

    def sync_boom() -> None:
        raise RuntimeError("disk on fire")

    async def async_boom() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyError("missing")

    def known() -> None:
        raise ToolError("not_found", "no such record", retry=effect.RetryDisposition.NEVER)

    def unsure() -> None:
        raise ToolUnknownError("timeout", "payment gateway did not answer")

    tools = [python_tool(sync_boom, ref="sync.boom"), python_tool(async_boom, ref="async.boom"),
             python_tool(known, ref="known"), python_tool(unsure, ref="unsure")]
    async with open_local_executor(tools=tools) as ex:
        results = {}
        for i, t in enumerate(tools):
            a = tool_assignment(t, effect_id=f"e{i}")
            await ex.dispatch(a)
            results[t.ref] = await outcome_of(ex, a.key)

    for ref, needle in (("sync.boom", "RuntimeError"), ("async.boom", "KeyError")):
        result = results[ref].result
        assert isinstance(result, effect.ToolExecutionUnknown)
        assert result.failure.class_ == "execution_failed"
        assert needle in result.failure.message
        assert results[ref].status() is effect.ExecutionStatus.UNKNOWN
    assert results["known"].result == effect.ToolExecutionFailed(
        effect.ToolFailure("not_found", "no such record"), effect.RetryDisposition.NEVER)
    assert results["known"].status() is effect.ExecutionStatus.FAILED
    assert results["unsure"].result == effect.ToolExecutionUnknown(
        effect.ToolFailure("timeout", "payment gateway did not answer"))


# -- §8.4 #84 ------------------------------------------------------------------------------

async def test_local_executor_attach_and_cancel() -> None:
    """#84: attach reports active while running and terminal after; cancel yields a
    Cancelled Outcome."""
    blocker = Blocker()
    tools = [python_tool(blocker, ref="block"), ADD]
    async with open_local_executor(tools=tools) as ex:
        running = tool_assignment(tools[0], effect_id="running")
        await ex.dispatch(running)
        await blocker.started.wait()
        attachment = await ex.attach(running.digest_only())
        assert attachment.state is effect.AttachmentState.ACTIVE
        assert attachment.backend_attached and attachment.owner == ex.epoch
        assert attachment.execution is not None and attachment.execution.provider == "local"
        assert await ex.get_status(running.key) is effect.ExecutionStatus.RUNNING
        with pytest.raises(OutcomeNotReadyError):
            await ex.get_outcome(running.key)

        await ex.cancel(running.key)
        outcome = await outcome_of(ex, running.key)
        assert isinstance(outcome.result, effect.Cancelled)
        assert outcome.status() is effect.ExecutionStatus.CANCELLED
        assert (await ex.attach(running)).state is effect.AttachmentState.TERMINAL
        assert await ex.get_status(running.key) is effect.ExecutionStatus.CANCELLED
        assert "cancel_requested" in ex.history(running.key)
        await ex.cancel(running.key)  # settled: a no-op
        assert (await ex.get_outcome(running.key)) == outcome

        done = tool_assignment(ADD, '{"a":1,"b":2}', effect_id="done")
        await ex.dispatch(done)
        assert (await outcome_of(ex, done.key)).result == effect.ToolExecutionSucceeded(
            ToolResult('{"sum":3}'))
        assert (await ex.attach(done)).state is effect.AttachmentState.TERMINAL
        assert (await ex.attach(rekey(done, "never"))).state is effect.AttachmentState.MISSING
        with pytest.raises(ExecutionNotFoundError):
            await ex.cancel(effect.AssignmentKey("scope-1", "run-1", "never"))


async def test_cancel_of_a_sync_tool_abandons_its_thread() -> None:
    gate = threading.Event()
    entered = threading.Event()

    def slow() -> str:
        entered.set()
        gate.wait(30)
        return "late"

    tool = python_tool(slow, ref="slow")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        await trio.to_thread.run_sync(entered.wait, 30)
        assert (await ex.attach(a)).state is effect.AttachmentState.ACTIVE
        await ex.cancel(a.key)
        outcome = await outcome_of(ex, a.key)
        gate.set()
    assert isinstance(outcome.result, effect.Cancelled)


async def test_cancel_right_after_dispatch_stops_the_tool() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        await ex.cancel(a.key)
        outcome = await outcome_of(ex, a.key)
        await trio.testing.wait_all_tasks_blocked()
    assert isinstance(outcome.result, effect.Cancelled)
    assert counter.runs == 0


# -- §8.4 #85 ------------------------------------------------------------------------------

async def test_local_executor_validate_checks_tool_declarations() -> None:
    """#85: mismatching digest, policy, replay or placement → tool_definition_mismatch;
    unknown ref → tool_lookup_failed; bad arguments → invalid_arguments (RUN-EXE-5)."""
    other_digest = "sha256:" + "0" * 64
    async with open_local_executor(tools=[ADD], models={"scripted": ScriptedModel([])}) as ex:
        good = tool_assignment(ADD, '{"a":1,"b":2}')
        assert await ex.validate(good) is None
        assert await ex.validate(attrs.evolve(good, effect="")) is None  # as the loop asks

        mismatches: list[dict[str, Any]] = [
            {"definition_digest": other_digest}, {"definition_digest": ""},
            {"policy": ResponsePolicy.APPROVAL_REQUIRED}, {"replay": ToolReplay.NEVER},
            {"replay": ToolReplay.UNKNOWN}, {"placement": ToolPlacement.WORKSPACE},
        ]
        for change in mismatches:
            failure = await ex.validate(tool_assignment(ADD, '{"a":1,"b":2}', **change))
            assert failure is not None, change
            assert failure.class_ == "tool_definition_mismatch", change
            # dispatch refuses a mismatching declaration too (nothing starts)
            with pytest.raises(DispatchRejectedError):
                await ex.dispatch(tool_assignment(ADD, '{"a":1,"b":2}', effect_id="x",
                                                  **change))

        unknown = tool_assignment(ADD, "{}", tool_ref="math.sub")
        assert (await ex.validate(unknown)) == effect.ToolFailure(
            "tool_lookup_failed", "no tool 'math.sub'")

        for arguments in ['{"a":1', '{"a":1,"a":2}', '"hello"', "[1,2]", '{"a":1}',
                          '{"a":"x","b":2}', '{"a":1,"b":2,"c":3}']:
            failure = await ex.validate(tool_assignment(ADD, arguments))
            assert failure is not None and failure.class_ == "invalid_arguments", arguments

        assert await ex.validate(model_assignment(inline=False)) is None
        failure = await ex.validate(model_assignment("gpt-x", inline=False))
        assert failure is not None and failure.class_ == "provider_failure"
        assert ex.statistics().accepted == 0  # validate never starts anything


async def test_validate_checks_the_callable_signature() -> None:
    def greet(name: str) -> str:
        return f"hello {name}"

    tool = python_tool(greet, ref="greet")  # schema: any object
    async with open_local_executor(tools=[tool]) as ex:
        assert await ex.validate(tool_assignment(tool, '{"name":"ada"}')) is None
        failure = await ex.validate(tool_assignment(tool, '{"nom":"ada"}'))
        assert failure is not None and failure.class_ == "invalid_arguments"
        # at execution the same refusal is a KNOWN failure: the tool never ran
        a = tool_assignment(tool, '{"nom":"ada"}')
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
        assert isinstance(result, effect.ToolExecutionFailed)
        assert result.failure.class_ == "invalid_arguments"


# -- §8.4 #86 ------------------------------------------------------------------------------

async def test_local_executor_retains_bounded_outcomes() -> None:
    """#86: after more than 1024 settled (and acknowledged) keys the oldest reads as not
    found / missing."""
    counter = Counter()
    tool = python_tool(counter, ref="count")
    total = effect.DEFAULT_RETAINED_OUTCOMES + 6
    async with open_local_executor(tools=[tool]) as ex:
        first = tool_assignment(tool, effect_id="k0")
        for i in range(total):
            await ex.dispatch(rekey(first, f"k{i}"))
            await trio.testing.wait_all_tasks_blocked()
            await ex.acknowledge(rekey(first, f"k{i}").key)
        stats = ex.statistics()
        assert counter.runs == total
        assert stats.retained == effect.DEFAULT_RETAINED_OUTCOMES
        assert stats.evicted == 6 and stats.live == 0
        for i in range(6):
            old = rekey(first, f"k{i}")
            assert await ex.get_status(old.key) is effect.ExecutionStatus.NOT_FOUND
            assert (await ex.attach(old)).state is effect.AttachmentState.MISSING
            with pytest.raises(ExecutionNotFoundError):
                await ex.get_outcome(old.key)
            assert ex.history(old.key) == ()
        kept = rekey(first, "k6")
        assert (await ex.attach(kept)).state is effect.AttachmentState.TERMINAL
        newest = rekey(first, f"k{total - 1}")
        assert await ex.get_status(newest.key) is effect.ExecutionStatus.COMPLETED


async def test_retention_bound_is_configurable_and_counts_acknowledged() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool], retain=2) as ex:
        a = tool_assignment(tool, effect_id="a")
        for name in "abc":
            await ex.dispatch(rekey(a, name))
            await outcome_of(ex, rekey(a, name).key)
            await ex.acknowledge(rekey(a, name).key)
        assert (await ex.attach(a)).state is effect.AttachmentState.MISSING
        assert (await ex.attach(rekey(a, "b"))).state is effect.AttachmentState.TERMINAL
    with pytest.raises(ValueError):
        async with open_local_executor(tools=[tool], retain=0):
            pass


# -- idempotent re-dispatch (INV-36) -------------------------------------------------------

async def test_redispatch_of_identical_content_starts_nothing() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool, target=effect.TargetRef("host", "a"))
        await ex.dispatch(a)
        await ex.dispatch(a)
        # the opaque target is resolved again on every start: not content
        await ex.dispatch(attrs.evolve(a, target=effect.TargetRef("host", "b")))
        await ex.dispatch(attrs.evolve(a, target=None))
        outcome = await outcome_of(ex, a.key)
        await ex.dispatch(a)  # after settlement
        await ex.acknowledge(a.key)
        await ex.dispatch(a)  # after acknowledgement: still runs nothing
        await trio.testing.wait_all_tasks_blocked()
        assert counter.runs == 1
        assert ex.statistics().accepted == 1 and ex.statistics().started == 1
        assert outcome.result == effect.ToolExecutionSucceeded(ToolResult('{"run":1}'))
        with pytest.raises(OutcomeCollectedError):
            await ex.get_outcome(a.key)


async def test_redispatch_with_different_content_is_rejected() -> None:
    """INV-36: the same key with different content is refused; the record is untouched."""
    async with open_local_executor(tools=[ADD], models={"scripted": ScriptedModel(
            [reply("hi")])}) as ex:
        a = tool_assignment(ADD, '{"a":1,"b":2}')
        await ex.dispatch(a)
        changed = [
            tool_assignment(ADD, '{"a":1,"b":3}'),
            attrs.evolve(a, step_id="step-2"),
            attrs.evolve(a, call_id="call-2"),
            model_assignment(effect_id="effect-1"),
        ]
        for other in changed:
            assert other.key == a.key
            with pytest.raises(DispatchRejectedError) as caught:
                await ex.dispatch(other)
            assert caught.value.key == a.key  # type: ignore[attr-defined]
        outcome = await outcome_of(ex, a.key)
        assert isinstance(outcome.result, effect.ToolExecutionSucceeded)
        assert ex.statistics().accepted == 1


# -- abort versus accept (INV-31, RUN-EXE-16) ----------------------------------------------

async def test_abort_wins_an_unaccepted_key() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        assert (await ex.abort(a.digest_only())).state is effect.AttachmentState.ABORTED
        assert (await ex.abort(a)).state is effect.AttachmentState.ABORTED  # idempotent
        with pytest.raises(DispatchRejectedError):
            await ex.dispatch(a)
        assert await ex.get_status(a.key) is effect.ExecutionStatus.ABORTED
        assert (await ex.attach(a)).state is effect.AttachmentState.ABORTED
        with pytest.raises(ExecutionAbortedError):
            await ex.get_outcome(a.key)
        with pytest.raises(StateConflictError):
            await ex.acknowledge(a.key)
        await ex.cancel(a.key)  # nothing to stop
        assert ex.history(a.key) == ("execution_aborted",)
        await trio.testing.wait_all_tasks_blocked()
        assert counter.runs == 0


async def test_acceptance_wins_over_a_later_abort() -> None:
    blocker = Blocker()
    tool = python_tool(blocker, ref="block")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        assert (await ex.abort(a)).state is effect.AttachmentState.ACTIVE
        blocker.release.set()
        await outcome_of(ex, a.key)
        assert (await ex.abort(a)).state is effect.AttachmentState.TERMINAL
        assert await ex.get_status(a.key) is effect.ExecutionStatus.COMPLETED


async def test_racing_dispatch_and_abort_have_exactly_one_winner() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool]) as ex:
        results: dict[str, list[str]] = {}

        async def dispatch(a: effect.Assignment) -> None:
            try:
                await ex.dispatch(a)
                results.setdefault(a.effect, []).append("accepted")
            except DispatchRejectedError:
                results.setdefault(a.effect, []).append("refused")

        async def abort(a: effect.Assignment) -> None:
            attachment = await ex.abort(a)
            results.setdefault(a.effect, []).append(attachment.state.value)

        async with trio.open_nursery() as nursery:
            for i in range(50):
                a = tool_assignment(tool, effect_id=f"race-{i}")
                first, second = (dispatch, abort) if i % 2 else (abort, dispatch)
                nursery.start_soon(first, a)
                nursery.start_soon(second, a)
        await trio.testing.wait_all_tasks_blocked()
    accepted = sum(1 for r in results.values() if "accepted" in r)
    for outcome in results.values():
        assert sorted(outcome) in (["aborted", "refused"], ["accepted", "active"],
                                   ["accepted", "terminal"])
    assert counter.runs == accepted


# -- model dispatch (RUN-EXE-7, INV-35) ----------------------------------------------------

async def test_model_dispatch_needs_the_matching_inline_request() -> None:
    model = ScriptedModel([reply("hello", input_tokens=2, output_tokens=1)])
    async with open_local_executor(models={"scripted": model}) as ex:
        with pytest.raises(DispatchRejectedError):
            await ex.dispatch(model_assignment(inline=False))
        wrong = model_assignment()
        assert isinstance(wrong.body, effect.ModelAssignment)
        tampered = attrs.evolve(wrong, body=attrs.evolve(
            wrong.body, request=ModelRequest("scripted", body='{"temperature":1}')))
        with pytest.raises(DispatchRejectedError):
            await ex.dispatch(tampered)
        with pytest.raises(DispatchRejectedError):
            await ex.dispatch(model_assignment("gpt-x"))
        with pytest.raises(DispatchRejectedError):
            await ex.dispatch(model_assignment(effect_id=""))
        assert ex.statistics().accepted == 0 and model.calls == 0

        good = model_assignment()
        await ex.dispatch(good)
        outcome = await outcome_of(ex, good.key)
        assert outcome.result == effect.ModelSucceeded(reply("hello", input_tokens=2,
                                                             output_tokens=1))
        assert model.requests == (ModelRequest("scripted"),)
        await ex.aclose()
        assert ex.closed
        with pytest.raises(DispatchRejectedError):
            await ex.dispatch(model_assignment(effect_id="after-close"))
        await ex.dispatch(good)  # a known key is still confirmed


class _Weird:
    def __init__(self, answer: Any) -> None:
        self.answer = answer

    async def complete(self, request: ModelRequest) -> Any:
        await trio.lowlevel.checkpoint()
        if isinstance(self.answer, BaseException):
            raise self.answer
        return self.answer


@pytest.mark.parametrize(("answer", "code"), [
    (ModelError(effect.FailureCode.AUTHENTICATION_FAILED, "bad key"), "authentication_failed"),
    (RuntimeError("socket closed"), "executor_error"),
    ("just text", "malformed_result"),
    (ModelResult(content="\ud800"), "malformed_result"),
])
async def test_model_failures_are_classified(answer: Any, code: str) -> None:
    async with open_local_executor(models={"m": _Weird(answer)}) as ex:
        a = model_assignment("m")
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ModelFailed)
    assert result.code.value == code


async def test_model_timeout_is_deadline_exceeded(autojump_clock: Any) -> None:
    model = ScriptedModel([reply("slow")], delay=100.0)
    async with open_local_executor(models={"scripted": model}, model_timeout=10.0) as ex:
        a = model_assignment()
        await ex.dispatch(a)
        with trio.fail_after(11):
            result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ModelFailed)
    assert result.code is effect.FailureCode.DEADLINE_EXCEEDED


# -- acknowledgement (RUN-EXE-13) ----------------------------------------------------------

async def test_acknowledge_keeps_the_record() -> None:
    blocker = Blocker()
    tool = python_tool(blocker, ref="block")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        with pytest.raises(ExecutionNotFoundError):
            await ex.acknowledge(a.key)
        await ex.dispatch(a)
        with pytest.raises(StateConflictError):
            await ex.acknowledge(a.key)
        blocker.release.set()
        await outcome_of(ex, a.key)
        await ex.acknowledge(a.key)
        await ex.acknowledge(a.key)  # idempotent
        assert await ex.get_status(a.key) is effect.ExecutionStatus.COMPLETED
        assert (await ex.attach(a)).state is effect.AttachmentState.TERMINAL
        with pytest.raises(OutcomeCollectedError):
            await ex.get_outcome(a.key)
        assert ex.history(a.key)[-1] == "outcome_acknowledged"
        assert ex.history(a.key).count("outcome_acknowledged") == 1


# -- settlement notifications (RUN-EXE-17) -------------------------------------------------

async def test_settlement_stream_announces_then_notifies() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool], settlement_window=2) as ex:
        stream = ex.settlements("", 0)
        announcement = await stream.__anext__()
        assert announcement == effect.Settlement(None, ex.epoch, 0)
        a = tool_assignment(tool, effect_id="a")
        await ex.dispatch(a)
        assert await stream.__anext__() == effect.Settlement(a.key, ex.epoch, 1)
        b = rekey(a, "b")
        await ex.abort(b)  # a tombstone is a notice too (reading it fails definitively)
        assert await stream.__anext__() == effect.Settlement(b.key, ex.epoch, 2)

        resumed = ex.settlements(ex.epoch, 1)
        assert (await resumed.__anext__()).key is None
        assert (await resumed.__anext__()).sequence == 2

        for name in "cd":
            await ex.dispatch(rekey(a, name))
            await outcome_of(ex, rekey(a, name).key)
        stale = ex.settlements(ex.epoch, 1)  # the window (2) moved past sequence 2
        assert (await stale.__anext__()).sequence == 4
        with pytest.raises(SettlementsEvictedError):
            await stale.__anext__()
        fresh = ex.settlements("some-other-epoch", 1)
        assert await fresh.__anext__() == effect.Settlement(None, ex.epoch, 4)
        await fresh.aclose()  # type: ignore[attr-defined]
        with pytest.raises(StopAsyncIteration):
            await fresh.__anext__()


# -- progress frames (RUN-EXE-12) ----------------------------------------------------------

async def test_progress_frames_end_with_end() -> None:
    async def stepper(context: Any, steps: int) -> str:
        for i in range(steps):
            context.progress({"step": i})
            await trio.lowlevel.checkpoint()
        return "ok"

    def threaded(context: Any) -> str:
        context.progress({"from": "thread"})
        return "ok"

    tools = [python_tool(stepper, ref="stepper", context=True),
             python_tool(threaded, ref="threaded", context=True)]
    async with open_local_executor(tools=tools, progress_ring=3) as ex:
        a = tool_assignment(tools[0], '{"steps":2}')
        await ex.dispatch(a)
        frames = [f async for f in ex.progress(a.key)]
        assert [(f.kind.value, f.generation, f.sequence, f.payload) for f in frames] == [
            ("tool_progress", 0, 1, '{"step":0}'), ("tool_progress", 0, 2, '{"step":1}'),
            ("end", 0, 3, "{}")]

        b = tool_assignment(tools[0], '{"steps":6}', effect_id="many")
        await ex.dispatch(b)
        await outcome_of(ex, b.key)
        late = [f.sequence async for f in ex.progress(b.key)]
        assert late == [5, 6, 7]  # the ring kept 3 frames: the gap shows in the sequence

        c = tool_assignment(tools[1], effect_id="threaded")
        await ex.dispatch(c)
        await outcome_of(ex, c.key)
        assert [f.payload async for f in ex.progress(c.key)] == ['{"from":"thread"}', "{}"]

        with pytest.raises(ExecutionNotFoundError):
            async for _ in ex.progress(effect.AssignmentKey("scope-1", "run-1", "nope")):
                pass
        await ex.abort(rekey(a, "gone"))
        with pytest.raises(ExecutionAbortedError):
            async for _ in ex.progress(rekey(a, "gone").key):
                pass


async def test_streaming_model_emits_text_deltas() -> None:
    model = ScriptedModel([reply("streamed text")])
    async with open_local_executor(models={"scripted": model}) as ex:
        a = model_assignment()
        await ex.dispatch(a)
        frames = [f async for f in ex.progress(a.key)]
    assert [f.kind for f in frames] == [effect.ProgressKind.MODEL_TEXT_DELTA,
                                        effect.ProgressKind.END]
    assert frames[0].payload == '{"text":"streamed text"}'


# -- retries inside the worker (RUN-EXE-11) ------------------------------------------------

async def test_worker_retries_failures_whose_disposition_allows_it(autojump_clock: Any) -> None:
    limited = ModelError(effect.FailureCode.RATE_LIMITED, "429")
    model = ScriptedModel([limited, limited, reply("third time")])
    refused = ScriptedModel([ModelError(effect.FailureCode.BAD_REQUEST, "400"), reply("x")])
    async with open_local_executor(models={"scripted": model, "refused": refused},
                                   max_attempts=3, backoff=1.0) as ex:
        a = model_assignment()
        await ex.dispatch(a)
        start = trio.current_time()
        outcome = await outcome_of(ex, a.key)
        assert trio.current_time() - start == pytest.approx(1.0 + 2.0)
        assert outcome.result == effect.ModelSucceeded(reply("third time"))
        current, superseded = ex.execution_ref(a.key)
        assert len(superseded) == 2 and current not in superseded
        frames = [f async for f in ex.progress(a.key)]
        assert [(f.kind.value, f.generation) for f in frames] == [
            ("reset", 1), ("reset", 2), ("model_text_delta", 2), ("end", 2)]
        assert ex.history(a.key).count("execution_restarted") == 2

        b = model_assignment("refused", effect_id="b")
        await ex.dispatch(b)
        result = (await outcome_of(ex, b.key)).result
        assert isinstance(result, effect.ModelFailed)
        assert result.code is effect.FailureCode.BAD_REQUEST and refused.calls == 1


# -- recovery primitives (RUN-EXE-6, RUN-EXE-9) --------------------------------------------

async def test_orphaned_records_are_adopted_per_replay_policy() -> None:
    never = Blocker()
    allowed_runs: list[int] = []
    allowed_gate = trio.Event()

    async def allowed() -> str:
        allowed_runs.append(1)
        if len(allowed_runs) == 1:
            await allowed_gate.wait()
        return "done"

    tools = [python_tool(never, ref="never", replay=ToolReplay.NEVER),
             python_tool(allowed, ref="allowed", replay=ToolReplay.ALLOWED)]
    model = ScriptedModel([reply("first"), reply("second")], delay=0.0)
    async with open_local_executor(tools=tools, models={"scripted": model}) as ex:
        t_never = tool_assignment(tools[0], effect_id="never")
        t_allowed = tool_assignment(tools[1], effect_id="allowed")
        for a in (t_never, t_allowed):
            await ex.dispatch(a)
            await wait_running(ex, a.key)
            ex.orphan_nowait(a.key)
            await trio.testing.wait_all_tasks_blocked()
            assert (await ex.attach(a)).state is effect.AttachmentState.ORPHANED
            with pytest.raises(OutcomeNotReadyError):
                await ex.get_outcome(a.key)
            await ex.recover_execution(a.key)

        result = (await outcome_of(ex, t_never.key)).result
        assert result == effect.ToolExecutionUnknown(
            effect.ToolFailure("execution_failed", "adopted_without_replay"))
        assert isinstance((await outcome_of(ex, t_allowed.key)).result,
                          effect.ToolExecutionSucceeded)
        assert len(allowed_runs) == 2
        assert len(ex.execution_ref(t_allowed.key)[1]) == 1
        assert "execution_adopted" in ex.history(t_allowed.key)

        await ex.recover_execution(t_allowed.key)  # settled: no-op
        with pytest.raises(ExecutionNotFoundError):
            await ex.recover_execution(effect.AssignmentKey("scope-1", "run-1", "nope"))
        await ex.abort(rekey(t_never, "tomb"))
        with pytest.raises(ExecutionAbortedError):
            await ex.recover_execution(rekey(t_never, "tomb").key)
        with pytest.raises(StateConflictError):
            ex.orphan_nowait(t_never.key)


async def test_orphaned_model_is_restarted_with_the_same_request(autojump_clock: Any) -> None:
    model = ScriptedModel([reply("lost"), reply("adopted")], delay=5.0)
    async with open_local_executor(models={"scripted": model}) as ex:
        a = model_assignment()
        await ex.dispatch(a)
        await trio.sleep(1)
        ex.orphan_nowait(a.key)
        await trio.sleep(10)
        assert (await ex.attach(a)).state is effect.AttachmentState.ORPHANED
        await ex.recover_execution(a.key)
        outcome = await outcome_of(ex, a.key)
    assert outcome.result == effect.ModelSucceeded(reply("adopted"))
    assert model.requests == (ModelRequest("scripted"), ModelRequest("scripted"))


async def test_dispose_closes_an_unfinished_record() -> None:
    blocker = Blocker()
    tool = python_tool(blocker, ref="block")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        await blocker.started.wait()
        await ex.dispose(a.key)
        assert (await outcome_of(ex, a.key)).result == effect.Unknown("disposed")
        await ex.dispose(a.key)  # settled: no-op
        b = rekey(a, "orphan")
        await ex.dispatch(b)
        await wait_running(ex, b.key)
        ex.orphan_nowait(b.key)
        await ex.dispose(b.key)
        assert (await ex.get_outcome(b.key)).result == effect.Unknown("disposed")
        with pytest.raises(ExecutionNotFoundError):
            await ex.dispose(effect.AssignmentKey("scope-1", "run-1", "nope"))


# -- lifetime -----------------------------------------------------------------------------

async def test_closing_the_executor_cancels_live_executions() -> None:
    blocker = Blocker()
    tool = python_tool(blocker, ref="block")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        await blocker.started.wait()
    assert (await ex.get_outcome(a.key)).result == effect.Cancelled("executor closed")
    assert ex.closed


async def test_executor_with_a_nursery_argument() -> None:
    async with trio.open_nursery() as nursery:
        ex = LocalExecutor(nursery=nursery, tools=[ADD])
        a = tool_assignment(ADD, '{"a":2,"b":2}')
        await ex.dispatch(a)
        assert isinstance((await outcome_of(ex, a.key)).result, effect.ToolExecutionSucceeded)
        await ex.aclose()


async def test_bad_options_are_refused_before_anything_starts() -> None:
    with pytest.raises(ValueError):
        async with open_local_executor(tools=[ADD, ADD]):
            pass
    with pytest.raises(ValueError):
        async with open_local_executor(backoff=-1):
            pass


# -- tools: timeouts, outputs, threads ------------------------------------------------------

async def test_tool_timeout_is_unknown(autojump_clock: Any) -> None:
    async def forever() -> None:
        await trio.sleep_forever()

    tool = python_tool(forever, ref="forever", timeout=5.0)
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ToolExecutionUnknown)
    assert result.failure.class_ == "timeout"


@pytest.mark.parametrize("value", [None, "", {1, 2}, float("nan")])
async def test_tool_output_that_cannot_be_frozen_is_a_known_failure(value: Any) -> None:
    tool = python_tool(lambda: value, ref="odd")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ToolExecutionFailed)
    assert result.failure.class_ == "internal"


async def test_sync_tools_run_in_a_worker_thread() -> None:
    seen: list[int] = []

    def where() -> str:
        seen.append(threading.get_ident())
        return "here"

    tool = python_tool(where, ref="where")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        await outcome_of(ex, a.key)
    assert seen and seen[0] != threading.get_ident()


async def test_local_executor_implements_every_capability() -> None:
    async with open_local_executor() as ex:
        assert isinstance(ex, effect.ExecutionPort)
        for capability in (effect.SettlementPort, effect.Recoverer, effect.Disposer,
                           effect.ProgressPort, effect.Acknowledger):
            assert isinstance(ex, capability), capability
        assert not isinstance(ex, effect.Redispatcher)  # that one is the owner's route


async def test_watcher_over_local_executor_is_notified(autojump_clock: Any) -> None:
    """A Watcher with a long poll still gets the Outcome at once through the executor's
    settlement notices (RUN-EXE-17)."""

    async def slow() -> str:
        await trio.sleep(7)
        return "done"

    tool = python_tool(slow, ref="slow")
    async with open_local_executor(tools=[tool]) as ex, \
            effect.open_watcher(ex, poll=1000.0, probe=-1) as watcher:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        start = trio.current_time()
        outcome = await watcher.await_outcome(a.key)
        assert trio.current_time() - start == pytest.approx(7.0)
        assert isinstance(outcome.result, effect.ToolExecutionSucceeded)
        await ex.acknowledge(a.key)
        with pytest.raises(OutcomeCollectedError):
            await watcher.await_outcome(a.key)


async def test_closing_before_a_worker_starts_settles_at_once() -> None:
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with trio.open_nursery() as nursery:
        ex = LocalExecutor(nursery=nursery, tools=[tool])
        a = tool_assignment(tool)
        await ex.dispatch(a)
        await ex.aclose()  # closes before its checkpoint: the worker has not run yet
        assert (await ex.get_outcome(a.key)).result == effect.Cancelled("executor closed")
    assert counter.runs == 0


async def test_unread_outcomes_survive_the_retention_bound() -> None:
    """An Outcome nobody acknowledged yet is not evicted by the 1024 bound: a slow owner
    (many Runs settling at once) must still be able to read it (RUN-EXE-13)."""
    counter = Counter()
    tool = python_tool(counter, ref="count")
    async with open_local_executor(tools=[tool], retain=4, retain_unread=8) as ex:
        first = tool_assignment(tool, effect_id="u0")
        for i in range(8):
            await ex.dispatch(rekey(first, f"u{i}"))
            await trio.testing.wait_all_tasks_blocked()
        for i in range(8):  # all 8 unread outcomes are still readable with retain=4
            assert isinstance((await ex.get_outcome(rekey(first, f"u{i}").key)).result,
                              effect.ToolExecutionSucceeded)
        await ex.dispatch(rekey(first, "u8"))  # the 9th unread one evicts the oldest
        await trio.testing.wait_all_tasks_blocked()
        assert await ex.get_status(rekey(first, "u0").key) is effect.ExecutionStatus.NOT_FOUND
        assert ex.statistics().evicted == 1


_BAD_USAGE = [
    reply("a", input_tokens=-5), reply("a", output_tokens=-(2**40)),
    reply("a", input_tokens=2**53), ModelResult(content="a", usage=Usage(1.5, 0)),  # type: ignore[arg-type]
    ModelResult(content="a", usage=Usage(True, 0)),  # type: ignore[arg-type]
    ModelResult(content="a", usage=Usage(0, "3")),  # type: ignore[arg-type]
    ModelResult(content="a", usage=None),  # type: ignore[arg-type]
]


@pytest.mark.parametrize("answer", _BAD_USAGE,
                         ids=["negative_input", "negative_output", "past_2_53", "float",
                              "bool", "text", "none"])
async def test_a_usage_that_is_not_a_token_count_is_a_malformed_result(answer: Any) -> None:
    """RUN-EXE-2: reply("a", input_tokens=-5, output_tokens=-(2**40)) was recorded and
    summed into RunResult.usage; like OpenAIChatModel's refusal of 1e300 it is a
    malformed_result now, naming the usage."""
    async with open_local_executor(models={"m": _Weird(answer)}) as ex:
        a = model_assignment("m")
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ModelFailed), result
    assert result.code is effect.FailureCode.MALFORMED_RESULT and "usage" in result.message


async def test_the_largest_token_counts_are_kept() -> None:
    answer = reply("a", input_tokens=2**53 - 1, output_tokens=0)
    async with open_local_executor(models={"m": _Weird(answer)}) as ex:
        a = model_assignment("m")
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ModelSucceeded)
    assert result.result.usage.input_tokens == 2**53 - 1
