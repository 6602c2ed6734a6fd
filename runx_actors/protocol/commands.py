"""The sixteen commands of a Run (spec §2.8; RUN-MCH-2, RUN-MCH-3).

A command is an intent submitted for commit. Commands are never stored; a command's
CommandID becomes the commit id of the group of facts it produced. ``WIRE_NAME`` is the
snake_case of the class name [U-10].
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
    JSONText,
    ModelRef,
    ModelRejectDisposition,
    ModelRequest,
    ModelResult,
    PromptToken,
    ResponseID,
    StepID,
    ToolCallBinding,
    ToolFailureOutcome,
    ToolResult,
    ToolScheduling,
    ToolSpec,
    Usage,
)

__all__ = [
    "AcceptInput", "PrepareModelRequest", "WithdrawPreparedStep", "StartModelExecution",
    "RecoverModelExecution", "SubmitModelResult", "SubmitModelFailure", "RejectModelResult",
    "StartToolCall", "SubmitToolResult", "SubmitToolFailure", "DeclineToolCall",
    "ApproveToolCall", "RejectToolCall", "SubmitToolResponse", "CancelRun", "Command",
    "AgentCommand", "COMMAND_TYPES", "COMMAND_BY_WIRE_NAME", "EFFECT_COMMANDS",
]


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen
class AcceptInput:
    """C1: queue inputs; legal in every non-terminal state (RUN-MCH-4)."""

    WIRE_NAME: ClassVar[str] = "accept_input"
    inputs: tuple[AgentInput, ...] = attrs.field(converter=_tuple)


@attrs.frozen(kw_only=True)
class PrepareModelRequest:
    """C2: freeze a model request at Open; consumes every pending input."""

    WIRE_NAME: ClassVar[str] = "prepare_model_request"
    step_id: StepID
    model: ModelRef
    request: ModelRequest
    request_digest: Digest
    input_ids: tuple[InputID, ...] = attrs.field(default=(), converter=_tuple)
    prompt_token: PromptToken = ""
    tools: tuple[ToolSpec, ...] = attrs.field(default=(), converter=_tuple)


@attrs.frozen
class WithdrawPreparedStep:
    """C3: withdraw a PREPARED step because inputs are pending."""

    WIRE_NAME: ClassVar[str] = "withdraw_prepared_step"
    step_id: StepID


@attrs.frozen
class StartModelExecution:
    """C4: the start barrier of a model effect."""

    WIRE_NAME: ClassVar[str] = "start_model_execution"
    step_id: StepID
    effect: EffectID


@attrs.frozen
class RecoverModelExecution:
    """C5: return an EXECUTING model step to Open."""

    WIRE_NAME: ClassVar[str] = "recover_model_execution"
    step_id: StepID
    effect: EffectID


@attrs.frozen(kw_only=True)
class SubmitModelResult:
    """C6: settle a model effect with a result (and bindings for its tool calls)."""

    WIRE_NAME: ClassVar[str] = "submit_model_result"
    step_id: StepID
    effect: EffectID
    result: ModelResult
    calls: tuple[ToolCallBinding, ...] = attrs.field(default=(), converter=_tuple)
    scheduling: ToolScheduling = ToolScheduling()


@attrs.frozen(kw_only=True)
class SubmitModelFailure:
    """C7: settle a model effect with a failure; ends the Run FAILED."""

    WIRE_NAME: ClassVar[str] = "submit_model_failure"
    step_id: StepID
    effect: EffectID
    failure: Failure


@attrs.frozen(kw_only=True)
class RejectModelResult:
    """C8: settle a model effect whose result was malformed [U-1]."""

    WIRE_NAME: ClassVar[str] = "reject_model_result"
    step_id: StepID
    effect: EffectID
    usage: Usage = Usage()
    failure: Failure
    disposition: ModelRejectDisposition


@attrs.frozen(kw_only=True)
class StartToolCall:
    """C9: the start barrier of a tool effect."""

    WIRE_NAME: ClassVar[str] = "start_tool_call"
    step_id: StepID
    call_id: CallID
    effect: EffectID


@attrs.frozen(kw_only=True)
class SubmitToolResult:
    """C10: settle a tool effect with its output."""

    WIRE_NAME: ClassVar[str] = "submit_tool_result"
    step_id: StepID
    call_id: CallID
    effect: EffectID
    result: ToolResult


@attrs.frozen(kw_only=True)
class SubmitToolFailure:
    """C11: settle a tool effect with a KNOWN or UNKNOWN failure."""

    WIRE_NAME: ClassVar[str] = "submit_tool_failure"
    step_id: StepID
    call_id: CallID
    effect: EffectID
    failure: Failure
    outcome: ToolFailureOutcome = ToolFailureOutcome.KNOWN


@attrs.frozen(kw_only=True)
class DeclineToolCall:
    """C12: fail a PENDING call without starting it (RUN-EXE-5)."""

    WIRE_NAME: ClassVar[str] = "decline_tool_call"
    step_id: StepID
    call_id: CallID
    failure: Failure


@attrs.frozen(kw_only=True)
class ApproveToolCall:
    """C13: approve a WAITING(approval) call."""

    WIRE_NAME: ClassVar[str] = "approve_tool_call"
    step_id: StepID
    call_id: CallID
    response_id: ResponseID
    response_digest: Digest


@attrs.frozen(kw_only=True)
class RejectToolCall:
    """C14: reject a WAITING call (either kind)."""

    WIRE_NAME: ClassVar[str] = "reject_tool_call"
    step_id: StepID
    call_id: CallID
    response_id: ResponseID
    response_digest: Digest
    reason: str = ""


@attrs.frozen(kw_only=True)
class SubmitToolResponse:
    """C15: answer a WAITING(external_response) call."""

    WIRE_NAME: ClassVar[str] = "submit_tool_response"
    step_id: StepID
    call_id: CallID
    response_id: ResponseID
    response_digest: Digest
    payload: JSONText


@attrs.frozen
class CancelRun:
    """C16: stop the Run (RUN-LOP-2); reason ``""`` or ``"cancelled"``."""

    WIRE_NAME: ClassVar[str] = "cancel_run"
    reason: str = ""


Command: TypeAlias = (
    AcceptInput | PrepareModelRequest | WithdrawPreparedStep | StartModelExecution
    | RecoverModelExecution | SubmitModelResult | SubmitModelFailure | RejectModelResult
    | StartToolCall | SubmitToolResult | SubmitToolFailure | DeclineToolCall
    | ApproveToolCall | RejectToolCall | SubmitToolResponse | CancelRun
)
AgentCommand: TypeAlias = Command

COMMAND_TYPES: tuple[type[Any], ...] = (
    AcceptInput, PrepareModelRequest, WithdrawPreparedStep, StartModelExecution,
    RecoverModelExecution, SubmitModelResult, SubmitModelFailure, RejectModelResult,
    StartToolCall, SubmitToolResult, SubmitToolFailure, DeclineToolCall,
    ApproveToolCall, RejectToolCall, SubmitToolResponse, CancelRun,
)
COMMAND_BY_WIRE_NAME: dict[str, type[Any]] = {t.WIRE_NAME: t for t in COMMAND_TYPES}

#: Start, settlement and recovery commands: an empty ``effect`` is a conflict (§4.3 step 4).
EFFECT_COMMANDS: tuple[type[Any], ...] = (
    StartModelExecution, RecoverModelExecution, SubmitModelResult, SubmitModelFailure,
    RejectModelResult, StartToolCall, SubmitToolResult, SubmitToolFailure,
)
