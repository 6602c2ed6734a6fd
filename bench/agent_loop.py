"""Agent-loop benchmark: iterations/s of real Run actors, beside raw peers.

One *iteration* is one model call plus one tool call, with instant executors (a model
that answers from memory, an async tool that returns at once), so the figure measures
runx-actors itself: commits, folds, the actor, the Watcher and the executor plumbing.

Each loop row also gives the process's CPU time per iteration (every thread, the SQLite
writer included): on a shared machine it moves far less with the load than the
wall-clock rate, so it is the figure to compare two trees by.

Printed in one invocation, so the figures are comparable:

* memory store and SQLite store, 1 run and 100 concurrent runs;
* raw trio memory-channel round trips (the floor of any actor hand-off);
* raw SQLite commits (WAL, synchronous=FULL), one row per transaction;
* RSS per waiting Run, measured over 10,000 Runs whose drive (started with
  ``start_drive``: no task of the bench's per Run) is parked on an Outcome: the parked
  actor (no task), its Watcher registration, the store's projection entry and the
  executor's record and worker for the in-flight call; on the SQLite store by default
  (``--idle-store memory``: the memory store, whose in-memory log is its durable copy
  and so counts too);
* the restart: seconds from opening a runtime over 10,000 active Runs (each with a
  started tool call the executor still runs) until every one is resumed
  (``--resume N``; 0 skips it).

Usage: ``python bench/agent_loop.py [--iterations N] [--runs N] [--idle N]
[--idle-store sqlite|memory] [--resume N] [--resume-rounds K]
[--resume-gc-freeze on|off|alternate] [--resume-process same|fresh|both] [--json]``.
The 100,000-Run idle figure: ``python bench/agent_loop.py --idle-only 100000 --idle-store
sqlite [--objects]`` (set-up ~6 ms of CPU per Run: Runs are created 500 at a time, so
their commits share transactions, and drives are started 250 at a time, polling only
that batch). ``--objects`` adds bytes per Run by owner, read from the objects themselves
(``sys.getsizeof`` over what each owner alone reaches; no tracemalloc, so it is cheap
enough at 100,000 Runs).
``--breakdown`` adds, for the idle measurement, live trio tasks per Run and a tracemalloc
diff (bytes per Run by owner) taken at the same moment as the RSS reading, once every task
is blocked (so reads still in flight when the last key registered are not counted);
tracemalloc's own bookkeeping inflates that run's RSS, so read RSS from a run without it.
Targets live in bench/RESULTS.md; this script never asserts.
"""

from __future__ import annotations

import argparse
import contextlib
import gc
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
import tracemalloc
from collections import Counter
from collections.abc import Callable
from typing import Any

import trio
import trio.testing
from rich.console import Console
from rich.table import Table

from runx_actors.effect import (
    AssignmentKey,
    Attachment,
    AttachmentState,
    ExecutionRef,
    ExecutionStatus,
)
from runx_actors.executors import open_local_executor, python_tool
from runx_actors.executors._streams import SettlementLog, SettlementSubscription
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.errors import ExecutionNotFoundError, OutcomeNotReadyError
from runx_actors.protocol.plan import Prompt
from runx_actors.protocol.values import (
    ModelRequest,
    ModelResult,
    ModelToolCall,
    RunStatus,
    Usage,
)
from runx_actors.runtime import LoopDisposition, Settings, open_runtime
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store  # not in the timed part: see there

#: Objects :func:`_deep_size` never enters (shared by every Run, or another Run's).
_NO_ENTER = (type, type(sys), type(len), type(lambda: 0), type((lambda: 0).__code__),
             trio.lowlevel.Task, trio.Nursery, trio._core._run.CancelStatus)


class CountingModel:
    """Calls the tool ``iterations`` times per Run, then answers with text."""

    def __init__(self, iterations: int) -> None:
        self.iterations = iterations
        self.calls: dict[str, int] = {}

    async def complete(self, request: ModelRequest) -> ModelResult:
        run = json.loads(request.body)["run"]
        n = self.calls.get(run, 0)
        self.calls[run] = n + 1
        await trio.lowlevel.checkpoint()
        if n < self.iterations:
            return ModelResult(tool_calls=(ModelToolCall(id=f"c{n}", name="noop",
                                                         arguments="{}"),),
                               usage=Usage(1, 1))
        return ModelResult(content="done", usage=Usage(1, 1))


