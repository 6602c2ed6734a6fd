"""The core model's Run semantics: the reference's environment driving the real core.

``runx_spec._moves`` is the one definition of the environment (owners, executor, user,
crash-and-restart, takeover, lost / duplicated / late Outcomes, dispatch outcomes, …). It
asks a *semantics* (``runx_spec._semantics.Semantics``) whatever depends on what a Run
does; :class:`CoreSemantics` answers with the real ``runx_actors.protocol``:

* ``commit`` — the reference's abstract ``Cmd`` becomes the real command the shell builds
  (``_core_commands``: real ids and digests; a takeover's disposition is the real
  ``recovery_command``), evaluated by the real ``evaluate_commit`` on an immutable
  ``ScopeLog`` (``_core_store.commit``: epoch fence first, as the memory store does);
* ``load`` — the snapshot a ``load`` returned at that position, not a re-fold;
* ``plan`` — the implementation's ``plan_next`` on that snapshot;
* ``executing`` — the real ``recovery_targets``;
* ``image`` — the refinement mapping onto the reference's values (``_core_world``).

Every id the core derives is compared with the reference's derivation (ghost ``IDS``).
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterator
from typing import Any

from ...protocol import commands as C
from ...protocol import facts as F
from ...protocol.plan import (
    Idle,
    NeedModelRequest,
    RecoveryTarget,
    StartModelCall,
    StartToolCalls,
    WithdrawPrepared,
    recovery_command,
    recovery_targets,
)
from ...protocol.state import MachineState, ModelStep, ToolStep
from ...protocol.values import RunStatus, ToolCallStatus
from . import _core_commands as cmds
from . import _core_spec as spec
from ._core_forged import forged_outcomes
from ._core_impl import Impl
from ._core_store import (
    ACCEPTED,
    CoreStore,
    IdentityCache,
    commit,
    commit_number,
    initial_store,
    interned,
    run_id,
)
from ._core_world import abstract_state, abstract_store

__all__ = ["CoreSemantics", "build_command"]

Built = tuple[str, C.Command]


class CoreSemantics:
    """``runx_spec._semantics.Semantics`` over the real core *impl* (see the module doc)."""

    __slots__ = ("impl",)

    def __init__(self, impl: Impl) -> None:
        self.impl = impl

    def initial_store(self, runs: int) -> CoreStore:
        """The scope the exploration starts from: *runs* Runs created with one input, epoch 1."""
        return initial_store(runs, (cmds.agent_input("in-0"),), epoch=1)

    def commit(self, ctx: Any, w: Any, r: int, cid: str, cmd: Any, epoch: int, origin: str,
               base: int) -> tuple[Any, str]:
        """Build the real command for the environment move *cmd* of Run *r* and commit it
        through the real core at *base* under *epoch*; return the new world and the commit
        status (a forged move keeps its wrong id, so the core must refuse it)."""
        core_cid, command, ids_note = build_command(run_id(r), cid, cmd, ctx.calls,
                                                    ctx.approvals, origin == "reconcile")
        if origin == "forged":  # the adversary's id is wrong on purpose: it is sent as is
            core_cid = cid
        elif ids_note:
            w = w.with_ghost(ids_note)
        store, status, ghost = commit(self.impl, w.store, r, core_cid, command, epoch, origin,
                                      base)
        if store is not w.store:
            w = spec.state.replace(w, store=store)
        if ghost:
            w = w.with_ghost(ghost)
        if status == ACCEPTED and isinstance(command, C.SubmitModelResult):
            w = _check_opened(w, r)
        return w, status

    def image(self, store: CoreStore) -> Any:
        """The reference model's view of *store* (what its invariants read)."""
        return abstract_store(store)

    def commit_key(self, store: CoreStore) -> Hashable:
        """What a commit reads of *store* (``evaluate_commit``'s ``CommitView``, the
        epoch fence): the epoch, the projection's snapshots and the commit-id index with
        each id's Run and facts — by identity (real values do not cache their hashes;
        equal values that are other objects only miss). Not the log's ghost data."""
        return commit_number(store)

    def appended(self, store: CoreStore, after: CoreStore, r: int, epoch: int, origin: str,
                 base: int) -> Any:
        """The group a commit appended to *store* (see ``runx_spec._semantics``), or None
        when *after* is not exactly :meth:`append` of it."""
        if len(after.log) != len(store.log) + 1:
            return None
        done = (after.log[-1].cid, after.log[-1].facts, after.proj[r])
        if self.append(store, r, epoch, origin, base, done) != after:
            return None
        # one object per value, so that stores reached along different paths share their
        # commit_key (which compares snapshots and facts by identity)
        return (done[0], interned(done[1]), interned(done[2]))

    def append(self, store: CoreStore, r: int, epoch: int, origin: str, base: int,
               done: Any) -> CoreStore:
        """*store* with *done* (``(command id, facts, snapshot)``) appended to Run *r*, as
        ``evaluate_and_append`` appends a decision."""
        cid, facts, snap = done
        return store.append(spec.state.Commit(cid, r, facts, epoch, store.epoch, origin, base),
                            snap)

    def load(self, store: CoreStore, r: int, position: int) -> Any:
        """The reference view of Run *r* as loaded when it was at *position*."""
        return abstract_state(_loaded(store, r, position))

    def plan(self, store: CoreStore, r: int, position: int) -> Any:
        """The real planner's next action for Run *r* at *position*, as a reference ``Cmd``
        (None when the Run ended or is idle). A function of the loaded state, *r* and
        *position*: computed once per state object (:data:`PLANS`)."""
        return PLANS.call(_plan, self.impl, _loaded(store, r, position), r, position)

    def executing(self, store: CoreStore, r: int) -> tuple[str, ...]:
        """The effect ids Run *r* has EXECUTING (the recovery targets a takeover must decide)."""
        targets: tuple[str, ...] = EXECUTING.call(_executing, store.state(r))
        return targets

    def forged(self, ctx: Any, w: Any) -> Iterator[tuple[str, Any]]:
        """The core-only forgeries (``_core_forged``): hand-built envelopes, mismatched
        ToolSpecs, bodies without digests, and facts no decide produced fed to the fold."""
        for _, (label, _status, after, ghost) in forged_outcomes(self.impl, w.store):
            w2 = w if after is None else spec.state.replace(w, store=after)
            yield label, (w2.with_ghost(ghost) if ghost else w2)


