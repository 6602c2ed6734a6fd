"""Values of the reference machine: abstract facts, Run states, the store, owners, executor.

Everything is a frozen attrs value or a tuple, so a whole world state is hashable. Bodies
(requests, results, outputs) are abstracted away: a fact keeps only its kind, the step,
call and effect it names and a small ``arg`` tag. Identities are the real derived ids of
``_ids`` (the spec's own derivation); :data:`NAMES` maps each one to a short readable label.

``evolve`` is the *meaning* of a fact (spec §2.6 "fold effect"); it checks nothing. The
guards of §2.7 live in ``decide`` (who may write) and in the invariants (what was written).
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from . import _ids as ids

__all__ = [
    "ACTIVE", "STOPPED", "COMPLETED", "FAILED_RUN",
    "PREPARED", "EXECUTING", "PENDING", "WAITING", "COMPLETED_CALL", "FAILED_CALL",
    "OPEN", "LIVE_CALL", "EffectInfo", "EFFECTS", "NAMES", "name",
    "Fact", "Cmd", "Call", "ModelStep", "ToolStep", "RunState", "Commit", "Store",
    "Owner", "Rec", "World", "evolve", "fold", "run_facts", "replace", "run_id",
    "prepare_ids", "model_effect", "tool_effect", "tool_step_id", "call_id", "response_id",
    "executing_targets", "find_call",
]

# Run status; model step status; call status.
ACTIVE, STOPPED, COMPLETED, FAILED_RUN = "active", "stopped", "completed", "failed"
PREPARED, EXECUTING = "prepared", "executing"
PENDING, WAITING, COMPLETED_CALL, FAILED_CALL = "pending", "waiting", "completed", "failed"
LIVE_CALL = frozenset({PENDING, EXECUTING, WAITING})
OPEN = "open"  # the Open step (a string sentinel keeps states small)


def replace(obj: Any, **changes: Any) -> Any:
    """``attrs.evolve`` without its generality (it is the hot path of the exploration):
    a per-class function, generated once, that passes the unchanged fields positionally.
    Raises ``TypeError`` on a name that is not a field."""
    make = _REPLACERS.get(obj.__class__)
    if make is None:
        make = _REPLACERS[obj.__class__] = _replacer(obj.__class__)
    return make(obj, **changes)


class _Keep:
    """The default of a generated replacer's parameters: "this field is unchanged"."""

    __slots__ = ()


_KEEP = _Keep()


def _replacer(cls: type) -> Any:
    """``(obj, **changes) -> cls(...)`` for the attrs class *cls* (every field an
    ``__init__`` parameter, in order, as in the frozen state classes here)."""
    names = [a.name for a in attrs.fields(cls)]
    if any(not a.init or a.alias != a.name for a in attrs.fields(cls)):
        raise TypeError(f"replace() needs plain init fields: {cls.__qualname__}")
    params = ", ".join(f"{n}=_KEEP" for n in names)
    values = ", ".join(f"obj.{n} if {n} is _KEEP else {n}" for n in names)
    source = f"def replace_{cls.__name__}(obj, *, {params}):\n    return cls({values})\n"
    namespace: dict[str, Any] = {"_KEEP": _KEEP, "cls": cls}
    exec(compile(source, f"<replace {cls.__qualname__}>", "exec"), namespace)
    return namespace[f"replace_{cls.__name__}"]


_REPLACERS: dict[type, Any] = {}

# --------------------------------------------------------------------------- identities


@attrs.frozen
class EffectInfo:
    """What an EffectID stands for (the executor's Assignment, abstracted)."""

    run: int
    step: str
    call: str  # "" for a model effect
    kind: str  # "model" | "tool"
    seq: int


#: EffectID -> EffectInfo, filled as ids are derived (deterministic cache, not state).
EFFECTS: dict[str, EffectInfo] = {}
#: any derived id -> short label for traces.
NAMES: dict[str, str] = {}


def name(ident: str) -> str:
    """Readable label of a derived id (its first 8 hex digits if it has none)."""
    return NAMES.get(ident) or (ident[:8] if len(ident) == 64 else ident)


def run_id(r: int) -> str:
    return f"run-{r}"


