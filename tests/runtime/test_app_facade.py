"""The application facade (APP-RES-1..3, APP-NEW-1, APP-EVT-1): answers, waiting calls,
create conflicts, the transcript, and the per-Run event stream — over both stores."""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio

from runx_actors.executors import (
    call_tools,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.protocol import facts as F
from runx_actors.protocol.commit import CommitStatus
from runx_actors.protocol.errors import (
    CanonicalJSONError,
    RunConflictError,
    RunExistsError,
    ValidationError,
)
from runx_actors.protocol.values import ModelRequest, ResponseKind, ResponsePolicy, RunStatus
from runx_actors.runtime import (
    AWAITING_APPROVAL,
    AWAITING_RESPONSE,
    Event,
    EventKind,
    LoopDisposition,
    approve,
    open_runtime,
)

HANG = 30


def _answer_tool() -> Any:
    return python_tool(lambda: 42, ref="demo.answer", name="answer",
                       parameters={"type": "object", "properties": {}})


def _gated_tool(policy: ResponsePolicy) -> Any:
    return python_tool(lambda x: x + 1, ref="demo.inc", name="inc", policy=policy,
                       parameters={"type": "object", "properties": {"x": {"type": "number"}}})


class EchoModel:
    """Asks for *tool* once, then answers with what the tool message said."""

    def __init__(self, tool: str, args: dict[str, Any]) -> None:
        self.tool, self.args = tool, args
        self.seen: list[list[dict[str, Any]]] = []

    async def complete(self, request: ModelRequest) -> Any:
        messages = json.loads(request.body)["messages"]
        self.seen.append(messages)
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        if not tool_msgs:
            return call_tools(tool_call(self.tool, self.args))
        last = tool_msgs[-1]
        if "error" in last:
            return reply(f"failed: {last['error']['class']}")
        return reply(f"got {last['content']!r}", input_tokens=3, output_tokens=2)


async def test_answer_and_transcript_are_faithful(store: Any) -> None:
    tool = _answer_tool()
    model = EchoModel("answer", {})
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m", tools=[tool]) as rt:
            await rt.create_run("r1", ["what is the answer?"])
            result = await rt.drive("r1")
            assert result.disposition is LoopDisposition.FINISHED
            assert result.result is not None and result.result.status is RunStatus.COMPLETED
            assert result.answer is not None
            assert result.answer.text == "got 42"  # the model saw the int 42, not 42.0
            assert result.answer.structured["usage"] == {"inputTokens": 3, "outputTokens": 2}
            assert result.answer.finish_reason == "stop"
            transcript = await rt.transcript("r1")
            assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "assistant"]
            content = transcript[2]["content"]
            assert content == 42 and type(content) is int
            assert transcript[1]["toolCalls"][0]["name"] == "answer"
            assert transcript[-1]["content"] == "got 42"
            assert await rt.answer("r1") == result.answer


async def test_waiting_lists_the_calls_and_approve_finishes(store: Any) -> None:
    tool = _gated_tool(ResponsePolicy.APPROVAL_REQUIRED)
    model = EchoModel("inc", {"x": 1})
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m", tools=[tool]) as rt:
            await rt.create_run("r1", ["inc 1"])
            waiting = await rt.drive("r1")
            assert waiting.disposition is LoopDisposition.WAITING
            assert waiting.reason == AWAITING_APPROVAL
            (call,) = waiting.waiting_for
            assert call.tool == "demo.inc" and call.arguments == {"x": 1}
            assert type(call.arguments["x"]) is int
            assert call.kind is ResponseKind.APPROVAL and call.call_id
            assert await rt.waiting("r1") == waiting.waiting_for
            with pytest.raises(ValidationError):
                await rt.approve("r1", "no-such-call")
            approved = await rt.approve("r1", call.call_id)
            assert approved.status is CommitStatus.ACCEPTED
            # the module-level helper under the same derived id replays
            assert (await approve(rt.run_store, call.request)).status \
                is CommitStatus.ALREADY_APPLIED
            done = await rt.drive("r1")
            assert done.disposition is LoopDisposition.FINISHED
            assert done.answer is not None and done.answer.text == "got 2"
            assert done.waiting_for == ()


