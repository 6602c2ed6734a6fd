"""One Run's loop operations: commit, advance, start barrier, deliver, redispatch.

These are the steps of spec §5.4-§5.10, run by the Run's actor (never concurrently for
one Run). Each iteration loads, asks the pure core (``plan_next``), and does exactly the
I/O it named (style §5). The shell never edits state: failures are reported back to the
core as commands.
"""

from __future__ import annotations

import math
from typing import Any

import attrs
import trio

from .. import effect
from ..protocol import commands as C
from ..protocol.canonical import canonical_json_text
from ..protocol.commit import CommitRequest, CommitResult, Snapshot, envelope
from ..protocol.digests import digest_model_request, digest_model_result
from ..protocol.errors import (
    CanonicalJSONError,
    CommandConflictError,
    DispatchError,
    DispatchRejectedError,
    DispatchRetryableError,
    DispatchUnknownError,
    EffectNotExecutingError,
    FrozenValueMissingError,
    ModelUnavailableError,
    OwnershipLostError,
    PrepareStalledError,
    RunNotFoundError,
    RunTerminalError,
    SettleTimeoutError,
    StaleRuntimeError,
    ValidationError,
)
from ..protocol.facts import (
    ModelStepCompleted,
    ModelStepRecovered,
    ToolCallFailed,
    ToolCallStarted,
    ToolStepOpened,
)
from ..protocol.ids import (
    derive_call_id,
    derive_decline_command_id,
    derive_effect_id,
    derive_model_request_command_id,
    derive_model_step_id,
    derive_recovery_command_id,
    derive_settlement_command_id,
    derive_start_command_id,
    derive_withdraw_command_id,
)
from ..protocol.plan import (
    Idle,
    NeedModelRequest,
    StartModelCall,
    StartToolCalls,
    WithdrawPrepared,
    needs_recovery,
    plan_next,
)
from ..protocol.state import MachineState, ModelStep, ToolCallState, ToolStep
from ..protocol.values import (
    Failure,
    FailureClass,
    ModelRejectDisposition,
    ModelResult,
    ModelStepStatus,
    ResponsePolicy,
    RunStatus,
    ToolCallBinding,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolResult,
    Usage,
)
from ._events import Durability, Event, EventKind, EventSink, safe_emit
from ._gate import DispatchGate, StoppedBeforeDispatch
from ._results import EXECUTION_RECOVERY, LoopDisposition, LoopResult
from ._settings import Settings, TargetRequest

__all__ = ["LoopContext", "RELOAD", "BUDGET_EXCEEDED", "MODEL_RESEND_LIMIT",
           "MODEL_STEP_LIMIT", "TOOL_LOOKUP_LIMIT"]

#: Failure class of a call declined because the Run's tool budget is spent.
BUDGET_EXCEEDED = "budget_exceeded"
#: Stop reasons of the default time bounds (RUN-ACT-7): the failure class of the
#: ``run_ended`` fact (reason ``provider_failure``) of a Run a bound ended.
#: ``Settings.max_model_resends`` re-sends of a model request all ended without a result
#: (``deadline_exceeded`` / unknown outcomes).
MODEL_RESEND_LIMIT = "model_resend_limit"
#: The Run reached ``Settings.max_model_steps`` model steps and the model asked for more.
MODEL_STEP_LIMIT = "model_step_limit"
#: ``Settings.max_tool_lookup_failures`` consecutive tool steps failed a tool lookup and
#: the model asked for an unknown tool again.
TOOL_LOOKUP_LIMIT = "tool_lookup_limit"


class _Reload:
    def __repr__(self) -> str:
        return "RELOAD"


RELOAD = _Reload()
_RETRIABLE = (StaleRuntimeError, CommandConflictError, RunTerminalError)


def result_json(state: MachineState) -> str | None:
    """The RunResult of a terminal state as canonical JSON text (run_finished payload)."""
    from ..protocol._codec import encode_value

    if state.result is None:
        return None
    return canonical_json_text(encode_value(state.result))


