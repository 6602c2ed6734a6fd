"""Takeover verdicts, redispatch and the dispatch ledger (spec §6.10, §8.5 #88–#93)."""

from __future__ import annotations

import types
from typing import Any

import attrs
import pytest
import trio
from runtime_harness import MODEL, GatedModel, ProxyExecutor, of_type

from runx_actors import effect
from runx_actors.executors import open_local_executor, reply
from runx_actors.protocol import facts as F
from runx_actors.protocol.errors import (
    AbandonWithExecutorError,
    DispatchRejectedError,
    DispatchRetryableError,
    DispatchUnknownError,
    FencedError,
    LedgerConflictError,
    MissingPolicyPortsError,
    NoExecutionPortError,
    StateConflictError,
    TargetWithoutEffectError,
    ValidationError,
)
from runx_actors.protocol.plan import RecoveryTarget, recovery_targets
from runx_actors.protocol.state import MachineState, ModelStep, Open
from runx_actors.protocol.values import ModelStepStatus, RunStatus
from runx_actors.runtime import (
    ActorRuntime,
    Dispatched,
    DispatchPlanned,
    GivenUp,
    LedgerAppendStatus,
    LoopDisposition,
    MemoryDispatchLedger,
    MissingPolicy,
    Reconciler,
    Verdict,
    assignment_from_target,
    open_runtime,
    recover_interrupted,
)
from runx_actors.testing import builders as b

SCOPE = "scope-1"
A = effect.AttachmentState


def executing_model_state() -> MachineState:
    log = b.SimpleLog.with_run("run-1", ["in-1"], scope=SCOPE)
    log.apply(b.prepare(log.state(), log.position()))
    log.apply(b.start_model(log.state()))
    return log.state()


def executing_tools_state(n: int = 2) -> MachineState:
    log = b.SimpleLog.with_run("run-1", ["in-1"], scope=SCOPE)
    log.apply(b.prepare(log.state(), log.position(), tools=["search"]))
    log.apply(b.start_model(log.state()))
    log.apply(b.model_result(log.state(), tool_calls=[("search", f'{{"q":{i}}}')
                                                      for i in range(n)]))
    for i in range(n):
        log.apply(b.start_tool(log.state(), i))
    return log.state()


class FakePort:
    """attach/abort answer from tables keyed by effect; records every call."""

    def __init__(self, attach: dict[str, Any] | None = None,
                 abort: dict[str, Any] | None = None, *, default: Any = A.MISSING) -> None:
        self.attach_table = attach or {}
        self.abort_table = abort or {}
        self.default = default
        self.calls: list[tuple[str, str]] = []

    async def attach(self, a: effect.Assignment) -> Any:
        self.calls.append(("attach", a.effect))
        state = self.attach_table.get(a.effect, self.default)
        if not isinstance(state, A):  # a misbehaving executor: not an Attachment at all
            return types.SimpleNamespace(state=state)
        return effect.Attachment(state=state)

    async def abort(self, a: effect.Assignment) -> effect.Attachment:
        self.calls.append(("abort", a.effect))
        return effect.Attachment(state=self.abort_table.get(a.effect, A.ABORTED))


class RecoveringPort(FakePort):
    def __init__(self, **kw: Any) -> None:
        super().__init__(**kw)
        self.recovered: list[effect.AssignmentKey] = []

    async def recover_execution(self, key: effect.AssignmentKey) -> None:
        self.recovered.append(key)


class _Bogus:
    value = "bogus"


