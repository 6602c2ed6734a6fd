"""The actor contract (spec "The actor contract", RUN-ACT-1..8).

Each test is named after the requirement it checks and was written to fail on the code
before the fix it guards (issue 9). Time is trio's MockClock (``autojump_clock``).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
import trio
from runtime_harness import (
    MODEL,
    RUN,
    SCOPE,
    Probe,
    ProxyExecutor,
    kinds,
    of_type,
    open_env,
    probe_tool,
    start,
)

from runx_actors import effect
from runx_actors.executors import call_tools, open_local_executor, reply, tool_call
from runx_actors.protocol import facts as F
from runx_actors.protocol.errors import DispatchUnknownError, EffectNotExecutingError
from runx_actors.protocol.values import (
    ModelRequest,
    ModelResult,
    RunStatus,
    ToolFailureOutcome,
)
from runx_actors.runtime import Settings, open_runtime

OTHER = "run-2"


def _messages(request: ModelRequest) -> list[dict[str, Any]]:
    return list(json.loads(request.body)["messages"])


class RoutingModel:
    """Answers by the Run's first user message: ``use:<tool>`` → call *tool* once, then
    reply ``done``; anything else → reply at once. ``calls`` counts requests."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.lowlevel.checkpoint()
        self.calls += 1
        msgs = _messages(request)
        if any(m["role"] == "tool" for m in msgs):
            return reply("done")
        text = next((m["content"] for m in msgs if m["role"] == "user"), "")
        if isinstance(text, str) and text.startswith("use:"):
            return call_tools(tool_call(text[4:], {"x": 1}))
        return reply("done")


def _tools(probe: Probe) -> list[Any]:
    return [probe_tool("good", probe), probe_tool("bad", probe)]


# -- RUN-ACT-1: isolation -------------------------------------------------------------------


async def test_run_act_1_validate_raising_fails_only_that_call(store, autojump_clock) -> None:
    """An exception from ``executor.validate`` of one Run's call becomes that call's KNOWN
    failure (nothing started); the other Run, driven concurrently, completes."""
    probe = Probe()
    model = RoutingModel()

    async def poisoned(assignment: Any) -> None:
        await trio.lowlevel.checkpoint()
        body = assignment.body
        if isinstance(body, effect.ToolAssignment) and body.tool_ref == "bad":
            raise RuntimeError("Symlink loop from 'loop'")

    async with open_env(store, tools=_tools(probe), model=model, proxy=True) as env:
        env.executor.on_validate = poisoned
        await env.app.create_run(RUN, ["use:bad"])
        await env.app.create_run(OTHER, ["use:good"])
        async with trio.open_nursery() as nursery:
            bad = start(nursery, env.drive, RUN)
            good = start(nursery, env.drive, OTHER)
        assert good.error is None, good.error
        assert bad.error is None, bad.error
        assert (await env.state(OTHER)).status is RunStatus.COMPLETED
        assert (await env.state(RUN)).status is RunStatus.COMPLETED
        failed = of_type(await env.facts(RUN), F.ToolCallFailed)
        assert len(failed) == 1
        assert failed[0].outcome is ToolFailureOutcome.KNOWN
        assert failed[0].effect == ""  # declined: nothing started
        assert "RuntimeError" in failed[0].failure.message
        assert F.ToolCallStarted not in kinds(await env.facts(RUN))
        assert probe.calls == 1  # only the good Run's tool ran


class _RaisingSink:
    def emit(self, event: Any) -> None:
        raise RuntimeError("sink down")


class _RaisingModel:
    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.lowlevel.checkpoint()
        raise RuntimeError("model client bug")


POISONS = ("before_prepare", "builder", "target_resolver", "sink", "model_client")