class SettleTooSlow(SettleTimeoutError, trio.TooSlowError):
    """What a shielded section whose deadline fired raises: the library's typed
    :class:`SettleTimeoutError`, and a ``trio.TooSlowError`` for code that catches trio's."""


class _Settling:
    """``with CancelScope(shield=True), fail_after(timeout):`` as ONE cancel scope.

    Shielded from outside cancellation, cancelled by its own deadline (computed on
    entry, like ``fail_after``); a deadline that fired raises :class:`SettleTooSlow`
    (a ``SettleTimeoutError`` and a ``trio.TooSlowError``).
    One scope instead of two plus a generator context manager: this wraps every start
    barrier and every settlement, so it is on the hot path.
    """

    __slots__ = ("_scope", "_timeout")

    def __init__(self, timeout: float) -> None:
        self._timeout = timeout
        self._scope = trio.CancelScope(shield=True, relative_deadline=timeout)

    def __enter__(self) -> trio.CancelScope:
        return self._scope.__enter__()

    def __exit__(self, etype: Any, exc: Any, tb: Any) -> bool:
        handled = self._scope.__exit__(etype, exc, tb)
        if self._scope.cancelled_caught:
            raise SettleTooSlow("a start barrier or settlement exceeded settle_timeout "
                                f"({self._timeout:g} s)") from None
        return handled