@functools.cache
def prepare_ids(r: int, base: int) -> tuple[str, str]:
    """(prepare command id, model step id) of a Prepare at RunPosition ``base``."""
    cid = ids.derive_prepare_command_id(run_id(r), base)
    step = ids.derive_model_step_id(run_id(r), cid)
    NAMES[step] = f"r{r}.m{base}"
    return cid, step


@functools.cache
def model_effect(r: int, step: str, seq: int) -> str:
    effect = ids.derive_effect_id(run_id(r), step, "", seq)
    EFFECTS[effect] = EffectInfo(r, step, "", "model", seq)
    NAMES[effect] = f"{name(step)}#{seq}"
    return effect


@functools.cache
def tool_step_id(source: str) -> str:
    step = ids.derive_tool_step_id(source)
    NAMES[step] = name(source) + ".tools"
    return step


@functools.cache
def call_id(source: str, index: int) -> str:
    call = ids.derive_call_id(source, index)
    NAMES[call] = f"{name(source)}.c{index}"
    return call


@functools.cache
def tool_effect(r: int, step: str, call: str, seq: int = 0) -> str:
    """A call's EffectID: sequence 0 (INV-6); a broken planner may start attempt ``seq``."""
    effect = ids.derive_effect_id(run_id(r), step, call, seq)
    EFFECTS[effect] = EffectInfo(r, step, call, "tool", seq)
    NAMES[effect] = name(call) + (f"#{seq}" if seq else "")
    return effect


@functools.cache
def response_id(r: int, step: str, call: str) -> str:
    return ids.derive_response_id(run_id(r), step, call, "approval")


# --------------------------------------------------------------------------- facts, commands


@attrs.frozen(cache_hash=True)
class Fact:
    """An abstract fact: ``kind`` is the spec's fact name; ``arg`` a small hashable tag.

    arg by kind: RunCreated → run id; InputAccepted → input id; ModelStepPrepared → the
    input ids taken; ToolStepOpened → (source step, initial calls); ToolCallFailed →
    (outcome "known"/"unknown", failure class); ModelStepFailed → failure class;
    RunEnded → ("completed",) | ("failed", reason) | ("stopped", reason, uncertain calls,
    uncertain model).
    """

    kind: str
    step: str = ""
    call: str = ""
    effect: str = ""
    arg: Any = None


@attrs.frozen(cache_hash=True)
class Cmd:
    """An abstract command (spec §2.8); ``arg`` as documented in ``_store.decide``."""

    kind: str
    step: str = ""
    call: str = ""
    effect: str = ""
    arg: Any = None


# --------------------------------------------------------------------------- Run state


@attrs.frozen(cache_hash=True)
class Call:
    id: str
    policy: str  # "direct" | "approval"
    status: str
    effect: str = ""
    outcome: str = ""  # "", "known", "unknown"
    klass: str = ""  # failure class
    response: str = ""  # ResponseID while WAITING


@attrs.frozen(cache_hash=True)
class ModelStep:
    id: str
    status: str  # PREPARED | EXECUTING
    effect: str = ""
    rejects: int = 0


@attrs.frozen(cache_hash=True)
class ToolStep:
    id: str
    source: str
    calls: tuple[Call, ...]


@attrs.frozen(cache_hash=True)
class RunState:
    """MachineState (spec §2.2) without bodies and usage."""

    run: str
    status: str = ACTIVE
    current: Any = OPEN  # OPEN | ModelStep | ToolStep | None
    pending: tuple[str, ...] = ()
    model_steps: int = 0
    last_tool: ToolStep | None = None
    end: tuple[Any, ...] = ()  # the RunEnded arg once terminal


def _with_call(state: RunState, call_id_: str, **changes: Any) -> RunState:
    step = state.current
    if not isinstance(step, ToolStep):
        return state  # nothing to change (only reachable in broken variants)
    calls = tuple(replace(c, **changes) if c.id == call_id_ else c for c in step.calls)
    step = replace(step, calls=calls)
    if all(c.status not in LIVE_CALL for c in calls):  # the step closing rule (§2.5)
        return replace(state, current=OPEN, last_tool=step)
    return replace(state, current=step)


def _with_model(state: RunState, **changes: Any) -> RunState:
    if not isinstance(state.current, ModelStep):
        return state
    return replace(state, current=replace(state.current, **changes))