def _plan(impl: Impl, state: MachineState, r: int, position: int) -> Any:
    """``CoreSemantics.plan`` on the loaded *state*, without the cache."""
    if state.status is not RunStatus.ACTIVE:
        return None
    action = impl.plan(state)
    cur = state.current
    Cmd = spec.state.Cmd
    if isinstance(action, NeedModelRequest):
        pending = tuple(i.id for i in state.pending_inputs)
        return Cmd("Prepare", spec.state.prepare_ids(r, position)[1],
                   arg=(position, pending))
    if isinstance(action, WithdrawPrepared):
        return Cmd("Withdraw", action.step_id)
    if isinstance(action, StartModelCall):
        assert isinstance(cur, ModelStep)
        return Cmd("StartModel", cur.id, "", spec.state.model_effect(r, cur.id, cur.rejects))
    if isinstance(action, StartToolCalls):
        assert isinstance(cur, ToolStep)
        call = cur.call(action.call_ids[0])  # one start per move, in call order
        assert call is not None
        # the shell's attempt number; a correct planner only ever names PENDING calls
        seq = 0 if call.status is ToolCallStatus.PENDING else 1
        return Cmd("StartToolCall", cur.id, call.call_id,
                   spec.state.tool_effect(r, cur.id, call.call_id, seq))
    assert isinstance(action, Idle), action
    return None


def _executing(state: MachineState) -> tuple[str, ...]:
    """The EffectIDs of the real ``recovery_targets`` of *state*."""
    return tuple(t.effect for t in recovery_targets(state))