@pytest.mark.parametrize("poison", POISONS)
async def test_run_act_1_poisoned_hook_ends_only_its_drive(store, autojump_clock,
                                                            poison: str) -> None:
    """A hook of one Run that raises (BeforePrepare, prompt builder, target resolver,
    event sink, model client) ends at most that Run's drive with an ``Exception`` (never a
    teardown of the runtime); the other Run completes, and the runtime serves a third."""
    from runx_actors.runtime import TranscriptBuilder

    probe = Probe()

    async def boom(*_: Any) -> Any:
        await trio.lowlevel.checkpoint()
        raise RuntimeError(f"{poison} bug")

    settings = None
    builder = None
    sink = None
    if poison == "before_prepare":
        settings = Settings(before_prepare=boom)
    elif poison == "target_resolver":
        settings = Settings(target_resolver=boom)
    elif poison == "sink":
        sink = _RaisingSink()
    async with open_env(store, tools=_tools(probe), model=RoutingModel(),
                        models={"broken": _RaisingModel()}) as env:
        if poison == "builder":
            class _Builder:
                async def build(self, hint: Any) -> Any:
                    return await boom()
            builder = _Builder()
        elif poison == "model_client":
            builder = TranscriptBuilder(env.writer, env.app.store.frozen, "broken",
                                        _tools(probe))
        for run_id in (RUN, OTHER, "run-3"):
            await env.app.create_run(run_id, ["use:good"])

        async def poisoned() -> Any:
            handle = env.runtime.run(RUN, settings=settings)
            return await handle.drive(builder or env.builder, sink=sink)

        async with trio.open_nursery() as nursery:
            bad = start(nursery, poisoned)
            good = start(nursery, env.drive, OTHER)
        assert good.error is None, good.error
        assert (await env.state(OTHER)).status is RunStatus.COMPLETED
        assert bad.error is None or isinstance(bad.error, Exception)
        # the runtime still serves
        assert (await env.drive("run-3")).result is not None
        assert (await env.state("run-3")).status is RunStatus.COMPLETED


# -- RUN-ACT-3: every request is answered ---------------------------------------------------


def _bogus_outcome(run_id: str = RUN) -> effect.Outcome:
    return effect.Outcome(key=effect.AssignmentKey(SCOPE, run_id, "no-such-effect"),
                          result=effect.Unknown("late"))


async def test_run_act_3_callers_waiting_for_room_answered_at_close(store,
                                                                    autojump_clock) -> None:
    """Callers waiting for mailbox room when the runtime closes, and the one queued, get
    RuntimeClosedError within drain_timeout — none parks forever, none gets a bare
    ``trio.ClosedResourceError``."""
    from runx_actors.protocol.errors import RuntimeClosedError

    entered = trio.Event()

    class _Blocking:
        async def build(self, hint: Any) -> Any:
            entered.set()
            await trio.sleep_forever()

    settings = Settings()
    async with open_local_executor(models={MODEL: RoutingModel()}) as ex:
        with trio.fail_after(settings.drain_timeout):
            async with trio.open_nursery() as outer:
                async with open_runtime(store, ex, scope=SCOPE, model=MODEL,
                                        mailbox_size=1) as app:
                    await app.create_run(RUN, ["hello"])
                    handle = app.runtime.run(RUN)
                    driver = start(outer, handle.drive, _Blocking())
                    await entered.wait()
                    callers = [start(outer, handle.deliver, _bogus_outcome())
                               for _ in range(4)]
                    while app.runtime.statistics()[0].mailbox.senders_waiting < 3:
                        await trio.sleep(0.01)
                for box in (driver, *callers):
                    await box.wait()
        for box in (driver, *callers):
            assert isinstance(box.error, RuntimeClosedError), box.error


async def test_run_act_3_closed_runtime_refuses_with_library_error(store,
                                                                   autojump_clock) -> None:
    """A request to a closed runtime raises RuntimeClosedError (a library error)."""
    from runx_actors.protocol.errors import RuntimeClosedError, RunxError

    async with open_local_executor(models={MODEL: RoutingModel()}) as ex:
        async with open_runtime(store, ex, scope=SCOPE, model=MODEL) as app:
            await app.create_run(RUN, ["hello"])
        with pytest.raises(RuntimeClosedError) as info:
            await app.runtime.run(RUN).drive(app.builder)
        assert isinstance(info.value, RunxError)


# -- RUN-ACT-4: cancellation reaches the work -------------------------------------------------


class _CancelRecorder(ProxyExecutor):
    """A ProxyExecutor that records ``cancel`` calls; ``forward=False`` drops them (an
    executor that cannot stop its work)."""

    def __init__(self, inner: Any, *, forward: bool = True) -> None:
        super().__init__(inner)
        self.forward = forward
        self.cancelled: list[Any] = []

    async def cancel(self, key: Any) -> None:
        self.cancelled.append(key)
        if self.forward:
            await self.inner.cancel(key)
        else:
            await trio.lowlevel.checkpoint()


