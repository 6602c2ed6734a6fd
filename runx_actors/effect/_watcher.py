"""The Watcher: wait for many keys' Outcomes with one subscription plus reads (spec §6.8).

RUN-EXE-17: reads are kept apart from notifications. One settlement subscription per
executor serves every key; a notice only prompts a read. Each key is read when it is
registered, whenever a notice names it, after each (re)subscription and every ``poll``
seconds. Non-definitive read errors never reach a registration (INV-34).

Shape of the tasks, all in the nursery given to :class:`Watcher` (or opened by
:func:`open_watcher`): one subscription task (only when the port is a
:class:`~runx_actors.effect.SettlementPort`), one timer task for every key's poll, retry
and probe deadlines, and reader tasks that exist only while keys are due to be read: a
key that must be read (registered, named by a notice, its timer fired) joins one queue,
and up to 16 readers drain it, each reading one key at a time, then end. A key
that waits therefore costs no task (a small record and a timer entry), and one slow read
delays no other key unless 16 reads are slow at once.
"""

from __future__ import annotations

import collections
import heapq
import logging
import math
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Protocol

import attrs
import trio

from .._scoped import body_errors_unwrapped
from ..protocol.errors import (
    ExecutionNotFoundError,
    OutcomeNotReadyError,
    OutcomeUnavailableError,
    SettlementsEvictedError,
    ValidationError,
)
from ._assignment import Assignment, AssignmentKey
from ._outcome import Outcome
from ._port import ExecutionPort, Recoverer, SettlementPort
from ._status import AttachmentState

__all__ = [
    "DeliverCallback",
    "FailCallback",
    "Receiver",
    "Registration",
    "WatcherStatistics",
    "Watcher",
    "open_watcher",
]

_log = logging.getLogger("runx_actors.effect.watcher")

#: Reader tasks a Watcher runs at most at once (reads in flight at once).
_READERS = 16

#: ``deliver(outcome)``: synchronous, must not block.
DeliverCallback = Callable[[Outcome], None]
#: ``fail(key, error)``: synchronous, must not block; ``error`` is a definitive read error.
FailCallback = Callable[[AssignmentKey, Exception], None]


class Receiver(Protocol):
    """What :meth:`Watcher.watch_for` hands a key's result to: one object instead of two
    callbacks, so a registration holds no bound method of its own (a waiting Run keeps
    one registration; issue 11). Both methods are synchronous and must not block."""

    def outcome_arrived(self, outcome: Outcome) -> None:
        """The key's Outcome (as ``DeliverCallback``)."""

    def read_failed(self, key: AssignmentKey, error: Exception) -> None:
        """A definitive read error of *key* (as ``FailCallback``)."""


@attrs.frozen(kw_only=True)
class WatcherStatistics:
    """A snapshot of a Watcher's counters (for tests and diagnostics).

    ``keys``: keys being watched; ``registrations``: live registrations; ``subscribed``:
    a settlement subscription is currently open; ``epoch``: the last executor epoch seen;
    ``reads``/``probes``/``recoveries``: ``get_outcome`` calls, ``attach`` probes and
    ``recover_execution`` requests made so far.
    """

    keys: int
    registrations: int
    subscribed: bool
    epoch: str
    reads: int
    probes: int
    recoveries: int


def _check_settings(poll: float, reconnect_pause: float, probe: float) -> None:
    if not (poll > 0 and math.isfinite(poll)):
        raise ValidationError("poll must be a finite number > 0", poll=poll)
    if not (reconnect_pause >= 0 and math.isfinite(reconnect_pause)):
        raise ValidationError("reconnect_pause must be >= 0", reconnect_pause=reconnect_pause)
    if probe == 0 or math.isnan(probe):
        raise ValidationError("probe must be > 0 (or negative to disable)", probe=probe)


class _KeyState:
    """Per-key bookkeeping; touched only from the trio thread.

    ``busy``: queued for a reader or being read; ``turn``: the cancel scope of the read
    (and probe) in progress, if any; ``woken``: a notice arrived while busy (read once
    more); ``due``: the deadline of the key's armed timer (``math.inf``: none).
    """

    __slots__ = ("assignment", "busy", "due", "key", "next_probe", "recover_requested",
                 "registrations", "transient", "turn", "woken")

    def __init__(self, key: AssignmentKey, assignment: Assignment | None,
                 next_probe: float) -> None:
        self.key = key
        self.assignment = assignment
        self.registrations: list[Registration] = []
        self.busy = False
        self.turn: trio.CancelScope | None = None
        self.woken = False
        self.due = math.inf
        self.transient = 0
        self.next_probe = next_probe
        self.recover_requested = False

    def __lt__(self, other: _KeyState) -> bool:  # timer-heap tie-break only
        return id(self) < id(other)


