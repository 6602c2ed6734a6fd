"""Commands the model tests submit, built from a Run's real state as the shell builds them.

Each ``Move`` names a command family and its arguments; :func:`build` turns it into
``(command_id, command, base)`` for a Run's current snapshot, deriving every id and digest
the way the runtime does (the core model's ``_core_commands``; takeover's dispositions are
the real ``recovery_command``). A builder always produces *something* when its target
exists, even when the state does not allow the command (a call that is not PENDING, an
effect that is no longer running): that is exactly what a confused or late caller sends,
and the stores must refuse it. It returns None only when there is no target at all.
"""

from __future__ import annotations

import attrs
from hypothesis import strategies as st

from runx_actors.check.models import _core_commands as cmds
from runx_actors.protocol import commands as C
from runx_actors.protocol.commit import Snapshot
from runx_actors.protocol.plan import (
    NeedModelRequest,
    StartModelCall,
    StartToolCalls,
    WithdrawPrepared,
    plan_next,
    recovery_command,
    recovery_targets,
)
from runx_actors.protocol.state import ModelStep, ToolStep
from runx_actors.protocol.values import ModelStepStatus, RunStatus, ToolCallStatus

__all__ = ["Move", "Built3", "build", "moves", "next_move", "CALLS", "APPROVALS",
           "MODEL_OUTCOMES", "TOOL_OUTCOMES"]

#: Tool calls a "tools" model result asks for; call 1 needs approval (as in the reference).
CALLS = 2
APPROVALS = True

Built3 = tuple[str, C.Command, int]

FAMILIES = ("accept_input", "prepare", "prepare_stale", "withdraw", "start_model",
            "settle_model", "recover", "start_tool", "settle_tool", "approve", "reject",
            "cancel")


@attrs.frozen
class Move:
    """One command to build: ``family`` with an index (call, input) and an outcome."""

    family: str
    index: int = 0
    outcome: str = ""


MODEL_OUTCOMES = st.sampled_from(["tools", "tools", "text", "malformed", "failed"])
TOOL_OUTCOMES = st.sampled_from(["ok", "ok", "failed", "unknown"])


def moves() -> st.SearchStrategy[Move]:
    """Any command family, whether or not the Run's state allows it."""
    model_outcomes, tool_outcomes = MODEL_OUTCOMES, TOOL_OUTCOMES
    return st.one_of(
        st.builds(Move, st.just("settle_model"), st.just(0), model_outcomes),
        st.builds(Move, st.just("settle_tool"), st.integers(0, CALLS - 1), tool_outcomes),
        st.builds(Move, st.sampled_from(["start_tool", "approve", "reject"]),
                  st.integers(0, CALLS - 1)),
        st.builds(Move, st.just("accept_input"), st.integers(1, 2)),
        st.builds(Move, st.sampled_from(["prepare", "prepare_stale", "withdraw",
                                         "start_model", "recover", "cancel"])),
    )


def next_move(snap: Snapshot, model_outcome: str, tool_outcome: str) -> Move | None:
    """What the loop (and then the executor) does next for the Run at *snap*, following
    the real ``plan_next``: prepare, withdraw, start, or settle what is running."""
    state = snap.state
    if state.status is not RunStatus.ACTIVE:
        return None
    action = plan_next(state)
    cur = state.current
    if isinstance(action, NeedModelRequest):
        return Move("prepare")
    if isinstance(action, WithdrawPrepared):
        return Move("withdraw")
    if isinstance(action, StartModelCall):
        return Move("start_model")
    if isinstance(action, StartToolCalls):
        assert isinstance(cur, ToolStep)
        index = next(i for i, c in enumerate(cur.calls) if c.call_id == action.call_ids[0])
        return Move("start_tool", index)
    if isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING:
        return Move("settle_model", 0, model_outcome)
    if isinstance(cur, ToolStep):
        for i, c in enumerate(cur.calls):
            if c.status is ToolCallStatus.EXECUTING:
                return Move("settle_tool", i, tool_outcome)
            if c.status is ToolCallStatus.WAITING:
                return Move("approve", i)
    return None


def build(run_id: str, snap: Snapshot, move: Move) -> Built3 | None:
    """The command *move* names for the Run at *snap* (base = the loaded position)."""
    state, base = snap.state, snap.position
    cur = state.current
    f = move.family
    built: tuple[str, C.Command] | None = None
    if f == "accept_input":
        built = cmds.accept_input(run_id, f"in-{move.index}")
    elif f == "prepare":
        built = cmds.prepare(run_id, base, tuple(i.id for i in state.pending_inputs))
    elif f == "prepare_stale":  # planned from an older snapshot (a lost race)
        built = cmds.prepare(run_id, max(base - 1, 0), tuple(i.id for i in state.pending_inputs))
        return built[0], built[1], max(base - 1, 0)
    elif f == "cancel":
        built = cmds.cancel(f"cancel:{run_id}")
    elif isinstance(cur, ModelStep):
        if f == "withdraw":
            built = cmds.withdraw(run_id, cur.id)
        elif f == "start_model":
            built = cmds.start_model(run_id, cur.id, cur.rejects)
        elif f == "settle_model" and cur.effect:
            built = _settle_model(cur, move.outcome)
        elif f == "recover" and cur.effect:
            built = recovery_command(_target(snap, cur.effect))
    elif isinstance(cur, ToolStep) and move.index < len(cur.calls):
        call = cur.calls[move.index]
        if f == "start_tool":
            built = cmds.start_tool(run_id, cur.id, call.call_id)
        elif f == "settle_tool" and call.effect:
            built = (cmds.tool_result(cur.id, call.call_id, call.effect)
                     if move.outcome == "ok" else
                     cmds.tool_failure(cur.id, call.call_id, call.effect,
                                       move.outcome == "unknown"))
        elif f == "recover" and call.effect:
            built = recovery_command(_target(snap, call.effect))
        elif f in ("approve", "reject") and call.waiting is not None:
            builder = cmds.approve if f == "approve" else cmds.reject
            built = builder(run_id, cur.id, call.call_id, call.waiting.id)
    if built is None:
        return None
    return built[0], built[1], base


def _settle_model(step: ModelStep, outcome: str) -> tuple[str, C.Command]:
    if outcome == "tools":
        return cmds.model_result(step.id, step.effect, CALLS, APPROVALS)
    if outcome == "text":
        return cmds.model_result(step.id, step.effect, 0, False)
    if outcome == "failed":
        return cmds.model_failure(step.id, step.effect)
    return cmds.reject_model_result(step.id, step.effect, step.rejects < 1)


def _target(snap: Snapshot, effect: str) -> object:
    for target in recovery_targets(snap.state):
        if target.effect == effect:
            return target
    # not running any more: build the disposition a late reconciler would still send
    from runx_actors.protocol.plan import RecoveryTarget

    cur = snap.state.current
    call = ""
    if isinstance(cur, ToolStep):
        call = next((c.call_id for c in cur.calls if c.effect == effect), "")
    step = cur.id if isinstance(cur, ModelStep | ToolStep) else ""
    return RecoveryTarget(run_id=snap.state.run_id, step_id=step, call_id=call, effect=effect)


