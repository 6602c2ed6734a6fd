"""The shipped store state machine (runx_actors.testing.machines) passes the real stores
and catches broken ones: no fencing, a blind replay lookup, a batch whose later requests
do not see the earlier ones (RUN-CMT-9)."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from runx_actors.protocol.commit import BatchResult, evaluate_commit
from runx_actors.protocol.errors import CommandRefusedError, ValidationError
from runx_actors.store._scope import ScopeLog, _View
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing.machines import run_store_machine


class _Unfenced(ScopeLog):
    def check_epoch(self, epoch: int) -> None:
        return None


class _BlindIndex(dict[str, Any]):
    def get(self, key: str, default: Any = None) -> Any:
        return default


class _Redeciding(ScopeLog):
    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.index = _BlindIndex()


class _BatchWithoutOverlay(ScopeLog):
    """A batch whose requests are all evaluated on the scope as it was before the batch
    (the earlier requests' facts and ids invisible to the later ones), then appended."""

    def commit_batch(self, epoch: int, projection: Any, requests: Any) -> BatchResult:
        self.check_epoch(epoch)
        view = _View(self, projection)
        error, count = None, 0
        for request in requests:  # every request judged before any is appended
            try:
                evaluate_commit(view, request, scope=self.scope)
            except (CommandRefusedError, ValidationError) as exc:
                error = exc
                break
            count += 1
        results = []
        for request in requests[:count]:
            try:
                results.append(self.commit(epoch, projection, request))
            except (CommandRefusedError, ValidationError) as exc:
                return BatchResult(results, exc)
        return BatchResult(results, error)


def _memory(log_class: type[ScopeLog]) -> Any:
    class Broken(MemoryStore):
        pass

    Broken.log_class = log_class  # type: ignore[attr-defined]

    @asynccontextmanager
    async def cm() -> AsyncIterator[MemoryStore]:
        yield Broken()

    return cm


def test_sqlite_store_agrees_with_the_reference(tmp_path: Path) -> None:
    n = itertools.count()
    run_store_machine(lambda: open_sqlite_store(str(tmp_path / f"s{next(n)}.sqlite3")),
                      max_examples=15)


@pytest.mark.parametrize(("log_class", "shows"), [
    (_Unfenced, "OwnershipLostError"),  # the reference refuses the fenced writer
    (_Redeciding, "already_applied"),  # the reference answers a replay
    (_BatchWithoutOverlay, "batch ["),  # RUN-CMT-9: a later request sees the earlier ones
])
def test_broken_stores_are_caught(log_class: type[ScopeLog], shows: str) -> None:
    with pytest.raises(AssertionError) as info:
        run_store_machine(_memory(log_class), max_examples=200, stateful_step_count=10)
    message = str(info.value)
    assert "your store (actual) vs the reference (expected)" in message
    assert "expected:" in message and "actual:" in message and shows in message
