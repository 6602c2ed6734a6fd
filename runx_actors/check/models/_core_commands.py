"""Real protocol commands for the core model, with every id and digest derived as the
shell derives them (spec §3.3, §3.6; the runtime's loop, deliver and takeover).

Each function returns ``(command_id, command)``. Bodies are fixed small values: every
model step offers the same two tools (``lookup``, direct; ``write``, approval required)
under the same frozen request, so facts differ only in their ids, as in the reference.
All functions are pure and cached (their arguments are immutable).
"""

from __future__ import annotations

import functools

from ...protocol import commands as C
from ...protocol.canonical import freeze_tool_arguments
from ...protocol.digests import decision_digest, digest_model_request, digest_tool_definition
from ...protocol.ids import (
    derive_call_id,
    derive_effect_id,
    derive_input_command_id,
    derive_model_step_id,
    derive_prepare_command_id,
    derive_recovery_command_id,
    derive_response_command_id,
    derive_settlement_command_id,
    derive_start_command_id,
    derive_withdraw_command_id,
)
from ...protocol.values import (
    AgentInput,
    Failure,
    FailureClass,
    ModelRejectDisposition,
    ModelRequest,
    ModelResult,
    ModelToolCall,
    ResponseKind,
    ResponsePolicy,
    ToolCallBinding,
    ToolDefinition,
    ToolFailureOutcome,
    ToolResult,
    ToolSpec,
)

__all__ = [
    "Built", "MODEL", "TOOLS", "REQUEST", "agent_input", "prepare", "withdraw",
    "start_model", "start_tool", "model_result", "reject_model_result", "model_failure",
    "recover_model", "tool_result", "tool_failure", "accept_input", "approve", "reject",
    "cancel",
]

Built = tuple[str, C.Command]

MODEL = "model-1"
_LOOKUP = ToolDefinition("lookup", "look something up", "{}")
_WRITE = ToolDefinition("write", "write something (needs approval)", "{}")
#: The tools every model step offers: call 1 of a ToolStep uses ``write`` when approvals
#: are modelled (the reference's "call 1 needs approval").
TOOLS: tuple[ToolSpec, ...] = (
    ToolSpec(ref="lookup", name="lookup", definition_digest=digest_tool_definition(_LOOKUP)),
    ToolSpec(ref="write", name="write", definition_digest=digest_tool_definition(_WRITE),
             policy=ResponsePolicy.APPROVAL_REQUIRED),
)
REQUEST = ModelRequest(MODEL, (_LOOKUP, _WRITE), '{"messages":[]}')
_REQUEST_DIGEST = digest_model_request(REQUEST)


@functools.cache
def agent_input(input_id: str) -> AgentInput:
    """The input ``input_id`` (its body is its own id as text)."""
    return AgentInput.text(input_id, input_id)


@functools.cache
def prepare(run_id: str, base: int, pending: tuple[str, ...]) -> Built:
    """``PrepareModelRequest`` at position *base*, taking the *pending* input ids."""
    cid = derive_prepare_command_id(run_id, base)
    return cid, C.PrepareModelRequest(
        step_id=derive_model_step_id(run_id, cid), model=MODEL, request=REQUEST,
        request_digest=_REQUEST_DIGEST, input_ids=pending, tools=TOOLS)


@functools.cache
def withdraw(run_id: str, step_id: str) -> Built:
    return derive_withdraw_command_id(run_id, step_id), C.WithdrawPreparedStep(step_id)


@functools.cache
def start_model(run_id: str, step_id: str, rejects: int) -> Built:
    """``StartModelExecution`` under ``derive_effect_id(run, step, "", rejects)`` (INV-7)."""
    effect = derive_effect_id(run_id, step_id, "", rejects)
    return derive_start_command_id(effect), C.StartModelExecution(step_id, effect)


@functools.cache
def start_tool(run_id: str, step_id: str, call_id: str, seq: int = 0) -> Built:
    """``StartToolCall`` under ``derive_effect_id(run, step, call, seq)`` (seq 0: INV-6)."""
    effect = derive_effect_id(run_id, step_id, call_id, seq)
    return derive_start_command_id(effect), C.StartToolCall(
        step_id=step_id, call_id=call_id, effect=effect)


