"""The moves of the core model: the reference's environment, the real core's Run semantics.

This module mirrors ``spec/runx_spec/_moves.py`` move for move and label for label: the
same owners (the loop and a takeover owner), the same executor with execution records,
the same user and the same faults (crash-and-restart, worker crash, takeover, lost /
duplicated / late Outcomes, dispatch accepted / retryable / unknown). The reference's move
functions call its own ``commit`` and ``fold`` directly, so they cannot be pointed at the
real core without patching its module; the environment code is therefore repeated here,
and what differs is only what a Run *does*:

* every command is a real ``runx_actors.protocol`` command with derived ids and digests
  (``_core_commands``), committed through the real ``evaluate_commit`` on an immutable
  ``ScopeLog`` (``_core_store.commit``: epoch fence first, as the memory store does);
* the loop plans with the implementation's ``plan_next`` on the snapshot it loaded;
  takeover disposes with the real ``recovery_targets`` / ``recovery_command``;
* an owner's snapshot is the one a ``load`` returned at that position, not a re-fold.

Every id the core derives is compared with the reference's derivation (ghost ``IDS``).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs

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
from ...protocol.values import ModelStepStatus, RunStatus, ToolCallStatus
from . import _core_commands as cmds
from . import _core_spec as spec
from ._core_impl import Impl
from ._core_store import OK, commit, initial_store, run_id
from ._core_world import CoreWorld, Owner, Rec, replace

__all__ = ["CoreCtx", "OWNERS", "moves", "view", "view_position", "executing",
           "initial_world"]

Move = tuple[str, CoreWorld]
Built = tuple[str, C.Command]
OWNERS = ("owner1", "owner2")
MALFORMED_RETRIES = 1  # Settings.malformed_retries of the modelled preset
name = spec.name


@attrs.frozen
class CoreCtx:
    """The bounds of the exploration and the implementation under check."""

    runs: int
    calls: int
    inputs: int
    max_prepares: int
    approvals: bool
    malformed: bool
    failures: bool
    cancel: bool
    stale_reads: bool  # the current owner may commit from a snapshot older than the store
    impl: Impl


# --------------------------------------------------------------------------- helpers


def _commit(ctx: CoreCtx, w: CoreWorld, r: int, built: Built, epoch: int, origin: str,
            base: int = -1) -> tuple[CoreWorld, str]:
    cid, command = built
    store, status, ghost = commit(ctx.impl, w.store, r, cid, command, epoch, origin, base)
    if store is not w.store:
        w = replace(w, store=store)
    if ghost:
        w = w.with_ghost(ghost)
    return w, status


def view_position(w: CoreWorld, o: int, r: int) -> int:
    """RunPosition of Run ``r`` in owner ``o``'s snapshot.

    A fenced writer's projection holds exactly the commits appended while the scope was at
    its epoch or lower, and never moves again. The current writer's loop sees the
    projection, or (``stale_reads``) the snapshot it loaded last (``Owner.views``).
    """
    owner = w.owners[o]
    if owner.epoch < w.store.epoch:
        return sum(len(c.facts) for c in w.store.log
                   if c.run == r and c.store_epoch <= owner.epoch) - 1
    return owner.views[r] if owner.views else w.store.position(r)


def view(w: CoreWorld, o: int, r: int) -> MachineState:
    """The state of Run ``r`` in owner ``o``'s snapshot (what ``load`` returned then)."""
    pos = view_position(w, o, r)
    if pos == w.store.position(r):
        return w.store.state(r)
    return w.store.loaded(r, pos).state


def executing(state: MachineState) -> tuple[str, ...]:
    """EffectIDs of the EXECUTING targets (the real ``recovery_targets``)."""
    return tuple(t.effect for t in recovery_targets(state))


def _seen(ctx: CoreCtx, w: CoreWorld, o: int, r: int, status: str) -> CoreWorld:
    """After a commit: OwnershipLostError stops the runtime for good (§4.4) — it keeps only
    an unfinished section; otherwise the loop holds the returned snapshot or reloads."""
    owner = w.owners[o]
    if status == "fenced":
        return w.with_owner(o, Owner(epoch=owner.epoch, alive=True, phase="fenced",
                                     section=owner.section, offers=owner.offers))
    if ctx.stale_reads and owner.views and owner.epoch == w.store.epoch:
        views = tuple(w.store.position(i) if i == r else v for i, v in enumerate(owner.views))
        return w.with_owner(o, replace(owner, views=views))
    return w


