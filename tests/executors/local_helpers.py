"""Helpers shared by the executor tests (builders and deterministic waits)."""

from __future__ import annotations

from typing import Any

import attrs
import trio

from runx_actors import effect
from runx_actors.executors import LocalExecutor, Tool
from runx_actors.protocol.digests import digest_model_request
from runx_actors.protocol.errors import OutcomeNotReadyError
from runx_actors.protocol.values import ModelRequest

SESSION = "scope-1"
RUN = "run-1"


def tool_assignment(tool: Tool, arguments: str = "{}", *, effect_id: str = "effect-1",
                    step_id: str = "step-1", call_id: str = "call-1",
                    target: effect.TargetRef | None = None, **body: Any) -> effect.Assignment:
    """A tool Assignment declaring exactly what *tool* declares (``body`` overrides)."""
    spec = tool.spec()
    fields: dict[str, Any] = {
        "tool_ref": spec.ref, "definition_digest": spec.definition_digest,
        "arguments": arguments, "policy": spec.policy, "replay": spec.replay,
        "placement": spec.placement}
    fields.update(body)
    return effect.Assignment(session=SESSION, run_id=RUN, step_id=step_id, call_id=call_id,
                             effect=effect_id, target=target,
                             body=effect.ToolAssignment(**fields))


def model_assignment(model: str = "scripted", request: ModelRequest | None = None, *,
                     effect_id: str = "model-effect-1", inline: bool = True,
                     step_id: str = "step-1") -> effect.Assignment:
    """A model Assignment; ``inline=False`` gives the digest-only form."""
    request = request or ModelRequest(model)
    return effect.Assignment(
        session=SESSION, run_id=RUN, step_id=step_id, effect=effect_id,
        body=effect.ModelAssignment(model=model, request_digest=digest_model_request(request),
                                    request=request if inline else None))


def rekey(a: effect.Assignment, effect_id: str) -> effect.Assignment:
    return attrs.evolve(a, effect=effect_id)


async def outcome_of(ex: LocalExecutor, key: effect.AssignmentKey) -> effect.Outcome:
    """Wait for *key*'s Outcome using settlement notices (no clock involved)."""
    async for _notice in ex.settlements("", 0):
        try:
            return await ex.get_outcome(key)
        except OutcomeNotReadyError:
            continue
    raise AssertionError("the settlement stream ended")


async def wait_running(ex: LocalExecutor, key: effect.AssignmentKey) -> None:
    """Wait until *key*'s worker is running (its status says RUNNING)."""
    while await ex.get_status(key) is not effect.ExecutionStatus.RUNNING:
        await trio.sleep(0)
