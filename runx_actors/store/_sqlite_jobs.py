"""The jobs of the SQLite writer thread and the group's running view (spec §4.3, §4.5).

A job is *evaluated* in memory against a running view of its group (:class:`GroupTx`):
the writer's projection overlaid with what the jobs accepted earlier in the same group
wrote (snapshots, commit ids, stream heads), over the commit ids and Runs looked up once
per group. It returns its answer plus the rows to write (:class:`Plan`); it writes
nothing itself. How groups are formed, written and committed is ``_sqlite_writer``'s.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from typing import Any, TypeVar

import attrs

from ..protocol.commit import (
    Append,
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Replay,
    Snapshot,
    create_group,
    evaluate_batch,
    evaluate_commit,
    fold_run,
)
from ..protocol.errors import CorruptRecordError, RunExistsError, ValidationError
from ..protocol.facts import Fact
from ..protocol.state import Open
from ..protocol.values import AgentInput, CommandID, Digest, NewRun, RunID, RunStatus, Scope
from . import _sqlite_log as log
from ._chain import genesis, link
from ._group import JobBase, WriterStateBase, foreign_rows, run_items
from ._scope import Projection, batch_results
from .base import ForeignEvent, check_foreign, run_stream

__all__ = [
    "WriterState", "Job", "CommitJob", "BatchJob", "CreateJob", "AppendJob", "OpenJob",
    "PutJob",
    "GroupTx", "Plan", "Change", "CheckpointJob",
]

T = TypeVar("T")
#: A tentative projection change: (writer, run, snapshot after the job).
Change = tuple["WriterState", RunID, Snapshot]


class WriterState(WriterStateBase):
    """One SessionWriter's identity and projection, shared by trio and the writer thread.

    Only the writer thread mutates ``projection`` (after ``COMMIT``), under ``lock``;
    the trio side reads it under the same lock.
    """

    def __init__(self, scope: Scope, epoch: int, projection: Projection,
                 cached: set[RunID] | None = None) -> None:
        super().__init__(scope, epoch, projection)
        self.lock = threading.Lock()
        #: The active Runs whose durable cache entry holds their snapshot in the
        #: projection (read so at open, or written by a committed group since): the
        #: checkpoint at close does not write them again. A change of the Run's snapshot
        #: takes it out; only a committed cache write of that very snapshot puts it in.
        self.cached: set[RunID] = cached if cached is not None else set()

    def apply(self, run_id: RunID, snapshot: Snapshot) -> None:
        """Set *run_id*'s snapshot in the writer's projection (under its lock), after the
        group that changed it is durable (RUN-CMT-2); its cache entry is no longer known
        to hold it."""
        with self.lock:
            self.projection.apply(run_id, snapshot)
            self.cached.discard(run_id)

    def mark_cached(self, run_id: RunID, snapshot: Snapshot) -> None:
        """After a committed group wrote *snapshot* as *run_id*'s cache entry: note that
        the entry holds the projection's snapshot, if *snapshot* is still that one."""
        with self.lock:
            if self.projection.active.get(run_id) is snapshot:
                self.cached.add(run_id)

    def uncached(self) -> dict[RunID, Snapshot]:
        """The active Runs whose cache entry is not known to hold their snapshot."""
        with self.lock:
            cached = self.cached
            return {run_id: snap for run_id, snap in self.projection.active.items()
                    if run_id not in cached}


@attrs.define
class _Commit:
    """One commit record a job appends, with its events ``(stream, idx, type, data)``."""

    scope: Scope
    commit_id: str
    epoch: int
    run_id: RunID | None
    first: int
    facts: tuple[Fact, ...]
    events: list[tuple[str, int, str, bytes]]


RunKey = tuple[Scope, RunID]


