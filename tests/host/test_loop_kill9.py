"""kill -9 of the loop host process (loop-host §2.6; issue "loop host": a kill -9 test).

A child process (``loop_kill_child.py``) runs eight loops (thirteen turns) on one SQLite file
and one receipt directory. It is killed with SIGKILL at random points — half the time
at an exact crash point it passes (the host's probe points, every SQLite commit before
it is queued and after it is durable, every durable step of a receipt write), half the
time from outside after a random number of those points, so the kill lands wherever the
process happens to be (inside the SQLite writer thread's fsync, a tool, a seal). After
each kill a fresh process starts with the same specs, until one finishes.

Then: every loop stopped as an undisturbed control run did (same turns, same run ids,
same payloads: no turn lost), the store holds exactly one Run per turn (none doubled),
the loop records are complete and contiguous, the receipt directory holds exactly one
receipt per turn, turn n's ``lineage.previous`` names turn n-1's receipt, the refused
tool never started, ``runx-actors verify -R D`` reports every tree valid, and
``runx-actors check --log`` replays both stores (control and killed) clean through the
reference machine.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from loop_support import EXAMPLE

from runx_actors.host._records import fold_governed, fold_loop, governed_stream, loop_stream
from runx_actors.host.receipts import DEMO_KID, DEMO_SEED_BASE64
from runx_actors.protocol import facts as F
from runx_actors.store.sqlite import open_sqlite_store

pytestmark = pytest.mark.slow

CHILD = Path(__file__).with_name("loop_kill_child.py")
SCOPE = "kill"


class Dirs:
    def __init__(self, root: Path) -> None:
        root.mkdir()
        self.db = root / "runs.sqlite3"
        self.receipts = root / "D"
        self.workspace = root / "workspace"
        self.workspace.mkdir()
        shutil.copy(EXAMPLE / "workspace" / "NOTES.md", self.workspace / "NOTES.md")

    def child(self, die_at: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            [sys.executable, str(CHILD), str(self.db), str(self.receipts),
             str(self.workspace), str(die_at)],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


#: Exact kills in the order a turn passes them, so that a pass over this list after
#: restarts stays within a turn or two: every row of the crash matrix (§2.6) and every
#: durable step of the SQLite and receipt-store writes. "sqlite_after_X" is after the
#: commit is durable and before the caller sees it (outcome unknown to the host).
EXACT_POINTS = (
    "before_creation_commit",        # turn n-1 recorded, turn n not created
    "sqlite_after_CreateJob",        # creation commit applied, outcome unknown
    "after_creation_commit",         # Run created, not driven
    "sqlite_before_CommitJob",       # mid-flight, a commit not yet queued
    "sqlite_after_PutJob",           # a frozen body durable
    "sqlite_after_CommitJob",        # a Run fact durable, outcome unknown
    "before_run_sealing",            # Run ended, not sealing
    "after_run_sealing",             # run_sealing durable, no receipt yet
    "receipt_before_rename",         # temp receipt written and fsynced
    "receipt_after_rename",          # receipt file in place, directory not fsynced
    "receipt_before_index_replace",  # receipt durable, index not updated
    "after_receipt_put",             # receipt durable, turn not recorded
    "sqlite_after_AppendJob",        # a host fact durable, outcome unknown
    "after_turn_recorded",           # turn recorded, next turn not built
)
#: Kills from outside (after a random number of crash-point lines), interleaved.
OUTSIDE_KILLS = 8
SEED = 20261129


def _finish(child: subprocess.Popen[str]) -> list[dict[str, Any]]:
    out, err = child.communicate(timeout=120)
    assert child.returncode == 0, err[-4000:]
    assert "ALL_DONE" in out, out[-2000:]
    return [json.loads(line[len("OUTCOME "):]) for line in out.splitlines()
            if line.startswith("OUTCOME ")]


def _essentials(outcomes: list[dict[str, Any]]) -> list[Any]:
    """Everything an outcome says except receipt ids (a crash changes a Run's fact log,
    so its receipt differs from the control run's)."""
    return [(o["loop_id"], o["status"], o["stop_reason"], o["exit_code"],
             [(t["turn_index"], t["run_id"], t["state"], t["disposition"], t["reason_code"],
               t["payload"]) for t in o["turns"]]) for o in outcomes]


def _schedule() -> list[tuple[str, int]]:
    """``(point, k)`` for an exact kill, ``("", n)`` for a kill from outside after n
    lines (seeded): one pass over EXACT_POINTS at their first occurrence, then a second
    at the first or second, with the outside kills mixed in."""
    rng = random.Random(SEED)
    second = [(point, rng.randint(1, 2)) for point in EXACT_POINTS]
    for _ in range(OUTSIDE_KILLS):
        second.insert(rng.randint(0, len(second)), ("", rng.randint(1, 25)))
    return [(point, 1) for point in EXACT_POINTS] + second


def _kill_until_done(dirs: Dirs) -> tuple[list[dict[str, Any]], list[str], int]:
    """Start, kill, restart… until a start finishes. Returns the final outcomes, the
    points where exact kills landed and the number of kills."""
    kills, landed = 0, []
    for point, k in _schedule():
        child = dirs.child(f"{point}:{k}" if point else "-")
        assert child.stdout is not None
        seen, last, done = 0, "", False
        for line in child.stdout:
            if line.startswith("p "):
                seen, last = seen + 1, line[2:].strip()
            done = done or line.strip() == "ALL_DONE"
            if not point and seen >= k:
                child.kill()  # SIGKILL from outside: wherever the child is now
                break
        child.stdout.close()
        child.wait(timeout=60)
        if child.returncode == -9:
            kills += 1
            if point:
                assert last == point, (last, point)
                landed.append(point)
            continue
        assert child.returncode == 0, child.stderr.read()[-4000:] if child.stderr else ""
        assert done, "the child exited without finishing"
        break  # finished before the chosen point: the work is done
    return _finish(dirs.child("-")), landed, kills


async def _inspect(dirs: Dirs, outcomes: list[dict[str, Any]]) -> None:
    turn_runs = {t["run_id"] for o in outcomes for t in o["turns"]}
    with sqlite3.connect(f"file:{dirs.db}?mode=ro", uri=True) as conn:
        stored_runs = {row[0] for row in conn.execute(
            "SELECT run_id FROM runs WHERE scope = ?", (SCOPE,))}
    assert stored_runs == turn_runs, "a turn's Run was doubled or lost"

    receipt_files = sorted(p.name for p in dirs.receipts.glob("sha256-*.json"))
    assert len(receipt_files) == len(turn_runs), receipt_files
    bodies = {json.loads((dirs.receipts / name).read_bytes())["id"]:
              json.loads((dirs.receipts / name).read_bytes()) for name in receipt_files}

    async with open_sqlite_store(str(dirs.db)) as store:
        reader = await store.reader(SCOPE)
        for outcome in outcomes:
            record = fold_loop(outcome["loop_id"],
                               await reader.read_stream(loop_stream(outcome["loop_id"])))
            assert record is not None
            assert [t.turn_index for t in record.turns] == \
                list(range(1, len(outcome["turns"]) + 1))
            assert all(t.state == "recorded" for t in record.turns)
            previous: str | None = None
            for turn in record.turns:
                receipt = bodies[str(turn.receipt_id)]
                assert receipt["subject"]["ref"]["uri"] == f"hrn_{turn.run_id}_turn"
                lineage_previous = receipt["lineage"].get("previous")
                if previous is None:
                    assert lineage_previous is None
                else:
                    assert lineage_previous["uri"] == f"runx:receipt:{previous}"
                previous = str(turn.receipt_id)
                governed = await reader.read_stream(governed_stream(turn.run_id))
                assert sum(1 for e in governed if e.type.endswith("/run_sealed")) == 1
                gov = fold_governed(turn.run_id, governed)
                assert gov.sealed is not None and gov.sealed["receipt_id"] == turn.receipt_id
                facts = await reader.run_facts(turn.run_id)
                started = [f for f in facts if isinstance(f, F.ToolCallStarted)]
                if turn.payload["requested_tool"] == "fs.write":  # refused: never ran
                    assert started == []
                else:
                    assert len(started) == 1  # one fs.read call, started once (INV-6)
    assert sorted(p.name for p in dirs.workspace.iterdir()) == ["NOTES.md"]
    assert (dirs.workspace / "NOTES.md").read_bytes() == \
        (EXAMPLE / "workspace" / "NOTES.md").read_bytes()


def _runx_actors() -> str:
    script = Path(sys.executable).parent / "runx-actors"
    command = str(script) if script.exists() else shutil.which("runx-actors")
    assert command is not None, "the runx-actors script is not installed"
    return command


def _check_log_cli(db: Path) -> dict[str, Any]:
    """``runx-actors check --log DB --json``: exit 0 and its report."""
    done = subprocess.run([_runx_actors(), "check", "--log", str(db), "--json"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    report: dict[str, Any] = json.loads(done.stdout)
    return report


def _verify_cli(receipt_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RUNX_RECEIPT_SIGN_KID": DEMO_KID,
           "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": DEMO_SEED_BASE64,
           "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted"}
    return subprocess.run([_runx_actors(), "verify", "-R", str(receipt_dir), "--json"],
                          capture_output=True, text=True, env=env, timeout=120, check=False)


async def test_loop_host_kill9_restart_until_done(tmp_path: Path) -> None:
    control = Dirs(tmp_path / "control")
    expected = _finish(control.child(0))
    assert [o["status"] for o in expected] == ["stopped"] * 8
    assert sum(len(o["turns"]) for o in expected) == 13

    dirs = Dirs(tmp_path / "killed")
    outcomes, landed, kills = _kill_until_done(dirs)
    assert kills >= 20, (kills, landed)
    assert landed[:len(EXACT_POINTS)] == list(EXACT_POINTS)  # every window was hit

    assert _essentials(outcomes) == _essentials(expected)  # no turn lost, none doubled
    await _inspect(dirs, outcomes)

    # a restart after the end changes nothing
    again = _finish(dirs.child(0))
    assert again == outcomes

    report = _verify_cli(dirs.receipts)
    assert report.returncode == 0, report.stdout + report.stderr
    assert json.loads(report.stdout)["valid"] is True

    for db in (control.db, dirs.db):  # trace validation against the spec (issue 13 item 6)
        trace = _check_log_cli(db)
        assert trace["ok"] is True and trace["runs"] == 13, trace