def _set(w: CoreWorld, o: int, **changes: object) -> CoreWorld:
    return w.with_owner(o, replace(w.owners[o], **changes))


def _info(effect: str) -> Any:
    return spec.state.EFFECTS[effect]


def _started_in_log(w: CoreWorld, effect: str) -> bool:
    return any(isinstance(f, F.ModelStepStarted | F.ToolCallStarted) and f.effect == effect
               for f in w.store.streams[_info(effect).run])


def _ids(w: CoreWorld, what: str, core: object, ref: object) -> CoreWorld:
    """Ghost ``IDS`` when an id the core derived differs from the reference's."""
    if core == ref:
        return w
    return w.with_ghost(f"IDS: {what}: the core derived {core!r}, the reference {ref!r}")


def _check_opened(w: CoreWorld, r: int) -> CoreWorld:
    """After an accepted settlement: the ids of a ToolStep it opened are the reference's
    (tool step from its source, calls from their index, response ids)."""
    for f in w.store.log[-1].facts:
        if isinstance(f, F.ToolStepOpened):
            w = _ids(w, "ToolStep id", f.step_id, spec.state.tool_step_id(f.source))
            for i, b in enumerate(f.calls):
                w = _ids(w, f"call {i} id", b.call_id, spec.state.call_id(f.source, i))
                if b.response is not None:
                    w = _ids(w, f"call {i} response id", b.response.id,
                             spec.state.response_id(r, f.step_id, b.call_id))
    return w


# --------------------------------------------------------------------------- takeover


def _open(ctx: CoreCtx, w: CoreWorld, o: int, what: str) -> Move:
    """SessionStore.open: the persisted epoch + 1; the new owner must reconcile before it
    drives (§4.6)."""
    epoch = w.store.epoch + 1 if ctx.impl.bump_epoch else w.store.epoch
    w = replace(w, store=w.store.with_epoch(epoch))
    views = tuple(w.store.position(r) for r in range(ctx.runs)) if ctx.stale_reads else ()
    w = w.with_owner(o, Owner(epoch=epoch, alive=True, phase="reconcile", views=views))
    return f"{OWNERS[o]}: {what}(epoch={epoch})", w


def _dispose(ctx: CoreCtx, w: CoreWorld, o: int, effect: str) -> tuple[CoreWorld, str]:
    """Commit the real ``recovery_command(target)`` (§2.10) under its recovery id."""
    info = _info(effect)
    target = RecoveryTarget(run_id=run_id(info.run), step_id=info.step, call_id=info.call,
                            effect=effect)
    w, status = _commit(ctx, w, info.run, recovery_command(target), w.owners[o].epoch,
                        "reconcile")
    return _seen(ctx, w, o, info.run, status), status


def _reconcile_moves(ctx: CoreCtx, w: CoreWorld, o: int) -> Iterator[Move]:
    """recover_interrupted with DISPOSE_MISSING (§4.6, §6.10), one target at a time.

    ``attach`` of a live record (running → active, settled/acked → terminal: KEEP;
    orphaned: DEFER) leaves everything as it is, so only the other verdicts are moves.
    """
    owner, me = w.owners[o], OWNERS[o]
    waiting = False
    for snap in w.store.proj:
        for e in executing(snap.state):
            rec = w.rec(e)
            if e in owner.aborting:
                waiting = True
            elif rec is None:
                waiting = True
                yield (f"{me}: Attach({name(e)}) -> missing",
                       _set(w, o, aborting=(*owner.aborting, e)))
            elif rec.status == "aborted":
                waiting = True
                w2, status = _dispose(ctx, w, o, e)
                yield f"{me}: Attach({name(e)}) -> {rec.status}: dispose -> {status}", w2
    for e in owner.aborting:
        rest = tuple(x for x in owner.aborting if x != e)
        rec = w.rec(e)
        if rec is None or rec.status == "aborted":
            tomb = Rec(e, "aborted") if rec is None else replace(rec, status="aborted")
            w2, status = _dispose(ctx, _set(w.with_rec(tomb), o, aborting=rest), o, e)
            yield f"{me}: Abort({name(e)}) -> aborted: dispose -> {status}", w2
        else:  # an acceptance won the race for the key's first slot (INV-31): KEEP
            yield f"{me}: Abort({name(e)}) -> {rec.status}: keep", _set(w, o, aborting=rest)
    if not waiting and not owner.aborting:
        yield f"{me}: ReconcileDone", _set(w, o, phase="drive")


