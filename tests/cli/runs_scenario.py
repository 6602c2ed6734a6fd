"""A store worth inspecting, built through the public API (for the ``runs`` CLI tests).

Run ``busy`` (scope ``app``): the model asks for two calls in one tool step — ``lookup``
(direct) and ``deploy`` (approval required). ``lookup`` completes, ``deploy`` waits; it
is approved and started, and then the owner goes away with ``deploy`` still running (the
executor closes under it, nobody settles it). A second owner opens the scope (epoch 2):
takeover fails ``deploy`` as ``effect_unknown`` and the model answers. Run ``pending``
waits for an approval; run ``asks`` waits for an external response; run ``done``
completes at once; run ``slow``'s model call is in flight when the first owner goes: the
second owner recovers the model step (``model_step_recovered``) and asks again.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import trio
import trio.testing

from runx_actors.app import (
    ModelRequest,
    ModelResult,
    ResponsePolicy,
    call_tools,
    open_sqlite_runtime,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.runtime import LoopDisposition

SCOPE = "app"


def lookup(name: str) -> dict[str, Any]:
    return {"name": name, "version": 42}


async def deploy(name: str) -> str:
    await trio.sleep(3600)  # never finishes while its owner lives
    return f"deployed {name}"


TOOLS = [
    python_tool(lookup, ref="svc.lookup", name="lookup",
                parameters={"type": "object", "properties": {"name": {"type": "string"}}}),
    python_tool(deploy, ref="svc.deploy", name="deploy",
                policy=ResponsePolicy.APPROVAL_REQUIRED,
                parameters={"type": "object", "properties": {"name": {"type": "string"}}}),
    python_tool(lambda question: question, ref="human.ask", name="ask",
                policy=ResponsePolicy.EXTERNAL_RESPONSE,
                parameters={"type": "object",
                            "properties": {"question": {"type": "string"}}}),
]


class Model:
    def __init__(self, *, hang: bool = False) -> None:
        self.hang = hang  # the first owner's model never answers task "slow"

    async def complete(self, request: ModelRequest) -> ModelResult:
        messages = json.loads(request.body)["messages"]
        task = messages[0]["content"]
        tool_msgs = [m for m in messages if m["role"] == "tool"]
        if task == "slow":
            if self.hang:
                await trio.sleep_forever()
            return reply("slow but sure")
        if task == "done":
            return reply("nothing to do", input_tokens=5, output_tokens=3)
        if task == "ask" and not tool_msgs:
            return call_tools(tool_call("ask", {"question": "which region?"}))
        if not tool_msgs:
            return call_tools(tool_call("lookup", {"name": "api"}),
                              tool_call("deploy", {"name": "api"}), input_tokens=10,
                              output_tokens=4)
        failed = [m["error"]["class"] for m in tool_msgs if "error" in m]
        return reply(f"finished; failures: {','.join(failed) or 'none'}", input_tokens=20,
                     output_tokens=6)


async def build(path: Path) -> None:
    async with open_sqlite_runtime(path, scope=SCOPE, model="m",
                                   models={"m": Model(hang=True)}, tools=TOOLS) as rt:
        for run_id, task in (("busy", "busy"), ("pending", "busy"), ("asks", "ask"),
                             ("done", "done")):
            await rt.create_run(run_id, [task])
            await rt.drive(run_id)
        waiting = await rt.waiting("busy")
        await rt.approve("busy", waiting[0].call_id)
        advanced = await rt.runtime.run("busy").advance(rt.builder)
        assert advanced.disposition is LoopDisposition.DISPATCHED, advanced
        await rt.create_run("slow", ["slow"])
        thinking = await rt.runtime.run("slow").advance(rt.builder)  # the model call starts
        assert thinking.disposition is LoopDisposition.DISPATCHED, thinking
        await trio.testing.wait_all_tasks_blocked()
    # the second owner: takeover settles what the first left running
    async with open_sqlite_runtime(path, scope=SCOPE, model="m", models={"m": Model()},
                                   tools=TOOLS) as rt:
        for run_id in ("busy", "slow"):
            result = await rt.drive(run_id)
            assert result.disposition is LoopDisposition.FINISHED, result


def build_store(path: Path) -> Path:
    trio.run(build, path)
    return path