class BodyBuilder:
    """A constant-size prompt (no transcript), so the loop itself is what is measured.

    It reads nothing from the store, so it opts in to fused commits (RUN-LOP-11)."""

    reads_pending = True

    def __init__(self, tool: Any) -> None:
        self.tool = tool

    async def build(self, hint: Any) -> Prompt:
        request = ModelRequest("bench", (self.tool.definition,),
                               canonical_json_text({"run": hint.run_id}))
        return Prompt(request=request, input_ids=tuple(i.id for i in hint.inputs),
                      tools=(self.tool.spec(),))


async def _noop() -> dict[str, bool]:
    return {"ok": True}


@contextlib.asynccontextmanager
async def _store(kind: str, path: str) -> Any:
    if kind == "memory":
        yield MemoryStore()
    else:
        async with open_sqlite_store(path) as store:
            yield store


async def loop_rate(kind: str, runs: int, iterations: int, workdir: str, *,
                    concurrent: bool = True, tag: str = "") -> dict[str, Any]:
    """Drive *runs* Runs, *iterations* each, all at once (or one after the other with
    ``concurrent=False``); return the measured figures. *tag* names the store file."""
    tool = python_tool(_noop, ref="noop")
    model = CountingModel(iterations)
    path = os.path.join(workdir, f"loop-{kind}-{runs}{tag}.sqlite3")
    async with _store(kind, path) as store, \
            open_local_executor(tools=[tool], models={"bench": model}) as ex, \
            open_runtime(store, ex, scope=f"bench-{runs}", builder=BodyBuilder(tool),
                         settings=Settings(max_model_steps=iterations + 1)) as rt:
        for i in range(runs):
            await rt.create_run(f"run-{i}", ["go"])
        finished = 0

        async def one(run_id: str) -> None:
            nonlocal finished
            result = await rt.drive(run_id)
            # FINISHED counts only a completed Run: a Run ended by a bound (RUN-ACT-7's
            # model_step_limit) did fewer iterations than the rate divides by
            if (result.disposition is LoopDisposition.FINISHED and result.result is not None
                    and result.result.status is RunStatus.COMPLETED):
                finished += 1

        start = time.perf_counter()
        cpu_start = time.process_time()
        if concurrent:
            async with trio.open_nursery() as nursery:
                for i in range(runs):
                    nursery.start_soon(one, f"run-{i}")
        else:
            for i in range(runs):
                await one(f"run-{i}")
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
    total = runs * iterations
    if finished != runs:
        raise RuntimeError(f"{runs - finished} of {runs} Runs did not complete: the rate "
                           "would count iterations that did not happen")
    # cpu: this process's CPU time over every thread (the SQLite writer included); on a
    # shared machine it moves far less with the load than the wall-clock rate does
    return {"store": kind, "runs": runs, "iterations": total, "seconds": elapsed,
            "iterations_per_s": total / elapsed, "finished": finished,
            "cpu_seconds": cpu, "cpu_us_per_iteration": cpu / total * 1e6}


async def channel_round_trips(n: int) -> float:
    """Ping-pong round trips per second between two tasks over trio memory channels."""
    ping_s, ping_r = trio.open_memory_channel[int](0)
    pong_s, pong_r = trio.open_memory_channel[int](0)

    async def echo() -> None:
        async for x in ping_r:
            await pong_s.send(x)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(echo)
        start = time.perf_counter()
        for i in range(n):
            await ping_s.send(i)
            await pong_r.receive()
        elapsed = time.perf_counter() - start
        await ping_s.aclose()
    return n / elapsed


def sqlite_commits(path: str, n: int) -> float:
    """Raw single-row INSERT + COMMIT per second (WAL, synchronous=FULL)."""
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, data BLOB)")
    start = time.perf_counter()
    for _ in range(n):
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO t (data) VALUES (?)", (b"x" * 200,))
        conn.execute("COMMIT")
    elapsed = time.perf_counter() - start
    conn.close()
    return n / elapsed


def _rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _task_counts() -> Counter[str]:
    """Live trio tasks by name (up to the first ``:`` or space), the root task's tree."""
    counts: Counter[str] = Counter()
    todo = [trio.lowlevel.current_root_task()]
    while todo:
        task = todo.pop()
        counts[task.name.split(":")[0].split(" ")[0]] += 1
        todo.extend(t for nursery in task.child_nurseries for t in nursery.child_tasks)
    return counts


#: Owner groups of the tracemalloc breakdown: (group, path fragments of the first frame
#: of ours found walking from the allocation outwards).
_OWNERS = (
    ("runtime (actor, mailbox, handle, loop)", ("/runx_actors/runtime/",)),
    ("effect (Watcher)", ("/runx_actors/effect/",)),
    ("executor (LocalExecutor, attempt, records)", ("/runx_actors/executors/",)),
    ("log growth (store + protocol)", ("/runx_actors/store/", "/runx_actors/protocol/")),
    ("bench harness (model, tool, drive tasks)", ("/bench/agent_loop.py",)),
)


