"""The moves of the environment: owners (loop and takeover), executor, env and user.

Each generator yields ``(label, next_world)``; a label reads ``"actor: Action(args) -> result"``.
Owners plan from their snapshot (:func:`view`) and the store decides. What an owner holds
in memory (its start→dispatch section, the keys it is aborting) is lost when it crashes.

With ``Ctx.fused`` (the default) a deliver that settles an Outcome continues, in the same
move, with the batch the new state plans (:func:`_fused`), as the runtime commits it: a
crash or takeover lands only on either side of a batch, never inside it.

The environment is written once. Whatever depends on what a Run *does* — committing,
loading, planning, the EXECUTING effects — is asked of ``ctx.sem`` (``_semantics``): the
reference model passes its own semantics, the ``core`` model of ``runx_actors.check`` an
adapter over the real ``runx_actors.protocol``, so both explore the same environment.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

import attrs

from . import _ids as ids
from ._semantics import Semantics
from ._state import (
    ACTIVE,
    EFFECTS,
    EXECUTING,
    OPEN,
    PENDING,
    WAITING,
    Cmd,
    ModelStep,
    Owner,
    Rec,
    RunState,
    ToolStep,
    World,
    call_id,
    model_effect,
    name,
    prepare_ids,
    replace,
    tool_effect,
)
from ._store import CANCEL_PREFIX

__all__ = ["Ctx", "OWNERS", "moves", "view", "view_position", "initial_world", "canonical",
           "is_final"]

Move = tuple[str, World]
OWNERS = ("owner1", "owner2")
OK = ("accepted", "already_applied")
REPLAY_OK = ("already_applied", "fenced")
MALFORMED_RETRIES = 1  # Settings.malformed_retries of the modelled preset


@attrs.frozen
class Ctx:
    runs: int
    calls: int
    inputs: int
    max_prepares: int
    approvals: bool
    malformed: bool
    failures: bool
    cancel: bool
    stale_reads: bool  # the current owner may commit from a snapshot older than the store
    bugs: frozenset[str]  # the environment's (and the reference store's) broken variants
    sem: Semantics  # what a Run does: the reference's own, or the real core's
    adversarial: bool = False  # the adversary sends forged commands (``_forged_moves``)
    fused: bool = True  # a settling deliver continues with the batch it enables (``_fused``)


# --------------------------------------------------------------------------- helpers


def _commit(ctx: Ctx, w: World, r: int, cid: str, cmd: Cmd, epoch: int, origin: str,
            base: int = -1) -> tuple[World, str]:
    """Commit through the semantics. A command id already in the index must answer
    ALREADY_APPLIED (or, for a fenced writer, be fenced first): a resubmission that turns
    into a refusal (terminal, stale, conflict) leaves ghost ``INV-9.replay``.

    A commit reads only the store and changes only the store and the ghosts, so its effect
    — ``(store after, ghosts added, status)`` — is computed once per store and arguments
    (:func:`_store_effect`) and applied to every world holding that store."""
    key = (w.store, r, cid, cmd, epoch, origin, base)
    cache = _cache(ctx, "commit")
    hit = cache.get(key)
    if hit is None:
        hit = cache[key] = _commit_effect(ctx, w, r, cid, cmd, epoch, origin, base)
    return _apply(w, hit[0], hit[1]), hit[2]


def _commit_effect(ctx: Ctx, w: World, r: int, cid: str, cmd: Cmd, epoch: int, origin: str,
                   base: int) -> tuple[Any, tuple[str, ...], str]:
    """``(store after or None, ghosts added, status)`` of the commit on *w*'s store.

    What a commit decides reads only part of the store: its epoch, the projection (with
    positions) and the commit-id index with each id's Run and facts — the semantics'
    ``commit_key``, which leaves out the log's ghost data (writer and persisted epochs,
    origins, bases) and the order of its groups. Many stores share a key (the default
    profile: 644 keys for 14,036 stores), so the decision — status, ghosts, and either
    "nothing written" or "this group appended, the Run's projection now this" — is made
    once per key and arguments (:func:`_decision`), and redone on each store by appending
    the same group under this commit's ghost data (``Semantics.append``). A commit whose
    effect is not such an append (a broken store that rewrites the projection) is
    computed on each store."""
    sem = ctx.sem
    if getattr(sem, "commit_key", None) is None:
        w2, status = _commit_now(ctx, w, r, cid, cmd, epoch, origin, base)
        return (*_store_effect(w, w2), status)
    store = w.store
    skey = (_commit_key(ctx, store), r, cid, cmd, epoch, store.epoch, origin, base)
    decisions = _cache(ctx, "decision")
    hit = decisions.get(skey)
    if hit is None:
        w2, status = _commit_now(ctx, w, r, cid, cmd, epoch, origin, base)
        after, added = _store_effect(w, w2)
        appended = (None if after is None
                    else sem.appended(store, after, r, epoch, origin, base))
        if after is not None and appended is None:  # not an append: not shared
            return after, added, status
        hit = decisions[skey] = (appended, added, status)
    appended, added, status = hit
    after = None if appended is None else sem.append(store, r, epoch, origin, base, appended)
    return after, added, status


def _commit_key(ctx: Ctx, store: Any) -> int:
    """The number of *store*'s ``commit_key`` (equal keys, equal numbers; a number is never
    given to another key, so the decisions cached under it stay right when tables clear)."""
    keys = _cache(ctx, "commit_key")
    number = keys.get(store)
    if number is None:
        numbers = _cache(ctx, "commit_key_numbers")
        sem_key = ctx.sem.commit_key(store)
        number = numbers.get(sem_key)
        if number is None:
            number = numbers[sem_key] = next(_NUMBERS)
        keys[store] = number
    return number


_NUMBERS = itertools.count()


def _commit_now(ctx: Ctx, w: World, r: int, cid: str, cmd: Cmd, epoch: int, origin: str,
                base: int = -1) -> tuple[World, str]:
    """:func:`_commit` without the cache."""
    known = cid in w.store.cids
    w2, status = ctx.sem.commit(ctx, w, r, cid, cmd, epoch, origin, base)
    if known and status not in REPLAY_OK:
        w2 = w2.with_ghost(f"INV-9.replay: {cmd.kind} under the known command id {cid[:8]} "
                           f"answered {status}, not already_applied")
    return w2, status


#: per Ctx: cache name -> {key: value}; the Ctx is kept so its id is not reused
_CACHES: dict[int, tuple[Ctx, dict[str, dict[Any, Any]]]] = {}
_CACHE_LIMIT = 1 << 17


def _cache(ctx: Ctx, what: str) -> dict[Any, Any]:
    """The cache *what* of *ctx* (cleared when it grows past ``_CACHE_LIMIT`` entries).
    Everything cached is a function of the Ctx and immutable values (stores, commands)."""
    entry = _CACHES.get(id(ctx))
    if entry is None or entry[0] is not ctx:
        entry = _CACHES[id(ctx)] = (ctx, {})
    table = entry[1].get(what)
    if table is None or len(table) >= _CACHE_LIMIT:
        table = entry[1][what] = {}
    return table


def _store_effect(w: World, w2: World) -> tuple[Any, tuple[str, ...]]:
    """What a move that may change only the store and append ghosts did to *w*:
    ``(store of w2 or None if unchanged, the ghosts it added)``. Raises AssertionError if
    it changed more."""
    added = w2.ghosts[len(w.ghosts):]
    if w2 is not w and (w2.owners is not w.owners or w2.recs is not w.recs
                        or w2.inflight != w.inflight or w2.inputs_sent != w.inputs_sent
                        or (w2.crashes, w2.takeovers, w2.duplicates)
                        != (w.crashes, w.takeovers, w.duplicates)
                        or w2.ghosts[:len(w.ghosts)] != w.ghosts):
        raise AssertionError("a store-only move changed more than the store and the ghosts")
    same = w2.store is w.store or w2.store == w.store
    return (None if same else w2.store), added


def _apply(w: World, store: Any, added: tuple[str, ...]) -> World:
    """*w* with *store* (None: unchanged) and the ghosts *added* (*w* itself when nothing
    changes, so a refused command is a self-loop the search recognises at once)."""
    if store is None:
        if not added:
            return w
        store = w.store
    return replace(w, store=store, ghosts=(*w.ghosts, *added) if added else w.ghosts)


def view_position(w: World, o: int, r: int) -> int:
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


def view(ctx: Ctx, w: World, o: int, r: int) -> RunState:
    """The state of Run ``r`` in owner ``o``'s snapshot."""
    return ctx.sem.load(w.store, r, view_position(w, o, r))


