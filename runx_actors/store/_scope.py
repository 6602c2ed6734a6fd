"""The synchronous log model of one scope (spec §4.7, §4.8; RUN-CMT-2, RUN-CMT-3).

``ScopeLog`` is the reference implementation of a scope's log: an ordered list of
commits, a commit-id index, streams of typed-envelope events, the epoch, and a
disposable projection cache. It does no I/O and never awaits, so "evaluate then append"
is atomic by construction. The memory store wraps it; other stores are held to it by
the conformance suite.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from ..protocol._codec import decode_fact, encode_fact
from ..protocol._evolve import evolve_all
from ..protocol.canonical import read_envelope, typed_envelope
from ..protocol.commit import (
    MAX_ID_BYTES,
    Append,
    BatchResult,
    CommitDecision,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Replay,
    Snapshot,
    check_batch,
    create_group,
    evaluate_batch,
    evaluate_commit,
    fold_run,
    validate_name,
)
from ..protocol.errors import (
    FrozenValueMissingError,
    OwnershipLostError,
    ProjectionDivergenceError,
    RunExistsError,
    RunNotFoundError,
    ValidationError,
)
from ..protocol.facts import EVENT_TYPE_PREFIX, Fact
from ..protocol.state import MachineState, Open
from ..protocol.values import AgentInput, CommandID, Digest, NewRun, RunID, RunStatus, Scope
from .base import ForeignEvent, StoredEvent, StreamRecord, check_foreign, run_stream

__all__ = [
    "ScopeLog", "Commit", "Projection", "FrozenBodies", "check_frozen", "check_divergence",
    "integral_ints", "batch_results",
]


@attrs.frozen
class Commit:
    """One commit of the memory log: its id, epoch, and the events it appended."""

    commit_id: str
    epoch: int
    events: tuple[StoredEvent, ...]


def check_frozen(digest: Digest, data: bytes) -> None:
    """Raise ValidationError unless ``"sha256:" + sha256(data) == digest`` (RUN-WIR-4)."""
    if "sha256:" + hashlib.sha256(data).hexdigest() != digest:
        raise ValidationError("frozen body does not hash to its digest", digest=digest)


def check_divergence(run_id: RunID, record: Snapshot, projected: Snapshot | None) -> None:
    """Raise ProjectionDivergenceError if *projected* (a writer's projection entry, if
    any) is at *record*'s position but holds another state."""
    if (projected is not None and projected.position == record.position
            and projected.state != record.state):
        raise ProjectionDivergenceError(
            f"record of {run_id!r} differs from the projection", run_id=run_id,
            record=record, projection=projected,
        )


def integral_ints(value: Any) -> Any:
    """Turn integral floats (as strict parsing yields them) back into ints, recursively."""
    if isinstance(value, float) and value.is_integer() and abs(value) <= 2**53 - 1:
        return int(value)
    if isinstance(value, list):
        return [integral_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: integral_ints(v) for k, v in value.items()}
    return value


def batch_results(
    decisions: Sequence[CommitDecision], current: Callable[[], Snapshot]
) -> tuple[CommitResult, ...]:
    """The CommitResults of a batch's evaluated prefix (RUN-CMT-9).

    An ``Append`` is ACCEPTED at its snapshot; a ``Replay`` is ALREADY_APPLIED at the
    Run's snapshot as left by the requests before it: the last Append's of the batch, or
    ``current()`` (the snapshot before the batch, as ``commit`` answers a replay) when
    none appended yet.
    """
    out: list[CommitResult] = []
    last: Snapshot | None = None
    for d in decisions:
        if isinstance(d, Append):
            last = d.snapshot
            out.append(CommitResult(CommitStatus.ACCEPTED, d.snapshot, d.facts))
        else:
            if last is None:
                last = current()
            out.append(CommitResult(CommitStatus.ALREADY_APPLIED, last, d.facts))
    return tuple(out)