async def test_respond_reaches_the_model_as_json(store: Any) -> None:
    tool = _gated_tool(ResponsePolicy.EXTERNAL_RESPONSE)
    model = EchoModel("inc", {"x": 5})
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m", tools=[tool]) as rt:
            await rt.create_run("r1", ["inc 5"])
            waiting = await rt.drive("r1")
            assert waiting.reason == AWAITING_RESPONSE
            (call,) = waiting.waiting_for
            await rt.respond("r1", call.call_id, {"value": 7})
            done = await rt.drive("r1")
            assert done.answer is not None and done.answer.text == "got {'value': 7}"


async def test_respond_refuses_a_payload_past_64_levels_and_takes_null(store: Any) -> None:
    # F22 (break7): a response payload is outside input; the strict readers' nesting
    # limit (64) applies to it, before anything is written. null is an answer (the spec
    # refuses null only as a tool output, RUN-WIR-4)
    tool = _gated_tool(ResponsePolicy.EXTERNAL_RESPONSE)
    model = EchoModel("inc", {"x": 5})
    deep: Any = []
    for _ in range(64):
        deep = [deep]  # 65 levels
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m", tools=[tool]) as rt:
            await rt.create_run("r1", ["inc 5"])
            (call,) = (await rt.drive("r1")).waiting_for
            before = (await rt.snapshot("r1")).position
            with pytest.raises(CanonicalJSONError) as refused:
                await rt.respond("r1", call.call_id, {"deep": deep})
            assert refused.value.reason == "too_deep"
            with pytest.raises(CanonicalJSONError):
                await rt.respond("r1", call.call_id, deep)
            assert (await rt.snapshot("r1")).position == before
            assert (await rt.respond("r1", call.call_id, None)).status is CommitStatus.ACCEPTED
            done = await rt.drive("r1")
            assert done.answer is not None and done.answer.text == "got None"


async def test_reject_fails_the_call_and_the_model_sees_it(store: Any) -> None:
    tool = _gated_tool(ResponsePolicy.APPROVAL_REQUIRED)
    model = EchoModel("inc", {"x": 1})
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m", tools=[tool]) as rt:
            await rt.create_run("r1", ["inc 1"])
            await rt.drive("r1")
            await rt.reject("r1", "", "not today")
            done = await rt.drive("r1")
            assert done.answer is not None and done.answer.text == "failed: permission_denied"


