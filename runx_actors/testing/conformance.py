"""The store conformance suite (spec §8.6, scenarios 98-113; RUN-CMP-2; batch commits,
RUN-CMT-9).

Every scenario is an ``async def test_store_*(store_factory)`` written once against a
*store factory*: a zero-argument callable returning an async context manager that yields
a fresh, empty ``SessionStore`` (``open``/``reader``/``frozen``). Run it against your own
store by importing the scenarios into a test module and providing a ``store_factory``
fixture (pytest-trio with ``trio_mode = true``)::

    import pytest
    from runx_actors.testing.conformance import *  # noqa: F403  (collects every scenario)

    @pytest.fixture
    def store_factory(tmp_path):
        return lambda: open_my_store(tmp_path / "db")

or call the coroutines yourself (``await SCENARIOS["test_store_creation"](factory)``).

Optional capability: a store with ``async cached_projection(scope) -> dict[RunID,
Snapshot]`` also has its durable projection cache checked (#107: written only at Open or
end). Takeover (#110/#111) is checked at the store level: :func:`dispose_interrupted`
commits the recovery commands of ``recovery_targets`` as the new owner, following a
verdict function standing in for the reconciler.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from typing import Any, TypeAlias

import pytest

from ..protocol import commands as C
from ..protocol import facts as F
from ..protocol.canonical import sha256_digest, typed_envelope
from ..protocol.commit import (
    MAX_ID_BYTES,
    MAX_NAME_BYTES,
    Append,
    BatchResult,
    CommitRequest,
    CommitResult,
    CommitStatus,
    Snapshot,
    envelope,
    evaluate_commit,
    fold_run,
)
from ..protocol.errors import (
    CommandConflictError,
    CorruptLogError,
    FrozenValueMissingError,
    OwnershipLostError,
    RunExistsError,
    RunNotFoundError,
    RunTerminalError,
    StaleRuntimeError,
    ValidationError,
)
from ..protocol.ids import derive_start_command_id
from ..protocol.plan import RECOVERY_MESSAGE, RecoveryTarget, recovery_command, recovery_targets
from ..protocol.state import MachineState, ModelStep, Open, ToolStep
from ..protocol.values import (
    FailureClass,
    ModelStepStatus,
    NewRun,
    RunID,
    RunStatus,
    Scope,
    ToolCallStatus,
    ToolFailureOutcome,
)
from ..store.base import ForeignEvent, commit_batch
from ..store.memory import MemoryStore
from . import builders as b
from .builders import Built

__all__ = [
    "StoreFactory", "Verdict", "SCOPE", "memory_store_factory", "dispose_interrupted",
    "SCENARIOS",
    "test_store_creation", "test_store_replay_and_base", "test_store_input_queue",
    "test_store_start_and_effect", "test_store_decline_tool_call",
    "test_store_group_composition", "test_store_admission", "test_store_settlement_snapshot",
    "test_store_prepare_cas", "test_store_projection", "test_store_settlement_replay",
    "test_store_isolation", "test_store_takeover", "test_store_reattach",
    "test_store_ownership_lost", "test_store_frozen_values",
    "test_store_batch_prefix", "test_store_batch_replay", "test_store_batch_fenced",
    "test_store_batch_validation", "batch_requests",
]

#: A zero-argument callable giving an async context manager that yields a fresh store.
StoreFactory: TypeAlias = Callable[[], AbstractAsyncContextManager[Any]]
#: A reconciler's verdict on one recovery target: ``"keep"`` or ``"dispose"``.
Verdict: TypeAlias = Callable[[RecoveryTarget], str]

#: The scope every scenario uses.
SCOPE: Scope = "conformance"


def memory_store_factory() -> AbstractAsyncContextManager[MemoryStore]:
    """A factory of fresh in-memory stores (the reference)."""

    @asynccontextmanager
    async def cm() -> AsyncIterator[MemoryStore]:
        yield MemoryStore()

    return cm()


# -- helpers ---------------------------------------------------------------------------


def _dispose_all(target: RecoveryTarget) -> str:
    return "dispose"


async def dispose_interrupted(writer: Any, verdict: Verdict = _dispose_all) -> int:
    """Store-level takeover (§4.6): commit the recovery command of every target of every
    active Run whose verdict is ``"dispose"``; refusals as stale, terminal or conflict
    are skipped. Returns the number of ACCEPTED commits (a repeat returns 0)."""
    accepted = 0
    rs = writer.run_store()
    for run_id, snap in sorted(writer.projection().items()):
        for target in recovery_targets(snap.state):
            if verdict(target) != "dispose":
                continue
            command_id, command = recovery_command(target)
            try:
                result = await rs.commit(
                    CommitRequest(snap.position, envelope(run_id, command_id, command))
                )
            except (StaleRuntimeError, RunTerminalError, CommandConflictError):
                continue
            if result.status is CommitStatus.ACCEPTED:
                accepted += 1
    return accepted


async def _create(writer: Any, run_id: RunID, *inputs: str) -> CommitResult:
    result: CommitResult = await writer.create_run(
        NewRun(run_id), [b.agent_input(i) for i in inputs], commit_id=f"create:{run_id}"
    )
    return result


async def _load(writer: Any, run_id: RunID) -> Snapshot:
    snap: Snapshot = await writer.run_store().load(run_id)
    return snap


async def _commit(writer: Any, run_id: RunID, built: Built, *, base: int | None = None
                  ) -> CommitResult:
    """Commit a builder's ``(command_id, command)``; ``base`` defaults to the position."""
    if base is None:
        base = (await _load(writer, run_id)).position
    command_id, command = built
    result: CommitResult = await writer.run_store().commit(
        CommitRequest(base, envelope(run_id, command_id, command))
    )
    return result


async def _do(writer: Any, run_id: RunID, build: Callable[..., Built], *args: Any,
              **kwargs: Any) -> CommitResult:
    """Load, build the command from the loaded state, commit it, expect ACCEPTED."""
    snap = await _load(writer, run_id)
    result = await _commit(writer, run_id, build(snap.state, *args, **kwargs),
                           base=snap.position)
    assert result.status is CommitStatus.ACCEPTED, result
    return result


async def _prepare(writer: Any, run_id: RunID) -> CommitResult:
    snap = await _load(writer, run_id)
    result = await _commit(writer, run_id, b.prepare(snap.state, snap.position),
                           base=snap.position)
    assert result.status is CommitStatus.ACCEPTED, result
    return result