def _seen(ctx: Ctx, w: World, o: int, r: int, status: str) -> World:
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


def _set(w: World, o: int, **changes: object) -> World:
    return w.with_owner(o, replace(w.owners[o], **changes))


def _stream(ctx: Ctx, w: World, r: int) -> tuple[Any, ...]:
    """Run ``r``'s facts, as the reference's ``Fact`` values."""
    return ctx.sem.image(w.store).streams[r]


def _started_in_log(ctx: Ctx, w: World, effect: str) -> bool:
    return any(f.effect == effect and f.kind in ("ModelStepStarted", "ToolCallStarted")
               for f in _stream(ctx, w, EFFECTS[effect].run))


# --------------------------------------------------------------------------- takeover


def _open(ctx: Ctx, w: World, o: int, what: str) -> Move:
    """SessionStore.open: the persisted epoch + 1; the projection is rebuilt from the log;
    the new owner must reconcile before it drives (§4.6)."""
    epoch = w.store.epoch if "shared_epoch" in ctx.bugs else w.store.epoch + 1
    w = replace(w, store=replace(w.store, epoch=epoch))
    views = tuple(w.store.position(r) for r in range(ctx.runs)) if ctx.stale_reads else ()
    w = w.with_owner(o, Owner(epoch=epoch, alive=True, phase="reconcile", views=views))
    return f"{OWNERS[o]}: {what}(epoch={epoch})", w