class Plan:
    """The rows one job writes; ``merge`` folds the plans of a group into one.

    Runs and cache entries are keyed by Run, so a Run committed twice in a group is
    written once: its head moves from the first job's old head to the last job's, and
    the cache gets the last job's entry (or deletion).
    """

    __slots__ = ("advances", "cache", "cached", "changes", "commits", "frozen", "new_runs")

    def __init__(self) -> None:
        self.frozen: dict[Digest, bytes] = {}
        self.commits: list[_Commit] = []
        #: New Runs: key -> (head, active).
        self.new_runs: dict[RunKey, tuple[int, int]] = {}
        #: Existing Runs: key -> (old head, new head, active).
        self.advances: dict[RunKey, tuple[int, int, int]] = {}
        #: key -> the snapshot to cache, or None to drop the entry.
        self.cache: dict[RunKey, Snapshot | None] = {}
        self.changes: list[Change] = []
        #: Cache entries this plan writes, as (writer, run, snapshot): once committed
        #: (and the changes applied), ``WriterState.mark_cached``.
        self.cached: list[Change] = []

    def merge(self, other: Plan) -> None:
        """Add *other*'s frozen bodies and rows to this plan (one transaction for a group
        of jobs, RUN-CMT-9); bodies already present are kept."""
        for digest, data in other.frozen.items():
            self.frozen.setdefault(digest, data)
        self.commits += other.commits
        self.new_runs.update(other.new_runs)
        for key, (old, head, active) in other.advances.items():
            if key in self.new_runs:
                self.new_runs[key] = (head, active)
            elif key in self.advances:
                self.advances[key] = (self.advances[key][0], head, active)
            else:
                self.advances[key] = (old, head, active)
        self.cache.update(other.cache)
        self.changes += other.changes
        self.cached += other.cached

    def cache_after(self, ws: WriterState, run_id: RunID, snap: Snapshot, *,
                    was_open: bool = False) -> None:
        """Keep the durable cache (RUN-CMT-2): drop the entry when the Run ended, write
        it when the Run *arrives* at Open (created, or a step closed); nothing in the
        middle of a step. An input accepted while already at Open (``was_open``) writes
        nothing either: a rebuild folds it from the log tail."""
        if snap.state.status is not RunStatus.ACTIVE:
            self.cache[(ws.scope, run_id)] = None
        elif isinstance(snap.state.current, Open) and not was_open:
            self.put_cache(ws, run_id, snap)

    def put_cache(self, ws: WriterState, run_id: RunID, snap: Snapshot) -> None:
        """Write *snap* as *run_id*'s cache entry (the last one of a group wins)."""
        self.cache[(ws.scope, run_id)] = snap
        self.cached.append((ws, run_id, snap))


