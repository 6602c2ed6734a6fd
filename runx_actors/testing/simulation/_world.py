"""One simulated world: the real ``open_runtime`` over a real store and a real
``LocalExecutor``, a generated workload, and the world faults (crash, takeover, runtime
close, store close), all under the :class:`~._control.Controller`.

A world runs *incarnations* (process lifetimes). The first ones may suffer faults; the
last one is always fault-free (the liveness phase): once faults stop, every Run must end
or wait for the application within :attr:`Config.liveness_budget` released points.

The budgets scale with the workload. A fault-free Run needs at most ~60 released points
(measured: 41-61 per Run over seeds 0-3 at 1 Run, 42-56 at 32 and 64 Runs), and the
scheduler releases one point at a time, so the liveness phase allows
``STEPS_PER_RUN * runs`` points (never fewer than :data:`LIVENESS_FLOOR`). Every released
point costs ``TICK`` virtual seconds whichever Run it belongs to, so under a fair
scheduler one Run's multi-step operation (a settlement, a drain) takes virtual time
proportional to the number of Runs: the runtime's ``settle_timeout`` and
``drain_timeout`` (and the oracles that hold it to them) are calibrated at
:data:`TIME_BASE_RUNS` Runs and scale linearly above it.
"""

from __future__ import annotations

import contextlib
import json
import random
import tempfile
from collections import Counter
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, cast

import attrs
import trio
import trio.testing