async def _executing_model(writer: Any, run_id: RunID, *inputs: str) -> MachineState:
    """A Run created with *inputs* whose model step is EXECUTING."""
    await _create(writer, run_id, *inputs)
    await _prepare(writer, run_id)
    return (await _do(writer, run_id, b.start_model)).snapshot.state


async def _tool_step(writer: Any, run_id: RunID, calls: int = 2) -> MachineState:
    """A Run at a ToolStep with *calls* PENDING calls (tools not offered: direct)."""
    await _executing_model(writer, run_id, "in-1")
    specs = [(f"tool-{i}", f'{{"i":{i}}}') for i in range(calls)]
    state = (await _do(writer, run_id, b.model_result, tool_calls=specs)).snapshot.state
    assert isinstance(state.current, ToolStep)
    return state


async def _facts(store: Any, run_id: RunID) -> tuple[F.Fact, ...]:
    reader = await store.reader(SCOPE)
    facts: tuple[F.Fact, ...] = await reader.run_facts(run_id)
    return facts


async def _record(store: Any, run_id: RunID) -> Snapshot:
    reader = await store.reader(SCOPE)
    snap: Snapshot = await reader.record(run_id)
    return snap


def _call_status(state: MachineState, index: int) -> ToolCallStatus:
    """Status of call *index* of the current ToolStep, or of the last closed one."""
    step = state.current if isinstance(state.current, ToolStep) else state.last_tool_step
    assert step is not None
    return step.calls[index].status


def _wire(facts: Iterable[F.Fact]) -> list[str]:
    return [f.WIRE_NAME for f in facts]


class _Ahead:
    """A CommitView of one Run at a snapshot, to predict the states of a batch."""

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap

    def replay_facts(self, command_id: str, run_id: RunID) -> tuple[F.Fact, ...] | None:
        return None

    def active(self, run_id: RunID) -> Snapshot | None:
        return self.snap if self.snap.state.status is RunStatus.ACTIVE else None

    def stream_exists(self, run_id: RunID) -> bool:
        return True


def batch_requests(run_id: RunID, snap: Snapshot,
                   *builds: Callable[[Snapshot], Built]) -> list[CommitRequest]:
    """The requests of a batch built from *snap* (RUN-CMT-9): each builder gets the
    snapshot the earlier ones leave (predicted with ``evaluate_commit``) and its request
    names that position as its base. Raises AssertionError if one would be refused."""
    requests = []
    for build in builds:
        command_id, command = build(snap)
        request = CommitRequest(snap.position, envelope(run_id, command_id, command))
        decision = evaluate_commit(_Ahead(snap), request)
        assert isinstance(decision, Append), decision
        snap = decision.snapshot
        requests.append(request)
    return requests


async def _batch(writer: Any, requests: list[CommitRequest]) -> BatchResult:
    return await commit_batch(writer.run_store(), requests)


def _same(actual: Any, expected: Any, what: str) -> None:
    assert actual == expected, f"{what}:\n  expected {expected!r}\n  actual   {actual!r}"


# -- the scenarios ---------------------------------------------------------------------


async def test_store_creation(store_factory: StoreFactory) -> None:
    """#98: create + one input → position 1; unknown RunID → RunNotFoundError for load,
    record and commit; a terminal Run loads and records the same; commit after the end →
    RunTerminalError; duplicate create → RunExistsError, no write."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        created = await _create(w, "run-1", "in-1")
        assert created.status is CommitStatus.ACCEPTED
        assert created.snapshot.position == 1
        assert _wire(created.facts) == ["run_created", "input_accepted"]
        assert (await _load(w, "run-1")) == created.snapshot
        assert (await _record(store, "run-1")) == created.snapshot
        empty = await w.create_run(NewRun("run-0"), [], commit_id="create:run-0")
        assert empty.snapshot.position == 0

        with pytest.raises(RunNotFoundError):
            await _load(w, "nobody")
        with pytest.raises(RunNotFoundError):
            await _record(store, "nobody")
        with pytest.raises(RunNotFoundError):
            await _commit(w, "nobody", b.cancel(command_id="cancel:nobody"), base=0)

        ended = await _commit(w, "run-1", b.cancel(None, "cancelled", command_id="cancel:run-1"))
        assert ended.status is CommitStatus.ACCEPTED
        assert ended.snapshot.state.status is RunStatus.STOPPED
        loaded, recorded = await _load(w, "run-1"), await _record(store, "run-1")
        assert loaded == recorded == ended.snapshot
        with pytest.raises(RunTerminalError):
            await _commit(w, "run-1", b.accept_input(loaded.state, "in-late"))

        before = await _facts(store, "run-1")
        # The same commit id replays; another id for an existing stream is refused.
        again = await _create(w, "run-1", "in-1")
        assert again.status is CommitStatus.ALREADY_APPLIED
        assert again.facts == created.facts and again.snapshot == ended.snapshot
        with pytest.raises(RunExistsError):
            await w.create_run(NewRun("run-1"), [b.agent_input("x")], commit_id="create:2")
        with pytest.raises(RunExistsError):
            await w.create_run(NewRun("run-0"), [], commit_id="create:3")
        assert await _facts(store, "run-1") == before
        assert (await _record(store, "run-0")).position == 0
        # The refused creations wrote no commit: their ids are still free.
        fresh = await w.create_run(NewRun("run-2"), [], commit_id="create:2")
        assert fresh.status is CommitStatus.ACCEPTED
        with pytest.raises(ValidationError):
            await w.create_run(NewRun("run-3"), [b.agent_input("a"), b.agent_input("a")],
                               commit_id="create:run-3")
        with pytest.raises(RunNotFoundError):
            await _record(store, "run-3")


async def test_store_replay_and_base(store_factory: StoreFactory) -> None:
    """#99: an accepted command repeated returns ALREADY_APPLIED with the original facts
    and the current snapshot; non-Prepare commands accept base 0 or stale."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        snap = await _load(w, "run-1")
        built = b.accept_input(snap.state, "in-2")
        first = await _commit(w, "run-1", built, base=0)
        assert first.status is CommitStatus.ACCEPTED
        assert first.snapshot.position == 2
        stale = await _commit(w, "run-1", b.accept_input(first.snapshot.state, "in-3"),
                              base=1)
        assert stale.status is CommitStatus.ACCEPTED
        assert stale.snapshot.position == 3

        again = await _commit(w, "run-1", built)
        assert again.status is CommitStatus.ALREADY_APPLIED
        assert again.facts == first.facts
        assert again.snapshot == stale.snapshot == await _load(w, "run-1")
        # First wins: other content under the same id replays the first group (INV-9).
        other = (built[0], C.AcceptInput((b.agent_input("in-9"),)))
        replayed = await _commit(w, "run-1", other, base=0)
        assert replayed.status is CommitStatus.ALREADY_APPLIED
        assert replayed.facts == first.facts
        assert (await _load(w, "run-1")).position == 3

        # A start ignores base; its replay after the position moved still replays.
        await _prepare(w, "run-1")
        state = (await _load(w, "run-1")).state
        start = b.start_model(state)
        started = await _commit(w, "run-1", start, base=0)
        assert started.status is CommitStatus.ACCEPTED
        await _commit(w, "run-1", b.accept_input(started.snapshot.state, "in-4"), base=0)
        replay = await _commit(w, "run-1", start, base=1)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == started.facts
        assert replay.snapshot == await _load(w, "run-1")
        assert len(await _facts(store, "run-1")) == replay.snapshot.position + 1