@pytest.mark.parametrize("forward", [True, False], ids=["stops", "ignores-cancel"])
async def test_run_act_4_cancel_reaches_running_tool(store, autojump_clock,
                                                     forward: bool) -> None:
    """``Runtime.cancel`` commits CancelRun, cancels the running tool at the executor,
    and a concurrent drive returns (FINISHED, the Run CANCELLED) within drain_timeout —
    also when the executor cannot stop the work."""
    probe = Probe(gate=trio.Event())  # never opened: runs until cancelled
    tools = [probe_tool("slow", probe)]
    settings = Settings()
    async with open_local_executor(tools=tools, models={MODEL: RoutingModel()}) as local:
        executor = _CancelRecorder(local, forward=forward)
        async with open_runtime(store, executor, scope=SCOPE, model=MODEL,
                                tools=tools) as app:
            await app.create_run(RUN, ["use:slow"])
            async with trio.open_nursery() as nursery:
                drive = start(nursery, app.drive, RUN)
                await probe.started.wait()
                with trio.fail_after(settings.drain_timeout + 1):
                    await app.cancel(RUN)
                    await drive.wait()
            assert drive.error is None, drive.error
            assert (await app.record(RUN)).state.status is RunStatus.STOPPED
            started = of_type(await app.writer.run_facts(RUN), F.ToolCallStarted)
            assert {k.effect for k in executor.cancelled} == {started[0].effect}
            if forward:
                assert probe.running == 0  # the tool body was cancelled
            assert app.runtime.live_actors() == frozenset()


class _HeldReads:
    """Wraps a run store so ``frozen_request`` waits at a gate: the window between a
    committed start and the dispatch it decided (the await the sim found, R1/R2)."""

    def __init__(self, store: Any) -> None:
        self.read = store.frozen_request  # the store's own (bound before it is replaced)
        self.reached = trio.Event()
        self.release = trio.Event()

    async def frozen_request(self, digest: Any) -> Any:
        self.reached.set()
        await self.release.wait()
        return await self.read(digest)


@pytest.mark.parametrize("path", ["start", "redispatch"])
async def test_run_act_4_dispatch_decided_before_cancel_is_never_sent(
        store, autojump_clock, path: str) -> None:
    """A start committed before CancelRun (or a redispatch loaded before it) whose
    dispatch is still on its way when ``Runtime.cancel`` runs is never sent: after
    CancelRun is durable no attempt of the Run starts (RUN-ACT-4; the simulator's
    residuals R1 and R2)."""
    model = RoutingModel()
    async with open_local_executor(tools=[], models={MODEL: model}) as local:
        executor = _CancelRecorder(local)
        async with open_runtime(store, executor, scope=SCOPE, model=MODEL, tools=[]) as app:
            await app.create_run(RUN, ["hello"])
            if path == "redispatch":
                # the first dispatch is lost (DispatchUnknownError: the effect stays
                # EXECUTING); the redispatch owed for it loads, then reads the request
                lost: list[Any] = []

                async def lose_first(assignment: Any) -> None:
                    if not lost:
                        lost.append(assignment)
                        raise DispatchUnknownError("lost in transit", dispatched=())

                executor.on_dispatch = lose_first
                with pytest.raises(DispatchUnknownError):
                    await app.drive(RUN)
                key = lost[0].key
            held = _HeldReads(app.runtime.run_store)
            app.runtime.run_store.frozen_request = held.frozen_request  # type: ignore[method-assign]
            async with trio.open_nursery() as nursery:
                if path == "start":
                    drive = start(nursery, app.drive, RUN)
                else:
                    drive = start(nursery, app.runtime.run(RUN).redispatch, key)
                with trio.fail_after(60):
                    await held.reached.wait()
                    await app.cancel(RUN)  # CancelRun durable while the dispatch waits
                    held.release.set()
                    await drive.wait()
            if path == "start":
                assert drive.error is None, drive.error  # the drive ends: the Run is over
            else:  # the redispatch is refused: the effect is no longer to be offered
                assert isinstance(drive.error, EffectNotExecutingError), drive.error
            assert executor.dispatched == []  # (the lost first dispatch is not recorded)
            assert model.calls == 0, "an attempt started after CancelRun was durable"
            assert (await app.record(RUN)).state.status is RunStatus.STOPPED