def _breakdown(before: tracemalloc.Snapshot, after: tracemalloc.Snapshot,
               n: int) -> dict[str, Any]:
    """Bytes per Run by owner: the innermost frame of runx_actors (or of this script)
    owns an allocation; ``of which trio`` is the part allocated inside trio itself."""
    skip = [tracemalloc.Filter(False, tracemalloc.__file__)]
    owners: Counter[str] = Counter()
    trio_part: Counter[str] = Counter()
    lines: Counter[str] = Counter()
    for stat in after.filter_traces(skip).compare_to(before.filter_traces(skip), "traceback"):
        frames = list(stat.traceback)  # oldest first
        owner, where = "trio scheduler / other (no frame of ours)", ""
        for frame in reversed(frames):
            group = next((g for g, parts in _OWNERS
                          if any(p in frame.filename for p in parts)), None)
            if group is not None:
                owner = group
                where = f"{frame.filename.rsplit('/', 2)[-2:][-1]}:{frame.lineno}"
                break
        owners[owner] += stat.size_diff
        if "/trio/" in frames[-1].filename:
            trio_part[owner] += stat.size_diff
        if where:
            lines[where] += stat.size_diff
    return {
        "traced_bytes_per_run": round(sum(owners.values()) / n),
        "by_owner": {k: {"bytes_per_run": round(v / n),
                         "of_which_in_trio": round(trio_part[k] / n)}
                     for k, v in owners.most_common()},
        "top_lines": {k: round(v / n) for k, v in lines.most_common(20)},
    }


def _deep_size(root: Any, seen: set[int], stop: set[int]) -> int:
    """Bytes of *root* and what it alone reaches: ``sys.getsizeof`` over
    ``gc.get_referents``, not entering objects already *seen* (shared ones are counted
    once, by the first Run that reaches them), objects in *stop* (another owner's roots
    and the shared services), types, modules, functions, code, trio tasks, nurseries and
    cancel statuses (they link every Run's tree to every other's)."""
    total = 0
    todo = [root]
    while todo:
        obj = todo.pop()
        oid = id(obj)
        if oid in seen or (oid in stop and obj is not root):
            continue
        seen.add(oid)
        if isinstance(obj, _NO_ENTER) and obj is not root:
            continue
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def _object_sizes(rt: Any, executor: Any, n: int) -> dict[str, Any]:
    """Bytes per parked Run by owner, from the objects themselves (no tracemalloc): the
    actor (RunActor, mailbox, drive, request, latch, in-flight dict), its Watcher key
    state and registration, the store writer's projection entry (snapshot and state),
    the executor's record and its worker task (coroutine frames of the worker, the
    attempt and the tool), plus each registry's dict slot. Shared objects count once."""
    runtime = rt.runtime
    watcher = runtime.watcher
    projection = rt.writer.projection()
    actors = runtime._actors
    keys = watcher._keys
    records = executor._records
    tasks = {}
    for task in executor._nursery.child_tasks:
        frame_locals = gc.get_referents(task.coro)
        record = next((x for x in frame_locals if type(x).__name__ == "Record"), None)
        if record is not None:
            tasks[id(record)] = task
    shared = {id(x) for x in (rt, runtime, watcher, executor, rt.writer, projection,
                              actors, keys, records, executor._nursery, runtime._nursery)}
    for owner in (rt, runtime, watcher, executor, rt.writer):
        shared |= {id(getattr(owner, a, None)) for a in
                   (*getattr(owner, "__dict__", ()), *getattr(type(owner), "__slots__", ()))}
    stop = set(shared) | {id(a) for a in actors.values()} | {id(s) for s in keys.values()}
    stop |= {id(s) for s in projection.values()} | {id(r) for r in records.values()}
    stop |= {id(t) for t in tasks.values()}
    seen: set[int] = set()
    sizes: Counter[str] = Counter()
    for actor in actors.values():
        sizes["actor (RunActor, mailbox, drive, request, in-flight)"] += _deep_size(
            actor, seen, stop)
    for state in keys.values():
        sizes["Watcher (key state, registration)"] += _deep_size(state, seen,
                                                                 stop)
    for snapshot in projection.values():
        sizes["store projection (Snapshot, MachineState)"] += _deep_size(
            snapshot, seen, stop)
    for record in records.values():
        sizes["executor record"] += _deep_size(record, seen, stop)
        task = tasks.get(id(record))
        if task is not None:
            sizes["executor worker task (coroutines, frames)"] += _deep_size(
                task, seen, stop)
    for name, table in (("actors", actors), ("watcher keys", keys),
                        ("projection", projection), ("executor records", records)):
        sizes[f"dict slot: {name}"] += sys.getsizeof(table)
    return {"counts": {"actors": len(actors), "watcher_keys": len(keys),
                       "projection": len(projection), "records": len(records),
                       "worker_tasks": len(tasks)},
            "bytes_per_run": {k: round(v / n) for k, v in sizes.items()},
            "total_bytes_per_run": round(sum(sizes.values()) / n)}


