"""What the inspection commands read from a store (issue 10; APP-INS-1, APP-INS-2).

Everything here is a read: it needs no ownership of the scope and writes nothing.
``list_runs`` reads the store's ``runs`` table (SQLite or PostgreSQL); ``run_view`` folds
one Run (state, waiting calls, usage, answer); ``log_entries`` lists its facts with their
positions, epochs and commit ids; ``build_timeline`` turns the log into lanes of spans and
marks on the log's position axis (the store records no wall-clock time: the axis is the
commit order, which is the order things happened in).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import attrs

from ..protocol import facts as F
from ..protocol.errors import RunNotFoundError
from ..protocol.state import Open, ToolStep
from ..protocol.values import ResponsePolicy, ToolFailureOutcome, Usage
from ..runtime._app import read_answer, waiting_for
from ..runtime._results import Answer, WaitingCall
from ..store.base import FrozenStore, SessionReader, StreamRecord

__all__ = [
    "RunRow", "RunView", "LogEntry", "Span", "Mark", "EpochBand", "Timeline", "list_runs",
    "run_view", "log_entries", "build_timeline", "find_scopes", "scope_exists",
]


@attrs.frozen(kw_only=True)
class RunRow:
    """One Run of ``runs list``: scope, id, status (``active`` or how it ended), head
    position (index of its last fact), number of waiting calls."""

    scope: str
    run_id: str
    status: str
    head: int
    waiting: int


@attrs.frozen(kw_only=True)
class RunView:
    """``runs show``: the Run's status and reason, the current step (``model``/``tool``
    and its status, or ``""``), waiting calls, token usage summed over its model steps,
    the answer (last completed model step), its head position and last epoch."""

    scope: str
    run_id: str
    status: str
    reason: str
    failure: dict[str, str] | None
    current: str
    waiting: tuple[WaitingCall, ...]
    usage: Usage
    answer: Answer | None
    head: int
    epoch: int


@attrs.frozen(kw_only=True)
class LogEntry:
    """One fact of ``runs log``: position, fact name, epoch and commit id of the commit
    that appended it, and its JSON payload."""

    position: int
    fact: str
    epoch: int
    commit_id: str
    payload: Any


async def _sql(store: Any, sqlite_text: str, pg_text: str, *params: Any) -> list[Any]:
    """Run a read-only query on the store's own connection (a worker thread)."""
    pg = type(store).__module__.endswith("postgres")
    text = pg_text if pg else sqlite_text

    def query(conn: Any) -> list[Any]:
        return list(conn.execute(text, params).fetchall())

    rows: list[Any] = await store._call(query)
    return rows


async def find_scopes(store: Any, run_id: str) -> list[str]:
    """The scopes holding a Run *run_id* (sorted)."""
    rows = await _sql(store, "SELECT scope FROM runs WHERE run_id = ? ORDER BY scope",
                      "SELECT scope FROM runs WHERE run_id = %s ORDER BY scope", run_id)
    return [str(r[0]) for r in rows]


async def scope_exists(store: Any, scope: str) -> bool:
    """Whether *store* has *scope*: an epoch row (it was opened) or a commit."""
    rows = await _sql(
        store, "SELECT 1 FROM scopes WHERE scope = ? UNION ALL "
               "SELECT 1 FROM commits WHERE scope = ? LIMIT 1",
        "SELECT 1 FROM scopes WHERE scope = %s UNION ALL "
        "SELECT 1 FROM commits WHERE scope = %s LIMIT 1", scope, scope)
    return bool(rows)


def _status(state: Any) -> str:
    if state.result is None:
        return "active"
    return str(state.result.status.value)


async def list_runs(store: Any, *, scope: str | None = None,
                    status: Sequence[str] = ()) -> list[RunRow]:
    """The Runs of *store* (of *scope* only, when given), sorted by scope and id, whose
    status is one of *status* (all when empty). Raises CorruptRecordError."""
    if scope is None:
        rows = await _sql(store, "SELECT scope, run_id FROM runs ORDER BY scope, run_id",
                          "SELECT scope, run_id FROM runs ORDER BY scope, run_id")
    else:
        rows = await _sql(
            store, "SELECT scope, run_id FROM runs WHERE scope = ? ORDER BY run_id",
            "SELECT scope, run_id FROM runs WHERE scope = %s ORDER BY run_id", scope)
    readers: dict[str, SessionReader] = {}
    out = []
    for sc, run_id in rows:
        reader = readers.get(sc)
        if reader is None:
            reader = readers[sc] = await store.reader(sc)
        snap = await reader.record(run_id)
        st = _status(snap.state)
        if status and st not in status:
            continue
        out.append(RunRow(scope=str(sc), run_id=str(run_id), status=st, head=snap.position,
                          waiting=len(waiting_for(snap.state))))
    return out