async def test_store_input_queue(store_factory: StoreFactory) -> None:
    """#100: batches are accepted in order, the position grows by the batch size, a
    duplicate id conflicts, the same batch replays."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        batch = b.accept_input((await _load(w, "run-1")).state, "a", "b")
        two = await _commit(w, "run-1", batch)
        assert two.status is CommitStatus.ACCEPTED
        assert two.snapshot.position == 3
        assert _wire(two.facts) == ["input_accepted", "input_accepted"]
        one = await _do(w, "run-1", b.accept_input, "c")
        assert one.snapshot.position == 4
        assert [i.id for i in one.snapshot.state.pending_inputs] == ["in-1", "a", "b", "c"]

        before = await _facts(store, "run-1")
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", b.accept_input(one.snapshot.state, "a"))
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", b.accept_input(one.snapshot.state, "d", "d"))
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", b.accept_input(one.snapshot.state, "e", "in-1"))
        assert await _facts(store, "run-1") == before

        replay = await _commit(w, "run-1", batch)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == two.facts
        assert replay.snapshot.position == 4
        # Prepare consumes the whole queue, in order.
        prepared = await _prepare(w, "run-1")
        assert isinstance(prepared.snapshot.state.current, ModelStep)
        assert prepared.snapshot.state.pending_inputs == ()
        assert prepared.facts[0].input_ids == ("in-1", "a", "b", "c")  # type: ignore[union-attr]


async def test_store_start_and_effect(store_factory: StoreFactory) -> None:
    """#101: start without effect → conflict; non-derived effect → stale; non-derived id
    → conflict; accepted start records the effect; the same start again →
    ALREADY_APPLIED."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        prepared = await _prepare(w, "run-1")
        state = prepared.snapshot.state
        step = state.current
        assert isinstance(step, ModelStep)
        command_id, command = b.start_model(state)
        assert isinstance(command, C.StartModelExecution)

        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", (command_id, C.StartModelExecution(step.id, "")))
        bogus = "0" * 64
        with pytest.raises(StaleRuntimeError):
            await _commit(w, "run-1", (derive_start_command_id(bogus),
                                       C.StartModelExecution(step.id, bogus)))
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", ("start-by-hand", command))
        assert (await _load(w, "run-1")) == prepared.snapshot

        started = await _commit(w, "run-1", (command_id, command))
        assert started.status is CommitStatus.ACCEPTED
        running = started.snapshot.state.current
        assert isinstance(running, ModelStep)
        assert running.status is ModelStepStatus.EXECUTING
        assert running.effect == command.effect
        assert started.facts == (F.ModelStepStarted(step.id, command.effect),)
        again = await _commit(w, "run-1", (command_id, command))
        assert again.status is CommitStatus.ALREADY_APPLIED
        assert again.facts == started.facts
        assert again.snapshot == started.snapshot

        # The same rules for a tool call.
        tool_state = await _tool_step(w, "run-2", calls=1)
        tool_id, tool_cmd = b.start_tool(tool_state, 0)
        assert isinstance(tool_cmd, C.StartToolCall)
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-2", (tool_id, C.StartToolCall(
                step_id=tool_cmd.step_id, call_id=tool_cmd.call_id, effect="")))
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-2", ("start-by-hand", tool_cmd))
        tool_started = await _commit(w, "run-2", (tool_id, tool_cmd))
        assert tool_started.status is CommitStatus.ACCEPTED
        assert _call_status(tool_started.snapshot.state, 0) is ToolCallStatus.EXECUTING
        assert (await _commit(w, "run-2", (tool_id, tool_cmd))).status is (
            CommitStatus.ALREADY_APPLIED
        )


async def test_store_decline_tool_call(store_factory: StoreFactory) -> None:
    """#102: a decline under the derived id writes one fact; under another id →
    conflict."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        state = await _tool_step(w, "run-1", calls=2)
        position = (await _load(w, "run-1")).position
        declined = await _commit(w, "run-1", b.decline(state, 0))
        assert declined.status is CommitStatus.ACCEPTED
        assert len(declined.facts) == 1
        fact = declined.facts[0]
        assert isinstance(fact, F.ToolCallFailed)
        assert fact.effect == "" and fact.outcome is ToolFailureOutcome.KNOWN
        assert declined.snapshot.position == position + 1
        assert _call_status(declined.snapshot.state, 0) is ToolCallStatus.FAILED

        _, other = b.decline(declined.snapshot.state, 1)
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", ("decline-by-hand", other))
        assert (await _load(w, "run-1")) == declined.snapshot
        again = await _commit(w, "run-1", b.decline(state, 0))
        assert again.status is CommitStatus.ALREADY_APPLIED
        assert again.facts == declined.facts


async def test_store_group_composition(store_factory: StoreFactory) -> None:
    """#103: a cancel group is one commit, contiguous in the stream, RunEnded last,
    positions consecutive."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _tool_step(w, "run-1", calls=3)
        await _do(w, "run-1", b.start_tool, 0)
        await _do(w, "run-1", b.start_tool, 2)
        position = (await _load(w, "run-1")).position
        cancel = b.cancel(None, "cancelled", command_id="cancel:run-1")
        ended = await _commit(w, "run-1", cancel)
        assert ended.status is CommitStatus.ACCEPTED
        assert _wire(ended.facts) == ["tool_call_failed"] * 3 + ["run_ended"]
        assert ended.snapshot.position == position + len(ended.facts)
        stream = await _facts(store, "run-1")
        assert len(stream) == ended.snapshot.position + 1
        assert stream[position + 1:] == ended.facts
        end = ended.facts[-1]
        assert isinstance(end, F.RunEnded)
        assert ended.snapshot.state.result is not None
        assert len(ended.snapshot.state.result.uncertain_calls) == 2
        assert (await _record(store, "run-1")) == ended.snapshot
        replay = await _commit(w, "run-1", cancel)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == ended.facts


