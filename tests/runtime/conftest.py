"""Fixtures of the runtime tests: every store-backed test runs over both stores.

``store`` yields an open SessionStore (the memory store, then the SQLite store);
``autojump_clock`` overrides pytest-trio's fixture of the same name so that every test
that asks for it runs on a ``trio.testing.MockClock``.

The SQLite store answers from its writer thread. While the trio loop waits for that
thread every task is blocked, and a plain ``MockClock`` would jump straight to the next
deadline (the ``settle_timeout`` of a shielded section) and fire it, however long the real
fsync takes on a loaded machine. So over SQLite the clock is a :class:`StoreAwareClock`: it
jumps only after the loop has been idle for a short while *and* the store has no I/O in
flight (``SqliteStore.io_in_flight()``); virtual time still advances only by jumps, never
with the wall clock.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import trio.testing
from runtime_harness import SQLITE_AUTOJUMP_THRESHOLD, StoreAwareClock

from runx_actors.store.memory import MemoryStore


@pytest.fixture(params=["memory", "sqlite"])
def store_kind(request: pytest.FixtureRequest) -> str:
    if request.param == "sqlite":
        pytest.importorskip("runx_actors.store.sqlite")
    return str(request.param)


@pytest.fixture
def autojump_clock(store_kind: str) -> trio.testing.MockClock:
    if store_kind == "memory":
        return trio.testing.MockClock(autojump_threshold=0)
    return StoreAwareClock(SQLITE_AUTOJUMP_THRESHOLD).clock


@pytest.fixture
def store_factory(store_kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> Any:
    """``async with store_factory() as store``: a fresh store of the parametrized kind.

    Calling it again over SQLite opens the same database file again (a process
    restart); over memory it returns the same MemoryStore (the memory store has no
    file to reopen).
    """
    memory = MemoryStore()

    def factory() -> Any:
        if store_kind == "memory":
            return _Same(memory)
        clock = (request.getfixturevalue("autojump_clock")
                 if "autojump_clock" in request.fixturenames else None)
        return _sqlite(tmp_path / "runs.sqlite", clock)

    return factory


@contextlib.asynccontextmanager
async def _sqlite(path: Path, clock: object) -> AsyncIterator[Any]:
    """Open the SQLite store at *path*, registered with *clock* while open."""
    from runx_actors.store.sqlite import open_sqlite_store

    async with open_sqlite_store(path) as opened:
        aware = getattr(clock, "store_aware", None)
        probes = aware.probes if isinstance(aware, StoreAwareClock) else []
        probes.append(opened.io_in_flight)
        try:
            yield opened
        finally:
            probes.remove(opened.io_in_flight)


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