# --------------------------------------------------------------------------- the loop


def _start(ctx: CoreCtx, w: CoreWorld, o: int, r: int, built: Built, label: str) -> Move:
    """The start barrier (§5.6 step 3, §5.7): commit the start, then dispatch only if the
    returned snapshot shows the target EXECUTING under this effect (INV-25)."""
    effect = built[1].effect  # type: ignore[union-attr]
    w, status = _commit(ctx, w, r, built, w.owners[o].epoch, "loop", view_position(w, o, r))
    granted = status in OK and effect in executing(w.store.state(r))
    w = _seen(ctx, w, o, r, status)
    if granted:
        w = _set(w, o, section=effect, offers=0)
    return f"{label} -> {status}", w


def _plan_moves(ctx: CoreCtx, w: CoreWorld, o: int, r: int) -> Iterator[Move]:
    """The implementation's ``plan_next`` on the owner's snapshot (§2.9) and the commit it
    leads to."""
    me = OWNERS[o]
    state, base = view(w, o, r), view_position(w, o, r)
    if state.status is not RunStatus.ACTIVE:
        return
    rid = run_id(r)
    action = ctx.impl.plan(state)
    if isinstance(action, NeedModelRequest):
        prepared = sum(isinstance(f, F.ModelStepPrepared) for f in w.store.streams[r])
        if prepared < ctx.max_prepares:
            pending = tuple(i.id for i in state.pending_inputs)
            built = cmds.prepare(rid, base, pending)
            step = built[1].step_id  # type: ignore[union-attr]
            w = _ids(w, "Prepare (command id, step id)", (built[0], step),
                     spec.state.prepare_ids(r, base))
            w2, status = _commit(ctx, w, r, built, w.owners[o].epoch, "loop", base)
            yield (f"{me}: Prepare({name(step)}, inputs={list(pending)}) -> {status}",
                   _seen(ctx, w2, o, r, status))
    elif isinstance(action, WithdrawPrepared):
        w2, status = _commit(ctx, w, r, cmds.withdraw(rid, action.step_id), w.owners[o].epoch,
                             "loop", base)
        yield (f"{me}: Withdraw({name(action.step_id)}) -> {status}",
               _seen(ctx, w2, o, r, status))
    elif isinstance(action, StartModelCall):
        cur = state.current
        assert isinstance(cur, ModelStep)
        built = cmds.start_model(rid, cur.id, cur.rejects)
        effect = built[1].effect  # type: ignore[union-attr]
        w = _ids(w, "model EffectID", effect, spec.state.model_effect(r, cur.id, cur.rejects))
        yield _start(ctx, w, o, r, built, f"{me}: StartModel({name(effect)})")
    elif isinstance(action, StartToolCalls):
        cur = state.current
        assert isinstance(cur, ToolStep)
        call = cur.call(action.call_ids[0])  # one start per move, in call order
        assert call is not None
        # the shell's attempt number; a correct planner only ever names PENDING calls
        seq = 0 if call.status is ToolCallStatus.PENDING else 1
        built = cmds.start_tool(rid, cur.id, call.call_id, seq)
        effect = built[1].effect  # type: ignore[union-attr]
        if seq == 0:
            w = _ids(w, "tool EffectID", effect, spec.state.tool_effect(r, cur.id, call.call_id))
        else:
            spec.register_effect(effect, run=r, step=cur.id, call=call.call_id, kind="tool",
                                 seq=seq, label=f"{name(call.call_id)}#{seq}")
        yield _start(ctx, w, o, r, built, f"{me}: StartToolCall({name(effect)})")
    else:
        assert isinstance(action, Idle), action


def _accept(w: CoreWorld, effect: str) -> tuple[CoreWorld, bool]:
    """The executor's side of dispatch: one record per key; a tombstone refuses the key."""
    rec = w.rec(effect)
    if rec is None:
        return w.with_rec(Rec(effect, "running", accepts=1,
                              durable=_started_in_log(w, effect))), True
    if rec.status == "aborted":
        return w, False
    return w, True  # the same Assignment again: idempotent (INV-36)


