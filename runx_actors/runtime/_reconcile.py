"""Takeover: the Reconciler and ``recover_interrupted`` (spec §4.6, §6.10; RUN-CMT-7,
RUN-EXE-15, RUN-EXE-16).

After opening a writer (epoch + 1) and before any Run is driven, a new owner decides per
EXECUTING target of the previous owner: KEEP (the executor still runs or has settled it),
DEFER (orphaned: stay EXECUTING), REDISPATCH (missing, offered again under the ledger's
budget) or DISPOSE (commit the recovery command). An effect is closed only on evidence —
``missing`` followed by a won ``abort`` — or on explicit ``abandon`` (INV-30, INV-31).

After ``apply``, :meth:`Reconciler.watch` keeps waiting, inside a nursery the caller owns,
for every key left EXECUTING, and tries owed redispatches again every ``requeue_after``
seconds of trio time until they are dispatched or the budget is spent.
"""

from __future__ import annotations

import enum
import logging
import math
from collections.abc import Awaitable, Callable
from numbers import Real
from typing import Any

import attrs
import trio

from .. import effect
from ..protocol.commit import CommitRequest, envelope
from ..protocol.errors import (
    AbandonWithExecutorError,
    CommandConflictError,
    DispatchRejectedError,
    DispatchRetryableError,
    DispatchUnknownError,
    EffectNotExecutingError,
    ExecutionNotFoundError,
    FrozenValueMissingError,
    MissingPolicyPortsError,
    NoExecutionPortError,
    OutcomeUnavailableError,
    OwnershipLostError,
    RunTerminalError,
    RuntimeClosedError,
    StaleRuntimeError,
    TargetWithoutEffectError,
    ValidationError,
)
from ..protocol.plan import RecoveryTarget, recovery_command, recovery_targets
from ..protocol.state import MachineState, ModelStep, ToolStep
from ._ledger import Dispatched, DispatchLedger, DispatchPlanned, GivenUp

__all__ = [
    "Verdict", "MissingPolicy", "Decision", "Reconciler", "recover_interrupted",
    "assignment_from_target",
]

_log = logging.getLogger("runx_actors.runtime.reconcile")

#: ``on_outcome(outcome)``: settle an Outcome (default: ``ActorRuntime.deliver``).
OutcomeCallback = Callable[[Any], Awaitable[object]]
#: ``on_fail(key, error)``: the key is no longer watched; its target stays EXECUTING.
FailCallback = Callable[[Any, Exception], Awaitable[object]]

#: The takeover verdicts are the effect vocabulary's (spec §6.4, §6.10).
Verdict = effect.Verdict


class MissingPolicy(enum.Enum):
    """What the Reconciler does with a target whose key the executor reports ``missing``
    at takeover (§6.10; RUN-EXE-16): ``DISPOSE_MISSING`` aborts the key, then disposes
    of the call; ``REDISPATCH_MISSING`` offers it again through the reconciler's
    ``redispatch`` route under its DispatchLedger (RUN-ACT-6)."""

    DISPOSE_MISSING = "dispose_missing"
    REDISPATCH_MISSING = "redispatch_missing"


@attrs.frozen
class Decision:
    """The verdict for one target. ``retry``: an owed redispatch is tried again after
    ``requeue_after``; ``transient``: that retry does not count against the budget (the
    runtime behind the route was closed or restarting, RUN-ACT-6)."""

    target: RecoveryTarget
    verdict: Verdict
    reason: str = ""
    retry: bool = False
    transient: bool = False

    def key(self, scope: str) -> effect.AssignmentKey:
        """The AssignmentKey ``(scope, run id, effect id)`` of this target in *scope*."""
        return effect.AssignmentKey(scope, self.target.run_id, self.target.effect)


#: What a redispatch may raise that is a real, final refusal of the key: it is recorded
#: ``given_up`` at once (RUN-ACT-6). Retryable / unknown dispatch errors and every other
#: error (a closing runtime, a store hiccup) defer the owed attempt instead.
_FINAL_REDISPATCH_ERRORS: tuple[type[Exception], ...] = (
    DispatchRejectedError, EffectNotExecutingError, FrozenValueMissingError)