async def _create_runs(rt: Any, n: int, batch: int = 500) -> None:
    """Create ``run-0`` … ``run-{n-1}``, *batch* at once (set-up, not measured: the
    writer groups concurrent commits into one transaction, so 100,000 Runs do not cost
    100,000 fsyncs)."""
    for first in range(0, n, batch):
        async with trio.open_nursery() as nursery:
            for i in range(first, min(n, first + batch)):
                nursery.start_soon(rt.create_run, f"run-{i}", ["go"])


async def idle_actor_rss(n: int, breakdown: bool = False, store_kind: str = "memory",
                         workdir: str = ".", objects: bool = False) -> dict[str, Any]:
    """RSS growth per Run whose drive waits on an in-flight tool call, on the *store_kind*
    store ("memory": its log is its durable copy and counts here; "sqlite": the log is
    on disk)."""
    gate = trio.Event()

    async def blocked() -> dict[str, bool]:
        await gate.wait()
        return {"ok": True}

    tool = python_tool(blocked, ref="noop")
    model = CountingModel(1)
    path = os.path.join(workdir, "idle.sqlite3")
    # generous bounds: the start barriers of thousands of Runs queue behind each other
    settings = Settings(settle_timeout=3600.0)
    async with _store(store_kind, path) as store, \
            open_local_executor(tools=[tool], models={"bench": model}) as ex, \
            open_runtime(store, ex, scope="idle", builder=BodyBuilder(tool),
                         settings=settings) as rt:
        await _create_runs(rt, n)
        model.calls.clear()  # the bench's own bookkeeping, not the Run's
        gc.collect()
        extra: dict[str, Any] = {}
        if breakdown:
            tasks_before = _task_counts()
            tracemalloc.start(25)
            snap_before = tracemalloc.take_snapshot()
        before = _rss_bytes()
        # start_drive: no task of the bench's per Run; started in batches so the start
        # barriers of thousands of Runs do not all queue at once
        batch = 250
        for first in range(0, n, batch):
            for i in range(first, min(n, first + batch)):
                await rt.start_drive(f"run-{i}")
            while not _batch_parked(rt, first, min(n, first + batch)):
                await trio.sleep(0.005)
        # read the settled state — every drive parked on its tool call — not a
        # moment when some model calls, commits or Watcher reads are still in flight
        # (a task waiting for the SQLite writer thread counts as blocked: check both)
        while True:
            await trio.testing.wait_all_tasks_blocked()
            if _parked(rt) == n:
                break
            await trio.sleep(0.005)
        model.calls.clear()
        gc.collect()
        after = _rss_bytes()
        if breakdown:
            snap_after = tracemalloc.take_snapshot()
            tracemalloc.stop()
            tasks = _task_counts()
            tasks.subtract(tasks_before)
            extra["tasks_per_run"] = {k: v / n for k, v in tasks.items() if v}
            extra["breakdown"] = _breakdown(snap_before, snap_after, n)
        if objects:
            extra["objects"] = _object_sizes(rt, ex, n)
        live = len(rt.runtime.live_actors())
        parked = _parked(rt)
        # leaving answers the parked drives (RuntimeClosedError, nobody waits for them)
        # and the executor cancels the blocked tools
    return {"runs": n, "store": store_kind, "live_actors": live, "parked_actors": parked,
            "rss_before": before, "rss_after": after,
            "bytes_per_actor": (after - before) / n, **extra}


class _GcTimer:
    """Seconds spent in the cyclic garbage collector (and collections per generation)
    from construction until :meth:`stop` (``gc.callbacks``)."""

    def __init__(self) -> None:
        self.seconds = 0.0
        self.collections = [0, 0, 0]
        self._began = 0.0
        gc.callbacks.append(self._callback)

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._began = time.perf_counter()
        else:
            self.seconds += time.perf_counter() - self._began
            self.collections[info["generation"]] += 1

    def stop(self) -> None:
        gc.callbacks.remove(self._callback)


