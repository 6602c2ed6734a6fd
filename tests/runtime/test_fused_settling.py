"""One shielded scope per fused batch, one settle deadline per section (RUN-LOP-11, issue 11).

A fused batch (the settlement, then what ``advance`` would commit next, up to its start
barrier) runs its sections — the batch commit, each start's send, the acknowledgement —
in one shielded ``_Settling`` scope instead of one scope each. The deadline of each
section is still its own: ``settle_timeout`` from the section's start. These tests hold
each section open on the mock clock for most of ``settle_timeout``, so that a scope that
kept one deadline for the whole batch would fire; they also check that a send that hangs
times out ``settle_timeout`` after *its* start, that the settled outcome is still
acknowledged then (in a fresh section: the batch's scope is the cancelled one), and that a
section begun in a scope whose deadline already fired gets a fresh shielded scope.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing
from runtime_harness import (
    GatedModel,
    GateRunStore,
    Probe,
    WrappedWriter,
    command_type,
    probe_tool,
)
from runtime_harness import (
    open_wrapped_env as open_env,
)

from runx_actors import effect
from runx_actors.executors import call_tools, reply, tool_call
from runx_actors.protocol import facts as F
from runx_actors.protocol.errors import SettleTimeoutError
from runx_actors.protocol.state import ToolStep
from runx_actors.protocol.values import RunStatus, ToolCallStatus
from runx_actors.runtime import LoopDisposition, Settings
from runx_actors.runtime._loop import _Settling

HANG = 60
TIMEOUT = 10.0
#: each held section takes 60% of settle_timeout: two of them exceed one deadline
HOLD = 0.6 * TIMEOUT


def _gated(writer: Any) -> WrappedWriter:
    return WrappedWriter(writer, GateRunStore(writer.run_store()))


def _is_tool(assignment: Any) -> bool:
    return isinstance(assignment.body, effect.ToolAssignment)


def _acknowledgements(env: Any, hold_model: bool) -> list[str]:
    """Record the effects acknowledged on *env*'s ProxyExecutor (after holding the model
    outcome's acknowledgement for HOLD when *hold_model*; a checkpoint in any case, so an
    acknowledgement run in a cancelled scope never records)."""
    acked: list[str] = []
    inner = env.executor.acknowledge

    async def acknowledge(key: Any) -> None:
        tools = {a.effect for a in env.executor.tool_dispatches()}
        if hold_model and key.effect not in tools:
            await trio.sleep(HOLD)
        else:
            await trio.lowlevel.checkpoint()
        acked.append(key.effect)
        await inner(key)

    env.executor.acknowledge = acknowledge
    return acked


async def test_each_section_of_a_fused_batch_has_its_own_deadline(
        store: Any, autojump_clock: Any) -> None:
    """SubmitModelResult + StartToolCall commit for HOLD, the tool's send takes HOLD,
    the model outcome's acknowledgement HOLD: 1.8 × settle_timeout in one batch, each
    section under its own; the Run completes."""
    probe = Probe(result={"ok": True})
    model = GatedModel([call_tools(tool_call("t")), reply("done")])
    held: list[str] = []

    async def slow_batch(request: Any) -> None:
        if command_type(request) == "StartToolCall":
            held.append("commit")
            await trio.sleep(HOLD)

    async def slow_send(assignment: Any) -> None:
        if _is_tool(assignment):
            held.append("send")
            await trio.sleep(HOLD)

    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("t", probe)], model=model,
                            wrap=_gated, proxy=True,
                            settings=Settings(settle_timeout=TIMEOUT)) as env:
            env.faults.before = slow_batch
            env.executor.on_dispatch = slow_send
            acked = _acknowledgements(env, hold_model=True)
            await env.create()
            t0 = trio.current_time()
            result = await env.drive()
            elapsed = trio.current_time() - t0
    assert result.disposition is LoopDisposition.FINISHED
    assert result.result.status is RunStatus.COMPLETED
    assert held == ["commit", "send"] and probe.calls == 1
    assert len(acked) == 3  # model (held), tool, model
    assert elapsed >= 3 * HOLD  # the three holds really ran, in one batch


async def test_a_hung_send_times_out_after_its_own_deadline_and_is_acknowledged(
        store: Any, autojump_clock: Any) -> None:
    """The batch commit takes HOLD, then the tool's send hangs: SettleTimeoutError
    ``settle_timeout`` after the send began (not after the batch began); the model
    outcome the batch settled is acknowledged all the same; the call stays EXECUTING."""
    probe = Probe(result={"ok": True})
    model = GatedModel([call_tools(tool_call("t")), reply("done")])
    sent_at: list[float] = []

    async def slow_batch(request: Any) -> None:
        if command_type(request) == "StartToolCall":
            await trio.sleep(HOLD)

    async def hang(assignment: Any) -> None:
        if _is_tool(assignment):
            sent_at.append(trio.current_time())
            await trio.sleep_forever()

    with trio.fail_after(HANG):
        async with open_env(store, tools=[probe_tool("t", probe)], model=model,
                            wrap=_gated, proxy=True,
                            settings=Settings(settle_timeout=TIMEOUT)) as env:
            env.faults.before = slow_batch
            env.executor.on_dispatch = hang
            acked = _acknowledgements(env, hold_model=False)
            await env.create()
            with pytest.raises(SettleTimeoutError) as caught:
                await env.drive()
            timed_out = trio.current_time()
            assert isinstance(caught.value, trio.TooSlowError)
            state = await env.state()
            model_effect = next(f.effect for f in await env.facts()
                                if isinstance(f, F.ModelStepStarted))
    assert len(sent_at) == 1
    assert TIMEOUT <= timed_out - sent_at[0] < TIMEOUT + 1.0
    assert acked == [model_effect]  # the settled model outcome, acknowledged
    assert isinstance(state.current, ToolStep)
    (call,) = state.current.calls
    assert call.status is ToolCallStatus.EXECUTING
    assert probe.calls == 0


@pytest.fixture
def mock_clock() -> trio.testing.MockClock:
    """The unit tests' clock (pytest-trio runs a test on a Clock fixture it asks for)."""
    return trio.testing.MockClock(autojump_threshold=0)


async def test_a_section_after_a_fired_deadline_gets_a_fresh_scope(mock_clock: Any) -> None:
    """Trio cannot uncancel a scope: once the batch's scope is cancelled, the next
    section runs in a fresh shielded ``_Settling`` (its own deadline), as it did when each
    section had its own scope; it raises SettleTimeoutError only past that deadline."""
    settling = _Settling(TIMEOUT)
    with settling as scope:
        scope.cancel()  # what a deadline that fired at a section's end leaves behind
        with settling.section():
            await trio.sleep(HOLD)  # runs: the fresh section is shielded from the cancel
        with pytest.raises(SettleTimeoutError):
            with settling.section():
                await trio.sleep(2 * TIMEOUT)
    assert not scope.cancelled_caught  # nothing was cancelled by the batch's scope itself


async def test_a_section_moves_the_deadline_to_its_own_start(mock_clock: Any) -> None:
    """Two sections of HOLD each in one ``_Settling`` (1.2 × timeout in all) complete;
    a third that outlasts its own timeout raises SettleTimeoutError."""
    settling = _Settling(TIMEOUT)
    with pytest.raises(SettleTimeoutError):
        with settling:
            await trio.sleep(HOLD)
            with settling.section():
                await trio.sleep(HOLD)
            with settling.section():
                t0 = trio.current_time()
                await trio.sleep(2 * TIMEOUT)
    assert trio.current_time() - t0 == pytest.approx(TIMEOUT)