def _dispose(ctx: Ctx, w: World, o: int, effect: str) -> tuple[World, str]:
    """Commit recovery_command(target) (§2.10) under the effect's recovery id."""
    info = EFFECTS[effect]
    if info.kind == "model":
        cmd = Cmd("RecoverModel", info.step, "", effect)
    else:
        cmd = Cmd("SubmitToolFailure", info.step, info.call, effect, "unknown")
    cid = ids.derive_recovery_command_id(effect)
    w, status = _commit(ctx, w, info.run, cid, cmd, w.owners[o].epoch, "reconcile")
    return _seen(ctx, w, o, info.run, status), status


def _reconcile_moves(ctx: Ctx, w: World, o: int) -> Iterator[Move]:
    """recover_interrupted with DISPOSE_MISSING (§4.6, §6.10), one target at a time.

    ``attach`` of a live record (running → active, settled/acked → terminal: KEEP;
    orphaned: DEFER) leaves everything as it is, so only the other verdicts are moves.
    """
    owner, me = w.owners[o], OWNERS[o]
    waiting = False
    for r in range(ctx.runs):
        for e in ctx.sem.executing(w.store, r):
            rec = w.rec(e)
            if e in owner.aborting:
                waiting = True
            elif rec is None:
                waiting = True
                if "dispose_without_abort" in ctx.bugs:
                    w2, status = _dispose(ctx, w, o, e)
                    yield f"{me}: Attach({name(e)}) -> missing: dispose -> {status}", w2
                else:
                    yield (f"{me}: Attach({name(e)}) -> missing",
                           _set(w, o, aborting=(*owner.aborting, e)))
            elif rec.status == "aborted" or (rec.status == "orphaned"
                                             and "dispose_orphaned" in ctx.bugs):
                waiting = True
                w2, status = _dispose(ctx, w, o, e)
                yield f"{me}: Attach({name(e)}) -> {rec.status}: dispose -> {status}", w2
    for e in owner.aborting:
        rest = tuple(x for x in owner.aborting if x != e)
        rec = w.rec(e)
        if rec is None or rec.status == "aborted" or "abort_overrides_accept" in ctx.bugs:
            tomb = Rec(e, "aborted") if rec is None else replace(rec, status="aborted")
            w2, status = _dispose(ctx, _set(w.with_rec(tomb), o, aborting=rest), o, e)
            yield f"{me}: Abort({name(e)}) -> aborted: dispose -> {status}", w2
        else:  # an acceptance won the race for the key's first slot (INV-31): KEEP
            yield f"{me}: Abort({name(e)}) -> {rec.status}: keep", _set(w, o, aborting=rest)
    if not waiting and not owner.aborting:
        yield f"{me}: ReconcileDone", _set(w, o, phase="drive")


# --------------------------------------------------------------------------- the loop


def _start(ctx: Ctx, w: World, o: int, r: int, cmd: Cmd) -> tuple[World, str]:
    """The start barrier (§5.6 step 3, §5.7): commit the start, then dispatch only if the
    returned snapshot shows the target EXECUTING under this effect (INV-25). The effect
    joins the end of the owner's start→dispatch section (a fused batch starts several)."""
    cid = ids.derive_start_command_id(cmd.effect)
    w, status = _commit(ctx, w, r, cid, cmd, w.owners[o].epoch, "loop", view_position(w, o, r))
    granted = status in OK and cmd.effect in ctx.sem.executing(w.store, r)
    w = _seen(ctx, w, o, r, status)
    if granted or "dispatch_before_start" in ctx.bugs:
        section = w.owners[o].section
        w = _set(w, o, section=(*section, cmd.effect), offers=w.owners[o].offers if section
                 else 0)
    return w, status


def _planned(ctx: Ctx, w: World, o: int, r: int,
             kinds: frozenset[str] | None = None) -> tuple[Cmd, str, World, str] | None:
    """plan_next on the owner's snapshot (§2.9) and its commit, as ``(command, label,
    next world, status)``; None when the loop has nothing to commit (idle, ended, the
    model's bound on prepares) or, with *kinds*, plans a command of another kind (what a
    fused batch may continue with: :func:`_fused`)."""
    base = view_position(w, o, r)
    cmd = ctx.sem.plan(w.store, r, base)
    if cmd is None or (cmd.kind == "StartToolCall" and "loop_skips_tool_calls" in ctx.bugs):
        return None
    if kinds is not None and cmd.kind not in kinds:
        return None
    if cmd.kind == "Prepare":
        prepared = sum(f.kind == "ModelStepPrepared" for f in _stream(ctx, w, r))
        if prepared >= ctx.max_prepares:
            return None
        cid = prepare_ids(r, base)[0]
        w2, status = _commit(ctx, w, r, cid, cmd, w.owners[o].epoch, "loop", base)
        return (cmd, f"Prepare({name(cmd.step)}, inputs={list(cmd.arg[1])})",
                _seen(ctx, w2, o, r, status), status)
    if cmd.kind == "Withdraw":
        cid = ids.derive_withdraw_command_id(f"run-{r}", cmd.step)
        w2, status = _commit(ctx, w, r, cid, cmd, w.owners[o].epoch, "loop", base)
        return cmd, f"Withdraw({name(cmd.step)})", _seen(ctx, w2, o, r, status), status
    w2, status = _start(ctx, w, o, r, cmd)  # StartModel, StartToolCall
    return cmd, f"{cmd.kind}({name(cmd.effect)})", w2, status