# -- RUN-ACT-6: transient is not final ---------------------------------------------------------


@pytest.mark.parametrize("transient", ["closed", "runtime-closed", "store-oserror"])
async def test_run_act_6_transient_redispatch_error_is_not_given_up(transient: str) -> None:
    """A redispatch that hits a closing/restarting runtime, or another transient error, is
    deferred for a retry: the ledger records no ``given_up`` and the effect is not
    disposed. A real refusal (DispatchRejectedError) still gives up at once."""
    from runx_actors.protocol.errors import DispatchRejectedError, RuntimeClosedError
    from runx_actors.runtime import MemoryDispatchLedger, MissingPolicy, Reconciler, Verdict
    from runx_actors.testing import builders as b

    log = b.SimpleLog.with_run("run-1", ["in-1"], scope=SCOPE)
    log.apply(b.prepare(log.state(), log.position()))
    log.apply(b.start_model(log.state()))
    state = log.state()
    key = effect.AssignmentKey(SCOPE, "run-1", state.current.effect)

    class _Missing:
        async def attach(self, a: Any) -> Any:
            await trio.lowlevel.checkpoint()
            return effect.Attachment(state=effect.AttachmentState.MISSING)

        async def abort(self, a: Any) -> Any:
            await trio.lowlevel.checkpoint()
            return effect.Attachment(state=effect.AttachmentState.ABORTED)

    errors = {"closed": trio.ClosedResourceError("the runtime is not open"),
              "runtime-closed": RuntimeClosedError("closing"),
              "store-oserror": OSError("database is locked")}

    async def plan(error: BaseException, ledger: Any) -> Any:
        async def route(_: Any) -> None:
            await trio.lowlevel.checkpoint()
            raise error

        rec = Reconciler(_Missing(), missing=MissingPolicy.REDISPATCH_MISSING, ledger=ledger,
                         redispatch=route, budget=3, epoch=1)
        (decision,) = await rec.plan(SCOPE, state)
        return decision

    ledger = MemoryDispatchLedger()
    decision = await plan(errors[transient], ledger)
    assert (decision.verdict, decision.retry) == (Verdict.DEFER, True)
    # a closed runtime does not count against the budget; other errors do
    assert decision.transient is (transient != "store-oserror")
    assert not (await ledger.load(key)).given_up
    refused = MemoryDispatchLedger()
    decision = await plan(DispatchRejectedError("no"), refused)
    assert decision.verdict is Verdict.DISPOSE
    assert (await refused.load(key)).given_up


# -- RUN-ACT-5: errors are never masked -------------------------------------------------------


def _leaves(exc: BaseException | None) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [] if exc is None else [exc]


@pytest.mark.parametrize("op", ["drive", "advance"])
async def test_run_act_5_builder_error_not_masked_by_cancel(store, autojump_clock,
                                                           op: str) -> None:
    """A prompt builder that raises while its caller is being cancelled: the caller sees
    the ValueError (with the Cancelled, inside a group), not a bare Cancelled."""
    class _Late:
        async def build(self, hint: Any) -> Any:
            with trio.CancelScope(shield=True):
                await trio.sleep(1)
            raise ValueError("bad prompt")

    async with open_env(store, model=RoutingModel()) as env:
        await env.app.create_run(RUN, ["hello"])
        handle = env.runtime.run(RUN)
        caught: BaseException | None = None
        try:
            with trio.move_on_after(0.5):
                await getattr(handle, op)(_Late())
        except BaseException as exc:  # the group or the error itself
            caught = exc
        leaves = _leaves(caught)
        assert any(isinstance(e, ValueError) and "bad prompt" in str(e) for e in leaves), caught
        assert not any(isinstance(e, trio.Cancelled) for e in leaves)  # the scope took it


# -- RUN-ACT-7: bounded time by default -------------------------------------------------------


class _Hanging:
    """A model that never answers; ``calls`` counts the sends."""

    def __init__(self) -> None:
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.calls += 1
        await trio.sleep_forever()
        raise AssertionError("unreachable")