class GroupTx:
    """The state of one group transaction: connection plus the running overlay.

    The overlay holds what the jobs accepted so far in this group wrote: each Run's
    newest snapshot (active or ended), the commit-id index entries, foreign stream
    heads. Reads look there first, then at what was looked up at the start of the group
    (``prefetch``), then at the database.
    """

    def __init__(self, conn: sqlite3.Connection, frozen_known: set[Digest] | None = None,
                 chain_heads: dict[tuple[Scope, str], tuple[int, bytes]] | None = None
                 ) -> None:
        self.conn = conn
        #: ``(scope, stream) -> (idx, chain)`` of rows committed earlier by this writer
        #: (rows are immutable, so an entry is valid for its idx for ever).
        self.chain_heads = chain_heads if chain_heads is not None else {}
        #: The same for the rows this group wrote so far (published after ``COMMIT``).
        self.chains: dict[tuple[Scope, str], tuple[int, bytes]] = {}
        #: Digests of bodies committed earlier by this writer (bodies are never deleted).
        self.frozen_known: set[Digest] = frozen_known if frozen_known is not None else set()
        self.overlay: dict[tuple[int, RunID], Snapshot] = {}
        self.index: dict[tuple[Scope, str], _Commit] = {}
        self.heads: dict[tuple[Scope, str], int] = {}
        self.known_commits: dict[tuple[Scope, str], log.CommitRow | None] = {}
        self.known_runs: dict[RunKey, bool] = {}
        #: The newest commit seq written (None until read from the database).
        self.seq: int | None = None
        self._epochs: dict[Scope, int] = {}

    def check_epoch(self, ws: WriterState) -> None:
        """``log.check_epoch`` with the persisted epoch read once per scope and group.

        Exact: the group holds the write lock (``BEGIN IMMEDIATE``) from its first job to
        ``COMMIT``, no job of a group writes ``scopes`` (only ``OpenJob`` does, and it
        runs alone), so the persisted epoch cannot move inside the transaction.
        """
        current = self._epochs.get(ws.scope)
        if current is None:
            if self.seq is None:
                current, self.seq = log.read_epoch_and_seq(self.conn, ws.scope)
            else:
                current = log.read_epoch(self.conn, ws.scope)
            self._epochs[ws.scope] = current
        log.require_epoch(ws.scope, ws.epoch, current)

    def prefetch(self, jobs: Sequence[Job[Any]]) -> None:
        """Look up, per scope, every commit id and created Run the group names."""
        ids: dict[Scope, list[str]] = {}
        runs: dict[Scope, list[RunID]] = {}
        for job in jobs:
            for scope, cid in job.commit_keys():
                if cid:
                    ids.setdefault(scope, []).append(cid)
            if job.new_run_key is not None:
                runs.setdefault(job.new_run_key[0], []).append(job.new_run_key[1])
        for scope, cids in ids.items():
            found = log.lookup_commits(self.conn, scope, cids)
            for cid in cids:
                self.known_commits[(scope, cid)] = found.get(cid)
        for scope, run_ids in runs.items():
            existing = log.existing_runs(self.conn, scope, run_ids)
            for run_id in run_ids:
                self.known_runs[(scope, run_id)] = run_id in existing

    # -- reads through the overlay -----------------------------------------------------

    def active(self, ws: WriterState, run_id: RunID) -> Snapshot | None:
        """*run_id*'s snapshot as this group sees it: an earlier job's change, else the
        writer's projection; None when the Run is not active."""
        snap = self.overlay.get((id(ws), run_id))
        if snap is not None:
            return snap if snap.state.status is RunStatus.ACTIVE else None
        return ws.projection.active.get(run_id)

    def load(self, ws: WriterState, run_id: RunID) -> Snapshot:
        """As :meth:`active`, else the Run folded from its log (an ended Run). Raises
        RunNotFoundError."""
        snap = self.overlay.get((id(ws), run_id))
        if snap is not None:
            return snap
        snap = ws.projection.active.get(run_id)
        if snap is not None:
            return snap
        return log.record(self.conn, ws.scope, run_id)

    def stream_exists(self, ws: WriterState, run_id: RunID) -> bool:
        """True when *run_id* exists: created earlier in this group, active, or in ``runs``."""
        if (id(ws), run_id) in self.overlay or run_id in ws.projection.active:
            return True
        key = (ws.scope, run_id)
        known = self.known_runs.get(key)
        if known is None:
            known = self.known_runs[key] = log.stream_exists(self.conn, ws.scope, run_id)
        return known

    def _commit_row(self, scope: Scope, commit_id: str) -> log.CommitRow | None:
        key = (scope, commit_id)
        if key in self.known_commits:
            return self.known_commits[key]
        row = self.known_commits[key] = log.lookup_commits(
            self.conn, scope, [commit_id]).get(commit_id)
        return row

    def commit_exists(self, scope: Scope, commit_id: str) -> bool:
        """True when *commit_id* is in *scope*'s commit-id index or was appended earlier in
        this group (RUN-CMT-3)."""
        return (scope, commit_id) in self.index or self._commit_row(scope, commit_id) is not None

    def replay_facts(self, scope: Scope, commit_id: str, run_id: RunID
                     ) -> tuple[Fact, ...] | None:
        """The facts *commit_id* appended to *run_id*'s stream, or None if unknown."""
        staged = self.index.get((scope, commit_id))
        if staged is not None:
            return staged.facts if staged.run_id == run_id else ()
        row = self._commit_row(scope, commit_id)
        if row is None:
            return None
        return log.commit_facts(self.conn, scope, commit_id, run_id, row)

    def stream_head(self, scope: Scope, stream: str) -> int:
        """The next index of *stream* in *scope* inside this group: read once from the
        log, then the group's own count (jobs of one group append in order). RUN-STO-3."""
        key = (scope, stream)
        head = self.heads.get(key)
        if head is None:
            head = self.heads[key] = log.stream_head(self.conn, scope, stream)
        return head

    # -- writes ------------------------------------------------------------------------

    def chain_before(self, scope: Scope, stream: str, idx: int,
                     written: dict[tuple[Scope, str], tuple[int, bytes]]) -> bytes:
        """The chain digest of row *idx* - 1 of *stream* (its genesis for *idx* 0): from
        *written* (this write), the group's, this writer's committed heads, else the
        database (RUN-STO-3).

        Raises:
            CorruptRecordError: the row before is missing.
        """
        if idx == 0:
            return genesis(scope, stream)
        key = (scope, stream)
        for known in (written, self.chains, self.chain_heads):
            entry = known.get(key)
            if entry is not None and entry[0] == idx - 1:
                return entry[1]
        chain = log.event_chain(self.conn, scope, stream, idx - 1)
        if chain is None:
            raise CorruptRecordError(
                f"stream {stream!r} in scope {scope!r} has no event {idx - 1} to chain to",
                scope=scope, stream=stream, position=idx - 1, type="", table="events",
                row=f"{scope}/{stream}#{idx - 1}", reason="gap")
        return chain

    def stage(self, plan: Plan) -> None:
        """Make an accepted job's writes visible to the later jobs of the group."""
        for ws, run_id, snap in plan.changes:
            self.overlay[(id(ws), run_id)] = snap
            self.known_runs[(ws.scope, run_id)] = True
        for c in plan.commits:
            self.index[(c.scope, c.commit_id)] = c
            for stream, idx, _, _ in c.events:
                self.heads[(c.scope, stream)] = idx

    def write(self, plan: Plan) -> None:
        """Write *plan*'s rows: one multi-row statement per table (and chunk).

        Raises:
            ProjectionDivergenceError: a Run's stored head is not the projection's.
            sqlite3.Error: a constraint (e.g. a commit id or event position that exists).
        """
        conn = self.conn
        written: dict[tuple[Scope, str], tuple[int, bytes]] = {}
        bodies = [(digest, data) for digest, data in plan.frozen.items()
                  if digest not in self.frozen_known]
        if bodies:
            log.frozen_put_many(conn, bodies)
        if plan.commits:
            seq = self.seq if self.seq is not None else log.max_seq(conn)
            commits, events = [], []
            for c in plan.commits:
                seq += 1
                commits.append((seq, c.scope, c.commit_id, c.epoch, c.run_id, c.first,
                                len(c.facts)))
                scope = c.scope
                for stream, idx, type_, data in c.events:
                    chain = link(self.chain_before(scope, stream, idx, written), c.commit_id,
                                 type_, data)
                    written[(scope, stream)] = (idx, chain)
                    events.append((scope, stream, idx, type_, data, seq, chain))
            log.insert_commits(conn, commits)
            log.insert_events(conn, events)
            self.seq = seq
        if plan.new_runs:
            log.insert_runs(conn, [(scope, run_id, head, active)
                                   for (scope, run_id), (head, active)
                                   in plan.new_runs.items()])
        if plan.advances:
            log.advance_runs(conn, [(scope, run_id, old, head, active)
                                    for (scope, run_id), (old, head, active)
                                    in plan.advances.items()])
        if plan.cache:
            put = [(scope, run_id, snap.position, log.encode_state(snap.state))
                   for (scope, run_id), snap in plan.cache.items() if snap is not None]
            drop: dict[Scope, list[RunID]] = {}
            for (scope, run_id), snap in plan.cache.items():
                if snap is None:
                    drop.setdefault(scope, []).append(run_id)
            if put:
                log.put_cache(conn, put)
            for scope, run_ids in drop.items():
                log.delete_cache(conn, scope, run_ids)
        self.chains.update(written)