async def test_plan_verdicts() -> None:
    state = executing_tools_state(2)
    targets = recovery_targets(state)
    e0, e1 = (t.effect for t in targets)

    async def verdicts(port: Any, **kw: Any) -> list[Verdict]:
        return [d.verdict for d in await Reconciler(port, **kw).plan(SCOPE, state)]

    assert await verdicts(FakePort({e0: A.ACTIVE, e1: A.TERMINAL})) == [Verdict.KEEP] * 2
    assert await verdicts(FakePort({e0: A.ORPHANED, e1: A.ABORTED})) == [
        Verdict.DEFER, Verdict.DISPOSE]
    # missing, then a won abort -> dispose; the abort came before the verdict (INV-31)
    port = FakePort({e0: A.MISSING, e1: A.MISSING})
    assert await verdicts(port) == [Verdict.DISPOSE] * 2
    assert port.calls == [("attach", e0), ("abort", e0), ("attach", e1), ("abort", e1)]
    # missing, but an acceptance won the abort race -> keep / defer, never dispose
    assert await verdicts(FakePort({e0: A.MISSING, e1: A.MISSING},
                                   {e0: A.ACTIVE, e1: A.ORPHANED})) == [
        Verdict.KEEP, Verdict.DEFER]
    with pytest.raises(ValidationError):
        await Reconciler(FakePort(default=_Bogus())).plan(SCOPE, state)
    with pytest.raises(NoExecutionPortError):
        await Reconciler(None).plan(SCOPE, state)
    with pytest.raises(AbandonWithExecutorError):
        await Reconciler(FakePort(), abandon=True).plan(SCOPE, state)
    assert await verdicts(None, abandon=True) == [Verdict.DISPOSE] * 2
    model_state = executing_model_state()
    no_effect = attrs.evolve(model_state, current=attrs.evolve(model_state.current, effect=""))
    with pytest.raises(TargetWithoutEffectError):
        await Reconciler(FakePort()).plan(SCOPE, no_effect)


def test_assignment_from_target() -> None:
    model_state = executing_model_state()
    (target,) = recovery_targets(model_state)
    a = assignment_from_target(SCOPE, model_state, target)
    step = model_state.current
    assert isinstance(a.body, effect.ModelAssignment)
    assert a.body.request is None  # digest-only: validate / attach / abort (RUN-EXE-7)
    assert (a.body.model, a.body.request_digest) == (step.model, step.request_digest)
    assert a.key == effect.AssignmentKey(SCOPE, "run-1", target.effect)
    assert a.target is None

    tool_state = executing_tools_state(1)
    (target,) = recovery_targets(tool_state)
    a = assignment_from_target(SCOPE, tool_state, target)
    call = tool_state.current.calls[0]
    assert isinstance(a.body, effect.ToolAssignment)
    assert (a.body.tool_ref, a.body.definition_digest, a.body.arguments, a.body.policy,
            a.body.replay, a.body.placement) == (
        call.tool_ref, call.definition_digest, call.arguments, call.policy, call.replay,
        call.placement)
    assert a.key == effect.AssignmentKey(SCOPE, "run-1", call.effect)
    with pytest.raises(ValidationError):
        assignment_from_target(SCOPE, tool_state, RecoveryTarget(
            run_id="run-1", step_id="other", call_id="x", effect="e"))


async def test_plan_asks_recoverer_for_orphans() -> None:
    state = executing_model_state()
    port = RecoveringPort(default=A.ORPHANED)
    (decision,) = await Reconciler(port).plan(SCOPE, state)
    assert decision.verdict is Verdict.DEFER
    assert port.recovered == [effect.AssignmentKey(SCOPE, "run-1", state.current.effect)]
    # a port without the Recoverer capability is simply not asked
    plain = FakePort(default=A.ORPHANED)
    (decision,) = await Reconciler(plain).plan(SCOPE, state)
    assert decision.verdict is Verdict.DEFER


class Redispatch:
    """A scripted redispatch route: one outcome per call (None = success)."""

    def __init__(self, *outcomes: BaseException | None) -> None:
        self.outcomes = list(outcomes)
        self.calls = 0

    async def __call__(self, key: effect.AssignmentKey) -> None:
        self.calls += 1
        outcome = self.outcomes.pop(0) if self.outcomes else None
        if outcome is not None:
            raise outcome