def _current(state: Any) -> str:
    cur = state.current
    if cur is None:
        return ""
    if isinstance(cur, Open):
        return "open (between steps)"
    if isinstance(cur, ToolStep):
        statuses = sorted({c.status.value for c in cur.calls})
        return f"tool ({', '.join(statuses)})"
    return f"model ({cur.status.value})"


async def run_view(reader: SessionReader, frozen: FrozenStore, scope: str,
                   run_id: str) -> RunView:
    """Fold *run_id* and describe it (see :class:`RunView`). Raises RunNotFoundError,
    CorruptRecordError."""
    snap = await reader.record(run_id)
    state = snap.state
    facts = await reader.run_facts(run_id)
    usage = Usage()
    for fact in facts:
        if isinstance(fact, (F.ModelStepCompleted, F.ModelStepRejected)):
            usage = usage + fact.usage
    records = await reader.read_stream(f"run/{run_id}")
    result = state.result
    failure = None
    if result is not None and result.failure is not None:
        failure = {k.rstrip("_"): str(v) for k, v in attrs.asdict(result.failure).items()}
    return RunView(scope=scope, run_id=run_id, status=_status(state),
                   reason=str(result.reason.value) if result is not None else "",
                   failure=failure, current=_current(state), waiting=waiting_for(state),
                   usage=usage, answer=await read_answer(reader, frozen, run_id),
                   head=snap.position, epoch=records[-1].epoch if records else 0)


def _fact_name(record: StreamRecord) -> str:
    return record.type.rsplit("/", 1)[-1]


async def log_entries(reader: SessionReader, run_id: str) -> list[LogEntry]:
    """Every fact of *run_id* in log order (see :class:`LogEntry`). Raises
    RunNotFoundError (no such Run), CorruptRecordError."""
    records = await reader.read_stream(f"run/{run_id}")
    if not records:
        raise RunNotFoundError(f"no run {run_id!r}", run_id=run_id)
    return [LogEntry(position=r.index, fact=_fact_name(r), epoch=r.epoch,
                     commit_id=r.commit_id, payload=r.payload) for r in records]


# -- timeline -----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class Span:
    """A bar on a lane from log position *start* to *end* (inclusive): a model step
    (``kind="model"``), a tool call executing (``"tool"``) or waiting for an approval or
    a response (``"wait"``). ``outcome``: completed, failed, rejected, recovered,
    withdrawn, unknown (effect_unknown: the owner crashed mid-call), approved, answered,
    or open (still running at the head)."""

    lane: str
    kind: str
    label: str
    start: int
    end: int
    outcome: str


@attrs.frozen(kw_only=True)
class Mark:
    """A point on a lane: created, input, approval, answer, rejection, recovery, takeover
    (the epoch changed: another owner), cancel, end."""

    lane: str
    kind: str
    label: str
    position: int


@attrs.frozen(kw_only=True)
class EpochBand:
    """The positions [start, end] written under one owner epoch."""

    epoch: int
    start: int
    end: int


@attrs.frozen(kw_only=True)
class Timeline:
    """A Run drawn on its log-position axis: ``lanes`` top to bottom (``run``, ``model``,
    then ``tool #1`` … one per parallel call slot), ``length`` facts."""

    scope: str
    run_id: str
    length: int
    lanes: tuple[str, ...]
    spans: tuple[Span, ...]
    marks: tuple[Mark, ...]
    epochs: tuple[EpochBand, ...]


def _short(text: str, n: int = 8) -> str:
    return text[:n]


