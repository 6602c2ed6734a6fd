"""The dispatch gate: after a business stop begins, no dispatch of that Run leaves the
runtime (run-protocol §5.9; RUN-ACT-4).

A dispatch is decided (its start fact committed) and then sent after one or more awaits
(the frozen request is read, a retry pause, a redispatch's load). ``ActorRuntime.cancel_run``
closes the gate of the Run *before* it commits ``CancelRun`` and waits — at most
``drain_timeout`` — for the dispatches already inside the executor to return, so:

* a dispatch that has not been sent yet is never sent (the effect stays EXECUTING and
  ``CancelRun`` closes it);
* a dispatch already sent is known to the executor when the cancel reaches it, so the
  executor's cancel stops its running attempt and every later one (RUN-EXE-6).

If ``CancelRun`` is refused (the Run ended otherwise, ownership was lost) the gate opens
again. The gate is in-process state of one runtime; a gate closed for a Run stays closed
while the runtime lives (the Run is over), one small string per cancelled Run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import trio

__all__ = ["DispatchGate", "StoppedBeforeDispatch"]


class StoppedBeforeDispatch(Exception):
    """Internal: the Run's business stop began before this dispatch was sent; nothing
    was sent. Never leaves the runtime."""


class DispatchGate:
    """Per-Run gate over ``executor.dispatch`` (see the module docstring)."""

    __slots__ = ("_active", "_closed", "_idle")

    def __init__(self) -> None:
        self._closed: set[str] = set()
        self._active: dict[str, int] = {}
        self._idle: dict[str, trio.Event] = {}

    def is_closed(self, run_id: str) -> bool:
        """True once a business stop of *run_id* began in this runtime."""
        return run_id in self._closed

    @contextlib.contextmanager
    def dispatching(self, run_id: str) -> Iterator[None]:
        """Hold the gate open for one ``executor.dispatch`` of *run_id*.

        Raises:
            StoppedBeforeDispatch: the gate is closed; the caller must not dispatch.
        """
        if run_id in self._closed:
            raise StoppedBeforeDispatch(run_id)
        self._active[run_id] = self._active.get(run_id, 0) + 1
        try:
            yield
        finally:
            left = self._active[run_id] - 1
            if left:
                self._active[run_id] = left
            else:
                del self._active[run_id]
                idle = self._idle.pop(run_id, None)
                if idle is not None:
                    idle.set()

    async def close(self, run_id: str, timeout: float) -> None:
        """Close *run_id*'s gate and wait (at most *timeout* seconds) for the dispatches
        already sent to return. Checkpoint; cancellation leaves the gate closed."""
        self._closed.add(run_id)
        if run_id not in self._active:
            await trio.lowlevel.checkpoint()
            return
        idle = self._idle.setdefault(run_id, trio.Event())
        with trio.move_on_after(timeout):
            await idle.wait()

    def reopen(self, run_id: str) -> None:
        """Open *run_id*'s gate again (its ``CancelRun`` was refused)."""
        self._closed.discard(run_id)