def _compensate(ctx: CoreCtx, w: CoreWorld, o: int, effect: str) -> tuple[CoreWorld, str]:
    """Nothing began: recover the model step, or fail the call KNOWN (§6.3)."""
    info = _info(effect)
    if info.kind == "model":
        built = cmds.recover_model(info.step, effect)
    else:
        built = cmds.tool_failure(info.step, info.call, effect, False)
    w, status = _commit(ctx, w, info.run, built, w.owners[o].epoch, "loop")
    return _seen(ctx, w, o, info.run, status), status


def _dispatch_moves(ctx: CoreCtx, w: CoreWorld, o: int) -> Iterator[Move]:
    """The end of the section: dispatch with DispatchPolicy(2 offers) (§5.6, §5.7, §6.3)."""
    owner = w.owners[o]
    effect = owner.section
    label = f"{OWNERS[o]}: Dispatch({name(effect)})"
    done = _set(w, o, section="", offers=0)
    w2, ok = _accept(done, effect)
    if ok:
        yield f"{label} -> accepted", w2
        # the transport delivers the same dispatch twice: the executor deduplicates by key
        yield f"{label} -> accepted, delivered twice", _accept(w2, effect)[0]
    else:
        w3, status = _compensate(ctx, done, o, effect)
        yield f"{label} -> rejected (tombstoned key): compensate -> {status}", w3
    if owner.offers == 0:
        yield f"{label} -> retryable", _set(w, o, offers=1)
    else:
        w3, status = _compensate(ctx, done, o, effect)
        yield f"{label} -> retryable, no offers left: compensate -> {status}", w3
    # DispatchUnknownError: the target stays EXECUTING and is never re-dispatched.
    yield f"{label} -> unknown (the executor got it)", w2
    yield f"{label} -> unknown (lost)", done


def _deliver_command(ctx: CoreCtx, state: MachineState, effect: str, outcome: str) -> Built:
    """Map an Outcome to its settlement command (§5.8 tables), as the runtime builds it."""
    info = _info(effect)
    if info.kind == "model":
        if outcome == "tools":
            return cmds.model_result(info.step, effect, ctx.calls, ctx.approvals)
        if outcome == "text":
            return cmds.model_result(info.step, effect, 0, False)
        if outcome == "failed":
            return cmds.model_failure(info.step, effect)
        cur = state.current
        rejects = cur.rejects if isinstance(cur, ModelStep) and cur.id == info.step else 0
        return cmds.reject_model_result(info.step, effect, rejects < MALFORMED_RETRIES)
    if outcome == "ok":
        return cmds.tool_result(info.step, info.call, effect)
    return cmds.tool_failure(info.step, info.call, effect, outcome == "unknown")


def _deliver(ctx: CoreCtx, w: CoreWorld, o: int, effect: str,
             outcome: str) -> tuple[CoreWorld, str]:
    """deliver (§5.8): load, map the Outcome, commit under the settlement id, acknowledge.

    As in the reference, the Outcome is not pre-filtered against the loaded snapshot (the
    runtime's early DROPPED): the commit path alone must refuse what is late.
    """
    r = _info(effect).run
    owner = w.owners[o]
    if owner.views and owner.epoch == w.store.epoch:  # deliver starts with a load (§5.8)
        w = _set(w, o, views=tuple(w.store.position(i) for i in range(ctx.runs)))
    state = view(w, o, r)
    target = effect
    if ctx.impl.settle_running:  # the broken shell settles what its target runs now
        cur = state.current
        if (isinstance(cur, ModelStep) and cur.id == _info(effect).step
                and cur.status is ModelStepStatus.EXECUTING):
            target = cur.effect
    live = effect in executing(w.store.state(r))
    w2, status = _commit(ctx, w, r, _deliver_command(ctx, state, target, outcome),
                         w.owners[o].epoch, f"deliver:{effect}")
    if status in OK:  # acknowledge (§6.9): the record is kept, its Outcome no longer readable
        rec = w2.rec(effect)
        if rec is not None and rec.status == "settled":
            w2 = w2.with_rec(replace(rec, status="acked"))
    if status == "accepted":
        w2 = _check_opened(w2, r)
        if not live:
            w2 = w2.with_ghost(f"INV-26: late Outcome of {name(effect)} ({outcome}) "
                               f"appended facts")
    return _seen(ctx, w2, o, r, status), status