async def test_store_admission(store_factory: StoreFactory) -> None:
    """#104: append_events refuses ``run/`` streams and ``twilight/run/`` types; an
    envelope naming another Run is refused."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        await _create(w, "run-2", "in-1")
        facts_1, facts_2 = await _facts(store, "run-1"), await _facts(store, "run-2")
        with pytest.raises(ValidationError):
            await w.append_events("evt-1", [ForeignEvent("run/run-1", "app/note", {"a": 1})])
        with pytest.raises(ValidationError):
            await w.append_events("evt-1", [ForeignEvent("app/notes", "twilight/run/run_ended",
                                                         {})])
        with pytest.raises(ValidationError):
            await w.append_events("evt-1", [])
        with pytest.raises(ValidationError):
            await w.create_run(NewRun("run-3"), [], commit_id="create:run-3",
                               extra_events=[ForeignEvent("run/run-3", "app/x", {})])
        with pytest.raises(RunNotFoundError):
            await _record(store, "run-3")
        accepted = await w.append_events("evt-1", [ForeignEvent("app/notes", "app/note", 1)])
        assert accepted is CommitStatus.ACCEPTED
        assert await w.append_events("evt-1", [ForeignEvent("app/notes", "app/note", 2)]) is (
            CommitStatus.ALREADY_APPLIED
        )

        # An envelope naming run-2 with a command derived for run-1 is refused.
        state_1 = (await _load(w, "run-1")).state
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-2", b.accept_input(state_1, "in-x"))
        assert await _facts(store, "run-1") == facts_1
        assert await _facts(store, "run-2") == facts_2


async def test_store_settlement_snapshot(store_factory: StoreFactory) -> None:
    """#105: a settlement that ends the Run returns a terminal snapshot equal to
    ``record``, with ``run_ended`` last."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _executing_model(w, "run-1", "in-1")
        settled = await _do(w, "run-1", b.model_result, text="done")
        assert _wire(settled.facts) == ["model_step_completed", "run_ended"]
        assert settled.snapshot.state.status is RunStatus.COMPLETED
        assert settled.snapshot == await _record(store, "run-1")
        assert settled.snapshot == await _load(w, "run-1")
        assert "run-1" not in w.projection()

        await _executing_model(w, "run-2", "in-1")
        failed = await _do(w, "run-2", b.model_failure)
        assert isinstance(failed.facts[-1], F.RunEnded)
        assert failed.snapshot.state.status is RunStatus.FAILED
        assert failed.snapshot == await _record(store, "run-2")


async def test_store_prepare_cas(store_factory: StoreFactory) -> None:
    """#106: Prepare with ``base != position`` → stale; with the right base and derived
    ids → accepted; replaying it after the position moved → ALREADY_APPLIED."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        created = await _create(w, "run-1", "in-1")
        state, position = created.snapshot.state, created.snapshot.position
        with pytest.raises(StaleRuntimeError):
            await _commit(w, "run-1", b.prepare(state, position - 1), base=position - 1)
        with pytest.raises(CommandConflictError):
            await _commit(w, "run-1", b.prepare(state, position - 1), base=position)
        command_id, command = b.prepare(state, position)
        assert isinstance(command, C.PrepareModelRequest)
        bad_step = C.PrepareModelRequest(
            step_id="0" * 64, model=command.model, request=command.request,
            request_digest=command.request_digest, input_ids=command.input_ids,
        )
        with pytest.raises(StaleRuntimeError):
            await _commit(w, "run-1", (command_id, bad_step), base=position)
        assert (await _load(w, "run-1")) == created.snapshot

        prepared = await _commit(w, "run-1", (command_id, command), base=position)
        assert prepared.status is CommitStatus.ACCEPTED
        assert prepared.snapshot.position == position + 1
        # The position moves (a late input); the same Prepare replays.
        moved = await _do(w, "run-1", b.accept_input, "in-2")
        replay = await _commit(w, "run-1", (command_id, command), base=position)
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == prepared.facts
        assert replay.snapshot == moved.snapshot


async def test_store_projection(store_factory: StoreFactory) -> None:
    """#107: the cache is written only at Open or end; an ended Run leaves the
    projection; ``fold_run`` without RunCreated fails. A new writer rebuilds the same
    projection (cache plus log tail)."""
    async with store_factory() as store:
        cached = getattr(store, "cached_projection", None)

        async def cache_position() -> int | None:
            if cached is None:
                return None
            entries: dict[RunID, Snapshot] = await cached(SCOPE)
            entry = entries.get("run-1")
            if entry is not None:
                assert isinstance(entry.state.current, Open)
            return entry.position if entry is not None else -1

        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        expect_cache = cached is not None
        if expect_cache:
            assert await cache_position() == 1
        await _prepare(w, "run-1")
        await _do(w, "run-1", b.start_model)
        if expect_cache:
            assert await cache_position() == 1  # mid-step: not written

        w2 = await store.open(SCOPE)
        assert w2.projection() == w.projection()
        assert w2.projection()["run-1"] == await _record(store, "run-1")
        settled = await _do(w2, "run-1", b.model_result, tool_calls=[("tool-0", "{}")])
        assert isinstance(settled.snapshot.state.current, ToolStep)
        await _do(w2, "run-1", b.start_tool, 0)
        if expect_cache:
            assert await cache_position() == 1
        closed = await _do(w2, "run-1", b.tool_result, 0, '"ok"')
        assert isinstance(closed.snapshot.state.current, Open)
        if expect_cache:
            assert await cache_position() == closed.snapshot.position
            entries = await cached(SCOPE)  # type: ignore[misc]
            assert entries["run-1"] == closed.snapshot

        w3 = await store.open(SCOPE)
        assert w3.projection() == w2.projection()
        ended = await _commit(w3, "run-1", b.cancel(command_id="cancel:run-1"))
        assert ended.snapshot.state.status is RunStatus.STOPPED
        assert "run-1" not in w3.projection()
        if expect_cache:
            assert await cache_position() == -1
        w4 = await store.open(SCOPE)
        assert "run-1" not in w4.projection()
        assert (await _load(w4, "run-1")) == ended.snapshot

        facts = await _facts(store, "run-1")
        assert fold_run(facts, run_id="run-1") == ended.snapshot.state
        with pytest.raises(CorruptLogError):
            fold_run(facts[1:], run_id="run-1")
        with pytest.raises(CorruptLogError):
            fold_run((), run_id="run-1")


async def test_store_settlement_replay(store_factory: StoreFactory) -> None:
    """#108: a second settlement with different content under the same settlement id →
    ALREADY_APPLIED with the original facts; state unchanged."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _tool_step(w, "run-1", calls=2)
        started = await _do(w, "run-1", b.start_tool, 0)
        state = started.snapshot.state
        first = await _commit(w, "run-1", b.tool_result(state, 0, '"A"'))
        assert first.status is CommitStatus.ACCEPTED
        after = await _load(w, "run-1")
        for second in (b.tool_result(state, 0, '"B"'),
                       b.tool_failure(state, 0, message="late failure")):
            replay = await _commit(w, "run-1", second)
            assert replay.status is CommitStatus.ALREADY_APPLIED
            assert replay.facts == first.facts
            assert replay.snapshot == after == await _load(w, "run-1")
        assert await _record(store, "run-1") == after

        # The same for a model settlement.
        executing = await _executing_model(w, "run-2", "in-1")
        done = await _commit(w, "run-2", b.model_result(executing, text="first"))
        replay = await _commit(w, "run-2", b.model_result(executing, text="second"))
        assert replay.status is CommitStatus.ALREADY_APPLIED
        assert replay.facts == done.facts
        assert replay.snapshot == done.snapshot == await _record(store, "run-2")


