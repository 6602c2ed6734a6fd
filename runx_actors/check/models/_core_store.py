"""An immutable scope log for the core model: ``ScopeLog`` (``store/_scope.py``) as a value.

The memory store's ``ScopeLog.commit`` is: check the writer's epoch, run
``evaluate_commit`` on a ``CommitView`` of the log and the projection, then append the
decided facts as one group and apply the returned snapshot to the projection. ``commit``
below does exactly that on a frozen :class:`CoreStore`, so every state of the model is a
hashable value; the evaluation itself is the real ``evaluate_commit`` (or a deliberately
broken wrapper of it, see ``_core_impl``). Facts are real facts and snapshots hold real
``MachineState`` values.

The log's groups are the reference's ``Commit`` values holding real facts: besides the
facts, each keeps the reference's ghost data (the writer's epoch, the persisted epoch at
the append, who wrote it and the position it was planned from), which the reference's
invariants read and the environment's moves use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import attrs

from ...protocol import facts as F
from ...protocol._evolve import evolve
from ...protocol.commit import (
    Append,
    CommandEnvelope,
    CommitRequest,
    Replay,
    Snapshot,
    create_group,
    envelope,
    fold_run,
)
from ...protocol.errors import (
    CommandConflictError,
    EvolveError,
    RunNotFoundError,
    RunTerminalError,
    StaleRuntimeError,
    ValidationError,
)
from ...protocol.state import MachineState
from ...protocol.values import AgentInput, NewRun, RunStatus
from . import _core_spec as spec

if TYPE_CHECKING:
    from ._core_impl import Impl

__all__ = ["CoreStore", "CoreView", "IdentityCache", "run_id", "run_index", "initial_store",
           "commit", "evaluate_and_append", "evaluate_envelope", "ACCEPTED", "ALREADY", "OK"]

ACCEPTED, ALREADY = "accepted", "already_applied"
OK = (ACCEPTED, ALREADY)


class IdentityCache:
    """Results of a pure function of immutable values, keyed by the arguments' identity.

    Real facts and states do not cache their hashes, so hashing a stream to look it up
    costs a quarter of folding it; but the stores of a search share their unchanged parts
    (a takeover's store keeps the streams and snapshots of the one before), so the same
    *object* comes back again and again. An entry keeps its arguments alive (an id is not
    reused while it is stored); a miss only means computing again. Cleared at *limit*
    entries."""

    __slots__ = ("_entries", "_limit")

    def __init__(self, limit: int = 1 << 16) -> None:
        self._entries: dict[tuple[int, ...], tuple[tuple[Any, ...], Any]] = {}
        self._limit = limit

    def call(self, func: Any, *key: Any) -> Any:
        """``func(*key)``, computed once per identical arguments (*func* is pure)."""
        ident = tuple(map(id, key))
        entry = self._entries.get(ident)
        if entry is not None and all(a is b for a, b in zip(entry[0], key)):
            return entry[1]
        value = func(*key)
        if len(self._entries) >= self._limit:
            self._entries.clear()
        self._entries[ident] = (key, value)
        return value


def run_id(r: int) -> str:
    """The RunID of Run number *r* (the reference's naming)."""
    return f"run-{r}"


def run_index(rid: str) -> int | None:
    """The number of the Run *rid*, or None if it is not one of ours."""
    if rid.startswith("run-") and rid[4:].isdigit():
        return int(rid[4:])
    return None


@attrs.frozen(cache_hash=True)
class CoreStore:
    """One scope: epoch, commit log, Run streams and the machine projection.

    ``proj[r]`` is Run *r*'s snapshot in the writer's projection (for an ended Run, the
    ended snapshot ``load`` returns). ``loads[r]`` holds every snapshot the Run had at a
    commit boundary (what a ``load`` at that moment returned); it is derived from the
    log, so it takes no part in equality.
    """

    epoch: int
    log: tuple[Any, ...]  # runx_spec's Commit values, with real facts
    streams: tuple[tuple[F.Fact, ...], ...]
    proj: tuple[Snapshot, ...]
    cids: frozenset[str]
    loads: tuple[tuple[Snapshot, ...], ...] = attrs.field(eq=False, repr=False)

    def position(self, r: int) -> int:
        """RunPosition: index of the Run's newest fact (RunCreated is 0)."""
        return len(self.streams[r]) - 1

    def state(self, r: int) -> MachineState:
        """The projection's state of Run *r*."""
        return self.proj[r].state

    def loaded(self, r: int, position: int) -> Snapshot:
        """The snapshot a ``load`` of Run *r* returned when it was at *position*."""
        for snap in reversed(self.loads[r]):
            if snap.position == position:
                return snap
        raise KeyError(f"run-{r} was never at position {position}")

    def append(self, c: Any, snap: Snapshot) -> CoreStore:
        """The store with commit *c* appended to the log and its Run's stream, projection and
        load history moved to *snap*."""
        r = c.run
        return CoreStore(
            self.epoch, (*self.log, c),
            _put(self.streams, r, (*self.streams[r], *c.facts)),
            _put(self.proj, r, snap), self.cids | {c.cid},
            _put(self.loads, r, (*self.loads[r], snap)))

    def with_projection(self, r: int, snap: Snapshot) -> CoreStore:
        """The same log with Run *r*'s projection replaced (a broken store's doing)."""
        loads = (*self.loads[r][:-1], snap)
        return attrs.evolve(self, proj=_put(self.proj, r, snap), loads=_put(self.loads, r, loads))

    def with_epoch(self, epoch: int) -> CoreStore:
        """The same log under another scope epoch (a takeover)."""
        return attrs.evolve(self, epoch=epoch)


def _put(items: tuple[Any, ...], i: int, value: Any) -> tuple[Any, ...]:
    return (*items[:i], value, *items[i + 1:])


def initial_store(runs: int, inputs: tuple[AgentInput, ...], epoch: int = 1) -> CoreStore:
    """A scope at *epoch* holding *runs* Runs, each created with *inputs* (§4.9)."""
    store = CoreStore(epoch, (), ((),) * runs, (), frozenset(), ((),) * runs)
    snaps: list[Snapshot] = []
    for r in range(runs):
        group = create_group(NewRun(run_id(r)), inputs)
        snap = Snapshot(fold_run(group, run_id=run_id(r)), len(group) - 1)
        snaps.append(snap)
        c = spec.state.Commit(f"create:{run_id(r)}", r, group, epoch, epoch, "create")
        store = CoreStore(store.epoch, (*store.log, c), _put(store.streams, r, group), (),
                          store.cids | {c.cid}, _put(store.loads, r, (snap,)))
    return attrs.evolve(store, proj=tuple(snaps))


class CoreView:
    """``CommitView`` over a :class:`CoreStore` (as ``ScopeLog``'s view over its log and
    the writer's projection). ``snapshot`` is an extra read some broken variants use."""

    __slots__ = ("_store",)

    def __init__(self, store: CoreStore) -> None:
        self._store = store

    def replay_facts(self, command_id: str, run_id: str) -> tuple[F.Fact, ...] | None:
        """The facts committed under *command_id* (empty when another Run holds it), or None
        when the id is unknown: the commit-id index of RUN-CMT-5."""
        for c in self._store.log:
            if c.cid == command_id:
                return c.facts if run_index(run_id) == c.run else ()
        return None

    def active(self, run_id: str) -> Snapshot | None:
        """The projection of an ACTIVE Run, else None (unknown or ended)."""
        r = run_index(run_id)
        if r is None or r >= len(self._store.proj):
            return None
        snap = self._store.proj[r]
        return snap if snap.state.status is RunStatus.ACTIVE else None

    def stream_exists(self, run_id: str) -> bool:
        """Whether *run_id* has a stream in this scope."""
        r = run_index(run_id)
        return r is not None and r < len(self._store.streams)

    def snapshot(self, run_id: str) -> Snapshot:
        """The projection of *run_id*, whatever its status. Raises RunNotFoundError."""
        r = run_index(run_id)
        if r is None or r >= len(self._store.proj):
            raise RunNotFoundError(f"run {run_id} not found", run_id=run_id)
        return self._store.proj[r]


_CACHE: dict[tuple[Any, ...], tuple[Any, CoreStore, str, str]] = {}
_CACHE_LIMIT = 1 << 18


def commit(impl: Impl, store: CoreStore, r: int, cid: str, command: Any, epoch: int,
           origin: str, base: int) -> tuple[CoreStore, str, str]:
    """Cached :func:`evaluate_and_append`. Commands are keyed by identity (the command
    builders are cached, so an equal command is the same object; the entry keeps the
    command alive, so its id is not reused) — hashing a deep command on every
    transition would cost more than the evaluation it saves."""
    key = (impl, store, r, cid, id(command), epoch, origin, base)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is command:
        return hit[1], hit[2], hit[3]
    if len(_CACHE) >= _CACHE_LIMIT:
        _CACHE.clear()
    result = evaluate_and_append(impl, store, r, cid, command, epoch, origin, base)
    _CACHE[key] = (command, *result)
    return result


def evaluate_and_append(impl: Impl, store: CoreStore, r: int, cid: str, command: Any,
                        epoch: int, origin: str, base: int) -> tuple[CoreStore, str, str]:
    """``ScopeLog.commit`` on a value: returns ``(store, status, ghost)``.

    status: ``"accepted"`` | ``"already_applied"`` | a refusal (``"fenced"``,
    ``"terminal"``, ``"conflict"``, ``"stale"``, ``"not_found"``, ``"invalid"``,
    ``"internal"``); on a refusal the store is
    unchanged. ``ghost`` is a violation note for the model's invariants (``""`` if none):
    an ``EvolveError`` out of ``evaluate_commit`` means a decided fact did not fold, an
    internal bug (spec §4.3 step 10), and writes nothing, as in a real store.
    Pure: a function of its (immutable) arguments.
    """
    return evaluate_envelope(impl, store, r, envelope(run_id(r), cid, command), epoch,
                             origin, base)


def evaluate_envelope(impl: Impl, store: CoreStore, r: int, env: CommandEnvelope, epoch: int,
                      origin: str, base: int) -> tuple[CoreStore, str, str]:
    """:func:`evaluate_and_append` of an envelope as given (the adversary hands in envelopes
    built by hand: a type that names another command, empty or foreign ids). Besides the
    statuses there, ``"not_found"`` (RunNotFoundError: the envelope names no Run of the
    scope) and ``"invalid"`` (ValidationError). Run *r* receives the append."""
    command = env.command
    cid = env.id
    if impl.check_epoch and epoch != store.epoch:
        return store, "fenced", ""  # OwnershipLostError: checked first, as ScopeLog does
    request = CommitRequest(base, env)
    try:
        decision = impl.evaluate(CoreView(store), request)
    except RunTerminalError:
        return store, "terminal", ""
    except CommandConflictError:
        return store, "conflict", ""
    except StaleRuntimeError:
        return store, "stale", ""
    except RunNotFoundError:
        return store, "not_found", ""
    except ValidationError:
        return store, "invalid", ""
    except EvolveError as exc:
        return store, "internal", f"CORE-EVOLVE: {type(command).__name__} decided facts " \
                                  f"that do not fold ({exc.message})"
    if isinstance(decision, Replay):
        if impl.reapply_replays:
            store = _reapply(store, r, decision.facts)
        return store, ALREADY, ""
    assert isinstance(decision, Append)
    c = spec.state.Commit(cid, r, tuple(decision.facts), epoch, store.epoch, origin, base)
    return store.append(c, decision.snapshot), ACCEPTED, ""


def _reapply(store: CoreStore, r: int, facts: tuple[F.Fact, ...]) -> CoreStore:
    """Variant ``replay_reapplies``: fold a replayed group into the projection again."""
    snap = store.proj[r]
    state = snap.state
    try:
        for fact in facts:
            state = evolve(state, fact)
    except EvolveError:
        return store  # the broken store's own evolve refuses: nothing changes
    return store.with_projection(r, Snapshot(state, snap.position))