class _Waiter:
    """The box one :meth:`Watcher.await_outcome` call waits on."""

    __slots__ = ("done", "result")

    def __init__(self) -> None:
        self.done = trio.Event()
        self.result: Outcome | BaseException | None = None

    def deliver(self, outcome: Outcome) -> None:
        if self.result is None:
            self.result = outcome
        self.done.set()

    def fail(self, _key: AssignmentKey, error: Exception) -> None:
        if self.result is None:
            self.result = error
        self.done.set()


class Registration:
    """One ``watch`` of one key; obtained from :meth:`Watcher.watch` only."""

    __slots__ = ("_active", "_deliver", "_fail", "_state", "_watcher")

    def __init__(self, watcher: Watcher, state: _KeyState,
                 deliver: DeliverCallback | Receiver, fail: FailCallback | None) -> None:
        # fail is None: deliver is a Receiver (watch_for)
        self._watcher = watcher
        self._state = state
        self._deliver = deliver
        self._fail = fail
        self._active = True

    @property
    def key(self) -> AssignmentKey:
        """The watched key."""
        return self._state.key

    @property
    def active(self) -> bool:
        """False once delivered, failed, cancelled or the Watcher closed."""
        return self._active

    def cancel(self) -> None:
        """Drop this registration (idempotent, not a checkpoint).

        An Outcome read after this returns is delivered to nobody through it. When the
        key has no registration left, its reads stop.
        """
        if not self._active:
            return
        self._active = False
        self._watcher._drop(self)

    def __repr__(self) -> str:
        return f"<Registration {self._state.key!r} active={self._active}>"


