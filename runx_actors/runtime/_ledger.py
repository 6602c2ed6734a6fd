"""The dispatch ledger: per-key record of redispatch attempts (spec §6.10; RUN-EXE-15).

Entries ``dispatch_planned(attempt)``, ``dispatched(attempt)``, ``given_up(reason)``;
the fold keeps ``planned ∈ {dispatched, dispatched + 1}`` (the +1 is the owed attempt).
Appends carry the expected head (``seq``) and the writer's epoch: a stale head is a
``LedgerConflictError``, a lower epoch than the highest seen is ``FencedError``
(INV-32). Commit ids are ``H("runx/dispatch-ledger", session, run, effect, entry,
attempt)`` [D-10], so a retried append replays.
"""

from __future__ import annotations

import enum
from typing import Any, Protocol

import attrs
import trio

from ..protocol.errors import FencedError, LedgerConflictError, StateConflictError
from ..protocol.ids import derive

__all__ = [
    "LedgerEntry", "DispatchPlanned", "Dispatched", "GivenUp", "LedgerState",
    "LedgerAppendStatus", "DispatchLedger", "MemoryDispatchLedger", "ledger_commit_id",
    "fold_ledger",
]

LEDGER_NAMESPACE = "runx/dispatch-ledger"


@attrs.frozen
class DispatchPlanned:
    """Ledger entry: attempt ``attempt`` (1, 2, …) of a redispatch is owed (RUN-EXE-15)."""

    attempt: int
    NAME = "dispatch_planned"


@attrs.frozen
class Dispatched:
    """Ledger entry: the owed attempt ``attempt`` was handed to the executor."""

    attempt: int
    NAME = "dispatched"


@attrs.frozen
class GivenUp:
    """Ledger entry: no further attempt for this key (``reason`` says why); final."""

    reason: str
    NAME = "given_up"


LedgerEntry = DispatchPlanned | Dispatched | GivenUp


@attrs.frozen
class LedgerState:
    """A key's folded ledger: attempts planned and dispatched, whether it was given up
    (and why), and ``head`` — the number of entries, the ``seq`` the next append names."""

    planned: int = 0
    dispatched: int = 0
    given_up: bool = False
    reason: str = ""
    head: int = 0  # number of entries

    @property
    def owed(self) -> bool:
        """An attempt is planned and not yet dispatched (planned == dispatched + 1)."""
        return self.planned == self.dispatched + 1


class LedgerAppendStatus(enum.Enum):
    """An append was new (``ACCEPTED``) or its commit id was already recorded."""

    ACCEPTED = "accepted"
    ALREADY_APPLIED = "already_applied"


def ledger_commit_id(key: Any, entry: LedgerEntry, state: LedgerState) -> str:
    """The entry's commit id [D-10]; for ``given_up`` the attempt is ``planned``."""
    attempt = state.planned if isinstance(entry, GivenUp) else entry.attempt
    return derive(LEDGER_NAMESPACE, key.session, key.run_id, key.effect, entry.NAME, attempt)


def _step(state: LedgerState, entry: LedgerEntry) -> LedgerState:
    if state.given_up:
        raise StateConflictError("nothing follows given_up", entry=entry)
    if isinstance(entry, DispatchPlanned):
        if state.owed or entry.attempt != state.planned + 1:
            raise StateConflictError("plan only when no attempt is owed, consecutively",
                                     entry=entry, state=state)
        return attrs.evolve(state, planned=entry.attempt, head=state.head + 1)
    if isinstance(entry, Dispatched):
        if not state.owed or entry.attempt != state.planned:
            raise StateConflictError("dispatched(n) needs planned == n", entry=entry,
                                     state=state)
        return attrs.evolve(state, dispatched=entry.attempt, head=state.head + 1)
    return attrs.evolve(state, given_up=True, reason=entry.reason, head=state.head + 1)


def fold_ledger(entries: tuple[LedgerEntry, ...]) -> LedgerState:
    """Fold a key's entries; StateConflictError on an illegal sequence."""
    state = LedgerState()
    for e in entries:
        state = _step(state, e)
    return state


class DispatchLedger(Protocol):
    """The per-key redispatch ledger (RUN-EXE-15, INV-32): ``load(key)`` folds the key's
    entries; ``append(key, entry, seq=, epoch=)`` adds one at the expected head under the
    writer's epoch — LedgerConflictError for a stale head, FencedError for an older
    epoch, StateConflictError for an illegal entry; a repeated commit id replays."""

    async def load(self, key: Any) -> LedgerState:
        """The folded state of *key* (empty state for an unknown key)."""

    async def append(self, key: Any, entry: LedgerEntry, *, seq: int,
                     epoch: int) -> LedgerAppendStatus:
        """Append *entry* at head *seq* under *epoch*; errors as the class says."""


class MemoryDispatchLedger:
    """An in-memory DispatchLedger (the reference)."""

    def __init__(self) -> None:
        self._entries: dict[Any, list[LedgerEntry]] = {}
        self._ids: dict[Any, set[str]] = {}
        self._epochs: dict[Any, int] = {}

    async def load(self, key: Any) -> LedgerState:
        """The folded state of *key*. Checkpoint."""
        await trio.lowlevel.checkpoint()
        return fold_ledger(tuple(self._entries.get(key, ())))

    async def append(self, key: Any, entry: LedgerEntry, *, seq: int,
                     epoch: int) -> LedgerAppendStatus:
        """Append *entry* at head *seq* under *epoch* (INV-32). Checkpoint.

        Raises: LedgerConflictError (stale seq), FencedError (lower epoch),
        StateConflictError (illegal step).
        """
        await trio.lowlevel.checkpoint()
        entries = self._entries.setdefault(key, [])
        state = fold_ledger(tuple(entries))
        cid = ledger_commit_id(key, entry, state)
        if cid in self._ids.setdefault(key, set()):
            return LedgerAppendStatus.ALREADY_APPLIED
        if epoch < self._epochs.get(key, 0):
            raise FencedError("ledger append from an older epoch", key=key, epoch=epoch)
        if seq != state.head:
            raise LedgerConflictError("stale ledger sequence", key=key, seq=seq,
                                      head=state.head)
        _step(state, entry)
        self._epochs[key] = max(epoch, self._epochs.get(key, 0))
        entries.append(entry)
        self._ids[key].add(cid)
        return LedgerAppendStatus.ACCEPTED
