"""One Run's loop operations: commit, advance, start barrier, deliver, redispatch.

These are the steps of spec §5.4-§5.10, run by the Run's actor (never concurrently for
one Run). Each iteration loads, asks the pure core (``plan_next``), and does exactly the
I/O it named (style §5). The shell never edits state: failures are reported back to the
core as commands.

Fused commits (RUN-LOP-11): when the drive settles an Outcome it would advance right
after, ``deliver`` predicts the state the settlement leaves (the pure ``predict_commit``
on its own snapshot; the store reuses that decision, RUN-CMT-10), decides what
``advance`` would commit next up to its start barrier
— the tool starts/declines the window admits, or the next prepare and model start for a
builder that reads ``PromptInput.pending`` — and commits the chain as one batch (one
transaction, each command under its own derived id) before dispatching what it started.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import attrs
import trio

from .. import effect
from ..protocol import commands as C
from ..protocol.canonical import canonical_json_text
from ..protocol.commit import (
    CommitRequest,
    CommitResult,
    Snapshot,
    envelope,
    predict_commit,
)
from ..protocol.digests import digest_model_request, digest_model_result, encode_frozen
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
    RunxError,
    SettleTimeoutError,
    StaleRuntimeError,
    ValidationError,
)
from ..protocol.facts import (
    Fact,
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
from ..store.base import commit_batch
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
_T = TypeVar("_T")
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

    def section(self) -> contextlib.AbstractContextManager[Any]:
        """Begin the next section of this (entered) scope with its own ``settle_timeout``
        from now, as a fresh ``_Settling`` entered here would have; return the context
        manager to run that section in.

        Sections of one fused batch (its commit, each start's send, the acknowledgement)
        share this scope instead of entering one each (issue 11): the deadline is moved
        to ``now + timeout`` at each section's start. A scope whose deadline already
        fired stays cancelled — trio cannot uncancel it — so then the section gets a
        fresh ``_Settling`` of its own (its shield keeps this scope's cancellation out),
        exactly what it had before the sections were merged.
        """
        scope = self._scope
        if scope.cancel_called:
            return _Settling(self._timeout)
        scope.deadline = trio.current_time() + self._timeout
        return _SAME_SCOPE


#: The context of a section that runs in the enclosing ``_Settling`` (a no-op, reusable).
_SAME_SCOPE: contextlib.AbstractContextManager[Any] = contextlib.nullcontext()


async def _replaying_once(attempt: Callable[[], Awaitable[_T]]) -> _T | None:
    """Run the commit *attempt*; None means "retriable: reload" (§4.4, RUN-LOP-5).

    An unknown error runs the same attempt (same ids, same bases) once more — the applied
    part answers ALREADY_APPLIED; OwnershipLostError and RunNotFoundError are raised,
    never replayed; a retriable refusal (``_RETRIABLE``) is None.
    """
    for last in (False, True):
        try:
            return await attempt()
        except (OwnershipLostError, RunNotFoundError):
            raise
        except _RETRIABLE:
            return None
        except Exception:
            if last:
                raise
    raise AssertionError("unreachable")  # pragma: no cover - the loop returns or raises


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
        """The scope of the Run's store."""
        return str(self.store.scope)

    def _cancelled(self) -> bool:
        return bool(self.cancel_requested and self.cancel_requested())

    # -- events ----------------------------------------------------------------------

    def emit(self, kind: EventKind, **fields: Any) -> None:
        """Emit a COMMITTED event of this Run to the sink (RUN-LOP-6); never raises."""
        safe_emit(self.sink, Event(kind=kind, durability=Durability.COMMITTED,
                                   session=self.scope, run_id=self.run_id, **fields))

    def finished(self, snapshot: Snapshot) -> LoopResult:
        """Emit RUN_FINISHED and return FINISHED with the ended Run's result."""
        self.emit(EventKind.RUN_FINISHED, payload=result_json(snapshot.state))
        return LoopResult(disposition=LoopDisposition.FINISHED, result=snapshot.state.result)

    # -- commit (§5.4, §4.4) -----------------------------------------------------------

    async def commit(self, base: int, command_id: str, command: C.Command) -> CommitResult | None:
        """Commit *command*; None means "retriable: reload" (§4.4).

        An unknown error is replayed once with the same id and base; OwnershipLostError
        and RunNotFoundError are raised, never replayed (RUN-LOP-5).
        """
        request = CommitRequest(base, envelope(self.run_id, command_id, command))
        result = await _replaying_once(lambda: self.store.commit(request))
        if result is None:
            return None
        self.emit(EventKind.AGENT_COMMITTED, committed=result.facts, command_id=command_id)
        return result  # type: ignore[no-any-return]

    async def commit_chain(self, chain: _Chain) -> tuple[CommitResult, ...]:
        """Commit *chain*'s requests as ONE batch: one transaction (RUN-CMT-9, RUN-LOP-11).

        Returns the results of the committed prefix, one per request in order: all of
        them, or fewer when a request was refused (StaleRuntimeError,
        CommandConflictError, RunTerminalError: that request and the ones after it wrote
        nothing — "retriable: reload", as :meth:`commit`'s None). ``()`` = the first
        request was refused, nothing was written. Emits AGENT_COMMITTED per committed
        command (its own id and facts).

        An unknown error is replayed once with the same requests (the applied part
        answers ALREADY_APPLIED); OwnershipLostError and RunNotFoundError are raised,
        never replayed (RUN-LOP-5); any other refusal is raised after the prefix's events.
        """
        requests = tuple(chain.requests)
        batch = await _replaying_once(lambda: commit_batch(self.store, requests))
        if batch is None:
            return ()
        results = tuple(batch.results)
        for request, result in zip(requests, results, strict=False):
            self.emit(EventKind.AGENT_COMMITTED, committed=result.facts,
                      command_id=request.envelope.id)
        if batch.error is not None and not isinstance(batch.error, _RETRIABLE):
            raise batch.error
        return results

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
        command_id, command = self._prepare_command(snapshot.position,
                                                    await builder.build(hint))
        if await self.commit(snapshot.position, command_id, command) is None:
            again = await self.store.load(self.run_id)
            if again.position == snapshot.position:
                raise PrepareStalledError("prepare refused and the position did not move",
                                          run_id=self.run_id, position=snapshot.position)

    def _prepare_command(self, position: int, prompt: Any) -> tuple[str, C.Command]:
        """The PrepareModelRequest of *prompt* at *position* under its derived ids."""
        model = prompt.model or prompt.request.model
        if not model or model != prompt.request.model:
            raise ValidationError("prompt model is empty or differs from its request",
                                  model=model)
        command_id = derive_model_request_command_id(self.run_id, position)
        return command_id, C.PrepareModelRequest(
            step_id=derive_model_step_id(self.run_id, command_id), model=model,
            request=prompt.request, request_digest=digest_model_request(prompt.request),
            input_ids=prompt.input_ids, prompt_token=prompt.token, tools=prompt.tools,
        )

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

    async def _model_start(self, step: ModelStep) -> tuple[str, Any, Any]:
        """``(effect, assignment without its request, validate's refusal or None)`` of
        the start of the PREPARED model step *step* (target resolved)."""
        eff = derive_effect_id(self.run_id, step.id, "", step.rejects)
        target = await self._resolve(TargetRequest(
            kind="model", session=self.scope, run_id=self.run_id, step_id=step.id,
            effect=eff, model=step.model))
        assignment = effect.Assignment(
            session=self.scope, run_id=self.run_id, step_id=step.id, call_id="", effect=eff,
            target=target, body=effect.ModelAssignment(
                model=step.model, request_digest=step.request_digest, request=None))
        return eff, assignment, await self._validate(assignment)

    async def _start_model(self, snapshot: Snapshot) -> Any:
        step = snapshot.state.current
        assert isinstance(step, ModelStep)
        eff, assignment, failure = await self._model_start(step)
        if failure is not None:
            raise ModelUnavailableError("the executor cannot serve this model",
                                        failure=failure, model=step.model)
        with self._shield():
            result = await self.commit(snapshot.position, derive_start_command_id(eff),
                                       C.StartModelExecution(step.id, eff))
            if result is None:
                return RELOAD
            return await self._send_model(result.snapshot, step, eff, assignment)
        raise AssertionError("unreachable: the shielded block returns")  # pragma: no cover

    async def _send_model(self, started: Snapshot, step: ModelStep, eff: str,
                          assignment: Any) -> Any:
        """The dispatch half of the model start barrier (inside its shielded section):
        *started* is the snapshot after StartModelExecution(*step*, *eff*) committed.
        Returns the key, or RELOAD (not started under *eff*, or not sent: RUN-ACT-4).

        Raises: FrozenValueMissingError / DispatchError (after RecoverModelExecution),
        DispatchUnknownError (left EXECUTING).
        """
        cur = started.state.current
        if not (isinstance(cur, ModelStep) and cur.id == step.id
                and cur.status is ModelStepStatus.EXECUTING and cur.effect == eff):
            return RELOAD  # INV-25: only under the effect the log started
        try:
            request = await self.store.frozen_request(step.request_digest)
        except FrozenValueMissingError:
            await self.commit(started.position, derive_recovery_command_id(eff),
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
            await self.commit(started.position, derive_recovery_command_id(eff),
                              C.RecoverModelExecution(step.id, eff))
            raise
        return assignment.key

    # -- tool starts and scheduling (§5.7) -------------------------------------------------

    async def _start_tools(self, snapshot: Snapshot, call_ids: tuple[str, ...]) -> Any:
        step = snapshot.state.current
        assert isinstance(step, ToolStep)
        batch = _window(step, call_ids)
        if not batch:
            return LoopResult(disposition=LoopDisposition.WAITING, reason="window_full")
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
        eff, assignment, failure = await self._tool_start(step, call)
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
            try:
                return await self._send_tool(result.snapshot, step, call.call_id, eff,
                                             assignment)
            except DispatchUnknownError as exc:
                raise DispatchUnknownError(str(exc), dispatched=tuple(keys)) from exc
        raise AssertionError("unreachable: the shielded block returns")  # pragma: no cover

    async def _tool_start(self, step: ToolStep, call: ToolCallState) -> tuple[str, Any, Any]:
        """``(effect, assignment, validate's refusal or None)`` of *call*'s start."""
        eff = derive_effect_id(self.run_id, step.id, call.call_id, 0)
        target = await self._resolve(TargetRequest(
            kind="tool", session=self.scope, run_id=self.run_id, step_id=step.id,
            call_id=call.call_id, effect=eff, tool_ref=call.tool_ref,
            placement=call.placement))
        assignment = self._tool_assignment(step, call, eff, target)
        return eff, assignment, await self._validate(attrs.evolve(assignment, effect=""))

    async def _send_tool(self, started: Snapshot, step: ToolStep, call_id: str, eff: str,
                         assignment: Any) -> tuple[Snapshot, Any] | None:
        """The dispatch half of a tool start barrier (inside its shielded section):
        *started* is the snapshot after StartToolCall(*call_id*, *eff*) committed.

        Returns ``(latest snapshot, key or None)``; None = not sent (a business stop,
        RUN-ACT-4: stop the batch). A KNOWN dispatch refusal is settled as
        SubmitToolFailure (``execution_failed``). Raises DispatchUnknownError (left
        EXECUTING; ``.dispatched`` is for the caller to fill).
        """
        cur = started.state.current
        now = cur.call(call_id) if isinstance(cur, ToolStep) else None
        if now is None or now.status is not ToolCallStatus.EXECUTING or now.effect != eff:
            return started, None
        try:
            await self._dispatch(assignment)
        except StoppedBeforeDispatch:
            return None  # not sent: stop the batch; CancelRun closes it (RUN-ACT-4)
        except DispatchUnknownError:
            raise
        except DispatchError as exc:
            settled = await self.commit(
                started.position, derive_settlement_command_id(eff),
                C.SubmitToolFailure(
                    step_id=step.id, call_id=call_id, effect=eff,
                    failure=Failure(FailureClass.EXECUTION_FAILED, f"dispatch: {exc}"),
                    outcome=ToolFailureOutcome.KNOWN))
            return (settled.snapshot if settled else started), None
        self.emit(EventKind.TOOL_STARTED, step_id=step.id, call_id=call_id, effect=eff)
        return started, assignment.key

    # -- deliver (§5.8) ------------------------------------------------------------------

    async def deliver(self, outcome: Any, builder: Any = None) -> LoopResult:
        """Settle *outcome* if it matches the running target; else DROPPED (INV-26).

        With a *builder* (the drive passes one when it would advance right after this
        settlement: nothing else of the Run in flight), the settlement is fused with what
        ``advance`` would commit next up to its start barrier (RUN-LOP-11): the starts or
        declines of the calls the scheduling window admits, or the next
        PrepareModelRequest and StartModelExecution (only for a builder with
        ``reads_pending``, and no ``before_prepare``) — one batch, one transaction —
        then the started effects are dispatched; the result is DELIVERED with their keys
        in ``dispatched``. Without a builder nothing but the settlement is committed.

        Raises: OwnershipLostError; FrozenValueMissingError with ``.result`` DELIVERED
        after recovering a step whose frozen body is missing (D-7). When fused, also what
        ``advance`` raises at the same point (after the settlement is durable): the
        builder's / resolver's errors, DispatchUnknownError (``.dispatched``), the model
        start's FrozenValueMissingError / DispatchError.
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
        chain = None
        if builder is not None and not missing_body and not self._cancelled():
            chain = _Chain.open(snapshot, self.run_id, command_id, command)
        if chain is None:
            return await self._settle(snapshot, key, command_id, command, cur, tool_call,
                                      missing_body)
        try:
            await self._continue(chain, builder)
        except BaseException as exc:
            # the builder / resolver failed (or the caller was cancelled) while the chain
            # was planned: commit what was planned before it — what advance would have
            # committed (and dispatched) before meeting the same error — then raise it;
            # the keys dispatched stay in ``in_batch`` for the drive to settle (INV-28)
            result = await self._settle_fused(chain, key, cur, tool_call)
            if (not isinstance(exc, Exception)
                    or result.disposition is LoopDisposition.DELIVERED):
                raise
            return result
        result = await self._settle_fused(chain, key, cur, tool_call)
        self.in_batch = []
        return result

    async def _acknowledge(self, key: Any) -> None:
        acknowledges = self.acknowledges
        if acknowledges is None:
            acknowledges = isinstance(self.executor, effect.Acknowledger)
        if acknowledges:
            try:
                await self.executor.acknowledge(key)
            except Exception:  # RUN-EXE-13: acknowledgement never affects settlement
                pass

    def _completed(self, cur: Any, tool_call: ToolCallState | None, key: Any,
                   facts: tuple[Fact, ...]) -> None:
        if tool_call is not None:
            assert isinstance(cur, ToolStep)
            self.emit(EventKind.TOOL_COMPLETED, step_id=cur.id, call_id=tool_call.call_id,
                      effect=key.effect, committed=facts)

    async def _settle(self, snapshot: Snapshot, key: Any, command_id: str,
                      command: C.Command, cur: Any, tool_call: ToolCallState | None,
                      missing_body: bool) -> LoopResult:
        """Commit the settlement alone, acknowledge, emit (the unfused deliver)."""
        with self._shield():
            result = await self.commit(snapshot.position, command_id, command)
            if result is None:
                return LoopResult(disposition=LoopDisposition.DROPPED)  # D-6: no ack
            await self._acknowledge(key)
        assert result is not None  # the shielded block returned early otherwise
        self._completed(cur, tool_call, key, result.facts)
        if result.snapshot.state.status is not RunStatus.ACTIVE:
            return self.finished(result.snapshot)
        delivered = LoopResult(disposition=LoopDisposition.DELIVERED)
        if missing_body:
            raise FrozenValueMissingError("the frozen request body is missing",
                                          result=delivered, run_id=self.run_id)
        return delivered

    # -- fused commits (RUN-LOP-11) ---------------------------------------------------------

    async def _continue(self, chain: _Chain, builder: Any) -> None:
        """Extend *chain* (the settlement) with what ``advance`` would commit next on the
        predicted state, up to and including its start barrier's starts."""
        state = chain.predicted.state
        if state.status is not RunStatus.ACTIVE:
            return
        match plan_next(state):
            case StartToolCalls(call_ids=call_ids):
                await self._plan_tool_starts(chain, call_ids)
            case NeedModelRequest(hint=hint):
                await self._plan_model(chain, builder, hint)
            case _:
                return

    async def _plan_tool_starts(self, chain: _Chain, call_ids: tuple[str, ...]) -> None:
        """``_start_tools`` without its I/O: the same window, budget, validation and
        declines, decided on the predicted state and added to *chain*."""
        step = chain.predicted.state.current
        assert isinstance(step, ToolStep)
        batch = _window(step, call_ids)
        budget = self.settings.max_tool_calls
        started = await self.started_tool_calls() if budget and self.started_tool_calls else 0
        for call_id in batch:
            if self._cancelled():
                break
            cur = chain.predicted.state.current
            call = cur.call(call_id) if isinstance(cur, ToolStep) and cur.id == step.id else None
            if call is None or call.status is not ToolCallStatus.PENDING:
                continue
            decline = derive_decline_command_id(self.run_id, step.id, call_id)
            if budget and started >= budget:
                if not chain.add(decline, C.DeclineToolCall(
                        step_id=step.id, call_id=call_id, failure=Failure(
                            BUDGET_EXCEEDED, f"tool budget of {budget} calls is spent"))):
                    break
                continue
            eff, assignment, failure = await self._tool_start(step, call)
            if failure is not None:
                if not chain.add(decline, C.DeclineToolCall(
                        step_id=step.id, call_id=call_id,
                        failure=Failure(failure.class_, failure.message))):
                    break
                continue
            if not chain.add(derive_start_command_id(eff), C.StartToolCall(
                    step_id=step.id, call_id=call_id, effect=eff)):
                break
            chain.starts.append(_Start(len(chain.requests) - 1, step.id, call_id, eff,
                                       assignment))
            started += 1

    async def _plan_model(self, chain: _Chain, builder: Any, hint: Any) -> None:
        """``_prepare`` + ``_start_model`` without their I/O: build the prompt on the
        predicted state (the builder reads ``hint.pending``), then add Prepare and, if the
        executor serves the model, StartModelExecution to *chain*."""
        if self.settings.before_prepare is not None:
            return  # the hook reads the store: it must see the settlement durable
        if getattr(builder, "reads_pending", False) is not True:
            return  # the builder reads the log: it must see the settlement durable
        hint = attrs.evolve(hint, scope=self.scope, pending=tuple(chain.facts),
                            pending_bodies=tuple(chain.bodies))
        position = chain.predicted.position
        command_id, command = self._prepare_command(position, await builder.build(hint))
        if not chain.add(command_id, command):
            return
        state = chain.predicted.state
        if self._cancelled() or not isinstance(plan_next(state), StartModelCall):
            return  # as advance: no new effect once the drive was cancelled
        step = state.current
        assert isinstance(step, ModelStep)
        eff, assignment, failure = await self._model_start(step)
        if failure is not None:
            return  # advance validates again and raises ModelUnavailableError
        if chain.add(derive_start_command_id(eff), C.StartModelExecution(step.id, eff)):
            chain.starts.append(_Start(len(chain.requests) - 1, step.id, "", eff, assignment,
                                       model=step))

    async def _settle_fused(self, chain: _Chain, key: Any, cur: Any,
                            tool_call: ToolCallState | None) -> LoopResult:
        """Commit *chain* (the settlement first) as one batch, then dispatch the starts it
        committed — the start barrier: they are durable before they are sent — and
        acknowledge *key*'s outcome. Each step runs in its own shielded, time-limited
        section with no checkpoint between them, so a started effect is always sent (or
        its failure settled) even if the caller is cancelled. A chain of the settlement
        alone is :meth:`_settle`. The keys sent are left in ``in_batch`` (the caller
        clears it); DELIVERED carries them in ``dispatched``."""
        if len(chain.requests) == 1:
            request = chain.requests[0]
            return await self._settle(chain.loaded, key, request.envelope.id,
                                      request.envelope.command, cur, tool_call, False)
        # one shielded scope for the whole batch; each section (the commit, each send,
        # the acknowledgement) gets its own settle_timeout from its start (section())
        settling = self._shield()
        with settling:
            results = await self.commit_chain(chain)
            if not results:
                return LoopResult(disposition=LoopDisposition.DROPPED)  # D-6: no ack
            self._completed(cur, tool_call, key, results[0].facts)
            keys: list[Any] = []
            self.in_batch = keys
            try:
                await self._send_starts(chain, results, keys, settling)
            except BaseException as exc:
                if isinstance(exc, DispatchUnknownError):
                    self.in_batch = []  # its ``.dispatched`` carries the keys sent (D-4)
                # acknowledged whatever the sends raised — in a fresh section of its own:
                # this scope may be the one whose deadline fired
                with self._shield():
                    await self._acknowledge(key)
                raise
            with settling.section():
                await self._acknowledge(key)
        latest = results[-1].snapshot
        if latest.state.status is not RunStatus.ACTIVE:
            return self.finished(latest)
        return LoopResult(disposition=LoopDisposition.DELIVERED, dispatched=tuple(keys))

    async def _send_starts(self, chain: _Chain, results: tuple[CommitResult, ...],
                           keys: list[Any], settling: _Settling) -> None:
        """Dispatch every start of *chain* that *results* committed, in order; the keys
        sent go to *keys*; each send is a section of *settling* (its own settle_timeout).
        Errors as ``_start_tool`` / ``_start_model``; a tool dispatch
        whose outcome is unknown does not stop the others (they are started already):
        DispatchUnknownError is raised after them, ``.dispatched`` = the keys sent."""
        unknown: DispatchUnknownError | None = None
        for start in chain.starts:
            if start.index >= len(results):
                break  # refused: it and what follows wrote nothing
            started = results[start.index].snapshot
            with settling.section():
                if start.model is not None:
                    sent = await self._send_model(started, start.model, start.effect,
                                                  start.assignment)
                    if sent is not RELOAD:
                        keys.append(sent)
                    continue
                step = started.state.current
                if not isinstance(step, ToolStep) or step.id != start.step_id:
                    break
                try:
                    out = await self._send_tool(started, step, start.call_id, start.effect,
                                                start.assignment)
                except DispatchUnknownError as exc:
                    unknown = unknown or exc
                    continue
                if out is None:
                    break  # a business stop: nothing more is sent (RUN-ACT-4)
                if out[1] is not None:
                    keys.append(out[1])
        if unknown is not None:
            raise DispatchUnknownError(str(unknown), dispatched=tuple(keys)) from unknown

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


def _window(step: ToolStep, call_ids: tuple[str, ...]) -> tuple[str, ...]:
    """The first of *call_ids* the step's scheduling window admits now (§5.7)."""
    sched = step.scheduling
    limit: float = 1 if sched.mode == "sequential" else math.inf
    if sched.max_parallel > 0:
        limit = min(limit, sched.max_parallel)
    executing = sum(1 for c in step.calls if c.status is ToolCallStatus.EXECUTING)
    free = limit - executing
    if free <= 0:
        return ()
    return call_ids[: int(min(free, len(call_ids)))]


@attrs.frozen
class _Start:
    """A start a chain commits: its request index, target and Assignment (the model
    step when it is the model's)."""

    index: int
    step_id: str
    call_id: str
    effect: str
    assignment: Any
    model: ModelStep | None = None


@attrs.define
class _Chain:
    """Commands one fused commit carries, each decided on the state the ones before it
    leave (predicted locally with the pure ``predict_commit``; RUN-LOP-11). Each request
    carries its prediction, so the store, finding the Run at the predicted snapshot,
    does not decide it a second time (RUN-CMT-10)."""

    run_id: str
    loaded: Snapshot
    predicted: Snapshot
    requests: list[CommitRequest] = attrs.Factory(list)
    facts: list[Fact] = attrs.Factory(list)
    bodies: list[tuple[str, bytes]] = attrs.Factory(list)
    starts: list[_Start] = attrs.Factory(list)

    @classmethod
    def open(cls, snapshot: Snapshot, run_id: str, command_id: str,
             command: C.Command) -> _Chain | None:
        """A chain holding the settlement *command*; None if it cannot be predicted
        (then the store decides it alone)."""
        chain = cls(run_id, snapshot, snapshot)
        return chain if chain.add(command_id, command) else None

    def add(self, command_id: str, command: C.Command) -> bool:
        """Append *command* if it is accepted on the predicted state (its facts and
        bodies become pending); False (nothing added) if it would be refused."""
        try:
            request, decision = predict_commit(self.predicted, CommitRequest(
                self.predicted.position, envelope(self.run_id, command_id, command)))
            bodies = _bodies(command)
        except RunxError:
            return False
        self.requests.append(request)  # carries its decision: the store decides it once
        self.facts.extend(decision.facts)
        self.bodies.extend(bodies)
        self.predicted = decision.snapshot
        return True


def _bodies(command: C.Command) -> tuple[tuple[str, bytes], ...]:
    """The frozen bodies a settlement names, as the store will freeze them (§4.2)."""
    match command:
        case C.SubmitModelResult(result=result):
            return (encode_frozen("model_result", result),)
        case C.SubmitToolResult(result=result):
            return (encode_frozen("tool_output", result.output),)
    return ()


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