async def test_store_isolation(store_factory: StoreFactory) -> None:
    """#109: commits to other Runs and foreign events change neither this Run's position
    nor the validity of its Prepare base."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        created = await _create(w, "run-1", "in-1")
        await _create(w, "run-2", "in-1")
        await _prepare(w, "run-2")
        await _do(w, "run-2", b.accept_input, "in-2")
        await w.append_events("evt-1", [ForeignEvent("app/notes", "app/note", {"n": 1}),
                                        ForeignEvent("app/other", "app/note", {"n": 2})])
        await w.create_run(NewRun("run-3"), [b.agent_input("in-1")], commit_id="create:run-3",
                           extra_events=[ForeignEvent("app/notes", "app/created", "run-3")])
        await _commit(w, "run-2", b.cancel(command_id="cancel:run-2"))
        assert (await _load(w, "run-1")) == created.snapshot
        assert (await _record(store, "run-1")) == created.snapshot
        prepared = await _commit(w, "run-1", b.prepare(created.snapshot.state, 1), base=1)
        assert prepared.status is CommitStatus.ACCEPTED
        assert prepared.snapshot.position == 2


async def test_store_takeover(store_factory: StoreFactory) -> None:
    """#110: given an executing model step and a late input, recovery withdraws the step
    with the input still pending; the next Prepare has a new StepID and consumes it; an
    executing call becomes UNKNOWN; a PENDING sibling is untouched; a repeat returns 0."""
    async with store_factory() as store:
        old = await store.open(SCOPE)
        executing = await _executing_model(old, "run-m", "in-1")
        old_step = executing.current
        assert isinstance(old_step, ModelStep)
        late = await _do(old, "run-m", b.accept_input, "in-late")
        assert [i.id for i in late.snapshot.state.pending_inputs] == ["in-late"]
        await _tool_step(old, "run-t", calls=2)
        await _do(old, "run-t", b.start_tool, 0)

        new = await store.open(SCOPE)
        targets = {run_id: recovery_targets(snap.state)
                   for run_id, snap in new.projection().items()}
        assert [len(targets["run-m"]), len(targets["run-t"])] == [1, 1]
        assert await dispose_interrupted(new) == 2

        m = (await _load(new, "run-m")).state
        assert isinstance(m.current, Open)
        assert m.status is RunStatus.ACTIVE
        assert [i.id for i in m.pending_inputs] == ["in-late"]
        assert m.model_steps == executing.model_steps - 1
        prepared = await _prepare(new, "run-m")
        step = prepared.snapshot.state.current
        assert isinstance(step, ModelStep)
        assert step.id != old_step.id
        assert prepared.facts[0].input_ids == ("in-late",)  # type: ignore[union-attr]
        assert prepared.snapshot.state.pending_inputs == ()

        t = (await _load(new, "run-t")).state
        assert t.status is RunStatus.ACTIVE
        assert isinstance(t.current, ToolStep)
        call, sibling = t.current.calls
        assert call.status is ToolCallStatus.FAILED
        assert call.failure is not None
        assert call.failure.outcome is ToolFailureOutcome.UNKNOWN
        assert call.failure.failure.class_ == FailureClass.EFFECT_UNKNOWN
        assert call.failure.failure.message == RECOVERY_MESSAGE
        assert sibling.status is ToolCallStatus.PENDING and sibling.effect == ""

        # A repeat, by the same owner or a later one, commits nothing.
        positions = {r: (await _load(new, r)).position for r in ("run-m", "run-t")}
        assert await dispose_interrupted(new) == 0
        later = await store.open(SCOPE)
        assert await dispose_interrupted(later) == 0
        for run_id, run_targets in targets.items():
            for target in run_targets:
                replay = await _commit(later, run_id, recovery_command(target), base=0)
                assert replay.status is CommitStatus.ALREADY_APPLIED
        assert {r: (await _load(later, r)).position for r in positions} == positions
        with pytest.raises(OwnershipLostError):
            await _commit(old, "run-t", b.tool_result((await _load(old, "run-t")).state, 0,
                                                      '"late"'))


async def test_store_reattach(store_factory: StoreFactory) -> None:
    """#111: a live model key is kept; a missing tool key is disposed (the reconciler's
    verdicts are simulated: keep what the executor still runs, dispose what it lost)."""
    async with store_factory() as store:
        old = await store.open(SCOPE)
        model_state = await _executing_model(old, "run-m", "in-1")
        assert isinstance(model_state.current, ModelStep)
        live_effect = model_state.current.effect
        await _tool_step(old, "run-t", calls=1)
        tool_state = (await _do(old, "run-t", b.start_tool, 0)).snapshot.state

        live = {live_effect}  # the fake executor still runs the model key only

        def verdict(target: RecoveryTarget) -> str:
            return "keep" if target.effect in live else "dispose"

        new = await store.open(SCOPE)
        assert await dispose_interrupted(new, verdict) == 1
        m = (await _load(new, "run-m")).state
        assert isinstance(m.current, ModelStep)
        assert m.current.status is ModelStepStatus.EXECUTING
        assert m.current.effect == live_effect
        t = (await _load(new, "run-t")).state
        assert _call_status(t, 0) is ToolCallStatus.FAILED
        assert await dispose_interrupted(new, verdict) == 0

        # The kept effect settles through the new owner; the disposed one's late outcome
        # is stale and appends nothing.
        settled = await _do(new, "run-m", b.model_result, text="done")
        assert settled.snapshot.state.status is RunStatus.COMPLETED
        position = (await _load(new, "run-t")).position
        with pytest.raises(StaleRuntimeError):
            await _commit(new, "run-t", b.tool_result(tool_state, 0, '"late"'))
        assert (await _load(new, "run-t")).position == position


async def test_store_ownership_lost(store_factory: StoreFactory) -> None:
    """#112: a fenced commit raises OwnershipLostError and writes nothing; the old owner
    can still ``record``."""
    async with store_factory() as store:
        old = await store.open(SCOPE)
        await _create(old, "run-1", "in-1")
        stale = await _load(old, "run-1")
        new = await store.open(SCOPE)
        assert new.epoch > old.epoch
        before = await _facts(store, "run-1")

        with pytest.raises(OwnershipLostError) as lost:
            await _commit(old, "run-1", b.prepare(stale.state, stale.position))
        assert lost.value.epoch == old.epoch  # type: ignore[attr-defined]
        assert lost.value.current_epoch == new.epoch  # type: ignore[attr-defined]
        with pytest.raises(OwnershipLostError):
            await _commit(old, "run-1", b.accept_input(stale.state, "in-2"))
        with pytest.raises(OwnershipLostError):
            await old.create_run(NewRun("run-2"), [], commit_id="create:run-2")
        with pytest.raises(OwnershipLostError):
            await old.append_events("evt-1", [ForeignEvent("app/notes", "app/note", 1)])
        assert await _facts(store, "run-1") == before
        with pytest.raises(RunNotFoundError):
            await _record(store, "run-2")

        # The old owner can still read: record, and load from its stale projection.
        assert (await _record(store, "run-1")) == stale
        assert (await _load(old, "run-1")) == stale
        # Nothing of the fenced commits exists: their ids are still free for the owner.
        assert (await _commit(new, "run-1", b.prepare(stale.state, stale.position))).status \
            is CommitStatus.ACCEPTED
        created = await new.create_run(NewRun("run-2"), [], commit_id="create:run-2")
        assert created.status is CommitStatus.ACCEPTED
        assert await new.append_events("evt-1", [ForeignEvent("app/notes", "app/note", 1)]) \
            is CommitStatus.ACCEPTED
        with pytest.raises(OwnershipLostError):
            await _commit(old, "run-1", b.prepare(stale.state, stale.position))


async def test_store_frozen_values(store_factory: StoreFactory) -> None:
    """#113: ``put`` is idempotent; an unknown digest → FrozenValueMissingError; stored
    bytes hash to their digest. Commits store the bodies their facts name (INV-38)."""
    async with store_factory() as store:
        frozen = store.frozen
        data = typed_envelope("tool_output", {"output": "hello"})
        digest = sha256_digest(data)
        await frozen.put(digest, data)
        await frozen.put(digest, data)
        assert await frozen.get(digest) == data
        with pytest.raises(ValidationError):
            await frozen.put(digest, data + b" ")
        with pytest.raises(ValidationError):
            await frozen.put(sha256_digest(b"other"), data)
        assert await frozen.get(digest) == data
        with pytest.raises(FrozenValueMissingError):
            await frozen.get(sha256_digest(b"never stored"))

        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        prepared = await _prepare(w, "run-1")
        step = prepared.snapshot.state.current
        assert isinstance(step, ModelStep)
        body = await frozen.get(step.request_digest)
        assert sha256_digest(body) == step.request_digest
        request = await w.run_store().frozen_request(step.request_digest)
        assert request.model == step.model
        await _do(w, "run-1", b.start_model)
        settled = await _do(w, "run-1", b.model_result, tool_calls=[("tool-0", "{}")])
        completed = settled.facts[0]
        assert isinstance(completed, F.ModelStepCompleted)
        assert sha256_digest(await frozen.get(completed.result_digest)) == (
            completed.result_digest
        )
        await _do(w, "run-1", b.start_tool, 0)
        output = await _do(w, "run-1", b.tool_result, 0, '{"answer":42}')
        done = output.facts[0]
        assert isinstance(done, F.ToolCallCompleted)
        assert sha256_digest(await frozen.get(done.output_digest)) == done.output_digest
        with pytest.raises(FrozenValueMissingError):
            await w.run_store().frozen_request(sha256_digest(b"never stored"))


async def test_store_batch_prefix(store_factory: StoreFactory) -> None:
    """RUN-CMT-9: a batch is its requests committed in order; a Prepare in it names the
    position the earlier request left; a refusal in the middle keeps the prefix and
    writes nothing of itself or of what follows (their ids stay free)."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        snap = await _load(w, "run-1")

        # A refused request in the middle: a Prepare whose base is the position before
        # the first request, not the one it leaves. The prefix is appended, nothing after.
        first = CommitRequest(0, envelope("run-1", *b.accept_input(snap.state, "in-2")))
        stale = CommitRequest(snap.position, envelope(
            "run-1", *b.prepare(snap.state, snap.position)))
        after = CommitRequest(0, envelope("run-1", *b.accept_input(snap.state, "in-3")))
        before = await _facts(store, "run-1")
        part = await _batch(w, [first, stale, after])
        assert isinstance(part.error, StaleRuntimeError), part
        _same([r.status for r in part.results], [CommitStatus.ACCEPTED], "prefix statuses")
        _same(await _facts(store, "run-1"), before + part.results[0].facts,
              "facts after a refusal in the middle")
        _same(await _load(w, "run-1"), part.results[0].snapshot, "load after the prefix")
        _same(await _record(store, "run-1"), part.results[0].snapshot,
              "record after the prefix")
        # A refusal first: nothing written at all.
        head = await _facts(store, "run-1")
        nothing = await _batch(w, [stale, after])
        assert isinstance(nothing.error, StaleRuntimeError), nothing
        _same(nothing.results, (), "results of a batch refused first")
        _same(await _facts(store, "run-1"), head, "facts after a batch refused first")
        # The request after the refusal was not written: its id is still free.
        late = await _commit(w, "run-1", (after.envelope.id, after.envelope.command), base=0)
        _same(late.status, CommitStatus.ACCEPTED, "the id after the refusal")

        # A whole chain: input, the Prepare at the position it leaves, the start.
        snap = await _load(w, "run-1")
        chain = batch_requests(
            "run-1", snap,
            lambda s: b.accept_input(s.state, "in-4"),
            lambda s: b.prepare(s.state, s.position),
            lambda s: b.start_model(s.state),
        )
        _same(chain[1].base, snap.position + 1, "the Prepare's base")
        done = await _batch(w, chain)
        _same(done.error, None, "batch error")
        _same([r.status for r in done.results], [CommitStatus.ACCEPTED] * 3, "statuses")
        _same([r.snapshot.position for r in done.results],
              [snap.position + 1, snap.position + 2, snap.position + 3], "positions")
        facts = await _facts(store, "run-1")
        _same(facts[snap.position + 1:], tuple(f for r in done.results for f in r.facts),
              "facts appended")
        last = done.results[-1].snapshot
        _same(await _load(w, "run-1"), last, "load after the batch")
        _same(await _record(store, "run-1"), last, "record after the batch")
        step = last.state.current
        assert isinstance(step, ModelStep) and step.status is ModelStepStatus.EXECUTING
        # The settlement and the starts it enables, as one batch.
        fused = batch_requests(
            "run-1", last,
            lambda s: b.model_result(s.state, tool_calls=[("tool-0", "{}"),
                                                          ("tool-1", "{}")]),
            lambda s: b.start_tool(s.state, 0),
            lambda s: b.start_tool(s.state, 1),
        )
        tools = await _batch(w, fused)
        _same(tools.error, None, "settle-and-start batch error")
        state = tools.results[-1].snapshot.state
        _same([_call_status(state, i) for i in (0, 1)], [ToolCallStatus.EXECUTING] * 2,
              "call statuses after the batch")
        _same(await _record(store, "run-1"), tools.results[-1].snapshot, "record at the end")


