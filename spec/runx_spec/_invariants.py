"""Invariants of the reference machine, named by their spec id (run-protocol.md §7).

Most are checked on the log, by an independent walk that applies the evolve guards of §2.7
fact by fact (``_log_report``, cached per log); the rest look at the projection, the
executor's records, the owners and the ghosts that transitions leave behind.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable
from typing import Any

import attrs

from . import _ids as ids
from ._state import (
    ACTIVE,
    EFFECTS,
    EXECUTING,
    LIVE_CALL,
    OPEN,
    PENDING,
    PREPARED,
    WAITING,
    EffectInfo,
    ModelStep,
    Store,
    ToolStep,
    World,
    evolve,
    find_call,
    fold,
    model_effect,
    name,
    run_facts,
    tool_effect,
    tool_step_id,
)

__all__ = ["Invariant", "INVARIANTS", "INVARIANT_IDS", "INVARIANT_NOTES", "STORE_ONLY",
           "WORLD_INVARIANTS", "store_verdict", "first_violation"]


@attrs.frozen
class Invariant:
    """Duck-compatible with ``runx_actors.check.Invariant``: None = holds, else a message."""

    name: str
    description: str
    check: Callable[[World], str | None]


_SETTLING = frozenset({"ModelStepRecovered", "ModelStepRejected", "ModelStepFailed",
                       "ModelStepCompleted", "ToolCallCompleted", "ToolCallFailed"})


class _RunWalk:
    """Where the walk of one Run's commits (``_step_run``) stands after some prefix of the
    log: the fold so far and what the §2.7 guards remember, and ``report``, the first
    breach of each id. A walk is never changed once made: stepping copies it."""

    __slots__ = (
        "accepted_at",
        "closes",
        "index",
        "key",
        "r",
        "report",
        "sources",
        "starts",
        "state",
        "steps",
    )

    def __init__(self, r: int) -> None:
        self.r = r
        self.key = next(_WALK_KEYS)  # this walk's number (never given to another)
        self.state: Any = None
        self.index = -1  # stream index of the fact being walked
        self.accepted_at: dict[str, int] = {}  # input id -> index of its InputAccepted
        self.starts: dict[str, int] = {}  # effect -> number of start facts
        self.closes: dict[str, int] = {}  # effect -> number of settling facts
        self.steps: set[str] = set()
        self.sources: set[str] = set()
        self.report: dict[str, str] = {}

    def copy(self) -> _RunWalk:
        new = _RunWalk(self.r)
        new.state, new.index = self.state, self.index
        new.accepted_at, new.starts = dict(self.accepted_at), dict(self.starts)
        new.closes, new.steps = dict(self.closes), set(self.steps)
        new.sources, new.report = set(self.sources), dict(self.report)
        return new


_WALK_KEYS = itertools.count()


def _walk_run(log: tuple, r: int, report: dict[str, str]) -> None:
    """Walk Run ``r``'s commits with the §2.7 guards; note the first breach of each id
    (directly: the oracle of the memoized :func:`_step_run`)."""
    walk = _RunWalk(r)
    for c in log:
        if c.run == r:
            walk = _step_run_now(walk, c)
    for inv, msg in walk.report.items():
        report.setdefault(inv, msg)


def _step_run(walk: _RunWalk, c: Any) -> _RunWalk:
    """:func:`_step_run_now`, once per walk and what the step reads of the commit: its
    id, facts and base — not its writer or persisted epochs nor its origin (the
    scope-level checks of :func:`_extend` read those). Logs that differ only there
    (the default profile: 12,840 logs, 3,115 such sequences) share their Run walks."""
    key = (walk.key, c.cid, c.facts, c.base)
    stepped = _STEPPED.get(key)
    if stepped is None:
        if len(_STEPPED) >= _WALKS_LIMIT:
            _STEPPED.clear()
        stepped = _STEPPED[key] = _step_run_now(walk, c)
    return stepped


#: (walk number, commit id, facts, base) -> the walk continued by that commit
_STEPPED: dict[tuple[int, str, tuple[Any, ...], int], _RunWalk] = {}


def _step_run_now(walk: _RunWalk, c: Any) -> _RunWalk:
    """The walk *walk* continued by commit *c* of its Run (a new walk; *walk* unchanged)."""
    walk = walk.copy()
    r, report = walk.r, walk.report

    def bad(inv: str, msg: str) -> None:
        report.setdefault(inv, f"run-{r}: {msg}")

    state, index = walk.state, walk.index
    accepted_at, starts, closes = walk.accepted_at, walk.starts, walk.closes
    steps, sources = walk.steps, walk.sources
    if not c.facts:
        bad("INV-10", f"empty group {c.cid[:8]}")
    unknown_calls = []
    for i, f in enumerate(c.facts):
        index += 1
        k = f.kind
        if state is None:
            if k != "RunCreated":
                bad("INV-40", f"first fact is {k}")
            state = evolve(None, f)
            continue
        if state.status != ACTIVE:
            bad("INV-2", f"{k} folded after RunEnded")
        if k == "RunEnded" and i != len(c.facts) - 1:
            bad("INV-10", "RunEnded is not the last fact of its group")
        cur = state.current
        if k == "RunCreated":
            bad("INV-40", "RunCreated twice")
        elif k == "InputAccepted":
            if f.arg in state.pending or f.arg in accepted_at:
                bad("INV-12", f"input {f.arg} accepted twice")
            accepted_at[f.arg] = index
        elif k == "ModelStepPrepared":
            if cur != OPEN:
                bad("INV-40", "ModelStepPrepared while not Open")
            if f.arg != state.pending:
                bad("INV-12", f"prepare took {f.arg}, pending {state.pending}")
            if f.step in steps:
                bad("INV-21", f"step {name(f.step)} prepared twice")
            steps.add(f.step)
        elif k == "ModelStepWithdrawn":
            if not (isinstance(cur, ModelStep) and cur.status == PREPARED and state.pending):
                bad("INV-40", "withdrawn without a PREPARED step and pending inputs")
        elif k == "ModelStepStarted":
            if not (isinstance(cur, ModelStep) and cur.status == PREPARED):
                bad("INV-40", "ModelStepStarted on a step that is not PREPARED")
            elif f.effect != model_effect(r, cur.id, cur.rejects):
                bad("INV-7", f"model start names {name(f.effect)}")
            late = [i for i in state.pending if accepted_at[i] <= c.base]
            if late:
                bad("INV-14", f"{name(f.step)} started with inputs {late} pending")
            starts[f.effect] = starts.get(f.effect, 0) + 1
        elif k == "ToolStepOpened":
            source = f.arg[0]
            if cur != OPEN or f.step != tool_step_id(source) or source in sources:
                bad("INV-17", f"ToolStep {name(f.step)} not opened once from its source")
            sources.add(source)
        elif k == "ToolCallStarted":
            call = find_call(state, f.call) if isinstance(cur, ToolStep) else None
            if call is None or call.status != PENDING:
                bad("INV-6", f"{name(f.call)} started while not PENDING")
            if f.effect != tool_effect(r, f.step, f.call):
                bad("INV-6", f"{name(f.call)} started under a non-derived effect")
            starts[f.effect] = starts.get(f.effect, 0) + 1
            if starts[f.effect] > 1:
                bad("INV-6", f"{name(f.call)} started twice")
        elif k == "ToolCallApproved":
            call = find_call(state, f.call) if isinstance(cur, ToolStep) else None
            if call is None or call.status != WAITING:
                bad("INV-40", f"{name(f.call)} approved while not WAITING")
        if k in _SETTLING:
            if k.startswith("Model"):
                running = cur.effect if (isinstance(cur, ModelStep)
                                         and cur.status == EXECUTING) else None
            else:
                call = find_call(state, f.call) if isinstance(cur, ToolStep) else None
                if call is None or call.status not in LIVE_CALL:
                    bad("INV-40", f"{k} for {name(f.call)}, which is not live")
                    call = None
                running = call.effect if call is not None else None
                if k == "ToolCallFailed":
                    outcome, klass = f.arg
                    was_running = call is not None and call.status == EXECUTING
                    if (outcome == "unknown") != (klass == "effect_unknown") or (
                            outcome == "unknown" and not was_running):
                        bad("INV-19", f"{name(f.call)} failed {outcome}/{klass}")
                    if outcome == "unknown":
                        unknown_calls.append(f.call)
            if running is None or f.effect != running:
                if f.effect or running:
                    bad("INV-5", f"{k} names {name(f.effect)}, target runs "
                                 f"{name(running) if running else 'nothing'}")
            if f.effect:
                closes[f.effect] = closes.get(f.effect, 0) + 1
                if closes[f.effect] > 1:
                    bad("INV-4", f"effect {name(f.effect)} settled twice")
                if f.effect not in starts:
                    bad("INV-4", f"effect {name(f.effect)} settled but never started")
        if k == "RunEnded":
            if _executing(state):
                bad("INV-4", f"RunEnded while {list(_executing(state))} EXECUTING")
            if f.arg[0] == "completed" and state.pending:
                bad("INV-15", "completed with inputs pending")
            if f.arg[:2] == ("stopped", "cancelled"):
                model_failed = [x.step for x in c.facts if x.kind == "ModelStepFailed"]
                if f.arg[2] != tuple(unknown_calls) or f.arg[3] != (model_failed or [""])[0]:
                    bad("INV-23", f"cancel reports {f.arg[2:]}, turned {unknown_calls}")
        state = evolve(state, f)
        if (state.status == ACTIVE) != (state.current is not None and not state.end):
            bad("INV-3", f"status {state.status} with current {state.current!r}")
        if isinstance(state.current, ToolStep) and not any(
                x.status in LIVE_CALL for x in state.current.calls):
            bad("INV-18", "a finished ToolStep is still current")
    ended_by_cancel = bool(c.facts) and c.facts[-1].kind == "RunEnded" and (
        c.facts[-1].arg[:2] == ("stopped", "cancelled"))
    if unknown_calls and not ended_by_cancel and len(c.facts) != 1:
        bad("INV-20", f"UNKNOWN failure of {name(unknown_calls[0])} took other facts along")
    walk.state, walk.index = state, index
    return walk


def _executing(state) -> list[str]:
    cur = state.current
    if isinstance(cur, ModelStep) and cur.status == EXECUTING:
        return [name(cur.id)]
    if isinstance(cur, ToolStep):
        return [name(c.id) for c in cur.calls if c.status == EXECUTING]
    return []


def _log_report_batch(store: Store) -> dict[str, str]:
    """Every log-level breach of ``store`` (first message per id), walking the whole log:
    what :func:`_log_report` computes incrementally (kept as the tests' oracle for it)."""
    log, runs = store.log, len(store.runs)
    report: dict[str, str] = {}
    if store.cids != {c.cid for c in log}:
        report["INV-9"] = "the commit-id index is not the set of commit ids in the log"
    for r, projected in enumerate(store.runs):
        stream = run_facts(log, r)
        if stream != store.streams[r] or fold(stream) != projected:
            report.setdefault("INV-40", f"run-{r}: projection differs from the fold of its log")
    seen: set[str] = set()
    disposed: dict[str, int] = {}
    for c in log:
        if c.cid in seen:
            report.setdefault("INV-9", f"commit id {c.cid[:8]} appended twice")
        seen.add(c.cid)
        if c.epoch != c.store_epoch:
            report.setdefault("INV-28", f"commit {c.cid[:8]} written by epoch {c.epoch} "
                                        f"while the scope is at {c.store_epoch}")
        effects = {f.effect for f in c.facts if f.effect}
        if c.origin.startswith("deliver:") and effects - {c.origin[8:]}:
            report.setdefault("INV-5", f"Outcome of {name(c.origin[8:])} settled "
                                       f"{[name(e) for e in effects]}")
        if c.origin == "reconcile":
            for e in effects:
                disposed[e] = disposed.get(e, 0) + 1
                if c.cid != ids.derive_recovery_command_id(e) or disposed[e] > 1:
                    report.setdefault("INV-29", f"disposal of {name(e)} not idempotent")
    for r in range(runs):
        _walk_run(log, r, report)
    return report



class _LogWalk:
    """The scope-level checks of :func:`_log_report_batch` after a prefix of the log, as a
    fold over its commits: the commit ids so far, the first breach of each id among the
    per-commit checks (``report``), the disposals counted, and per Run its stream and its
    :class:`_RunWalk`. Never changed once made (:func:`_log_walk` builds each from the
    walk of the log one commit shorter)."""

    __slots__ = ("cids", "disposed", "report", "runs", "streams")

    def __init__(self, cids: frozenset[str], report: dict[str, str],
                 disposed: dict[str, int], streams: tuple[tuple[Any, ...], ...],
                 runs: tuple[_RunWalk, ...]) -> None:
        self.cids, self.report, self.disposed = cids, report, disposed
        self.streams, self.runs = streams, runs


_WALKS: dict[tuple[tuple[Any, ...], int], _LogWalk] = {}
_WALKS_LIMIT = 1 << 17


def _log_walk(log: tuple[Any, ...], runs: int) -> _LogWalk:
    """The :class:`_LogWalk` of *log* over *runs* Runs, from the cached walk of its prefix
    (most logs of a search extend a log already walked by one commit)."""
    key = (log, runs)
    walk = _WALKS.get(key)
    if walk is not None:
        return walk
    if not log:
        walk = _LogWalk(frozenset(), {}, {}, ((),) * runs,
                        tuple(_RunWalk(r) for r in range(runs)))
    else:
        walk = _extend(_log_walk(log[:-1], runs), log[-1])
    if len(_WALKS) >= _WALKS_LIMIT:
        _WALKS.clear()
    _WALKS[key] = walk
    return walk


def _extend(walk: _LogWalk, c: Any) -> _LogWalk:
    """*walk* continued by commit *c*: the per-commit checks of :func:`_log_report_batch`."""
    report, disposed = walk.report, walk.disposed
    if c.cid in walk.cids:
        report = dict(report)
        report.setdefault("INV-9", f"commit id {c.cid[:8]} appended twice")
    if c.epoch != c.store_epoch:
        report = dict(report) if report is walk.report else report
        report.setdefault("INV-28", f"commit {c.cid[:8]} written by epoch {c.epoch} "
                                    f"while the scope is at {c.store_epoch}")
    effects = {f.effect for f in c.facts if f.effect}
    if c.origin.startswith("deliver:") and effects - {c.origin[8:]}:
        report = dict(report) if report is walk.report else report
        report.setdefault("INV-5", f"Outcome of {name(c.origin[8:])} settled "
                                   f"{[name(e) for e in effects]}")
    if c.origin == "reconcile":
        disposed = dict(disposed)
        for e in effects:
            disposed[e] = disposed.get(e, 0) + 1
            if c.cid != ids.derive_recovery_command_id(e) or disposed[e] > 1:
                report = dict(report) if report is walk.report else report
                report.setdefault("INV-29", f"disposal of {name(e)} not idempotent")
    streams, runs = walk.streams, walk.runs
    r = c.run
    if 0 <= r < len(runs):
        streams = (*streams[:r], (*streams[r], *c.facts), *streams[r + 1:])
        runs = (*runs[:r], _step_run(runs[r], c), *runs[r + 1:])
    return _LogWalk(walk.cids | {c.cid}, report, disposed, streams, runs)


@functools.lru_cache(maxsize=1 << 15)
def _log_report(store: Store) -> dict[str, str]:
    """Every log-level breach of ``store`` (first message per id); cached per store. The
    same as :func:`_log_report_batch`, but only the commits no shorter log had are walked."""
    log, nruns = store.log, len(store.runs)
    walk = _log_walk(log, nruns)
    report: dict[str, str] = {}
    if store.cids != walk.cids:
        report["INV-9"] = "the commit-id index is not the set of commit ids in the log"
    for r, projected in enumerate(store.runs):
        stream = walk.streams[r]
        if stream != store.streams[r] or fold(stream) != projected:
            report.setdefault("INV-40", f"run-{r}: projection differs from the fold of its log")
    for inv, msg in walk.report.items():
        report.setdefault(inv, msg)
    for run_walk in walk.runs:
        for inv, msg in run_walk.report.items():
            report.setdefault(inv, msg)
    return report

_LAST: list = [None, None]  # (store, report): the checks of one state share one lookup


def _report(store: Store) -> dict[str, str]:
    if _LAST[0] is not store:
        _LAST[:] = [store, _log_report(store)]
    return _LAST[1]


def _from_log(inv: str) -> Callable[[World], str | None]:
    def check(w: World) -> str | None:
        return _report(w.store).get(inv)
    return check


def _ghost(prefix: str) -> Callable[[World], str | None]:
    def check(w: World) -> str | None:
        return next((g for g in w.ghosts if g.startswith(prefix)), None)
    return check


def _inv_24(w: World) -> str | None:
    for rec in w.recs:
        if rec.accepts and not rec.durable:
            return f"{name(rec.effect)} accepted by the executor before its start fact"
    return None


def _inv_27(w: World) -> str | None:
    live = [o.epoch for o in w.owners if o.alive]
    if len(live) != len(set(live)) or live.count(w.store.epoch) > 1:
        return f"two live owners share an epoch: {live}"
    return None


def _disposals(w: World) -> list[str]:
    return [f.effect for c in w.store.log if c.origin == "reconcile" for f in c.facts if f.effect]


def _inv_30(w: World) -> str | None:
    for e in _disposals(w):
        rec = w.rec(e)
        if rec is None or rec.status != "aborted":
            return (f"takeover closed {name(e)} but the executor record is "
                    f"{rec.status if rec else 'missing'}, not a won abort")
    return None


def _inv_31(w: World) -> str | None:
    for rec in w.recs:
        if rec.status == "aborted" and (rec.accepts or rec.restarts):
            return f"{name(rec.effect)} was both accepted and aborted"
    return None


def _exec_1(w: World) -> str | None:
    for rec in w.recs:
        info: EffectInfo = EFFECTS[rec.effect]
        if rec.accepts > 1 or (info.kind == "tool" and rec.accepts + rec.restarts > 1):
            return (f"{name(rec.effect)} executed {rec.accepts + rec.restarts} times "
                    f"({rec.accepts} dispatches, {rec.restarts} restarts)")
    return None


_TABLE: list[tuple[str, str, Callable[[World], str | None], str]] = [
    ("INV-2", "Ending is final: no fact folds after RunEnded.",
     _from_log("INV-2"), "log walk: no fact after RunEnded"),
    ("INV-3", "ACTIVE exactly when current is set and there is no result.",
     _from_log("INV-3"), "log walk: status/current/end agree after every fact"),
    ("INV-4", "RunEnded closes no effect and never follows an EXECUTING target; each "
              "started effect is closed by at most one fact.",
     _from_log("INV-4"), "log walk: no EXECUTING target at RunEnded; <=1 closing fact per effect"),
    ("INV-5", "A settling fact carries the effect its target is running, and a delivered "
              "Outcome settles only its own key's effect.",
     _from_log("INV-5"), "log walk + deliver provenance: settled effect == running == key"),
    ("INV-6", "At most one start per tool call, from PENDING, under sequence 0.",
     _from_log("INV-6"), "log walk: one ToolCallStarted per call, from PENDING, seq 0"),
    ("INV-7", "A model start names derive_effect_id(run, step, '', rejects).",
     _from_log("INV-7"), "log walk: model effect sequence == rejects at start"),
    ("INV-9", "A command id is appended at most once: a resubmission replays.",
     _from_log("INV-9"), "scope log: commit ids unique"),
    ("INV-9.replay", "A resubmitted (known) command id answers ALREADY_APPLIED, never a "
                     "refusal (terminal, stale, conflict).",
     _ghost("INV-9.replay"), "ghost on every commit whose id was already in the index"),
    ("INV-10", "Each commit is one non-empty group; RunEnded comes last in it.",
     _from_log("INV-10"), "scope log: groups non-empty, RunEnded last"),
    ("INV-12", "Prepare takes every pending input in order; an input id is accepted once.",
     _from_log("INV-12"), "log walk: prepared inputs == pending; no input id accepted twice"),
    ("INV-13", "While ACTIVE a fresh AcceptInput is always admitted.",
     _ghost("INV-13"), "ghost on the user's AcceptInput move"),
    ("INV-14", "A PREPARED step is not started while inputs are pending that its starter "
               "had already loaded (the planner withdraws first).",
     _from_log("INV-14"), "log walk: inputs pending at a model start arrived after the "
                          "starter's snapshot (see SPEC note: C4 does not re-check inputs)"),
    ("INV-15", "A text-only result completes the Run only with an empty input queue.",
     _from_log("INV-15"), "log walk: RunEnded(completed) only with no pending input"),
    ("INV-17", "A ToolStep's id derives from its source; one ToolStep per ModelStep.",
     _from_log("INV-17"), "log walk: ToolStepOpened id == derive_tool_step_id(source), once"),
    ("INV-18", "A ToolStep whose calls are all finished is never current.",
     _from_log("INV-18"), "log walk: closing rule after every fact"),
    ("INV-19", "A tool failure is UNKNOWN iff effect_unknown, and only from EXECUTING.",
     _from_log("INV-19"), "log walk: outcome/class agreement on ToolCallFailed"),
    ("INV-20", "An UNKNOWN tool settlement (owner, takeover) finishes that call only.",
     _from_log("INV-20"), "scope log: a non-cancel UNKNOWN failure is a group of one fact"),
    ("INV-21", "Every Prepare gets a new StepID (withdraw/recover never reuse one).",
     _from_log("INV-21"), "log walk: ModelStepPrepared step ids unique"),
    ("INV-23", "A cancel group closes every unfinished target first; uncertain_calls is "
               "exactly the calls it turned UNKNOWN.",
     _from_log("INV-23"), "log walk: RunEnded(stopped, cancelled) lists the UNKNOWNs of its group"),
    ("INV-24", "No dispatch before the start fact is durable (INV-24/25).",
     _inv_24, "executor ghost: start fact in the log when the key was first accepted "
              "(covers INV-25: the loop dispatches only what its start result granted)"),
    ("INV-26", "An Outcome that matches no running target appends nothing.",
     _ghost("INV-26"), "ghost on deliver: accepted commit although the key was not running"),
    ("INV-27", "One live owner per scope epoch: no two live owners share an epoch.",
     _inv_27, "owners: live epochs distinct, at most one at the persisted epoch"),
    ("INV-28", "A fenced writer appends nothing.",
     _from_log("INV-28"), "scope log: writer epoch == persisted epoch at every append"),
    ("INV-29", "Takeover disposal uses the recovery id of the effect: repeating it adds "
               "no commit.",
     _from_log("INV-29"), "scope log: one reconcile commit per effect, under its recovery id"),
    ("INV-30", "Takeover closes an effect only on evidence (a won abort); orphaned or "
               "missing alone never suffice.",
     _inv_30, "every reconcile disposal has an ABORTED tombstone at the executor"),
    ("INV-31", "For one key either the acceptance or the abort wins, never both.",
     _inv_31, "executor: no tombstoned record was ever accepted or restarted"),
    ("INV-40", "The log folds under the evolve guards, and its fold equals the projection.",
     _from_log("INV-40"), "fold(stream) == projection; guard breaches not named by another id"),
    ("ADV-1", "A forged command (future or stale base, wrong or foreign effect, step or "
              "call ids, mismatched ToolSpecs, a hand-built envelope, a command to an ended "
              "Run) is refused (terminal for an ended Run) or replays; it never appends.",
     _ghost("ADV-1"), "ghost on the adversary's moves"),
    ("ADV-2", "The fold refuses a fact no decide could produce (CorruptLogError).",
     _ghost("ADV-2"), "ghost on the adversary's foreign-log moves (core model)"),
    ("EXEC-1", "No key is executed twice by dispatch, and a replay-never tool never runs "
               "twice (no second start at the executor).",
     _exec_1, "executor: accepts <= 1 per key; tool accepts + restarts <= 1"),
]

INVARIANTS: tuple[Invariant, ...] = tuple(Invariant(n, d, c) for n, d, c, _ in _TABLE)
INVARIANT_IDS: list[str] = [n for n, *_ in _TABLE]
INVARIANT_NOTES: dict[str, str] = {n: note for n, _, _, note in _TABLE}

#: Invariants that read only the store's log (``_from_log``): their verdict is computed once
#: per store (:func:`store_verdict`), however many worlds share it.
STORE_ONLY: frozenset[str] = frozenset(n for n, _, c, _ in _TABLE
                                       if getattr(c, "__qualname__", "").startswith("_from_log"))
_GHOSTLY = frozenset(n for n, _, c, _ in _TABLE
                     if getattr(c, "__qualname__", "").startswith("_ghost"))
#: The rest: the executor's records and the owners (cheap, checked on every state).
WORLD_INVARIANTS: tuple[Invariant, ...] = tuple(
    i for i in INVARIANTS if i.name not in STORE_ONLY and i.name not in _GHOSTLY)


@functools.lru_cache(maxsize=1 << 16)
def store_verdict(store: Store) -> dict[str, str]:
    """The violated store-only invariants of *store* (name -> message; usually empty)."""
    report = _log_report(store)
    return {n: report[n] for n in INVARIANT_IDS if n in STORE_ONLY and n in report}


def first_violation(w: World) -> tuple[Invariant, str] | None:
    """The first invariant of :data:`INVARIANTS` (in table order) *w* violates, and its
    message — what checking every invariant in turn gives, incrementally: the store's
    verdict is cached per store (most moves do not touch the store), ghosts are looked at
    only when there are some, and otherwise only :data:`WORLD_INVARIANTS` run."""
    bad = store_verdict(w.store)
    if not bad and not w.ghosts:
        for inv in WORLD_INVARIANTS:
            message = inv.check(w)
            if message is not None:
                return inv, message
        return None
    for inv in INVARIANTS:
        message = bad.get(inv.name) if inv.name in STORE_ONLY else inv.check(w)
        if message is not None:
            return inv, message
    return None