def _plan_moves(ctx: Ctx, w: World, o: int, r: int) -> Iterator[Move]:
    """plan_next on the owner's snapshot (§2.9) and the commit it leads to."""
    step = _planned(ctx, w, o, r)
    if step is not None:
        _, what, w2, status = step
        yield f"{OWNERS[o]}: {what} -> {status}", w2


#: What a fused batch continues with, by the kind of its last command (RUN-LOP-11): a
#: settlement → the starts of the PENDING calls, or a Prepare and then the model start.
_BATCH_NEXT: dict[str, frozenset[str]] = {
    "": frozenset({"StartToolCall", "Prepare"}),
    "StartToolCall": frozenset({"StartToolCall"}),
    "Prepare": frozenset({"StartModel"}),
    "StartModel": frozenset(),
}


def _fused(ctx: Ctx, w: World, o: int, r: int, label: str) -> Iterator[Move]:
    """A fused commit (SPEC.md §5, "the checker's environment"; RUN-LOP-11, RUN-CMT-9):
    after its deliver settled an Outcome of Run ``r`` (``w``, ``label``) with nothing else
    of the Run EXECUTING, the owner commits, in the same move, what the new snapshot plans
    up to its start barrier — the start of every PENDING call, in call order; or a Prepare
    and then the model start — each command under its own derived id, as if committed one
    after the other, stopping at the first refusal (or replay). Any other plan (a withdraw,
    a model retry's start, idle, ended) leaves the settlement alone. No crash, takeover or
    other move lands inside the batch: only on either side of it. The starts enter the
    start→dispatch section in order and are dispatched one per move.

    ``fused_split`` (a broken store): the batch is two transactions — the settle, then the
    rest — and the second one can be lost while the batch reports success, so the loop
    dispatches starts that are not in the log (INV-24)."""
    parts, settled, last = [label], w, ""
    for _ in range(ctx.calls + 2):  # a Prepare and a model start, or one start per call
        step = _planned(ctx, w, o, r, _BATCH_NEXT[last])
        if step is None:
            break
        cmd, what, w, status = step
        parts.append(f"{what} -> {status}")
        if status != "accepted":
            break
        last = cmd.kind
    yield "; ".join(parts), w
    if "fused_split" in ctx.bugs and len(parts) > 1 and w.owners[o].section:
        lost = _set(settled, o, section=w.owners[o].section, offers=0)
        yield f"{parts[0]}; [{'; '.join(parts[1:])}] lost, reported appended", lost


def _accept(ctx: Ctx, w: World, effect: str) -> tuple[World, bool]:
    """The executor's side of dispatch: one record per key; a tombstone refuses the key."""
    rec = w.rec(effect)
    if rec is None:
        return w.with_rec(Rec(effect, "running", accepts=1,
                              durable=_started_in_log(ctx, w, effect))), True
    if rec.status == "aborted":
        return w, False
    if "double_tool_start" in ctx.bugs and EFFECTS[effect].kind == "tool":  # no dedup by key
        return w.with_rec(replace(rec, accepts=rec.accepts + 1)), True
    return w, True  # the same Assignment again: idempotent (INV-36)


def _compensate(ctx: Ctx, w: World, o: int, effect: str) -> tuple[World, str]:
    """Nothing began: recover the model step, or fail the call KNOWN (§6.3)."""
    info = EFFECTS[effect]
    if info.kind == "model":
        cmd = Cmd("RecoverModel", info.step, "", effect)
        cid = ids.derive_recovery_command_id(effect)
    else:
        cmd = Cmd("SubmitToolFailure", info.step, info.call, effect, "known")
        cid = ids.derive_settlement_command_id(effect)
    w, status = _commit(ctx, w, info.run, cid, cmd, w.owners[o].epoch, "loop")
    return _seen(ctx, w, o, info.run, status), status


def _dispatch_moves(ctx: Ctx, w: World, o: int) -> Iterator[Move]:
    """The end of the section: dispatch with DispatchPolicy(2 offers) (§5.6, §5.7, §6.3)."""
    owner = w.owners[o]
    effect = owner.section[0]
    label = f"{OWNERS[o]}: Dispatch({name(effect)})"
    done = _set(w, o, section=owner.section[1:], offers=0)
    w2, ok = _accept(ctx, done, effect)
    if ok:
        yield f"{label} -> accepted", w2
        # the transport delivers the same dispatch twice: the executor deduplicates by key
        yield f"{label} -> accepted, delivered twice", _accept(ctx, w2, effect)[0]
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


def _deliver_command(state: RunState, effect: str, outcome: str) -> Cmd:
    """Map an Outcome to its settlement command (§5.8 tables)."""
    info = EFFECTS[effect]
    if info.kind == "model":
        if outcome in ("tools", "text"):
            return Cmd("SubmitModelResult", info.step, "", effect, outcome)
        if outcome == "failed":
            return Cmd("SubmitModelFailure", info.step, "", effect)
        cur = state.current
        rejects = cur.rejects if isinstance(cur, ModelStep) and cur.id == info.step else 0
        disposition = "retry" if rejects < MALFORMED_RETRIES else "fail_run"
        return Cmd("RejectModelResult", info.step, "", effect, disposition)
    if outcome == "ok":
        return Cmd("SubmitToolResult", info.step, info.call, effect)
    return Cmd("SubmitToolFailure", info.step, info.call, effect, outcome)