class _AsksForever:
    """A model that asks for tool *name* on every step."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.calls = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.sleep(1)  # one mock second per step, so an unbounded loop times out
        self.calls += 1
        return call_tools(tool_call(self.name, {"x": self.calls}))


def _run_failure(facts: Any) -> Any:
    ended = of_type(facts, F.RunEnded)
    assert len(ended) == 1, facts
    return ended[0].end.failure


async def test_run_act_7_model_resends_after_deadline_are_bounded(store,
                                                                 autojump_clock) -> None:
    """With ``model_timeout`` set and a model that never answers, the step is re-sent at
    most ``Settings.max_model_resends`` times; then the Run FAILS with the typed stop
    reason ``model_resend_limit`` in its log (the default bound, no setting needed)."""
    from runx_actors.runtime import MODEL_RESEND_LIMIT

    model = _Hanging()
    limit = Settings().max_model_resends
    assert limit >= 1
    async with open_local_executor(models={MODEL: model}, model_timeout=5.0) as ex:
        async with open_runtime(store, ex, scope=SCOPE, model=MODEL) as app:
            await app.create_run(RUN, ["hello"])
            with trio.fail_after(1000):
                result = await app.drive(RUN)
            assert result.result.status is RunStatus.FAILED
            failure = _run_failure(await app.writer.run_facts(RUN))
            assert failure.class_ == MODEL_RESEND_LIMIT
            assert model.calls == limit + 1


@pytest.mark.parametrize("ask", ["known", "unknown"])
async def test_run_act_7_model_steps_and_tool_lookups_are_capped(store, autojump_clock,
                                                                store_kind: str,
                                                                ask: str) -> None:
    """A model that never stops asking for a tool ends the Run by default: after
    ``max_tool_lookup_failures`` consecutive steps asking for an unknown tool
    (``tool_lookup_limit``), or after ``max_model_steps`` steps (``model_step_limit``)."""
    from runx_actors.runtime import MODEL_STEP_LIMIT, TOOL_LOOKUP_LIMIT

    probe = Probe()
    tools = [probe_tool("good", probe)]
    model = _AsksForever("good" if ask == "known" else "nope")
    assert Settings().max_model_steps > 0 and Settings().max_tool_lookup_failures > 0
    # the defaults over memory; a smaller step cap over SQLite keeps the test short
    defaults = Settings() if store_kind == "memory" else Settings(max_model_steps=5)
    async with open_local_executor(tools=tools, models={MODEL: model}) as ex:
        async with open_runtime(store, ex, scope=SCOPE, model=MODEL, tools=tools,
                                settings=defaults) as app:
            await app.create_run(RUN, ["hello"])
            with trio.fail_after(1000):
                result = await app.drive(RUN)
            assert result.result.status is RunStatus.FAILED
            failure = _run_failure(await app.writer.run_facts(RUN))
            if ask == "known":
                assert failure.class_ == MODEL_STEP_LIMIT
                assert model.calls == defaults.max_model_steps
                assert probe.calls == defaults.max_model_steps - 1
            else:
                assert failure.class_ == TOOL_LOOKUP_LIMIT
                assert model.calls == defaults.max_tool_lookup_failures + 1
                assert probe.calls == 0


# -- RUN-ACT-8: fail fast at open ----------------------------------------------------------------


async def test_run_act_8_offer_mismatch_refused_at_open(store, autojump_clock) -> None:
    """A tool the runtime would offer that the executor lacks, or declares differently,
    is refused by ``open_runtime`` with ToolOfferError before the scope is opened."""
    from runx_actors.protocol.errors import ToolOfferError

    probe = Probe()
    served = [probe_tool("good", probe)]
    missing = [probe_tool("ghost", probe)]
    different = [probe_tool("good", probe, description="another declaration")]
    async with open_local_executor(tools=served, models={MODEL: RoutingModel()}) as ex:
        for offered in (missing, different):
            with pytest.raises(ToolOfferError) as info:
                async with open_runtime(store, ex, scope=SCOPE, model=MODEL, tools=offered):
                    raise AssertionError("opened")
            assert info.value.tool_ref == offered[0].ref
        writer = await store.open(SCOPE)  # nothing was written: the scope's first epoch
        assert writer.epoch == 1
        await writer.aclose()
        async with open_runtime(store, ex, scope=SCOPE, model=MODEL, tools=served):
            pass


async def test_run_act_8_unknown_model_refused_at_open(store, autojump_clock) -> None:
    """An unknown model ref is refused when the runtime opens; the error names it."""
    from runx_actors.protocol.errors import ModelUnavailableError

    async with open_local_executor(models={MODEL: RoutingModel()}) as ex:
        with pytest.raises(ModelUnavailableError) as info:
            async with open_runtime(store, ex, scope=SCOPE, model="gpt-typo"):
                raise AssertionError("opened")
        assert info.value.model == "gpt-typo"
        assert "gpt-typo" in str(info.value)


async def test_run_act_8_frozen_unknown_model_error_names_ref(store, autojump_clock) -> None:
    """A Run whose prepared step froze a ref the executor does not serve: the drive
    raises ModelUnavailableError naming the ref and saying how to get out."""
    from runx_actors.protocol.errors import ModelUnavailableError
    from runx_actors.runtime import TranscriptBuilder

    async with open_env(store, model=RoutingModel()) as env:
        await env.app.create_run(RUN, ["hello"])
        builder = TranscriptBuilder(env.writer, env.app.store.frozen, "gpt-typo")
        with pytest.raises(ModelUnavailableError) as info:
            await env.drive(RUN, builder)
        assert "gpt-typo" in str(info.value) and "cancel" in str(info.value)
        await env.app.cancel(RUN)  # the way out the message names
        assert (await env.state(RUN)).status is RunStatus.STOPPED


# -- RUN-ACT-5: the one shape of OwnershipLostError out of open_runtime ------------------------


async def test_run_act_5_ownership_lost_leaves_open_runtime_unwrapped(store,
                                                                    autojump_clock) -> None:
    """A fenced owner: the OwnershipLostError a drive raises leaves ``open_runtime``
    itself, unwrapped (no ExceptionGroup around it)."""
    from runx_actors.protocol.errors import OwnershipLostError

    async with open_local_executor(models={MODEL: RoutingModel()}) as ex:
        with pytest.raises(OwnershipLostError):
            async with open_runtime(store, ex, scope=SCOPE, model=MODEL) as app:
                await app.create_run(RUN, ["hello"])
                other = await store.open(SCOPE)  # a second owner takes the scope
                try:
                    await app.drive(RUN)
                finally:
                    await other.aclose()


async def test_run_act_3_cancelled_queued_caller_returns_promptly(store,
                                                                   autojump_clock) -> None:
    """A deliver queued behind a busy actor whose caller is cancelled is withdrawn and
    returns at once — it does not wait ``settle_timeout`` for a turn it no longer needs."""
    entered = trio.Event()
    release = trio.Event()

    class _Blocking:
        async def build(self, hint: Any) -> Any:
            entered.set()
            await release.wait()
            raise ValueError("released")

    async with open_env(store, model=RoutingModel()) as env:
        await env.app.create_run(RUN, ["hello"])
        handle = env.runtime.run(RUN)
        async with trio.open_nursery() as nursery:
            driver = start(nursery, handle.drive, _Blocking())
            await entered.wait()
            with trio.fail_after(5):  # far below settle_timeout (30 s)
                with trio.move_on_after(1) as scope:
                    await handle.deliver(_bogus_outcome())
            assert scope.cancelled_caught
            assert env.runtime.statistics()[0].mailbox.external_used == 0
            release.set()
        assert isinstance(driver.error, ValueError)


async def test_run_act_1_model_validate_raising_is_a_typed_refusal(store,
                                                                  autojump_clock) -> None:
    """``executor.validate`` raising for a model step is a refusal like any other: the
    drive raises ModelUnavailableError (the step stays PREPARED, nothing started); the
    other Run completes."""
    from runx_actors.protocol.errors import ModelUnavailableError

    async def poisoned(assignment: Any) -> None:
        await trio.lowlevel.checkpoint()
        if isinstance(assignment.body, effect.ModelAssignment) and assignment.run_id == RUN:
            raise RuntimeError("catalog lookup crashed")

    async with open_env(store, model=RoutingModel(), proxy=True) as env:
        env.executor.on_validate = poisoned
        await env.app.create_run(RUN, ["hello"])
        await env.app.create_run(OTHER, ["hello"])
        async with trio.open_nursery() as nursery:
            bad = start(nursery, env.drive, RUN)
            good = start(nursery, env.drive, OTHER)
        assert good.error is None and (await env.state(OTHER)).status is RunStatus.COMPLETED
        assert isinstance(bad.error, ModelUnavailableError), bad.error
        assert "RuntimeError" in str(bad.error)
        assert F.ModelStepStarted not in kinds(await env.facts(RUN))