class Watcher:
    """Waits for many keys' Outcomes of one executor (RUN-EXE-17, spec §6.8).

    Construct it with a nursery that outlives it (``Watcher(port, nursery=n)``), or use
    ``async with open_watcher(port) as watcher``. Times are seconds of trio's clock.

    * ``poll`` (> 0): every key is read at least this often.
    * ``reconnect_pause`` (≥ 0): pause before resubscribing after the stream failed or
      ended; also the unit of the back-off for transient read errors (retried after
      ``reconnect_pause * consecutive failures``, capped at ``poll``).
    * ``probe``: a key waiting longer than this is ``attach``-ed; if ORPHANED and the port
      is a Recoverer, ``recover_execution`` is requested once per orphaned episode
      (re-armed after the key is seen ACTIVE). Negative disables the probe; 0 is refused.

    Raises ``ValidationError`` for out-of-range settings.
    """

    def __init__(self, port: ExecutionPort, *, nursery: trio.Nursery, poll: float = 30.0,
                 reconnect_pause: float = 1.0, probe: float = 15.0) -> None:
        _check_settings(poll, reconnect_pause, probe)
        self._port = port
        self._nursery = nursery
        self._poll = float(poll)
        self._reconnect_pause = float(reconnect_pause)
        self._probe_after = float(probe)
        self._keys: dict[AssignmentKey, _KeyState] = {}
        self._waiters: set[_Waiter] = set()
        # (deadline, key state) of every armed timer; an entry whose state no longer has
        # that deadline (read since, dropped, finished) is stale and skipped when popped
        self._timers: list[tuple[float, _KeyState]] = []
        self._timers_changed = trio.Event()
        self._timer_scope = trio.CancelScope()
        self._due: collections.deque[_KeyState] = collections.deque()  # keys to read now
        self._readers = 0
        self._closed = False
        self._subscribed = False
        self._epoch = ""
        self._reads = 0
        self._probes = 0
        self._recoveries = 0
        self._sub_scope = trio.CancelScope()
        if isinstance(port, SettlementPort):
            nursery.start_soon(self._subscribe, port, name="runx-watcher-subscription")
        nursery.start_soon(self._run_timers, name="runx-watcher-timers")

    # -- public API ---------------------------------------------------------------------

    @property
    def port(self) -> ExecutionPort:
        """The executor this Watcher reads."""
        return self._port

    @property
    def closed(self) -> bool:
        """True after :meth:`aclose`."""
        return self._closed

    def watch(self, key: AssignmentKey, deliver: DeliverCallback, fail: FailCallback, *,
              assignment: Assignment | None = None) -> Registration:
        """Register interest in *key*'s Outcome. Synchronous; never blocks.

        The Outcome is handed once to ``deliver`` of every registration of the key (one
        read fans out), then the registrations are dropped. Definitive read errors
        (``ExecutionNotFoundError``, ``OutcomeUnavailableError`` and its subclasses) go to
        ``fail(key, error)``. ``assignment`` (digest-level is enough) is what the orphan
        probe passes to ``attach``; without it a key-only Assignment is used.

        Raises:
            trio.ClosedResourceError: the Watcher is closed.
        """
        return self._register(key, deliver, fail, assignment)

    def watch_for(self, key: AssignmentKey, receiver: Receiver, *,
                  assignment: Assignment | None = None) -> Registration:
        """:meth:`watch` with one :class:`Receiver` instead of two callbacks: the Outcome
        goes to ``receiver.outcome_arrived(outcome)``, a definitive read error to
        ``receiver.read_failed(key, error)``. Same rules and errors as :meth:`watch`.
        """
        return self._register(key, receiver, None, assignment)

    def _register(self, key: AssignmentKey, deliver: DeliverCallback | Receiver,
                  fail: FailCallback | None, assignment: Assignment | None) -> Registration:
        if self._closed:
            raise trio.ClosedResourceError("the Watcher is closed")
        state = self._keys.get(key)
        if state is None:
            next_probe = (trio.current_time() + self._probe_after
                          if self._probe_after > 0 else math.inf)
            state = _KeyState(key, assignment, next_probe)
            registration = Registration(self, state, deliver, fail)
            state.registrations = [registration]  # exactly one slot: most keys keep one
            self._keys[key] = state
            self._start_turn(state)  # read it at once
            return registration
        if assignment is not None and state.assignment is None:
            state.assignment = assignment
        registration = Registration(self, state, deliver, fail)
        state.registrations.append(registration)
        return registration

    async def await_outcome(self, key: AssignmentKey, *,
                            assignment: Assignment | None = None) -> Outcome:
        """Wait for *key*'s Outcome.

        Checkpoint: always.
        Cancellation: the registration is dropped; nothing else changes.
        Raises:
            ExecutionNotFoundError, OutcomeUnavailableError (and subclasses): definitive
                read errors (§6.7).
            trio.ClosedResourceError: the Watcher is (or became) closed.
        """
        waiter = _Waiter()
        registration = self.watch(key, waiter.deliver, waiter.fail, assignment=assignment)
        self._waiters.add(waiter)
        try:
            await waiter.done.wait()
        finally:
            self._waiters.discard(waiter)
            registration.cancel()
        result = waiter.result
        assert result is not None
        if isinstance(result, BaseException):
            raise result
        return result

    async def aclose(self) -> None:
        """Stop every read, the subscription and every registration (idempotent).

        Registrations are dropped without calling their callbacks; pending
        :meth:`await_outcome` calls raise ``trio.ClosedResourceError``.

        Checkpoint: always. Cancellation: the Watcher is closed before the checkpoint.
        """
        self._close()
        await trio.lowlevel.checkpoint()

    def statistics(self) -> WatcherStatistics:
        """A frozen snapshot of the counters (not a checkpoint)."""
        return WatcherStatistics(
            keys=len(self._keys),
            registrations=sum(len(s.registrations) for s in self._keys.values()),
            subscribed=self._subscribed,
            epoch=self._epoch,
            reads=self._reads,
            probes=self._probes,
            recoveries=self._recoveries,
        )

    # -- internals (synchronous helpers never checkpoint) ---------------------------------

    def _close(self) -> None:
        if self._closed:
            return
        self._closed = True
        self._sub_scope.cancel()
        self._timer_scope.cancel()
        self._timers.clear()
        self._due.clear()
        states = list(self._keys.values())
        self._keys.clear()
        for state in states:
            for registration in state.registrations:
                registration._active = False
            state.registrations.clear()
            state.due = math.inf
            if state.turn is not None:
                state.turn.cancel()
        waiters = list(self._waiters)
        self._waiters.clear()
        for waiter in waiters:
            if waiter.result is None:
                waiter.result = trio.ClosedResourceError("the Watcher closed")
            waiter.done.set()

    def _drop(self, registration: Registration) -> None:
        state = registration._state
        try:
            state.registrations.remove(registration)
        except ValueError:
            return
        if not state.registrations and self._keys.get(state.key) is state:
            del self._keys[state.key]
            self._disarm(state)
            if state.turn is not None:
                state.turn.cancel()

    def _finish(self, state: _KeyState, result: Outcome | Exception) -> None:
        """Hand *result* to every live registration of *state*, then forget the key."""
        if self._keys.get(state.key) is not state:
            return  # cancelled or closed meanwhile: delivered to nobody
        del self._keys[state.key]
        registrations = list(state.registrations)
        state.registrations.clear()
        for registration in registrations:
            registration._active = False
            fail = registration._fail
            try:
                if fail is None:  # a Receiver (watch_for)
                    receiver: Receiver = registration._deliver  # type: ignore[assignment]
                    if isinstance(result, Outcome):
                        receiver.outcome_arrived(result)
                    else:
                        receiver.read_failed(state.key, result)
                elif isinstance(result, Outcome):
                    registration._deliver(result)  # type: ignore[operator]
                else:
                    fail(state.key, result)
            except Exception:
                _log.exception("watcher callback failed for %r", state.key)

    def _wake(self, state: _KeyState) -> None:
        """Read *state*'s key now (or once more, if it is queued or being read)."""
        if state.busy:
            state.woken = True
        else:
            self._start_turn(state)

    def _wake_all(self) -> None:
        for state in list(self._keys.values()):
            self._wake(state)

    def _start_turn(self, state: _KeyState) -> None:
        """Queue *state*'s key for a reader (starting a reader if fewer than
        ``_READERS`` run)."""
        self._disarm(state)
        state.woken = False
        state.busy = True
        self._due.append(state)
        if self._readers < _READERS:
            self._readers += 1
            self._nursery.start_soon(self._reader, name="runx-watcher-reader")

    def _disarm(self, state: _KeyState) -> None:
        """Make *state*'s armed timer (if any) stale. If it was the earliest, the timer
        task re-reads the heap: no task sleeps towards a deadline nobody needs (which
        would also make an autojumping MockClock jump to it)."""
        state.due = math.inf
        if self._timers and self._timers[0][1] is state:
            self._timers_changed.set()

    def _live_timer(self, when: float, state: _KeyState) -> bool:
        return state.due == when and not state.busy and self._keys.get(state.key) is state

    def _arm(self, state: _KeyState, when: float) -> None:
        """Wake *state*'s key at *when* (trio clock) unless something reads it first."""
        state.due = when
        timers = self._timers
        if len(timers) > 64 and len(timers) > 2 * len(self._keys):
            # drop stale entries so the heap stays proportional to the keys watched
            timers[:] = [(w, s) for w, s in timers if self._live_timer(w, s)]
            heapq.heapify(timers)
        heapq.heappush(timers, (when, state))
        if timers[0][1] is state:
            self._timers_changed.set()  # a new earliest deadline

    def _retry_pause(self, failures: int) -> float:
        if self._reconnect_pause <= 0:
            return self._poll
        return min(self._poll, self._reconnect_pause * failures)

    # -- tasks ----------------------------------------------------------------------------

    async def _run_timers(self) -> None:
        """The one task that waits for every key's next poll, retry or probe."""
        timers = self._timers
        with self._timer_scope:
            while True:
                now = trio.current_time()
                # pop what is due, and stale entries on top (never sleep towards those)
                while timers and (timers[0][0] <= now or not self._live_timer(*timers[0])):
                    when, state = heapq.heappop(timers)
                    if when <= now and self._live_timer(when, state):
                        self._start_turn(state)
                self._timers_changed = trio.Event()
                with trio.move_on_at(timers[0][0] if timers else math.inf):
                    await self._timers_changed.wait()

    async def _reader(self) -> None:
        """Serve queued keys one at a time until the queue is empty, then end."""
        try:
            while self._due:
                state = self._due.popleft()
                if self._keys.get(state.key) is not state:
                    state.busy = False
                    continue  # dropped while queued
                scope = state.turn = trio.CancelScope()
                try:
                    with scope:  # cancelled when the key is dropped meanwhile
                        await self._turn(state)
                finally:
                    state.turn = None
                    state.busy = False
        finally:
            self._readers -= 1

    async def _turn(self, state: _KeyState) -> None:
        """Read (and probe, when due) *state*'s key until it finishes or must wait; then
        arm its timer."""
        while True:
            if trio.current_time() >= state.next_probe:
                await self._probe(state)
                state.next_probe = trio.current_time() + self._probe_after
            state.woken = False
            if await self._read(state):
                return
            if state.woken:
                continue  # a notice arrived during the read: read again now
            if self._keys.get(state.key) is state:
                now = trio.current_time()
                pause = self._retry_pause(state.transient) if state.transient else self._poll
                self._arm(state, min(now + pause, state.next_probe))
            return

    async def _read(self, state: _KeyState) -> bool:
        """Read *state*'s key once; True when the key is finished (delivered or failed)."""
        self._reads += 1
        try:
            outcome = await self._port.get_outcome(state.key)
        except OutcomeNotReadyError:
            state.transient = 0
            return False
        except (ExecutionNotFoundError, OutcomeUnavailableError) as error:
            self._finish(state, error)
            return True
        except Exception as error:  # says nothing about the execution: read again later
            state.transient += 1
            _log.debug("transient read error for %r: %r", state.key, error)
            return False
        if not isinstance(outcome, Outcome) or outcome.key != state.key:
            state.transient += 1
            _log.warning("executor returned %r for %r; reading again later", outcome, state.key)
            return False
        self._finish(state, outcome)
        return True

    async def _probe(self, state: _KeyState) -> None:
        self._probes += 1
        assignment = state.assignment or Assignment.for_key(state.key)
        try:
            attachment = await self._port.attach(assignment)
        except Exception as error:
            _log.debug("probe attach failed for %r: %r", state.key, error)
            return
        if attachment.state is AttachmentState.ACTIVE:
            state.recover_requested = False  # a later orphaning is a new episode
        elif attachment.state is AttachmentState.ORPHANED and not state.recover_requested:
            if isinstance(self._port, Recoverer):
                try:
                    await self._port.recover_execution(state.key)
                except Exception as error:
                    _log.debug("recover_execution failed for %r: %r", state.key, error)
                    return
                state.recover_requested = True
                self._recoveries += 1

    async def _subscribe(self, port: SettlementPort) -> None:
        epoch, after = "", 0
        with self._sub_scope:
            while True:
                try:
                    stream = port.settlements(epoch, after)
                    try:
                        async for notice in stream:
                            if notice.key is None:
                                if notice.epoch != epoch:
                                    after = notice.sequence  # new incarnation: from its head
                                epoch = self._epoch = notice.epoch
                                self._subscribed = True
                                self._wake_all()  # read every key after each (re)subscription
                            else:
                                after = max(after, notice.sequence)
                                state = self._keys.get(notice.key)
                                if state is not None:
                                    self._wake(state)
                    finally:
                        self._subscribed = False
                        aclose = getattr(stream, "aclose", None)
                        if aclose is not None:
                            await aclose()
                except SettlementsEvictedError:
                    epoch, after = "", 0
                    self._wake_all()
                except Exception as error:
                    _log.debug("settlement subscription failed: %r", error)
                await trio.sleep(self._reconnect_pause)


@body_errors_unwrapped
@asynccontextmanager
async def open_watcher(port: ExecutionPort, *, poll: float = 30.0,
                       reconnect_pause: float = 1.0,
                       probe: float = 15.0) -> AsyncIterator[Watcher]:
    """Open a :class:`Watcher` over *port* whose tasks live in a nursery of this block.

    Leaving the block closes the Watcher (registrations are dropped without callbacks).
    Raises ``ValidationError`` for out-of-range settings (see :class:`Watcher`).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """
    _check_settings(poll, reconnect_pause, probe)
    async with trio.open_nursery() as nursery:
        watcher = Watcher(port, nursery=nursery, poll=poll, reconnect_pause=reconnect_pause,
                          probe=probe)
        try:
            yield watcher
        finally:
            watcher._close()