def _deliver(ctx: Ctx, w: World, o: int, effect: str, outcome: str) -> tuple[World, str]:
    """deliver (§5.8): load, map the Outcome, commit under the settlement id, acknowledge."""
    info = EFFECTS[effect]
    owner = w.owners[o]
    if owner.views and owner.epoch == w.store.epoch:  # deliver starts with a load (§5.8)
        w = _set(w, o, views=tuple(w.store.position(r) for r in range(ctx.runs)))
    state = view(ctx, w, o, info.run)
    target = effect
    if "settle_foreign_effect" in ctx.bugs:
        # deliver settles whatever its target is running now, not the Outcome's key
        cur = state.current
        if isinstance(cur, ModelStep) and cur.id == info.step and cur.status == EXECUTING:
            target = cur.effect
    cmd = _deliver_command(state, target, outcome)
    cid = ids.derive_settlement_command_id(target)
    live = effect in ctx.sem.executing(w.store, info.run)
    w2, status = _commit(ctx, w, info.run, cid, cmd, w.owners[o].epoch, f"deliver:{effect}")
    if status in OK:  # acknowledge (§6.9): the record is kept, its Outcome no longer readable
        rec = w2.rec(effect)
        if rec is not None and rec.status == "settled":
            w2 = w2.with_rec(replace(rec, status="acked"))
    if status == "accepted" and not live:
        w2 = w2.with_ghost(f"INV-26: late Outcome of {name(effect)} ({outcome}) appended facts")
    return _seen(ctx, w2, o, info.run, status), status


def _deliver_moves(ctx: Ctx, w: World, o: int) -> Iterator[Move]:
    """Any live owner reads any settled, unacknowledged record (the Watcher polls, so a lost
    notification only delays the read) or receives a duplicated Outcome still in flight.
    With ``fused``, a driving owner's settle that appended, leaving nothing of its Run
    EXECUTING, continues as a fused batch (:func:`_fused`)."""
    me = OWNERS[o]
    fuse = ctx.fused and w.owners[o].phase == "drive"
    for rec in w.recs:
        if rec.status == "settled":
            w2, status = _deliver(ctx, w, o, rec.effect, rec.outcome)
            label = f"{me}: Deliver({name(rec.effect)}, {rec.outcome}) -> {status}"
            run = EFFECTS[rec.effect].run
            if fuse and status == "accepted" and not ctx.sem.executing(w2.store, run):
                yield from _fused(ctx, w2, o, run, label)
            else:
                yield label, w2
    for item in sorted(set(w.inflight)):
        rest = list(w.inflight)
        rest.remove(item)
        w2, status = _deliver(ctx, replace(w, inflight=tuple(rest)), o, *item)
        label = f"{me}: Deliver({name(item[0])}, {item[1]}) [duplicate] -> {status}"
        run = EFFECTS[item[0]].run
        if fuse and status == "accepted" and not ctx.sem.executing(w2.store, run):
            yield from _fused(ctx, w2, o, run, label)
        else:
            yield label, w2


def _owner_moves(ctx: Ctx, w: World, o: int) -> Iterator[Move]:
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


def _model_outcomes(ctx: Ctx, w: World, effect: str) -> list[str]:
    """A model attempt answers with tool calls (one ToolStep per Run at most) or text; the
    first attempt of a step may be malformed; with ``failures`` it may fail the Run."""
    info = EFFECTS[effect]
    opened = any(f.kind == "ToolStepOpened" for f in _stream(ctx, w, info.run))
    outs = ["tools", "text"] if ctx.calls > 0 and not opened else ["text"]
    if ctx.malformed and info.seq == 0:
        outs.append("malformed")
    if ctx.failures:
        outs.append("failed")
    return outs


def _executor_moves(ctx: Ctx, w: World) -> Iterator[Move]:
    for rec in w.recs:
        e = rec.effect
        if rec.status == "running":
            if EFFECTS[e].kind == "model":
                outs = _model_outcomes(ctx, w, e)
            else:
                outs = ["ok", "unknown", "failed"] if ctx.failures else ["ok"]
            for out in outs:
                settled = replace(rec, status="settled", outcome=out)
                yield f"executor: Finish({name(e)}, {out})", w.with_rec(settled)
        elif rec.status == "orphaned":  # adoption of a record whose worker is gone
            if EFFECTS[e].kind == "model" or "restart_replay_never" in ctx.bugs:
                restarted = replace(rec, status="running", restarts=rec.restarts + 1)
                yield f"executor: Adopt({name(e)}) -> restarted", w.with_rec(restarted)
            else:  # a replay-never tool is settled Unknown, never run again (RUN-EXE-9)
                settled = replace(rec, status="settled", outcome="unknown")
                yield f"executor: Adopt({name(e)}) -> unknown", w.with_rec(settled)


def _env_moves(ctx: Ctx, w: World) -> Iterator[Move]:
    for o, owner in enumerate(w.owners):
        if owner.alive and w.crashes > 0:
            # The process dies with all it held in memory; its supervisor restarts it at once
            # and the new incarnation opens the scope (the dead interval commutes with every
            # other move, and staying dead is a special case of being fenced and idle).
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