async def resume_time(n: int, workdir: str, profile: str = "", rounds: int = 1,
                      freeze: str = "on", process: str = "same") -> dict[str, Any]:
    """Seconds from opening the runtime until every one of *n* active Runs is resumed.

    Set-up (not timed): *n* Runs on a SQLite store, each parked on a started tool call
    that the executor keeps running (the executor outlives the runtime, as a separate
    executor service would); then the runtime and the store are closed. Timed: opening
    the store and the runtime — the writer's projection load, takeover reconciliation
    (every target ``attach``-ed: KEEP) and the Reconciler's watch, until the Watcher
    has registered every kept key and read each once (every Run resumed: its Outcome
    will be settled the moment it exists). *rounds*: restarts measured one after the
    other over the same Runs (the executor still runs every call). *profile*: a path to
    dump a cProfile of the first round's timed part to (it slows that part down).

    *freeze* ("on", "off", "alternate"): ``gc.freeze()`` the objects alive before the
    timed part. They are the executor's (records, the tools' running tasks): a restart
    of the runtime's process would not have them in its heap, but here one full
    collection during the resume walks all of them too (~1 s of CPU at 10,000 Runs).
    "alternate" measures frozen and unfrozen rounds in turn (A/B in one window).

    *process* ("same", "fresh", "both"): where the timed restart runs. "same": in this
    process, after the set-up (its executor's objects in the heap; *freeze* applies).
    "fresh": in a new interpreter (``--resume-child``) whose heap holds only the imports,
    the handed-over keys and what the open builds, as a restarted runtime's process
    would; the executor stays here and is seen through :class:`HandedOverExecutor` (no
    transport modelled); *freeze* does not apply (no gc.freeze() there). "both":
    alternate same (with *freeze*) and fresh rounds.
    """
    gate = trio.Event()

    async def blocked() -> dict[str, bool]:
        await gate.wait()
        return {"ok": True}

    tool = python_tool(blocked, ref="noop")
    model = CountingModel(1)
    path = os.path.join(workdir, "resume.sqlite3")
    settings = Settings(settle_timeout=3600.0)
    async with open_local_executor(tools=[tool], models={"bench": model}) as ex:
        async with open_sqlite_store(path) as store, \
                open_runtime(store, ex, scope="resume", builder=BodyBuilder(tool),
                             settings=settings) as rt:
            await _create_runs(rt, n)
            batch = 250
            for first in range(0, n, batch):
                for i in range(first, min(n, first + batch)):
                    await rt.start_drive(f"run-{i}")
                while not _batch_parked(rt, first, min(n, first + batch)):
                    await trio.sleep(0.005)
            # quiescent: every drive parked on its (blocked) tool call, none on a model
            # step whose Outcome is still on its way
            await trio.testing.wait_all_tasks_blocked()
            while _parked(rt) < n:
                await trio.sleep(0.005)
        results = []
        handover = os.path.join(workdir, "handover.json")
        with open(handover, "w") as f:
            json.dump(_handover(ex), f)
        for round_ in range(rounds):
            # what the round's open finds on disk: the store file and a WAL left over
            files = {"store_bytes": os.path.getsize(path),
                     "wal_bytes": os.path.getsize(path + "-wal")
                     if os.path.exists(path + "-wal") else 0}
            if process == "fresh" or (process == "both" and round_ % 2 == 1):
                out = subprocess.run(
                    [sys.executable, __file__, "--resume-child", path, "--resume-only",
                     str(n), "--handover", handover],
                    capture_output=True, text=True, check=True)
                results.append({**json.loads(out.stdout), **files})
                continue
            gc.collect()
            # the set-up's survivors — the executor, its records and the tools' tasks —
            # stand for the executor service's process (see the docstring): frozen out
            # of the collector's passes, as they would not be in the restarted
            # process's heap; with freeze="alternate" the odd rounds leave them in
            # with process="both" the same-process rounds are the even ones: "alternate"
            # alternates among them
            same_round = round_ // 2 if process == "both" else round_
            frozen = freeze == "on" or (freeze == "alternate" and same_round % 2 == 0)
            if frozen:
                gc.freeze()
            profiler = None
            if profile and round_ == 0:
                import cProfile

                profiler = cProfile.Profile()
                profiler.enable()
            def stop_profile(profiler: Any = profiler) -> None:
                if profiler is not None:
                    profiler.disable()
                    profiler.dump_stats(profile)

            timed = await _timed_restart(path, ex, tool, settings, n, stop_profile)
            results.append({**timed, "gc_frozen": frozen, "process": "same", **files})
            gc.unfreeze()
        gate.set()
    # cpu: this process's CPU time (every thread, the SQLite writer included), which a
    # loaded machine moves far less than the wall clock; gc: time inside the cyclic
    # garbage collector during the timed part (collections by generation)
    return {"runs": n, **results[0], "rounds": results}