@attrs.define
class LoopContext:
    """Everything one loop operation of one Run needs.

    ``in_batch`` holds the keys the current tool batch dispatched so far: if the batch is
    interrupted by an exception, the caller (the drive) still watches and settles them
    (they really started), or cancels them when ownership was lost (INV-28).
    """

    store: Any  # RunStore
    executor: Any  # ExecutionPort
    run_id: str
    settings: Settings
    sink: EventSink | None = None
    started_tool_calls: Any = None  # async () -> int, for the tool budget
    run_facts: Any = None  # async () -> the Run's facts, for the RUN-ACT-7 bounds
    cancel_requested: Any = None  # () -> bool
    gate: DispatchGate | None = None  # the runtime's business-stop gate (RUN-ACT-4)
    in_batch: list[Any] = attrs.Factory(list)
    progress_sink: EventSink | None = None  # provisional events; None: nobody listens
    acknowledges: bool | None = None  # the executor is an Acknowledger (None: detect)

    def take_in_batch(self) -> tuple[Any, ...]:
        """The keys an interrupted batch dispatched (and forget them)."""
        keys, self.in_batch = tuple(self.in_batch), []
        return keys

    @property
    def scope(self) -> str:
        return str(self.store.scope)

    def _cancelled(self) -> bool:
        return bool(self.cancel_requested and self.cancel_requested())

    # -- events ----------------------------------------------------------------------

    def emit(self, kind: EventKind, **fields: Any) -> None:
        safe_emit(self.sink, Event(kind=kind, durability=Durability.COMMITTED,
                                   session=self.scope, run_id=self.run_id, **fields))

    def finished(self, snapshot: Snapshot) -> LoopResult:
        self.emit(EventKind.RUN_FINISHED, payload=result_json(snapshot.state))
        return LoopResult(disposition=LoopDisposition.FINISHED, result=snapshot.state.result)

    # -- commit (§5.4, §4.4) -----------------------------------------------------------

    async def commit(self, base: int, command_id: str, command: C.Command) -> CommitResult | None:
        """Commit *command*; None means "retriable: reload" (§4.4).

        An unknown error is replayed once with the same id and base; OwnershipLostError
        and RunNotFoundError are raised, never replayed (RUN-LOP-5).
        """
        request = CommitRequest(base, envelope(self.run_id, command_id, command))
        try:
            result = await self.store.commit(request)
        except (OwnershipLostError, RunNotFoundError):
            raise
        except _RETRIABLE:
            return None
        except Exception:
            try:
                result = await self.store.commit(request)
            except (OwnershipLostError, RunNotFoundError):
                raise
            except _RETRIABLE:
                return None
        self.emit(EventKind.AGENT_COMMITTED, committed=result.facts, command_id=command_id)
        return result  # type: ignore[no-any-return]

    # -- advance (§5.5) ----------------------------------------------------------------

    async def advance(self, builder: Any) -> LoopResult:
        """Do everything that can be done now; return WAITING, FINISHED or DISPATCHED.

        Raises: PrepareStalledError, ModelUnavailableError, FrozenValueMissingError,
        DispatchUnknownError (``.dispatched``), OwnershipLostError, RunNotFoundError,
        the resolver's / builder's / before_prepare's exceptions.
        """
        while True:
            if self._cancelled():
                return LoopResult(disposition=LoopDisposition.WAITING, reason="cancelled")
            snapshot = await self.store.load(self.run_id)
            state = snapshot.state
            if state.run_id != self.run_id:
                raise ValidationError("store returned another Run", run_id=state.run_id)
            if state.status is not RunStatus.ACTIVE:
                return self.finished(snapshot)
            action = plan_next(state)
            match action:
                case NeedModelRequest(hint=hint):
                    await self._prepare(snapshot, builder, hint)
                case WithdrawPrepared(step_id=step_id):
                    await self.commit(snapshot.position,
                                      derive_withdraw_command_id(self.run_id, step_id),
                                      C.WithdrawPreparedStep(step_id))
                case StartModelCall():
                    key = await self._start_model(snapshot)
                    if key is not RELOAD:
                        return LoopResult(disposition=LoopDisposition.DISPATCHED,
                                          dispatched=(key,))
                case StartToolCalls(call_ids=call_ids):
                    out = await self._start_tools(snapshot, call_ids)
                    if isinstance(out, LoopResult):
                        return out
                case Idle():
                    r = needs_recovery(state)
                    return LoopResult(disposition=LoopDisposition.WAITING,
                                      reason=EXECUTION_RECOVERY if r else "",
                                      execution_recovery=r)

    async def _prepare(self, snapshot: Snapshot, builder: Any, hint: Any) -> None:
        if self.settings.before_prepare is not None:
            await self.settings.before_prepare(self.store, hint)
        hint = attrs.evolve(hint, scope=self.scope)
        prompt = await builder.build(hint)
        model = prompt.model or prompt.request.model
        if not model or model != prompt.request.model:
            raise ValidationError("prompt model is empty or differs from its request",
                                  model=model)
        command_id = derive_model_request_command_id(self.run_id, snapshot.position)
        command = C.PrepareModelRequest(
            step_id=derive_model_step_id(self.run_id, command_id), model=model,
            request=prompt.request, request_digest=digest_model_request(prompt.request),
            input_ids=prompt.input_ids, prompt_token=prompt.token, tools=prompt.tools,
        )
        if await self.commit(snapshot.position, command_id, command) is None:
            again = await self.store.load(self.run_id)
            if again.position == snapshot.position:
                raise PrepareStalledError("prepare refused and the position did not move",
                                          run_id=self.run_id, position=snapshot.position)

    # -- targets and dispatch ------------------------------------------------------------

    async def _resolve(self, request: TargetRequest) -> Any:
        resolver = self.settings.target_resolver
        if resolver is None:
            return None
        target = await resolver(request)
        if target is not None and (not target.kind or not target.id):
            raise ValidationError("a TargetRef needs a kind and an id", target=target)
        return target

    async def _dispatch(self, assignment: Any) -> None:
        """Offer *assignment* per the DispatchPolicy (§5.2, §6.3)."""
        policy = self.settings.dispatch
        refusals = 0
        while True:
            try:
                await self._send(assignment)
                return
            except DispatchRetryableError:
                refusals += 1
                if refusals >= policy.offers:
                    raise
                await trio.sleep(policy.pause(refusals))
            except (DispatchRejectedError, DispatchUnknownError, StoppedBeforeDispatch):
                raise
            except Exception as exc:  # D-5: cannot prove nothing started
                raise DispatchUnknownError(f"dispatch raised {exc!r}", dispatched=()) from exc

    async def _send(self, assignment: Any) -> None:
        """``executor.dispatch`` through the gate: nothing is sent once the Run's business
        stop began (raises StoppedBeforeDispatch; RUN-ACT-4)."""
        if self.gate is None:
            await self.executor.dispatch(assignment)
            return
        with self.gate.dispatching(self.run_id):
            await self.executor.dispatch(assignment)

    async def _validate(self, assignment: Any) -> Any:
        """``executor.validate`` that never raises (RUN-ACT-1): an exception of the
        executor (or of a tool's argument check inside it) refuses the Assignment with
        ``invalid_arguments`` — nothing has started, so the refusal is KNOWN."""
        try:
            return await self.executor.validate(assignment)
        except Exception as exc:
            return effect.ToolFailure(FailureClass.INVALID_ARGUMENTS,
                                      f"executor.validate raised {exc!r}")

    def _shield(self) -> _Settling:
        return _Settling(self.settings.settle_timeout)

    # -- model start: the start barrier (§5.6) ---------------------------------------------

    async def _start_model(self, snapshot: Snapshot) -> Any:
        step = snapshot.state.current
        assert isinstance(step, ModelStep)
        eff = derive_effect_id(self.run_id, step.id, "", step.rejects)
        target = await self._resolve(TargetRequest(
            kind="model", session=self.scope, run_id=self.run_id, step_id=step.id,
            effect=eff, model=step.model))
        assignment = effect.Assignment(
            session=self.scope, run_id=self.run_id, step_id=step.id, call_id="", effect=eff,
            target=target, body=effect.ModelAssignment(
                model=step.model, request_digest=step.request_digest, request=None))
        failure = await self._validate(assignment)
        if failure is not None:
            raise ModelUnavailableError("the executor cannot serve this model",
                                        failure=failure, model=step.model)
        with self._shield():
            result = await self.commit(snapshot.position, derive_start_command_id(eff),
                                       C.StartModelExecution(step.id, eff))
            if result is None:
                return RELOAD
            cur = result.snapshot.state.current
            if not (isinstance(cur, ModelStep) and cur.id == step.id
                    and cur.status is ModelStepStatus.EXECUTING and cur.effect == eff):
                return RELOAD  # INV-25: only under the effect the log started
            try:
                request = await self.store.frozen_request(step.request_digest)
            except FrozenValueMissingError:
                await self.commit(result.snapshot.position, derive_recovery_command_id(eff),
                                  C.RecoverModelExecution(step.id, eff))
                raise
            assignment = attrs.evolve(assignment, body=attrs.evolve(
                assignment.body, request=request))
            try:
                await self._dispatch(assignment)
            except StoppedBeforeDispatch:
                return RELOAD  # not sent: CancelRun closes the effect (RUN-ACT-4)
            except DispatchUnknownError:
                raise  # leave EXECUTING; recovery decides later
            except DispatchError:
                await self.commit(result.snapshot.position, derive_recovery_command_id(eff),
                                  C.RecoverModelExecution(step.id, eff))
                raise
        return assignment.key

    # -- tool starts and scheduling (§5.7) -------------------------------------------------

    async def _start_tools(self, snapshot: Snapshot, call_ids: tuple[str, ...]) -> Any:
        step = snapshot.state.current
        assert isinstance(step, ToolStep)
        sched = step.scheduling
        limit: float = 1 if sched.mode == "sequential" else math.inf
        if sched.max_parallel > 0:
            limit = min(limit, sched.max_parallel)
        executing = sum(1 for c in step.calls if c.status is ToolCallStatus.EXECUTING)
        free = limit - executing
        if free <= 0:
            return LoopResult(disposition=LoopDisposition.WAITING, reason="window_full")
        batch = call_ids[: int(min(free, len(call_ids)))]
        budget = self.settings.max_tool_calls
        started = await self.started_tool_calls() if budget and self.started_tool_calls else 0
        keys: list[Any] = []
        self.in_batch = keys
        latest = snapshot
        for call_id in batch:
            if self._cancelled():
                break
            cur = latest.state.current
            call = cur.call(call_id) if isinstance(cur, ToolStep) and cur.id == step.id else None
            if call is None or call.status is not ToolCallStatus.PENDING:
                continue
            if budget and started >= budget:
                result = await self.commit(
                    latest.position, derive_decline_command_id(self.run_id, step.id, call_id),
                    C.DeclineToolCall(step_id=step.id, call_id=call_id, failure=Failure(
                        BUDGET_EXCEEDED, f"tool budget of {budget} calls is spent")))
                if result is None:
                    break
                latest = result.snapshot
                continue
            out = await self._start_tool(latest, step, call, keys)
            if out is None:
                break
            latest, key = out
            if key is not None:
                started += 1
                keys.append(key)
        self.in_batch = []
        if keys:
            return LoopResult(disposition=LoopDisposition.DISPATCHED, dispatched=tuple(keys))
        return RELOAD

    def _tool_assignment(self, step: ToolStep, call: ToolCallState, eff: str,
                         target: Any) -> Any:
        return effect.Assignment(
            session=self.scope, run_id=self.run_id, step_id=step.id, call_id=call.call_id,
            effect=eff, target=target, body=effect.ToolAssignment(
                tool_ref=call.tool_ref, definition_digest=call.definition_digest,
                arguments=call.arguments, policy=call.policy, replay=call.replay,
                placement=call.placement))

    async def _start_tool(self, latest: Snapshot, step: ToolStep, call: ToolCallState,
                          keys: list[Any]) -> tuple[Snapshot, Any] | None:
        """Validate, start and dispatch one call. None = stop the batch (reload)."""
        eff = derive_effect_id(self.run_id, step.id, call.call_id, 0)
        target = await self._resolve(TargetRequest(
            kind="tool", session=self.scope, run_id=self.run_id, step_id=step.id,
            call_id=call.call_id, effect=eff, tool_ref=call.tool_ref,
            placement=call.placement))
        assignment = self._tool_assignment(step, call, eff, target)
        failure = await self._validate(attrs.evolve(assignment, effect=""))
        if failure is not None:
            result = await self.commit(
                latest.position, derive_decline_command_id(self.run_id, step.id, call.call_id),
                C.DeclineToolCall(step_id=step.id, call_id=call.call_id,
                                  failure=Failure(failure.class_, failure.message)))
            return None if result is None else (result.snapshot, None)
        with self._shield():
            result = await self.commit(latest.position, derive_start_command_id(eff),
                                       C.StartToolCall(step_id=step.id, call_id=call.call_id,
                                                       effect=eff))
            if result is None:
                return None
            cur = result.snapshot.state.current
            now = cur.call(call.call_id) if isinstance(cur, ToolStep) else None
            if now is None or now.status is not ToolCallStatus.EXECUTING or now.effect != eff:
                return result.snapshot, None
            try:
                await self._dispatch(assignment)
            except StoppedBeforeDispatch:
                return None  # not sent: stop the batch; CancelRun closes it (RUN-ACT-4)
            except DispatchUnknownError as exc:
                raise DispatchUnknownError(str(exc), dispatched=tuple(keys)) from exc
            except DispatchError as exc:
                settled = await self.commit(
                    result.snapshot.position, derive_settlement_command_id(eff),
                    C.SubmitToolFailure(
                        step_id=step.id, call_id=call.call_id, effect=eff,
                        failure=Failure(FailureClass.EXECUTION_FAILED, f"dispatch: {exc}"),
                        outcome=ToolFailureOutcome.KNOWN))
                return (settled.snapshot if settled else result.snapshot), None
            self.emit(EventKind.TOOL_STARTED, step_id=step.id, call_id=call.call_id,
                      effect=eff)
        assert result is not None  # the shielded block returned early otherwise
        return result.snapshot, assignment.key

    # -- deliver (§5.8) ------------------------------------------------------------------

    async def deliver(self, outcome: Any) -> LoopResult:
        """Settle *outcome* if it matches the running target; else DROPPED (INV-26).

        Raises: OwnershipLostError; FrozenValueMissingError with ``.result`` DELIVERED
        after recovering a step whose frozen body is missing (D-7).
        """
        dropped = LoopResult(disposition=LoopDisposition.DROPPED)
        key = outcome.key
        if key.session and key.session != self.scope:
            return dropped
        try:
            snapshot = await self.store.load(key.run_id)
        except RunNotFoundError:
            return dropped
        state = snapshot.state
        if state.status is not RunStatus.ACTIVE:
            return dropped
        cur = state.current
        missing_body = False
        tool_call: ToolCallState | None = None
        if (isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING
                and cur.effect == key.effect):
            command_id, command, missing_body = await self._model_command(state, cur, outcome)
        elif isinstance(cur, ToolStep) and (call := _executing_call(cur, key.effect)):
            command_id, command = self._tool_command(cur, call, outcome)
            tool_call = call
        else:
            return dropped
        with self._shield():
            result = await self.commit(snapshot.position, command_id, command)
            if result is None:
                return dropped  # D-6: the effect is already over; no acknowledgement
            acknowledges = self.acknowledges
            if acknowledges is None:
                acknowledges = isinstance(self.executor, effect.Acknowledger)
            if acknowledges:
                try:
                    await self.executor.acknowledge(key)
                except Exception:  # RUN-EXE-13: acknowledgement never affects settlement
                    pass
        assert result is not None  # the shielded block returned early otherwise
        if tool_call is not None:
            assert isinstance(cur, ToolStep)
            self.emit(EventKind.TOOL_COMPLETED, step_id=cur.id, call_id=tool_call.call_id,
                      effect=key.effect, committed=result.facts)
        if result.snapshot.state.status is not RunStatus.ACTIVE:
            return self.finished(result.snapshot)
        delivered = LoopResult(disposition=LoopDisposition.DELIVERED)
        if missing_body:
            raise FrozenValueMissingError("the frozen request body is missing",
                                          result=delivered, run_id=self.run_id)
        return delivered

    async def _model_command(self, state: MachineState, step: ModelStep,
                             outcome: Any) -> tuple[str, C.Command, bool]:
        eff = step.effect
        settle = derive_settlement_command_id(eff)
        recover = (derive_recovery_command_id(eff), C.RecoverModelExecution(step.id, eff))
        res = outcome.result
        match res:
            case effect.ModelSucceeded(result=model_result):
                try:
                    digest_model_result(model_result)
                    calls = self._bindings(state, step, model_result)
                except (CanonicalJSONError, ValidationError) as exc:
                    return settle, self._reject(step, f"malformed_result: {exc}"), False
                stop = await self._step_bound(state, step, model_result)
                if stop is not None:
                    return settle, C.SubmitModelFailure(step_id=step.id, effect=eff,
                                                        failure=stop), False
                return settle, C.SubmitModelResult(
                    step_id=step.id, effect=eff, result=model_result, calls=calls,
                    scheduling=self.settings.scheduling), False
            case effect.Cancelled():
                return (*recover, False)
            case effect.Unknown(message=message):
                stop = await self._resend_bound(f"unknown: {message}")
                if stop is not None:
                    return settle, C.SubmitModelFailure(step_id=step.id, effect=eff,
                                                        failure=stop), False
                return (*recover, False)
            case effect.ModelFailed(code=code, message=message):
                if code is effect.FailureCode.FROZEN_VALUE_MISSING:
                    return (*recover, True)
                if code in (effect.FailureCode.MALFORMED_FROZEN_REQUEST,
                            effect.FailureCode.MALFORMED_RESULT):
                    return settle, self._reject(step, message), False
                if code is effect.FailureCode.DEADLINE_EXCEEDED:
                    stop = await self._resend_bound(f"{code.value}: {message}")
                    if stop is not None:
                        return settle, C.SubmitModelFailure(step_id=step.id, effect=eff,
                                                            failure=stop), False
                    return (*recover, False)
                return settle, C.SubmitModelFailure(step_id=step.id, effect=eff, failure=Failure(
                    FailureClass.PROVIDER_FAILURE, f"{code.value}: {message}")), False
        what = "no result" if res is None else type(res).__name__
        return settle, C.SubmitModelFailure(step_id=step.id, effect=eff, failure=Failure(
            FailureClass.PROVIDER_FAILURE, f"executor delivered {what} for a model step")), False

    async def _facts(self) -> tuple[Any, ...]:
        if self.run_facts is None:
            return ()
        return tuple(await self.run_facts())

    async def _resend_bound(self, last: str) -> Failure | None:
        """RUN-ACT-7: the stop reason once ``max_model_resends`` re-sends of the model
        request all ended without a result, else None (recover and send again).

        Counted from the log: the ``model_step_recovered`` facts since the last completed
        model step (each recovery is one more send; takeover recoveries count too, so
        the bound holds across restarts)."""
        limit = self.settings.max_model_resends
        if not limit:
            return None
        resends = 0
        for fact in await self._facts():
            if isinstance(fact, ModelStepCompleted):
                resends = 0
            elif isinstance(fact, ModelStepRecovered):
                resends += 1
        if resends < limit:
            return None
        return Failure(MODEL_RESEND_LIMIT, f"{resends + 1} sends of the model request ended "
                       f"without a result (max_model_resends={limit}); last: {last}")

    async def _step_bound(self, state: MachineState, step: ModelStep,
                          result: ModelResult) -> Failure | None:
        """RUN-ACT-7: the stop reason when settling *result* would need another model
        step past ``max_model_steps``, or the model asks for an unknown tool after
        ``max_tool_lookup_failures`` consecutive failed lookups; else None."""
        if not result.tool_calls:
            return None  # a text answer: no further model step from this one
        steps = self.settings.max_model_steps
        if steps and state.model_steps >= steps:
            return Failure(MODEL_STEP_LIMIT, f"the Run reached {state.model_steps} model "
                           f"steps (max_model_steps={steps}) and the model asked for more")
        lookups = self.settings.max_tool_lookup_failures
        offered = {s.name for s in step.tools}
        unknown = sorted({tc.name for tc in result.tool_calls if tc.name not in offered})
        if not lookups or not unknown:
            return None
        streak = _lookup_failure_streak(await self._facts())
        if streak < lookups:
            return None
        return Failure(TOOL_LOOKUP_LIMIT, f"the model asked for unknown tool(s) {unknown} "
                       f"after {streak} consecutive tool steps with a failed lookup "
                       f"(max_tool_lookup_failures={lookups})")

    def _reject(self, step: ModelStep, message: str) -> C.RejectModelResult:
        disposition = (ModelRejectDisposition.RETRY
                       if step.rejects < self.settings.malformed_retries
                       else ModelRejectDisposition.FAIL_RUN)
        return C.RejectModelResult(
            step_id=step.id, effect=step.effect, usage=Usage(),
            failure=Failure(FailureClass.MALFORMED_MODEL_RESULT, message),
            disposition=disposition)

    def _bindings(self, state: MachineState, step: ModelStep,
                  result: ModelResult) -> tuple[ToolCallBinding, ...]:
        out = []
        for i, tc in enumerate(result.tool_calls):
            spec = next((s for s in step.tools if s.name == tc.name), None)
            if spec is not None:
                b = ToolCallBinding(
                    call_id=derive_call_id(step.id, i), provider_call_id=tc.id,
                    tool_ref=spec.ref, definition_digest=spec.definition_digest,
                    arguments=tc.arguments, policy=spec.policy, replay=spec.replay,
                    placement=spec.placement)
            else:
                b = ToolCallBinding(
                    call_id=derive_call_id(step.id, i), provider_call_id=tc.id,
                    tool_ref=tc.name, arguments=tc.arguments,
                    policy=ResponsePolicy.DIRECT_EXECUTION)
            out.append(b)
        return tuple(out)

    def _tool_command(self, step: ToolStep, call: ToolCallState,
                      outcome: Any) -> tuple[str, C.Command]:
        eff = call.effect
        settle = derive_settlement_command_id(eff)

        def unknown(message: str) -> C.Command:
            return C.SubmitToolFailure(
                step_id=step.id, call_id=call.call_id, effect=eff,
                failure=Failure(FailureClass.EFFECT_UNKNOWN, message),
                outcome=ToolFailureOutcome.UNKNOWN)

        res = outcome.result
        match res:
            case effect.ToolExecutionSucceeded(result=tool_result):
                return settle, C.SubmitToolResult(step_id=step.id, call_id=call.call_id,
                                                  effect=eff, result=_tool_result(tool_result))
            case effect.ToolExecutionFailed(failure=failure):
                cls = failure.class_
                if not cls or cls == FailureClass.EFFECT_UNKNOWN:
                    cls = FailureClass.EXECUTION_FAILED
                return settle, C.SubmitToolFailure(
                    step_id=step.id, call_id=call.call_id, effect=eff,
                    failure=Failure(cls, failure.message), outcome=ToolFailureOutcome.KNOWN)
            case effect.ToolExecutionUnknown(failure=failure):
                return settle, unknown(f"{failure.class_}: {failure.message}")
            case effect.Cancelled(message=message):
                return settle, unknown(f"cancelled: {message}")
            case effect.Unknown(message=message):
                return settle, unknown(f"executor: {message}" if message
                                       else "tool returned no outcome")
        what = "no result" if res is None else type(res).__name__
        return settle, unknown(f"executor delivered {what} for a tool call")

    # -- redispatch (§5.10) ----------------------------------------------------------------

    async def redispatch(self, key: Any) -> None:
        """Offer the Assignment of an EXECUTING target once more (no fact is written).

        Raises: EffectNotExecutingError, FrozenValueMissingError, dispatch errors.
        """
        snapshot = await self.store.load(key.run_id)
        state = snapshot.state
        cur = state.current
        if (isinstance(cur, ModelStep) and cur.status is ModelStepStatus.EXECUTING
                and cur.effect == key.effect):
            target = await self._resolve(TargetRequest(
                kind="model", session=self.scope, run_id=self.run_id, step_id=cur.id,
                effect=cur.effect, model=cur.model))
            request = await self.store.frozen_request(cur.request_digest)
            assignment = effect.Assignment(
                session=self.scope, run_id=self.run_id, step_id=cur.id, call_id="",
                effect=cur.effect, target=target, body=effect.ModelAssignment(
                    model=cur.model, request_digest=cur.request_digest, request=request))
        elif isinstance(cur, ToolStep) and (call := _executing_call(cur, key.effect)):
            target = await self._resolve(TargetRequest(
                kind="tool", session=self.scope, run_id=self.run_id, step_id=cur.id,
                call_id=call.call_id, effect=call.effect, tool_ref=call.tool_ref,
                placement=call.placement))
            assignment = self._tool_assignment(cur, call, call.effect, target)
        else:
            raise EffectNotExecutingError("the key's target is not executing", key=key)
        try:
            await self._send(assignment)
        except StoppedBeforeDispatch:
            raise EffectNotExecutingError("the Run is being cancelled: not redispatched",
                                          key=key) from None


def _executing_call(step: ToolStep, eff: str) -> ToolCallState | None:
    for c in step.calls:
        if c.status is ToolCallStatus.EXECUTING and c.effect == eff:
            return c
    return None


def _tool_result(value: Any) -> ToolResult:
    if isinstance(value, ToolResult):
        return value
    return ToolResult(canonical_json_text(value))


def _lookup_failure_streak(facts: Any) -> int:
    """Number of trailing tool steps in *facts* with a ``tool_lookup_failed`` call."""
    steps: list[str] = []
    flagged: set[str] = set()
    for fact in facts:
        if isinstance(fact, ToolStepOpened):
            steps.append(fact.step_id)
        elif (isinstance(fact, ToolCallFailed)
              and fact.failure.class_ == FailureClass.TOOL_LOOKUP_FAILED):
            flagged.add(fact.step_id)
    streak = 0
    for step_id in reversed(steps):
        if step_id not in flagged:
            break
        streak += 1
    return streak


def count_started(facts: Any) -> int:
    """Number of ToolCallStarted facts in a Run's log (the tool budget's counter)."""
    return sum(1 for f in facts if isinstance(f, ToolCallStarted))
