"""Child process of test_loop_kill9: runs the same loops on one SQLite file and one
receipt directory until every loop has stopped (loop-host §2.6).

Usage: python loop_kill_child.py DB RECEIPT_DIR WORKSPACE DIE_AT

Every crash point it passes prints one line ``p <point>`` (flushed) on stdout. The
points are the host's own crash-point probe (§2.6: before/after the creation commit,
``run_sealing``, the receipt ``put`` and ``turn_recorded``), every commit handed to the
SQLite writer (before it is queued, and after it is durable but before the caller sees
it), and the receipt store's file operations (the temp file's fsync, its rename into
place, the directory fsync, the index replace). DIE_AT is ``<point>:<k>``: at the k-th
time the child passes ``<point>`` it sends itself SIGKILL — no ``finally``, no shielded
section, no atexit runs; ``-`` never. The parent may also kill it from outside after
reading some lines.

When every loop has stopped it prints ``OUTCOME <json>`` per loop and ``ALL_DONE``.
The wall clock is used (not a pinned one), so a re-seal after a crash only yields the
same receipt if the host reuses the stored ``run_sealing.created_at``.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio
from loop_support import EXAMPLE, REFUSAL, SUCCESS

from runx_actors.host._governed import HostConfig
from runx_actors.host.loop import LoopHost, LoopSpec
from runx_actors.host.package import load_package
from runx_actors.host.receipts import ReceiptStore, Signer, Verifier
from runx_actors.host.receipts import _store as receipt_store_module
from runx_actors.store import sqlite as sqlite_module
from runx_actors.store.sqlite import open_sqlite_store

SCOPE = "kill"

#: (loop_id, fixed inputs, max_turns), run in this order on every start.
LOOPS: tuple[tuple[str, dict[str, str], int], ...] = (
    ("kill-success-a", SUCCESS, 3),
    ("kill-refusal", REFUSAL, 3),
    ("kill-success-b", {**SUCCESS, "objective": "A second bounded change."}, 3),
    ("kill-single", {**SUCCESS, "objective": "One turn is the budget."}, 1),
    ("kill-success-c", {**SUCCESS, "objective": "A third bounded change."}, 2),
    ("kill-success-d", {**SUCCESS, "objective": "A fourth bounded change."}, 3),
    ("kill-refusal-b", {**REFUSAL, "objective": "Mutate again."}, 3),
    ("kill-success-e", {**SUCCESS, "objective": "A fifth bounded change."}, 3),
)


class CrashPoints:
    """Counts crash points; prints each; SIGKILLs the process at the chosen one."""

    def __init__(self, die_at: str) -> None:
        name, _, k = die_at.partition(":")
        self.die_point, self.die_k = name, int(k or 0)
        self.seen = 0

    def hit(self, point: str) -> None:
        sys.stdout.write(f"p {point}\n")
        sys.stdout.flush()
        if point == self.die_point:
            self.seen += 1
            if self.seen == self.die_k:
                os.kill(os.getpid(), signal.SIGKILL)

    def probe(self, point: str, info: Any) -> None:
        del info
        self.hit(point)


def install(points: CrashPoints) -> None:
    """Wrap the SQLite writer's submit and the receipt store's file operations."""
    submit: Callable[..., Awaitable[Any]] = sqlite_module.SqliteStore._submit

    async def counted_submit(self: Any, job: Any) -> Any:
        name = type(job).__name__
        points.hit(f"sqlite_before_{name}")
        result = await submit(self, job)
        points.hit(f"sqlite_after_{name}")
        return result

    sqlite_module.SqliteStore._submit = counted_submit  # type: ignore[method-assign]

    class CountingOs:
        """The receipt store's ``os``, with crash points around its durable steps."""

        def __getattr__(self, name: str) -> Any:
            return getattr(os, name)

        @staticmethod
        def fsync(fd: int) -> None:
            points.hit("receipt_before_fsync")
            os.fsync(fd)

        @staticmethod
        def rename(src: Any, dst: Any) -> None:
            points.hit("receipt_before_rename")
            os.rename(src, dst)
            points.hit("receipt_after_rename")

        @staticmethod
        def replace(src: Any, dst: Any) -> None:
            points.hit("receipt_before_index_replace")
            os.replace(src, dst)

    receipt_store_module.os = CountingOs()  # type: ignore[assignment]


async def main(db: str, receipt_dir: str, workspace: str, die_at: str) -> None:
    points = CrashPoints(die_at)
    install(points)
    signer = Signer.demo()
    receipts = ReceiptStore(Path(receipt_dir), verifier=Verifier(keyring=signer.keyring()))
    config = HostConfig(receipts=receipts, signer=signer, workspace=Path(workspace),
                        probe=points.probe)
    package = load_package(EXAMPLE)
    outcomes = []
    async with open_sqlite_store(db) as store:
        host = LoopHost(store, config)
        for loop_id, fixed, max_turns in LOOPS:
            spec = LoopSpec(loop_id=loop_id, package=package, runner="turn",
                            max_turns=max_turns, fixed_inputs=fixed, scope=SCOPE)
            outcome = await host.run(spec)
            outcomes.append({
                "loop_id": outcome.loop_id, "status": outcome.status,
                "stop_reason": outcome.stop_reason, "exit_code": outcome.exit_code,
                "turns": [t.to_json() for t in outcome.turns]})
    for outcome_json in outcomes:
        print("OUTCOME " + json.dumps(outcome_json, sort_keys=True))
    print("ALL_DONE", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4])
