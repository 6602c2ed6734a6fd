"""The runtime level: ``open_runtime`` over a store with a ``LocalExecutor``, driven one
step at a time from a trio loop the machine owns (style guide §6).

Rules create Runs, advance one (the loop's next commit and dispatch), deliver the
Outcome of a dispatched key, approve or reject a waiting call, cancel, crash the runtime
and restart it (a new epoch; takeover reconciliation runs), take the scope over with a
second runtime while the first one lives on (fenced), drive or deliver through the fenced
runtime, deliver Outcomes again (duplicates, late ones after cancel or takeover), and race
two drivers of one Run. After every rule the loop is let run until everything is blocked,
then the invariants check: INV-27 (one live driver per Run, RunAlreadyRunningError for a
second one), INV-28 (a fenced runtime writes nothing; every stored fact carries the epoch
of the writer that owned the scope then), INV-43 (no actor registered when idle), record ==
projection (INV-40), every id the reference's, the reference's log invariants on the
stored log, and one execution per key at the executor.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import attrs
import pytest
import trio
import trio.testing
from _broken import UnfencedMemoryStore
from _loop import Hosted, TrioLoopThread
from _oracle import abstract_fact, abstract_state, ids_report, run_name, spec_invariants, spec_state
from hypothesis import HealthCheck, Phase, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from runx_actors.executors import call_tools, open_local_executor, python_tool, reply, tool_call
from runx_actors.protocol import facts as F
from runx_actors.protocol.errors import (
    ExecutionNotFoundError,
    OutcomeUnavailableError,
    OwnershipLostError,
    RunAlreadyRunningError,
    StaleRuntimeError,
)
from runx_actors.protocol.plan import waiting_calls
from runx_actors.protocol.values import ModelRequest, ModelResult, ResponsePolicy, RunStatus
from runx_actors.runtime import LoopDisposition, open_runtime
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store

SCOPE = "runtime"
MODEL = "planner"
MAX_RUNS = 2
MAX_OPENS = 3  # restarts + takeovers


class PlanModel:
    """A deterministic model: tool calls until the transcript holds tool results, then a
    text answer (the answer depends only on the request, never on call order)."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.lowlevel.checkpoint()
        messages = json.loads(request.body).get("messages", [])
        if any(m.get("role") == "tool" for m in messages):
            return reply("done")
        return call_tools(tool_call("work", {"n": 0}), tool_call("gated", {"n": 1}))


async def _work(**arguments: Any) -> dict[str, Any]:
    await trio.lowlevel.checkpoint()
    return {"ok": True, **arguments}


TOOLS = (python_tool(_work, ref="work"),
         python_tool(_work, ref="gated", policy=ResponsePolicy.APPROVAL_REQUIRED))


@attrs.define(eq=False)
class Incarnation:
    """One runtime process: its open_runtime context, hosted by a task of the loop."""

    host: Hosted
    epoch: int
    fenced: bool = False

    @property
    def app(self) -> Any:
        return self.host.value


def _idle(incarnations: list[Incarnation]) -> bool:
    return all(not inc.app.runtime.live_actors() for inc in incarnations)


async def _quiesce(incarnations: list[Incarnation]) -> None:
    """Let every task run until all are blocked and no actor is registered (a background
    settlement of a kept key is an operation too); the SQLite writer thread works while
    trio's tasks look blocked, hence the retries."""
    for _ in range(200):
        await trio.testing.wait_all_tasks_blocked(cushion=0.002)
        if _idle(incarnations):
            return
        await trio.sleep(0.005)


