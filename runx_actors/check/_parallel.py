"""Level-synchronous parallel breadth-first search over worker processes (``workers > 1``).

The coordinating process owns the visited set (``seen``: key → parent key, exactly as the
single-process ``_bfs``) and the frontier, held as pickled states it never unpickles. Each
level is cut into chunks that go, in order, through one FIFO task queue to the worker
processes; a worker expands every state of a chunk (``actions``, the keys, the invariants of
successors it has not produced before, the deadlock question) and sends back, per state and
in the model's order, one entry per successor: the key and, unless the worker already
reported that key earlier, the successor's first violation and its place in the chunk's
batch: one pickled list of the successors it reports (pickled together, the parts they
share — a store most moves leave alone — are written and rebuilt once). The frontier
refers to states by (batch, place).

The coordinator consumes the chunks' results **in chunk order** and replays the single
search's bookkeeping over them: the same keys enter ``seen`` in the same order with the same
parents, the counters advance the same way, and it stops at the same successor. So the
distinct-state and transition counts, the verdict and the (shortest) counterexample are the
ones ``workers=1`` gives; only a time limit cuts at a different point.

Why an entry without a payload is always already in ``seen``: a worker takes chunks from the
queue in increasing order, so its earlier report of the key precedes this one in the
coordinator's consumption order, and the coordinator records every key it consumes.

Models whose actions read process-wide derivation caches (the reference's ``EFFECTS``: a
derived id → what it stands for, filled as ids are derived) list them in an optional
``shared_tables()`` method: dicts that only grow and whose values their keys determine.
Each worker sends what it added to them with each chunk's results; the coordinator merges
them into its own, and every chunk of the next level carries everything the workers have
added so far (pickled once per level; a worker applies it when it first sees that level: a
state is only expanded one level after it was produced).

Keys must agree across processes: in compact mode they are ``hash()`` values, and the
workers are forked (the ``fork`` start method), so they share the coordinator's hash seed.
Models must be picklable-state models (frozen attrs classes, tuples, enums).
"""

from __future__ import annotations

import itertools
import multiprocessing
import pickle
import queue
from collections.abc import Hashable
from typing import Any

from ._errors import CheckError, ModelCodeError
from ._model import Invariant, Model
from ._result import DEADLOCK, StopReason, Violation
from ._search import Outcome, SearchContext
from ._trace import Trace

__all__ = ["parallel_bfs", "WorkerError"]

_PROTOCOL = pickle.HIGHEST_PROTOCOL
_MAX_CHUNK = 256
_POLL_S = 0.5

# What a worker sends back per expanded state: (entries, tail, deadlock).
#   entries: [(key, payload)], payload None (reported before) or
#            (pickled successor, label, violation: None | (invariant name, message))
#   tail: None; ("truncated", has_successor) at the depth bound; or
#         ("error", where, exception, label | None, pickled state | None) after which the
#         worker stopped expanding the chunk.
#   deadlock: the state cannot move on and is not final.


class WorkerError(CheckError):
    """A worker process of a parallel search died (``.exitcode``: killed by the operating
    system, e.g. out of memory) before sending its results."""


def _portable(exc: BaseException) -> BaseException:
    """*exc* if it survives pickling, else a ``RuntimeError`` with its type and text."""
    try:
        pickle.loads(pickle.dumps(exc, _PROTOCOL))
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")
    return exc


def shared_tables(model: Model[Any]) -> tuple[dict[Any, Any], ...]:
    """The model's ``shared_tables()`` (see the module docstring), or none."""
    method = getattr(model, "shared_tables", None)
    return tuple(method()) if callable(method) else ()


def _added(tables: tuple[dict[Any, Any], ...], sent: list[int]) -> list[list[Any]]:
    """The items appended to each of *tables* since *sent* (lengths), and update *sent*."""
    delta = []
    for index, table in enumerate(tables):
        delta.append(list(itertools.islice(table.items(), sent[index], None)))
        sent[index] = len(table)
    return delta


