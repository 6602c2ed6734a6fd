"""RUN-ACT-1 against a tool's BaseException (a fresh user's find): a tool that raised
``SystemExit`` (a wrapped CLI's ``sys.exit``, argparse's error path) or another
BaseException subclass cancelled every other Run's drive and took the executor down. Now
it is that call's UNKNOWN outcome (the Run records ``effect_unknown``, naming the
exception); the other Run completes; the model sees the failure. ``KeyboardInterrupt``
still stops everything (trio delivers the user's Ctrl-C into whatever task runs)."""

from __future__ import annotations

import functools
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
from runx_actors.protocol.values import RunStatus
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore


class _Custom(BaseException):
    pass


class _UseNamedTool:
    """Calls the tool its input names, then answers ``end``."""

    async def complete(self, request: Any) -> Any:
        await trio.lowlevel.checkpoint()
        messages = json.loads(request.body)["messages"]
        if not any(m["role"] == "tool" for m in messages):
            return call_tools(tool_call(messages[0]["content"], {}))
        return reply("end")


@pytest.mark.parametrize("raised", [SystemExit(3), SystemExit("usage: ..."), _Custom("x")],
                         ids=["exit-3", "exit-text", "custom"])
@pytest.mark.parametrize("sync", [False, True], ids=["async", "thread"])
async def test_a_tools_base_exception_fails_only_its_call(
        autojump_clock: Any, raised: BaseException, sync: bool) -> None:
    async def bad_async() -> None:
        await trio.lowlevel.checkpoint()
        raise raised

    def bad_sync() -> None:
        raise raised

    async def slow() -> str:
        await trio.sleep(1)
        return "slow ok"

    bad = python_tool(bad_sync if sync else bad_async, ref="t.bad", name="bad")
    ok = python_tool(slow, ref="t.slow", name="slow")
    async with open_local_executor(models={"m": _UseNamedTool()}, tools=[bad, ok]) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m", tools=[bad, ok]) as rt:
        await rt.create_run("victim", ["slow"])
        await rt.create_run("culprit", ["bad"])
        results: dict[str, Any] = {}

        async def drive(run: str) -> None:
            results[run] = await rt.drive(run)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, "victim")
            nursery.start_soon(drive, "culprit")
        assert results["victim"].result.status is RunStatus.COMPLETED
        assert results["culprit"].result.status is RunStatus.COMPLETED  # the model went on
        victim = [m for m in await rt.transcript("victim") if m["role"] == "tool"]
        assert victim[0]["content"] == "slow ok"
        culprit = [m for m in await rt.transcript("culprit") if m["role"] == "tool"]
        assert culprit[0]["error"]["class"] == "effect_unknown", culprit
        assert type(raised).__name__ in culprit[0]["error"]["message"]


async def test_keyboard_interrupt_from_a_tool_still_stops_the_process(
        autojump_clock: Any) -> None:
    async def interrupt() -> None:
        await trio.lowlevel.checkpoint()
        raise KeyboardInterrupt

    tool = python_tool(interrupt, ref="t.ki", name="ki")
    with pytest.raises(BaseException) as caught:
        async with open_local_executor(models={"m": _UseNamedTool()}, tools=[tool]) as ex, \
                open_runtime(MemoryStore(), ex, scope="s", model="m", tools=[tool]) as rt:
            await rt.create_run("r", ["ki"])
            await rt.drive("r")
    leaves = [caught.value]
    while leaves and isinstance(leaves[0], BaseExceptionGroup):
        leaves = list(leaves[0].exceptions) + leaves[1:]
    assert any(isinstance(e, KeyboardInterrupt) for e in leaves), caught.value


class _ExitingSink:
    def emit(self, event: Any) -> None:
        raise SystemExit(8)


@pytest.mark.parametrize("where", ["check", "sink", "builder"])
async def test_a_base_exception_from_a_runs_own_hooks_stays_with_that_run(
        autojump_clock: Any, where: str) -> None:
    """The verifier's find (same class): a tool's ``check=`` callback, a drive's
    ``sink=`` or ``builder=`` raising SystemExit took down the other Run too (and the
    culprit's drive answered a raw AttributeError). Now a raising check refuses the call
    (``invalid_arguments``), a raising sink is logged, and a raising builder is the
    culprit's own drive error; the victim completes either way."""
    async def slow(boom: bool = False) -> str:
        await trio.sleep(1)
        return "slow ok"

    def check(value: Any) -> None:
        if value.get("boom"):
            raise SystemExit(7)

    tool = python_tool(slow, ref="t.slow", name="slow",
                       check=check if where == "check" else None)

    class _Model:
        async def complete(self, request: Any) -> Any:
            await trio.lowlevel.checkpoint()
            messages = json.loads(request.body)["messages"]
            if not any(m["role"] == "tool" for m in messages):
                boom = messages[0]["content"] == "culprit"
                return call_tools(tool_call("slow", {"boom": boom}))
            return reply("end")

    async with open_local_executor(models={"m": _Model()}, tools=[tool]) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m", tools=[tool]) as rt:

        class _ExitingBuilder:
            model = rt.builder.model  # type: ignore[attr-defined]

            async def build(self, hint: Any) -> Any:
                raise SystemExit(9)

        await rt.create_run("victim", ["victim"])
        await rt.create_run("culprit", ["culprit"])
        extra: dict[str, Any] = {"sink": _ExitingSink()} if where == "sink" else (
            {"builder": _ExitingBuilder()} if where == "builder" else {})
        results: dict[str, Any] = {}

        async def drive(run: str, **options: Any) -> None:
            try:
                results[run] = await rt.drive(run, **options)
            except SystemExit as exc:
                results[run] = exc

        async with trio.open_nursery() as nursery:
            nursery.start_soon(drive, "victim")
            nursery.start_soon(functools.partial(drive, "culprit", **extra))
        assert results["victim"].result.status is RunStatus.COMPLETED
        culprit = results["culprit"]
        if where == "builder":
            assert isinstance(culprit, SystemExit) and culprit.code == 9
        else:
            assert culprit.result.status is RunStatus.COMPLETED
        if where == "check":
            tools = [m for m in await rt.transcript("culprit") if m["role"] == "tool"]
            assert tools[0]["error"]["class"] == "invalid_arguments"
            assert "SystemExit" in tools[0]["error"]["message"]
