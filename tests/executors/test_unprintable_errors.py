"""An exception whose ``__str__`` raises, from a tool, a tool's argument check or a model,
is that call's failure naming the exception type (``<unprintable BadStr>`` for its
text) — not a crash of the local executor's worker (a logged traceback and
``executor error``; the eighth session's break round). RUN-ACT-1."""

from __future__ import annotations

import json
import logging
from typing import Any

import pytest
import trio

from runx_actors.effect._escape import describe_error
from runx_actors.executors import call_tools, open_local_executor, python_tool, reply, tool_call
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore


class BadStr(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


class NotText(Exception):
    def __str__(self) -> Any:
        return 42


def test_describe_error_never_raises() -> None:
    assert describe_error(ValueError("x")) == "ValueError: x"
    assert describe_error(BadStr()) == "BadStr: <unprintable BadStr>"
    assert describe_error(NotText()) == "NotText: <unprintable NotText>"


def _raise() -> Any:
    raise BadStr()


def _check(arguments: Any) -> Any:
    raise BadStr()


TOOLS = {
    "tool": python_tool(lambda: _raise(), ref="t.bad", name="bad"),
    "check": python_tool(lambda: "ok", ref="t.bad", name="bad", check=_check),
}


class Model:
    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.seen: list[Any] = []

    async def complete(self, request: Any) -> Any:
        tools = [m for m in json.loads(request.body)["messages"] if m["role"] == "tool"]
        if self.kind == "model":
            raise BadStr()
        if tools:
            self.seen.extend(tools)
            return reply("done")
        return call_tools(tool_call("bad", {}))


@pytest.mark.parametrize("kind", ["model", "tool", "check"])
async def test_an_unprintable_exception_is_the_calls_failure(
        kind: str, caplog: pytest.LogCaptureFixture) -> None:
    model = Model(kind)
    tools = [TOOLS[kind]] if kind in TOOLS else []
    with caplog.at_level(logging.WARNING):
        async with open_local_executor(models={"m": model}, tools=tools) as ex, \
                open_runtime(MemoryStore(), ex, scope="s", model="m", tools=tools) as rt:
            await rt.create_run("r", ["go"])
            with trio.fail_after(30):
                done = await rt.drive("r")
    assert not [r for r in caplog.records if r.exc_info], caplog.text  # no traceback logged
    if kind == "model":
        assert done.result is not None and done.result.failure is not None
        assert "BadStr: <unprintable BadStr>" in done.result.failure.message
        assert "executor error" not in done.result.failure.message
        return
    (message,) = model.seen
    error = message["error"]
    assert "BadStr: <unprintable BadStr>" in error["message"], error
    assert "executor error" not in error["message"]
    assert error["class"] == ("invalid_arguments" if kind == "check" else "effect_unknown")