async def test_plan_redispatches_missing_within_budget() -> None:
    state = executing_model_state()
    key = effect.AssignmentKey(SCOPE, "run-1", state.current.effect)

    async def plan(route: Redispatch, ledger: MemoryDispatchLedger, budget: int = 2) -> Any:
        rec = Reconciler(FakePort(default=A.MISSING), missing=MissingPolicy.REDISPATCH_MISSING,
                         ledger=ledger, redispatch=route, budget=budget, epoch=1)
        (decision,) = await rec.plan(SCOPE, state)
        return decision

    ledger = MemoryDispatchLedger()
    d = await plan(Redispatch(None), ledger)            # first redispatch
    assert d.verdict is Verdict.REDISPATCH
    st = await ledger.load(key)
    assert (st.planned, st.dispatched, st.owed) == (1, 1, False)
    d = await plan(Redispatch(DispatchRetryableError("busy")), ledger)
    assert (d.verdict, d.retry) == (Verdict.DEFER, True)
    st = await ledger.load(key)
    assert (st.planned, st.dispatched, st.owed) == (2, 1, True)
    d = await plan(Redispatch(DispatchUnknownError("?")), ledger)  # the owed one is reused
    assert (d.verdict, d.retry) == (Verdict.DEFER, True)
    assert (await ledger.load(key)).planned == 2
    d = await plan(Redispatch(None), ledger)  # owed attempt at the budget is still made
    assert d.verdict is Verdict.REDISPATCH
    st = await ledger.load(key)
    assert (st.planned, st.dispatched) == (2, 2)
    d = await plan(Redispatch(None), ledger)  # budget exhausted -> given_up, abort, dispose
    assert d.verdict is Verdict.DISPOSE
    st = await ledger.load(key)
    assert st.given_up and st.reason == "budget"
    route = Redispatch(None)
    d = await plan(route, ledger)  # already given up -> dispose without redispatching
    assert d.verdict is Verdict.DISPOSE and route.calls == 0
    # a definite rejection gives up at once
    other = MemoryDispatchLedger()
    d = await plan(Redispatch(DispatchRejectedError("no")), other)
    assert d.verdict is Verdict.DISPOSE
    assert (await other.load(key)).given_up


async def test_missing_policy_is_explicit() -> None:
    state = executing_model_state()
    port = FakePort(default=A.MISSING)
    rec = Reconciler(port)
    assert rec.missing is MissingPolicy.DISPOSE_MISSING
    (decision,) = await rec.plan(SCOPE, state)
    assert decision.verdict is Verdict.DISPOSE
    for kw in ({}, {"ledger": MemoryDispatchLedger()}, {"redispatch": Redispatch()}):
        with pytest.raises(MissingPolicyPortsError):
            await Reconciler(port, missing=MissingPolicy.REDISPATCH_MISSING, **kw).plan(
                SCOPE, state)


async def test_dispatch_ledger_conformance() -> None:
    ledger = MemoryDispatchLedger()
    k1 = effect.AssignmentKey(SCOPE, "run-1", "e1")
    k2 = effect.AssignmentKey(SCOPE, "run-1", "e2")
    assert await ledger.append(k1, DispatchPlanned(1), seq=0, epoch=1) is \
        LedgerAppendStatus.ACCEPTED
    # replay of a known entry (same commit id) -> ALREADY_APPLIED, nothing appended
    assert await ledger.append(k1, DispatchPlanned(1), seq=0, epoch=1) is \
        LedgerAppendStatus.ALREADY_APPLIED
    assert (await ledger.load(k1)).head == 1
    with pytest.raises(LedgerConflictError):  # stale sequence
        await ledger.append(k1, Dispatched(1), seq=0, epoch=1)
    with pytest.raises(StateConflictError):  # plan while an attempt is owed
        await ledger.append(k1, DispatchPlanned(2), seq=1, epoch=1)
    assert await ledger.append(k1, Dispatched(1), seq=1, epoch=2) is \
        LedgerAppendStatus.ACCEPTED  # a later epoch is accepted and becomes the highest
    with pytest.raises(FencedError):  # an earlier epoch is fenced
        await ledger.append(k1, DispatchPlanned(2), seq=2, epoch=1)
    await ledger.append(k1, GivenUp("budget"), seq=2, epoch=2)
    with pytest.raises(StateConflictError):  # nothing after given_up
        await ledger.append(k1, DispatchPlanned(2), seq=3, epoch=2)
    # keys are independent
    assert await ledger.append(k2, DispatchPlanned(1), seq=0, epoch=1) is \
        LedgerAppendStatus.ACCEPTED
    st1, st2 = await ledger.load(k1), await ledger.load(k2)
    assert (st1.planned, st1.dispatched, st1.given_up) == (1, 1, True)
    assert (st2.planned, st2.dispatched, st2.given_up, st2.owed) == (1, 0, False, True)


# -- requeue of owed redispatches (§6.10 "after apply"; RUN-CMT-7, RUN-EXE-15, D-15) ------

