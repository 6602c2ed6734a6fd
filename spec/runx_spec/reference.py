"""The reference state machine of Agent Run Protocol v1 (architecture.md §7).

Small, obviously correct Python that a model checker explores exhaustively: one scope with
``runs`` Runs, two owner processes (the loop and the takeover reconciler), an executor with
execution records, a user, and an environment that crashes owners and workers, takes over,
loses, duplicates, delays and reorders Outcomes, and answers dispatch with accepted /
retryable / unknown. Bodies are abstracted to tags; identities are the real derived ids
(derived by ``_ids``, the spec's own implementation of §3.2; the reference imports nothing
from ``runx_actors``'s protocol).

Layout: ``_state`` (values and the fold), ``_store`` (decide and commit), ``_semantics``
(the Run semantics the moves drive: this machine's own, built from those two), ``_moves``
(who can do what), ``_invariants`` (spec §7 as checks). ``build_model(config, variant)`` returns
an object satisfying the ``runx_actors.check`` Model protocol; a ``variant`` from
:data:`VARIANTS` switches on one deliberate defect that some invariant must catch.

Modelling choices (each keeps the state space small without hiding a behaviour):

* The loop commits from the projection (load and commit in one step) unless
  ``stale_reads``; a fenced writer's snapshot is the log as it was at its epoch.
* A writer with a stale epoch is refused before the replay lookup (the spec fences the
  append; either way it writes nothing) and, once refused, its runtime stops (§4.4).
* A crash restarts the process at once (the dead interval commutes with every other
  move; staying dead is a special case of being fenced and idle).
* An executor record is readable until acknowledged, so a lost notification is only a
  delayed read; duplicated reads are copies in flight that can arrive late or be lost.
  Acceptance and start are one step (``accepted`` and ``running`` race abort alike).
* One ToolStep per Run, ``max_prepares`` model steps per Run; tools never replay.
* Fused commits (``fused``, on by default, as the runtime commits): a settling deliver
  goes on, in the same move, with the Prepare and starts the new state plans; each
  command keeps its own commit and command id, and no fault lands between them.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import attrs

from ._invariants import INVARIANT_IDS, INVARIANT_NOTES, INVARIANTS, Invariant, first_violation
from ._moves import OWNERS, Ctx, canonical, initial_world, is_final, moves
from ._semantics import REFERENCE
from ._state import EFFECTS, NAMES, Commit, Fact, ModelStep, ToolStep, World, name

__all__ = [
    "ReferenceConfig", "ReferenceModel", "VARIANTS", "EXPECTED", "INVARIANT_IDS",
    "INVARIANT_NOTES", "Invariant", "build_model",
]

#: Broken variants: name → the one defect it switches on.
VARIANTS: dict[str, str] = {
    "double_tool_start": "the executor starts a tool a second time when its key is dispatched "
                         "again, instead of deduplicating by AssignmentKey",
    "restart_replay_never": "on adopting an orphaned record the executor restarts a "
                            "replay-never tool instead of settling it Unknown",
    "settle_foreign_effect": "deliver settles whatever effect its target is running now, not "
                             "the effect of the Outcome's key (a late Outcome of an earlier "
                             "attempt settles the retry)",
    "replay_redecides": "the store skips the commit-id replay lookup and decides a known "
                        "command id again",
    "replay_reapplies": "on a commit-id replay the store folds the original group into the "
                        "projection a second time (nothing appended to the log)",
    "no_epoch_check": "the store appends without comparing the writer's epoch with the "
                      "persisted one (a fenced owner still writes)",
    "shared_epoch": "opening the scope does not raise the epoch: a takeover shares the old "
                    "owner's epoch",
    "run_ended_while_executing": "CancelRun ends the Run without closing its EXECUTING model "
                                 "step and calls",
    "late_outcome_written": "a tool settlement (Outcome or compensation) arriving after the call "
                            "was failed UNKNOWN (cancel, takeover) is appended anyway, even "
                            "after RunEnded",
    "dispose_without_abort": "takeover disposes a `missing` target without tombstoning its "
                             "key first",
    "dispose_orphaned": "takeover disposes an `orphaned` target instead of deferring it",
    "abort_overrides_accept": "the executor's abort tombstones a key even when an acceptance "
                              "won the race",
    "dispatch_before_start": "the loop dispatches an effect even when its start commit was "
                             "refused (not durable)",
    "loop_skips_tool_calls": "the loop never starts a PENDING tool call (the Run stalls: "
                             "found only by --check-deadlock)",
    "fused_split": "a fused batch is two transactions, the settle and then the rest; the "
                   "second can be lost while the batch reports success, so the loop "
                   "dispatches starts that are not in the log",
}

#: The invariant that catches each variant first (in BFS order, with the test configs).
EXPECTED: dict[str, str] = {
    "double_tool_start": "EXEC-1",
    "restart_replay_never": "EXEC-1",
    "settle_foreign_effect": "INV-5",
    "replay_redecides": "INV-9.replay",
    "replay_reapplies": "INV-40",
    "no_epoch_check": "INV-28",
    "shared_epoch": "INV-27",
    "run_ended_while_executing": "INV-4",
    "late_outcome_written": "INV-2",
    "dispose_without_abort": "INV-30",
    "dispose_orphaned": "INV-30",
    "abort_overrides_accept": "INV-31",
    "dispatch_before_start": "INV-24",
    "loop_skips_tool_calls": "DEADLOCK",
    "fused_split": "INV-24",
}


@attrs.frozen(kw_only=True)
class ReferenceConfig:
    """Bounds of the exploration. Every counter is finite, so is the state space."""

    runs: int = 1
    calls: int = 2  # tool calls the first model result asks for (call 1 needs approval)
    crashes: int = 1  # owner or executor-worker crashes
    takeovers: int = 1  # takeovers by owner2
    duplicates: int = 1  # duplicated Outcomes / dispatches / user resubmissions
    inputs: int = 0  # inputs the user adds while a Run is active
    max_prepares: int = 1  # model steps prepared per Run (withdrawn/recovered included);
    # once spent the Run rests at Open, which bounds it without changing any rule
    approvals: bool = False  # call 1 needs an approval (approve / reject)
    malformed: bool = False  # the first attempt of a model step may be malformed
    failures: bool = False  # model: provider failure; tool: KNOWN and UNKNOWN failures
    cancel: bool = False  # the user may cancel the Run at any time
    stale_reads: bool = False  # the loop may commit from a snapshot older than the store
    adversarial: bool = False  # an adversary sends forged commands (``_moves._forged_moves``)
    fused: bool = True  # fused commits: a settling deliver continues, in the same move, with
    # the Prepare / starts the new state plans (``_moves._fused``); False: one commit a move


class ReferenceModel:
    """The reference machine as a ``runx_actors.check`` Model (duck-typed)."""

    def __init__(self, config: Any, variant: str | None = None) -> None:
        if variant is not None and variant not in VARIANTS:
            raise ValueError(f"unknown variant {variant!r}; known: {sorted(VARIANTS)}")
        defaults = ReferenceConfig()
        self.config = config

        def get(field: str) -> Any:
            return getattr(config, field, getattr(defaults, field))

        self.ctx = Ctx(runs=get("runs"), calls=get("calls"), inputs=get("inputs"),
                       max_prepares=get("max_prepares"), approvals=bool(get("approvals")),
                       malformed=bool(get("malformed")), failures=bool(get("failures")),
                       cancel=bool(get("cancel")), stale_reads=bool(get("stale_reads")),
                       bugs=frozenset({variant}) if variant else frozenset(), sem=REFERENCE,
                       adversarial=bool(get("adversarial")), fused=bool(get("fused")))
        self._budgets = (get("crashes"), get("takeovers"), get("duplicates"))
        self.variant = variant
        self.name = "reference" + (f"[{variant}]" if variant else "")

    def initial_states(self) -> Iterable[Hashable]:
        return [initial_world(self.ctx, *self._budgets)]

    def actions(self, state: Hashable) -> Iterable[tuple[str, Hashable]]:
        assert isinstance(state, World)
        return list(moves(self.ctx, state))

    def invariants(self) -> Sequence[Invariant]:
        return INVARIANTS

    def first_violation(self, state: Hashable) -> tuple[Invariant, str] | None:
        """What checking :meth:`invariants` in order gives, incrementally
        (``_invariants.first_violation``: the store's verdict cached per store)."""
        assert isinstance(state, World)
        return first_violation(state)

    def canonical(self, state: Hashable) -> Hashable:
        """``_moves.canonical`` (a fenced idle writer is an OwnershipLostError'd one) —
        unless the variant disables fencing."""
        assert isinstance(state, World)
        return state if "no_epoch_check" in self.ctx.bugs else canonical(state)

    def describe(self, state: Hashable) -> dict[str, Any]:
        assert isinstance(state, World)
        return describe(state)

    def is_final(self, state: Hashable) -> bool:
        """Not a deadlock when nothing can move (``_moves.is_final``): Runs ended or
        waiting for the outside world."""
        assert isinstance(state, World)
        return is_final(self.ctx, state)

    def shared_tables(self) -> tuple[dict[Any, Any], ...]:
        """The derivation caches the moves read (``EFFECTS``: an EffectID → what it
        stands for; ``NAMES``: trace labels): a parallel search merges what each worker
        process adds to them into the others."""
        return (EFFECTS, NAMES)


def _step(cur: Any) -> Any:
    if cur is None or isinstance(cur, str):
        return cur
    if isinstance(cur, ModelStep):
        return {"model_step": name(cur.id), "status": cur.status,
                "effect": name(cur.effect) if cur.effect else "", "rejects": cur.rejects}
    assert isinstance(cur, ToolStep)
    return {"tool_step": name(cur.id), "calls": {
        name(c.id): c.status + (f"/{c.outcome}" if c.outcome else "") for c in cur.calls}}


def _fact(f: Fact) -> str:
    args = [name(x) for x in (f.step, f.call, f.effect) if x]
    if f.kind == "ToolStepOpened":
        args.append(f"{len(f.arg[1])} calls")
    elif f.kind == "RunEnded":  # ("stopped", reason, uncertain calls, uncertain model) …
        args.extend(name(x) if isinstance(x, str) else str([name(y) for y in x])
                    for x in f.arg if x)
    elif f.arg is not None:
        args.append(str(f.arg))
    return f"{f.kind}({', '.join(args)})"


def _commit(c: Commit) -> str:
    cid = c.cid if ":" in c.cid else c.cid[:8]
    origin = "deliver " + name(c.origin[8:]) if c.origin.startswith("deliver:") else c.origin
    return f"{cid} e{c.epoch} {origin}: " + "; ".join(_fact(f) for f in c.facts)


def describe_environment(w: World) -> dict[str, Any]:
    """The environment part of :func:`describe`: owners, executor, Outcomes in flight,
    budgets and ghosts (whatever the store)."""
    return {
        "owners": {OWNERS[o]: {"epoch": x.epoch, "alive": x.alive, "phase": x.phase,
                               "views": list(x.views),
                               "section": ", ".join(name(e) for e in x.section)}
                   for o, x in enumerate(w.owners)},
        "executor": {name(r.effect): {"status": r.status, "accepts": r.accepts,
                                      "restarts": r.restarts, "outcome": r.outcome}
                     for r in w.recs},
        "inflight": [f"{name(e)}:{out}" for e, out in w.inflight],
        "budget": {"crashes": w.crashes, "takeovers": w.takeovers,
                   "duplicates": w.duplicates},
        "ghosts": list(w.ghosts),
    }


def describe(w: World) -> dict[str, Any]:
    """A JSON-able summary of a world state, for traces."""
    return {
        "epoch": w.store.epoch,
        "runs": [{"status": s.status, "current": _step(s.current), "pending": list(s.pending),
                  "model_steps": s.model_steps, "position": w.store.position(r)}
                 for r, s in enumerate(w.store.runs)],
        "log": [_commit(c) for c in w.store.log],
        **describe_environment(w),
    }


def build_model(config: Any = None, variant: str | None = None) -> ReferenceModel:
    """The reference model for ``config`` (any object with the ReferenceConfig attributes;
    missing ones take the defaults), optionally with one broken ``variant``."""
    return ReferenceModel(config if config is not None else ReferenceConfig(), variant)
