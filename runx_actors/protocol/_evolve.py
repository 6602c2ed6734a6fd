"""``evolve``: fold one fact onto a state, guarding it first (spec §2.6, §2.7).

``evolve`` refuses a *fact* (``EvolveError``); it never consults a command. The table
``_EVOLVE`` maps each fact type to its handler; the step closing rule is applied once,
after every call fact (style §1.2).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import attrs

from . import facts as F
from .digests import decision_digest
from .errors import EvolveError, ValidationError
from .ids import derive_response_id, derive_tool_step_id
from .state import (
    OPEN,
    TERMINAL_CALL_STATUSES,
    MachineState,
    ModelStep,
    Open,
    ToolCallState,
    ToolStep,
)
from .values import (
    SCHEDULING_MODES,
    AgentInput,
    FailureClass,
    ModelStepStatus,
    ResponseKind,
    ResponsePolicy,
    RunCompletedEnd,
    RunFailedEnd,
    RunReason,
    RunResult,
    RunStatus,
    RunStoppedEnd,
    ToolCallFailure,
    ToolCallResult,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolScheduling,
)

__all__ = ["evolve", "evolve_all", "valid_run_end", "valid_scheduling", "KIND_FOR_POLICY"]

KIND_FOR_POLICY = {
    ResponsePolicy.APPROVAL_REQUIRED: ResponseKind.APPROVAL,
    ResponsePolicy.EXTERNAL_RESPONSE: ResponseKind.EXTERNAL_RESPONSE,
}


def _refuse(fact: Any, reason: str) -> EvolveError:
    return EvolveError(f"{type(fact).__name__}: {reason}", fact=fact, reason=reason)


def valid_scheduling(s: ToolScheduling) -> bool:
    """True iff mode ∈ {"", parallel, sequential} and max_parallel is an int ≥ 0."""
    return (
        isinstance(s, ToolScheduling)
        and s.mode in SCHEDULING_MODES
        and type(s.max_parallel) is int
        and s.max_parallel >= 0
    )


def valid_run_end(end: object) -> bool:
    """True iff *end* is a well-formed RunEnd variant (§2.1)."""
    if isinstance(end, RunCompletedEnd):
        return True
    if isinstance(end, RunStoppedEnd):
        return isinstance(end.reason, RunReason) and end.reason is not RunReason.NONE
    if isinstance(end, RunFailedEnd):
        return (
            isinstance(end.reason, RunReason)
            and end.reason is not RunReason.NONE
            and bool(end.failure.class_)
        )
    return False


# -- helpers ---------------------------------------------------------------------------


def _model_step(state: MachineState, fact: Any, *, executing: bool) -> ModelStep:
    cur = state.current
    if not isinstance(cur, ModelStep) or cur.id != fact.step_id:
        raise _refuse(fact, "current is not that model step")
    want = ModelStepStatus.EXECUTING if executing else ModelStepStatus.PREPARED
    if cur.status is not want:
        raise _refuse(fact, f"model step is {cur.status.value}, not {want.value}")
    return cur


def _settling_model_step(state: MachineState, fact: Any) -> ModelStep:
    step = _model_step(state, fact, executing=True)
    if fact.effect and fact.effect != step.effect:
        raise _refuse(fact, "effect is not the running one")
    return step


def _tool_call(state: MachineState, fact: Any) -> tuple[ToolStep, int, ToolCallState]:
    cur = state.current
    if not isinstance(cur, ToolStep) or cur.id != fact.step_id:
        raise _refuse(fact, "current is not that tool step")
    for i, c in enumerate(cur.calls):
        if c.call_id == fact.call_id:
            return cur, i, c
    raise _refuse(fact, "no such call")


def _with_call(
    state: MachineState, step: ToolStep, index: int, call: ToolCallState
) -> MachineState:
    calls = (*step.calls[:index], call, *step.calls[index + 1 :])
    new_step = attrs.evolve(step, calls=calls)
    # Step closing rule (§2.5, INV-18): written once, applied after every call fact.
    if all(c.status in TERMINAL_CALL_STATUSES for c in calls):
        return attrs.evolve(state, current=OPEN, last_tool_step=new_step)
    return attrs.evolve(state, current=new_step)


# -- handlers ---------------------------------------------------------------------------


def _run_created(state: MachineState | None, fact: F.RunCreated) -> MachineState:
    if state is not None:
        raise _refuse(fact, "RunCreated only on the zero state")
    if not fact.run_id:
        raise _refuse(fact, "empty run id")
    return MachineState(run_id=fact.run_id, status=RunStatus.ACTIVE, current=OPEN)


def _model_step_prepared(state: MachineState, fact: F.ModelStepPrepared) -> MachineState:
    if not isinstance(state.current, Open):
        raise _refuse(fact, "current is not Open")
    if not (fact.step_id and fact.model and fact.request_digest):
        raise _refuse(fact, "step_id, model and request_digest are required")
    if tuple(fact.input_ids) != tuple(i.id for i in state.pending_inputs):
        raise _refuse(fact, "input_ids must equal the pending inputs, in order")
    step = ModelStep(
        id=fact.step_id,
        model=fact.model,
        request_digest=fact.request_digest,
        tools=fact.tools,
        status=ModelStepStatus.PREPARED,
    )
    return attrs.evolve(
        state, current=step, pending_inputs=(), model_steps=state.model_steps + 1
    )


def _model_step_withdrawn(state: MachineState, fact: F.ModelStepWithdrawn) -> MachineState:
    _model_step(state, fact, executing=False)
    if not state.pending_inputs:
        raise _refuse(fact, "withdraw needs pending inputs")
    return attrs.evolve(state, current=OPEN, model_steps=state.model_steps - 1)


def _model_step_started(state: MachineState, fact: F.ModelStepStarted) -> MachineState:
    step = _model_step(state, fact, executing=False)
    if not fact.effect:
        raise _refuse(fact, "empty effect")
    new = attrs.evolve(step, status=ModelStepStatus.EXECUTING, effect=fact.effect)
    return attrs.evolve(state, current=new)


def _model_step_recovered(state: MachineState, fact: F.ModelStepRecovered) -> MachineState:
    _settling_model_step(state, fact)
    return attrs.evolve(state, current=OPEN, model_steps=state.model_steps - 1)


def _model_step_rejected(state: MachineState, fact: F.ModelStepRejected) -> MachineState:
    step = _settling_model_step(state, fact)
    new = attrs.evolve(step, status=ModelStepStatus.PREPARED, rejects=step.rejects + 1)
    return attrs.evolve(state, current=new, usage=state.usage + fact.usage)


def _model_step_failed(state: MachineState, fact: F.ModelStepFailed) -> MachineState:
    _settling_model_step(state, fact)
    if not fact.effect or not fact.failure.class_:
        raise _refuse(fact, "effect and failure class are required")
    return attrs.evolve(state, current=OPEN)


def _model_step_completed(state: MachineState, fact: F.ModelStepCompleted) -> MachineState:
    _settling_model_step(state, fact)
    if not fact.result_digest:
        raise _refuse(fact, "result_digest is required")
    return attrs.evolve(state, current=OPEN, usage=state.usage + fact.usage)


def _tool_step_opened(state: MachineState, fact: F.ToolStepOpened) -> MachineState:
    if not isinstance(state.current, Open):
        raise _refuse(fact, "current is not Open")
    if not fact.calls:
        raise _refuse(fact, "a ToolStep needs at least one call")
    if not fact.step_id or not fact.source:
        raise _refuse(fact, "step_id and source are required")
    if not valid_scheduling(fact.scheduling):
        raise _refuse(fact, "invalid scheduling")
    if fact.step_id != derive_tool_step_id(fact.source):
        raise _refuse(fact, "step_id is not derive_tool_step_id(source)")
    seen: set[str] = set()
    calls = []
    for b in fact.calls:
        if not b.call_id or b.call_id in seen:
            raise _refuse(fact, "call ids must be non-empty and unique")
        seen.add(b.call_id)
        if not b.tool_ref or not b.arguments:
            raise _refuse(fact, "tool_ref and arguments are required")
        kind = KIND_FOR_POLICY.get(b.policy)
        if kind is None:
            if b.response is not None:
                raise _refuse(fact, "a response request on a direct call")
            status = ToolCallStatus.PENDING
        else:
            r = b.response
            if r is None:
                raise _refuse(fact, "a waiting-policy call needs a response request")
            if (
                r.run_id != state.run_id
                or r.step_id != fact.step_id
                or r.call_id != b.call_id
                or r.kind is not kind
                or r.id != derive_response_id(state.run_id, fact.step_id, b.call_id, kind.value)
                or r.payload != b.arguments
            ):
                raise _refuse(fact, "response request does not match its call")
            status = ToolCallStatus.WAITING
        calls.append(
            ToolCallState(
                call_id=b.call_id,
                provider_call_id=b.provider_call_id,
                tool_ref=b.tool_ref,
                definition_digest=b.definition_digest,
                arguments=b.arguments,
                policy=b.policy,
                replay=b.replay,
                placement=b.placement,
                status=status,
                waiting=b.response,
            )
        )
    step = ToolStep(id=fact.step_id, source=fact.source, calls=calls, scheduling=fact.scheduling)
    return attrs.evolve(state, current=step)


def _tool_call_started(state: MachineState, fact: F.ToolCallStarted) -> MachineState:
    step, i, call = _tool_call(state, fact)
    if not fact.effect:
        raise _refuse(fact, "empty effect")
    if call.status is not ToolCallStatus.PENDING:
        raise _refuse(fact, f"call is {call.status.value}, not pending")
    return _with_call(
        state, step, i, attrs.evolve(call, status=ToolCallStatus.EXECUTING, effect=fact.effect)
    )


def _waiting(fact: Any, call: ToolCallState, kind: ResponseKind | None) -> None:
    if call.status is not ToolCallStatus.WAITING or call.waiting is None:
        raise _refuse(fact, "call is not waiting")
    if kind is not None and call.waiting.kind is not kind:
        raise _refuse(fact, f"call is not waiting for {kind.value}")
    if call.waiting.id != fact.response_id:
        raise _refuse(fact, "response id does not match")


def _tool_call_approved(state: MachineState, fact: F.ToolCallApproved) -> MachineState:
    step, i, call = _tool_call(state, fact)
    _waiting(fact, call, ResponseKind.APPROVAL)
    if fact.response_digest != decision_digest(ResponseKind.APPROVAL, "approved", ""):
        raise _refuse(fact, "response digest is not the approval decision")
    return _with_call(
        state, step, i, attrs.evolve(call, status=ToolCallStatus.PENDING, waiting=None)
    )


def _tool_call_completed(state: MachineState, fact: F.ToolCallCompleted) -> MachineState:
    step, i, call = _tool_call(state, fact)
    if not fact.output_digest:
        raise _refuse(fact, "output_digest is required")
    if call.status is not ToolCallStatus.EXECUTING:
        raise _refuse(fact, f"call is {call.status.value}, not executing")
    if fact.effect != call.effect:
        raise _refuse(fact, "effect is not the running one")
    new = attrs.evolve(
        call, status=ToolCallStatus.COMPLETED, result=ToolCallResult(fact.output_digest)
    )
    return _with_call(state, step, i, new)


def _tool_call_answered(state: MachineState, fact: F.ToolCallAnswered) -> MachineState:
    step, i, call = _tool_call(state, fact)
    _waiting(fact, call, ResponseKind.EXTERNAL_RESPONSE)
    if not fact.response_digest:
        raise _refuse(fact, "response_digest is required")
    new = attrs.evolve(
        call,
        status=ToolCallStatus.COMPLETED,
        result=ToolCallResult(fact.response_digest),
        waiting=None,
    )
    return _with_call(state, step, i, new)


def _tool_call_failed(state: MachineState, fact: F.ToolCallFailed) -> MachineState:
    step, i, call = _tool_call(state, fact)
    if call.status in TERMINAL_CALL_STATUSES:
        raise _refuse(fact, f"call is already {call.status.value}")
    if fact.effect != call.effect:
        raise _refuse(fact, "effect is not the call's effect")
    unknown = fact.outcome is ToolFailureOutcome.UNKNOWN
    if unknown and call.status is not ToolCallStatus.EXECUTING:
        raise _refuse(fact, "UNKNOWN only from EXECUTING")
    if not fact.failure.class_:
        raise _refuse(fact, "failure class is required")
    if unknown != (fact.failure.class_ == FailureClass.EFFECT_UNKNOWN):
        raise _refuse(fact, "failure class and outcome disagree")
    new = attrs.evolve(
        call,
        status=ToolCallStatus.FAILED,
        failure=ToolCallFailure(fact.failure, fact.outcome),
        waiting=None,
    )
    return _with_call(state, step, i, new)


def _input_accepted(state: MachineState, fact: F.InputAccepted) -> MachineState:
    return _inputs_accepted(state, (fact,), 0)


def _inputs_accepted(state: MachineState, facts: Sequence[F.InputAccepted],
                     start: int) -> MachineState:
    """Fold the InputAccepted *facts* (a run of them, at *start* in a longer list) in one
    pass: one set of the pending ids, one tuple at the end — linear in pending + new,
    where one ``evolve`` per fact scanned and copied the pending tuple each time
    (quadratic). Refuses the first fact with an empty id or digest or an id already
    pending, exactly as per fact (``index`` = its position in the longer list)."""
    pending = {i.id for i in state.pending_inputs}
    added: list[AgentInput] = []
    for offset, fact in enumerate(facts):
        try:
            if not fact.input.id or not fact.input.digest:
                raise _refuse(fact, "input id and digest are required")
            if fact.input.id in pending:
                raise _refuse(fact, "input already pending")
        except EvolveError as error:
            raise _at(error, start + offset) from error.__cause__
        except (ValidationError, UnicodeEncodeError) as exc:  # as evolve maps them
            raise _at(_refuse(fact, str(exc)), start + offset) from exc
        pending.add(fact.input.id)
        added.append(fact.input)
    return attrs.evolve(state, pending_inputs=(*state.pending_inputs, *added))


def _at(error: EvolveError, index: int) -> EvolveError:
    error.index = index  # type: ignore[attr-defined]
    error.attrs["index"] = index
    return error


def _run_ended(state: MachineState, fact: F.RunEnded) -> MachineState:
    end = fact.end
    if not valid_run_end(end):
        raise _refuse(fact, "invalid end")
    cur = state.current
    if isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING:
        raise _refuse(fact, "the model step is still executing")
    if isinstance(cur, ToolStep) and any(
        c.status is ToolCallStatus.EXECUTING for c in cur.calls
    ):
        raise _refuse(fact, "a tool call is still executing")
    if isinstance(end, RunCompletedEnd):
        result = RunResult(status=RunStatus.COMPLETED, usage=state.usage)
    elif isinstance(end, RunStoppedEnd):
        result = RunResult(
            status=RunStatus.STOPPED,
            reason=end.reason,
            uncertain_calls=end.uncertain_calls,
            uncertain_model=end.uncertain_model,
            usage=state.usage,
        )
    else:
        assert isinstance(end, RunFailedEnd)
        result = RunResult(
            status=RunStatus.FAILED, reason=end.reason, failure=end.failure, usage=state.usage
        )
    return attrs.evolve(state, status=result.status, current=None, result=result)


_EVOLVE: dict[type[Any], Callable[[Any, Any], MachineState]] = {
    F.ModelStepPrepared: _model_step_prepared,
    F.ModelStepWithdrawn: _model_step_withdrawn,
    F.ModelStepStarted: _model_step_started,
    F.ModelStepRecovered: _model_step_recovered,
    F.ModelStepRejected: _model_step_rejected,
    F.ModelStepFailed: _model_step_failed,
    F.ModelStepCompleted: _model_step_completed,
    F.ToolStepOpened: _tool_step_opened,
    F.ToolCallStarted: _tool_call_started,
    F.ToolCallApproved: _tool_call_approved,
    F.ToolCallCompleted: _tool_call_completed,
    F.ToolCallAnswered: _tool_call_answered,
    F.ToolCallFailed: _tool_call_failed,
    F.InputAccepted: _input_accepted,
    F.RunEnded: _run_ended,
}


def evolve_all(state: MachineState | None, facts: Sequence[F.Fact]) -> MachineState | None:
    """Fold *facts* onto *state* in order: the same state and the same refusals as
    ``evolve`` fact by fact, but a run of consecutive ``InputAccepted`` facts is folded
    in one pass (linear, RUN-INP-2), so a Run with n inputs folds in O(n), not O(n²).

    Pure. Returns *state* when *facts* is empty.

    Raises:
        EvolveError: as :func:`evolve`, for the first fact that does not fold; its
            ``index`` attribute is that fact's position in *facts*.
    """
    n = len(facts)
    k = 0
    while k < n:
        fact = facts[k]
        if type(fact) is F.InputAccepted and state is not None and (
                state.status is RunStatus.ACTIVE):  # evolve dispatches on the exact type
            end = k + 1
            while end < n and type(facts[end]) is F.InputAccepted:
                end += 1
            state = _inputs_accepted(state, facts[k:end], k)  # type: ignore[arg-type]
            k = end
            continue
        try:
            state = evolve(state, fact)
        except EvolveError as error:
            raise _at(error, k) from error.__cause__
        k += 1
    return state


def evolve(state: MachineState | None, fact: F.Fact) -> MachineState:
    """Fold *fact* onto *state* (``None`` is the zero state) and return the new state.

    Pure. Guards of §2.7 run first (RUN-MCH-3, RUN-NEW-1): ``RunCreated`` only on the zero
    state, nothing else on it, nothing onto a terminal state.

    Raises:
        EvolveError: the fact violates a guard, or carries an identity that does not
            encode to UTF-8; nothing was produced and *state* is unchanged (immutable).
    """
    if isinstance(fact, F.RunCreated):
        return _run_created(state, fact)
    if state is None:
        raise _refuse(fact, "only RunCreated folds onto the zero state")
    if state.status is not RunStatus.ACTIVE:
        raise _refuse(fact, f"the Run is {state.status.value}")
    handler = _EVOLVE.get(type(fact))
    if handler is None:
        raise _refuse(fact, "not a fact")
    try:
        return handler(state, fact)
    except (ValidationError, UnicodeEncodeError) as exc:
        # a value that cannot be built, or an identity that is not UTF-8 (a lone
        # surrogate reaching an id derivation, §0.4), is a refused fact
        raise _refuse(fact, str(exc)) from exc

