"""``decide``: turn a command into the complete ordered group of facts (spec §2.8).

``decide`` refuses the *caller*: ``RunTerminalError`` first on a terminal state, then
``CommandConflictError`` for identity problems it can see and ``PreconditionError`` for
"this state does not allow it". The legal moves are the table ``DECIDE_TABLE`` keyed by
``(command type, Phase)``: a missing row *is* the refusal (style §1.1).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from typing import Any

import attrs

from . import commands as C
from . import facts as F
from ._evolve import KIND_FOR_POLICY, valid_scheduling
from .digests import (
    decision_digest,
    digest_model_request,
    digest_model_result,
    digest_tool_definition,
    digest_tool_output,
    digest_tool_response_payload,
)
from .errors import CommandConflictError, PreconditionError, RunTerminalError
from .ids import derive_call_id, derive_effect_id, derive_response_id, derive_tool_step_id
from .state import MachineState, ModelStep, Open, ToolCallState, ToolStep
from .values import (
    Failure,
    FailureClass,
    ModelRejectDisposition,
    ModelStepStatus,
    ResponseKind,
    ResponseRequest,
    RunCompletedEnd,
    RunFailedEnd,
    RunFailure,
    RunReason,
    RunStatus,
    RunStoppedEnd,
    ToolCallBinding,
    ToolCallStatus,
    ToolFailureOutcome,
)

__all__ = ["decide", "Phase", "phase_of", "DECIDE_TABLE", "CANCEL_MESSAGE"]

CANCEL_MESSAGE = "run cancelled"
CANCEL_UNKNOWN_MESSAGE = "run cancelled while the effect was executing"


class Phase(enum.Enum):
    """Where a command meets the state: the column of the decide table."""

    ANY = "any"  # commands that do not name a step (AcceptInput, CancelRun)
    OPEN = "open"
    MODEL_PREPARED = "model_prepared"
    MODEL_EXECUTING = "model_executing"
    OTHER_STEP = "other_step"  # current is not the step the command names
    CALL_PENDING = "call_pending"
    CALL_EXECUTING = "call_executing"
    CALL_WAITING = "call_waiting"
    CALL_FINISHED = "call_finished"
    NO_CALL = "no_call"  # the named ToolStep is current but has no such call


_MODEL_COMMANDS = (
    C.PrepareModelRequest, C.WithdrawPreparedStep, C.StartModelExecution,
    C.RecoverModelExecution, C.SubmitModelResult, C.SubmitModelFailure, C.RejectModelResult,
)
_CALL_PHASE = {
    ToolCallStatus.PENDING: Phase.CALL_PENDING,
    ToolCallStatus.EXECUTING: Phase.CALL_EXECUTING,
    ToolCallStatus.WAITING: Phase.CALL_WAITING,
    ToolCallStatus.COMPLETED: Phase.CALL_FINISHED,
    ToolCallStatus.FAILED: Phase.CALL_FINISHED,
}


def phase_of(state: MachineState, command: C.Command) -> Phase:
    """The decide-table column for *command* on the (non-terminal) *state*."""
    cur = state.current
    if isinstance(command, C.AcceptInput | C.CancelRun):
        return Phase.ANY
    if isinstance(command, C.PrepareModelRequest):
        return Phase.OPEN if isinstance(cur, Open) else Phase.OTHER_STEP
    if isinstance(command, _MODEL_COMMANDS):
        if isinstance(cur, ModelStep) and cur.id == command.step_id:
            if cur.status is ModelStepStatus.PREPARED:
                return Phase.MODEL_PREPARED
            return Phase.MODEL_EXECUTING
        return Phase.OPEN if isinstance(cur, Open) else Phase.OTHER_STEP
    # call commands
    if not isinstance(cur, ToolStep) or cur.id != command.step_id:
        return Phase.OPEN if isinstance(cur, Open) else Phase.OTHER_STEP
    call = cur.call(command.call_id)
    if call is None:
        return Phase.NO_CALL
    return _CALL_PHASE[call.status]


def _refuse(command: Any, reason: str, state: MachineState) -> PreconditionError:
    return PreconditionError(
        f"{type(command).__name__}: {reason}", command=command, reason=reason,
        phase=phase_of(state, command) if state.current is not None else None,
    )


def _conflict(command: Any, reason: str) -> CommandConflictError:
    return CommandConflictError(f"{type(command).__name__}: {reason}", command=command,
                                reason=reason)


def _step(state: MachineState) -> ModelStep:
    assert isinstance(state.current, ModelStep)
    return state.current


def _call(state: MachineState, command: Any) -> ToolCallState:
    assert isinstance(state.current, ToolStep)
    call = state.current.call(command.call_id)
    assert call is not None
    return call


# -- handlers (phase already checked by the table) ------------------------------------


def _accept_input(state: MachineState, c: C.AcceptInput) -> tuple[F.Fact, ...]:
    if not c.inputs:
        raise _refuse(c, "empty input batch", state)
    if any(not i.id or not i.digest for i in c.inputs):
        raise _refuse(c, "every input needs an id and a digest", state)
    pending = {i.id for i in state.pending_inputs}
    seen: set[str] = set()
    for i in c.inputs:
        if i.id in pending or i.id in seen:
            raise _conflict(c, f"input id {i.id!r} already queued")
        seen.add(i.id)
    return tuple(F.InputAccepted(i) for i in c.inputs)


def _prepare(state: MachineState, c: C.PrepareModelRequest) -> tuple[F.Fact, ...]:
    if not c.step_id or not c.model:
        raise _refuse(c, "step_id and model are required", state)
    if c.request.model != c.model:
        raise _refuse(c, "request.model differs from model", state)
    if tuple(c.input_ids) != tuple(i.id for i in state.pending_inputs):
        raise _refuse(c, "input_ids must equal every pending input, in order", state)
    if len(c.tools) != len(c.request.tools):
        raise _refuse(c, "one ToolSpec per request tool", state)
    for spec, definition in zip(c.tools, c.request.tools):
        if spec.name != definition.name:
            raise _refuse(c, f"tool spec {spec.name!r} does not name its definition", state)
        if spec.definition_digest != digest_tool_definition(definition):
            raise _refuse(c, f"definition digest of {spec.name!r} does not match", state)
    if c.request_digest != digest_model_request(c.request):
        raise _refuse(c, "request_digest does not match the request", state)
    return (
        F.ModelStepPrepared(
            step_id=c.step_id, model=c.model, request_digest=c.request_digest,
            input_ids=c.input_ids, tools=c.tools,
        ),
    )


def _withdraw(state: MachineState, c: C.WithdrawPreparedStep) -> tuple[F.Fact, ...]:
    if not state.pending_inputs:
        raise _refuse(c, "withdraw needs pending inputs", state)
    return (F.ModelStepWithdrawn(c.step_id),)


def _start_model(state: MachineState, c: C.StartModelExecution) -> tuple[F.Fact, ...]:
    step = _step(state)
    expected = derive_effect_id(state.run_id, step.id, "", step.rejects)
    if not c.effect or c.effect != expected:
        raise _refuse(c, "effect is not derive_effect_id(run, step, '', rejects)", state)
    return (F.ModelStepStarted(c.step_id, c.effect),)


def _running_model_effect(state: MachineState, c: Any) -> ModelStep:
    step = _step(state)
    if not c.effect or c.effect != step.effect:
        raise _refuse(c, "effect is not the running one", state)
    return step


def _recover_model(state: MachineState, c: C.RecoverModelExecution) -> tuple[F.Fact, ...]:
    _running_model_effect(state, c)
    return (F.ModelStepRecovered(c.step_id, c.effect),)


def _bindings(state: MachineState, step: ModelStep, c: C.SubmitModelResult) -> tuple[
    ToolCallBinding, ...
]:
    tool_step_id = derive_tool_step_id(step.id)
    calls = c.result.tool_calls
    if len(c.calls) != len(calls):
        raise _refuse(c, "exactly one binding per model tool call", state)
    out = []
    for i, (b, tc) in enumerate(zip(c.calls, calls)):
        if b.call_id != derive_call_id(step.id, i):
            raise _refuse(c, f"binding {i}: call id is not derived from its index", state)
        if b.provider_call_id != tc.id:
            raise _refuse(c, f"binding {i}: provider call id differs", state)
        if b.arguments != tc.arguments:
            raise _refuse(c, f"binding {i}: arguments differ from the model's", state)
        spec = next((s for s in step.tools if s.name == tc.name), None)
        if spec is not None:
            if (b.tool_ref, b.definition_digest, b.policy) != (
                spec.ref, spec.definition_digest, spec.policy
            ):
                raise _refuse(c, f"binding {i}: does not carry the offered spec", state)
        elif (b.tool_ref, b.definition_digest, b.policy.value) != (tc.name, "", "direct_execution"):
            raise _refuse(c, f"binding {i}: unknown tool must be direct, by name", state)
        kind = KIND_FOR_POLICY.get(b.policy)
        response = None
        if kind is not None:
            response = ResponseRequest(
                run_id=state.run_id, step_id=tool_step_id, call_id=b.call_id,
                id=derive_response_id(state.run_id, tool_step_id, b.call_id, kind.value),
                kind=kind, payload=b.arguments,
            )
        if b.response is not None and b.response != response:
            raise _refuse(c, f"binding {i}: response request is not the derived one", state)
        out.append(b if b.response == response else _with_response(b, response))
    return tuple(out)


def _with_response(b: ToolCallBinding, response: ResponseRequest | None) -> ToolCallBinding:
    return attrs.evolve(b, response=response)


def _submit_model_result(state: MachineState, c: C.SubmitModelResult) -> tuple[F.Fact, ...]:
    step = _running_model_effect(state, c)
    completed = F.ModelStepCompleted(
        step_id=c.step_id, effect=c.effect, usage=c.result.usage,
        finish_reason=c.result.finish_reason, result_digest=digest_model_result(c.result),
    )
    if not c.result.tool_calls:
        if c.calls:
            raise _refuse(c, "bindings for a result without tool calls", state)
        if state.pending_inputs:
            return (completed,)
        return (completed, F.RunEnded(RunCompletedEnd()))
    if not valid_scheduling(c.scheduling):
        raise _refuse(c, f"invalid scheduling {c.scheduling!r}", state)
    bindings = _bindings(state, step, c)
    return (
        completed,
        F.ToolStepOpened(
            step_id=derive_tool_step_id(step.id), source=step.id, calls=bindings,
            scheduling=c.scheduling,
        ),
    )


def _submit_model_failure(state: MachineState, c: C.SubmitModelFailure) -> tuple[F.Fact, ...]:
    _running_model_effect(state, c)
    if not c.failure.class_:
        raise _refuse(c, "failure class is required", state)
    reason = (
        RunReason.EFFECT_UNKNOWN
        if c.failure.class_ == FailureClass.EFFECT_UNKNOWN
        else RunReason.PROVIDER_FAILURE
    )
    return (
        F.ModelStepFailed(step_id=c.step_id, effect=c.effect, failure=c.failure),
        F.RunEnded(RunFailedEnd(reason, RunFailure(c.failure.class_, c.failure.message))),
    )


def _reject_model_result(state: MachineState, c: C.RejectModelResult) -> tuple[F.Fact, ...]:
    _running_model_effect(state, c)
    if not isinstance(c.disposition, ModelRejectDisposition):
        raise _refuse(c, "disposition must be RETRY or FAIL_RUN", state)
    rejected = F.ModelStepRejected(
        step_id=c.step_id, effect=c.effect, usage=c.usage, failure=c.failure
    )
    if c.disposition is ModelRejectDisposition.RETRY:
        return (rejected,)
    failure = RunFailure(FailureClass.MALFORMED_MODEL_RESULT, c.failure.message)
    return (rejected, F.RunEnded(RunFailedEnd(RunReason.MALFORMED_MODEL_RESULT, failure)))


def _start_tool_call(state: MachineState, c: C.StartToolCall) -> tuple[F.Fact, ...]:
    if c.effect != derive_effect_id(state.run_id, c.step_id, c.call_id, 0):
        raise _refuse(c, "effect is not derive_effect_id(run, step, call, 0)", state)
    return (F.ToolCallStarted(step_id=c.step_id, call_id=c.call_id, effect=c.effect),)


def _running_call(state: MachineState, c: Any) -> ToolCallState:
    call = _call(state, c)
    if not c.effect or c.effect != call.effect:
        raise _refuse(c, "effect is not the running one", state)
    return call


def _submit_tool_result(state: MachineState, c: C.SubmitToolResult) -> tuple[F.Fact, ...]:
    _running_call(state, c)
    if c.result.output in ("", "null", '""'):
        raise _refuse(c, "tool output must not be empty or null", state)
    return (
        F.ToolCallCompleted(
            step_id=c.step_id, call_id=c.call_id, effect=c.effect,
            output_digest=digest_tool_output(c.result.output),
        ),
    )


def _submit_tool_failure(state: MachineState, c: C.SubmitToolFailure) -> tuple[F.Fact, ...]:
    _running_call(state, c)
    failure = c.failure
    if c.outcome is ToolFailureOutcome.KNOWN:
        if not failure.class_ or failure.class_ == FailureClass.EFFECT_UNKNOWN:
            raise _refuse(c, "a KNOWN failure needs a class other than effect_unknown", state)
    elif c.outcome is ToolFailureOutcome.UNKNOWN:
        if failure.class_ not in ("", FailureClass.EFFECT_UNKNOWN):
            raise _refuse(c, "an UNKNOWN failure has class effect_unknown", state)
        failure = Failure(FailureClass.EFFECT_UNKNOWN, failure.message)
    else:
        raise _refuse(c, "outcome must be KNOWN or UNKNOWN", state)
    return (
        F.ToolCallFailed(
            step_id=c.step_id, call_id=c.call_id, effect=c.effect, failure=failure,
            outcome=c.outcome,
        ),
    )


def _decline_tool_call(state: MachineState, c: C.DeclineToolCall) -> tuple[F.Fact, ...]:
    if not c.failure.class_ or c.failure.class_ == FailureClass.EFFECT_UNKNOWN:
        raise _refuse(c, "a decline needs a class other than effect_unknown", state)
    return (
        F.ToolCallFailed(
            step_id=c.step_id, call_id=c.call_id, effect="", failure=c.failure,
            outcome=ToolFailureOutcome.KNOWN,
        ),
    )


def _waiting_call(state: MachineState, c: Any, kind: ResponseKind | None) -> ToolCallState:
    call = _call(state, c)
    assert call.waiting is not None
    if kind is not None and call.waiting.kind is not kind:
        raise _refuse(c, f"call does not wait for {kind.value}", state)
    if c.response_id != call.waiting.id:
        raise _refuse(c, "response id does not match the waiting request", state)
    return call


def _approve_tool_call(state: MachineState, c: C.ApproveToolCall) -> tuple[F.Fact, ...]:
    _waiting_call(state, c, ResponseKind.APPROVAL)
    if c.response_digest != decision_digest(ResponseKind.APPROVAL, "approved", ""):
        raise _refuse(c, "response digest is not the approval decision", state)
    return (
        F.ToolCallApproved(
            step_id=c.step_id, call_id=c.call_id, response_id=c.response_id,
            response_digest=c.response_digest,
        ),
    )


def _reject_tool_call(state: MachineState, c: C.RejectToolCall) -> tuple[F.Fact, ...]:
    call = _waiting_call(state, c, None)
    assert call.waiting is not None
    kind = call.waiting.kind
    if c.response_digest != decision_digest(kind, "rejected", c.reason):
        raise _refuse(c, "response digest is not the rejection decision", state)
    cls = (
        FailureClass.PERMISSION_DENIED
        if kind is ResponseKind.APPROVAL
        else FailureClass.RESPONSE_REJECTED
    )
    return (
        F.ToolCallFailed(
            step_id=c.step_id, call_id=c.call_id, effect="", failure=Failure(cls, c.reason),
            outcome=ToolFailureOutcome.KNOWN,
        ),
    )


def _submit_tool_response(state: MachineState, c: C.SubmitToolResponse) -> tuple[F.Fact, ...]:
    _waiting_call(state, c, ResponseKind.EXTERNAL_RESPONSE)
    if c.response_digest != digest_tool_response_payload(c.payload):
        raise _refuse(c, "response digest does not match the payload", state)
    return (
        F.ToolCallAnswered(
            step_id=c.step_id, call_id=c.call_id, response_id=c.response_id,
            response_digest=c.response_digest,
        ),
    )


def _cancel_run(state: MachineState, c: C.CancelRun) -> tuple[F.Fact, ...]:
    if c.reason not in ("", "cancelled"):
        raise _refuse(c, "cancel reason must be '' or 'cancelled'", state)
    out: list[F.Fact] = []
    uncertain_calls: list[str] = []
    uncertain_model = ""
    cur = state.current
    if isinstance(cur, ToolStep):
        for call in cur.calls:
            if call.status in (ToolCallStatus.PENDING, ToolCallStatus.WAITING):
                out.append(F.ToolCallFailed(
                    step_id=cur.id, call_id=call.call_id, effect="",
                    failure=Failure(FailureClass.CANCELLED, CANCEL_MESSAGE),
                    outcome=ToolFailureOutcome.KNOWN,
                ))
            elif call.status is ToolCallStatus.EXECUTING:
                out.append(F.ToolCallFailed(
                    step_id=cur.id, call_id=call.call_id, effect=call.effect,
                    failure=Failure(FailureClass.EFFECT_UNKNOWN, CANCEL_UNKNOWN_MESSAGE),
                    outcome=ToolFailureOutcome.UNKNOWN,
                ))
                uncertain_calls.append(call.call_id)
    elif isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING:
        out.append(F.ModelStepFailed(
            step_id=cur.id, effect=cur.effect,
            failure=Failure(FailureClass.EFFECT_UNKNOWN, CANCEL_UNKNOWN_MESSAGE),
        ))
        uncertain_model = cur.id
    out.append(F.RunEnded(RunStoppedEnd(RunReason.CANCELLED, tuple(uncertain_calls),
                                        uncertain_model)))
    return tuple(out)


Handler = Callable[[MachineState, Any], tuple[F.Fact, ...]]

#: Every legal (command type, phase) pair. A pair missing here is refused.
DECIDE_TABLE: dict[tuple[type[Any], Phase], Handler] = {
    (C.AcceptInput, Phase.ANY): _accept_input,
    (C.CancelRun, Phase.ANY): _cancel_run,
    (C.PrepareModelRequest, Phase.OPEN): _prepare,
    (C.WithdrawPreparedStep, Phase.MODEL_PREPARED): _withdraw,
    (C.StartModelExecution, Phase.MODEL_PREPARED): _start_model,
    (C.RecoverModelExecution, Phase.MODEL_EXECUTING): _recover_model,
    (C.SubmitModelResult, Phase.MODEL_EXECUTING): _submit_model_result,
    (C.SubmitModelFailure, Phase.MODEL_EXECUTING): _submit_model_failure,
    (C.RejectModelResult, Phase.MODEL_EXECUTING): _reject_model_result,
    (C.StartToolCall, Phase.CALL_PENDING): _start_tool_call,
    (C.DeclineToolCall, Phase.CALL_PENDING): _decline_tool_call,
    (C.SubmitToolResult, Phase.CALL_EXECUTING): _submit_tool_result,
    (C.SubmitToolFailure, Phase.CALL_EXECUTING): _submit_tool_failure,
    (C.ApproveToolCall, Phase.CALL_WAITING): _approve_tool_call,
    (C.RejectToolCall, Phase.CALL_WAITING): _reject_tool_call,
    (C.SubmitToolResponse, Phase.CALL_WAITING): _submit_tool_response,
}


def decide(state: MachineState, command: C.Command) -> tuple[F.Fact, ...]:
    """Return the complete ordered group of facts *command* produces on *state*.

    Pure (RUN-MCH-2, RUN-MCH-3). A ``RunEnded`` in the group is always last, after the
    facts that settle every EXECUTING effect.

    Raises:
        RunTerminalError: the Run has ended (checked first; attribute ``status``).
        CommandConflictError: an identity problem visible here (a duplicate input id).
        PreconditionError: this state does not allow the command (``reason``, ``phase``).
    On refusal nothing was produced and *state* is unchanged.
    """
    if state.status is not RunStatus.ACTIVE:
        raise RunTerminalError(
            f"run {state.run_id} is {state.status.value}", command=command,
            status=state.status, run_id=state.run_id,
        )
    phase = phase_of(state, command)
    handler = DECIDE_TABLE.get((type(command), phase))
    if handler is None:
        raise _refuse(command, f"not allowed in phase {phase.value}", state)
    return handler(state, command)
