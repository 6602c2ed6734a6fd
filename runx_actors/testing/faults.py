"""Fault-injecting wrappers for stores and executors (tests, fuzzing, conformance).

``FaultyRunStore`` wraps any RunStore and, per a plan you set, raises *after* the inner
commit applied (an ambiguous commit: the caller cannot tell it happened), raises
*before* it (nothing applied), or delays it — and counts every attempt. ``FaultyWriter``
is a SessionWriter whose run store is one; ``FaultyStore`` a SessionStore whose every
writer is one, all sharing the same plan.

``FaultyExecutor`` wraps any ExecutionPort (its optional capabilities pass through) and
injects the executor-side faults of spec §6.3/§6.7: a dispatch refused retryable before
the inner executor saw it, a dispatch whose receipt is lost after the inner executor
accepted it (``DispatchUnknownError``), a dispatch delivered twice (a retried network
call), and non-definitive reads (``OutcomeNotReadyError`` for a settled key, INV-34).
Each rule takes a predicate on the Assignment (or key) and a count.

Plans are predicates, so one wrapper serves a whole scenario: for example
``ex.lose_dispatch_receipt(lambda a: a.kind == "tool")`` makes the first tool dispatch
ambiguous, which the loop must then reconcile without starting the tool again.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import trio

from ..effect import Assignment, AssignmentKey, Outcome
from ..protocol.commit import BatchResult, CommitRequest, CommitResult
from ..protocol.errors import DispatchRetryableError, DispatchUnknownError, OutcomeNotReadyError
from ..protocol.values import Scope
from ..store.base import commit_batch

__all__ = ["AmbiguousCommitError", "FaultyRunStore", "FaultyWriter", "FaultyStore",
           "FaultyExecutor"]

_Rules = list[tuple[Callable[[Any], bool], list[int]]]


def _take(rules: _Rules, value: Any) -> bool:
    """True (and one use spent) when a rule with uses left matches *value*."""
    for pred, left in rules:
        if left[0] > 0 and pred(value):
            left[0] -= 1
            return True
    return False


class AmbiguousCommitError(Exception):
    """Raised by FaultyRunStore to simulate a lost commit response (not a RunxError)."""


class FaultyRunStore:
    """Wrap a RunStore. ``fail_after(pred)`` makes commits matching *pred* raise
    AmbiguousCommitError after applying (once each by default); ``fail_before(pred)``
    raises without applying; ``delay(pred, event)`` holds a commit until *event* is set.
    ``attempts`` lists every CommitRequest seen, in order.

    ``commit_batch`` (RUN-CMT-9) applies the same rules to a whole batch when any of its
    requests matches (one use of the rule per batch): a delay holds the batch, fail_before
    raises with nothing of the batch applied, fail_after raises once the whole batch
    committed (an ambiguous batch commit)."""

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

    @staticmethod
    def _take_any(rules: list[tuple[Callable[[CommitRequest], bool], list[int]]],
                  requests: Sequence[CommitRequest]) -> bool:
        for pred, left in rules:
            if left[0] > 0 and any(pred(r) for r in requests):
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

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> BatchResult:
        """The inner store's batch commit (``store.base.commit_batch``) under the rules
        (see the class docstring). Raises AmbiguousCommitError as injected."""
        self.attempts.extend(requests)
        for pred, event in self._delays:
            if any(pred(r) for r in requests):
                await event.wait()
        if self._take_any(self._before, requests):
            await trio.lowlevel.checkpoint()
            raise AmbiguousCommitError("injected failure before commit")
        result = await commit_batch(self.inner, requests)
        if self._take_any(self._after, requests):
            raise AmbiguousCommitError("injected failure after commit")
        return result


class FaultyWriter:
    """A SessionWriter whose ``run_store()`` is a FaultyRunStore over the inner one
    (sharing the rules of *plan*, another FaultyRunStore, when given)."""

    def __init__(self, inner: Any, plan: FaultyRunStore | None = None) -> None:
        self.inner = inner
        self.faults = FaultyRunStore(inner.run_store())
        if plan is not None:
            self.faults.attempts = plan.attempts
            self.faults._after, self.faults._before = plan._after, plan._before
            self.faults._delays = plan._delays

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run_store(self) -> FaultyRunStore:
        return self.faults


class FaultyStore:
    """A SessionStore whose every writer is a :class:`FaultyWriter`; the rules set on
    :attr:`plan` (``fail_after`` / ``fail_before`` / ``delay``) apply to every writer it
    opens, before or after the rule was set. ``writers`` lists them in opening order."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.plan = FaultyRunStore(None)
        self.writers: list[FaultyWriter] = []

    @property
    def frozen(self) -> Any:
        return self.inner.frozen

    async def open(self, scope: Scope) -> FaultyWriter:
        writer = FaultyWriter(await self.inner.open(scope), self.plan)
        self.writers.append(writer)
        return writer

    async def reader(self, scope: Scope) -> Any:
        return await self.inner.reader(scope)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)


class FaultyExecutor:
    """Wrap an ExecutionPort with injected dispatch and read faults (see module doc).

    ``dispatches`` lists every Assignment offered to ``dispatch``, in order; the optional
    capabilities of the inner executor (settlements, progress, acknowledge, recover,
    dispose) pass through unchanged, so ``isinstance`` checks see the same port.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dispatches: list[Assignment] = []
        self._refuse: _Rules = []
        self._lose: _Rules = []
        self._twice: _Rules = []
        self._flaky: _Rules = []

    def refuse_dispatch(self, pred: Callable[[Assignment], bool], times: int = 1) -> None:
        """``DispatchRetryableError`` before the inner executor sees the Assignment."""
        self._refuse.append((pred, [times]))

    def lose_dispatch_receipt(self, pred: Callable[[Assignment], bool], times: int = 1) -> None:
        """The inner executor accepts, then ``DispatchUnknownError`` (receipt lost)."""
        self._lose.append((pred, [times]))

    def duplicate_dispatch(self, pred: Callable[[Assignment], bool], times: int = 1) -> None:
        """Deliver the dispatch to the inner executor twice."""
        self._twice.append((pred, [times]))

    def flaky_reads(self, pred: Callable[[AssignmentKey], bool], times: int = 1) -> None:
        """``get_outcome`` answers ``OutcomeNotReadyError`` although it may be settled."""
        self._flaky.append((pred, [times]))

    async def validate(self, a: Assignment) -> Any:
        return await self.inner.validate(a)

    async def dispatch(self, a: Assignment) -> None:
        self.dispatches.append(a)
        if _take(self._refuse, a):
            await trio.lowlevel.checkpoint()
            raise DispatchRetryableError("injected: refused before acceptance", key=a.key)
        await self.inner.dispatch(a)
        if _take(self._twice, a):
            await self.inner.dispatch(a)
        if _take(self._lose, a):
            raise DispatchUnknownError("injected: dispatch receipt lost", key=a.key)

    async def attach(self, a: Assignment) -> Any:
        return await self.inner.attach(a)

    async def abort(self, a: Assignment) -> Any:
        return await self.inner.abort(a)

    async def get_status(self, key: AssignmentKey) -> Any:
        return await self.inner.get_status(key)

    async def get_outcome(self, key: AssignmentKey) -> Outcome:
        if _take(self._flaky, key):
            await trio.lowlevel.checkpoint()
            raise OutcomeNotReadyError("injected: non-definitive read", key=key)
        outcome: Outcome = await self.inner.get_outcome(key)
        return outcome

    async def cancel(self, key: AssignmentKey) -> None:
        await self.inner.cancel(key)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)