def build_timeline(scope: str, run_id: str, facts: Sequence[Any],
                   records: Sequence[StreamRecord]) -> Timeline:
    """Lay out *facts* (with their stream *records*, for the epochs) as a
    :class:`Timeline`."""
    head = len(facts) - 1
    spans: list[Span] = []
    marks: list[Mark] = []
    lanes = ["run", "model"]
    model_open: dict[str, tuple[int, str]] = {}
    model_n = 0
    call_lane: dict[str, str] = {}
    call_ref: dict[str, str] = {}
    call_open: dict[str, int] = {}
    wait_open: dict[str, int] = {}

    def close_model(step: str, pos: int, outcome: str) -> None:
        start, label = model_open.pop(step, (pos, "model"))
        spans.append(Span(lane="model", kind="model", label=label, start=start, end=pos,
                          outcome=outcome))

    def close_call(cid: str, pos: int, outcome: str) -> None:
        lane = call_lane.get(cid, "tool #1")
        if cid in wait_open:
            spans.append(Span(lane=lane, kind="wait", label=call_ref.get(cid, "call"),
                              start=wait_open.pop(cid), end=pos, outcome=outcome))
        if cid in call_open:
            spans.append(Span(lane=lane, kind="tool", label=call_ref.get(cid, "call"),
                              start=call_open.pop(cid), end=pos, outcome=outcome))

    for pos, fact in enumerate(facts):
        match fact:
            case F.RunCreated():
                marks.append(Mark(lane="run", kind="created", label="created", position=pos))
            case F.InputAccepted(input=i):
                marks.append(Mark(lane="run", kind="input",
                                  label=_short(i.id.rsplit("/", 1)[-1], 12), position=pos))
            case F.ModelStepPrepared(step_id=sid, model=m):
                model_n += 1
                model_open[sid] = (pos, f"step {model_n} ({m})")
            case F.ModelStepStarted():
                pass
            case F.ModelStepCompleted(step_id=sid):
                close_model(sid, pos, "completed")
            case F.ModelStepFailed(step_id=sid):
                close_model(sid, pos, "failed")
            case F.ModelStepRejected(step_id=sid):
                close_model(sid, pos, "rejected")
            case F.ModelStepWithdrawn(step_id=sid):
                close_model(sid, pos, "withdrawn")
            case F.ModelStepRecovered(step_id=sid):
                close_model(sid, pos, "recovered")
                marks.append(Mark(lane="model", kind="recovery", label="recovered",
                                  position=pos))
            case F.ToolStepOpened(calls=calls):
                for n, binding in enumerate(calls, start=1):
                    lane = f"tool #{n}"
                    if lane not in lanes:
                        lanes.append(lane)
                    call_lane[binding.call_id] = lane
                    call_ref[binding.call_id] = binding.tool_ref
                    if binding.policy is not ResponsePolicy.DIRECT_EXECUTION:
                        wait_open[binding.call_id] = pos
            case F.ToolCallStarted(call_id=cid):
                if cid in wait_open:
                    spans.append(Span(lane=call_lane.get(cid, "tool #1"), kind="wait",
                                      label=call_ref.get(cid, "call"),
                                      start=wait_open.pop(cid), end=pos, outcome="approved"))
                call_open[cid] = pos
            case F.ToolCallApproved(call_id=cid):
                marks.append(Mark(lane=call_lane.get(cid, "tool #1"), kind="approval",
                                  label="approved", position=pos))
            case F.ToolCallAnswered(call_id=cid):
                marks.append(Mark(lane=call_lane.get(cid, "tool #1"), kind="answer",
                                  label="answered", position=pos))
                close_call(cid, pos, "answered")
            case F.ToolCallCompleted(call_id=cid):
                close_call(cid, pos, "completed")
            case F.ToolCallFailed(call_id=cid, failure=failure, outcome=outcome):
                if failure.class_ in ("permission_denied", "response_rejected"):
                    marks.append(Mark(lane=call_lane.get(cid, "tool #1"), kind="rejection",
                                      label="rejected", position=pos))
                if outcome is ToolFailureOutcome.UNKNOWN:
                    marks.append(Mark(lane=call_lane.get(cid, "tool #1"), kind="recovery",
                                      label=failure.class_, position=pos))
                    close_call(cid, pos, "unknown")
                else:
                    close_call(cid, pos, "failed")
            case F.RunEnded(end=end):
                kind = type(end).__name__
                label = "cancelled" if "Stopped" in kind else (
                    "failed" if "Failed" in kind else "completed")
                marks.append(Mark(lane="run", kind="cancel" if label == "cancelled" else "end",
                                  label=label, position=pos))
    for sid in list(model_open):
        close_model(sid, head, "open")
    for cid in list({*call_open, *wait_open}):
        close_call(cid, head, "open")
    epochs: list[EpochBand] = []
    for record in records:
        if epochs and epochs[-1].epoch == record.epoch:
            epochs[-1] = attrs.evolve(epochs[-1], end=record.index)
            continue
        if epochs:
            marks.append(Mark(lane="run", kind="takeover",
                              label=f"epoch {epochs[-1].epoch}→{record.epoch}",
                              position=record.index))
        epochs.append(EpochBand(epoch=record.epoch, start=record.index, end=record.index))
    spans.sort(key=lambda s: (lanes.index(s.lane), s.start))
    marks.sort(key=lambda m: (m.position, lanes.index(m.lane)))
    return Timeline(scope=scope, run_id=run_id, length=len(facts), lanes=tuple(lanes),
                    spans=tuple(spans), marks=tuple(marks), epochs=tuple(epochs))
