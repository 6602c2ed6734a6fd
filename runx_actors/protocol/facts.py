"""The sixteen facts of a Run (spec §2.6; RUN-WIR-2, RUN-MCH-3).

A fact is a committed record that stands on its own. Every fact except ``RunCreated`` and
``InputAccepted`` names a step; call facts also name a call. ``WIRE_NAME`` is the event
type suffix (``twilight/run/<wire name>``).
"""

from __future__ import annotations

from typing import Any, ClassVar, TypeAlias

import attrs

from .values import (
    AgentInput,
    CallID,
    Digest,
    EffectID,
    Failure,
    InputID,
    ModelRef,
    ResponseID,
    RunEnd,
    RunID,
    StepID,
    ToolCallBinding,
    ToolFailureOutcome,
    ToolScheduling,
    ToolSpec,
    Usage,
)

__all__ = [
    "RunCreated", "ModelStepPrepared", "ModelStepWithdrawn", "ModelStepStarted",
    "ModelStepRecovered", "ModelStepRejected", "ModelStepFailed", "ModelStepCompleted",
    "ToolStepOpened", "ToolCallStarted", "ToolCallApproved", "ToolCallCompleted",
    "ToolCallAnswered", "ToolCallFailed", "InputAccepted", "RunEnded", "Fact",
    "FACT_TYPES", "FACT_BY_WIRE_NAME", "EVENT_TYPE_PREFIX",
]

EVENT_TYPE_PREFIX = "twilight/run/"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen
class RunCreated:
    """F1: the first fact of every Run (RUN-NEW-1)."""

    WIRE_NAME: ClassVar[str] = "run_created"
    run_id: RunID
    causation_id: str = ""


@attrs.frozen(kw_only=True)
class ModelStepPrepared:
    """F2: Open → ModelStep(PREPARED); consumes every pending input."""

    WIRE_NAME: ClassVar[str] = "model_step_prepared"
    step_id: StepID
    model: ModelRef
    request_digest: Digest
    input_ids: tuple[InputID, ...] = attrs.field(default=(), converter=_tuple)
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen
class ModelStepWithdrawn:
    """F3: PREPARED → Open because inputs arrived (RUN-LOP-8)."""

    WIRE_NAME: ClassVar[str] = "model_step_withdrawn"
    step_id: StepID


@attrs.frozen
class ModelStepStarted:
    """F4: PREPARED → EXECUTING under ``effect``."""

    WIRE_NAME: ClassVar[str] = "model_step_started"
    step_id: StepID
    effect: EffectID


@attrs.frozen
class ModelStepRecovered:
    """F5: EXECUTING → Open (takeover or a Cancelled/Unknown outcome)."""

    WIRE_NAME: ClassVar[str] = "model_step_recovered"
    step_id: StepID
    effect: EffectID


@attrs.frozen(kw_only=True)
class ModelStepRejected:
    """F6: EXECUTING → PREPARED after a malformed result; ``rejects += 1``."""

    WIRE_NAME: ClassVar[str] = "model_step_rejected"
    step_id: StepID
    effect: EffectID
    usage: Usage = Usage()
    failure: Failure


@attrs.frozen(kw_only=True)
class ModelStepFailed:
    """F7: EXECUTING → Open; a RunEnded follows in the same group."""

    WIRE_NAME: ClassVar[str] = "model_step_failed"
    step_id: StepID
    effect: EffectID
    failure: Failure


@attrs.frozen(kw_only=True)
class ModelStepCompleted:
    """F8: EXECUTING → Open; adds ``usage``."""

    WIRE_NAME: ClassVar[str] = "model_step_completed"
    step_id: StepID
    effect: EffectID
    usage: Usage = Usage()
    finish_reason: str = ""
    result_digest: Digest


@attrs.frozen(kw_only=True)
class ToolStepOpened:
    """F9: Open → ToolStep with one call per binding; scheduling frozen (INV-37)."""

    WIRE_NAME: ClassVar[str] = "tool_step_opened"
    step_id: StepID
    source: StepID
    calls: tuple[ToolCallBinding, ...] = attrs.field(converter=_tuple)
    scheduling: ToolScheduling = ToolScheduling()


@attrs.frozen(kw_only=True)
class ToolCallStarted:
    """F10: PENDING → EXECUTING under ``effect``."""

    WIRE_NAME: ClassVar[str] = "tool_call_started"
    step_id: StepID
    call_id: CallID
    effect: EffectID


@attrs.frozen(kw_only=True)
class ToolCallApproved:
    """F11: WAITING(approval) → PENDING."""

    WIRE_NAME: ClassVar[str] = "tool_call_approved"
    step_id: StepID
    call_id: CallID
    response_id: ResponseID
    response_digest: Digest


@attrs.frozen(kw_only=True)
class ToolCallCompleted:
    """F12: EXECUTING → COMPLETED with ``output_digest``."""

    WIRE_NAME: ClassVar[str] = "tool_call_completed"
    step_id: StepID
    call_id: CallID
    effect: EffectID
    output_digest: Digest


@attrs.frozen(kw_only=True)
class ToolCallAnswered:
    """F13: WAITING(external) → COMPLETED with the response digest as output."""

    WIRE_NAME: ClassVar[str] = "tool_call_answered"
    step_id: StepID
    call_id: CallID
    response_id: ResponseID
    response_digest: Digest


@attrs.frozen(kw_only=True)
class ToolCallFailed:
    """F14: PENDING/EXECUTING/WAITING → FAILED; ``effect`` empty if never started."""

    WIRE_NAME: ClassVar[str] = "tool_call_failed"
    step_id: StepID
    call_id: CallID
    effect: EffectID = ""
    failure: Failure
    outcome: ToolFailureOutcome = ToolFailureOutcome.KNOWN


@attrs.frozen
class InputAccepted:
    """F15: appends one input to ``pending_inputs``."""

    WIRE_NAME: ClassVar[str] = "input_accepted"
    input: AgentInput


@attrs.frozen
class RunEnded:
    """F16: the Run's end; closes no effect (INV-4)."""

    WIRE_NAME: ClassVar[str] = "run_ended"
    end: RunEnd


Fact: TypeAlias = (
    RunCreated | ModelStepPrepared | ModelStepWithdrawn | ModelStepStarted
    | ModelStepRecovered | ModelStepRejected | ModelStepFailed | ModelStepCompleted
    | ToolStepOpened | ToolCallStarted | ToolCallApproved | ToolCallCompleted
    | ToolCallAnswered | ToolCallFailed | InputAccepted | RunEnded
)

FACT_TYPES: tuple[type[Any], ...] = (
    RunCreated, ModelStepPrepared, ModelStepWithdrawn, ModelStepStarted,
    ModelStepRecovered, ModelStepRejected, ModelStepFailed, ModelStepCompleted,
    ToolStepOpened, ToolCallStarted, ToolCallApproved, ToolCallCompleted,
    ToolCallAnswered, ToolCallFailed, InputAccepted, RunEnded,
)
FACT_BY_WIRE_NAME: dict[str, type[Any]] = {t.WIRE_NAME: t for t in FACT_TYPES}
