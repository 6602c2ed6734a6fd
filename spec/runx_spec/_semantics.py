"""The seam between the environment (``_moves``) and the Run semantics it drives.

The environment — owners, executor, user and faults — is written once, in ``_moves``, over
the reference's values (``Cmd``, ``RunState``, ``Fact``, ``World``). Whatever depends on
what a Run *does* it asks of a :class:`Semantics`: how the store commits a command, what a
load returns, what the loop plans on it, which effects are EXECUTING, and what the store
holds in the reference's values. :data:`REFERENCE` answers with the reference's own small
semantics (``_store.commit`` and the fold of ``_state``); ``runx_actors.check.models``
answers the same questions with the real ``runx_actors.protocol`` (its ``core`` model).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from ._state import (
    ACTIVE,
    OPEN,
    PENDING,
    PREPARED,
    Cmd,
    Commit,
    Fact,
    ModelStep,
    RunState,
    Store,
    ToolStep,
    World,
    executing_targets,
    fold,
    model_effect,
    prepare_ids,
    run_id,
    tool_effect,
)
from ._store import commit

__all__ = ["Semantics", "ReferenceSemantics", "REFERENCE", "plan"]


class Semantics(Protocol):
    """What the environment asks of a Run semantics. ``store`` is the semantics' own value
    (kept in ``World.store``); it has ``epoch``, ``log`` (commits with ``run``, ``facts`` and
    ``store_epoch``), ``cids`` and ``position(r)``, which the moves read directly."""

    def initial_store(self, runs: int) -> Any:
        """The scope at epoch 1 with every Run created with input ``in-0``."""

    def commit(self, ctx: Any, w: World, r: int, cid: str, cmd: Cmd, epoch: int,
               origin: str, base: int) -> tuple[World, str]:
        """Commit ``cmd`` under ``cid`` to Run ``r`` (fence, replay lookup, decide, fold,
        append): the new world and "accepted" | "already_applied" | a refusal ("fenced",
        "terminal", "conflict", "stale", …), which writes nothing."""

    def image(self, store: Any) -> Store:
        """The store in the reference's values (log, streams, projection, commit ids)."""

    def load(self, store: Any, r: int, position: int) -> RunState:
        """Run ``r`` as a load returned it when the Run was at ``position``."""

    def plan(self, store: Any, r: int, position: int) -> Cmd | None:
        """plan_next (§2.9) on that snapshot: the loop's next command (None: idle, ended)."""

    def executing(self, store: Any, r: int) -> tuple[str, ...]:
        """recovery_targets (§2.10) of the projection: EffectIDs EXECUTING in Run ``r``."""

    def forged(self, ctx: Any, w: World) -> Iterator[tuple[str, World]]:
        """The adversary's forgeries only this semantics can express (hand-built
        envelopes, real bodies, facts fed to the fold), as moves ``(label, next_world)``;
        one that is not refused leaves ghost ``ADV-1`` / ``ADV-2``."""

    # Optional (``_moves._commit_effect`` uses them when ``commit_key`` is there): a
    # commit's decision is then made once per key, and redone on each store by ``append``.

    def commit_key(self, store: Any) -> Any:
        """A hashable key of everything ``commit`` reads of *store* (equal keys: every
        commit decides alike — status, ghosts, and the group appended, if any)."""

    def appended(self, store: Any, after: Any, r: int, epoch: int, origin: str,
                 base: int) -> Any:
        """The group a commit appended to Run ``r`` of *store*, giving *after* (as
        ``append`` takes it), or None when *after* is not ``append``'s result."""

    def append(self, store: Any, r: int, epoch: int, origin: str, base: int,
               done: Any) -> Any:
        """*store* with the group *done* appended to Run ``r`` by a writer at *epoch*
        (*origin*, *base*: the log entry's ghost data)."""


def plan(r: int, state: RunState, base: int) -> Cmd | None:
    """The loop's next command on a snapshot at RunPosition ``base`` (§2.9)."""
    cur = state.current
    if state.status != ACTIVE:
        return None
    if cur == OPEN:
        return Cmd("Prepare", prepare_ids(r, base)[1], arg=(base, state.pending))
    if isinstance(cur, ModelStep) and cur.status == PREPARED:
        if state.pending:  # INV-14: withdraw, never start, while inputs are pending
            return Cmd("Withdraw", cur.id)
        return Cmd("StartModel", cur.id, "", model_effect(r, cur.id, cur.rejects))
    if isinstance(cur, ToolStep):
        call = next((c for c in cur.calls if c.status == PENDING), None)  # in call order
        if call is not None:
            return Cmd("StartToolCall", cur.id, call.id, tool_effect(r, cur.id, call.id))
    return None


class ReferenceSemantics:
    """The reference's own semantics: ``_store.commit`` on a ``Store``; a load is the
    projection or the fold of the stream's prefix."""

    def initial_store(self, runs: int) -> Store:
        store = Store(1, (), ((),) * runs, (None,) * runs, frozenset())  # type: ignore[arg-type]
        for r in range(runs):
            facts = (Fact("RunCreated", arg=run_id(r)), Fact("InputAccepted", arg="in-0"))
            store = store.append(Commit(f"create:{run_id(r)}", r, facts, 1, 1, "create"),
                                 fold(facts))
        return store

    def commit(self, ctx: Any, w: World, r: int, cid: str, cmd: Cmd, epoch: int,
               origin: str, base: int) -> tuple[World, str]:
        return commit(w, r, cid, cmd, epoch=epoch, origin=origin, base=base, calls=ctx.calls,
                      approvals=ctx.approvals, bugs=ctx.bugs)

    def image(self, store: Store) -> Store:
        return store

    def commit_key(self, store: Store) -> Any:
        """What ``_store.commit`` reads of *store*: the epoch, the projection and the
        positions, and the commit-id index with each id's Run and facts (a replay's
        facts); not the log's ghost data nor the order of its groups."""
        return (store.epoch, store.runs, tuple(len(s) for s in store.streams),
                frozenset((c.cid, c.run, c.facts) for c in store.log))

    def appended(self, store: Store, after: Store, r: int, epoch: int, origin: str,
                 base: int) -> Any:
        """What a commit that turned *store* into *after* appended, as ``append`` redoes
        it on another store — or None when *after* is not exactly that append."""
        if len(after.log) != len(store.log) + 1:
            return None
        done = (after.log[-1].cid, after.log[-1].facts, after.runs[r])
        return done if self.append(store, r, epoch, origin, base, done) == after else None

    def append(self, store: Store, r: int, epoch: int, origin: str, base: int,
               done: Any) -> Store:
        """*store* with the group *done* (``appended``) committed to Run *r* by a writer at
        *epoch* (the log entry's ghost data: *origin*, *base*, the persisted epoch)."""
        cid, facts, state = done
        return store.append(Commit(cid, r, facts, epoch, store.epoch, origin, base), state)

    def load(self, store: Store, r: int, position: int) -> RunState:
        if position == store.position(r):
            return store.runs[r]
        state = fold(store.streams[r][: position + 1])
        assert state is not None  # RunCreated is at position 0
        return state

    def plan(self, store: Store, r: int, position: int) -> Cmd | None:
        return plan(r, self.load(store, r, position), position)

    def executing(self, store: Store, r: int) -> tuple[str, ...]:
        return executing_targets(store.runs[r])

    def forged(self, ctx: Any, w: World) -> Iterator[tuple[str, World]]:
        """None: abstract commands have no envelope or bodies to forge, and this fold
        checks nothing (its guards are the invariants' log walk)."""
        return iter(())


REFERENCE = ReferenceSemantics()