def _deliver_moves(ctx: CoreCtx, w: CoreWorld, o: int) -> Iterator[Move]:
    """Any live owner reads any settled, unacknowledged record or receives a duplicated
    Outcome still in flight."""
    me = OWNERS[o]
    for rec in w.recs:
        if rec.status == "settled":
            w2, status = _deliver(ctx, w, o, rec.effect, rec.outcome)
            yield f"{me}: Deliver({name(rec.effect)}, {rec.outcome}) -> {status}", w2
    for item in sorted(set(w.inflight)):
        rest = list(w.inflight)
        rest.remove(item)
        w2, status = _deliver(ctx, replace(w, inflight=tuple(rest)), o, *item)
        yield f"{me}: Deliver({name(item[0])}, {item[1]}) [duplicate] -> {status}", w2


def _owner_moves(ctx: CoreCtx, w: CoreWorld, o: int) -> Iterator[Move]:
    owner, me = w.owners[o], OWNERS[o]
    if not owner.alive:
        if w.takeovers > 0:  # a second process opens the scope: the first one is fenced
            yield _open(ctx, replace(w, takeovers=w.takeovers - 1), o, "TakeOver")
        return
    if owner.section:  # inside the shielded start→dispatch section
        yield from _dispatch_moves(ctx, w, o)
        return
    if owner.phase == "fenced":
        return
    yield from _deliver_moves(ctx, w, o)
    if owner.phase == "reconcile":
        yield from _reconcile_moves(ctx, w, o)
        return
    for r in range(ctx.runs):
        if owner.views and owner.epoch == w.store.epoch and (
                owner.views[r] != w.store.position(r)):
            views = tuple(w.store.position(i) if i == r else v
                          for i, v in enumerate(owner.views))
            yield f"{me}: Load(run-{r})", _set(w, o, views=views)
        yield from _plan_moves(ctx, w, o, r)


# --------------------------------------------------------------------------- executor, env


def _model_outcomes(ctx: CoreCtx, w: CoreWorld, effect: str) -> list[str]:
    """A model attempt answers with tool calls (one ToolStep per Run at most) or text; the
    first attempt of a step may be malformed; with ``failures`` it may fail the Run."""
    info = _info(effect)
    opened = any(isinstance(f, F.ToolStepOpened) for f in w.store.streams[info.run])
    outs = ["tools", "text"] if ctx.calls > 0 and not opened else ["text"]
    if ctx.malformed and info.seq == 0:
        outs.append("malformed")
    if ctx.failures:
        outs.append("failed")
    return outs


def _executor_moves(ctx: CoreCtx, w: CoreWorld) -> Iterator[Move]:
    for rec in w.recs:
        e = rec.effect
        if rec.status == "running":
            if _info(e).kind == "model":
                outs = _model_outcomes(ctx, w, e)
            else:
                outs = ["ok", "unknown", "failed"] if ctx.failures else ["ok"]
            for out in outs:
                settled = replace(rec, status="settled", outcome=out)
                yield f"executor: Finish({name(e)}, {out})", w.with_rec(settled)
        elif rec.status == "orphaned":  # adoption of a record whose worker is gone
            if _info(e).kind == "model":
                restarted = replace(rec, status="running", restarts=rec.restarts + 1)
                yield f"executor: Adopt({name(e)}) -> restarted", w.with_rec(restarted)
            else:  # a replay-never tool is settled Unknown, never run again (RUN-EXE-9)
                settled = replace(rec, status="settled", outcome="unknown")
                yield f"executor: Adopt({name(e)}) -> unknown", w.with_rec(settled)


def _env_moves(ctx: CoreCtx, w: CoreWorld) -> Iterator[Move]:
    for o, owner in enumerate(w.owners):
        if owner.alive and w.crashes > 0:
            # the process dies with all it held in memory; its supervisor restarts it at
            # once and the new incarnation opens the scope (staying dead is a special case
            # of being fenced and idle)
            _, w2 = _open(ctx, replace(w, crashes=w.crashes - 1), o, "Restart")
            yield f"env: CrashRestart({OWNERS[o]}, epoch={w2.owners[o].epoch})", w2
    for rec in w.recs:
        e = rec.effect
        if rec.status == "running" and w.crashes > 0:
            yield (f"env: WorkerCrash({name(e)})",
                   replace(w.with_rec(replace(rec, status="orphaned")), crashes=w.crashes - 1))
        if rec.status == "settled" and w.duplicates > 0:
            # the Outcome is read twice (Watcher and reconciler): one copy arrives later
            copy = (e, rec.outcome)
            yield (f"env: Duplicate({name(e)}, {rec.outcome})",
                   replace(w, inflight=tuple(sorted((*w.inflight, copy))),
                           duplicates=w.duplicates - 1))
    for item in sorted(set(w.inflight)):
        rest = list(w.inflight)
        rest.remove(item)
        yield f"env: Lose({name(item[0])}, {item[1]})", replace(w, inflight=tuple(rest))


