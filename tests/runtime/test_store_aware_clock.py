"""The SQLite runtime tests' clock holds virtual time still while the store does real I/O.

Over SQLite the trio loop is idle while the writer thread fsyncs; a plain ``MockClock``
jumps to the next deadline then, so a slow disk (a loaded machine) fires deadlines that
virtual time never reached. ``StoreAwareClock`` (``tests/runtime/conftest.py``) holds the
jump while ``SqliteStore.io_in_flight()`` is non-zero. These tests slow the writer down
on purpose (a real sleep in its thread, before ``COMMIT``) and check both sides.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import trio
import trio.testing
from runtime_harness import SQLITE_AUTOJUMP_THRESHOLD, StoreAwareClock

from runx_actors.protocol.values import NewRun
from runx_actors.store.sqlite import open_sqlite_store

#: Real seconds the writer thread sleeps before each COMMIT: many autojump thresholds.
SLOW_COMMIT = 0.5


async def _slow_create(path: Path, register: bool) -> None:
    async with open_sqlite_store(path) as store:
        writer = await store.open("s")
        store.set_before_commit_hook(lambda: time.sleep(SLOW_COMMIT))
        aware = getattr(trio.lowlevel.current_clock(), "store_aware", None)
        if register and aware is not None:
            aware.probes.append(store.io_in_flight)
        with trio.fail_after(1):  # one virtual second: the commit needs none
            await writer.create_run(NewRun("r", ""), (), commit_id="create:r")
        assert store.io_in_flight() == 0
        await writer.aclose()


def test_store_aware_clock_does_not_jump_during_a_slow_commit(tmp_path: Path) -> None:
    clock = StoreAwareClock(SQLITE_AUTOJUMP_THRESHOLD).clock
    trio.run(_slow_create, tmp_path / "a.sqlite", True, clock=clock)
    assert clock.current_time() < 1


def test_a_plain_mock_clock_fires_the_deadline_during_a_slow_commit(tmp_path: Path) -> None:
    """The failure the store-aware clock exists for (and the proof its test can fail)."""
    clock = trio.testing.MockClock(autojump_threshold=SQLITE_AUTOJUMP_THRESHOLD)
    with pytest.raises(trio.TooSlowError):
        trio.run(_slow_create, tmp_path / "b.sqlite", False, clock=clock)