async def test_create_run_replays_or_refuses_other_inputs(store: Any) -> None:
    model = EchoModel("none", {})
    with trio.fail_after(HANG):
        async with open_local_executor(models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m") as rt:
            first = await rt.create_run("a", ["weather Rome"])
            assert first.status is CommitStatus.ACCEPTED and first.created
            again = await rt.create_run("a", ["weather Rome"])
            assert again.status is CommitStatus.ALREADY_APPLIED and not again.created
            with pytest.raises(RunConflictError) as info:
                await rt.create_run("a", ["weather Berlin"])
            assert info.value.run_id == "a" and info.value.existing != info.value.requested
            with pytest.raises(RunConflictError):
                await rt.create_run("a", ["weather Rome"], causation_id="other")
            with pytest.raises(RunExistsError):
                await rt.create_run("a", ["weather Rome"], commit_id="another-id")
            facts = await rt.writer.run_facts("a")
            assert sum(isinstance(f, F.InputAccepted) for f in facts) == 1


async def _collect(rt: Any, run_id: str, into: list[Event]) -> None:
    async for event in rt.events(run_id):
        into.append(event)


async def test_events_carry_every_fact_in_commit_order_and_end(store: Any) -> None:
    tool = _gated_tool(ResponsePolicy.APPROVAL_REQUIRED)
    model = EchoModel("inc", {"x": 1})
    events: list[Event] = []
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m", tools=[tool]) as rt:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, rt, "r1", events)
                await trio.testing.wait_all_tasks_blocked()
                await rt.create_run("r1", ["inc 1"])
                await rt.drive("r1")
                await rt.accept_input("r1", "and then?")
                await rt.approve("r1")
                await rt.drive("r1")
                # the collector ends by itself after run_finished (no cancel here)
            facts = await rt.writer.run_facts("r1")
    committed = [e for e in events if e.kind is EventKind.AGENT_COMMITTED]
    streamed = [f for e in committed for f in e.committed]
    assert streamed == list(facts)  # every fact, once, in commit order
    positions = [e.position for e in committed]
    assert positions == sorted(positions) and positions[0] == 0
    names = {type(f).WIRE_NAME for f in streamed}
    assert {"run_created", "input_accepted", "tool_call_approved", "run_ended"} <= names
    assert committed[0].command_id == "create:r1"
    assert events[-1].kind is EventKind.RUN_FINISHED
    assert json.loads(events[-1].payload or "null")["status"] == "completed"


async def test_cancel_facts_are_streamed_and_a_late_subscriber_gets_history(
        store: Any) -> None:
    model = EchoModel("none", {})
    events: list[Event] = []
    with trio.fail_after(HANG):
        async with open_local_executor(models={"m": model}) as ex, \
                open_runtime(store, ex, scope="s", model="m") as rt:
            await rt.create_run("c1", ["hello"])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(_collect, rt, "c1", events)
                await trio.testing.wait_all_tasks_blocked()
                await rt.cancel("c1")
            late = [e async for e in rt.events("c1")]
            tail = [e async for e in rt.events("c1", since=2)]
    kinds = [type(f).WIRE_NAME for e in events for f in e.committed]
    assert kinds == ["run_created", "input_accepted", "run_ended"]
    assert events[-1].kind is EventKind.RUN_FINISHED
    assert [e.command_id for e in events[:-1]] == ["create:c1", "cancel:c1"]
    assert [(e.kind, e.committed, e.position) for e in late] == \
        [(e.kind, e.committed, e.position) for e in events]
    assert [type(f).WIRE_NAME for e in tail for f in e.committed] == ["run_ended"]


async def test_per_run_events_interleave_provisional_progress(store: Any) -> None:
    """Provisional progress reaches a per-Run iterator between the Run's commits. Progress
    may be dropped under back-pressure, so the model streams its delta only once every
    other task is idle (the relay and the iterator are listening) and finishes only after
    the iterator has shown the delta: delivery is then deterministic on every store."""
    from runx_actors.effect import ProgressKind
    from runx_actors.executors import reply as answer
    from runx_actors.runtime import Durability

    seen = trio.Event()

    class _Streams:
        async def complete(self, request: Any) -> Any:
            raise AssertionError("the executor streams when the model can")

        async def stream(self, request: Any, emit: Any) -> Any:
            await trio.testing.wait_all_tasks_blocked()
            emit(ProgressKind.MODEL_TEXT_DELTA, {"text": "streamed"})
            await seen.wait()
            return answer("streamed")

    async def collect() -> None:
        async for event in rt.events("p1"):
            events.append(event)
            if event.kind is EventKind.MODEL_TEXT_DELTA:
                seen.set()

    events: list[Event] = []
    with trio.fail_after(HANG):
        async with open_local_executor(models={"m": _Streams()}) as ex, \
                open_runtime(store, ex, scope="s", model="m") as rt:
            await rt.create_run("p1", ["hi"])
            async with trio.open_nursery() as nursery:
                nursery.start_soon(collect)
                await trio.testing.wait_all_tasks_blocked()
                await rt.drive("p1")
    deltas = [e for e in events if e.kind is EventKind.MODEL_TEXT_DELTA]
    assert deltas and all(e.durability is Durability.PROVISIONAL for e in deltas)
    assert json.loads(deltas[0].payload or "{}") == {"text": "streamed"}
    assert events[-1].kind is EventKind.RUN_FINISHED
