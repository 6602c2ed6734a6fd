"""Planning and queries (spec §2.9, §2.10; RUN-MCH-4).

``plan_next`` names the next action for a loaded state; actions are transient, never
stored, and re-derived after every load. It returns a member of a closed union so the
shell's ``match`` covers every case (style §1.5).
"""

from __future__ import annotations

from typing import Any, TypeAlias

import attrs

from . import commands as C
from .errors import RunTerminalError, ValidationError
from .facts import Fact
from .ids import derive_recovery_command_id
from .state import MachineState, ModelStep, Open, ToolStep
from .values import (
    AgentInput,
    CallID,
    CommandID,
    Digest,
    EffectID,
    Failure,
    FailureClass,
    ModelRef,
    ModelRequest,
    ModelStepStatus,
    PromptToken,
    ResponseRequest,
    RunID,
    RunStatus,
    Scope,
    StepID,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolSpec,
)

__all__ = [
    "PromptInput", "Prompt", "NeedModelRequest", "WithdrawPrepared", "StartModelCall",
    "StartToolCalls", "Idle", "Action", "plan_next", "waiting_calls", "executing_calls",
    "needs_recovery", "RecoveryTarget", "recovery_targets", "recovery_command",
    "is_quiescent", "RECOVERY_MESSAGE",
]

#: Normative message of a takeover's UNKNOWN tool failure (§2.10).
RECOVERY_MESSAGE = "owner process lost before settlement"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class PromptInput:
    """What a PromptBuilder gets: ``source_step`` is the last closed ToolStep id or "".

    ``pending`` and ``pending_bodies`` are set only for a builder that opted in to fused
    commits (``reads_pending = True``; RUN-LOP-11): the facts already decided for this Run
    but not yet durable — they follow the store's log, in order, and are committed in the
    same transaction as the request being built — and the ``(digest, envelope bytes)`` of
    the frozen bodies they name (a tool output, a model result), which are not in the
    FrozenStore yet. Both are ``()`` otherwise (the store's log is the whole history).
    """

    scope: Scope = ""
    run_id: RunID
    source_step: StepID = ""
    inputs: tuple[AgentInput, ...] = attrs.field(default=(), converter=_tuple)
    pending: tuple[Fact, ...] = attrs.field(default=(), converter=_tuple)
    pending_bodies: tuple[tuple[Digest, bytes], ...] = attrs.field(default=(),
                                                                   converter=_tuple)

    def pending_body(self, digest: Digest) -> bytes | None:
        """The envelope bytes of the pending body *digest*, or None (not pending)."""
        for d, data in self.pending_bodies:
            if d == digest:
                return data
        return None


@attrs.frozen(kw_only=True)
class Prompt:
    """A built prompt: the frozen request, the inputs it consumes and its tool specs."""

    request: ModelRequest
    input_ids: tuple[str, ...] = attrs.field(default=(), converter=_tuple)
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tuple)
    model: ModelRef = ""
    token: PromptToken = ""


@attrs.frozen
class NeedModelRequest:
    """plan_next (RUN-MCH-4): the Run is Open and needs its next model request; ``hint``
    is what the PromptBuilder gets (pending inputs, the last closed ToolStep)."""

    hint: PromptInput


@attrs.frozen
class WithdrawPrepared:
    """plan_next: inputs arrived after ``step_id`` was prepared; withdraw it so the next
    request includes them (RUN-MCH-4)."""

    step_id: StepID


@attrs.frozen
class StartModelCall:
    """plan_next: the PREPARED model step ``step_id`` may start (the start barrier
    follows, RUN-LOP-3)."""

    step_id: StepID


@attrs.frozen
class StartToolCalls:
    """plan_next: the PENDING calls ``call_ids`` (call order) of ToolStep ``step_id`` may
    start, as the scheduling window admits (RUN-LOP-4)."""

    step_id: StepID
    call_ids: tuple[CallID, ...] = attrs.field(converter=_tuple)


@attrs.frozen
class Idle:
    """plan_next: nothing to start now — the model step is EXECUTING, or every live call
    is EXECUTING or WAITING (for its Outcome or an outside answer)."""


Action: TypeAlias = NeedModelRequest | WithdrawPrepared | StartModelCall | StartToolCalls | Idle