#: Mock seconds after which a test that should have finished is declared hung.
HANG = 600
RUN = "run-1"


class TimedLedger(MemoryDispatchLedger):
    """A MemoryDispatchLedger that records each accepted entry with its trio time."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[tuple[Any, float]] = []
        self.gave_up = trio.Event()

    async def append(self, key: Any, entry: Any, *, seq: int,
                     epoch: int) -> LedgerAppendStatus:
        status = await super().append(key, entry, seq=seq, epoch=epoch)
        if status is LedgerAppendStatus.ACCEPTED:
            self.log.append((entry, trio.current_time()))
            if isinstance(entry, GivenUp):
                self.gave_up.set()
        return status

    def entries(self) -> list[Any]:
        return [entry for entry, _ in self.log]


async def crashed_owner(store: Any, model: GatedModel) -> None:
    """An owner that creates RUN, drives it until its model call has started, then
    crashes; the executor it used is closed afterwards and forgets the call, so the next
    owner's executor answers ``missing`` for the key."""
    async with open_local_executor(models={MODEL: model}) as old_ex:
        with trio.CancelScope() as crash:
            async with open_runtime(store, old_ex, scope=SCOPE, model=MODEL) as app:
                await app.create_run(RUN, ["go"])
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(app.drive, RUN)
                    await model.started.wait()
                    crash.cancel()
        assert crash.cancelled_caught


def executing_step(state: MachineState) -> ModelStep:
    step = state.current
    assert isinstance(step, ModelStep) and step.status is ModelStepStatus.EXECUTING
    return step


async def test_requeue_redispatches_owed_attempt_after_requeue_after(
        store: Any, autojump_clock: Any) -> None:
    """A redispatch refused as retryable stays owed; ``watch`` offers the same attempt
    again after ``requeue_after`` seconds of trio time, then settles the effect."""
    requeue_after = 7.5
    new_model = GatedModel([reply("done")])
    with trio.fail_after(HANG):
        await crashed_owner(store, GatedModel([reply("never")], gate=trio.Event()))
        async with open_local_executor(models={MODEL: new_model}) as fresh:
            proxy = ProxyExecutor(fresh)
            refusals = [DispatchRetryableError("executor busy")]

            async def refuse_once(assignment: Any) -> None:
                if refusals:
                    raise refusals.pop(0)

            proxy.on_dispatch = refuse_once
            writer = await store.open(SCOPE)
            step = executing_step((await writer.record(RUN)).state)
            key = effect.AssignmentKey(SCOPE, RUN, step.effect)
            # an earlier owner already redispatched attempt 1, and lost that one too
            ledger = TimedLedger()
            await ledger.append(key, DispatchPlanned(1), seq=0, epoch=writer.epoch - 1)
            await ledger.append(key, Dispatched(1), seq=1, epoch=writer.epoch - 1)

            async with ActorRuntime(writer, proxy) as rt:
                calls: list[float] = []
                delivered: list[Any] = []

                async def route(k: effect.AssignmentKey) -> None:
                    calls.append(trio.current_time())
                    await rt.run(k.run_id).redispatch(k)

                async def on_outcome(outcome: effect.Outcome) -> None:
                    delivered.append(await rt.deliver(outcome))

                rec = Reconciler(proxy, missing=MissingPolicy.REDISPATCH_MISSING,
                                 ledger=ledger, redispatch=route, budget=3,
                                 on_outcome=on_outcome, requeue_after=requeue_after,
                                 epoch=writer.epoch)
                assert await recover_interrupted(writer, rec) == 0
                assert rec.kept == [key]
                st = await ledger.load(key)
                assert (st.planned, st.dispatched, st.owed) == (2, 1, True)
                assert len(calls) == 1 and new_model.calls == 0
                executing_step((await writer.record(RUN)).state)  # still EXECUTING

                await rec.watch(rt.run_store, watcher=rt.watcher)  # returns once settled

                assert ledger.entries() == [DispatchPlanned(1), Dispatched(1),
                                            DispatchPlanned(2), Dispatched(2)]
                assert len(calls) == 2
                assert calls[1] - calls[0] >= requeue_after
                assert ledger.log[-1][1] >= calls[0] + requeue_after
                assert len(proxy.model_dispatches()) == 1
                assert [r.disposition for r in delivered] == [LoopDisposition.FINISHED]
            state = (await writer.record(RUN)).state
            assert state.status is RunStatus.COMPLETED
            facts = await writer.run_facts(RUN)
            (completed,) = of_type(facts, F.ModelStepCompleted)
            assert completed.effect == step.effect  # settled under its original effect
            assert of_type(facts, F.ModelStepRecovered) == []
            assert new_model.calls == 1
            await writer.aclose()


