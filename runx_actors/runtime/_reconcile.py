"""Takeover: the Reconciler and ``recover_interrupted`` (spec §4.6, §6.10; RUN-CMT-7).

After opening a writer (epoch + 1) and before any Run is driven, a new owner decides per
EXECUTING target of the previous owner: KEEP (the executor still runs or has settled it),
DEFER (orphaned: stay EXECUTING), REDISPATCH (missing, offered again under the ledger's
budget) or DISPOSE (commit the recovery command). An effect is closed only on evidence —
``missing`` followed by a won ``abort`` — or on explicit ``abandon`` (INV-30, INV-31).
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio

from .. import effect
from ..protocol.commit import CommitRequest, envelope
from ..protocol.errors import (
    AbandonWithExecutorError,
    CommandConflictError,
    DispatchRetryableError,
    DispatchUnknownError,
    MissingPolicyPortsError,
    NoExecutionPortError,
    RunTerminalError,
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


#: The takeover verdicts are the effect vocabulary's (spec §6.4, §6.10).
Verdict = effect.Verdict


class MissingPolicy(enum.Enum):
    DISPOSE_MISSING = "dispose_missing"
    REDISPATCH_MISSING = "redispatch_missing"


@attrs.frozen
class Decision:
    target: RecoveryTarget
    verdict: Verdict
    reason: str = ""
    retry: bool = False

    def key(self, scope: str) -> Any:
        return effect.AssignmentKey(scope, self.target.run_id, self.target.effect)


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


class Reconciler:
    """Decides and applies takeover verdicts (§6.10). Configuration errors are raised by
    :meth:`plan`: MissingPolicyPortsError, AbandonWithExecutorError, NoExecutionPortError."""

    def __init__(self, executor: Any | None, *, abandon: bool = False,
                 missing: MissingPolicy = MissingPolicy.DISPOSE_MISSING,
                 ledger: DispatchLedger | None = None,
                 redispatch: Callable[[Any], Awaitable[None]] | None = None,
                 budget: int = 3, epoch: int = 0) -> None:
        self.executor = executor
        self.abandon = abandon
        self.missing = missing
        self.ledger = ledger
        self.redispatch = redispatch
        self.budget = budget
        self.epoch = epoch
        #: Keys left EXECUTING by the last apply (KEEP / DEFER / REDISPATCH): watch them.
        self.kept: list[Any] = []

    def _check_config(self) -> None:
        if self.missing is MissingPolicy.REDISPATCH_MISSING and (
                self.redispatch is None or self.ledger is None):
            raise MissingPolicyPortsError("REDISPATCH_MISSING needs a ledger and redispatch")
        if self.abandon and self.executor is not None:
            raise AbandonWithExecutorError("abandon=True with an executor")
        if not self.abandon and self.executor is None:
            raise NoExecutionPortError("no executor: say abandon=True explicitly")

    async def plan(self, scope: str, state: MachineState) -> tuple[Decision, ...]:
        """One Decision per EXECUTING target of *state*. Checkpoint."""
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

    async def _plan_one(self, assignment: Any, target: RecoveryTarget) -> Decision:
        assert self.executor is not None  # _check_config: no executor means abandon
        attachment = await self.executor.attach(assignment)
        st = attachment.state
        if st is effect.AttachmentState.MISSING:
            if self.missing is MissingPolicy.REDISPATCH_MISSING:
                decision = await self._redispatch(assignment, target)
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

    async def _redispatch(self, assignment: Any, target: RecoveryTarget) -> Decision | None:
        assert self.ledger is not None and self.redispatch is not None
        key = assignment.key
        state = await self.ledger.load(key)
        if state.given_up:
            return None
        if not state.owed:
            if state.planned >= self.budget:
                await self.ledger.append(key, GivenUp("budget"), seq=state.head,
                                         epoch=self.epoch)
                return None
            await self.ledger.append(key, DispatchPlanned(state.planned + 1), seq=state.head,
                                     epoch=self.epoch)
            state = await self.ledger.load(key)
        try:
            await self.redispatch(key)
        except (DispatchRetryableError, DispatchUnknownError):
            return Decision(target, Verdict.DEFER, "redispatch not confirmed", retry=True)
        except Exception as exc:
            await self.ledger.append(key, GivenUp(type(exc).__name__), seq=state.head,
                                     epoch=self.epoch)
            return None
        await self.ledger.append(key, Dispatched(state.planned), seq=state.head,
                                 epoch=self.epoch)
        return Decision(target, Verdict.REDISPATCH, f"attempt {state.planned}")

    async def apply(self, store: Any, decisions: tuple[Decision, ...]) -> int:
        """Commit the recovery command of each DISPOSE; return ACCEPTED commits.

        Stale, terminal and conflict refusals are skipped (INV-29); OwnershipLostError is
        raised.
        """
        accepted = 0
        for d in decisions:
            if d.verdict is not Verdict.DISPOSE:
                self.kept.append(d.key(store.scope))
                continue
            command_id, command = recovery_command(d.target)
            request = CommitRequest(0, envelope(d.target.run_id, command_id, command))
            try:
                result = await store.commit(request)
            except (StaleRuntimeError, RunTerminalError, CommandConflictError):
                continue
            if result.status.value == "accepted":
                accepted += 1
        return accepted


async def recover_interrupted(writer: Any, reconciler: Reconciler) -> int:
    """Run takeover once over every active Run of *writer* (RUN-CMT-7).

    Returns the number of ACCEPTED recovery commits (0 on a repeat). Raises the
    reconciler's configuration errors and OwnershipLostError.
    """
    store = writer.run_store()
    total = 0
    for run_id, snapshot in sorted(writer.projection().items()):
        decisions = await reconciler.plan(writer.scope, snapshot.state)
        if decisions:
            total += await reconciler.apply(store, decisions)
        del run_id
    return total