class _View:
    """``CommitView`` over the running overlay and the log inside the transaction."""

    def __init__(self, tx: GroupTx, ws: WriterState) -> None:
        self._tx = tx
        self._ws = ws

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[Fact, ...] | None:
        return self._tx.replay_facts(self._ws.scope, command_id, run_id)

    def active(self, run_id: RunID) -> Snapshot | None:
        return self._tx.active(self._ws, run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        return self._tx.stream_exists(self._ws, run_id)


class Job(JobBase[T]):
    """A unit of work for the writer thread; ``done`` is set (in trio) once answered.

    ``run`` evaluates the job against the running view and returns its answer plus the
    rows to write; it writes nothing itself (except ``alone`` jobs, which run in a
    savepoint of their own).
    """

    #: Jobs that must run in a transaction of their own.
    alone = False
    #: ``(scope, commit id)`` the job looks up first, for the group's prefetch.
    commit_key: tuple[Scope, str] | None = None
    #: ``(scope, run id)`` of a Run the job creates, for the group's prefetch.
    new_run_key: RunKey | None = None

    def __init__(self) -> None:
        super().__init__()
        #: Set by the writer thread when the answer was handed to trio.
        self.answered = False

    def commit_keys(self) -> tuple[tuple[Scope, str], ...]:
        """The ``(scope, commit id)`` pairs the job looks up, for the group's prefetch."""
        return (self.commit_key,) if self.commit_key is not None else ()

    def run(self, tx: GroupTx) -> tuple[T, Plan]:
        """Evaluate the job against *tx*'s running view of the group; return its answer
        and the Plan (the rows to write and the writer-state changes, applied when the
        group commits). Raises the job's typed refusal (OwnershipLostError once fenced,
        ValidationError, …), which fails this job alone."""
        raise NotImplementedError


def _foreign_rows(
    tx: GroupTx, scope: Scope, events: Sequence[ForeignEvent]
) -> list[tuple[str, int, str, bytes]]:
    return foreign_rows(lambda stream: tx.stream_head(scope, stream), events)


def _active(snap: Snapshot) -> int:
    return int(snap.state.status is RunStatus.ACTIVE)


class CommitJob(Job[CommitResult]):
    """Freeze bodies, then evaluate and append one command (§4.2, §4.3)."""

    def __init__(self, ws: WriterState, request: CommitRequest,
                 bodies: Sequence[tuple[Digest, bytes]]) -> None:
        super().__init__()
        self.ws = ws
        self.request = request
        self.bodies = bodies
        self.commit_key = (ws.scope, request.envelope.id)

    def run(self, tx: GroupTx) -> tuple[CommitResult, Plan]:
        """Evaluate one command (RUN-CMT-3): a known commit id answers ALREADY_APPLIED
        with the original facts (RUN-CMT-5), else its facts, head and cache entry are
        planned; OwnershipLostError once fenced (RUN-CMT-6)."""
        ws, request = self.ws, self.request
        tx.check_epoch(ws)
        plan = Plan()
        for digest, data in self.bodies:
            plan.frozen.setdefault(digest, data)
        run_id = request.envelope.run_id
        before = tx.active(ws, run_id)
        decision = evaluate_commit(_View(tx, ws), request, scope=ws.scope)
        if isinstance(decision, Replay):
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(ws, run_id),
                                decision.facts), plan
        assert isinstance(decision, Append)
        plan.merge(_append_plan(ws, request, decision, before))
        return CommitResult(CommitStatus.ACCEPTED, decision.snapshot, decision.facts), plan


