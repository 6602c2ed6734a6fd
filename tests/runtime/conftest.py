"""Fixtures of the runtime tests: every store-backed test runs over both stores.

``store`` yields an open SessionStore (the memory store, then the SQLite store);
``autojump_clock`` overrides pytest-trio's fixture of the same name so that every test
that asks for it runs on a ``trio.testing.MockClock``.

The SQLite store answers from its writer thread. While the trio loop waits for that
thread every task is blocked, and a clock with ``autojump_threshold=0`` would jump
straight to the next deadline (the ``settle_timeout`` of a shielded section) and fire it.
So over SQLite the clock jumps only after the loop has been idle for a short while;
virtual time still advances only by jumps, never with the wall clock.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio.testing

from runx_actors.store.memory import MemoryStore

#: Real seconds of idleness before the mock clock jumps, over SQLite (see module doc).
SQLITE_AUTOJUMP_THRESHOLD = 0.25


@pytest.fixture(params=["memory", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        pytest.importorskip("runx_actors.store.sqlite")
    return str(request.param)


@pytest.fixture
def autojump_clock(store_kind: str) -> trio.testing.MockClock:
    threshold = 0.0 if store_kind == "memory" else SQLITE_AUTOJUMP_THRESHOLD
    return trio.testing.MockClock(autojump_threshold=threshold)


@pytest.fixture
def store_factory(store_kind: str, tmp_path: Path) -> Any:
    """``async with store_factory() as store``: a fresh store of the parametrized kind.

    Calling it again over SQLite opens the same database file again (a process
    restart); over memory it returns the same MemoryStore (the memory store has no
    file to reopen).
    """
    memory = MemoryStore()

    def factory() -> Any:
        if store_kind == "memory":
            return _Same(memory)
        from runx_actors.store.sqlite import open_sqlite_store

        return open_sqlite_store(tmp_path / "runs.sqlite")

    return factory


class _Same:
    def __init__(self, store: Any) -> None:
        self.store = store

    async def __aenter__(self) -> Any:
        return self.store

    async def __aexit__(self, *exc: object) -> None:
        return None


@pytest.fixture
async def store(store_factory: Any) -> AsyncIterator[Any]:
    async with store_factory() as opened:
        yield opened