class RuntimeMachine(RuleBasedStateMachine):
    """The real runtime, step by step, with crash, takeover and Outcome faults."""

    def __init__(self) -> None:
        super().__init__()
        self.loop = TrioLoopThread()
        self.store = self.make_store()
        self.executor_host = Hosted(self.loop, lambda: open_local_executor(
            tools=TOOLS, models={MODEL: PlanModel()}))
        self.executor = self.executor_host.value
        self.reader = self.loop.call(self.store.reader, SCOPE)  # reads need no ownership
        self.incarnations: list[Incarnation] = []
        self.opened: list[tuple[int, dict[str, int]]] = []  # (epoch, stream lengths then)
        self.runs = 0
        self.dispatched: list[Any] = []  # keys dispatched and not yet delivered
        self.outcomes: list[Any] = []  # Outcomes read so far (for duplicates)
        self._open()
        self.create_run()  # most rules need a Run; a second one comes from the rule

    def make_store(self) -> Any:
        return MemoryStore()

    def teardown(self) -> None:
        for inc in reversed(self.incarnations):
            inc.host.close()
        self.executor_host.close()
        self.close_store()
        self.loop.close()

    def close_store(self) -> None:
        pass

    # -- plumbing ------------------------------------------------------------------------

    @property
    def current(self) -> Incarnation:
        return self.incarnations[-1]

    def _lengths(self) -> dict[str, int]:
        return {run_name(r): len(self._facts(run_name(r))) for r in range(self.runs)}

    def _facts(self, run_id: str) -> tuple[Any, ...]:
        return tuple(self.loop.call(self.reader.run_facts, run_id))

    def _open(self) -> None:
        """A runtime process opens the scope: epoch + 1, takeover reconciliation."""
        lengths = self._lengths()

        @asynccontextmanager
        async def runtime() -> AsyncIterator[Any]:
            async with open_runtime(self.store, self.executor, scope=SCOPE, model=MODEL,
                                    tools=TOOLS) as app:
                yield app

        host = Hosted(self.loop, runtime)
        epoch = host.value.writer.epoch
        self.incarnations.append(Incarnation(host, epoch))
        self.opened.append((epoch, lengths))
        self.loop.call(_quiesce, self.incarnations)  # kept keys settle in the background

    def _handle(self, inc: Incarnation, r: int) -> Any:
        return inc.app.runtime.run(run_name(r))

    def _state(self, r: int) -> Any:
        return self.loop.call(self.reader.record, run_name(r)).state

    # -- rules ---------------------------------------------------------------------------

    @precondition(lambda self: self.runs < MAX_RUNS)
    @rule()
    def create_run(self) -> None:
        """A new Run through the current runtime."""
        self.loop.call(self.current.app.create_run, run_name(self.runs), ["hello"])
        self.runs += 1

    @rule(r=st.integers(0, MAX_RUNS - 1))
    def advance(self, r: int) -> None:
        """One loop operation on the current runtime: commit what is next, dispatch it."""
        r %= self.runs
        result = self.loop.call(self._handle(self.current, r).advance, self.current.app.builder)
        event(f"advance: {result.disposition.value}")
        if result.disposition is LoopDisposition.DISPATCHED:
            self.dispatched.extend(result.dispatched)

    @rule(r=st.integers(0, MAX_RUNS - 1))
    def step(self, r: int) -> None:
        """One turn of the loop: advance, then deliver every Outcome it dispatched."""
        before = len(self.dispatched)
        self.advance(r)
        while len(self.dispatched) > before:
            self._deliver(self.dispatched.pop())

    @precondition(lambda self: bool(self.dispatched))
    @rule(i=st.integers(0, 7))
    def deliver(self, i: int) -> None:
        """Read a dispatched key's Outcome and deliver it to the current runtime."""
        self._deliver(self.dispatched.pop(i % len(self.dispatched)))

    def _deliver(self, key: Any) -> None:
        try:
            outcome = self.loop.call(self.current.app.runtime.watcher.await_outcome, key)
        except (ExecutionNotFoundError, OutcomeUnavailableError) as exc:
            event(f"deliver: outcome unreadable ({type(exc).__name__})")
            return  # settled and collected by takeover's watcher, or never ran
        self.outcomes.append(outcome)
        result = self.loop.call(self.current.app.runtime.deliver, outcome)
        event(f"deliver: {result.disposition.value}")

    @precondition(lambda self: bool(self.outcomes))
    @rule(i=st.integers(0, 7))
    def deliver_again(self, i: int) -> None:
        """A duplicated or late Outcome: DROPPED, nothing appended (INV-26)."""
        outcome = self.outcomes[i % len(self.outcomes)]
        before = self._lengths()
        result = self.loop.call(self.current.app.runtime.deliver, outcome)
        event(f"deliver again: {result.disposition.value}")
        assert result.disposition is LoopDisposition.DROPPED, result
        assert self._lengths() == before, "INV-26: a duplicate Outcome appended"

    @rule(r=st.integers(0, MAX_RUNS - 1), approve=st.booleans())
    def answer(self, r: int, approve: bool) -> None:
        r %= self.runs
        if not waiting_calls(self._state(r)):
            return
        verb = self.current.app.approve if approve else self.current.app.reject
        try:
            self.loop.call(verb, run_name(r))
        except StaleRuntimeError:
            pass  # answered meanwhile

    @rule(r=st.integers(0, MAX_RUNS - 1))
    def cancel(self, r: int) -> None:
        r %= self.runs
        if self._state(r).status is RunStatus.ACTIVE:
            self.loop.call(self.current.app.cancel, run_name(r))

    @precondition(lambda self: len(self.incarnations) < MAX_OPENS)
    @rule()
    def crash_and_restart(self) -> None:
        """The current runtime dies (its task is cancelled); a new process opens the
        scope (epoch + 1) and reconciles what was left EXECUTING."""
        self.current.host.crash()
        self.incarnations.pop()
        self._open()

    @precondition(lambda self: len(self.incarnations) < MAX_OPENS)
    @rule()
    def take_over(self) -> None:
        """A second runtime opens the scope while the current one lives on, fenced."""
        self.current.fenced = True
        self._open()

    @precondition(lambda self: any(inc.fenced for inc in self.incarnations))
    @rule(r=st.integers(0, MAX_RUNS - 1))
    def fenced_runtime_advances(self, r: int) -> None:
        """INV-28: the superseded runtime may plan, but it commits nothing."""
        r %= self.runs
        old = next(inc for inc in self.incarnations if inc.fenced)
        before = self._lengths()
        try:
            result = self.loop.call(self._handle(old, r).advance, old.app.builder, timeout=5)
            event(f"fenced advance: {result.disposition.value}")
            assert result.disposition is not LoopDisposition.DISPATCHED, (
                "INV-28: a fenced runtime dispatched")
        except OwnershipLostError:
            event("fenced advance: OwnershipLostError")
        except trio.TooSlowError:
            raise AssertionError("INV-28: the fenced runtime neither stopped with "
                                 "OwnershipLostError nor finished") from None
        finally:  # also when the fenced runtime hangs or fails otherwise
            assert self._lengths() == before, "INV-28: a fenced runtime appended facts"

    @precondition(lambda self: any(inc.fenced for inc in self.incarnations)
                  and bool(self.outcomes))
    @rule(i=st.integers(0, 7))
    def fenced_runtime_delivers(self, i: int) -> None:
        old = next(inc for inc in self.incarnations if inc.fenced)
        before = self._lengths()
        try:
            outcome = self.outcomes[i % len(self.outcomes)]
            result = self.loop.call(old.app.runtime.deliver, outcome, timeout=5)
            event(f"fenced deliver: {result.disposition.value}")
        except OwnershipLostError:
            event("fenced deliver: OwnershipLostError")
        except trio.TooSlowError:
            raise AssertionError("INV-28: the fenced runtime neither stopped with "
                                 "OwnershipLostError nor finished") from None
        finally:
            assert self._lengths() == before, "INV-28: a fenced runtime appended facts"

    @rule(r=st.integers(0, MAX_RUNS - 1))
    def two_drivers(self, r: int) -> None:
        """INV-27: two concurrent advances of one Run: never both driving at once."""
        r %= self.runs
        handle = self._handle(self.current, r)
        builder = self.current.app.builder

        async def race() -> list[Any]:
            results: list[Any] = [None, None]

            async def one(k: int) -> None:
                try:
                    results[k] = await handle.advance(builder)
                except RunAlreadyRunningError as exc:
                    results[k] = exc

            async with trio.open_nursery() as nursery:
                nursery.start_soon(one, 0)
                nursery.start_soon(one, 1)
            return results

        results = self.loop.call(race)
        refused = [x for x in results if isinstance(x, RunAlreadyRunningError)]
        event(f"two drivers: {len(refused)} refused")
        assert len(refused) <= 1, "both drivers were refused"
        for x in results:
            if not isinstance(x, BaseException) and x.disposition is LoopDisposition.DISPATCHED:
                self.dispatched.extend(x.dispatched)

    # -- invariants ----------------------------------------------------------------------

    @invariant()
    def inv_43_no_live_actors_when_idle(self) -> None:
        self.loop.call(_quiesce, self.incarnations)
        for inc in self.incarnations:
            assert inc.app.runtime.live_actors() == frozenset(), (
                f"INV-43: epoch {inc.epoch} still has actors {inc.app.runtime.live_actors()}")

    @invariant()
    def inv_27_single_writer(self) -> None:
        """One runtime per epoch, and only the newest one owns the scope."""
        epochs = [inc.epoch for inc in self.incarnations]
        assert epochs == sorted(set(epochs)), f"INV-27: epochs {epochs}"
        assert all(inc.fenced for inc in self.incarnations[:-1])

    @invariant()
    def inv_28_fenced_writer_writes_nothing(self) -> None:
        """Every fact carries the epoch of the writer that owned the scope when it was
        appended: facts appended after epoch E opened carry E (or a later epoch)."""
        for r in range(self.runs):
            run_id = run_name(r)
            records = self.loop.call(self.reader.read_stream, f"run/{run_id}")
            for rec in records:
                owner = max((e for e, lengths in self.opened
                             if lengths.get(run_id, 0) <= rec.index), default=0)
                assert rec.epoch == owner, (
                    f"INV-28: {run_id}[{rec.index}] written by epoch {rec.epoch}, but epoch "
                    f"{owner} owned the scope then")

    @invariant()
    def inv_40_record_equals_projection(self) -> None:
        writer = self.current.app.writer
        for r in range(self.runs):
            record = self.loop.call(writer.record, run_name(r))
            load = self.loop.call(writer.run_store().load, run_name(r))
            assert record == load, f"INV-40: {run_name(r)} record differs from the projection"

    @invariant()
    def inv_ids_and_reference_log_invariants(self) -> None:
        """The stored log, abstracted, satisfies the reference's log invariants, and every
        id in it is the reference's derivation."""
        writer = self.current.app.writer
        log, streams, runs, cids = [], [], [], set()
        for r in range(self.runs):
            run_id = run_name(r)
            records = self.loop.call(writer.read_stream, f"run/{run_id}")
            facts = self.loop.call(writer.run_facts, run_id)
            report = ids_report(r, [(rec.commit_id, f) for rec, f in zip(records, facts)])
            assert report is None, report
            streams.append(tuple(abstract_fact(f) for f in facts))
            runs.append(abstract_state(self.loop.call(writer.record, run_id).state))
            for rec, fact in zip(records, facts):
                if log and log[-1][0] == rec.commit_id and log[-1][1] == r:
                    log[-1][3].append(abstract_fact(fact))
                else:
                    log.append((rec.commit_id, r, rec.epoch, [abstract_fact(fact)]))
                cids.add(rec.commit_id)
        commits = tuple(spec_state.Commit(cid, r, tuple(fs), epoch, epoch, "runtime")
                        for cid, r, epoch, fs in log)
        store = spec_state.Store(self.current.epoch, commits, tuple(streams), tuple(runs),
                                 frozenset(cids))
        world = spec_state.World(store=store, owners=(), recs=(), inflight=(), crashes=0,
                                 takeovers=0, duplicates=0, inputs_sent=())
        for inv in spec_invariants.INVARIANTS:
            message = inv.check(world)
            assert message is None, f"{inv.name}: {message}"

    @invariant()
    def inv_exec_one_execution_per_key(self) -> None:
        for r in range(self.runs):
            for fact in self._facts(run_name(r)):
                if isinstance(fact, F.ModelStepStarted | F.ToolCallStarted):
                    key = _key(fact.effect, run_name(r))
                    runs = self.executor.history(key).count("execution_running")
                    assert runs <= 1, f"{fact.effect[:12]} executed {runs} times"