class HandedOverExecutor:
    """The executor as a restarted runtime's process sees it in ``--resume-process
    fresh``: the set-up's LocalExecutor lives on in the bench's parent process (its tool
    calls still blocked), and this object gives the child — the restarted runtime — the
    answers that executor gives for the calls it still runs, from a list of their keys
    handed over before the timed part. It does what ``LocalExecutor`` does per call on
    the restart's path (a checkpoint, a lookup, the same ``Attachment``, the same
    ``OutcomeNotReadyError``, a real settlement subscription over an empty log), with no
    transport between the processes (a remote executor would add a round trip per
    ``attach`` and per first read). Anything else a restart does not call raises."""

    def __init__(self, live: dict[Any, Any], epoch: str) -> None:
        self._live = live
        self._epoch = epoch
        self._log = SettlementLog(epoch, 4096)

    async def validate(self, a: Any) -> None:
        await trio.lowlevel.checkpoint()

    async def attach(self, a: Any) -> Any:
        await trio.lowlevel.checkpoint()
        execution = self._live.get(a.key)
        if execution is None:
            return Attachment(state=AttachmentState.MISSING)
        return Attachment(state=AttachmentState.ACTIVE, execution=execution,
                          owner=self._epoch, backend_attached=True)

    async def get_outcome(self, key: Any) -> Any:
        await trio.lowlevel.checkpoint()
        if key not in self._live:
            raise ExecutionNotFoundError("no execution for this key", key=key)
        raise OutcomeNotReadyError("not settled yet", key=key, status=ExecutionStatus.RUNNING)

    def settlements(self, epoch: str, after: int) -> Any:
        return SettlementSubscription(self._log, epoch, after)

    async def _unused(self, *args: Any) -> Any:
        raise NotImplementedError("not on a restart's path (the bench's stand-in)")

    dispatch = abort = get_status = cancel = _unused


def _handover(ex: Any) -> dict[str, Any]:
    """What the parent hands the child: the executor's epoch and the live calls'
    keys and execution refs (JSON)."""
    live = [[r.key.session, r.key.run_id, r.key.effect, r.execution.provider, r.execution.ref]
            for r in ex._records.values() if r.outcome is None]
    return {"epoch": ex._epoch, "live": live}


async def fresh_restart(n: int, path: str, handover: str) -> dict[str, Any]:
    """The timed part of ``resume_time`` in this (fresh) process: open the store
    written by the parent's set-up and a runtime against a :class:`HandedOverExecutor`
    built from *handover* (untimed), until every one of *n* active Runs is resumed."""

    with open(handover) as f:
        given = json.load(f)
    live = {AssignmentKey(s, r, e): ExecutionRef(p, ref) for s, r, e, p, ref in given["live"]}
    ex = HandedOverExecutor(live, given["epoch"])
    tool = python_tool(_noop, ref="noop")
    settings = Settings(settle_timeout=3600.0)
    heap_before = len(gc.get_objects())
    timed = await _timed_restart(path, ex, tool, settings, n)
    return {**timed, "gc_frozen": False, "process": "fresh",
            "gc_tracked_before": heap_before, "gc_tracked_after": len(gc.get_objects())}


