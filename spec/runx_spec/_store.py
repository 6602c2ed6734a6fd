"""The store of the reference machine: ``decide`` (spec §2.8) and ``commit`` (§4.3, §4.5).

A command is refused with :class:`Refused` (reason "stale", "conflict", "terminal" or
"fenced") and then nothing is written. ``bugs`` is the set of active broken variants; each
``if ... in bugs`` below is one deliberate defect (see ``reference.VARIANTS``).
"""

from __future__ import annotations

from . import _ids as ids
from ._state import (
    ACTIVE,
    EXECUTING,
    FAILED_CALL,
    OPEN,
    PENDING,
    PREPARED,
    WAITING,
    Call,
    Cmd,
    Commit,
    Fact,
    ModelStep,
    RunState,
    ToolStep,
    World,
    call_id,
    evolve,
    find_call,
    model_effect,
    replace,
    response_id,
    run_id,
    tool_effect,
    tool_step_id,
)

__all__ = ["Refused", "decide", "commit", "expected_cid", "SETTLEMENTS", "CANCEL_PREFIX"]

ACCEPTED, ALREADY = "accepted", "already_applied"
CANCEL_PREFIX = "cancel:"
#: commands that close a running effect with an outcome (deliver's commands)
SETTLEMENTS = frozenset({
    "SubmitModelResult", "SubmitModelFailure", "RejectModelResult",
    "SubmitToolResult", "SubmitToolFailure",
})
TOOL_SETTLEMENTS = frozenset({"SubmitToolResult", "SubmitToolFailure"})


class Refused(Exception):
    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _model_step(state: RunState, cmd: Cmd, status: str) -> ModelStep:
    cur = state.current
    if not (isinstance(cur, ModelStep) and cur.id == cmd.step and cur.status == status):
        raise Refused("stale")
    return cur


def _running_model(state: RunState, cmd: Cmd) -> ModelStep:
    step = _model_step(state, cmd, EXECUTING)
    if cmd.effect != step.effect:  # INV-5
        raise Refused("stale")
    return step


def _call(state: RunState, cmd: Cmd, status: str) -> Call:
    cur = state.current
    if isinstance(cur, ToolStep) and cur.id == cmd.step:
        for c in cur.calls:
            if c.id == cmd.call and c.status == status:
                return c
    raise Refused("stale")


def _running_call(state: RunState, cmd: Cmd) -> Call:
    call = _call(state, cmd, EXECUTING)
    if cmd.effect != call.effect:  # INV-5
        raise Refused("stale")
    return call


def _tool_calls(r: int, step: str, n: int, approvals: bool) -> tuple[Call, ...]:
    """The calls of the ToolStep opened by model step ``step`` (call 1 needs approval)."""
    tstep = tool_step_id(step)
    calls = []
    for i in range(n):
        cid = call_id(step, i)
        if approvals and i == 1:
            calls.append(Call(cid, "approval", WAITING, response=response_id(r, tstep, cid)))
        else:
            calls.append(Call(cid, "direct", PENDING))
    return tuple(calls)


def _cancel(state: RunState, bugs: frozenset[str]) -> tuple[Fact, ...]:
    facts: list[Fact] = []
    uncertain: list[str] = []
    uncertain_model = ""
    cur = state.current
    if isinstance(cur, ToolStep):
        for c in cur.calls:
            if c.status in (PENDING, WAITING):
                facts.append(Fact("ToolCallFailed", cur.id, c.id, "", ("known", "cancelled")))
            elif c.status == EXECUTING and "run_ended_while_executing" not in bugs:
                facts.append(Fact("ToolCallFailed", cur.id, c.id, c.effect,
                                  ("unknown", "effect_unknown")))
                uncertain.append(c.id)
    if (isinstance(cur, ModelStep) and cur.status == EXECUTING
            and "run_ended_while_executing" not in bugs):
        facts.append(Fact("ModelStepFailed", cur.id, "", cur.effect, "effect_unknown"))
        uncertain_model = cur.id
    facts.append(Fact("RunEnded", arg=("stopped", "cancelled", tuple(uncertain),
                                       uncertain_model)))
    return tuple(facts)