class FrozenBodies:
    """An in-memory FrozenStore core (synchronous)."""

    def __init__(self) -> None:
        self._bodies: dict[Digest, bytes] = {}

    def put(self, digest: Digest, data: bytes) -> None:
        """Keep *data* under *digest* (first write wins). Raises ValidationError when
        *data* does not hash to *digest* (RUN-WIR-4)."""
        check_frozen(digest, data)
        self._bodies.setdefault(digest, bytes(data))

    def get(self, digest: Digest) -> bytes:
        """The body under *digest*. Raises FrozenValueMissingError."""
        try:
            return self._bodies[digest]
        except KeyError:
            raise FrozenValueMissingError(f"no frozen body {digest}", digest=digest) from None

    def __len__(self) -> int:
        return len(self._bodies)

    def __contains__(self, digest: object) -> bool:
        return digest in self._bodies

    def discard(self, digests: Sequence[Digest]) -> None:
        """Forget *digests* (bodies a failed batch had just stored, RUN-CMT-9)."""
        for digest in digests:
            self._bodies.pop(digest, None)


class Projection:
    """The machine projection of one writer: active Runs' snapshots (RUN-CMT-2)."""

    def __init__(self, active: dict[RunID, Snapshot] | None = None) -> None:
        self.active: dict[RunID, Snapshot] = dict(active or {})

    def apply(self, run_id: RunID, snapshot: Snapshot) -> None:
        """Track *snapshot* while the Run is active; drop the Run once it has ended."""
        if snapshot.state.status is RunStatus.ACTIVE:
            self.active[run_id] = snapshot
        else:
            self.active.pop(run_id, None)