#: Errors that say "the runtime behind the route is not there right now": not counted.
_CLOSED = (trio.ClosedResourceError, RuntimeClosedError)


def assignment_from_target(scope: str, state: MachineState, target: RecoveryTarget) -> Any:
    """The digest-level Assignment of *target*, rebuilt from the state alone (§6.1)."""
    cur = state.current
    if not target.call_id:
        if not isinstance(cur, ModelStep) or cur.id != target.step_id:
            raise ValidationError("model target is not the current step", target=target)
        body: Any = effect.ModelAssignment(model=cur.model, request_digest=cur.request_digest,
                                           request=None)
    else:
        call = cur.call(target.call_id) if isinstance(cur, ToolStep) else None
        if call is None:
            raise ValidationError("tool target is not a call of the current step",
                                  target=target)
        body = effect.ToolAssignment(
            tool_ref=call.tool_ref, definition_digest=call.definition_digest,
            arguments=call.arguments, policy=call.policy, replay=call.replay,
            placement=call.placement)
    return effect.Assignment(session=scope, run_id=target.run_id, step_id=target.step_id,
                             call_id=target.call_id, effect=target.effect, target=None,
                             body=body)


def _check_requeue_after(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValidationError("requeue_after must be a number of seconds",
                              requeue_after=value)
    seconds = float(value)
    if not (seconds > 0 and math.isfinite(seconds)):
        raise ValidationError("requeue_after must be a finite number of seconds > 0",
                              requeue_after=value)
    return seconds


async def _log_failure(key: Any, error: Exception) -> None:
    """The default ``on_fail``: log; the target stays EXECUTING."""
    await trio.lowlevel.checkpoint()
    _log.warning("kept effect %r is no longer watched, its target stays EXECUTING: %r",
                 key, error)


@attrs.frozen
class _Ports:
    """What :meth:`Reconciler.watch` resolved: where to wait and whom to tell."""

    watcher: effect.Watcher
    on_outcome: OutcomeCallback
    on_fail: FailCallback


class Reconciler:
    """Decides and applies takeover verdicts, then keeps waiting for what it kept (§6.10;
    RUN-CMT-7, RUN-EXE-15, RUN-EXE-16).

    Arguments:
        executor: the ExecutionPort asked ``attach``/``abort`` (None only with *abandon*).
        abandon: every target is DISPOSE, with no attach and no abort.
        missing: what a ``missing`` key gets: DISPOSE_MISSING (abort, then dispose) or
            REDISPATCH_MISSING (offer it again through *redispatch* under *ledger*).
        ledger, redispatch: the DispatchLedger and the route ``redispatch(key)`` (normally
            ``ActorRuntime.run(key.run_id).redispatch``) that REDISPATCH_MISSING needs.
        budget: attempts per key the ledger may plan (``dispatch_planned(n)``, n ≤
            budget), and redispatch calls this reconciler makes for one owed attempt.
        watcher: the Watcher :meth:`watch` registers kept keys with (default: the one
            given to :meth:`watch`, normally the runtime's).
        on_outcome: ``await on_outcome(outcome)`` settles a kept key's Outcome (default:
            the one given to :meth:`watch`, normally ``ActorRuntime.deliver``).
        on_fail: ``await on_fail(key, error)`` when a kept key stops being watched
            without an Outcome — a definitive read error (``ExecutionNotFoundError``,
            ``OutcomeUnavailableError``) or an error of a re-plan; the target stays
            EXECUTING (default: log a warning).
        requeue_after: seconds of trio time between tries of an owed redispatch
            (default 5.0, D-15).
        epoch: the writer's epoch, carried by ledger appends (INV-32).

    Raises:
        ValidationError: *requeue_after* is not a finite number > 0, or *budget* is not
            an int >= 0 (at construction).
        MissingPolicyPortsError, AbandonWithExecutorError, NoExecutionPortError: the
            configuration checks, raised by :meth:`plan`.
    """

    def __init__(self, executor: Any | None, *, abandon: bool = False,
                 missing: MissingPolicy = MissingPolicy.DISPOSE_MISSING,
                 ledger: DispatchLedger | None = None,
                 redispatch: Callable[[Any], Awaitable[None]] | None = None,
                 budget: int = 3, watcher: effect.Watcher | None = None,
                 on_outcome: OutcomeCallback | None = None,
                 on_fail: FailCallback | None = None,
                 requeue_after: float = 5.0, epoch: int = 0) -> None:
        self.executor = executor
        self.abandon = abandon
        self.missing = missing
        self.ledger = ledger
        self.redispatch = redispatch
        self.budget = budget
        self.watcher = watcher
        self.on_outcome = on_outcome
        self.on_fail = on_fail
        if not isinstance(budget, int) or isinstance(budget, bool) or budget < 0:
            raise ValidationError("budget must be an int >= 0", budget=budget)
        self.requeue_after = _check_requeue_after(requeue_after)
        self.epoch = epoch
        #: Keys left EXECUTING by apply (KEEP / DEFER / REDISPATCH), in order: watch them.
        self.kept: list[Any] = []
        #: The decisions behind ``kept`` that :meth:`watch` has not taken yet, by key.
        self._unwatched: dict[Any, Decision] = {}

    def _check_config(self) -> None:
        if self.missing is MissingPolicy.REDISPATCH_MISSING and (
                self.redispatch is None or self.ledger is None):
            raise MissingPolicyPortsError("REDISPATCH_MISSING needs a ledger and redispatch")
        if self.abandon and self.executor is not None:
            raise AbandonWithExecutorError("abandon=True with an executor")
        if not self.abandon and self.executor is None:
            raise NoExecutionPortError("no executor: say abandon=True explicitly")

    async def plan(self, scope: str, state: MachineState) -> tuple[Decision, ...]:
        """One Decision per EXECUTING target of *state*. Checkpoint.

        A redispatch that raised DispatchRetryableError, DispatchUnknownError or any error
        other than a real refusal (DispatchRejectedError, EffectNotExecutingError,
        FrozenValueMissingError) gives ``Decision(DEFER, retry=True)``: the attempt stays
        owed; :meth:`watch` tries it again after ``requeue_after`` seconds. A closed or
        restarting runtime (RuntimeClosedError, ``trio.ClosedResourceError``) is
        ``transient`` and does not count against the budget (RUN-ACT-6).
        OwnershipLostError is raised.

        Raises: the configuration errors (see the class), TargetWithoutEffectError,
        ValidationError (an attach/abort answer outside the vocabulary), and errors of
        the executor and the ledger.
        """
        await trio.lowlevel.checkpoint()
        self._check_config()
        out = []
        for target in recovery_targets(state):
            if not target.effect:
                raise TargetWithoutEffectError("recovery target without effect", target=target)
            if self.abandon:
                out.append(Decision(target, Verdict.DISPOSE, "abandon"))
                continue
            assignment = assignment_from_target(scope, state, target)
            out.append(await self._plan_one(assignment, target))
        return tuple(out)

    async def _plan_one(self, assignment: Any, target: RecoveryTarget, *,
                        exhausted: bool = False) -> Decision:
        assert self.executor is not None  # _check_config: no executor means abandon
        attachment = await self.executor.attach(assignment)
        st = attachment.state
        if st is effect.AttachmentState.MISSING:
            if self.missing is MissingPolicy.REDISPATCH_MISSING:
                decision = await self._redispatch(assignment, target, exhausted=exhausted)
                if decision is not None:
                    return decision
            return await self._abort_then_dispose(assignment, target)
        if not isinstance(st, effect.AttachmentState):
            raise ValidationError(f"unknown attachment state {st!r}", state=st)
        verdict = st.verdict
        if verdict is Verdict.DEFER and isinstance(self.executor, effect.Recoverer):
            await self.executor.recover_execution(assignment.key)
        return Decision(target, verdict, st.value)

    async def _abort_then_dispose(self, assignment: Any, target: RecoveryTarget) -> Decision:
        assert self.executor is not None
        attachment = await self.executor.abort(assignment)  # INV-31: abort before dispose
        st = attachment.state
        if st is effect.AttachmentState.ABORTED:
            return Decision(target, Verdict.DISPOSE, "missing, aborted")
        if st is effect.AttachmentState.ORPHANED:
            return Decision(target, Verdict.DEFER, "acceptance won the abort race")
        if st in (effect.AttachmentState.ACTIVE, effect.AttachmentState.TERMINAL):
            return Decision(target, Verdict.KEEP, "acceptance won the abort race")
        raise ValidationError(f"abort answered {st!r}", state=st)

    async def _redispatch(self, assignment: Any, target: RecoveryTarget, *,
                          exhausted: bool = False) -> Decision | None:
        """Step 4 of §6.10 for a missing key; None means "go to the abort step".

        *exhausted*: this reconciler already made ``budget`` calls for the owed attempt,
        so it gives up (``given_up("budget")``) instead of calling again.
        """
        assert self.ledger is not None and self.redispatch is not None
        key = assignment.key
        state = await self.ledger.load(key)
        if state.given_up:
            return None
        if exhausted or (not state.owed and state.planned >= self.budget):
            await self.ledger.append(key, GivenUp("budget"), seq=state.head,
                                     epoch=self.epoch)
            return None
        if not state.owed:
            await self.ledger.append(key, DispatchPlanned(state.planned + 1), seq=state.head,
                                     epoch=self.epoch)
            state = await self.ledger.load(key)
        try:
            await self.redispatch(key)
        except OwnershipLostError:
            raise  # terminal for this owner (§4.4), never a verdict on the key
        except (DispatchRetryableError, DispatchUnknownError):
            return Decision(target, Verdict.DEFER, "redispatch not confirmed", retry=True)
        except _CLOSED as exc:
            return Decision(target, Verdict.DEFER, f"runtime not open: {exc!r}",
                            retry=True, transient=True)
        except _FINAL_REDISPATCH_ERRORS as exc:
            await self.ledger.append(key, GivenUp(type(exc).__name__), seq=state.head,
                                     epoch=self.epoch)
            return None
        except Exception as exc:  # transient until proven otherwise (RUN-ACT-6)
            _log.warning("redispatch of %r failed, deferred: %r", key, exc)
            return Decision(target, Verdict.DEFER, f"redispatch failed: {exc!r}",
                            retry=True)
        await self.ledger.append(key, Dispatched(state.planned), seq=state.head,
                                 epoch=self.epoch)
        return Decision(target, Verdict.REDISPATCH, f"attempt {state.planned}")

    async def apply(self, store: Any, decisions: tuple[Decision, ...]) -> int:
        """Commit the recovery command of each DISPOSE; return ACCEPTED commits.

        Every other decision's key is added to :attr:`kept` and left for :meth:`watch`.
        Stale, terminal and conflict refusals are skipped (INV-29); OwnershipLostError is
        raised.
        """
        accepted = 0
        for d in decisions:
            if d.verdict is not Verdict.DISPOSE:
                key = d.key(store.scope)
                self.kept.append(key)
                self._unwatched.pop(key, None)  # a later pass's decision replaces it
                self._unwatched[key] = d
                continue
            if await self._dispose(store, d):
                accepted += 1
        return accepted

    async def _dispose(self, store: Any, decision: Decision) -> bool:
        """Commit *decision*'s recovery command; True when ACCEPTED."""
        command_id, command = recovery_command(decision.target)
        request = CommitRequest(0, envelope(decision.target.run_id, command_id, command))
        try:
            result = await store.commit(request)
        except (StaleRuntimeError, RunTerminalError, CommandConflictError):
            return False
        return bool(result.status.value == "accepted")

    async def watch(self, store: Any, *, watcher: effect.Watcher | None = None,
                    on_outcome: OutcomeCallback | None = None,
                    on_fail: FailCallback | None = None,
                    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Keep waiting for every key :meth:`apply` left EXECUTING (§6.10, Generation A).

        Start it in a nursery you own, after :func:`recover_interrupted`:
        ``nursery.start_soon(rec.watch, run_store, ...)`` or ``await
        nursery.start(rec.watch, ...)`` (started once every key is watched). It takes
        the kept decisions (a second call watches only keys kept since) and returns when
        each of them is finished:

        * KEEP / DEFER / REDISPATCH: wait for the key through the Watcher (whose orphan
          probe asks a Recoverer to adopt an orphaned key) and ``await on_outcome(outcome)``.
          A key waits as a Watcher registration, with no task of its own until its
          Outcome (or read error) arrives (RUN-ACT-9).
        * DEFER with ``retry`` (an owed redispatch): after ``requeue_after`` seconds of
          trio time, re-load the Run, re-attach and re-plan the target: the owed attempt
          is offered again through ``redispatch``; when dispatched (or found active,
          terminal or orphaned) the key is waited for as above. After ``budget`` calls
          for the owed attempt the ledger records ``given_up("budget")`` and the target
          goes through abort-then-dispose (RUN-EXE-16): its recovery command is
          committed through *store*. A target no longer EXECUTING ends the wait quietly.
        * A definitive read error, or an error of a re-plan or of the disposing commit,
          goes to ``await on_fail(key, error)``; the target stays EXECUTING.

        Arguments: *store* is the writer's RunStore (``writer.run_store()``); *watcher*,
        *on_outcome*, *on_fail* are used where the constructor left None (``open_runtime``
        passes the runtime's Watcher and ``ActorRuntime.deliver``).

        Cancellation: cancelling the enclosing scope stops every wait; nothing is
        committed half-way (each commit is one store call).
        Raises:
            ValidationError: no watcher or no on_outcome, from either source.
            OwnershipLostError: another writer took over the scope (from a commit or
                ``on_outcome``); the other keys' tasks are cancelled and the error leaves
                inside an ExceptionGroup, as trio nurseries raise.
        """
        watcher = self.watcher if self.watcher is not None else watcher
        on_outcome = self.on_outcome if self.on_outcome is not None else on_outcome
        if watcher is None or on_outcome is None:
            raise ValidationError("Reconciler.watch needs a watcher and on_outcome")
        ports = _Ports(watcher=watcher, on_outcome=on_outcome,
                       on_fail=self.on_fail or on_fail or _log_failure)
        decisions = tuple(self._unwatched.items())  # (key, decision): apply built the key
        self._unwatched.clear()
        async with trio.open_nursery() as nursery:
            kept = _Kept(self, nursery, ports)
            self._start_waits(decisions, kept, nursery, store, ports)
            # a kept key waits as its registration alone: this frame lives as long as the
            # wait and keeps no key's Decision (nor its target) with it
            del decisions
            task_status.started()
            await kept.wait()

    def _start_waits(self, decisions: tuple[tuple[Any, Decision], ...], kept: _Kept,
                     nursery: trio.Nursery, store: Any, ports: _Ports) -> None:
        """A Watcher registration per plain kept key, a ``_follow`` task per owed one."""
        for key, decision in decisions:
            if decision.retry:
                nursery.start_soon(self._follow, store, decision, ports,
                                   name=f"runx-reconcile {decision.target.effect}")
            else:  # a plain wait: a Watcher registration, no task until it ends
                kept.watch(key)

    async def _follow(self, store: Any, decision: Decision, ports: _Ports) -> None:
        """Re-plan *decision* while a redispatch is owed, then dispose of it or wait."""
        key = decision.key(store.scope)
        assignment: Any = None
        tries = 1  # plan made the first redispatch call
        try:
            while decision.retry:
                await trio.sleep(self.requeue_after)
                replanned = await self._replan(store, decision.target,
                                               exhausted=tries >= self.budget)
                if replanned is None:
                    return  # no longer EXECUTING under this effect: nothing is owed
                decision, assignment = replanned
                if decision.retry and not decision.transient:
                    tries += 1
            if decision.verdict is Verdict.DISPOSE:
                accepted = await self._dispose(store, decision)
                _log.info("re-planned effect %r disposed (%s; accepted=%s)", key,
                          decision.reason, accepted)
                return
        except OwnershipLostError:
            raise  # terminal for this owner (§4.4)
        except _CLOSED:
            return  # the runtime (behind the redispatch route) is closing
        except Exception as exc:
            await self._report(ports, key, exc)
            return
        await self._settle(key, assignment, ports)

    async def _replan(self, store: Any, target: RecoveryTarget, *,
                      exhausted: bool) -> tuple[Decision, Any] | None:
        snapshot = await store.load(target.run_id)
        state = snapshot.state
        current = next((t for t in recovery_targets(state) if t.effect == target.effect),
                       None)
        if current is None:
            return None
        assignment = assignment_from_target(store.scope, state, current)
        return await self._plan_one(assignment, current, exhausted=exhausted), assignment

    async def _settle(self, key: Any, assignment: Any, ports: _Ports) -> None:
        try:
            outcome = await ports.watcher.await_outcome(key, assignment=assignment)
        except (ExecutionNotFoundError, OutcomeUnavailableError) as exc:
            await self._report(ports, key, exc)
            return
        except trio.ClosedResourceError:
            return  # the Watcher closed: the runtime is leaving
        await self._deliver(outcome, ports)

    async def _deliver(self, outcome: Any, ports: _Ports) -> None:
        """``await on_outcome(outcome)``; OwnershipLostError is raised, a closing runtime
        ends quietly, any other error is logged (the target stays EXECUTING)."""
        key = outcome.key
        try:
            await ports.on_outcome(outcome)
        except OwnershipLostError:
            raise  # terminal for this owner (§4.4)
        except (trio.ClosedResourceError, RuntimeClosedError):
            return  # the runtime is closing
        except Exception:
            _log.exception("settling the kept effect %r failed", key)

    async def _report(self, ports: _Ports, key: Any, error: Exception) -> None:
        try:
            await ports.on_fail(key, error)
        except OwnershipLostError:
            raise
        except Exception:
            _log.exception("on_fail for %r failed (error %r)", key, error)


class _Kept:
    """The keys :meth:`Reconciler.watch` waits for without a task each: a Watcher
    registration per key; a task is started only to settle (or report) the Outcome."""

    __slots__ = ("_idle", "_nursery", "_outstanding", "_ports", "_reconciler")

    def __init__(self, reconciler: Reconciler, nursery: trio.Nursery, ports: _Ports) -> None:
        self._reconciler = reconciler
        self._nursery = nursery
        self._ports = ports
        self._outstanding = 0
        self._idle = trio.Event()

    def watch(self, key: Any) -> None:
        try:  # _Kept is every registration's Receiver: no bound method per kept key
            self._ports.watcher.watch_for(key, self)
        except trio.ClosedResourceError:
            return  # the Watcher closed: the runtime is leaving
        self._outstanding += 1

    def outcome_arrived(self, outcome: Any) -> None:
        """Receiver: settle the kept key's Outcome in a task of its own."""
        self._nursery.start_soon(self._settle, outcome, name="runx-reconcile-settle")

    def read_failed(self, key: Any, error: Exception) -> None:
        """Receiver: report the kept key's definitive read error in a task."""
        self._nursery.start_soon(self._report, key, error, name="runx-reconcile-report")

    async def _settle(self, outcome: Any) -> None:
        try:
            await self._reconciler._deliver(outcome, self._ports)
        finally:
            self._one_done()

    async def _report(self, key: Any, error: Exception) -> None:
        try:
            await self._reconciler._report(self._ports, key, error)
        finally:
            self._one_done()

    def _one_done(self) -> None:
        self._outstanding -= 1
        if self._outstanding <= 0:
            self._idle.set()

    async def wait(self) -> None:
        """Return when every key was settled or reported, or the Watcher closed (its
        registrations are then dropped without a callback). Checkpoint."""
        watcher = self._ports.watcher
        while self._outstanding > 0 and not getattr(watcher, "closed", False):
            with trio.move_on_after(self._reconciler.requeue_after):
                await self._idle.wait()
        await trio.lowlevel.checkpoint()


async def recover_interrupted(writer: Any, reconciler: Reconciler) -> int:
    """Run takeover once over every active Run of *writer* (RUN-CMT-7).

    Returns the number of ACCEPTED recovery commits (0 on a repeat). Keys left EXECUTING
    are in ``reconciler.kept``; start :meth:`Reconciler.watch` afterwards to settle them
    and retry owed redispatches (``open_runtime`` does). Raises the reconciler's
    configuration errors and OwnershipLostError.
    """
    store = writer.run_store()
    total = 0
    for run_id, snapshot in sorted(writer.projection().items()):
        decisions = await reconciler.plan(writer.scope, snapshot.state)
        if decisions:
            total += await reconciler.apply(store, decisions)
        del run_id
    return total
