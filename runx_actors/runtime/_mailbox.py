"""The bounded mailbox of a Run actor (spec §5.1; RUN-CMT-6).

Two paths into one actor: external requests (drive, advance, deliver, redispatch) queue
in a bounded FIFO and senders wait for room; internal messages (Outcomes the Watcher hands
to a drive, read failures, cancel pokes) use a separate unbounded path that never blocks,
so one slow Run never stalls the Watcher. Internal messages are served first.
"""

from __future__ import annotations

import collections
from typing import Any

import attrs
import trio

__all__ = ["Mailbox", "MailboxStatistics"]


@attrs.frozen
class MailboxStatistics:
    """A snapshot of a mailbox, like ``trio.MemoryChannelStatistics``."""

    external_used: int
    external_size: int
    internal_used: int
    senders_waiting: int


class Mailbox:
    """Bounded external FIFO + unbounded internal FIFO, one receiver."""

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError("mailbox size must be >= 1")
        self.size = size
        self._external: collections.deque[Any] = collections.deque()
        self._internal: collections.deque[Any] = collections.deque()
        self._room = trio.lowlevel.ParkingLot()
        self._avail = trio.lowlevel.ParkingLot()

    async def put(self, message: Any) -> None:
        """Queue an external request, waiting for room.

        Checkpoint: always. Cancellation: while waiting for room nothing is queued; once
        queued, the message stays queued (the call returns without another checkpoint).
        """
        await trio.lowlevel.checkpoint_if_cancelled()
        while len(self._external) >= self.size:
            await self._room.park()
        self._external.append(message)
        self._avail.unpark()
        await trio.lowlevel.cancel_shielded_checkpoint()

    def put_internal_nowait(self, message: Any) -> None:
        """Queue an internal message; never blocks, not a checkpoint."""
        self._internal.append(message)
        self._avail.unpark()

    async def get(self) -> Any:
        """The next message, internal ones first. Checkpoint; cancel-safe."""
        await trio.lowlevel.checkpoint_if_cancelled()
        while True:
            message = self.get_nowait()
            if message is not None:
                await trio.lowlevel.cancel_shielded_checkpoint()
                return message
            await self._avail.park()

    def get_nowait(self) -> Any:
        """The next message or None; never blocks, not a checkpoint."""
        if self._internal:
            return self._internal.popleft()
        if self._external:
            message = self._external.popleft()
            self._room.unpark()
            return message
        return None

    def empty(self) -> bool:
        return not self._internal and not self._external

    def external_empty(self) -> bool:
        """No external request is queued (internal messages are not counted)."""
        return not self._external

    def clear_internal(self) -> None:
        """Drop every queued internal message (not a checkpoint)."""
        self._internal.clear()

    def statistics(self) -> MailboxStatistics:
        return MailboxStatistics(len(self._external), self.size, len(self._internal),
                                 len(self._room))