def _serve(model: Model[Any], compact: bool, check_deadlock: bool,
           tasks: Any, results: Any) -> None:
    """A worker: expand chunks from *tasks* until ``None``; results go to *results*."""
    ctx = SearchContext(model, max_states=None, max_depth=None, time_limit=None,
                        check_deadlock=check_deadlock, compact=compact, report=None)
    actions = model.actions
    keyfn = ctx.keyfn
    fast = ctx.fast
    invariants = ctx.invariants
    dumps, loads = pickle.dumps, pickle.loads
    reported: set[Hashable] = set()  # keys this worker has already sent with a payload
    tables = shared_tables(model)
    sent = [len(table) for table in tables]
    level = -1
    while True:
        task = tasks.get()
        if task is None:
            return
        chunk_id, truncate, batches, refs, keys, task_level, merged = task
        if task_level != level:
            level = task_level
            for table, items in zip(tables, loads(merged), strict=True):
                table.update(items)
            sent = [len(table) for table in tables]
        out: list[tuple[list[tuple[Hashable, Any]], Any, bool]] = []
        fresh: list[Any] = []  # the successors sent back, pickled together (shared parts once)
        unpacked = {batch: loads(blob) for batch, blob in batches.items()}
        for (batch, index), skey in zip(refs, keys, strict=True):
            state = unpacked[batch][index]
            reported.add(skey)  # in seen: self-loops need no payload
            entries: list[tuple[Hashable, Any]] = []
            tail: Any = None
            moved = False
            label: str | None = None
            nxt: Any = None
            where = "actions"
            try:
                successors = actions(state)
                if truncate:
                    has = next(iter(successors), None) is not None
                    tail = ("truncated", has)
                    moved = has
                else:
                    for label, nxt in successors:
                        where = "canonical"
                        key = nxt if keyfn is None else keyfn(nxt)
                        if key != skey:
                            moved = True
                        if key in reported:
                            entries.append((key, None))
                            where = "actions"
                            continue
                        found: tuple[str, Any] | None = None
                        if fast is not None:
                            where = "invariants (first_violation)"
                            hit = fast(nxt)
                            if hit is not None:
                                found = (hit[0].name, hit[1])
                        else:
                            for invariant in invariants:
                                where = f"invariant {invariant.name}"
                                message = invariant.check(nxt)
                                if message is not None:
                                    found = (invariant.name, message)
                                    break
                        reported.add(key)
                        entries.append((key, (len(fresh), label, found)))
                        fresh.append(nxt)
                        where = "actions"
                deadlock = False
                if check_deadlock and not moved:
                    where = "is_final"
                    deadlock = ctx.final is None or not ctx.final(state)
            except Exception as exc:
                step = None if where in ("actions", "is_final") else label
                blob_next = dumps(nxt, _PROTOCOL) if step is not None else None
                out.append((entries, ("error", where, _portable(exc), step, blob_next), False))
                break
            out.append((entries, tail, deadlock))
        results.put((chunk_id, out, dumps(fresh, _PROTOCOL), _added(tables, sent)))


