"""A SQLite store another connection keeps locked (``BEGIN EXCLUSIVE`` in a ``sqlite3``
shell, another process writing) is StoreBusyError, a StoreOpenError, after the store's
``busy_timeout`` — never a raw ``sqlite3.OperationalError`` (RUN-STO-1; the eighth
session's break round: ``runs approve`` on a locked store was "internal error … this is
a bug", exit 70)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from functools import partial
from pathlib import Path

import pytest
from click.testing import CliRunner
from runs_scenario import build_store

from runx_actors import RunxError, StoreBusyError, StoreOpenError
from runx_actors.cli import main
from runx_actors.store import sqlite as sqlite_store
from runx_actors.store.sqlite import open_sqlite_store

BUSY = 0.05  # seconds: the lock is held for the whole test, any bound shows it


def _lock(path: Path, *, readers_too: bool = False) -> sqlite3.Connection:
    """Hold the write lock (WAL readers still read), or with *readers_too* every lock
    (``locking_mode=EXCLUSIVE``: no other connection may even read)."""
    conn = sqlite3.connect(str(path), isolation_level=None)
    if readers_too:
        conn.execute("PRAGMA locking_mode = EXCLUSIVE")
    conn.execute("BEGIN EXCLUSIVE")
    if readers_too:
        conn.execute("SELECT count(*) FROM scopes").fetchall()
    return conn


def _assert_busy(error: BaseException, path: Path) -> None:
    assert isinstance(error, StoreBusyError) and isinstance(error, StoreOpenError)
    assert isinstance(error, RunxError) and getattr(error, "reason", None) == "busy"
    assert getattr(error, "path", None) == str(path) and error.hint
    assert getattr(error, "timeout", None) == BUSY
    assert "locked" in str(error) and isinstance(error.__cause__, sqlite3.OperationalError)


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Path]:
    yield build_store(tmp_path / "runs.sqlite3")


async def test_a_write_to_a_locked_store_is_store_busy(store: Path) -> None:
    lock = _lock(store)
    try:
        async with open_sqlite_store(store, busy_timeout=BUSY) as opened:
            with pytest.raises(StoreBusyError) as refused:
                await opened.open("app")  # an epoch bump: a write
        _assert_busy(refused.value, store)
    finally:
        lock.close()
    async with open_sqlite_store(store, busy_timeout=BUSY) as opened:  # free again
        await opened.open("app")


async def test_opening_a_store_no_one_may_read_is_store_busy(store: Path) -> None:
    lock = _lock(store, readers_too=True)
    try:
        with pytest.raises(StoreBusyError) as refused:
            async with open_sqlite_store(store, busy_timeout=BUSY):
                pass  # pragma: no cover - refused before the block
        _assert_busy(refused.value, store)
    finally:
        lock.close()


@pytest.mark.parametrize("args", [
    ["runs", "approve", "pending"], ["runs", "cancel", "pending"],
    ["runs", "reject", "pending"]])
def test_the_cli_reports_a_locked_store_with_a_hint(store: Path, args: list[str],
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sqlite_store, "open_sqlite_store",
                        partial(open_sqlite_store, busy_timeout=BUSY))
    lock = _lock(store)
    try:
        result = CliRunner().invoke(main, [*args, "--store", str(store), "--json"],
                                    env={"RUNX_ACTORS_STORE": ""}, catch_exceptions=False)
    finally:
        lock.close()
    assert result.exit_code == 1, result.output
    first, hint = result.stderr.splitlines()
    assert first.startswith(f"runx-actors: {' '.join(args[:2])}: the store ")
    assert "locked by another connection" in first and hint.startswith("hint: another process")
    doc = json.loads(result.stdout)
    assert doc["error"] == "StoreBusyError" and doc["reason"] == "busy"
    assert doc["command"] == " ".join(args[:2]) and doc["exit_code"] == 1