def plan_next(state: MachineState) -> Action:
    """The next action for *state* (table of §2.9).

    Raises:
        RunTerminalError: the Run has ended.
        ValidationError: a current ToolStep has no live call (it should have closed).
    """
    if state.status is not RunStatus.ACTIVE:
        raise RunTerminalError(f"run {state.run_id} is {state.status.value}",
                               status=state.status, run_id=state.run_id)
    cur = state.current
    if isinstance(cur, Open):
        source = state.last_tool_step.id if state.last_tool_step is not None else ""
        return NeedModelRequest(
            PromptInput(run_id=state.run_id, source_step=source, inputs=state.pending_inputs)
        )
    if isinstance(cur, ModelStep):
        if cur.status is ModelStepStatus.EXECUTING:
            return Idle()
        if state.pending_inputs:
            return WithdrawPrepared(cur.id)
        return StartModelCall(cur.id)
    if isinstance(cur, ToolStep):
        pending = tuple(c.call_id for c in cur.calls if c.status is ToolCallStatus.PENDING)
        if pending:
            return StartToolCalls(cur.id, pending)
        if any(c.status in (ToolCallStatus.WAITING, ToolCallStatus.EXECUTING) for c in cur.calls):
            return Idle()
        raise ValidationError("current ToolStep has no live call", state=state)
    raise ValidationError(f"unexpected current {cur!r}", state=state)


def waiting_calls(state: MachineState) -> tuple[ResponseRequest, ...]:
    """Requests of WAITING calls of the current ToolStep, in call order; () otherwise."""
    cur = state.current
    if not isinstance(cur, ToolStep):
        return ()
    return tuple(
        c.waiting for c in cur.calls
        if c.status is ToolCallStatus.WAITING and c.waiting is not None
    )


def executing_calls(state: MachineState) -> tuple[CallID, ...]:
    """EXECUTING calls of the current ToolStep, in call order."""
    cur = state.current
    if not isinstance(cur, ToolStep):
        return ()
    return tuple(c.call_id for c in cur.calls if c.status is ToolCallStatus.EXECUTING)


def needs_recovery(state: MachineState) -> bool:
    """True iff an effect is in flight for which the planner has no start action (§2.10)."""
    cur = state.current
    if isinstance(cur, ModelStep):
        return cur.status is ModelStepStatus.EXECUTING
    if isinstance(cur, ToolStep):
        statuses = {c.status for c in cur.calls}
        return ToolCallStatus.EXECUTING in statuses and ToolCallStatus.PENDING not in statuses
    return False


@attrs.frozen(kw_only=True)
class RecoveryTarget:
    """An EXECUTING effect: the model step (``call_id == ""``) or one call."""

    run_id: RunID
    step_id: StepID
    call_id: CallID = ""
    effect: EffectID


def recovery_targets(state: MachineState) -> tuple[RecoveryTarget, ...]:
    """The EXECUTING model step or every EXECUTING call of *state*, in call order."""
    cur = state.current
    if isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING:
        return (RecoveryTarget(run_id=state.run_id, step_id=cur.id, effect=cur.effect),)
    if isinstance(cur, ToolStep):
        return tuple(
            RecoveryTarget(run_id=state.run_id, step_id=cur.id, call_id=c.call_id,
                           effect=c.effect)
            for c in cur.calls if c.status is ToolCallStatus.EXECUTING
        )
    return ()


def recovery_command(target: RecoveryTarget) -> tuple[CommandID, C.Command]:
    """The takeover disposition of *target* under ``derive_recovery_command_id(effect)``.

    Model: ``RecoverModelExecution``; tool: UNKNOWN ``SubmitToolFailure`` with the
    normative message ``RECOVERY_MESSAGE`` (RUN-CMT-7, INV-29).
    """
    cid = derive_recovery_command_id(target.effect)
    if not target.call_id:
        return cid, C.RecoverModelExecution(target.step_id, target.effect)
    return cid, C.SubmitToolFailure(
        step_id=target.step_id, call_id=target.call_id, effect=target.effect,
        failure=Failure(FailureClass.EFFECT_UNKNOWN, RECOVERY_MESSAGE),
        outcome=ToolFailureOutcome.UNKNOWN,
    )


def is_quiescent(state: MachineState) -> bool:
    """ACTIVE and at Open, or at a ToolStep with no EXECUTING call (APP-CKP-1)."""
    if state.status is not RunStatus.ACTIVE:
        return False
    cur = state.current
    if isinstance(cur, Open):
        return True
    if isinstance(cur, ToolStep):
        return all(c.status is not ToolCallStatus.EXECUTING for c in cur.calls)
    return False