#: per (impl, state, run, position) and per state object: the plan and the
#: executing effects (the stores of a search share their snapshots' states)
PLANS = IdentityCache(1 << 16)
EXECUTING = IdentityCache(1 << 16)


def _loaded(store: CoreStore, r: int, position: int) -> MachineState:
    """The state a ``load`` of Run *r* returned at *position* (the projection if current)."""
    if position == store.position(r):
        return store.state(r)
    return store.loaded(r, position).state


@functools.cache
def build_command(run: str, cid: str, cmd: Any, calls: int, approvals: bool,
                  dispose: bool) -> tuple[str, C.Command, str]:
    """The real command for the reference's ``cmd`` as the shell builds it, with its own
    command id and an ``IDS`` note (``""`` if none) when an id the core derived (command,
    step, call, effect) differs from the reference's. *dispose*: the takeover's
    disposition (``recovery_command``). Cached, so an equal command is the same object."""
    core_cid, command = _build(run, cid, cmd, calls, approvals, dispose)
    got = (core_cid, getattr(command, "step_id", cmd.step), getattr(command, "call_id", cmd.call),
           getattr(command, "effect", cmd.effect))
    want = (cid, cmd.step, cmd.call, cmd.effect)
    note = "" if got == want else (f"IDS: {cmd.kind}: the core derived {got!r}, "
                                   f"the reference {want!r}")
    return core_cid, command, note


def _build(run: str, cid: str, cmd: Any, calls: int, approvals: bool, dispose: bool) -> Built:
    k, step, call, effect, arg = cmd.kind, cmd.step, cmd.call, cmd.effect, cmd.arg
    if dispose:
        return recovery_command(RecoveryTarget(run_id=run, step_id=step, call_id=call,
                                               effect=effect))
    if k == "AcceptInput":
        return cmds.accept_input(run, arg)
    if k == "Prepare":
        return cmds.prepare(run, *arg)
    if k == "Withdraw":
        return cmds.withdraw(run, step)
    if k == "StartModel":
        return cmds.start_model(run, step, spec.state.EFFECTS[effect].seq)
    if k == "StartToolCall":
        return cmds.start_tool(run, step, call, spec.state.EFFECTS[effect].seq)
    if k == "RecoverModel":
        return cmds.recover_model(step, effect)
    if k == "SubmitModelResult":
        tools = arg == "tools"
        return cmds.model_result(step, effect, calls if tools else 0, approvals and tools)
    if k == "SubmitModelFailure":
        return cmds.model_failure(step, effect)
    if k == "RejectModelResult":
        return cmds.reject_model_result(step, effect, arg == "retry")
    if k == "SubmitToolResult":
        return cmds.tool_result(step, call, effect)
    if k == "SubmitToolFailure":
        return cmds.tool_failure(step, call, effect, arg == "unknown")
    if k == "ApproveToolCall":
        return cmds.approve(run, step, call, arg)
    if k == "RejectToolCall":
        return cmds.reject(run, step, call, arg)
    if k == "CancelRun":
        return cmds.cancel(cid)
    raise ValueError(f"unknown command {k!r}")


def _ids(w: Any, what: str, core: object, ref: object) -> Any:
    """Ghost ``IDS`` when an id the core derived differs from the reference's."""
    if core == ref:
        return w
    return w.with_ghost(f"IDS: {what}: the core derived {core!r}, the reference {ref!r}")


def _check_opened(w: Any, r: int) -> Any:
    """After an accepted model result: the ids of the ToolStep the real ``decide`` opened
    are the reference's (tool step from its source, calls from their index, response ids)."""
    for f in w.store.log[-1].facts:
        if isinstance(f, F.ToolStepOpened):
            w = _ids(w, "ToolStep id", f.step_id, spec.state.tool_step_id(f.source))
            for i, b in enumerate(f.calls):
                w = _ids(w, f"call {i} id", b.call_id, spec.state.call_id(f.source, i))
                if b.response is not None:
                    w = _ids(w, f"call {i} response id", b.response.id,
                             spec.state.response_id(r, f.step_id, b.call_id))
    return w