def evolve(state: RunState | None, fact: Fact) -> RunState:
    """Fold one fact (spec §2.6, the "fold effect" column). Checks nothing: see module doc."""
    k = fact.kind
    if k == "RunCreated" or state is None:
        return RunState(run=fact.arg)
    if k == "InputAccepted":
        return replace(state, pending=(*state.pending, fact.arg))
    if k == "ModelStepPrepared":
        return replace(state, current=ModelStep(fact.step, PREPARED), pending=(),
                            model_steps=state.model_steps + 1)
    if k in ("ModelStepWithdrawn", "ModelStepRecovered"):
        return replace(state, current=OPEN, model_steps=state.model_steps - 1)
    if k == "ModelStepStarted":
        return _with_model(state, status=EXECUTING, effect=fact.effect)
    if k == "ModelStepRejected":
        step = state.current
        rejects = step.rejects + 1 if isinstance(step, ModelStep) else 0
        return _with_model(state, status=PREPARED, rejects=rejects)
    if k in ("ModelStepFailed", "ModelStepCompleted"):
        return replace(state, current=OPEN)
    if k == "ToolStepOpened":
        source, calls = fact.arg
        return replace(state, current=ToolStep(fact.step, source, calls))
    if k == "ToolCallStarted":
        return _with_call(state, fact.call, status=EXECUTING, effect=fact.effect)
    if k == "ToolCallApproved":
        return _with_call(state, fact.call, status=PENDING, response="")
    if k == "ToolCallCompleted":
        return _with_call(state, fact.call, status=COMPLETED_CALL)
    if k == "ToolCallFailed":
        outcome, klass = fact.arg
        return _with_call(state, fact.call, status=FAILED_CALL, outcome=outcome, klass=klass,
                          response="")
    if k == "RunEnded":
        status = {"completed": COMPLETED, "failed": FAILED_RUN, "stopped": STOPPED}[fact.arg[0]]
        return replace(state, status=status, current=None, end=fact.arg)
    raise ValueError(f"unknown fact kind {k!r}")


@functools.lru_cache(maxsize=1 << 16)
def fold(facts: tuple[Fact, ...]) -> RunState | None:
    """Fold a Run's stream (a prefix of it); None for an empty stream."""
    if not facts:
        return None
    return evolve(fold(facts[:-1]), facts[-1])


def find_call(state: RunState, call: str) -> Call | None:
    """The call with that id in the current ToolStep, or in the last closed one."""
    for step in (state.current, state.last_tool):
        if isinstance(step, ToolStep):
            for c in step.calls:
                if c.id == call:
                    return c
    return None


def executing_targets(state: RunState) -> tuple[str, ...]:
    """EffectIDs of the EXECUTING model step or calls (recovery_targets, §2.10)."""
    cur = state.current
    if isinstance(cur, ModelStep) and cur.status == EXECUTING:
        return (cur.effect,)
    if isinstance(cur, ToolStep):
        return tuple(c.effect for c in cur.calls if c.status == EXECUTING)
    return ()


# --------------------------------------------------------------------------- store


@attrs.frozen(cache_hash=True)
class Commit:
    """One atomic append under one commit id (spec §4.8).

    ``epoch`` is the writer's epoch; ``store_epoch`` (ghost) the persisted epoch at the
    moment of the append; ``origin`` (ghost) who wrote it: "create", "user", "loop",
    "reconcile" or "deliver:<EffectID of the delivered key>"; ``base`` (ghost) the
    RunPosition the loop had loaded when it planned the command (-1: not a planned one).
    """

    cid: str
    run: int
    facts: tuple[Fact, ...]
    epoch: int
    store_epoch: int
    origin: str
    base: int = -1


@attrs.frozen(cache_hash=True)
class Store:
    """One scope: its epoch, its commit log, the Runs' streams and the machine projection.

    ``streams[r]`` is the stream ``run/<RunID>`` (the Run's facts in log order), kept next to
    the log so that positions need no scan; the invariants check it against the log.
    """

    epoch: int  # the scope's persisted epoch
    log: tuple[Commit, ...]  # every commit of the scope, in append order
    streams: tuple[tuple[Fact, ...], ...]
    runs: tuple[RunState, ...]  # the machine projection, kept by folding each append
    cids: frozenset[str]  # the commit-id index (§4.8), kept next to the log

    def position(self, r: int) -> int:
        """RunPosition: index of the Run's newest fact (RunCreated is 0)."""
        return len(self.streams[r]) - 1

    def append(self, c: Commit, state: RunState) -> Store:
        r, streams, runs = c.run, self.streams, self.runs
        if 0 <= r < len(streams) and len(runs) == len(streams):
            streams = (*streams[:r], (*streams[r], *c.facts), *streams[r + 1:])
            runs = (*runs[:r], state, *runs[r + 1:])
        else:  # a Run number outside the store (a broken variant): unchanged, as before
            streams = tuple((*s, *c.facts) if i == r else s for i, s in enumerate(streams))
            runs = tuple(state if i == r else x for i, x in enumerate(runs))
        return Store(self.epoch, (*self.log, c), streams, runs, self.cids | {c.cid})