def _user_commit(ctx: Ctx, w: World, r: int, cid: str, cmd: Cmd, label: str) -> Move:
    w2, status = _commit(ctx, w, r, cid, cmd, w.store.epoch, "user")
    fresh = cmd.kind == "AcceptInput" and not label.endswith("[retry]")
    if fresh and status not in OK and ctx.sem.image(w.store).runs[r].status == ACTIVE:
        w2 = w2.with_ghost(f"INV-13: {label} refused ({status})")
    return f"user: {label} -> {status}", w2


def _user_moves(ctx: Ctx, w: World) -> Iterator[Move]:
    """Application commands go through the current writer (§5.12), not through an actor.
    A ``[retry]`` resubmits a command the user already sent (an ambiguous commit).

    Once there is a current writer, the moves read only the store, the inputs sent and
    whether a duplicate is left, and change only the store, the ghosts (appended), the
    inputs sent and the duplicates (one spent): computed once per ``(store, inputs sent,
    duplicates > 0)`` (:func:`_user_now`) and applied to every world that has them."""
    if not any(x.alive and x.epoch == w.store.epoch and x.phase != "fenced" for x in w.owners):
        return
    key = _user_key(w)
    cache = _cache(ctx, "user")
    effects = cache.get(key)
    if effects is None:
        effects = cache[key] = tuple((label, *_user_effect(w, w2))
                                     for label, w2 in _user_now(ctx, w))
    for label, store, added, sent, spent in effects:
        if store is None and not added and sent is None and not spent:
            yield label, w  # a refused command: a self-loop
        else:
            yield label, replace(
                w, store=w.store if store is None else store,
                ghosts=(*w.ghosts, *added) if added else w.ghosts,
                inputs_sent=w.inputs_sent if sent is None else sent,
                duplicates=w.duplicates - 1 if spent else w.duplicates)


def _user_key(w: World) -> tuple[Any, ...]:
    """What the user's moves read (besides whether there is a current writer)."""
    return (w.store, w.inputs_sent, w.duplicates > 0)


def _user_effect(w: World, w2: World) -> tuple[Any, tuple[str, ...], Any, bool]:
    """What a user move did to *w*: ``(store or None if unchanged, ghosts added, inputs
    sent or None if unchanged, whether a duplicate was spent)``. Raises AssertionError if
    it changed anything else."""
    if w2 is w:
        return None, (), None, False
    spent = w2.duplicates == w.duplicates - 1
    if (w2.owners is not w.owners or w2.recs is not w.recs or w2.inflight != w.inflight
            or (w2.crashes, w2.takeovers) != (w.crashes, w.takeovers)
            or not (spent or w2.duplicates == w.duplicates)
            or w2.ghosts[:len(w.ghosts)] != w.ghosts):
        raise AssertionError("a user move changed more than the store, the ghosts, the "
                             "inputs sent and the duplicates")
    store = None if w2.store is w.store or w2.store == w.store else w2.store
    sent = None if w2.inputs_sent == w.inputs_sent else w2.inputs_sent
    return store, w2.ghosts[len(w.ghosts):], sent, spent


def _user_now(ctx: Ctx, w: World) -> Iterator[Move]:
    """:func:`_user_moves` once a current writer is there, without the cache."""
    again = replace(w, duplicates=w.duplicates - 1) if w.duplicates > 0 else None
    image = ctx.sem.image(w.store)
    for r in range(ctx.runs):
        state, run = image.runs[r], f"run-{r}"
        for n in range(1, w.inputs_sent[r] + 2):
            cid = ids.derive_input_command_id(run, f"in-{n}")
            cmd = Cmd("AcceptInput", arg=f"in-{n}")
            if n > w.inputs_sent[r] and n <= ctx.inputs and state.status == ACTIVE:
                sent = tuple(n if i == r else x for i, x in enumerate(w.inputs_sent))
                yield _user_commit(ctx, replace(w, inputs_sent=sent), r, cid, cmd,
                                   f"AcceptInput({run}, in-{n})")
            elif n <= w.inputs_sent[r] and again is not None:
                yield _user_commit(ctx, again, r, cid, cmd, f"AcceptInput({run}, in-{n}) [retry]")
        cur = state.current
        for call in cur.calls if isinstance(cur, ToolStep) else ():
            if call.status == WAITING:
                cid = ids.derive_response_command_id(run, cur.id, call.id, call.response)
                for kind in ("ApproveToolCall", "RejectToolCall"):
                    cmd = Cmd(kind, cur.id, call.id, "", call.response)
                    yield _user_commit(ctx, w, r, cid, cmd, f"{kind}({name(call.id)})")
        cancel = CANCEL_PREFIX + run
        if ctx.cancel and state.status == ACTIVE:
            yield _user_commit(ctx, w, r, cancel, Cmd("CancelRun"), f"CancelRun({run})")
        elif again is not None and cancel in w.store.cids:
            yield _user_commit(ctx, again, r, cancel, Cmd("CancelRun"),
                               f"CancelRun({run}) [retry]")
        for f in image.streams[r] if again is not None else ():
            for call in f.arg[1] if f.kind == "ToolStepOpened" else ():
                if call.response:
                    cid = ids.derive_response_command_id(run, f.step, call.id, call.response)
                    if cid in w.store.cids:
                        cmd = Cmd("ApproveToolCall", f.step, call.id, "", call.response)
                        yield _user_commit(ctx, again, r, cid, cmd,
                                           f"ApproveToolCall({name(call.id)}) [retry]")