async def _timed_restart(path: str, ex: Any, tool: Any, settings: Settings, n: int,
                         on_resumed: Callable[[], None] | None = None) -> dict[str, Any]:
    """The timed part of a restart, the same in both ``--resume-process`` modes: open
    the SQLite store and the runtime, until the Watcher has registered every one of the
    *n* kept keys and every task is blocked. *on_resumed* runs right after the clock
    stops (the profiler's end). Returns the figures: open and resume seconds (wall and
    this process's CPU), the collector's time and collections, what the open found
    (active Runs, watched keys, recovery commits), and the close's seconds (wall and CPU,
    measured apart: the runtime's and the store's close, the writer's checkpoint)."""
    # open_sqlite_store is imported with the module: the timed part opens the store, it
    # does not import (and, under PYTHONDONTWRITEBYTECODE, compile) the store's modules
    gc_time = _GcTimer()
    start = time.perf_counter()
    cpu_start = time.process_time()
    async with open_sqlite_store(path) as store, \
            open_runtime(store, ex, scope="resume", builder=BodyBuilder(tool),
                         settings=settings) as rt:
        opened = time.perf_counter()
        cpu_opened = time.process_time()
        watcher = rt.runtime.watcher
        while watcher.statistics().keys < n:
            await trio.sleep(0)
        await trio.testing.wait_all_tasks_blocked()
        resumed = time.perf_counter()
        cpu_resumed = time.process_time()
        gc_time.stop()
        if on_resumed is not None:
            on_resumed()
        stats = watcher.statistics()
        figures = {"active": len(rt.writer.projection()), "watched_keys": stats.keys,
                   "recovery_commits": rt.recovered, "open_seconds": opened - start,
                   "resume_seconds": resumed - start,
                   "open_cpu_seconds": cpu_opened - cpu_start,
                   "resume_cpu_seconds": cpu_resumed - cpu_start,
                   "gc_seconds": gc_time.seconds, "gc_collections": gc_time.collections}
        closing = time.perf_counter()
        cpu_closing = time.process_time()
    # not in the restart's figure: the close after it (runtime, writer checkpoint, store)
    return {**figures, "close_seconds": time.perf_counter() - closing,
            "close_cpu_seconds": time.process_time() - cpu_closing}


def _parked(rt: Any) -> int:
    """Actors whose drive is parked on an Outcome (no task of their own)."""
    return sum(1 for a in rt.runtime._actors.values() if a.parked is not None)


def _batch_parked(rt: Any, first: int, end: int) -> bool:
    """Every one of ``run-{first}`` … ``run-{end-1}`` is parked: polled while the set-up
    starts drives in batches, so it reads only the batch (polling every actor's
    statistics there made the 100,000-Run set-up quadratic)."""
    actors = rt.runtime._actors
    for i in range(first, end):
        actor = actors.get(f"run-{i}")
        if actor is None or actor.parked is None:
            return False
    return True