def run_facts(log: tuple[Commit, ...], r: int) -> tuple[Fact, ...]:
    """The stream of Run ``r`` recomputed from the log (for the invariants)."""
    return tuple(f for c in log if c.run == r for f in c.facts)


# --------------------------------------------------------------------------- owners, executor


@attrs.frozen(cache_hash=True)
class Owner:
    """A runtime process and what it holds in memory.

    ``phase`` — "down" (not started), "reconcile" (opened the scope, recovering before it
    drives), "drive", or "fenced" (it got OwnershipLostError and stopped for good).
    ``section`` — the EffectIDs of the shielded start→dispatch section in progress, in
    start order (``()`` if none): one start, or the starts of a fused batch
    (``_moves._fused``), dispatched one per move from the head; ``offers`` — dispatch
    offers of the head refused retryable so far.
    ``aborting`` — targets its reconciler found ``missing`` and is about to abort.
    ``views`` — only with ``stale_reads``: per Run, the RunPosition of the snapshot its
    loop loaded last (otherwise the loop plans from the projection itself).
    """

    epoch: int = 0
    alive: bool = False
    phase: str = "down"
    section: tuple[str, ...] = ()
    offers: int = 0
    aborting: tuple[str, ...] = ()
    views: tuple[int, ...] = ()


@attrs.frozen(cache_hash=True)
class Rec:
    """The executor's execution record of one AssignmentKey.

    status: "running" | "orphaned" (worker lost) | "settled" (Outcome readable) |
    "acked" | "aborted" (tombstone written by abort before any acceptance).
    ``accepts`` counts executions begun by a dispatch, ``restarts`` those begun by adoption;
    ``durable`` (ghost) — the start fact was in the log when the first dispatch was accepted.
    """

    effect: str
    status: str
    accepts: int = 0
    restarts: int = 0
    outcome: str = ""
    durable: bool = True


@attrs.frozen(cache_hash=True)
class World:
    """One state of the whole system: the scope's store, two owner processes, the
    executor's records, duplicated Outcomes in flight, the fault budgets left, and the
    ghosts (violations that only a transition can observe).

    ``store`` is whatever the semantics of the moves keeps (``_semantics``): a ``Store``
    here; the core model of ``runx_actors.check`` keeps the real core's store in it."""

    store: Store
    owners: tuple[Owner, ...]
    recs: tuple[Rec, ...]  # sorted by effect
    inflight: tuple[tuple[str, str], ...]  # duplicated Outcomes on their way (sorted)
    crashes: int  # budget: owner or worker crashes left
    takeovers: int  # budget: takeovers by the second process left
    duplicates: int  # budget: duplicated Outcomes / user resubmissions left
    inputs_sent: tuple[int, ...]  # per Run, inputs the user added
    ghosts: tuple[str, ...] = ()  # violations observed on transitions (INV-13, INV-26)

    def rec(self, effect: str) -> Rec | None:
        for rec in self.recs:
            if rec.effect == effect:
                return rec
        return None

    def with_rec(self, rec: Rec) -> World:
        recs = tuple(sorted((*(x for x in self.recs if x.effect != rec.effect), rec),
                            key=lambda x: x.effect))
        return replace(self, recs=recs)

    def with_owner(self, o: int, owner: Owner) -> World:
        owners = self.owners
        if 0 <= o < len(owners):
            owners = (*owners[:o], owner, *owners[o + 1:])
        return World(self.store, owners, self.recs, self.inflight, self.crashes,
                     self.takeovers, self.duplicates, self.inputs_sent, self.ghosts)

    def with_ghost(self, note: str) -> World:
        return replace(self, ghosts=(*self.ghosts, note))
