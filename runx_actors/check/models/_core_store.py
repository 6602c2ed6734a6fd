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

import itertools
from collections.abc import Hashable
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

__all__ = ["CoreStore", "CoreView", "IdentityCache", "Same", "commit_key", "commit_number",
           "decision", "decide_now", "interned", "run_id", "run_index", "initial_store",
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


#: the hash of each snapshot object of a projection (``CoreStore.__hash__``)
_SNAPSHOT_HASHES = IdentityCache(1 << 17)


def run_id(r: int) -> str:
    """The RunID of Run number *r* (the reference's naming)."""
    return f"run-{r}"


def run_index(rid: str) -> int | None:
    """The number of the Run *rid*, or None if it is not one of ours."""
    if rid.startswith("run-") and rid[4:].isdigit():
        return int(rid[4:])
    return None


@attrs.frozen(slots=False, hash=False)
class CoreStore:
    """One scope: epoch, commit log, Run streams and the machine projection.

    ``proj[r]`` is Run *r*'s snapshot in the writer's projection (for an ended Run, the
    ended snapshot ``load`` returns). ``loads[r]`` holds every snapshot the Run had at a
    commit boundary (what a ``load`` at that moment returned); it is derived from the
    log, so it takes no part in equality.

    The hash (computed once, kept in the instance dict) covers the epoch, the log, the
    index, the streams' lengths and the projection's snapshots, each snapshot's hash
    computed once per object (real values do not cache theirs); the streams themselves
    are left out, being the log's facts per Run (every constructor keeps them so), which
    the log's hash covers — equal stores hash alike, and the 64-bit fingerprints of the
    compact search tell the same stores apart as before.
    """

    def __hash__(self) -> int:
        cached: int | None = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.epoch, self.log, self.cids, tuple(map(len, self.streams)),
                           tuple(_SNAPSHOT_HASHES.call(hash, snap) for snap in self.proj)))
            object.__setattr__(self, "_hash", cached)
        return cached

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
            raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
        return self._store.proj[r]


class Same:
    """*obj* compared and hashed by identity: a key part that keeps its object alive (so
    its id is not reused while the key is stored)."""

    __slots__ = ("_hash", "obj")

    def __init__(self, obj: object) -> None:
        self.obj = obj
        self._hash = id(obj)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Same) and other.obj is self.obj


_NUMBER_OF_STORE: dict[CoreStore, int] = {}
_NUMBER_OF_KEY: dict[Hashable, int] = {}
_NUMBERS = itertools.count()
_NUMBERS_LIMIT = 1 << 17


def commit_number(store: CoreStore) -> int:
    """A number for *store*'s :func:`commit_key`: equal keys, equal numbers, and a number is
    never given to another key (the tables clear at ``_NUMBERS_LIMIT``; a number cached
    elsewhere then stays right, it only stops being found)."""
    number = _NUMBER_OF_STORE.get(store)
    if number is None:
        if len(_NUMBER_OF_STORE) >= _NUMBERS_LIMIT:
            _NUMBER_OF_STORE.clear()
            _NUMBER_OF_KEY.clear()
        key = commit_key(store)
        number = _NUMBER_OF_KEY.get(key)
        if number is None:
            number = _NUMBER_OF_KEY[key] = next(_NUMBERS)
        _NUMBER_OF_STORE[store] = number
    return number


