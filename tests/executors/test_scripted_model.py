"""ScriptedModel: a deterministic model for tests and demos (architecture §5)."""

from __future__ import annotations

from typing import Any

import pytest
import trio

from runx_actors import effect
from runx_actors.executors import (
    Model,
    ModelError,
    ScriptedModel,
    StreamingModel,
    call_tools,
    reply,
    tool_call,
)
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.digests import digest_model_result
from runx_actors.protocol.values import ModelRequest, ModelResult, ModelToolCall, Usage


async def test_scripted_model_answers_in_order() -> None:
    model = ScriptedModel([
        call_tools(tool_call("fs.read", {"path": "NOTES.md"}), input_tokens=1,
                   output_tokens=1),
        reply("done", input_tokens=1, output_tokens=2),
    ])
    assert isinstance(model, Model) and isinstance(model, StreamingModel)
    first = await model.complete(ModelRequest("m", body='{"turn":1}'))
    assert first.tool_calls == (ModelToolCall("call_1", "fs.read", '{"path":"NOTES.md"}'),)
    assert first.finish_reason == "tool_calls" and first.usage == Usage(1, 1)
    second = await model.complete(ModelRequest("m", body='{"turn":2}'))
    assert (second.content, second.finish_reason, second.usage.total) == ("done", "stop", 3)
    assert [r.body for r in model.requests] == ['{"turn":1}', '{"turn":2}']
    assert model.calls == 2 and model.remaining == 0
    with pytest.raises(ModelError) as caught:
        await model.complete(ModelRequest("m"))
    assert caught.value.code is effect.FailureCode.BAD_REQUEST
    digest_model_result(first)  # scripted results are frozen-able


async def test_scripted_model_turn_kinds() -> None:
    def echo(request: ModelRequest) -> ModelResult:
        return reply(f"echo {request.body}")

    limited = ModelError(effect.FailureCode.RATE_LIMITED, "429")
    model = ScriptedModel([limited, echo], repeat_last=True)
    with pytest.raises(ModelError):
        await model.complete(ModelRequest("m"))
    assert (await model.complete(ModelRequest("m", body='{"a":1}'))).content == 'echo {"a":1}'
    assert (await model.complete(ModelRequest("m"))).content == "echo {}"  # repeated
    bad = ScriptedModel([lambda request: "not a result"])  # type: ignore[list-item,return-value]
    with pytest.raises(TypeError):
        await bad.complete(ModelRequest("m"))


async def test_scripted_model_delay_uses_trio_clock(autojump_clock: Any) -> None:
    model = ScriptedModel([reply("late")], delay=30.0)
    start = trio.current_time()
    with trio.move_on_after(10) as scope:
        await model.complete(ModelRequest("m"))
    assert scope.cancelled_caught and trio.current_time() - start == pytest.approx(10)


async def test_scripted_model_streams_its_content() -> None:
    emitted: list[tuple[effect.ProgressKind, Any]] = []
    model = ScriptedModel([reply("hi"), call_tools(tool_call("t"))])
    await model.stream(ModelRequest("m"), lambda kind, payload: emitted.append((kind, payload)))
    await model.stream(ModelRequest("m"), lambda kind, payload: emitted.append((kind, payload)))
    assert emitted == [(effect.ProgressKind.MODEL_TEXT_DELTA, {"text": "hi"})]


def test_tool_call_freezes_arguments() -> None:
    assert tool_call("t", {"b": 1, "a": [True, None]}).arguments == '{"a":[true,null],"b":1}'
    assert tool_call("t").arguments == "{}"
    assert tool_call("t", '{"b":1, "a":2}').arguments == '{"a":2,"b":1}'
    assert tool_call("t", "not json").arguments == canonical_json_text("not json")
    assert tool_call("t", "").arguments == "{}"
    calls = call_tools(tool_call("a", id="provider-7"), tool_call("b")).tool_calls
    assert [c.id for c in calls] == ["provider-7", "call_2"]


def test_model_error_pickles() -> None:
    import pickle

    error = pickle.loads(pickle.dumps(ModelError(effect.FailureCode.BILLING, "pay up")))
    assert (error.code, error.message) == (effect.FailureCode.BILLING, "pay up")