# --------------------------------------------------------------------------- adversary


def _forged_commands(ctx: Ctx, w: World) -> Iterator[tuple[int, str, str, Cmd, int, bool]]:
    """The adversary's forged commands on the current store, as ``(run, label, command id,
    command, base, ended)``: each is illegal where it is sent, so it must be refused (or,
    if its id happens to be known, replay). ``ended``: sent to an ended Run, so the
    refusal must be ``terminal``.

    * a Prepare from a future snapshot (base ahead of the Run) and from a stale one
      (behind), with the ids derived from that base;
    * a model start under the wrong attempt's effect, and one naming a step that is not
      current; a model settlement under a foreign effect;
    * a tool start under attempt 1 (not sequence 0), a start of a call the step does not
      have, a tool settlement under another call's effect;
    * an AcceptInput under the id derived for another input (a non-derived id);
    * to an ended Run: a fresh AcceptInput and a CancelRun under a new id, and the
      resubmission of the CancelRun that ended it (which must replay, not be refused).
    """
    image = ctx.sem.image(w.store)
    for r in range(ctx.runs):
        state, run, pos = image.runs[r], f"run-{r}", w.store.position(r)
        if state.status != ACTIVE:
            cmd = Cmd("AcceptInput", arg="in-forged")
            yield (r, f"AcceptInput({run}, in-forged) to the ended Run",
                   ids.derive_input_command_id(run, "in-forged"), cmd, -1, True)
            yield (r, f"CancelRun({run}) to the ended Run", f"{CANCEL_PREFIX}again:{run}",
                   Cmd("CancelRun"), -1, True)
            if CANCEL_PREFIX + run in w.store.cids:  # a resubmission: it must replay
                yield (r, f"CancelRun({run}) resubmitted after the end", CANCEL_PREFIX + run,
                       Cmd("CancelRun"), -1, True)
            continue
        yield (r, f"AcceptInput({run}, in-forged) under the id of in-other",
               ids.derive_input_command_id(run, "in-other"), Cmd("AcceptInput", arg="in-forged"),
               -1, False)
        cur = state.current
        if cur == OPEN:
            for base, how in ((pos + 1, "ahead"), (pos - 1, "behind")):
                if base >= 0:
                    cid, step = prepare_ids(r, base)
                    yield (r, f"Prepare({run}, base={base}: {how} of {pos})", cid,
                           Cmd("Prepare", step, arg=(base, state.pending)), base, False)
        elif isinstance(cur, ModelStep):
            if cur.status != EXECUTING:
                effect = model_effect(r, cur.id, cur.rejects + 1)
                yield (r, f"StartModel({name(cur.id)}, wrong effect {name(effect)})",
                       ids.derive_start_command_id(effect),
                       Cmd("StartModel", cur.id, "", effect), pos, False)
                other = prepare_ids(r, pos + 1)[1]
                effect = model_effect(r, other, 0)
                yield (r, f"StartModel(not-current step {name(other)})",
                       ids.derive_start_command_id(effect),
                       Cmd("StartModel", other, "", effect), pos, False)
            else:
                effect = model_effect(r, cur.id, cur.rejects + 1)
                yield (r, f"SubmitModelResult({name(cur.id)}, foreign effect {name(effect)})",
                       ids.derive_settlement_command_id(effect),
                       Cmd("SubmitModelResult", cur.id, "", effect, "text"), pos, False)
        elif isinstance(cur, ToolStep):
            for call in cur.calls:
                if call.status == PENDING:
                    effect = tool_effect(r, cur.id, call.id, 1)
                    yield (r, f"StartToolCall({name(call.id)}, attempt 1 {name(effect)})",
                           ids.derive_start_command_id(effect),
                           Cmd("StartToolCall", cur.id, call.id, effect), pos, False)
                elif call.status == EXECUTING:
                    for other in cur.calls:
                        if other.id != call.id:
                            effect = tool_effect(r, cur.id, other.id)
                            yield (r, f"SubmitToolResult({name(call.id)}, foreign effect "
                                      f"{name(effect)})", ids.derive_settlement_command_id(effect),
                                   Cmd("SubmitToolResult", cur.id, call.id, effect), pos, False)
                            break
            missing = call_id(cur.source, len(cur.calls))
            effect = tool_effect(r, cur.id, missing)
            yield (r, f"StartToolCall(no such call {name(missing)})",
                   ids.derive_start_command_id(effect),
                   Cmd("StartToolCall", cur.id, missing, effect), pos, False)