from ... import effect
from ...executors import (
    ModelError,
    ToolError,
    call_tools,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from ...protocol.canonical import canonical_json_text
from ...protocol.commit import fold_run
from ...protocol.errors import OwnershipLostError, RunExistsError
from ...protocol.plan import Idle, needs_recovery, plan_next, waiting_calls
from ...protocol.values import ResponsePolicy, RunStatus
from ...runtime import (
    GivenUp,
    LoopDisposition,
    MemoryDispatchLedger,
    MissingPolicy,
    Reconciler,
    Settings,
    TranscriptBuilder,
    open_runtime,
)
from ...store.memory import MemoryStore
from ._control import Choices, Controller
from ._oracle import Observer
from ._wrappers import (
    BuilderFailed,
    CheckExploded,
    SimExecutor,
    SimStore,
    SimulatedFault,
    actor_name,
)

__all__ = ["Config", "World", "Workload", "RunPlan", "make_workload", "SCOPE",
           "temp_sqlite_path", "FAULT_KINDS", "UnknownFaultError", "parse_only"]

SCOPE = "sim"
#: World faults the chaos actor may choose.
WORLD_FAULTS = ("crash", "takeover", "close_runtime")
MAX_DRIVES = 4
#: Waits for the Reconciler when a drive answers WAITING(execution_recovery), and the pause.
RECOVERY_WAITS = 40
RECOVERY_PAUSE = 6.0
#: Mock seconds past drain_timeout before an unanswered request counts (a bound met
#: exactly at drain_timeout is met).
GRACE = 1.0
HOSTILE = ("unknown_tool", "hangs")
#: Every fault kind ``--only`` may name: the world faults, the store's commit faults, the
#: executor's, the tools', the models', the prompt builder's, the application's abandoned
#: caller, and ``hostile`` (the misbehaving models of the workload).
FAULT_KINDS = ("crash", "takeover", "close_runtime", "store_closed", "lost_request",
               "applied_unanswered", "check_raises", "duplicate", "lost", "raise",
               "retryable", "hang", "model_error", "raises", "abandon", "hostile")
#: Released points one fault-free Run may need in the liveness phase (measured at most
#: ~60; twice that, so a Run that is progressing is never cut off).
STEPS_PER_RUN = 120
#: The liveness phase's bound for small workloads (the budget before it scaled).
LIVENESS_FLOOR = 1200
#: Runs at which SETTLE_TIMEOUT and DRAIN_TIMEOUT are calibrated; they scale linearly
#: with more Runs (one Run's step waits for every other Run's under a fair scheduler).
TIME_BASE_RUNS = 8
SETTLE_TIMEOUT = 5.0
DRAIN_TIMEOUT = 10.0


class UnknownFaultError(ValueError):
    """``only`` names a fault kind the simulator does not have (``--only``, a replay
    string's ``only=``)."""


def parse_only(only: str, *, empty_is_all: bool = True) -> tuple[str, ...]:
    """The fault kinds of an ``only`` string (``"+"``-separated; ``""``: every kind,
    unless *empty_is_all* is False: then it is refused like a typo).

    Raises :class:`UnknownFaultError` for an empty part or a kind not in
    :data:`FAULT_KINDS` (a typo must not silently inject nothing)."""
    if only == "":
        if empty_is_all:
            return ()
        raise UnknownFaultError(f"empty fault list; known kinds: {', '.join(FAULT_KINDS)}")
    kinds = tuple(only.split("+"))
    unknown = [k for k in kinds if k not in FAULT_KINDS]
    if unknown:
        raise UnknownFaultError(
            f"unknown fault kind{'s' if len(unknown) > 1 else ''} "
            f"{', '.join(repr(k) for k in unknown)}; known kinds: {', '.join(FAULT_KINDS)}")
    return kinds


@attrs.frozen(kw_only=True)
class Config:
    """One schedule's parameters (all part of its replay string)."""

    seed: int = 0
    store: str = "memory"
    runs: int = 3
    steps: int = 400
    #: released points of the liveness phase; None: derived from ``runs``
    liveness_steps: int | None = None
    faults: bool = True
    fault_rate: float = 0.06
    world_faults: int = 2
    #: the runtime's drain_timeout (seconds); None: derived from ``runs``
    drain_timeout: float | None = None
    #: only these fault kinds ("+"-separated; "" = every kind); ``hostile`` enables the
    #: misbehaving models of the workload. Checked: :class:`UnknownFaultError`.
    only: str = attrs.field(default="")

    @only.validator
    def _check_only(self, attribute: Any, value: str) -> None:
        parse_only(value)

    @property
    def time_scale(self) -> float:
        """How much longer one Run's operation takes in virtual time than at
        :data:`TIME_BASE_RUNS` Runs (1.0 up to it)."""
        return max(1.0, self.runs / TIME_BASE_RUNS)

    @property
    def liveness_budget(self) -> int:
        """Released points the fault-free phase allows: ``liveness_steps``, or
        ``STEPS_PER_RUN * runs`` (at least :data:`LIVENESS_FLOOR`)."""
        if self.liveness_steps is not None:
            return self.liveness_steps
        return max(LIVENESS_FLOOR, STEPS_PER_RUN * self.runs)

    @property
    def drain(self) -> float:
        """The runtime's drain_timeout in virtual seconds (``drain_timeout``, or
        :data:`DRAIN_TIMEOUT` times :attr:`time_scale`)."""
        if self.drain_timeout is not None:
            return self.drain_timeout
        return DRAIN_TIMEOUT * self.time_scale

    @property
    def settle(self) -> float:
        """The runtime's settle_timeout: :data:`SETTLE_TIMEOUT` times :attr:`time_scale`."""
        return SETTLE_TIMEOUT * self.time_scale

    @property
    def grace(self) -> float:
        """Virtual seconds past the drain before an unanswered request counts."""
        return GRACE * self.time_scale

    def allows(self, fault: str) -> bool:
        """True when *fault* may be injected under ``only`` (all kinds when empty)."""
        return not self.only or fault in self.only.split("+")  # checked at construction


@attrs.frozen
class RunPlan:
    """What the application does with one Run (generated from the seed)."""

    run_id: str
    calls: tuple[str, ...]  # tools asked for in the first model turn
    approve: bool
    extra_input: bool
    cancel: bool
    hostile: str  # "" | "unknown_tool" | "hangs"
    cancel_after: float = 0.0  # mock seconds the application waits before cancelling


@attrs.frozen
class Workload:
    """The application's plan for one seed: one :class:`RunPlan` per Run."""

    runs: tuple[RunPlan, ...]


def make_workload(cfg: Config) -> Workload:
    """N Runs with tool calls, approvals, inputs and cancels, from ``cfg.seed``."""
    rng = random.Random(cfg.seed * 7919 + 17)
    plans = []
    for k in range(cfg.runs):
        calls = tuple(rng.choice(("echo", "echo", "approve.me")) for _ in range(rng.randint(1, 2)))
        hostile = ""
        if cfg.faults and rng.random() < 0.15 and cfg.allows("hostile"):
            hostile = rng.choice(HOSTILE)
        plans.append(RunPlan(f"run-{k}", calls, rng.random() < 0.8, rng.random() < 0.3,
                             rng.random() < 0.3, hostile,
                             rng.choice((0.0, 0.5, 2.0, 5.0, 15.0, 40.0))))
    return Workload(tuple(plans))


@attrs.define(eq=False)
class Request:
    """One request of the application, open until answered."""

    serial: int
    kind: str
    run_id: str
    step: int
    time: float
    done: bool = False
    world_fault: bool = False


class SimBuilder:
    """The Run's TranscriptBuilder behind a point; the ``raises`` fault makes it raise."""

    def __init__(self, world: World, run_id: str, inner: Any) -> None:
        self.world = world
        self.run_id = run_id
        self.inner = inner

    @property
    def reads_pending(self) -> bool:
        """The inner builder's opt-in to fused commits (RUN-LOP-11)."""
        return getattr(self.inner, "reads_pending", False) is True

    async def build(self, hint: Any) -> Any:
        fault = await self.world.op(f"builder {self.run_id}", ("raises",), run_id=self.run_id)
        if fault:
            self.world.obs.injected(self.run_id, "builder_raises")
            drive = self.world.open_drive.get(self.run_id)
            if drive is not None:
                self.world.builder_raised.add(drive.serial)
            raise BuilderFailed("injected: the prompt builder failed")
        return await self.inner.build(hint)


class SimModel:
    """A model for one Run: answers by turn (the number of assistant messages so far);
    faults make it raise a retryable ModelError or hang; a hostile model asks for an
    unknown tool forever or never answers."""

    def __init__(self, world: World, plan: RunPlan) -> None:
        self.world = world
        self.plan = plan

    async def complete(self, request: Any) -> Any:
        run_id = self.plan.run_id
        self.world.obs.attempt_started(run_id, "model")
        self.world.obs.model_calls[run_id] += 1
        fault = await self.world.op(f"model {run_id}", ("model_error", "hang"),
                                    run_id=run_id)
        if fault:
            self.world.obs.injected(run_id, f"model_{fault}")
        if fault == "model_error":
            raise ModelError(effect.FailureCode.RATE_LIMITED, "injected: rate limited")
        if fault == "hang" or self.plan.hostile == "hangs":
            await trio.sleep(1e6)
        if self.plan.hostile == "unknown_tool":
            return call_tools(tool_call("no.such.tool", {"n": 1}))
        turn = sum(1 for m in json.loads(request.body).get("messages", ())
                   if m.get("role") == "assistant")
        if turn == 0:
            return call_tools(*(tool_call(t, {"n": i, "run": run_id})
                                for i, t in enumerate(self.plan.calls)))
        return reply(f"done {turn}")


class World:
    """One schedule of one workload. ``await world.main(clock)`` under ``trio.run``."""

    def __init__(self, cfg: Config, choices: Choices, *, path: Path | None = None,
                 make_store: Callable[[], Any] | None = None) -> None:
        self.cfg = cfg
        self.make_store = make_store or MemoryStore
        self.ctl = Controller(choices, max_steps=cfg.steps, fault_steps=cfg.steps,
                              faults=cfg.faults, allows=cfg.allows)
        self.obs = Observer(self)
        self.workload = make_workload(cfg)
        self.path = path
        self.ledger = _Ledger(self)
        self.rt: Any = None
        self.rt_open = False
        self.check_bombs: set[str] = set()
        self.store_closed_at: dict[int, float] = {}
        self.requests: list[Request] = []
        self.open_drive: dict[str, Request] = {}
        self.builder_raised: set[int] = set()
        self.transient_keys: set[Any] = set()
        self.redispatching: Counter[str] = Counter()  # run_id -> redispatches in flight
        self.world_faults_left = cfg.world_faults if cfg.faults else 0
        self.event = ""
        self.end = trio.Event()
        self.inputs_done: set[str] = set()
        self.cancels_done: set[str] = set()
        self.finished_runs: set[str] = set()
        self.incarnation = 0
        self._serial = 0
        self._app: trio.Nursery | None = None
        self.stats: dict[str, int] = {"incarnations": 0, "crashes": 0, "takeovers": 0,
                                      "closes": 0}

    # -- points ---------------------------------------------------------------------------

    async def op(self, what: str, faults: Any = (), *, run_id: str = "") -> str:
        """A controlled point labelled ``"<task>: <what>"``; returns the fault injected."""
        return await self.ctl.point(f"{actor_name()}: {what}", faults)

    def store_faults(self) -> tuple[str, ...]:
        """``("store_closed",)`` while world faults are left (it is one of them)."""
        return ("store_closed",) if self.world_faults_left > 0 and not self.event else ()

    def close_store(self, incarnation: int, run_id: str) -> None:
        if incarnation not in self.store_closed_at and self.world_faults_left > 0:
            self.world_faults_left -= 1
            self.store_closed_at[incarnation] = trio.current_time()
            self.obs.injected("", f"store closed (at {run_id})")
            self._world_fault("store_closed")

    def _world_fault(self, kind: str) -> None:
        for r in self.requests:
            if not r.done:
                r.world_fault = True
        if not self.event:
            self.event = kind
            self.end.set()

    def duplicate_later(self, outcome: Any) -> None:
        if self._app is not None:  # several copies: they may have to wait for mailbox room
            for i in range(3):
                self._app.start_soon(self._redeliver, outcome,
                                     name=f"app-dup{i}:{outcome.key.run_id}")

    # -- requests -------------------------------------------------------------------------

    def begin(self, kind: str, run_id: str) -> Request:
        self._serial += 1
        r = Request(self._serial, kind, run_id, self.ctl.steps, trio.current_time(),
                    world_fault=bool(self.event))
        self.requests.append(r)
        return r

    def finish(self, r: Request, exc: BaseException | None, value: Any = None) -> None:
        r.done = True
        if exc is not None:
            self.obs.note(f"{r.kind}#{r.serial} {r.run_id} -> {type(exc).__name__}: "
                          f"{str(exc)[:80]}")
        elif value is not None:
            self.obs.note(f"{r.kind}#{r.serial} {r.run_id} -> {value}")
        if exc is not None and not isinstance(exc, trio.Cancelled):
            self.obs.request_error(r.run_id, f"{r.kind}#{r.serial}", exc, r.world_fault)

    # -- the world --------------------------------------------------------------------------

    async def main(self, clock: trio.testing.MockClock) -> None:
        async with trio.open_nursery() as top:
            top.start_soon(self.ctl.run, clock, name="scheduler")
            try:
                await self._lifetimes()
            finally:
                top.cancel_scope.cancel()

    @contextlib.asynccontextmanager
    async def _open_store(self) -> AsyncIterator[Any]:
        if self.cfg.store == "memory":
            if not hasattr(self, "_memory"):
                self._memory = self.make_store()
            yield self._memory
            return
        from ...store.sqlite import open_sqlite_store

        assert self.path is not None
        cm = open_sqlite_store(self.path, readers=1)
        async with self.ctl.real_operation():
            store = await cm.__aenter__()
        try:
            yield store
        finally:
            with trio.CancelScope(shield=True):
                async with self.ctl.real_operation():
                    await cm.__aexit__(None, None, None)

    async def _lifetimes(self) -> None:
        final = not self.cfg.faults
        while True:
            self.event = ""
            self.end = trio.Event()
            if final:
                self.ctl.fault_steps = 0
                self.ctl.extend(self.cfg.liveness_budget)
            async with self._open_store() as store:
                await self._incarnation(store, final)
                if final:
                    await self._liveness(store)
                    return
            self.incarnation += 1
            if self.event in ("", "exhausted") or self.world_faults_left <= 0 \
                    or self.ctl.steps >= self.cfg.steps:
                final = True

    async def _incarnation(self, raw: Any, final: bool) -> None:
        n = self.incarnation
        self.stats["incarnations"] += 1
        self.ctl.note(f"incarnation {n}{' (fault-free)' if final else ''} starts")
        store = SimStore(raw, self, n)
        plans = self.workload.runs
        tools = self._tools()
        models = {f"m-{p.run_id}": SimModel(self, p) for p in plans}
        settings = Settings(drain_timeout=self.cfg.drain, settle_timeout=self.cfg.settle)
        self.body_entered = False
        with trio.CancelScope() as process:
            async with open_local_executor(tools=tools, models=models, max_attempts=3,
                                           backoff=1.0, model_timeout=20.0,
                                           epoch=f"ex-{n}") as ex:
                sim_ex = SimExecutor(ex, self)
                rec = Reconciler(sim_ex, missing=MissingPolicy.REDISPATCH_MISSING,
                                 ledger=self.ledger, redispatch=self._route)
                async with trio.open_nursery() as app:
                    self._app = app
                    try:
                        async with open_runtime(cast(Any, store), sim_ex, scope=SCOPE,
                                                settings=settings, reconciler=rec,
                                                mailbox_size=2) as rt:
                            self.rt = rt
                            self.rt_open = True
                            self.body_entered = True
                            self.obs.opened(int(rt.writer.epoch))
                            await self._start_app(rt, app, tools, final)
                            await self._await_end(final)
                            if self.event == "crash":
                                process.cancel()
                    except BaseException as exc:
                        self.rt_open = False
                        if _interrupted(exc):
                            raise  # the user's Ctrl-C stops the simulation, not a finding
                        self._runtime_error(exc)
                    self.rt_open = False
                    if self.event in ("close_runtime", "store_closed", "takeover"):
                        await self._drain_requests()
                    app.cancel_scope.cancel()
                self._app = None
        if process.cancelled_caught:
            self.ctl.note(f"incarnation {n} crashed")
        for r in self.requests:
            r.done = True

    def _runtime_error(self, exc: BaseException) -> None:
        """What escaped open_runtime. Cancelled by our own crash is the crash; an
        OwnershipLostError after a takeover is the documented shape; anything else is an
        exception that escaped into the runtime."""
        leaves = _leaves(exc)
        rest = [e for e in leaves if not isinstance(e, trio.Cancelled)]
        if self.event == "takeover":
            rest = [e for e in rest if not isinstance(e, OwnershipLostError)]
        if self.event == "store_closed" or not self.body_entered:
            # a store fault while opening (takeover reconciliation): the open failed
            rest = [e for e in rest if not isinstance(e, SimulatedFault)]
            if not self.body_entered and not self.event:
                self.event = "open_failed"
        if rest:
            e = rest[0]
            self.obs.violate("isolation", "", f"{type(e).__name__} escaped into the runtime "
                             f"(open_runtime raised {type(exc).__name__}: {e})")

    async def _await_end(self, final: bool) -> None:
        with trio.CancelScope() as wait:
            async def on_exhausted() -> None:
                await self.ctl.exhausted.wait()
                if not self.event:
                    self.event = "exhausted"
                self.end.set()
            async with trio.open_nursery() as n:
                n.start_soon(on_exhausted, name="bound")
                await self.end.wait()
                for r in self.requests:  # whatever is in flight now meets the world event
                    if not r.done:
                        r.world_fault = True
                wait.cancel()
                n.cancel_scope.cancel()

    async def _drain_requests(self) -> None:
        """After a runtime close / store close / takeover: every open request must be
        answered within drain_timeout."""
        deadline = trio.current_time() + self.cfg.drain + self.cfg.grace
        while trio.current_time() < deadline:
            if all(r.done for r in self.requests):
                return
            await trio.sleep(0.5)
        for r in self.requests:
            if not r.done:
                self.obs.violate("answered", r.run_id,
                                 f"{r.kind}#{r.serial} (made at t={r.time:.1f}) not answered "
                                 f"within drain_timeout={self.cfg.drain} s after the "
                                 f"{self.event.replace('_', ' ')}")

    # -- the application -------------------------------------------------------------------

    def _tools(self) -> list[Any]:
        world = self

        def check(arguments: Any) -> Any:
            if canonical_json_text(arguments) in world.check_bombs:
                raise CheckExploded("injected: the tool's argument check raised")
            return None

        def body(name: str) -> Any:
            async def run(ctx: Any, n: int = 0, run: str = "") -> Any:
                run_id = str(ctx.key.run_id)
                world.obs.attempt_started(run_id, f"tool {name}")
                world.obs.running_attempts[run_id] += 1
                try:
                    fault = await world.op(f"tool {name} {run_id}",
                                           ("raise", "retryable", "hang"), run_id=run_id)
                    if fault:
                        world.obs.injected(run_id, f"tool_{fault}")
                    if fault == "raise":
                        raise SimulatedFault("injected: the tool raised")
                    if fault == "retryable":
                        raise ToolError("unavailable", "injected",
                                        retry=effect.RetryDisposition.ALLOWED)
                    if fault == "hang":
                        await trio.sleep(1e6)
                    return {"echo": n}
                finally:
                    world.obs.running_attempts[run_id] -= 1
            return run

        return [
            python_tool(body("echo"), ref="echo", context=True, timeout=30.0, check=check,
                        parameters={"type": "object"}),
            python_tool(body("approve.me"), ref="approve.me", context=True, timeout=30.0,
                        policy=ResponsePolicy.APPROVAL_REQUIRED, check=check,
                        parameters={"type": "object"}),
        ]

    async def _start_app(self, rt: Any, app: trio.Nursery, tools: list[Any],
                         final: bool) -> None:
        plans = self.workload.runs
        if self.incarnation == 0:
            for p in plans:
                for _ in range(5):  # idempotent under its commit id: retry injected faults
                    try:
                        await rt.create_run(p.run_id, ["hello"])
                        break
                    except SimulatedFault:
                        continue
                    except RunExistsError:
                        break
        self._pending_drivers = 0
        self.drivers: dict[str, Any] = {}
        self.builders: dict[str, Any] = {}
        for p in plans:
            if p.run_id in self.finished_runs:
                continue
            builder = SimBuilder(self, p.run_id, TranscriptBuilder(
                rt.writer, rt.store.frozen, f"m-{p.run_id}", tools))
            self.builders[p.run_id] = builder
            self._pending_drivers += 1
            app.start_soon(self._driver, rt, p, builder, name=f"app-drive:{p.run_id}")
            if p.extra_input and p.run_id not in self.inputs_done:
                app.start_soon(self._input, rt, p, name=f"app-input:{p.run_id}")
            if p.cancel and p.run_id not in self.cancels_done:
                app.start_soon(self._cancel, rt, p, name=f"app-cancel:{p.run_id}")
        if not final and self.world_faults_left > 0 and any(
                self.cfg.allows(f) for f in WORLD_FAULTS):
            app.start_soon(self._chaos, rt, name="chaos")
        if self._pending_drivers == 0:
            self.end.set()

    async def _driver(self, rt: Any, plan: RunPlan, builder: Any) -> None:
        self.drivers[plan.run_id] = builder
        try:
            recovering = 0
            for _ in range(MAX_DRIVES + RECOVERY_WAITS):
                again = await self._drive_once(rt, plan, builder)
                if again == "recovery":
                    # takeover left an effect EXECUTING: the Reconciler settles it or
                    # retries its redispatch every requeue_after (5 s); wait for it
                    recovering += 1
                    if recovering > RECOVERY_WAITS:
                        return
                    await trio.sleep(RECOVERY_PAUSE)
                elif not again:
                    return
        finally:
            del self.drivers[plan.run_id]
            self._pending_drivers -= 1
            if self._pending_drivers <= 0:
                self.end.set()

    async def _drive_once(self, rt: Any, plan: RunPlan, builder: Any) -> bool | str:
        """One drive and what the application does with its result; False: stop,
        ``"recovery"``: the Run waits for takeover recovery."""
        run_id = plan.run_id
        fault = await self.op(f"drive {run_id}", ("abandon",), run_id=run_id)
        r = self.begin("drive", run_id)
        self.open_drive[run_id] = r
        result: Any = None
        cancelled = False
        with trio.CancelScope() as caller:
            if fault:
                assert self._app is not None
                self._app.start_soon(self._abandon, caller, run_id, name=f"app-abandon:{run_id}")
            try:
                result = await rt.drive(run_id, builder=builder)
            except BaseException as exc:
                if _interrupted(exc):
                    raise  # the user's Ctrl-C stops the simulation, not a finding
                # a bare Cancelled, an error, or (a caller cancelled while its request
                # failed) both in one group: split them, then re-check cancellation
                leaves = _leaves(exc)
                errors = [e for e in leaves if not isinstance(e, trio.Cancelled)]
                cancelled = len(errors) < len(leaves)
                if errors:
                    self.finish(r, errors[0])
                    self.open_drive.pop(run_id, None)
                    if not cancelled:
                        return not isinstance(errors[0], OwnershipLostError)
                if not caller.cancel_called:
                    raise  # not the application's own cancel: the process is going away
        await trio.lowlevel.checkpoint_if_cancelled()
        self.open_drive.pop(run_id, None)
        if cancelled or caller.cancelled_caught:
            if r.done:  # the failure was handed over with the Cancelled
                return True
            self.finish(r, None)
            if r.serial in self.builder_raised:
                self.obs.violate("not-masked", run_id,
                                 f"drive#{r.serial}: the prompt builder raised ValueError "
                                 f"while the caller was being cancelled; the caller saw only "
                                 f"Cancelled")
            return True
        self.finish(r, None, f"{result.disposition.name} {result.reason}".strip())
        if result.disposition is LoopDisposition.FINISHED:
            self.finished_runs.add(run_id)
            return False
        # WAITING: answer what waits for the application
        try:
            waiting = await rt.waiting(run_id)
        except Exception as exc:
            self.obs.request_error(run_id, "waiting", exc, bool(self.event))
            return False
        if waiting:
            for request in waiting:
                await self.op(f"answer {run_id}", (), run_id=run_id)
                r = self.begin("answer", run_id)
                try:
                    if plan.approve:
                        await rt.approve(run_id, request.call_id)
                    else:
                        await rt.reject(run_id, request.call_id, "no")
                except Exception as exc:
                    self.finish(r, exc)
                    return False
                self.finish(r, None)
            return True
        return "recovery" if result.execution_recovery else False

    async def _abandon(self, caller: trio.CancelScope, run_id: str) -> None:
        await self.op(f"abandon caller {run_id}", (), run_id=run_id)
        self.obs.note(f"the caller of the drive of {run_id} is cancelled")
        caller.cancel()

    async def _input(self, rt: Any, plan: RunPlan) -> None:
        await self.op(f"accept_input {plan.run_id}", (), run_id=plan.run_id)
        r = self.begin("accept_input", plan.run_id)
        try:
            await rt.accept_input(plan.run_id, "more")
        except Exception as exc:
            self.finish(r, exc)
            return
        self.finish(r, None)
        self.inputs_done.add(plan.run_id)
        if plan.run_id not in self.drivers and plan.run_id not in self.finished_runs \
                and self._app is not None and self.rt_open:
            self._pending_drivers += 1
            self._app.start_soon(self._driver, rt, plan, self.builders[plan.run_id],
                                 name=f"app-drive:{plan.run_id}")

    async def _cancel(self, rt: Any, plan: RunPlan) -> None:
        run_id = plan.run_id
        if plan.cancel_after:
            await trio.sleep(plan.cancel_after)
        await self.op(f"cancel {run_id}", (), run_id=run_id)
        r = self.begin("cancel", run_id)
        try:
            await rt.cancel(run_id)
        except Exception as exc:
            self.finish(r, exc)
            return
        self.finish(r, None)
        self.cancels_done.add(run_id)
        now = trio.current_time()
        self.obs.cancel_durable.setdefault(run_id, now)
        self.obs.note(f"CancelRun of {run_id} durable")
        drives = [d for d in self.requests if d.kind == "drive" and d.run_id == run_id
                  and not d.done]
        await trio.sleep(self.cfg.drain + self.cfg.grace)
        if self.rt is not rt or not self.rt_open:
            return
        late = [d for d in drives if not d.done and not d.world_fault]
        if late:
            self.obs.violate("cancel-reaches-work", run_id,
                             f"drive#{late[0].serial} still running {self.cfg.drain} s "
                             f"after CancelRun was durable")
        if self.obs.running_attempts[run_id] > 0:
            self.obs.violate("cancel-reaches-work", run_id,
                             f"an attempt of the Run is still running "
                             f"{self.cfg.drain} s after CancelRun was durable")

    async def _redeliver(self, outcome: Any) -> None:
        run_id = str(outcome.key.run_id)
        await self.op(f"redeliver {run_id}", (), run_id=run_id)
        rt = self.rt
        if rt is None or not self.rt_open:
            return
        r = self.begin("deliver", run_id)
        try:
            await rt.runtime.deliver(outcome)
        except Exception as exc:
            self.finish(r, exc)
            return
        self.finish(r, None)

    async def _chaos(self, rt: Any) -> None:
        while self.world_faults_left > 0 and self.ctl.faulting and not self.event:
            fault = await self.op("tick", [f for f in WORLD_FAULTS if self.cfg.allows(f)])
            if not fault:
                await trio.sleep(1.0)
                continue
            self.world_faults_left -= 1
            self.obs.injected("", fault)
            if fault == "takeover":
                self.stats["takeovers"] += 1
                async with self.ctl.real_operation():
                    second = await rt.store.inner.open(SCOPE) if hasattr(
                        rt.store, "inner") else await rt.store.open(SCOPE)
                self.obs.opened(int(second.epoch))
                self.obs.note(f"a second owner opened the scope at epoch {second.epoch}")
                self._world_fault("takeover")
                # the old owner keeps running until its drivers notice they are fenced
                self.end = trio.Event() if self._pending_drivers > 0 else self.end
                if self._pending_drivers <= 0:
                    self.end.set()
                return
            if fault == "crash":
                self.stats["crashes"] += 1
            else:
                self.stats["closes"] += 1
            self._world_fault(fault)
            return

    async def _route(self, key: Any) -> None:
        """The application's redispatch route: to the runtime it has now."""
        rt = self.rt
        if rt is None or not self.rt_open:
            self.transient_keys.add(key)
            self.obs.note(f"redispatch of {key.run_id} routed to a closed runtime")
        else:  # the latest redispatch reached an open runtime: its answer is real
            self.transient_keys.discard(key)
        if rt is None:
            raise trio.ClosedResourceError("no runtime yet")
        self.redispatching[key.run_id] += 1
        try:
            await rt.runtime.run(key.run_id).redispatch(key)
        finally:
            self.redispatching[key.run_id] -= 1
            if not self.redispatching[key.run_id]:
                del self.redispatching[key.run_id]

    # -- final checks -----------------------------------------------------------------------

    async def _liveness(self, raw: Any) -> None:
        """At the end of the fault-free incarnation every Run has ended or waits for the
        application (an answer or an input). Reads the inner store, folds with the core."""
        async with self.ctl.real_operation():
            reader = await raw.reader(SCOPE)
            logs = {p.run_id: tuple(await reader.run_facts(p.run_id))
                    for p in self.workload.runs}
        exhausted = self.event == "exhausted"
        for p in self.workload.runs:
            state = fold_run(logs[p.run_id], run_id=p.run_id)
            if state.status is not RunStatus.ACTIVE:
                continue
            if waiting_calls(state):
                continue
            if isinstance(plan_next(state), Idle) and not needs_recovery(state):
                continue
            what = type(state.current).__name__ if state.current is not None else "no step"
            why = (f"{self.cfg.liveness_budget} fault-free steps" if exhausted
                   else "the application's drives")
            if any(p.run_id in bomb for bomb in self.check_bombs):
                self.obs.violate("no-crash-loop", p.run_id,
                                 f"a call whose argument check raises keeps the Run ACTIVE "
                                 f"({what}) across drives and restarts; it was never parked "
                                 f"or failed")
            elif p.hostile:
                self.obs.violate("bounded-time", p.run_id,
                                 f"model {p.hostile!r}: the Run is still ACTIVE ({what}) after "
                                 f"{why}; {self.obs.model_calls[p.run_id]} model calls")
            else:
                self.obs.violate("liveness", p.run_id,
                                 f"the Run neither ended nor waits for the application after "
                                 f"{why} ({what})")


class _Ledger:
    """The application's durable DispatchLedger, watched for transient give-ups."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.inner = MemoryDispatchLedger()

    async def load(self, key: Any) -> Any:
        return await self.inner.load(key)

    async def append(self, key: Any, entry: Any, *, seq: int, epoch: int) -> Any:
        if isinstance(entry, GivenUp) and entry.reason != "budget" \
                and key in self.world.transient_keys:
            self.world.obs.violate(
                "transient-not-final", str(key.run_id),
                f"the Reconciler gave up effect {key.effect[:12]} ({entry.reason}) because "
                f"its redispatch hit a closed runtime")
        return await self.inner.append(key, entry, seq=seq, epoch=epoch)


def _interrupted(exc: BaseException) -> bool:
    """True when *exc* is, or holds, a KeyboardInterrupt: the person running the
    simulation pressed Ctrl-C (SIGINT). It is never the runtime's failure."""
    return any(isinstance(e, KeyboardInterrupt) for e in _leaves(exc))


def _leaves(exc: BaseException) -> list[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        out: list[BaseException] = []
        for e in exc.exceptions:
            out.extend(_leaves(e))
        return out
    return [exc]


def temp_sqlite_path() -> tuple[tempfile.TemporaryDirectory[str], Path]:
    d = tempfile.TemporaryDirectory(prefix="runx-sim-")
    return d, Path(d.name) / "sim.sqlite"

