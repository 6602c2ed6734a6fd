"""Bounded notification streams of the LocalExecutor: the settlement log and the
per-key progress rings (spec §6.8; RUN-EXE-12, RUN-EXE-17)."""

from __future__ import annotations

from collections import deque
from typing import Any

import trio

from ..effect import AssignmentKey, ProgressFrame, ProgressKind, Settlement
from ..protocol.canonical import canonical_json_text
from ..protocol.errors import SettlementsEvictedError

__all__ = ["SettlementLog", "SettlementSubscription", "ProgressRing", "ProgressSubscription"]


class SettlementLog:
    """Sequence-numbered "read this key" notices of one executor incarnation.

    Keeps the last ``window`` notices; ``head`` is the newest sequence (0 when empty).
    """

    def __init__(self, epoch: str, window: int) -> None:
        if window < 1:
            raise ValueError("the settlement window must be >= 1")
        self.epoch = epoch
        self.head = 0
        self._entries: deque[tuple[int, AssignmentKey]] = deque(maxlen=window)
        self._changed = trio.Event()

    def append_nowait(self, key: AssignmentKey) -> int:
        """Record a notice for *key*; returns its sequence. Never blocks."""
        self.head += 1
        self._entries.append((self.head, key))
        self._wake()
        return self.head

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def oldest(self) -> int:
        """Sequence of the oldest retained notice (``head + 1`` when none)."""
        return self._entries[0][0] if self._entries else self.head + 1

    def entry(self, sequence: int) -> AssignmentKey:
        """The key of notice *sequence* (which must be retained)."""
        return self._entries[sequence - self.oldest()][1]

    async def changed(self) -> None:
        """Wait until a notice is appended."""
        await self._changed.wait()


class SettlementSubscription:
    """Async iterator over a :class:`SettlementLog` (``SettlementPort.settlements``).

    Yields the announcement first, then notices with ``sequence > after``; raises
    ``SettlementsEvictedError`` once the window has moved past the cursor.
    """

    def __init__(self, log: SettlementLog, epoch: str, after: int) -> None:
        self._log = log
        # an unknown or empty epoch (or a cursor from the future) subscribes from the head
        self._cursor = after if epoch == log.epoch and 0 <= after <= log.head else log.head
        self._announced = False
        self._closed = False

    def __aiter__(self) -> SettlementSubscription:
        return self

    async def __anext__(self) -> Settlement:
        log = self._log
        if not self._announced:
            await trio.lowlevel.checkpoint()
            self._announced = True
            return Settlement(None, log.epoch, log.head)
        while True:
            if self._closed:
                await trio.lowlevel.checkpoint()
                raise StopAsyncIteration
            if self._cursor < log.head:
                if self._cursor + 1 < log.oldest():
                    await trio.lowlevel.checkpoint()
                    raise SettlementsEvictedError(
                        "the settlement window moved past the requested sequence",
                        epoch=log.epoch, after=self._cursor, oldest=log.oldest())
                await trio.lowlevel.checkpoint()
                self._cursor += 1
                return Settlement(log.entry(self._cursor), log.epoch, self._cursor)
            await log.changed()

    async def aclose(self) -> None:
        """Stop iterating. Checkpoint: always."""
        self._closed = True
        await trio.lowlevel.checkpoint()


class ProgressRing:
    """The bounded ring of one key's progress frames (RUN-EXE-12).

    Generations start at 0; sequence numbers start at 1 within each generation;
    ``restart_nowait`` opens a new generation with a ``RESET`` frame and ``end_nowait``
    closes the stream with an ``END`` frame. ``total`` counts every frame ever pushed,
    so a reader's cursor survives the ring dropping old frames.
    """

    __slots__ = ("_changed", "_frames", "_size", "ended", "generation", "key", "sequence",
                 "total")

    def __init__(self, key: AssignmentKey, size: int) -> None:
        if size < 1:
            raise ValueError("the progress ring size must be >= 1")
        self.key = key
        self.generation = 0
        self.sequence = 0
        self.total = 0
        self.ended = False
        self._size = size
        # Created on first use: most executions emit no progress and nobody reads it, so
        # a live record costs no frame buffer and no Event. A small list, trimmed from
        # the front, is the bounded ring (cheaper than a deque for a handful of frames).
        self._frames: list[ProgressFrame] | None = None
        self._changed: trio.Event | None = None  # exists only while a reader waits

    def push_nowait(self, kind: ProgressKind, payload: Any = None) -> ProgressFrame | None:
        """Append a frame with JSON *payload* (``None`` → ``{}``); dropped (``None``
        returned) after the stream ended."""
        if self.ended:
            return None
        self.sequence += 1
        frame = ProgressFrame(key=self.key, generation=self.generation,
                              sequence=self.sequence, kind=kind,
                              payload=canonical_json_text({} if payload is None else payload))
        frames = self._frames
        if frames is None:
            frames = self._frames = []
        frames.append(frame)
        if len(frames) > self._size:
            del frames[0]
        self.total += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None
        return frame

    def emit_nowait(self, kind: ProgressKind, payload: Any = None) -> None:
        """:meth:`push_nowait` without a return value (the emitter tools and models get)."""
        self.push_nowait(kind, payload)

    def restart_nowait(self) -> None:
        """Begin a new generation: every earlier frame is void."""
        self.generation += 1
        self.sequence = 0
        self.push_nowait(ProgressKind.RESET)

    def end_nowait(self) -> None:
        """Close the stream with an ``END`` frame (idempotent)."""
        if not self.ended:
            self.push_nowait(ProgressKind.END)
            self.ended = True

    def since(self, cursor: int) -> tuple[tuple[ProgressFrame, ...], int]:
        """Frames after absolute position *cursor* still in the ring, and the new cursor."""
        held = self._frames or ()
        first = self.total - len(held)
        start = max(cursor, first)
        return tuple(held[start - first:]), self.total

    async def changed(self) -> None:
        """Wait for the next frame."""
        if self._changed is None:
            self._changed = trio.Event()
        await self._changed.wait()


class ProgressSubscription:
    """Async iterator over one key's :class:`ProgressRing` (``ProgressPort.progress``):
    every retained frame from the oldest, then new ones; ends after ``END``."""

    def __init__(self, ring: ProgressRing | None, missing: Exception | None = None) -> None:
        self._ring = ring
        self._missing = missing
        self._cursor = 0
        self._buffer: deque[ProgressFrame] = deque()
        self._done = False

    def __aiter__(self) -> ProgressSubscription:
        return self

    async def __anext__(self) -> ProgressFrame:
        await trio.lowlevel.checkpoint()
        if self._ring is None:
            if self._missing is not None:
                error, self._missing = self._missing, None
                raise error
            raise StopAsyncIteration
        while not self._buffer:
            if self._done:
                raise StopAsyncIteration
            frames, self._cursor = self._ring.since(self._cursor)
            self._buffer.extend(frames)
            if not self._buffer:
                if self._ring.ended:
                    raise StopAsyncIteration
                await self._ring.changed()
        frame = self._buffer.popleft()
        if frame.kind is ProgressKind.END:
            self._done = True
        return frame

    async def aclose(self) -> None:
        """Stop iterating. Checkpoint: always."""
        self._done = True
        self._buffer.clear()
        await trio.lowlevel.checkpoint()