def _forged_moves(ctx: Ctx, w: World) -> Iterator[Move]:
    """The adversary (``ctx.adversarial``): forged commands through the current writer, as
    a buggy or hostile client sends them, and the semantics' own forgeries (hand-built
    envelopes, mismatched ToolSpecs, facts fed to the fold; ``Semantics.forged``).

    A correct store refuses each and writes nothing (a self-loop); one that appends leaves
    ghost ``ADV-1`` (or ``ADV-2`` for a fold that accepts an illegal fact). A forged command
    to an ended Run must be refused ``terminal``. A refused forgery is explored like any
    other move, so the refusal kinds it reaches show in the labels."""
    if not any(x.alive and x.epoch == w.store.epoch and x.phase != "fenced" for x in w.owners):
        return
    # what each forgery does depends on the store alone: computed once per store
    cache = _cache(ctx, "forged")
    outcomes = cache.get(w.store)
    if outcomes is None:
        outcomes = cache[w.store] = tuple((label, *_store_effect(w, w2))
                                          for label, w2 in _forged_now(ctx, w))
    for label, store, added in outcomes:
        yield label, _apply(w, store, added)


def _forged_now(ctx: Ctx, w: World) -> Iterator[Move]:
    """:func:`_forged_moves` once a current writer is there, without the cache."""
    for r, what, cid, cmd, base, ended in _forged_commands(ctx, w):
        w2, status = _commit(ctx, w, r, cid, cmd, w.store.epoch, "forged", base)
        if status == "accepted" or (ended and status not in ("terminal", "already_applied")):
            w2 = w2.with_ghost(f"ADV-1: forged {what} answered {status}")
        yield f"adversary: {what} -> {status}", w2
    yield from ctx.sem.forged(ctx, w)


def moves(ctx: Ctx, w: World) -> Iterator[Move]:
    """Every enabled move of every actor, as ``(label, next_world)``."""
    for o in range(len(w.owners)):
        yield from _owner_moves(ctx, w, o)
    yield from _executor_moves(ctx, w)
    yield from _env_moves(ctx, w)
    yield from _user_moves(ctx, w)
    if ctx.adversarial:
        yield from _forged_moves(ctx, w)


def initial_world(ctx: Ctx, crashes: int, takeovers: int, duplicates: int) -> World:
    """Every Run created with input ``in-0`` at epoch 1; owner1 drives, owner2 is down."""
    store = ctx.sem.initial_store(ctx.runs)
    views = tuple(store.position(r) for r in range(ctx.runs)) if ctx.stale_reads else ()
    owner1 = Owner(epoch=1, alive=True, phase="drive", views=views)
    return World(store=store, owners=(owner1, Owner()), recs=(), inflight=(), crashes=crashes,
                 takeovers=takeovers, duplicates=duplicates, inputs_sent=(0,) * ctx.runs)


def is_final(ctx: Ctx, w: World) -> bool:
    """A state without progress that is not a deadlock: every Run has ended, or waits for
    something outside the system — an application answer (a WAITING call), an Outcome
    owed for an EXECUTING effect (lost to a fault the bounded budget cannot repair: the
    Reconciler's requeue, D-15, is outside the model), or, at Open, the model's bound on
    prepares (``max_prepares``). A live Run with none of these that cannot move is stuck."""
    image = ctx.sem.image(w.store)
    for r in range(ctx.runs):
        state = image.runs[r]
        if state.status != ACTIVE:
            continue
        cur = state.current
        if cur == OPEN:
            prepared = sum(f.kind == "ModelStepPrepared" for f in image.streams[r])
            if prepared >= ctx.max_prepares:
                continue
            return False
        if isinstance(cur, ModelStep) and cur.status == EXECUTING:
            continue
        if isinstance(cur, ToolStep) and any(c.status in (WAITING, EXECUTING)
                                             for c in cur.calls):
            continue
        return False
    return True


def canonical(w: World) -> World:
    """The one exact reduction: a fenced writer still in ``drive`` with no start→dispatch
    section behaves as one that already got OwnershipLostError (every command it can try
    is refused before anything else, the store checking the epoch first). Runs and owners
    are not interchangeable (their ids are in the facts). Only for a store that fences.

    It reads only the owners and the store's epoch: a world none of whose owners is such a
    writer is its own key (most worlds: looked at without building a key), and otherwise
    the reduced owners are computed once per pair (:func:`_canonical_owners`)."""
    epoch = w.store.epoch
    for owner in w.owners:
        if owner.epoch < epoch and owner.phase == "drive" and owner.alive and not owner.section:
            break
    else:
        return w
    key = (w.owners, epoch)
    owners = _CANONICAL.get(key)
    if owners is None:
        if len(_CANONICAL) >= _CACHE_LIMIT:
            _CANONICAL.clear()
        reduced = _canonical_owners(w).owners
        owners = _CANONICAL[key] = () if reduced is w.owners else reduced
    return replace(w, owners=owners) if owners else w


#: (owners, store epoch) -> the reduced owners, or () when nothing is reduced
_CANONICAL: dict[tuple[tuple[Owner, ...], int], tuple[Owner, ...]] = {}


def _canonical_owners(w: World) -> World:
    """:func:`canonical` without the cache."""
    for o, owner in enumerate(w.owners):
        if (owner.alive and owner.epoch < w.store.epoch and owner.phase == "drive"
                and not owner.section):
            w = w.with_owner(o, Owner(epoch=owner.epoch, alive=True, phase="fenced"))
    return w
