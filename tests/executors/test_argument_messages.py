"""An ``invalid_arguments`` refusal says what is wrong with the arguments (RUN-EXE-5): a
model's arguments text that is not strict JSON is frozen as a JSON string (§3.8), and
the refusal names why the text is not JSON — a duplicate key, NaN, a number past the
double range, a syntax error — instead of "arguments must be a JSON object" (the eighth
session's break round)."""

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
from runx_actors.protocol.canonical import freeze_tool_arguments
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore


def echo(x: str) -> str:
    return x


ECHO = python_tool(echo, ref="t.echo", name="echo",
                   parameters={"type": "object", "properties": {"x": {"type": "string"}},
                               "required": ["x"]})


@pytest.mark.parametrize(("raw", "says"), [
    ('{"x": "a", "x": "b"}', "duplicate key 'x'"),
    ('{"x": NaN}', "NaN is not JSON"),
    ('{"x": 1e999}', "outside the range of a double"),
    ('{"x": "a"', "invalid JSON"),
    ('"{\\"x\\": 1}"', "not a JSON string"),
    ("[1, 2]", "not an array"),
    ("7", "not a number"),
    ("null", "not null"),
    ("true", "not a boolean"),
])
def test_the_refusal_says_what_is_wrong(raw: str, says: str) -> None:
    failure = ECHO.arguments_failure(freeze_tool_arguments(raw))
    assert failure is not None and failure.class_ == "invalid_arguments"
    assert failure.message.startswith("arguments must be a JSON object")
    assert says in failure.message, failure.message


async def test_the_model_sees_why_its_arguments_were_refused() -> None:
    seen: list[Any] = []

    class Model:
        def __init__(self) -> None:
            self.calls = 0

        async def complete(self, request: Any) -> Any:
            self.calls += 1
            tools = [m for m in json.loads(request.body)["messages"] if m["role"] == "tool"]
            if tools:
                seen.extend(tools)
                return reply("done")
            return call_tools(tool_call("echo", '{"x": "a", "x": "b"}'))

    async with open_local_executor(models={"m": Model()}, tools=[ECHO]) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m", tools=[ECHO]) as rt:
        await rt.create_run("r", ["go"])
        with trio.fail_after(30):
            await rt.drive("r")
    (message,) = seen
    assert message["error"]["class"] == "invalid_arguments"
    assert "duplicate key 'x'" in message["error"]["message"], message