async def main(args: argparse.Namespace) -> dict[str, Any]:
    results: dict[str, Any] = {"loops": []}
    with tempfile.TemporaryDirectory() as workdir:
        for kind in args.stores:
            for runs in (1, args.runs):
                iterations = args.iterations if runs == 1 else max(1, args.iterations // 20)
                results["loops"].append(await loop_rate(kind, runs, iterations, workdir))
        results["trio_channel_round_trips_per_s"] = await channel_round_trips(20000)
        results["sqlite_raw_commits_per_s"] = sqlite_commits(
            os.path.join(workdir, "raw.sqlite3"), 2000)
    if args.idle:
        # a fresh interpreter, so memory freed by the loops above cannot hide growth
        command = [sys.executable, __file__, "--idle-only", str(args.idle),
                   "--idle-store", args.idle_store]
        out = subprocess.run(command + (["--breakdown", "--json"] if args.breakdown else []),
                             capture_output=True, text=True, check=True)
        results["idle"] = json.loads(out.stdout)
    if args.resume:
        command = [sys.executable, __file__, "--resume-only", str(args.resume),
                   "--resume-rounds", str(args.resume_rounds),
                   "--resume-gc-freeze", args.resume_gc_freeze,
                   "--resume-process", args.resume_process]
        out = subprocess.run(command, capture_output=True, text=True, check=True)
        results["resume"] = json.loads(out.stdout)
    return results


def _print(results: dict[str, Any]) -> None:
    console = Console()
    table = Table(title="agent loop: iterations/s (1 model call + 1 tool call each)")
    for col in ("store", "runs", "iterations", "seconds", "iterations/s", "CPU µs/iteration",
                "finished"):
        table.add_column(col, justify="right")
    for r in results["loops"]:
        table.add_row(r["store"], str(r["runs"]), str(r["iterations"]),
                      f"{r['seconds']:.2f}", f"{r['iterations_per_s']:,.0f}",
                      f"{r['cpu_us_per_iteration']:,.0f}", str(r["finished"]))
    console.print(table)
    peers = Table(title="peers measured in the same run")
    peers.add_column("what")
    peers.add_column("per second", justify="right")
    peers.add_row("trio memory-channel round trips",
                  f"{results['trio_channel_round_trips_per_s']:,.0f}")
    peers.add_row("raw SQLite commits (WAL, synchronous=FULL)",
                  f"{results['sqlite_raw_commits_per_s']:,.0f}")
    console.print(peers)
    if "idle" in results:
        idle = results["idle"]
        console.print(f"waiting Run actors ({idle['store']} store): {idle['runs']:,} "
                      f"live={idle['live_actors']:,} parked={idle['parked_actors']:,} "
                      f"RSS +{(idle['rss_after'] - idle['rss_before']) / 2**20:.1f} MiB "
                      f"= {idle['bytes_per_actor'] / 1024:.2f} KiB per actor")
        if "breakdown" in idle:
            _print_breakdown(console, idle)
    if "resume" in results:
        r = results["resume"]
        console.print(f"restart with {r['runs']:,} active Runs (SQLite): every one resumed "
                      f"in {r['resume_seconds']:.2f} s (runtime open {r['open_seconds']:.2f} "
                      f"s; {r['watched_keys']:,} keys watched, {r['recovery_commits']} "
                      "recovery commits)")


def _print_breakdown(console: Console, idle: dict[str, Any]) -> None:
    tasks = ", ".join(f"{k} {v:g}" for k, v in sorted(idle["tasks_per_run"].items()))
    console.print(f"live trio tasks per Run: {sum(idle['tasks_per_run'].values()):g} "
                  f"({tasks})")
    table = Table(title="tracemalloc: bytes per waiting Run, by owner "
                        "(RSS of this run is inflated by tracemalloc)")
    for col in ("owner", "bytes/Run", "of which inside trio"):
        table.add_column(col, justify="right" if col != "owner" else "left")
    for owner, row in idle["breakdown"]["by_owner"].items():
        table.add_row(owner, f"{row['bytes_per_run']:,}", f"{row['of_which_in_trio']:,}")
    table.add_row("total traced", f"{idle['breakdown']['traced_bytes_per_run']:,}", "")
    console.print(table)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=500)
    parser.add_argument("--runs", type=int, default=100)
    parser.add_argument("--idle", type=int, default=10000)
    parser.add_argument("--stores", nargs="+", default=["memory", "sqlite"])
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--breakdown", action="store_true",
                        help="idle measurement: also tasks per Run and a tracemalloc "
                             "breakdown by owner (slower; inflates that run's RSS)")
    parser.add_argument("--objects", action="store_true",
                        help="idle measurement: also bytes per Run by owner from the objects "
                             "themselves (sys.getsizeof over what each owner alone reaches)")
    parser.add_argument("--idle-store", choices=("memory", "sqlite"), default="sqlite",
                        help="store of the idle measurement (default sqlite, the durable "
                             "one; the memory store's log is its durable copy and counts)")
    parser.add_argument("--resume", type=int, default=10000,
                        help="active Runs of the restart measurement (0: skip)")
    parser.add_argument("--resume-rounds", type=int, default=1,
                        help="restart measurement: restarts measured in a row (median)")
    parser.add_argument("--resume-gc-freeze", choices=("on", "off", "alternate"),
                        default="on",
                        help="restart measurement: gc.freeze() the executor's objects "
                             "(another process's in the modelled deployment) first")
    parser.add_argument("--resume-process", choices=("same", "fresh", "both"), default="same",
                        help="restart measurement: time the restart in this process after "
                             "the set-up (same), in a fresh interpreter (fresh; the executor "
                             "stays in this one), or alternate them (both)")
    parser.add_argument("--resume-child", default="", help=argparse.SUPPRESS)
    parser.add_argument("--handover", default="", help=argparse.SUPPRESS)
    parser.add_argument("--profile", default="",
                        help="restart measurement: dump a cProfile of the timed part here")
    parser.add_argument("--idle-only", type=int, default=0, help=argparse.SUPPRESS)
    parser.add_argument("--resume-only", type=int, default=0, help=argparse.SUPPRESS)
    ns = parser.parse_args()
    if ns.resume_child:
        print(json.dumps(trio.run(fresh_restart, ns.resume_only, ns.resume_child,
                                  ns.handover)))
        sys.exit(0)
    if ns.resume_only:
        with tempfile.TemporaryDirectory() as resume_dir:
            print(json.dumps(trio.run(resume_time, ns.resume_only, resume_dir, ns.profile,
                                      ns.resume_rounds, ns.resume_gc_freeze,
                                      ns.resume_process)))
        sys.exit(0)
    if ns.idle_only:
        with tempfile.TemporaryDirectory() as idle_dir:
            idle = trio.run(idle_actor_rss, ns.idle_only, ns.breakdown, ns.idle_store,
                            idle_dir, ns.objects)
        if ns.json or not ns.breakdown:
            print(json.dumps(idle))
        else:
            _print_breakdown(Console(), idle)
        sys.exit(0)
    out = trio.run(main, ns)
    if ns.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        _print(out)
