"""Fault-injecting wrappers for stores (tests, fuzzing, conformance).

``FaultyRunStore`` wraps any RunStore and, per a plan you set, raises *after* the inner
commit applied (an ambiguous commit: the caller cannot tell it happened), raises
*before* it (nothing applied), or delays it — and counts every attempt.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import trio

from ..protocol.commit import CommitRequest, CommitResult

__all__ = ["AmbiguousCommitError", "FaultyRunStore", "FaultyWriter"]


class AmbiguousCommitError(Exception):
    """Raised by FaultyRunStore to simulate a lost commit response (not a RunxError)."""


class FaultyRunStore:
    """Wrap a RunStore. ``fail_after(pred)`` makes commits matching *pred* raise
    AmbiguousCommitError after applying (once each by default); ``fail_before(pred)``
    raises without applying; ``delay(pred, event)`` holds a commit until *event* is set.
    ``attempts`` lists every CommitRequest seen, in order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.attempts: list[CommitRequest] = []
        self._after: list[tuple[Callable[[CommitRequest], bool], list[int]]] = []
        self._before: list[tuple[Callable[[CommitRequest], bool], list[int]]] = []
        self._delays: list[tuple[Callable[[CommitRequest], bool], trio.Event]] = []

    @property
    def scope(self) -> str:
        return str(self.inner.scope)

    def fail_after(self, pred: Callable[[CommitRequest], bool], times: int = 1) -> None:
        self._after.append((pred, [times]))

    def fail_before(self, pred: Callable[[CommitRequest], bool], times: int = 1) -> None:
        self._before.append((pred, [times]))

    def delay(self, pred: Callable[[CommitRequest], bool], event: trio.Event) -> None:
        self._delays.append((pred, event))

    @staticmethod
    def _take(rules: list[tuple[Callable[[CommitRequest], bool], list[int]]],
              request: CommitRequest) -> bool:
        for pred, left in rules:
            if left[0] > 0 and pred(request):
                left[0] -= 1
                return True
        return False

    async def load(self, run_id: str) -> Any:
        return await self.inner.load(run_id)

    async def frozen_request(self, digest: str) -> Any:
        return await self.inner.frozen_request(digest)

    async def commit(self, request: CommitRequest) -> CommitResult:
        self.attempts.append(request)
        for pred, event in self._delays:
            if pred(request):
                await event.wait()
        if self._take(self._before, request):
            await trio.lowlevel.checkpoint()
            raise AmbiguousCommitError("injected failure before commit")
        result: CommitResult = await self.inner.commit(request)
        if self._take(self._after, request):
            raise AmbiguousCommitError("injected failure after commit")
        return result


class FaultyWriter:
    """A SessionWriter whose ``run_store()`` is a FaultyRunStore over the inner one."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.faults = FaultyRunStore(inner.run_store())

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run_store(self) -> FaultyRunStore:
        return self.faults