def commit_key(store: CoreStore) -> Hashable:
    """Everything committing to *store* reads (``CoreView``, the fence): the epoch, the
    projection's snapshots and, per command id of the index, its Run and facts — the
    objects by identity (:class:`Same`), not by value. Not the log's ghost data (writer
    and persisted epochs, origins, bases) nor the order of its groups."""
    return (store.epoch, tuple(Same(snap) for snap in store.proj),
            frozenset((c.cid, c.run, Same(c.facts)) for c in store.log))


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
    scope) and ``"invalid"`` (ValidationError). Run *r* receives the append.

    ``impl.evaluate``'s answer is a function of what it reads — the ``CoreView`` of the
    store (:func:`commit_key`) and the request — so it is computed once per key and request
    (:func:`decision`) and applied to each store: the fence first, then the append of the
    decided group under this writer's ghost data, or a replay (which a broken store
    folds into its projection again)."""
    if impl.check_epoch and epoch != store.epoch:
        return store, "fenced", ""  # OwnershipLostError: checked first, as ScopeLog does
    kind, status, ghost, facts, snap = decision(impl, store, env, base)
    if kind == "replay":
        if impl.reapply_replays:
            store = _reapply(store, r, facts)
        return store, ALREADY, ""
    if kind == "append":
        c = spec.state.Commit(env.id, r, facts, epoch, store.epoch, origin, base)
        return store.append(c, snap), ACCEPTED, ""
    return store, status, ghost


#: (impl, commit key number, envelope parts, base) -> what ``decide_now`` answers
_DECISIONS: dict[tuple[Any, ...], tuple[str, str, str, Any, Any]] = {}
_DECISIONS_LIMIT = 1 << 17


def decision(impl: Impl, store: CoreStore, env: CommandEnvelope,
             base: int) -> tuple[str, str, str, Any, Any]:
    """:func:`decide_now`, once per ``(impl, commit_key(store), envelope, base)``: the
    envelope's type, Run and command ids by value and its command by identity (the
    command builders are cached; :class:`Same` keeps it alive)."""
    key = (impl, commit_number(store), env.type, env.run_id, env.id, Same(env.command), base)
    hit = _DECISIONS.get(key)
    if hit is None:
        if len(_DECISIONS) >= _DECISIONS_LIMIT:
            _DECISIONS.clear()
        hit = _DECISIONS[key] = decide_now(impl, store, env, base)
    return hit


def decide_now(impl: Impl, store: CoreStore, env: CommandEnvelope,
               base: int) -> tuple[str, str, str, Any, Any]:
    """What ``impl.evaluate`` answers for *env* at *base* on *store*'s view, as
    ``(kind, status, ghost, facts, snapshot)``: kind ``"append"`` (status accepted; the
    facts and snapshot interned: one object per value), ``"replay"`` (the replayed facts)
    or ``"refused"`` (the status of the exception; ghost ``CORE-EVOLVE`` for an
    ``EvolveError``, a decided fact that does not fold)."""
    command = env.command
    try:
        decided = impl.evaluate(CoreView(store), CommitRequest(base, env))
    except RunTerminalError:
        return "refused", "terminal", "", None, None
    except CommandConflictError:
        return "refused", "conflict", "", None, None
    except StaleRuntimeError:
        return "refused", "stale", "", None, None
    except RunNotFoundError:
        return "refused", "not_found", "", None, None
    except ValidationError:
        return "refused", "invalid", "", None, None
    except EvolveError as exc:
        return "refused", "internal", f"CORE-EVOLVE: {type(command).__name__} decided facts " \
                                      f"that do not fold ({exc.message})", None, None
    if isinstance(decided, Replay):
        return "replay", ALREADY, "", tuple(decided.facts), None
    assert isinstance(decided, Append)
    return "append", ACCEPTED, "", interned(tuple(decided.facts)), interned(decided.snapshot)


_INTERNED: dict[Any, Any] = {}


def interned(value: Any) -> Any:
    """The first object equal to *value* interned in this process (*value* itself if none):
    stores reached along different paths then hold the same snapshot and fact objects, and
    share their :func:`commit_key` (which compares them by identity). The table clears at
    ``_DECISIONS_LIMIT`` entries (equal values made later are then other objects: a
    commit key that differs only misses)."""
    if len(_INTERNED) >= _DECISIONS_LIMIT:
        _INTERNED.clear()
    return _INTERNED.setdefault(value, value)


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