async def test_store_batch_replay(store_factory: StoreFactory) -> None:
    """RUN-CMT-9: a batch sent again answers ALREADY_APPLIED with the original facts and
    today's snapshot; a batch re-sending an applied first command and a new second one
    replays the first and appends the second; a request repeating an earlier id of the
    same batch replays it; a Run ended inside a batch refuses the next request."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        snap = await _load(w, "run-1")
        chain = batch_requests("run-1", snap,
                               lambda s: b.prepare(s.state, s.position),
                               lambda s: b.start_model(s.state))
        first = await _batch(w, chain)
        _same(first.error, None, "first batch error")
        facts = await _facts(store, "run-1")
        again = await _batch(w, chain)
        _same(again.error, None, "replayed batch error")
        _same([r.status for r in again.results], [CommitStatus.ALREADY_APPLIED] * 2,
              "replay statuses")
        _same([r.facts for r in again.results], [r.facts for r in first.results],
              "replayed facts")
        now = await _load(w, "run-1")
        _same([r.snapshot for r in again.results], [now, now], "replay snapshots")
        _same(await _facts(store, "run-1"), facts, "facts after the replay")

        # An applied first command plus a new second one.
        new = CommitRequest(0, envelope("run-1", *b.accept_input(now.state, "in-2")))
        mixed = await _batch(w, [chain[1], new])
        _same(mixed.error, None, "mixed batch error")
        _same([r.status for r in mixed.results],
              [CommitStatus.ALREADY_APPLIED, CommitStatus.ACCEPTED], "mixed statuses")
        _same(mixed.results[0].facts, first.results[1].facts, "replayed start facts")
        _same(mixed.results[0].snapshot, now, "snapshot of the replay before the append")
        _same(await _facts(store, "run-1"), facts + mixed.results[1].facts,
              "facts after the mixed batch")

        # The same id twice in one batch: the second replays the first.
        cur = await _load(w, "run-1")
        dup = CommitRequest(0, envelope("run-1", *b.accept_input(cur.state, "in-3")))
        twice = await _batch(w, [dup, dup])
        _same([r.status for r in twice.results],
              [CommitStatus.ACCEPTED, CommitStatus.ALREADY_APPLIED], "duplicate statuses")
        _same(twice.results[1].facts, twice.results[0].facts, "duplicate facts")
        _same(twice.results[1].snapshot, twice.results[0].snapshot, "duplicate snapshot")
        _same(len(await _facts(store, "run-1")), cur.position + 2, "facts after duplicate")

        # A Run ended by an earlier request of the batch.
        cur = await _load(w, "run-1")
        cancel = CommitRequest(0, envelope("run-1", *b.cancel(cur.state, "cancelled")))
        late = CommitRequest(0, envelope("run-1", *b.accept_input(cur.state, "in-4")))
        ended = await _batch(w, [cancel, late])
        assert isinstance(ended.error, RunTerminalError), ended
        _same([r.snapshot.state.status for r in ended.results], [RunStatus.STOPPED],
              "status after the cancel")
        _same(await _record(store, "run-1"), ended.results[0].snapshot, "record at the end")
        replay_end = await _batch(w, [cancel])
        _same([r.status for r in replay_end.results], [CommitStatus.ALREADY_APPLIED],
              "cancel replayed after the end")
        _same(replay_end.results[0].snapshot, ended.results[0].snapshot,
              "ended snapshot of the replay")


async def test_store_batch_fenced(store_factory: StoreFactory) -> None:
    """RUN-CMT-9: a fenced writer's batch raises OwnershipLostError and writes nothing;
    the new owner can commit the same batch."""
    async with store_factory() as store:
        old = await store.open(SCOPE)
        await _create(old, "run-1", "in-1")
        snap = await _load(old, "run-1")
        chain = batch_requests("run-1", snap,
                               lambda s: b.accept_input(s.state, "in-2"),
                               lambda s: b.prepare(s.state, s.position))
        new = await store.open(SCOPE)
        before = await _facts(store, "run-1")
        with pytest.raises(OwnershipLostError):
            await _batch(old, chain)
        _same(await _facts(store, "run-1"), before, "facts after a fenced batch")
        _same(old.projection(), {"run-1": snap}, "the fenced writer's projection")
        done = await _batch(new, chain)
        _same([r.status for r in done.results], [CommitStatus.ACCEPTED] * 2,
              "the new owner's batch")


async def test_store_batch_validation(store_factory: StoreFactory) -> None:
    """RUN-CMT-9: an empty batch and a batch naming two Runs are ValidationErrors and
    write nothing."""
    async with store_factory() as store:
        w = await store.open(SCOPE)
        await _create(w, "run-1", "in-1")
        await _create(w, "run-2", "in-1")
        s1, s2 = await _load(w, "run-1"), await _load(w, "run-2")
        one = CommitRequest(0, envelope("run-1", *b.accept_input(s1.state, "a")))
        two = CommitRequest(0, envelope("run-2", *b.accept_input(s2.state, "a")))
        with pytest.raises(ValidationError):
            await _batch(w, [])
        with pytest.raises(ValidationError):
            await _batch(w, [one, two])
        _same(await _facts(store, "run-1"), (await _facts(store, "run-1"))[:2], "run-1")
        _same(len(await _facts(store, "run-1")), 2, "facts of run-1 after the refusals")
        _same(len(await _facts(store, "run-2")), 2, "facts of run-2 after the refusals")
        # Nothing was written: both ids are free.
        for request in (one, two):
            ok = await _batch(w, [request])
            _same([r.status for r in ok.results], [CommitStatus.ACCEPTED], "free id")


#: Every scenario by its name, in spec order.
#: names no store may accept (RUN-WIR-1): NUL, newline, DEL, a C1 control, a bidirectional
#: override, a line separator, a lone surrogate (not UTF-8: a shell's undecodable byte), and
#: one byte over :data:`MAX_NAME_BYTES`
HOSTILE_NAMES = ("a\x00b", "a\nb", "a\x7fb", "a\x85b", "a\u202eb", "a\u2028b",
                 "a\ud800b", "x" * (MAX_NAME_BYTES + 1))
#: the same characters in a commit id, and one byte over :data:`MAX_ID_BYTES`
HOSTILE_IDS = (*HOSTILE_NAMES[:-1], "x" * (MAX_ID_BYTES + 1))


async def test_store_names(store_factory: StoreFactory) -> None:
    """RUN-WIR-1: a name (scope, Run id, foreign stream and type, caller-chosen commit id)
    with a control, line-separator or bidirectional character, or over its byte limit, is
    refused with ValidationError before anything is written, on every path (open, create,
    append); a lookup by a name no Run can carry — NUL included, which PostgreSQL text
    cannot hold — answers "no such Run" (RunNotFoundError, an empty stream), never a
    driver error; a name at the limit is accepted."""
    async with store_factory() as store:
        for bad in HOSTILE_NAMES:
            with pytest.raises(ValidationError):
                await store.open(bad)
        w = await store.open(SCOPE)
        for bad_id in HOSTILE_IDS:
            with pytest.raises(ValidationError):
                await w.create_run(NewRun("run-1"), [], commit_id=bad_id)
            with pytest.raises(ValidationError):
                await w.append_events(bad_id, [ForeignEvent("app/notes", "app/note",
                                                            {"a": 1})])
        for bad in HOSTILE_NAMES:
            with pytest.raises(ValidationError):
                await w.create_run(NewRun(bad), [], commit_id="create:hostile")
            with pytest.raises(ValidationError):  # a stream may embed a name: the id limit
                await w.append_events("evt-1", [ForeignEvent(
                    "app/" + (bad if len(bad) < MAX_NAME_BYTES else "s" * MAX_ID_BYTES),
                    "app/note", {})])
            with pytest.raises(ValidationError):
                await w.append_events("evt-1", [ForeignEvent("app/notes", "app/" + bad, {})])
            with pytest.raises(RunNotFoundError):
                await _load(w, bad)
            with pytest.raises(RunNotFoundError):
                await _record(store, bad)
            assert await (await store.reader(SCOPE)).read_stream("app/" + bad) == ()
            other = await store.reader(bad)  # a scope no store can hold: nothing in it
            with pytest.raises(RunNotFoundError):
                await other.record("run-1")
            assert await other.read_stream("app/notes") == ()
        # a foreign stream that embeds a name of the limit fits the id limit
        long_stream = "app/" + "s" * MAX_NAME_BYTES
        assert (await w.append_events("evt-long", [ForeignEvent(long_stream, "app/note",
                                                                  {})])) \
            is CommitStatus.ACCEPTED
        # nothing was written: the ids refused above are all still free
        assert (await w.append_events("evt-1", [ForeignEvent("app/notes", "app/note",
                                                              {"a": 1})])) \
            is CommitStatus.ACCEPTED
        with pytest.raises(RunNotFoundError):
            await _record(store, "run-1")
        widest = "r" * (MAX_NAME_BYTES - 2) + "\u00e9"  # exactly the limit, in UTF-8 bytes
        longest_id = "c" * (MAX_ID_BYTES - 3) + "\u20ac"  # exactly the id limit (€: 3 bytes)
        created = await w.create_run(NewRun(widest), [], commit_id=longest_id)
        assert created.status is CommitStatus.ACCEPTED
        assert (await _record(store, widest)).position == 0
        assert (await w.create_run(NewRun("run-1"), [], commit_id="create:run-1")).status \
            is CommitStatus.ACCEPTED


SCENARIOS: dict[str, Callable[[StoreFactory], Awaitable[None]]] = {
    f.__name__: f
    for f in (
        test_store_creation, test_store_replay_and_base, test_store_input_queue,
        test_store_start_and_effect, test_store_decline_tool_call,
        test_store_group_composition, test_store_admission, test_store_settlement_snapshot,
        test_store_prepare_cas, test_store_projection, test_store_settlement_replay,
        test_store_isolation, test_store_takeover, test_store_reattach,
        test_store_ownership_lost, test_store_frozen_values,
        test_store_batch_prefix, test_store_batch_replay, test_store_batch_fenced,
        test_store_batch_validation, test_store_names,
    )
}