def _tool_of(index: int, approvals: bool) -> ToolSpec:
    return TOOLS[1] if approvals and index == 1 else TOOLS[0]


@functools.cache
def model_result(step_id: str, effect: str, calls: int, approvals: bool) -> Built:
    """``SubmitModelResult``: *calls* tool calls (bound as the runtime binds them), or a
    text-only answer for ``calls == 0``."""
    tool_calls = tuple(
        ModelToolCall(f"provider-{i}", _tool_of(i, approvals).name,
                      freeze_tool_arguments(f'{{"i": {i}}}'))
        for i in range(calls))
    result = ModelResult(content="" if calls else "done", tool_calls=tool_calls,
                         finish_reason="tool_calls" if calls else "stop")
    bindings = tuple(
        ToolCallBinding(call_id=derive_call_id(step_id, i), provider_call_id=tc.id,
                        tool_ref=spec.ref, definition_digest=spec.definition_digest,
                        arguments=tc.arguments, policy=spec.policy)
        for i, tc in enumerate(tool_calls)
        for spec in (_tool_of(i, approvals),))
    return derive_settlement_command_id(effect), C.SubmitModelResult(
        step_id=step_id, effect=effect, result=result, calls=bindings)


@functools.cache
def reject_model_result(step_id: str, effect: str, retry: bool) -> Built:
    """``RejectModelResult`` of a malformed answer (RETRY or FAIL_RUN)."""
    disposition = ModelRejectDisposition.RETRY if retry else ModelRejectDisposition.FAIL_RUN
    return derive_settlement_command_id(effect), C.RejectModelResult(
        step_id=step_id, effect=effect,
        failure=Failure(FailureClass.MALFORMED_MODEL_RESULT, "malformed result"),
        disposition=disposition)


@functools.cache
def model_failure(step_id: str, effect: str) -> Built:
    return derive_settlement_command_id(effect), C.SubmitModelFailure(
        step_id=step_id, effect=effect, failure=Failure(FailureClass.PROVIDER_FAILURE, "down"))


@functools.cache
def recover_model(step_id: str, effect: str) -> Built:
    """``RecoverModelExecution`` under the recovery id (compensation of a model dispatch)."""
    return derive_recovery_command_id(effect), C.RecoverModelExecution(step_id, effect)


@functools.cache
def tool_result(step_id: str, call_id: str, effect: str) -> Built:
    return derive_settlement_command_id(effect), C.SubmitToolResult(
        step_id=step_id, call_id=call_id, effect=effect, result=ToolResult('{"ok":true}'))


@functools.cache
def tool_failure(step_id: str, call_id: str, effect: str, unknown: bool) -> Built:
    """A KNOWN (``execution_failed``) or UNKNOWN (``effect_unknown``) tool failure under
    the settlement id."""
    failure = (Failure(FailureClass.EFFECT_UNKNOWN, "tool returned no outcome") if unknown
               else Failure(FailureClass.EXECUTION_FAILED, "tool failed"))
    outcome = ToolFailureOutcome.UNKNOWN if unknown else ToolFailureOutcome.KNOWN
    return derive_settlement_command_id(effect), C.SubmitToolFailure(
        step_id=step_id, call_id=call_id, effect=effect, failure=failure, outcome=outcome)


@functools.cache
def accept_input(run_id: str, input_id: str) -> Built:
    return (derive_input_command_id(run_id, input_id),
            C.AcceptInput((agent_input(input_id),)))


@functools.cache
def approve(run_id: str, step_id: str, call_id: str, response_id: str) -> Built:
    return derive_response_command_id(run_id, step_id, call_id, response_id), C.ApproveToolCall(
        step_id=step_id, call_id=call_id, response_id=response_id,
        response_digest=decision_digest(ResponseKind.APPROVAL, "approved", ""))


@functools.cache
def reject(run_id: str, step_id: str, call_id: str, response_id: str) -> Built:
    return derive_response_command_id(run_id, step_id, call_id, response_id), C.RejectToolCall(
        step_id=step_id, call_id=call_id, response_id=response_id,
        response_digest=decision_digest(ResponseKind.APPROVAL, "rejected", ""))


def cancel(command_id: str) -> Built:
    return command_id, C.CancelRun("cancelled")
