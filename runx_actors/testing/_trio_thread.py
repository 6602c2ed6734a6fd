"""A trio loop owned by one hypothesis state machine, running in a background thread
(style guide §6: rules are synchronous; stores, actors and runtimes must outlive a rule,
so the machine owns a loop instead of calling ``trio.run`` per rule). Used by the state
machines of :mod:`runx_actors.testing.machines` and of ``model_tests/``.

Every call is bounded by a timeout, so a deadlock fails the example instead of hanging
the test run. One loop belongs to one machine instance; ``close()`` in ``teardown``.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import trio

__all__ = ["TrioLoopThread", "Hosted"]

T = TypeVar("T")


class TrioLoopThread:
    """``trio.run`` in a daemon thread; ``call`` runs a coroutine there and waits."""

    def __init__(self) -> None:
        self._ready = threading.Event()
        self._error: BaseException | None = None
        self.token: trio.lowlevel.TrioToken | None = None
        self._stop: trio.Event | None = None
        self.nursery: trio.Nursery | None = None
        self._thread = threading.Thread(target=self._run, daemon=True, name="runx-testing-loop")
        self._thread.start()
        self._ready.wait()
        if self._error is not None:
            raise self._error

    def _run(self) -> None:
        try:
            trio.run(self._main)
        except BaseException as exc:  # surfaced by close()
            self._error = exc
            self._ready.set()

    async def _main(self) -> None:
        self.token = trio.lowlevel.current_trio_token()
        self._stop = trio.Event()
        async with trio.open_nursery() as nursery:
            self.nursery = nursery
            self._ready.set()
            await self._stop.wait()
            nursery.cancel_scope.cancel()

    def call(self, afn: Callable[..., Awaitable[T]], *args: Any, timeout: float = 10.0) -> T:
        """``await afn(*args)`` on the loop; its exception comes back unchanged; a hang
        becomes ``trio.TooSlowError``."""

        async def bounded() -> T:
            with trio.fail_after(timeout):
                return await afn(*args)

        return trio.from_thread.run(bounded, trio_token=self.token)

    def spawn(self, afn: Callable[..., Awaitable[Any]], *args: Any) -> None:
        """Start ``afn(*args)`` as a task of the loop's nursery (it outlives the rule)."""
        assert self.nursery is not None
        trio.from_thread.run_sync(self.nursery.start_soon, afn, *args, trio_token=self.token)

    def close(self) -> None:
        if self.token is not None and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self.token)
        self._thread.join(10)
        if self._error is not None:
            raise self._error


class Hosted:
    """An async context manager kept open across rules by a task of the loop.

    ``Hosted(loop, factory)`` enters ``factory()`` in its own task (nurseries inside it
    are then entered and exited by the same task, as trio requires) and returns once it
    is open; ``value`` is what it yielded. ``close()`` exits it normally; ``crash()``
    cancels the task, as a dying process would stop it.
    """

    def __init__(self, loop: TrioLoopThread, factory: Callable[[], Any],
                 timeout: float = 10.0) -> None:
        self.loop = loop
        self.value: Any = None
        self.error: BaseException | None = None
        self._opened = threading.Event()
        self._done = threading.Event()
        self._scope: trio.CancelScope | None = None
        self._stop: trio.Event | None = None
        loop.spawn(self._host, factory)
        if not self._opened.wait(timeout):
            raise TimeoutError("the hosted context did not open")
        if self.error is not None:
            raise self.error

    async def _host(self, factory: Callable[[], Any]) -> None:
        self._stop = trio.Event()
        try:
            with trio.CancelScope() as self._scope:
                async with factory() as value:
                    self.value = value
                    self._opened.set()
                    await self._stop.wait()
        except BaseException as exc:  # kept for the machine to look at
            self.error = exc
        finally:
            self._opened.set()
            self._done.set()

    @property
    def open(self) -> bool:
        return self._opened.is_set() and not self._done.is_set()

    def close(self, timeout: float = 10.0) -> None:
        """Leave the context normally and wait until it is closed."""
        if not self._done.is_set() and self._stop is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._stop.set, trio_token=self.loop.token)
        self._done.wait(timeout)

    def crash(self, timeout: float = 10.0) -> None:
        """Cancel the hosting task (shielded settlements finish within their limits)."""
        if not self._done.is_set() and self._scope is not None:
            with contextlib.suppress(trio.RunFinishedError):
                trio.from_thread.run_sync(self._scope.cancel, trio_token=self.loop.token)
        self._done.wait(timeout)
