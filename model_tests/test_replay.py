"""Replay and ownership at the store level: the memory store, the SQLite store and the
reference machine's store receive the same commands and must agree step by step.

Rules submit the shell's next command or any command family (refused ones too), replay
command ids from a Bundle (same content, or different content: first wins), retry
ambiguous commits, take the scope over (a new writer opens it: epoch + 1) and keep
committing through the fenced writers. Every answer (accepted, already applied, or the
refusal's class) and every group of facts is compared with the reference's; invariants
compare the stored logs, records and projections with the reference's after each step.
"""

from __future__ import annotations

import functools
import shutil
import tempfile
from pathlib import Path
from typing import Any

import attrs
import pytest
from _broken import RedecidingMemoryStore, UnfencedMemoryStore
from _driver import APPROVALS, CALLS, MODEL_OUTCOMES, TOOL_OUTCOMES, Move, build, moves, next_move
from _loop import Hosted, TrioLoopThread
from _oracle import INPUT0, ReferenceScope, abstract_fact, abstract_state, ids_report, run_name
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    invariant,
    multiple,
    precondition,
    rule,
    run_state_machine_as_test,
)

from runx_actors.protocol import commands as C
from runx_actors.protocol.commit import CommitRequest, CommitStatus, envelope
from runx_actors.protocol.errors import (
    CommandConflictError,
    OwnershipLostError,
    RunNotFoundError,
    RunTerminalError,
    StaleRuntimeError,
)
from runx_actors.protocol.values import NewRun, RunStatus
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store

SCOPE = "replay"
RUNS = 2
MAX_TAKEOVERS = 2
_REFUSAL = {OwnershipLostError: "fenced", RunTerminalError: "terminal",
            CommandConflictError: "conflict", StaleRuntimeError: "stale",
            RunNotFoundError: "not_found"}


@attrs.frozen
class Submitted:
    """A command that was submitted once (the Bundle's values)."""

    r: int
    cid: str
    command: C.Command
    base: int


async def _commit(writer: Any, request: CommitRequest) -> tuple[str, tuple[Any, ...]]:
    try:
        result = await writer.run_store().commit(request)
    except tuple(_REFUSAL) as exc:
        return _REFUSAL[type(exc)], ()
    status = "accepted" if result.status is CommitStatus.ACCEPTED else "already_applied"
    return status, tuple(result.facts)


async def _stream(writer: Any, run_id: str) -> tuple[Any, Any, Any, Any]:
    """(stream records, facts, record, load) of one Run, read through *writer*."""
    records = await writer.read_stream(f"run/{run_id}")
    facts = await writer.run_facts(run_id)
    return records, facts, await writer.record(run_id), await writer.run_store().load(run_id)