def _key(effect_id: str, run_id: str) -> Any:
    from runx_actors import effect

    return effect.AssignmentKey(SCOPE, run_id, effect_id)


class SqliteRuntimeMachine(RuntimeMachine):
    """The same machine over the SQLite store (writer thread, group commit)."""

    def make_store(self) -> Any:
        self.tmp = Path(tempfile.mkdtemp(prefix="runtime-"))
        self.store_host = Hosted(self.loop, lambda: open_sqlite_store(self.tmp / "runs.sqlite"))
        return self.store_host.value

    def close_store(self) -> None:
        self.store_host.close()
        shutil.rmtree(self.tmp, ignore_errors=True)


RuntimeMachine.TestCase.settings = settings(
    max_examples=max(10, settings.default.max_examples), stateful_step_count=25,
    deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_runtime = RuntimeMachine.TestCase
SqliteRuntimeMachine.TestCase.settings = settings(
    max_examples=max(5, settings.default.max_examples // 2), stateful_step_count=20,
    deadline=None, suppress_health_check=[HealthCheck.too_slow])
test_runtime_sqlite = SqliteRuntimeMachine.TestCase


# --------------------------------------------------------------------------- a broken store


class UnfencedRuntimeMachine(RuntimeMachine):
    def make_store(self) -> Any:
        return UnfencedMemoryStore()


BROKEN = settings(max_examples=60, stateful_step_count=6, deadline=None, database=None,
                  phases=[Phase.generate], print_blob=False,
                  suppress_health_check=list(HealthCheck))


def test_runtime_machine_catches_a_store_without_the_epoch_fence() -> None:
    with pytest.raises(AssertionError, match="INV-28"):
        run_state_machine_as_test(UnfencedRuntimeMachine, settings=BROKEN)
