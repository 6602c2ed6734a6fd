"""MachineState: the fold of a Run's facts (spec §2.2, §2.5; RUN-MCH-1).

The state holds progress (``current``), the inbox (``pending_inputs``), in-flight effects
(EXECUTING step or calls) and the end (``result``); never owner, epoch or timestamps.
It is deeply immutable and hashable, so snapshots are shared freely and the model
checker can keep states in a set.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import attrs

from .errors import ValidationError
from .values import (
    AgentInput,
    CallID,
    Digest,
    EffectID,
    FailureClass,
    JSONText,
    ModelRef,
    ModelStepStatus,
    ResponsePolicy,
    ResponseRequest,
    RunID,
    RunResult,
    RunStatus,
    StepID,
    ToolCallFailure,
    ToolCallResult,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolPlacement,
    ToolRef,
    ToolReplay,
    ToolScheduling,
    ToolSpec,
    Usage,
)

__all__ = [
    "Open", "OPEN", "ModelStep", "ToolCallState", "ToolStep", "Step", "MachineState",
    "validate_machine_state", "validate_tool_call_state", "LIVE_CALL_STATUSES",
    "TERMINAL_CALL_STATUSES",
]


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


LIVE_CALL_STATUSES = frozenset(
    {ToolCallStatus.PENDING, ToolCallStatus.EXECUTING, ToolCallStatus.WAITING}
)
TERMINAL_CALL_STATUSES = frozenset({ToolCallStatus.COMPLETED, ToolCallStatus.FAILED})


@attrs.frozen
class Open:
    """The Run is between steps; only here may a model request be prepared."""


OPEN = Open()


@attrs.frozen(kw_only=True)
class ModelStep:
    """The current model step: PREPARED or EXECUTING (completion returns to Open)."""

    id: StepID
    model: ModelRef
    request_digest: Digest
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tuple)
    status: ModelStepStatus
    effect: EffectID = ""
    rejects: int = 0


@attrs.frozen(kw_only=True)
class ToolCallState:
    """One call of a ToolStep (§2.5)."""

    call_id: CallID
    provider_call_id: str = ""
    tool_ref: ToolRef
    definition_digest: str = ""
    arguments: JSONText
    policy: ResponsePolicy = ResponsePolicy.DIRECT_EXECUTION
    replay: ToolReplay = ToolReplay.UNKNOWN
    placement: ToolPlacement = ToolPlacement.NONE
    status: ToolCallStatus
    effect: EffectID = ""
    result: ToolCallResult | None = None
    failure: ToolCallFailure | None = None
    waiting: ResponseRequest | None = None


@attrs.frozen(kw_only=True)
class ToolStep:
    """The calls one completed ModelStep asked for."""

    id: StepID
    source: StepID
    calls: tuple[ToolCallState, ...] = attrs.field(converter=_tuple)
    scheduling: ToolScheduling = ToolScheduling()

    def call(self, call_id: CallID) -> ToolCallState | None:
        for c in self.calls:
            if c.call_id == call_id:
                return c
        return None


Step: TypeAlias = Open | ModelStep | ToolStep


@attrs.frozen(kw_only=True)
class MachineState:
    """The state of one Run (RUN-MCH-1). ``current`` is None exactly when terminal."""

    run_id: RunID
    status: RunStatus
    current: Open | ModelStep | ToolStep | None
    pending_inputs: tuple[AgentInput, ...] = attrs.field(default=(), converter=_tuple)
    model_steps: int = 0
    last_tool_step: ToolStep | None = None
    usage: Usage = Usage()
    result: RunResult | None = None

    @property
    def is_terminal(self) -> bool:
        return self.status is not RunStatus.ACTIVE


def validate_tool_call_state(call: ToolCallState) -> None:
    """Check one call against the table of §2.5; raise ValidationError if it fails."""
    st = call.status
    if st in (ToolCallStatus.PENDING, ToolCallStatus.EXECUTING):
        if call.result is not None or call.failure is not None or call.waiting is not None:
            raise ValidationError(f"{st.value} call carries result/failure/waiting", call=call)
    elif st is ToolCallStatus.WAITING:
        if call.waiting is None:
            raise ValidationError("waiting call has no response request", call=call)
        if call.policy not in (
            ResponsePolicy.APPROVAL_REQUIRED,
            ResponsePolicy.EXTERNAL_RESPONSE,
        ):
            raise ValidationError("waiting call with a direct policy", call=call)
        if call.result is not None or call.failure is not None:
            raise ValidationError("waiting call carries result/failure", call=call)
    elif st is ToolCallStatus.COMPLETED:
        if call.result is None or not call.result.output_digest:
            raise ValidationError("completed call without output digest", call=call)
        if call.failure is not None or call.waiting is not None:
            raise ValidationError("completed call carries failure/waiting", call=call)
    elif st is ToolCallStatus.FAILED:
        f = call.failure
        if f is None or not f.failure.class_:
            raise ValidationError("failed call without failure class", call=call)
        unknown = f.outcome is ToolFailureOutcome.UNKNOWN
        if unknown != (f.failure.class_ == FailureClass.EFFECT_UNKNOWN):
            raise ValidationError("failure class/outcome disagree", call=call)
        if call.result is not None or call.waiting is not None:
            raise ValidationError("failed call carries result/waiting", call=call)
    else:  # pragma: no cover - enum is closed
        raise ValidationError(f"unknown call status {st!r}", call=call)


def validate_machine_state(state: MachineState) -> None:
    """Check INV-3 and the per-call table; raise ValidationError on the first violation."""
    if state.status is RunStatus.ACTIVE:
        if state.current is None or state.result is not None:
            raise ValidationError("active state needs current and no result", state=state)
    else:
        if state.current is not None or state.result is None:
            raise ValidationError("terminal state needs result and no current", state=state)
        if state.result.status is not state.status:
            raise ValidationError("result status differs from status", state=state)
    if state.model_steps < 0:
        raise ValidationError("model_steps below zero", state=state)
    cur = state.current
    if isinstance(cur, ToolStep):
        if not any(c.status in LIVE_CALL_STATUSES for c in cur.calls):
            raise ValidationError("current ToolStep has no live call", state=state)
        for c in cur.calls:
            validate_tool_call_state(c)
    if state.last_tool_step is not None:
        for c in state.last_tool_step.calls:
            validate_tool_call_state(c)
            if c.status not in TERMINAL_CALL_STATUSES:
                raise ValidationError("last_tool_step has a live call", state=state)
    seen: set[str] = set()
    for i in state.pending_inputs:
        if i.id in seen:
            raise ValidationError("input pending twice", state=state)
        seen.add(i.id)
