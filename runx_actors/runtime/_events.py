"""Live events of Runs (spec §5.13; RUN-LOP-6).

Committed events restate the log and are never dropped by the runtime's fan-out;
provisional events (progress frames) carry no delivery promise and are dropped under
back-pressure. Sinks are synchronous and must not block; their exceptions are logged and
never affect a commit.
"""

from __future__ import annotations

import collections
import enum
import logging
from collections.abc import AsyncIterator
from typing import Any, Protocol

import attrs
import trio

from ..effect._escape import stops_the_process
from ..protocol.facts import Fact
from ..protocol.values import CallID, CommandID, EffectID, JSONText, RunID, Scope, StepID

__all__ = ["Durability", "EventKind", "Event", "EventSink", "EventHub", "safe_emit"]

log = logging.getLogger("runx_actors.runtime")


class Durability(enum.Enum):
    """COMMITTED events restate the log and are never dropped; PROVISIONAL ones (progress
    frames) carry no delivery promise (§5.13)."""

    PROVISIONAL = "provisional"
    COMMITTED = "committed"


class EventKind(enum.Enum):
    """What an event reports. AGENT_COMMITTED carries the facts of one commit
    (``committed``); RUN_FINISHED is the last event of a per-Run stream of
    ``Runtime.events(run_id)`` (its ``payload`` the RunResult JSON); the rest are
    provisional progress (model text/reasoning deltas, tool progress) or
    TOOL_STARTED/TOOL_COMPLETED notices."""

    AGENT_COMMITTED = "agent_committed"
    MODEL_TEXT_DELTA = "model_text_delta"
    MODEL_REASONING_DELTA = "model_reasoning_delta"
    TOOL_PROGRESS = "tool_progress"
    PROGRESS_RESET = "progress_reset"
    TOOL_STARTED = "tool_started"
    TOOL_COMPLETED = "tool_completed"
    RUN_FINISHED = "run_finished"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class Event:
    """One live event (§5.13, RUN-LOP-6, APP-EVT-1).

    ``command_id`` (the commit id) lets consumers deduplicate committed events [U-3];
    ``committed`` are the facts of that commit; ``position`` is the log index of the
    first of them (RunCreated is 0) when the event was read from the log by
    ``Runtime.events(run_id)``, else -1. ``payload`` is canonical JSON text or None.
    """

    kind: EventKind
    durability: Durability
    session: Scope
    run_id: RunID
    step_id: StepID = ""
    call_id: CallID = ""
    effect: EffectID = ""
    generation: int = 0
    sequence: int = 0
    payload: JSONText | None = None
    committed: tuple[Fact, ...] = attrs.field(default=(), converter=_tuple)
    command_id: CommandID = ""
    position: int = -1


class EventSink(Protocol):
    """Receives events synchronously; must not block (its exceptions are logged)."""

    def emit(self, event: Event) -> None:
        """Receive *event*; synchronous, must not block."""


def safe_emit(sink: EventSink | None, event: Event) -> None:
    """Emit *event* to *sink*, logging (never raising) a sink exception."""
    if sink is None:
        return
    try:
        sink.emit(event)
    except BaseException as exc:  # a sink never affects a commit (§5.13), nor another Run
        if stops_the_process(exc):
            raise
        log.exception("event sink %r failed on %s", sink, event.kind.value)


class _Subscription:
    def __init__(self, run_id: RunID | None, provisional_limit: int) -> None:
        self.run_id = run_id
        self.limit = provisional_limit
        self.queue: collections.deque[Event] = collections.deque()
        self.lot = trio.lowlevel.ParkingLot()
        self.provisional = 0
        self.dropped = 0
        self.closed = False

    def push(self, event: Event) -> None:
        if event.durability is Durability.PROVISIONAL:
            if self.provisional >= self.limit:
                self.dropped += 1
                return
            self.provisional += 1
        self.queue.append(event)
        self.lot.unpark_all()

    async def next(self) -> Event | None:
        """The next event, waiting for one; None once the hub closed and the queue is
        drained. Checkpoint."""
        while True:
            if self.queue:
                event = self.queue.popleft()
                if event.durability is Durability.PROVISIONAL:
                    self.provisional -= 1
                await trio.lowlevel.checkpoint()
                return event
            if self.closed:
                await trio.lowlevel.checkpoint()
                return None
            await self.lot.park()


class EventHub:
    """Fan-out sink: ``subscribe(run_id)`` yields that Run's events (all Runs for None)."""

    def __init__(self, provisional_limit: int = 256) -> None:
        self._subs: set[_Subscription] = set()
        self._limit = provisional_limit
        self._closed = False

    def emit(self, event: Event) -> None:
        """Queue *event* for every subscription to its Run (or to every Run); never blocks
        (provisional events past the limit are dropped, APP-EVT-1)."""
        for sub in tuple(self._subs):
            if sub.run_id is None or sub.run_id == event.run_id:
                sub.push(event)

    def has_subscribers(self, run_id: RunID) -> bool:
        """True iff someone subscribed to *run_id*'s events (or to every Run's)."""
        return any(s.run_id is None or s.run_id == run_id for s in self._subs)

    def close(self) -> None:
        """End every subscription: readers drain what is queued, then their iterators end."""
        self._closed = True
        for sub in self._subs:
            sub.closed = True
            sub.lot.unpark_all()

    def attach(self, run_id: RunID | None = None) -> _Subscription:
        """Register a subscription now (events emitted from here on are queued); pair
        with :meth:`detach`. ``await sub.next()`` reads it."""
        sub = _Subscription(run_id, self._limit)
        sub.closed = self._closed
        self._subs.add(sub)
        return sub

    def detach(self, sub: _Subscription) -> None:
        """Remove *sub* (from :meth:`attach`); idempotent."""
        self._subs.discard(sub)

    async def subscribe(self, run_id: RunID | None = None) -> AsyncIterator[Event]:
        """Async iterator of events; ends when the hub closes. Checkpoint per item."""
        sub = self.attach(run_id)
        try:
            while (event := await sub.next()) is not None:
                yield event
        finally:
            self.detach(sub)


class _Tee:
    """Emit to several sinks, each guarded."""

    def __init__(self, *sinks: EventSink | None) -> None:
        self.sinks = tuple(s for s in sinks if s is not None)

    def emit(self, event: Event) -> None:
        """Give *event* to each sink in turn (``safe_emit``: a raising sink is logged and
        the others still get it)."""
        for s in self.sinks:
            safe_emit(s, event)


def tee(*sinks: EventSink | None) -> EventSink | None:
    """One sink that forwards to every non-None sink; None when there are none."""
    real = [s for s in sinks if s is not None]
    if not real:
        return None
    if len(real) == 1:
        return real[0]
    return _Tee(*real)
