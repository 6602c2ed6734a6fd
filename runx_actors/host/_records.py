"""Host facts and the loop record (loop-host §2.1, §2.2).

Host facts are foreign events of the Session ledger, written through the same writer
and epoch as the Runs. Wire names are ``runx_actors/<stream kind>/<name>``; the streams
are ``loop/<loop_id>`` and ``governed/<run_id>``. Commit ids are derived (``NH``), so a
retry replays ("already applied") instead of writing twice.

:func:`fold_loop` folds a loop stream into a :class:`LoopRecord` and rejects a log that
breaks a fold guard with :class:`LoopIntegrityError`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import attrs

from ..protocol.ids import derive
from ..store.base import ForeignEvent, StreamRecord
from .errors import LoopIntegrityError

__all__ = [
    "LOOP_OPENED", "TURN_SUBMITTED", "TURN_RECORDED", "RUN_OPENED", "RUN_SEALING",
    "RUN_SEALED", "LOOP_RECORD_SCHEMA", "loop_stream", "governed_stream",
    "loop_open_commit", "turn_submit_commit", "run_open_commit", "run_sealing_commit",
    "run_sealed_commit", "run_timeout_commit", "run_blocked_commit", "loop_event",
    "governed_event", "TurnRecord", "LoopRecord", "fold_loop", "GovernedRecord",
    "fold_governed",
]

LOOP_OPENED = "runx_actors/loop/loop_opened"
TURN_SUBMITTED = "runx_actors/loop/turn_submitted"
TURN_RECORDED = "runx_actors/loop/turn_recorded"
RUN_OPENED = "runx_actors/governed/run_opened"
RUN_SEALING = "runx_actors/governed/run_sealing"
RUN_SEALED = "runx_actors/governed/run_sealed"
LOOP_RECORD_SCHEMA = "runx_actors.loop_record.v1"


def loop_stream(loop_id: str) -> str:
    """``loop/<loop_id>``."""
    return "loop/" + loop_id


def governed_stream(run_id: str) -> str:
    """``governed/<run_id>``."""
    return "governed/" + run_id


def loop_open_commit(loop_id: str) -> str:
    """``NH("runx_actors/loop-open", loop_id)``."""
    return derive("runx_actors/loop-open", loop_id)


def turn_submit_commit(loop_id: str, turn_index: int) -> str:
    """``NH("runx_actors/turn-submit", loop_id, str(turn_index))``."""
    return derive("runx_actors/turn-submit", loop_id, str(turn_index))


def run_open_commit(run_id: str) -> str:
    """``NH("runx_actors/run-open", run_id)`` (a standalone Run's creation)."""
    return derive("runx_actors/run-open", run_id)


def run_sealing_commit(run_id: str) -> str:
    """``NH("runx_actors/run-sealing", run_id)``: the first commit wins."""
    return derive("runx_actors/run-sealing", run_id)


def run_sealed_commit(run_id: str) -> str:
    """``NH("runx_actors/run-sealed", run_id)``."""
    return derive("runx_actors/run-sealed", run_id)


def run_timeout_commit(run_id: str) -> str:
    """**[ours]** CommandID of the ``CancelRun`` committed when ``timeout_seconds``
    expires; a restart reads it back to seal ``timed_out``."""
    return derive("runx_actors/run-timeout", run_id)


def run_blocked_commit(run_id: str) -> str:
    """**[ours]** CommandID of the ``CancelRun`` committed when context preparation fails
    its read-twice check (§6.3 point 1); a restart reads it back to seal ``blocked``."""
    return derive("runx_actors/run-blocked", run_id)


def loop_event(loop_id: str, type_: str, body: Mapping[str, Any]) -> ForeignEvent:
    return ForeignEvent(loop_stream(loop_id), type_, dict(body))


def governed_event(run_id: str, type_: str, body: Mapping[str, Any]) -> ForeignEvent:
    return ForeignEvent(governed_stream(run_id), type_, dict(body))


@attrs.frozen
class TurnRecord:
    """One turn of the loop record: ``submitted`` until ``turn_recorded`` lands."""

    turn_index: int
    turn_key: str
    run_id: str
    state: str  # "submitted" | "recorded"
    receipt_id: str | None = None
    payload: Any = None

    def to_json(self) -> dict[str, Any]:
        return {"turn_index": self.turn_index, "turn_key": self.turn_key,
                "run_id": self.run_id, "state": self.state, "receipt_id": self.receipt_id,
                "payload": self.payload}


@attrs.frozen
class LoopRecord:
    """The folded loop stream: ``opened`` is the ``loop_opened`` body."""

    loop_id: str
    opened: Mapping[str, Any]
    turns: tuple[TurnRecord, ...] = ()

    @property
    def last(self) -> TurnRecord | None:
        return self.turns[-1] if self.turns else None

    def to_json(self) -> dict[str, Any]:
        """The ``runx_actors.loop_record.v1`` object (§2.2)."""
        o = self.opened
        return {"schema": LOOP_RECORD_SCHEMA, "loop_id": self.loop_id,
                "max_turns": o.get("max_turns"), "runner": o.get("runner"),
                "package_digest": o.get("package_digest"),
                "fixed_inputs": o.get("fixed_inputs"),
                "turns": [t.to_json() for t in self.turns]}


def _corrupt(loop_id: str, index: int, message: str) -> LoopIntegrityError:
    return LoopIntegrityError(f"loop {loop_id}: event {index}: {message}", loop_id=loop_id,
                              turn_index=None, check="fold_guard")


def _next_allowed(payload: Any) -> bool:
    return isinstance(payload, Mapping) and payload.get("next_turn_allowed") is True


def fold_loop(loop_id: str, events: Sequence[StreamRecord]) -> LoopRecord | None:
    """Fold the ``loop/<loop_id>`` stream; None when the loop was never opened.

    Raises:
        LoopIntegrityError: (check ``fold_guard``) ``loop_opened`` not first or twice;
            turn indexes not contiguous from 1; a turn submitted without the previous one
            recorded with ``next_turn_allowed`` and within ``max_turns``; a duplicate run
            id; ``turn_recorded`` not naming the pending turn's run; an unknown event.
    """
    record: LoopRecord | None = None
    run_ids: set[str] = set()
    for e in events:
        body = e.payload if isinstance(e.payload, Mapping) else {}
        if e.type == LOOP_OPENED:
            if record is not None:
                raise _corrupt(loop_id, e.index, "loop_opened appears twice")
            if body.get("loop_id") != loop_id:
                raise _corrupt(loop_id, e.index, "loop_opened names another loop")
            record = LoopRecord(loop_id, dict(body))
            continue
        if record is None:
            raise _corrupt(loop_id, e.index, "the first event is not loop_opened")
        turns = record.turns
        if e.type == TURN_SUBMITTED:
            n = body.get("turn_index")
            if n != len(turns) + 1:
                raise _corrupt(loop_id, e.index, f"turn index {n} is not {len(turns) + 1}")
            if turns:
                prev = turns[-1]
                max_turns = record.opened.get("max_turns")
                if prev.state != "recorded" or not _next_allowed(prev.payload):
                    raise _corrupt(loop_id, e.index, f"turn {n} submitted although turn "
                                   f"{prev.turn_index} does not allow a next turn")
                if not isinstance(max_turns, int | float) or not prev.turn_index < max_turns:
                    raise _corrupt(loop_id, e.index, f"turn {n} exceeds max_turns")
            run_id = body.get("run_id")
            if not isinstance(run_id, str) or run_id in run_ids:
                raise _corrupt(loop_id, e.index, f"run id {run_id!r} is missing or reused")
            run_ids.add(run_id)
            turn = TurnRecord(int(n), str(body.get("turn_key")), run_id, "submitted")
            record = attrs.evolve(record, turns=(*turns, turn))
        elif e.type == TURN_RECORDED:
            last = turns[-1] if turns else None
            if (last is None or last.state != "submitted"
                    or body.get("turn_index") != last.turn_index
                    or body.get("run_id") != last.run_id):
                raise _corrupt(loop_id, e.index, "turn_recorded does not name the pending turn")
            done = attrs.evolve(last, state="recorded", receipt_id=body.get("receipt_id"),
                                payload=body.get("payload"))
            record = attrs.evolve(record, turns=(*turns[:-1], done))
        else:
            raise _corrupt(loop_id, e.index, f"unknown event type {e.type}")
    return record


@attrs.frozen
class GovernedRecord:
    """The folded ``governed/<run_id>`` stream: each body, or None while absent."""

    run_id: str
    opened: Mapping[str, Any] | None = None
    sealing: Mapping[str, Any] | None = None
    sealed: Mapping[str, Any] | None = None


def fold_governed(run_id: str, events: Sequence[StreamRecord]) -> GovernedRecord:
    """Fold a ``governed/<run_id>`` stream (first occurrence of each fact wins)."""
    found: dict[str, Mapping[str, Any]] = {}
    for e in events:
        if isinstance(e.payload, Mapping):
            found.setdefault(e.type, e.payload)
    return GovernedRecord(run_id, found.get(RUN_OPENED), found.get(RUN_SEALING),
                          found.get(RUN_SEALED))
