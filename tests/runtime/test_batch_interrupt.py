"""A tool batch interrupted after some calls were dispatched (INV-28, INV-33, D-4).

Calls already dispatched really started: when the batch stops with an error the drive
still watches and settles them before raising; when it stops because ownership was lost
they are cancelled at the executor and never settled.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from runtime_harness import RUN, SCOPE, Probe, current_calls, of_type, open_env, probe_tool

from runx_actors import effect
from runx_actors.effect import TargetRef
from runx_actors.executors import ScriptedModel, call_tools, reply, tool_call
from runx_actors.protocol.errors import OwnershipLostError
from runx_actors.protocol.facts import ToolCallCompleted, ToolCallStarted
from runx_actors.protocol.values import ToolCallStatus
from runx_actors.runtime import Settings


class ResolverBoom(Exception):
    pass


def failing_resolver(fail_on_call: int) -> Any:
    seen = {"tool": 0}

    async def resolve(request: Any) -> TargetRef | None:
        await trio.lowlevel.checkpoint()
        if request.kind == "tool":
            seen["tool"] += 1
            if seen["tool"] == fail_on_call:
                raise ResolverBoom("placement service down")
        return None

    return resolve


async def test_interrupted_batch_settles_what_started(store: Any) -> None:
    probe = Probe()
    tool = probe_tool("t", probe)
    model = ScriptedModel([call_tools(tool_call("t", {"n": 1}), tool_call("t", {"n": 2})),
                           reply("done")])
    settings = Settings(target_resolver=failing_resolver(2))
    async with open_env(store, tools=[tool], model=model, settings=settings) as env:
        await env.create(RUN, "go")
        with pytest.raises(ResolverBoom):
            await env.drive()
        facts = await env.facts()
        started = of_type(facts, ToolCallStarted)
        assert len(started) == 1  # the second call never reached its start barrier
        completed = of_type(facts, ToolCallCompleted)
        assert [c.effect for c in completed] == [started[0].effect]  # settled, not lost
        calls = current_calls(await env.state())
        assert [c.status for c in calls] == [ToolCallStatus.COMPLETED, ToolCallStatus.PENDING]
        assert probe.calls == 1
        assert env.runtime.live_actors() == frozenset()


async def test_fenced_batch_cancels_what_started(store: Any) -> None:
    gate = trio.Event()
    probe = Probe(gate=gate)
    tool = probe_tool("t", probe)
    model = ScriptedModel([call_tools(tool_call("t", {"n": 1}), tool_call("t", {"n": 2})),
                           reply("done")])
    seen = {"tool": 0}

    async def fence_then_resolve(request: Any) -> None:
        # the first call was dispatched; before the second starts, another writer
        # takes the scope over
        if request.kind == "tool":
            seen["tool"] += 1
            if seen["tool"] == 2:
                await store.open(SCOPE)
        await trio.lowlevel.checkpoint()

    # unfused (RUN-LOP-11): a fused batch fenced this way writes nothing at all
    # (test_loop_fusion.py); here the first start commits and dispatches on its own
    settings = Settings(target_resolver=fence_then_resolve, fused_commits=False)
    async with open_env(store, tools=[tool], model=model, settings=settings) as env:
        await env.create(RUN, "go")
        with trio.fail_after(30), pytest.raises(OwnershipLostError):
            await env.drive()
        facts = await env.facts()
        started = of_type(facts, ToolCallStarted)
        assert len(started) == 1
        assert of_type(facts, ToolCallCompleted) == []  # fenced: nothing settled
        history = env.local.history(effect.AssignmentKey(SCOPE, RUN, started[0].effect))
        assert "cancel_requested" in history  # what had started was asked to stop
        assert env.runtime.live_actors() == frozenset()