def _append_plan(ws: WriterState, request: CommitRequest, decision: Append,
                 before: Snapshot | None) -> Plan:
    """The rows of one accepted command: its commit record and events, the Run's head
    and the cache entry (*before*: the Run's active snapshot before the command)."""
    plan = Plan()
    run_id = request.envelope.run_id
    facts, snap = decision.facts, decision.snapshot
    first = snap.position - len(facts) + 1
    stream = run_stream(run_id)
    plan.commits.append(_Commit(
        ws.scope, request.envelope.id, ws.epoch, run_id, first, facts,
        [(stream, first + i, type_, data) for i, (type_, data) in enumerate(run_items(facts))],
    ))
    plan.advances[(ws.scope, run_id)] = (first - 1, snap.position, _active(snap))
    was_open = before is not None and isinstance(before.state.current, Open)
    plan.cache_after(ws, run_id, snap, was_open=was_open)
    plan.changes.append((ws, run_id, snap))
    return plan


class BatchJob(Job[BatchResult]):
    """Freeze bodies, then evaluate a batch of one Run's commands and append its
    evaluated prefix (RUN-CMT-9): one job, so all its rows are in one transaction (which
    it may share with other jobs of the group), and the projection moves after COMMIT."""

    def __init__(self, ws: WriterState, requests: Sequence[CommitRequest],
                 bodies: Sequence[Sequence[tuple[Digest, bytes]]]) -> None:
        super().__init__()
        self.ws = ws
        self.requests = tuple(requests)
        #: The bodies of each request (only the evaluated requests' are stored, as
        #: ``commit`` stores none of a refused command's).
        self.bodies = bodies

    def commit_keys(self) -> tuple[tuple[Scope, str], ...]:
        """The (scope, commit id) of every command of the batch, in order (RUN-CMT-10)."""
        return tuple((self.ws.scope, r.envelope.id) for r in self.requests)

    def run(self, tx: GroupTx) -> tuple[BatchResult, Plan]:
        """Evaluate the batch's commands in order (RUN-CMT-9) and plan the rows of the
        evaluated prefix, each command under its own commit id; answers every result and
        the refusal that stopped the batch, if any; OwnershipLostError once fenced."""
        ws = self.ws
        tx.check_epoch(ws)
        plan = Plan()
        run_id = self.requests[0].envelope.run_id
        before = tx.active(ws, run_id)
        decisions, error = evaluate_batch(_View(tx, ws), self.requests, scope=ws.scope)
        for each in self.bodies[:len(decisions)]:
            for digest, data in each:
                plan.frozen.setdefault(digest, data)
        results = batch_results(decisions, lambda: tx.load(ws, run_id))
        for request, decision in zip(self.requests, decisions, strict=False):
            if isinstance(decision, Append):
                plan.merge(_append_plan(ws, request, decision, before))
                before = decision.snapshot
        return BatchResult(results, error), plan