class ReplayMachine(RuleBasedStateMachine):
    """memory + SQLite + reference, in lockstep."""

    stores: tuple[str, ...] = ("memory", "sqlite")
    submitted = Bundle("submitted")

    def __init__(self) -> None:
        super().__init__()
        self.loop = TrioLoopThread()
        self.tmp = Path(tempfile.mkdtemp(prefix="replay-"))
        self.hosts: list[Hosted] = []
        self.backends: dict[str, Any] = {}
        for name in self.stores:
            if name == "sqlite":
                host = Hosted(self.loop, lambda: open_sqlite_store(self.tmp / "runs.sqlite"))
                self.hosts.append(host)
                self.backends[name] = host.value
            else:
                self.backends[name] = self.memory_store()
        self.writers = {n: self.loop.call(s.open, SCOPE) for n, s in self.backends.items()}
        self.fenced: list[dict[str, Any]] = []  # writers of earlier epochs, oldest first
        self.ref = ReferenceScope(RUNS, calls=CALLS, approvals=APPROVALS)
        for r in range(RUNS):
            for writer in self.writers.values():
                self.loop.call(functools.partial(writer.create_run, NewRun(run_name(r)),
                                                 (INPUT0,), commit_id=f"create:{run_name(r)}"))

    def memory_store(self) -> Any:
        return MemoryStore()

    def teardown(self) -> None:
        for host in self.hosts:
            host.close()
        self.loop.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    # -- plumbing ----------------------------------------------------------------------

    def _snapshot(self, r: int) -> Any:
        return self.loop.call(self.writers[self.stores[0]].run_store().load, run_name(r))

    def _apply(self, writers: dict[str, Any], epoch: int, sub: Submitted) -> str:
        """Submit *sub* through *writers* and to the reference; all must agree."""
        request = CommitRequest(sub.base, envelope(run_name(sub.r), sub.cid, sub.command))
        answers = {n: self.loop.call(_commit, w, request) for n, w in writers.items()}
        status, facts = self.ref.commit(sub.r, sub.cid, sub.command, epoch=epoch, base=sub.base)
        event(f"{type(sub.command).__name__}: {status}")
        for name, (got, got_facts) in answers.items():
            assert not (status == "fenced" and got != "fenced"), (
                f"INV-28: {name} let a fenced writer's commit through ({got}): {sub}")
            assert not (status == "already_applied" and got != status), (
                f"INV-9: {name} did not replay a known command id ({got}): {sub}")
            assert got == status, f"{name} answered {got}, the reference {status} ({sub})"
            assert tuple(abstract_fact(f) for f in got_facts) == facts, (
                f"{name} returned other facts than the reference for {sub}")
        return status

    def _submit(self, r: int, move: Move | None) -> Submitted | None:
        built = build(run_name(r), self._snapshot(r), move) if move is not None else None
        if built is None:
            return None
        sub = Submitted(r, *built)
        self._apply(self.writers, self.ref.epoch, sub)
        return sub

    def _facts_count(self) -> dict[str, int]:
        return {n: sum(len(self.loop.call(w.run_facts, run_name(r))) for r in range(RUNS))
                for n, w in self.writers.items()}

    # -- rules -------------------------------------------------------------------------

    @rule(target=submitted, r=st.integers(0, RUNS - 1), model=MODEL_OUTCOMES,
          tool=TOOL_OUTCOMES)
    def advance(self, r: int, model: str, tool: str) -> Any:
        """The loop's next command (real ``plan_next``), or the executor's settlement."""
        sub = self._submit(r, next_move(self._snapshot(r), model, tool))
        return sub if sub is not None else multiple()

    @rule(target=submitted, r=st.integers(0, RUNS - 1), move=moves())
    def submit(self, r: int, move: Move) -> Any:
        sub = self._submit(r, move)
        return sub if sub is not None else multiple()

    @rule(sub=submitted)
    def replay(self, sub: Submitted) -> None:
        """INV-9: the same command id again returns the first group's facts and appends
        nothing (or, if it was refused before, is decided again like a fresh one)."""
        known = sub.cid in self.ref.store.cids
        before = self._facts_count()
        status = self._apply(self.writers, self.ref.epoch, sub)
        if known:
            assert status == "already_applied"
            assert self._facts_count() == before, "INV-9: a replay appended"

    @rule(sub=submitted, move=moves())
    def replay_with_other_content(self, sub: Submitted, move: Move) -> None:
        """First wins: a known id with a different command still replays the original."""
        built = build(run_name(sub.r), self._snapshot(sub.r), move)
        if built is None:
            return
        self._apply(self.writers, self.ref.epoch, Submitted(sub.r, sub.cid, built[1], built[2]))

    @rule(r=st.integers(0, RUNS - 1), model=MODEL_OUTCOMES, tool=TOOL_OUTCOMES)
    def ambiguous_commit(self, r: int, model: str, tool: str) -> None:
        """The commit happened but its answer was lost: the retry replays it."""
        sub = self._submit(r, next_move(self._snapshot(r), model, tool))
        if sub is not None and sub.cid in self.ref.store.cids:
            assert self._apply(self.writers, self.ref.epoch, sub) == "already_applied"

    @precondition(lambda self: len(self.fenced) < MAX_TAKEOVERS)
    @rule()
    def take_over(self) -> None:
        """Another writer opens the scope (epoch + 1); the current one is fenced."""
        self.fenced.append(self.writers)
        self.writers = {n: self.loop.call(s.open, SCOPE) for n, s in self.backends.items()}
        epoch = self.ref.open()
        for name, writer in self.writers.items():
            assert writer.epoch == epoch, f"{name} opened epoch {writer.epoch}, not {epoch}"

    @precondition(lambda self: bool(self.fenced))
    @rule(r=st.integers(0, RUNS - 1), model=MODEL_OUTCOMES, tool=TOOL_OUTCOMES,
          which=st.integers(0, MAX_TAKEOVERS - 1))
    def fenced_writer_commits(self, r: int, model: str, tool: str, which: int) -> None:
        """INV-28: an old writer's commit fails with OwnershipLostError, writes nothing."""
        old = self.fenced[which % len(self.fenced)]
        built = build(run_name(r), self._snapshot(r), next_move(self._snapshot(r), model, tool)
                      or Move("cancel"))
        if built is None:
            return
        before = self._facts_count()
        epoch = next(iter(old.values())).epoch
        status = self._apply(old, epoch, Submitted(r, *built))
        assert status == "fenced", f"INV-28: a fenced writer's commit was {status}"
        assert self._facts_count() == before, "INV-28: a fenced writer appended"

    @precondition(lambda self: bool(self.fenced))
    @rule(sub=submitted)
    def fenced_writer_replays(self, sub: Submitted) -> None:
        old = self.fenced[-1]
        before = self._facts_count()
        self._apply(old, next(iter(old.values())).epoch, sub)
        assert self._facts_count() == before, "INV-28: a fenced writer appended"

    # -- invariants --------------------------------------------------------------------

    @invariant()
    def inv_28_fenced_writer_writes_nothing(self) -> None:
        """Every stored fact carries the commit id and writer epoch the reference's log
        has for it: nothing from a fenced writer, no commit id twice (INV-9, INV-10)."""
        for r in range(RUNS):
            want = self.ref.log(r)
            for name, writer in self.writers.items():
                records = self.loop.call(writer.read_stream, f"run/{run_name(r)}")
                got = [(rec.commit_id, rec.epoch) for rec in records]
                assert got == want, f"{name}: stored (commit id, epoch) differ from the reference"
                assert [rec.index for rec in records] == list(range(len(records)))

    @invariant()
    def inv_40_fold_equals_projection(self) -> None:
        """record (fold of the log) == load (projection) == the reference's projection,
        at the same position (INV-39, INV-40)."""
        for r in range(RUNS):
            want = self.ref.state(r)
            for name, writer in self.writers.items():
                _, _, record, load = self.loop.call(_stream, writer, run_name(r))
                assert record.position == self.ref.position(r), f"{name}: position"
                if record.state.status is RunStatus.ACTIVE:
                    assert load == record, f"{name}: projection differs from the fold"
                assert abstract_state(record.state) == want, f"{name}: state differs"

    @invariant()
    def inv_9_replay_returns_original(self) -> None:
        """Stored groups are the reference's groups (so a replay has one to return)."""
        for r in range(RUNS):
            for name, writer in self.writers.items():
                records, facts, _, _ = self.loop.call(_stream, writer, run_name(r))
                assert [abstract_fact(f) for f in facts] == list(self.ref.store.streams[r])
                report = ids_report(r, [(rec.commit_id, f) for rec, f in zip(records, facts)])
                assert report is None, f"{name}: {report}"

    @invariant()
    def inv_2_ending_is_final(self) -> None:
        for r in range(RUNS):
            for name, writer in self.writers.items():
                facts = self.loop.call(writer.run_facts, run_name(r))
                ends = [i for i, f in enumerate(facts) if type(f).__name__ == "RunEnded"]
                assert not ends or ends == [len(facts) - 1], f"{name}: a fact after RunEnded"


ReplayMachine.TestCase.settings = settings(
    max_examples=max(10, settings.default.max_examples // 2), stateful_step_count=30,
    deadline=None)
test_replay = ReplayMachine.TestCase


# --------------------------------------------------------------------------- broken stores


class UnfencedReplayMachine(ReplayMachine):
    stores = ("memory",)

    def memory_store(self) -> Any:
        return UnfencedMemoryStore()


class RedecidingReplayMachine(ReplayMachine):
    stores = ("memory",)

    def memory_store(self) -> Any:
        return RedecidingMemoryStore()


BROKEN = settings(max_examples=100, stateful_step_count=25, deadline=None, database=None,
                  phases=[Phase.generate], print_blob=False,
                  suppress_health_check=list(HealthCheck))


def test_replay_machine_catches_a_store_without_the_epoch_fence() -> None:
    with pytest.raises(AssertionError, match="INV-28"):
        run_state_machine_as_test(UnfencedReplayMachine, settings=BROKEN)


def test_replay_machine_catches_a_store_that_decides_a_replay_again() -> None:
    with pytest.raises(AssertionError, match="INV-9"):
        run_state_machine_as_test(RedecidingReplayMachine, settings=BROKEN)