def parallel_bfs(ctx: SearchContext, workers: int) -> Outcome:
    """The single search's result, computed by *workers* forked processes.

    Raises ``ModelCodeError`` when the model's code raises (in a worker or here),
    ``WorkerError`` when a worker dies, ``ValueError`` when the platform cannot fork.
    """
    from ._bfs import _ROOT, _rebuild, _trace_or_none

    try:
        mp = multiprocessing.get_context("fork")
    except ValueError as exc:
        raise ValueError("workers > 1 needs the 'fork' start method (POSIX)") from exc
    model = ctx.model
    by_name: dict[str, Invariant] = {inv.name: inv for inv in ctx.invariants}
    max_states = ctx.max_states
    max_depth = -1 if ctx.max_depth is None else ctx.max_depth
    check_deadlock = ctx.check_deadlock
    seen: dict[Hashable, Hashable] = {}
    count = transitions = 0

    def outcome(depth: int, stop: StopReason | None, violation: Violation | None = None) -> Outcome:
        return Outcome(distinct_states=count, transitions=transitions, max_depth=depth,
                       stop_reason=stop, violation=violation)

    try:
        initial_states = list(model.initial_states())
    except Exception as exc:
        raise ctx.fault("initial_states", None, None, exc) from exc
    # the frontier: (batch, index in it, key); a batch is one pickled list of states
    frontier: list[tuple[int, int, Hashable]] = []
    roots: list[Any] = []
    for state in initial_states:
        try:
            key = ctx.key(state)
            if key in seen:
                continue
        except Exception as exc:
            raise ctx.fault("canonical", state, Trace(state), exc) from exc
        if count >= max_states:
            return outcome(0, StopReason.MAX_STATES)
        seen[key] = _ROOT
        count += 1
        found0 = ctx.first_violation(state, Trace(state))
        if found0 is not None:
            return outcome(0, StopReason.VIOLATION, ctx.violation(*found0, Trace(state)))
        frontier.append((0, len(roots), key))
        roots.append(state)
    batches: dict[int, bytes] = {0: pickle.dumps(roots, _PROTOCOL)}
    next_batch = 1

    tasks = mp.Queue()
    results = mp.Queue()
    procs = [mp.Process(target=_serve, args=(model, ctx.compact, check_deadlock, tasks,
                                             results), daemon=True)
             for _ in range(workers)]
    for proc in procs:
        proc.start()

    tables = shared_tables(model)
    added: list[dict[Any, Any]] = [{} for _ in tables]  # what the workers added so far
    merged = pickle.dumps([[] for _ in tables], _PROTOCOL)  # (forked: they have the rest)

    def receive(pending: dict[int, Any], want: int) -> Any:
        while want not in pending:
            try:
                chunk_id, out, fresh, delta = results.get(timeout=_POLL_S)
            except queue.Empty:
                for proc in procs:
                    if not proc.is_alive():
                        raise WorkerError(
                            f"a worker process died (exit code {proc.exitcode})",
                            exitcode=proc.exitcode) from None
                continue
            pending[chunk_id] = (out, fresh)
            for table, items, acc in zip(tables, delta, added, strict=True):
                table.update(items)
                acc.update(items)
        return pending.pop(want)

    try:
        depth = 0
        while frontier:
            truncate = depth == max_depth
            size = max(8, min(_MAX_CHUNK, -(-len(frontier) // (workers * 4))))
            chunks = [frontier[i:i + size] for i in range(0, len(frontier), size)]
            for index, chunk in enumerate(chunks):
                used = {batch: batches[batch] for batch, _, _ in chunk}
                tasks.put((index, truncate, used, [(b, i) for b, i, _ in chunk],
                           [k for _, _, k in chunk], depth, merged))
            next_frontier: list[tuple[int, int, Hashable]] = []
            next_batches: dict[int, bytes] = {}
            pending: dict[int, Any] = {}
            truncated = False
            for index, chunk in enumerate(chunks):
                out, fresh = receive(pending, index)
                batch_id = next_batch
                next_batch += 1
                if ctx.tick(count, transitions, depth, len(frontier)):
                    return outcome(depth + bool(next_frontier), StopReason.TIME_LIMIT)
                for (batch, place, skey), (entries, tail, deadlock) in zip(chunk, out):
                    for key, payload in entries:
                        transitions += 1
                        if key in seen:
                            continue
                        if payload is None:  # see the module docstring
                            raise CheckError(  # pragma: no cover - an internal invariant
                                "parallel search: a key reported without its state is "
                                "not yet known")
                        if count >= max_states:
                            return outcome(depth + bool(next_frontier), StopReason.MAX_STATES)
                        seen[key] = skey
                        count += 1
                        slot, label, found = payload
                        if found is not None:
                            state = pickle.loads(fresh)[slot]
                            trace = _rebuild(ctx, seen, skey, label, state)
                            return outcome(depth + 1, StopReason.VIOLATION,
                                           ctx.violation(by_name[found[0]], found[1], trace))
                        next_frontier.append((batch_id, slot, key))
                        next_batches[batch_id] = fresh
                    if tail is not None and tail[0] == "error":
                        _, where, cause, label, nxt_blob = tail
                        at: Trace | None
                        if label is None:
                            state = pickle.loads(batches[batch])[place]
                            at = _trace_or_none(ctx, seen, skey, None, None)
                        else:
                            state = pickle.loads(nxt_blob)
                            at = _trace_or_none(ctx, seen, skey, label, state)
                        error: ModelCodeError = ctx.fault(where, state, at, cause)
                        raise error from cause
                    if tail is not None and tail[1]:  # truncated with a successor
                        truncated = True
                        continue
                    if deadlock:
                        trace = _rebuild(ctx, seen, skey, None, None)
                        violation = Violation(
                            invariant=DEADLOCK,
                            message="no action leads to another state, and the model does "
                                    "not call this state final",
                            description="every reachable state that is not final can move on",
                            trace=trace,
                        )
                        return outcome(depth + bool(next_frontier), StopReason.VIOLATION,
                                       violation)
            if not next_frontier:
                if truncated:
                    return outcome(depth, StopReason.MAX_DEPTH)
                return outcome(depth, None)
            frontier, batches = next_frontier, next_batches
            depth += 1
            merged = pickle.dumps([list(acc.items()) for acc in added], _PROTOCOL)
        return outcome(depth, None)  # no initial state
    finally:
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        for proc in procs:
            proc.join()
        tasks.close()
        results.close()
        tasks.cancel_join_thread()
        results.cancel_join_thread()