class ScopeLog:
    """One scope's durable log (kept in memory) plus its persisted epoch."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.epoch = 0
        self.commits: list[Commit] = []
        self.index: dict[CommandID, Commit] = {}
        self.streams: dict[str, list[StoredEvent]] = {}
        #: The durable projection cache: written only when a Run is at Open or ends.
        self.cache: dict[RunID, Snapshot] = {}
        #: (run_id, position, "open" | "ended") for every cache write, for observability.
        self.cache_writes: list[tuple[RunID, int, str]] = []
        #: One copy of each event type name (a few dozen at most), shared by the events.
        self._types: dict[str, str] = {}
        #: Atomic appends (a commit, a batch, a creation, foreign events that appended)
        #: and the commit records they wrote: what a durable store would fsync.
        self.transactions = 0
        self.appended = 0
        self.largest_batch = 0

    # -- ownership -------------------------------------------------------------------

    def open(self) -> tuple[int, Projection]:
        """Bump the epoch and rebuild a projection from the cache and the log tail."""
        self.epoch += 1
        return self.epoch, self.rebuild_projection()

    def check_epoch(self, epoch: int) -> None:
        """Raise OwnershipLostError unless *epoch* is the scope's current one (fencing,
        RUN-CMT-6)."""
        if epoch != self.epoch:
            raise OwnershipLostError(
                f"scope {self.scope!r} is owned by epoch {self.epoch}, not {epoch}",
                scope=self.scope, epoch=epoch, current_epoch=self.epoch,
            )

    def rebuild_projection(self) -> Projection:
        """Fold every Run stream again: the projection as an open computes it."""
        proj = Projection()
        for stream, events in self.streams.items():
            if not stream.startswith("run/"):
                continue
            run_id = stream[4:]
            cached = self.cache.get(run_id)
            if cached is not None and cached.position < len(events):
                state = evolve_all(cached.state, [decode_fact(e.data)
                                                  for e in events[cached.position + 1 :]])
                assert state is not None  # folded onto a cached Run state
                snap = Snapshot(state, len(events) - 1)
            else:
                snap = Snapshot(self.fold(run_id), len(events) - 1)
            proj.apply(run_id, snap)
        return proj

    # -- reads -----------------------------------------------------------------------

    def stream_exists(self, run_id: RunID) -> bool:
        """True when the Run's stream exists in this scope."""
        return run_stream(run_id) in self.streams

    def facts(self, run_id: RunID, *, tail: int | None = None) -> tuple[Fact, ...]:
        """The Run's facts, decoded (only the last *tail* of them when given, ≥ 1).
        RunNotFoundError."""
        events = self.streams.get(run_stream(run_id))
        if events is None:
            raise RunNotFoundError(f"run {run_id!r} not found", run_id=run_id)
        if tail is not None:
            if tail < 1:
                raise ValueError(f"tail must be at least 1, got {tail}")
            events = events[-tail:]
        return tuple(decode_fact(e.data) for e in events)

    def read_stream(self, stream: str) -> tuple[StreamRecord, ...]:
        """Decoded events of *stream* (foreign or run), in order."""
        out = []
        for e in self.streams.get(stream, ()):
            _, payload = read_envelope(e.data, record=e.type)
            out.append(StreamRecord(e.stream, e.index, e.type, integral_ints(payload),
                                    e.commit_id, e.epoch))
        return tuple(out)

    def fold(self, run_id: RunID) -> MachineState:
        """The Run's log folded (raises RunNotFoundError, CorruptLogError)."""
        return fold_run(self.facts(run_id), run_id=run_id)

    def record(self, run_id: RunID, projection: Projection | None) -> Snapshot:
        """The Run's log folded into a snapshot (RUN-CMT-2), checked against *projection*
        when given (ProjectionDivergenceError)."""
        facts = self.facts(run_id)
        snap = Snapshot(fold_run(facts, run_id=run_id), len(facts) - 1)
        if projection is not None:
            check_divergence(run_id, snap, projection.active.get(run_id))
        return snap

    def load(self, run_id: RunID, projection: Projection) -> Snapshot:
        """*run_id*'s snapshot: the writer's *projection* when the Run is active there,
        else the Run's folded log (:meth:`record`; the ended snapshot). RunStore.load's
        memory path (RUN-CMT-2). Raises RunNotFoundError, CorruptLogError."""
        snap = projection.active.get(run_id)
        if snap is not None:
            return snap
        return self.record(run_id, None)

    # -- writes ----------------------------------------------------------------------

    def _append(
        self, commit_id: str, epoch: int, items: Sequence[tuple[str, str, bytes]]
    ) -> Commit:
        events = []
        sizes: dict[str, int] = {}
        types = self._types
        for stream, type_, data in items:
            held = self.streams.get(stream)
            if held:  # one copy of the stream name per stream, not one per event
                stream = held[0].stream
            base = (len(held) if held else 0) + sizes.get(stream, 0)
            sizes[stream] = sizes.get(stream, 0) + 1
            events.append(StoredEvent(stream, base, types.setdefault(type_, type_), data,
                                      commit_id, epoch))
        commit = Commit(commit_id, epoch, tuple(events))
        for e in events:
            self.streams.setdefault(e.stream, []).append(e)
        self.commits.append(commit)
        self.index[commit_id] = commit
        return commit

    def _write_cache(self, run_id: RunID, snap: Snapshot) -> None:
        if snap.state.status is not RunStatus.ACTIVE:
            self.cache.pop(run_id, None)
            self.cache_writes.append((run_id, snap.position, "ended"))
        elif isinstance(snap.state.current, Open):
            self.cache[run_id] = snap
            self.cache_writes.append((run_id, snap.position, "open"))

    def commit(self, epoch: int, projection: Projection, request: CommitRequest) -> CommitResult:
        """Evaluate and append *request* atomically (§4.3); fenced by *epoch*."""
        self.check_epoch(epoch)
        run_id = request.envelope.run_id
        view = _View(self, projection)
        decision = evaluate_commit(view, request, scope=self.scope)
        if isinstance(decision, Replay):
            return CommitResult(CommitStatus.ALREADY_APPLIED, self.load(run_id, projection),
                                decision.facts)
        assert isinstance(decision, Append)
        stream = run_stream(run_id)
        self._append(
            request.envelope.id, epoch,
            [(stream, EVENT_TYPE_PREFIX + f.WIRE_NAME, encode_fact(f)) for f in decision.facts],
        )
        projection.apply(run_id, decision.snapshot)
        self._write_cache(run_id, decision.snapshot)
        self._count(1)
        return CommitResult(CommitStatus.ACCEPTED, decision.snapshot, decision.facts)

    def commit_batch(
        self, epoch: int, projection: Projection, requests: Sequence[CommitRequest]
    ) -> BatchResult:
        """Evaluate the batch *requests* (one Run) and append its evaluated prefix as one
        atomic write (RUN-CMT-9); fenced by *epoch*.

        Each request is evaluated as :meth:`commit` would on the log left by the earlier
        ones (``evaluate_batch``); the first refusal ends the batch and is returned in
        ``BatchResult.error``. Should an append fail midway, everything the batch
        appended is taken back before the error propagates.

        Raises: ValidationError (empty batch, mixed Runs), OwnershipLostError (nothing
        written).
        """
        run_id = check_batch(requests)
        self.check_epoch(epoch)
        decisions, error = evaluate_batch(_View(self, projection), requests, scope=self.scope)
        results = batch_results(decisions, lambda: self.load(run_id, projection))
        appends = [(r, d) for r, d in zip(requests, decisions, strict=False)
                   if isinstance(d, Append)]
        if appends:
            stream = run_stream(run_id)
            mark = (len(self.commits), dict(self.cache), len(self.cache_writes))
            try:
                for request, d in appends:
                    self._append(request.envelope.id, epoch,
                                 [(stream, EVENT_TYPE_PREFIX + f.WIRE_NAME, encode_fact(f))
                                  for f in d.facts])
                    self._write_cache(run_id, d.snapshot)
            except BaseException:
                self._take_back(*mark)
                raise
            projection.apply(run_id, appends[-1][1].snapshot)
            self._count(len(appends))
        return BatchResult(results, error)

    def _take_back(self, commits: int, cache: dict[RunID, Snapshot], cache_writes: int
                   ) -> None:
        """Undo the appends after the first *commits* commits (a failed batch)."""
        for commit in reversed(self.commits[commits:]):
            self.index.pop(commit.commit_id, None)
            for e in reversed(commit.events):
                events = self.streams[e.stream]
                events.pop()
                if not events:
                    del self.streams[e.stream]
        del self.commits[commits:]
        self.cache.clear()
        self.cache.update(cache)
        del self.cache_writes[cache_writes:]

    def _count(self, commits: int) -> None:
        self.transactions += 1
        self.appended += commits
        self.largest_batch = max(self.largest_batch, commits)

    def create_run(
        self, epoch: int, projection: Projection, new_run: NewRun,
        inputs: Sequence[AgentInput], commit_id: str, extra_events: Sequence[ForeignEvent],
    ) -> CommitResult:
        """Append a creation group plus foreign events in one commit (§4.9, D-8)."""
        self.check_epoch(epoch)
        if not commit_id:
            raise ValidationError("create_run needs a commit id")
        validate_name(commit_id, "commit id", MAX_ID_BYTES)
        prior = self.index.get(commit_id)
        if prior is not None:
            facts = tuple(
                decode_fact(e.data) for e in prior.events if e.stream == run_stream(new_run.run_id)
            )
            return CommitResult(CommitStatus.ALREADY_APPLIED,
                                self.load(new_run.run_id, projection), facts)
        if self.stream_exists(new_run.run_id):
            raise RunExistsError(f"run {new_run.run_id} exists", run_id=new_run.run_id)
        group = create_group(new_run, inputs)
        check_foreign(extra_events)
        stream = run_stream(new_run.run_id)
        items = [(stream, EVENT_TYPE_PREFIX + f.WIRE_NAME, encode_fact(f)) for f in group]
        items += [(e.stream, e.type, typed_envelope(e.type, e.payload)) for e in extra_events]
        state = fold_run(group, run_id=new_run.run_id)
        self._append(commit_id, epoch, items)
        snap = Snapshot(state, len(group) - 1)
        projection.apply(new_run.run_id, snap)
        self._write_cache(new_run.run_id, snap)
        self._count(1)
        return CommitResult(CommitStatus.ACCEPTED, snap, group)

    def append_events(
        self, epoch: int, commit_id: str, events: Sequence[ForeignEvent]
    ) -> CommitStatus:
        """Append foreign events under *commit_id*; a known id replays (§4.8)."""
        self.check_epoch(epoch)
        if not commit_id:
            raise ValidationError("append_events needs a commit id")
        validate_name(commit_id, "commit id", MAX_ID_BYTES)
        if commit_id in self.index:
            return CommitStatus.ALREADY_APPLIED
        check_foreign(events)
        if not events:
            raise ValidationError("append_events needs at least one event")
        self._append(commit_id, epoch,
                     [(e.stream, e.type, typed_envelope(e.type, e.payload)) for e in events])
        self._count(1)
        return CommitStatus.ACCEPTED


class _View:
    """``CommitView`` over a ScopeLog and one writer's projection."""

    def __init__(self, log: ScopeLog, projection: Projection) -> None:
        self._log = log
        self._projection = projection

    def replay_facts(self, command_id: CommandID, run_id: RunID) -> tuple[Fact, ...] | None:
        commit = self._log.index.get(command_id)
        if commit is None:
            return None
        stream = run_stream(run_id)
        return tuple(decode_fact(e.data) for e in commit.events if e.stream == stream)

    def active(self, run_id: RunID) -> Snapshot | None:
        return self._projection.active.get(run_id)

    def stream_exists(self, run_id: RunID) -> bool:
        return self._log.stream_exists(run_id)