class AlwaysBusy:
    """A redispatch route that never gets an answer; records the trio time of each call."""

    def __init__(self) -> None:
        self.calls: list[float] = []

    async def __call__(self, key: effect.AssignmentKey) -> None:
        self.calls.append(trio.current_time())
        await trio.lowlevel.checkpoint()
        if len(self.calls) % 2:
            raise DispatchRetryableError("executor busy")
        raise DispatchUnknownError("no answer")


async def test_requeue_gives_up_after_budget_and_disposes(store: Any,
                                                          autojump_clock: Any) -> None:
    """Through ``open_runtime``: an owed redispatch that never succeeds is tried
    ``budget`` times, ``requeue_after`` (5 s by default) apart; then the ledger records
    ``given_up("budget")``, the key is aborted and the recovery command is committed."""
    new_model = GatedModel([reply("done")])
    route = AlwaysBusy()
    ledger = TimedLedger()
    with trio.fail_after(HANG):
        await crashed_owner(store, GatedModel([reply("never")], gate=trio.Event()))
        async with open_local_executor(models={MODEL: new_model}) as fresh:
            rec = Reconciler(fresh, missing=MissingPolicy.REDISPATCH_MISSING, ledger=ledger,
                             redispatch=route, budget=3)
            assert rec.requeue_after == 5.0
            async with open_runtime(store, fresh, scope=SCOPE, model=MODEL,
                                    reconciler=rec) as app:
                assert app.recovered == 0
                (key,) = rec.kept
                step = executing_step((await app.snapshot(RUN)).state)
                assert key == effect.AssignmentKey(SCOPE, RUN, step.effect)
                assert len(route.calls) == 1

                await ledger.gave_up.wait()
                while isinstance((await app.snapshot(RUN)).state.current, ModelStep):
                    await trio.sleep(0.5)

                state = (await app.snapshot(RUN)).state
                assert state.status is RunStatus.ACTIVE
                assert isinstance(state.current, Open) and state.model_steps == 0
                recovered = of_type(await app.writer.run_facts(RUN), F.ModelStepRecovered)
                assert [(f.step_id, f.effect) for f in recovered] == [(step.id, step.effect)]
                assert fresh.history(key) == ("execution_aborted",)  # INV-31
                assert ledger.entries() == [DispatchPlanned(1), GivenUp("budget")]
                assert (await ledger.load(key)).reason == "budget"
                assert len(route.calls) == 3
                gaps = [b - a for a, b in zip(route.calls, route.calls[1:])]
                assert all(gap >= rec.requeue_after for gap in gaps)
                assert ledger.log[-1][1] >= route.calls[-1] + rec.requeue_after
                assert new_model.calls == 0

                result = await app.drive(RUN)  # the Run goes on with a new model step
                assert result.disposition is LoopDisposition.FINISHED
            assert new_model.calls == 1


async def test_requeue_after_must_be_positive() -> None:
    for bad in (0, 0.0, -1.0, float("nan"), float("inf"), "5", None, True):
        with pytest.raises(ValidationError):
            Reconciler(FakePort(), requeue_after=bad)  # type: ignore[arg-type]
    assert Reconciler(FakePort(), requeue_after=0.25).requeue_after == 0.25
    assert Reconciler(FakePort(), requeue_after=2).requeue_after == 2.0
    for bad_budget in (-1, 1.5, True, "3"):
        with pytest.raises(ValidationError):
            Reconciler(FakePort(), budget=bad_budget)  # type: ignore[arg-type]
    assert Reconciler(FakePort(), budget=0).budget == 0
    # watching needs somewhere to wait and someone to hand Outcomes to
    with pytest.raises(ValidationError):
        await Reconciler(FakePort()).watch(types.SimpleNamespace(scope=SCOPE))
