"""The bounded mailbox of a Run actor (spec §5.1; RUN-CMT-6).

Two paths into one actor: external requests (drive, advance, deliver, redispatch) queue
in a bounded FIFO and senders wait for room; internal messages (Outcomes the Watcher hands
to a drive, read failures, cancel pokes) use a separate unbounded path that never blocks,
so one slow Run never stalls the Watcher. Internal messages are served first.
"""

from __future__ import annotations

import collections
from collections.abc import Awaitable
from typing import Any

import attrs
import trio

from ..protocol.errors import RuntimeClosedError

__all__ = ["Latch", "Mailbox", "MailboxStatistics"]


@attrs.frozen
class MailboxStatistics:
    """A snapshot of a mailbox, like ``trio.MemoryChannelStatistics``."""

    external_used: int
    external_size: int
    internal_used: int
    senders_waiting: int


class Latch:
    """A one-shot flag with ``trio.Event``'s ``set`` / ``is_set`` / ``wait``.

    Lighter than ``trio.Event`` (no per-instance set of waiters): a parked Run keeps one
    of these per request it waits on, usually with a single waiter.
    """

    __slots__ = ("_flag", "_waiting")

    def __init__(self) -> None:
        self._flag = False
        self._waiting: trio.lowlevel.Task | list[trio.lowlevel.Task] | None = None

    def is_set(self) -> bool:
        return self._flag

    def set(self) -> None:
        """Set the flag and wake every waiter (idempotent; not a checkpoint)."""
        if self._flag:
            return
        self._flag = True
        waiting, self._waiting = self._waiting, None
        if isinstance(waiting, list):
            for task in waiting:
                trio.lowlevel.reschedule(task)
        elif waiting is not None:
            trio.lowlevel.reschedule(waiting)

    def wait(self) -> Awaitable[None]:
        """``await latch.wait()``: wait until the flag is set. Checkpoint: always.
        Cancellation: safe.

        A plain function returning the awaitable (so a parked waiter holds no extra
        coroutine frame): the waiter is registered by the call, so await it at once.
        """
        if self._flag:
            return trio.lowlevel.checkpoint()
        task = trio.lowlevel.current_task()
        waiting = self._waiting
        if waiting is None:
            self._waiting = task
            return trio.lowlevel.wait_task_rescheduled(self._abort_only)
        if isinstance(waiting, list):
            waiting.append(task)
        else:
            self._waiting = [waiting, task]

        def abort(_: Any) -> trio.lowlevel.Abort:
            joined = self._waiting
            assert isinstance(joined, list)  # a joiner is always in the list
            joined.remove(task)
            return trio.lowlevel.Abort.SUCCEEDED

        return trio.lowlevel.wait_task_rescheduled(abort)

    def _abort_only(self, _: Any) -> trio.lowlevel.Abort:
        waiting = self._waiting
        if isinstance(waiting, list):
            del waiting[0]  # the lone waiter stays first in the list when others join
        else:
            self._waiting = None
        return trio.lowlevel.Abort.SUCCEEDED


class Mailbox:
    """Bounded external FIFO + unbounded internal FIFO, one receiver.

    Built for many parked actors: the queues exist only while they hold messages, the
    receiver parks without a ParkingLot, and senders' ParkingLot appears only when one
    has to wait for room. While no task receives, ``sleeper.wake()`` is called for the
    first message that arrives (a parked actor starts its task again: RUN-ACT-9).
    """

    __slots__ = ("_closed", "_external", "_internal", "_receiver", "_room", "size", "sleeper")

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("mailbox size must be >= 1")
        self.size = size
        self._external: collections.deque[Any] | None = None
        self._internal: collections.deque[Any] | None = None
        self._room: trio.lowlevel.ParkingLot | None = None  # senders waiting for room
        self._receiver: trio.lowlevel.Task | None = None  # the receiver, while parked
        self._closed = False
        #: The owner to ``wake()`` when a message arrives while no task receives (a
        #: parked actor, RUN-ACT-9); called once, then cleared.
        self.sleeper: Any = None

    def close(self) -> None:
        """No request is taken from now on: every sender waiting for room (and every
        later ``put``) raises RuntimeClosedError (RUN-ACT-3). Not a checkpoint."""
        self._closed = True
        if self._room is not None:
            self._room.unpark_all()

    @property
    def closed(self) -> bool:
        return self._closed

    async def put(self, message: Any) -> None:
        """Queue an external request, waiting for room.

        Checkpoint: always. Cancellation: while waiting for room nothing is queued; once
        queued, the message stays queued (the call returns without another checkpoint).
        Raises: RuntimeClosedError if the mailbox is (or becomes, while waiting) closed;
        nothing is queued then.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            if self._closed:
                raise RuntimeClosedError("the Run's actor stopped (the runtime is closing)")
            if self._external is None or len(self._external) < self.size:
                break
            if self._room is None:
                self._room = trio.lowlevel.ParkingLot()
            await self._room.park()
        if self._external is None:
            self._external = collections.deque()
        self._external.append(message)
        self._wake_receiver()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def put_internal_nowait(self, message: Any) -> None:
        """Queue an internal message; never blocks, not a checkpoint."""
        if self._internal is None:
            self._internal = collections.deque()
        self._internal.append(message)
        self._wake_receiver()

    async def get(self) -> Any:
        """The next message, internal ones first. Checkpoint; cancel-safe.

        Raises ``trio.BusyResourceError`` if another task is already waiting in ``get``.
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            message = self.get_nowait()
            if message is not None:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return message
            if self._receiver is not None:
                raise trio.BusyResourceError("another task is receiving from this mailbox")
            self._receiver = trio.lowlevel.current_task()
            await trio.lowlevel.wait_task_rescheduled(self._abort_get)

    def _abort_get(self, _: Any) -> trio.lowlevel.Abort:
        self._receiver = None
        return trio.lowlevel.Abort.SUCCEEDED

    def _wake_receiver(self) -> None:
        task = self._receiver
        if task is not None:
            self._receiver = None
            trio.lowlevel.reschedule(task)
            return
        sleeper = self.sleeper
        if sleeper is not None:
            self.sleeper = None
            sleeper.wake()

    def get_nowait(self) -> Any:
        """The next message or None; never blocks, not a checkpoint."""
        internal = self._internal
        if internal is not None:
            message = internal.popleft()
            if not internal:
                self._internal = None
            return message
        external = self._external
        if external is not None:
            message = external.popleft()
            if not external:
                self._external = None
            if self._room is not None:
                self._room.unpark()
            return message
        return None

    def withdraw(self, message: Any) -> bool:
        """Remove the queued external *message*; False if it is not queued (already
        taken by the receiver). Not a checkpoint."""
        external = self._external
        if external is None:
            return False
        try:
            external.remove(message)
        except ValueError:
            return False
        if not external:
            self._external = None
        if self._room is not None:
            self._room.unpark()
        return True

    def empty(self) -> bool:
        return self._internal is None and self._external is None

    def external_empty(self) -> bool:
        """No external request is queued (internal messages are not counted)."""
        return self._external is None

    def clear_internal(self) -> None:
        """Drop every queued internal message (not a checkpoint)."""
        self._internal = None

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(
            len(self._external) if self._external is not None else 0, self.size,
            len(self._internal) if self._internal is not None else 0,
            len(self._room) if self._room is not None else 0)