def decide(r: int, state: RunState, cmd: Cmd, *, calls: int, approvals: bool,
           bugs: frozenset[str]) -> tuple[Fact, ...]:
    """The group of facts ``cmd`` produces on ``state`` (spec §2.8), or :class:`Refused`.

    ``cmd.arg``: AcceptInput → input id; Prepare → (base, input ids); SubmitModelResult →
    "tools" | "text"; RejectModelResult → "retry" | "fail_run"; SubmitToolFailure →
    "known" | "unknown"; ApproveToolCall / RejectToolCall → ResponseID.
    """
    k = cmd.kind
    cur = state.current
    if state.status != ACTIVE:
        raise Refused("terminal")
    if k == "AcceptInput":
        if cmd.arg in state.pending:
            raise Refused("conflict")
        return (Fact("InputAccepted", arg=cmd.arg),)
    if k == "Prepare":
        if cur != OPEN or cmd.arg[1] != state.pending:
            raise Refused("stale")
        return (Fact("ModelStepPrepared", cmd.step, arg=cmd.arg[1]),)
    if k == "Withdraw":
        _model_step(state, cmd, PREPARED)
        if not state.pending:
            raise Refused("stale")
        return (Fact("ModelStepWithdrawn", cmd.step),)
    if k == "StartModel":
        step = _model_step(state, cmd, PREPARED)
        if cmd.effect != model_effect(r, step.id, step.rejects):  # INV-7
            raise Refused("stale")
        return (Fact("ModelStepStarted", cmd.step, "", cmd.effect),)
    if k == "RecoverModel":
        _running_model(state, cmd)
        return (Fact("ModelStepRecovered", cmd.step, "", cmd.effect),)
    if k == "SubmitModelResult":
        _running_model(state, cmd)
        done = Fact("ModelStepCompleted", cmd.step, "", cmd.effect)
        if cmd.arg == "tools":
            opened = Fact("ToolStepOpened", tool_step_id(cmd.step),
                          arg=(cmd.step, _tool_calls(r, cmd.step, calls, approvals)))
            return (done, opened)
        if state.pending:  # INV-15: text only, inputs waiting → back to Open
            return (done,)
        return (done, Fact("RunEnded", arg=("completed",)))
    if k == "SubmitModelFailure":
        _running_model(state, cmd)
        return (Fact("ModelStepFailed", cmd.step, "", cmd.effect, "provider_failure"),
                Fact("RunEnded", arg=("failed", "provider_failure")))
    if k == "RejectModelResult":
        _running_model(state, cmd)
        rejected = Fact("ModelStepRejected", cmd.step, "", cmd.effect)
        if cmd.arg == "fail_run":
            return (rejected, Fact("RunEnded", arg=("failed", "malformed_model_result")))
        return (rejected,)
    if k == "StartToolCall":
        _call(state, cmd, PENDING)  # INV-6: only a PENDING call starts
        if cmd.effect != tool_effect(r, cmd.step, cmd.call):  # sequence 0
            raise Refused("stale")
        return (Fact("ToolCallStarted", cmd.step, cmd.call, cmd.effect),)
    if k == "SubmitToolResult":
        _running_call(state, cmd)
        return (Fact("ToolCallCompleted", cmd.step, cmd.call, cmd.effect),)
    if k == "SubmitToolFailure":
        _running_call(state, cmd)
        klass = "effect_unknown" if cmd.arg == "unknown" else "execution_failed"
        return (Fact("ToolCallFailed", cmd.step, cmd.call, cmd.effect, (cmd.arg, klass)),)
    if k in ("ApproveToolCall", "RejectToolCall"):
        call = _call(state, cmd, WAITING)
        if cmd.arg != call.response:
            raise Refused("stale")
        if k == "ApproveToolCall":
            return (Fact("ToolCallApproved", cmd.step, cmd.call),)
        return (Fact("ToolCallFailed", cmd.step, cmd.call, "", ("known", "permission_denied")),)
    if k == "CancelRun":
        return _cancel(state, bugs)
    raise ValueError(f"unknown command {k!r}")