# --------------------------------------------------------------------------- user


def _user_commit(ctx: CoreCtx, w: CoreWorld, r: int, built: Built, label: str) -> Move:
    w2, status = _commit(ctx, w, r, built, w.store.epoch, "user")
    fresh = isinstance(built[1], C.AcceptInput) and not label.endswith("[retry]")
    if fresh and status not in OK and w.store.state(r).status is RunStatus.ACTIVE:
        w2 = w2.with_ghost(f"INV-13: {label} refused ({status})")
    return f"user: {label} -> {status}", w2


def _user_moves(ctx: CoreCtx, w: CoreWorld) -> Iterator[Move]:
    """Application commands go through the current writer (§5.12), not through an actor.
    A ``[retry]`` resubmits a command the user already sent (an ambiguous commit)."""
    if not any(x.alive and x.epoch == w.store.epoch and x.phase != "fenced" for x in w.owners):
        return
    again = replace(w, duplicates=w.duplicates - 1) if w.duplicates > 0 else None
    for r in range(ctx.runs):
        state, run = w.store.state(r), run_id(r)
        active = state.status is RunStatus.ACTIVE
        for n in range(1, w.inputs_sent[r] + 2):
            built = cmds.accept_input(run, f"in-{n}")
            if n > w.inputs_sent[r] and n <= ctx.inputs and active:
                sent = tuple(n if i == r else x for i, x in enumerate(w.inputs_sent))
                yield _user_commit(ctx, replace(w, inputs_sent=sent), r, built,
                                   f"AcceptInput({run}, in-{n})")
            elif n <= w.inputs_sent[r] and again is not None:
                yield _user_commit(ctx, again, r, built, f"AcceptInput({run}, in-{n}) [retry]")
        cur = state.current
        tool_step = cur if isinstance(cur, ToolStep) else None
        for call in tool_step.calls if tool_step is not None else ():
            if call.status is ToolCallStatus.WAITING and call.waiting is not None:
                assert tool_step is not None
                for kind, build in (("ApproveToolCall", cmds.approve),
                                    ("RejectToolCall", cmds.reject)):
                    yield _user_commit(ctx, w, r, build(run, tool_step.id, call.call_id,
                                                        call.waiting.id),
                                       f"{kind}({name(call.call_id)})")
        cancel = spec.store.CANCEL_PREFIX + run
        if ctx.cancel and active:
            yield _user_commit(ctx, w, r, cmds.cancel(cancel), f"CancelRun({run})")
        elif again is not None and cancel in w.store.cids:
            yield _user_commit(ctx, again, r, cmds.cancel(cancel), f"CancelRun({run}) [retry]")
        if again is None:
            continue
        for f in w.store.streams[r]:
            if not isinstance(f, F.ToolStepOpened):
                continue
            for b in f.calls:
                if b.response is not None:
                    built = cmds.approve(run, f.step_id, b.call_id, b.response.id)
                    if built[0] in w.store.cids:
                        yield _user_commit(ctx, again, r, built,
                                           f"ApproveToolCall({name(b.call_id)}) [retry]")


def moves(ctx: CoreCtx, w: CoreWorld) -> Iterator[Move]:
    """Every enabled move of every actor, as ``(label, next_world)``."""
    for o in range(len(w.owners)):
        yield from _owner_moves(ctx, w, o)
    yield from _executor_moves(ctx, w)
    yield from _env_moves(ctx, w)
    yield from _user_moves(ctx, w)


def initial_world(ctx: CoreCtx, crashes: int, takeovers: int, duplicates: int) -> CoreWorld:
    """Every Run created with input ``in-0`` at epoch 1; owner1 drives, owner2 is down."""
    store = initial_store(ctx.runs, (cmds.agent_input("in-0"),), epoch=1)
    views = tuple(store.position(r) for r in range(ctx.runs)) if ctx.stale_reads else ()
    owner1 = Owner(epoch=1, alive=True, phase="drive", views=views)
    return CoreWorld(store=store, owners=(owner1, Owner()), recs=(), inflight=(),
                     crashes=crashes, takeovers=takeovers, duplicates=duplicates,
                     inputs_sent=(0,) * ctx.runs)
