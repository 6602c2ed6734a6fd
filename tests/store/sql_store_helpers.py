"""Helpers shared by the SQL store tests (``test_sql_stores.py``, ``test_sqlite.py``,
``test_postgres.py``): creating and committing through a writer, and a gate that holds a
group's transaction open."""

from __future__ import annotations

import threading
from typing import Any

import trio

from runx_actors.protocol.commit import CommitRequest, CommitResult, envelope
from runx_actors.protocol.values import NewRun
from runx_actors.testing import builders as b
from runx_actors.testing.builders import Built

SCOPE = "s"
TIMEOUT = 30.0


async def create(w: Any, run_id: str, *inputs: str) -> CommitResult:
    """Create *run_id* with *inputs*, under the command id ``create:<run_id>``."""
    result: CommitResult = await w.create_run(
        NewRun(run_id), [b.agent_input(i) for i in inputs], commit_id=f"create:{run_id}")
    return result


async def commit(w: Any, run_id: str, built: Built, base: int | None = None) -> CommitResult:
    """Commit *built* on *run_id*, at *base* (default: the Run's position now)."""
    rs = w.run_store()
    if base is None:
        base = (await rs.load(run_id)).position
    result: CommitResult = await rs.commit(CommitRequest(base, envelope(run_id, *built)))
    return result


async def runs(store: Any, n: int) -> Any:
    """Open the scope ``SCOPE`` and create ``run-0`` … ``run-<n-1>``, each with ``in-1``."""
    w = await store.open(SCOPE)
    for i in range(n):
        await create(w, f"run-{i}", "in-1")
    return w


class Gate:
    """A before-commit hook that holds a group's transaction open."""

    def __init__(self) -> None:
        self.reached = threading.Event()
        self.release = threading.Event()

    def __call__(self) -> None:
        self.reached.set()
        if not self.release.wait(TIMEOUT):
            raise RuntimeError("gate never released")

    async def wait_reached(self) -> None:
        assert await trio.to_thread.run_sync(self.reached.wait, TIMEOUT)
