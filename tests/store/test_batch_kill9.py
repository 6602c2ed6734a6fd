"""kill -9 test of batch commits on SQLite (RUN-CMT-9): a child commits batches of 2–3
commands in a loop and is SIGKILLed at random moments, about 20 times. After each kill:
every batch the child meant to commit is durable entirely or not at all, ``store check``
finds no damage and the log replays clean through the reference machine
(``check --log``)."""

from __future__ import annotations

import contextlib
import json
import os
import pathlib
import random
import signal
import sqlite3
import subprocess
import sys
import time

from runx_actors.check._tracecheck import check_log
from runx_actors.store._check import check_store

CHILD = pathlib.Path(__file__).with_name("batch_kill_child.py")
KILLS = 20


def _durable_ids(db: pathlib.Path) -> set[str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return {row[0] for row in conn.execute("SELECT commit_id FROM commits")}
    finally:
        conn.close()


def _torn(db: pathlib.Path, intents: pathlib.Path) -> list[tuple[list[str], list[bool]]]:
    """The intended batches durable in part only."""
    durable = _durable_ids(db)
    torn = []
    for line in intents.read_text().splitlines():
        if not line.strip():
            continue
        ids = json.loads(line)
        present = [i in durable for i in ids]
        if any(present) and not all(present):
            torn.append((ids, present))
    return torn


def test_batch_kill9_all_or_nothing(tmp_path: pathlib.Path) -> None:
    """RUN-CMT-9: ~20 SIGKILLs at random moments never leave a batch durable in part."""
    db, intents = tmp_path / "batch.sqlite3", tmp_path / "intents.jsonl"
    intents.touch()
    rng = random.Random(20261202)
    kills = batches = 0
    started = time.monotonic()
    server = subprocess.Popen([sys.executable, str(CHILD), str(db), str(intents)],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    assert server.stdin is not None and server.stdout is not None
    pid: int | None = None
    try:
        assert server.stdout.readline().strip() == "ready", server.stderr
        for _ in range(KILLS):
            server.stdin.write("go\n")
            server.stdin.flush()
            limit, seen, pid = rng.randint(1, 12), 0, None
            while seen < limit or pid is None:
                line = server.stdout.readline().strip()
                assert line, "the writer died on its own"
                if line == "c":
                    seen += 1
                elif line.startswith("pid "):
                    pid = int(line[4:])
            time.sleep(rng.uniform(0, 0.02))  # somewhere in the next batch (~10-20 ms)
            os.kill(pid, signal.SIGKILL)  # no cleanup, no finally
            server.stdin.write(f"wait {pid}\n")
            server.stdin.flush()
            while not (line := server.stdout.readline().strip()).startswith("exit "):
                assert line, "the fork server died"
                seen += line == "c"
            status, pid = int(line[5:]), None
            assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
            kills += 1
            batches += seen
            torn = _torn(db, intents)
            assert torn == [], f"batches durable in part (ids, durable?): {torn}"
            report = check_store(str(db))
            assert report.ok, report.problems
            trace = check_log(db)
            assert trace.ok, [v.show() for v in trace.violations]
        server.stdin.write("quit\n")
        server.stdin.flush()
        server.wait(timeout=30)
    finally:
        if pid is not None:  # a writer left running by a failed assertion
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if server.poll() is None:
            server.kill()
            server.wait()
    intended = len(intents.read_text().splitlines())
    durable = _durable_ids(db)
    print(f"kills={kills} batches answered={batches} intended={intended} "
          f"commits={len(durable)} seconds={time.monotonic() - started:.1f}")
    assert kills == KILLS and batches >= KILLS
    assert trace.runs >= 1 and trace.commits >= batches * 2