def expected_cid(r: int, cmd: Cmd) -> tuple[str, ...]:
    """The command ids the command's family derives (spec §3.3); () = free (CancelRun)."""
    k, run = cmd.kind, run_id(r)
    if k == "AcceptInput":
        return (ids.derive_input_command_id(run, cmd.arg),)
    if k == "Prepare":
        return (ids.derive_prepare_command_id(run, cmd.arg[0]),)
    if k == "Withdraw":
        return (ids.derive_withdraw_command_id(run, cmd.step),)
    if k in ("StartModel", "StartToolCall"):
        return (ids.derive_start_command_id(cmd.effect),)
    if k == "RecoverModel":
        return (ids.derive_recovery_command_id(cmd.effect),)
    if k == "SubmitToolFailure" and cmd.arg == "unknown":
        return (ids.derive_settlement_command_id(cmd.effect),
                ids.derive_recovery_command_id(cmd.effect))
    if k in SETTLEMENTS:
        return (ids.derive_settlement_command_id(cmd.effect),)
    if k in ("ApproveToolCall", "RejectToolCall"):
        return (ids.derive_response_command_id(run, cmd.step, cmd.call, cmd.arg),)
    return ()


def _late_tool_facts(state: RunState, cmd: Cmd) -> tuple[Fact, ...] | None:
    """Variant ``late_outcome_written``: the facts of a tool settlement that arrives after
    the call was already failed UNKNOWN (by cancel or takeover), or None."""
    call = find_call(state, cmd.call)
    if cmd.kind not in TOOL_SETTLEMENTS or call is None:
        return None
    if call.status != FAILED_CALL or call.outcome != "unknown" or call.effect != cmd.effect:
        return None
    if cmd.kind == "SubmitToolResult":
        return (Fact("ToolCallCompleted", cmd.step, cmd.call, cmd.effect),)
    klass = "effect_unknown" if cmd.arg == "unknown" else "execution_failed"
    return (Fact("ToolCallFailed", cmd.step, cmd.call, cmd.effect, (cmd.arg, klass)),)


def commit(world: World, r: int, cid: str, cmd: Cmd, *, epoch: int, origin: str, base: int,
           calls: int, approvals: bool, bugs: frozenset[str]) -> tuple[World, str]:
    """Evaluate and apply one commit (spec §4.3 steps 1-11, §4.5 fencing).

    Returns the new world and "accepted" | "already_applied" | a refusal reason
    ("terminal", "conflict", "stale", "fenced"); on a refusal the world is unchanged.
    """
    store = world.store
    state = store.runs[r]
    # A writer whose epoch is not the persisted one is refused before anything else: it
    # writes nothing (§4.5). (The spec only fences the append; a fenced writer may still
    # answer a replay from its own stale index — either way nothing is written.)
    if epoch != store.epoch and "no_epoch_check" not in bugs:
        return world, "fenced"
    # 1. Replay lookup: a known commit id answers ALREADY_APPLIED; no decide, no append.
    if cid in store.cids and "replay_redecides" not in bugs:
        if "replay_reapplies" in bugs:  # the projection folds the old group a second time
            for fact in next(c for c in store.log if c.cid == cid).facts:
                state = evolve(state, fact)
            runs = tuple(state if i == r else s for i, s in enumerate(store.runs))
            world = replace(world, store=replace(store, runs=runs))
        return world, ALREADY
    facts = _late_tool_facts(state, cmd) if "late_outcome_written" in bugs else None
    if facts is None:
        try:
            # 2./6. Locate; a terminal Run refuses every fresh command.
            if state.status != ACTIVE:
                raise Refused("terminal")
            # 3.-5. The command id is the one its family derives (CancelRun is free).
            expected = expected_cid(r, cmd)
            if expected and cid not in expected:
                raise Refused("conflict")
            # 7. Hard CAS, Prepare only.  9. The step id derives from the command id.
            if cmd.kind == "Prepare" and (cmd.arg[0] != store.position(r)
                                          or cmd.step != ids.derive_model_step_id(run_id(r), cid)):
                raise Refused("stale")
            # 8. Decide exactly once.
            facts = decide(r, state, cmd, calls=calls, approvals=approvals, bugs=bugs)
        except Refused as refusal:
            return world, refusal.reason
    # 11. Append atomically, carrying the writer's epoch.
    for fact in facts:  # 10. Evolve.
        state = evolve(state, fact)
    store = store.append(Commit(cid, r, facts, epoch, store.epoch, origin, base), state)
    return replace(world, store=store), ACCEPTED