class CreateJob(Job[CommitResult]):
    """Create a Run plus foreign events in one commit (§4.9, D-8)."""

    def __init__(self, ws: WriterState, new_run: NewRun, inputs: Sequence[AgentInput],
                 commit_id: str, extra_events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.ws = ws
        self.new_run = new_run
        self.inputs = tuple(inputs)
        self.commit_id = commit_id
        self.extra_events = tuple(extra_events)
        self.commit_key = (ws.scope, commit_id)
        self.new_run_key = (ws.scope, new_run.run_id)

    def run(self, tx: GroupTx) -> tuple[CommitResult, Plan]:
        """Plan the Run's creation group and the foreign events in one commit (D-8); a
        known commit id answers ALREADY_APPLIED (RUN-CMT-5). Raises ValidationError (no
        commit id), RunExistsError, OwnershipLostError once fenced."""
        ws, run_id = self.ws, self.new_run.run_id
        tx.check_epoch(ws)
        if not self.commit_id:
            raise ValidationError("create_run needs a commit id")
        plan = Plan()
        prior = tx.replay_facts(ws.scope, self.commit_id, run_id)
        if prior is not None:
            return CommitResult(CommitStatus.ALREADY_APPLIED, tx.load(ws, run_id), prior), plan
        if tx.stream_exists(ws, run_id):
            raise RunExistsError(f"run {run_id!r} exists", run_id=run_id)
        group = create_group(self.new_run, self.inputs)
        check_foreign(self.extra_events)
        snap = Snapshot(fold_run(group, run_id=run_id), len(group) - 1)
        stream = run_stream(run_id)
        events = [(stream, i, type_, data) for i, (type_, data) in enumerate(run_items(group))]
        events += _foreign_rows(tx, ws.scope, self.extra_events)
        plan.commits.append(_Commit(ws.scope, self.commit_id, ws.epoch, run_id, 0, group,
                                    events))
        plan.new_runs[(ws.scope, run_id)] = (snap.position, _active(snap))
        plan.cache_after(ws, run_id, snap)
        plan.changes.append((ws, run_id, snap))
        return CommitResult(CommitStatus.ACCEPTED, snap, group), plan


class AppendJob(Job[CommitStatus]):
    """Append foreign events under a commit id (§4.8); a known id replays."""

    def __init__(self, ws: WriterState, commit_id: str,
                 events: Sequence[ForeignEvent]) -> None:
        super().__init__()
        self.ws = ws
        self.commit_id = commit_id
        self.events = tuple(events)
        self.commit_key = (ws.scope, commit_id)

    def run(self, tx: GroupTx) -> tuple[CommitStatus, Plan]:
        """Plan the foreign events under the commit id (§4.8); a known id answers
        ALREADY_APPLIED and plans nothing (RUN-CMT-5). Raises ValidationError for an empty
        commit id or no events, OwnershipLostError once fenced."""
        ws = self.ws
        tx.check_epoch(ws)
        if not self.commit_id:
            raise ValidationError("append_events needs a commit id")
        plan = Plan()
        if tx.commit_exists(ws.scope, self.commit_id):
            return CommitStatus.ALREADY_APPLIED, plan
        check_foreign(self.events)
        if not self.events:
            raise ValidationError("append_events needs at least one event")
        plan.commits.append(_Commit(ws.scope, self.commit_id, ws.epoch, None, 0, (),
                                    _foreign_rows(tx, ws.scope, self.events)))
        return CommitStatus.ACCEPTED, plan


class OpenJob(Job[tuple[int, Projection, set[RunID]]]):
    """Bump the scope's epoch and rebuild its projection (its own transaction); also
    answers the Runs whose cache entry holds their snapshot (``WriterState.cached``)."""

    alone = True

    def __init__(self, scope: Scope) -> None:
        super().__init__()
        self.scope = scope

    def run(self, tx: GroupTx) -> tuple[tuple[int, Projection, set[RunID]], Plan]:
        """Bump the scope's epoch (RUN-CMT-6) and rebuild its projection from the cache
        and the logs' tails (RUN-CMT-2); answers (epoch, projection, the Runs whose cache
        entry holds their snapshot)."""
        epoch = log.bump_epoch(tx.conn, self.scope)
        cached: set[RunID] = set()
        projection = Projection(log.rebuild_projection(tx.conn, self.scope, cached))
        return (epoch, projection, cached), Plan()


class PutJob(Job[None]):
    """Store a frozen body (idempotent); the digest was checked by the caller."""

    def __init__(self, digest: Digest, data: bytes) -> None:
        super().__init__()
        self.digest = digest
        self.data = data

    def run(self, tx: GroupTx) -> tuple[None, Plan]:
        """Plan the body under its digest (idempotent: a body already stored is kept)."""
        plan = Plan()
        plan.frozen[self.digest] = self.data
        return None, plan


class CheckpointJob(Job[int]):
    """Cache every active Run's snapshot at its head (RUN-CMT-2: the cache is
    disposable, so any position is valid): run when a writer closes cleanly, so the next
    open loads one cache row per Run and folds no log tail. A Run whose entry already
    holds its snapshot (``WriterState.cached``: read so at open, or written since) is not
    written again. Answers the number of entries written; raises OwnershipLostError
    (nothing written) once fenced."""

    alone = True

    def __init__(self, ws: WriterState) -> None:
        super().__init__()
        self.ws = ws

    def run(self, tx: GroupTx) -> tuple[int, Plan]:
        """Plan the cache entry of every active Run whose entry does not hold its snapshot
        (RUN-CMT-2); answers how many; OwnershipLostError once fenced."""
        ws = self.ws
        log.check_epoch(tx.conn, ws.scope, ws.epoch)
        plan = Plan()
        for run_id, snap in ws.uncached().items():
            plan.put_cache(ws, run_id, snap)
        return len(plan.cache), plan
