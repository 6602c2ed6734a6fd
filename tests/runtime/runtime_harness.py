"""Helpers shared by the runtime tests: probes, gated models, wrappers, sinks.

Nothing here sleeps on the wall clock: waits are on ``trio.Event`` objects or on the
mock clock of the test.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import attrs
import trio
import trio.testing

from runx_actors import effect
from runx_actors.executors import ScriptedModel, python_tool
from runx_actors.protocol import facts as F
from runx_actors.protocol.commit import CommitRequest, CommitResult
from runx_actors.protocol.errors import FrozenValueMissingError
from runx_actors.protocol.state import MachineState, ModelStep, ToolCallState, ToolStep
from runx_actors.protocol.values import ModelRequest, ModelResult, NewRun
from runx_actors.runtime import EventKind, TranscriptBuilder
from runx_actors.testing.faults import FaultyRunStore

SCOPE = "s1"
MODEL = "m"
RUN = "run-1"


# -- tools ---------------------------------------------------------------------------------


class Probe:
    """An async tool body that counts its executions and may block on a gate.

    ``calls``: executions started; ``running``/``peak``: concurrency now / at most;
    ``started``: set at the first execution; ``hold``: mock seconds to sleep when no
    gate is given (to make overlapping executions observable).
    """

    def __init__(self, *, gate: trio.Event | None = None, result: Any = "done",
                 error: BaseException | None = None, hold: float = 0.0) -> None:
        self.gate = gate
        self.result = result
        self.error = error
        self.hold = hold
        self.calls = 0
        self.running = 0
        self.peak = 0
        self.finished = 0
        self.arguments: list[dict[str, Any]] = []
        self.started = trio.Event()
        self._changed = trio.Event()

    async def __call__(self, **arguments: Any) -> Any:
        self.calls += 1
        self.arguments.append(arguments)
        self.running += 1
        self.peak = max(self.peak, self.running)
        self.started.set()
        self._poke()
        try:
            if self.gate is not None:
                await self.gate.wait()
            elif self.hold:
                await trio.sleep(self.hold)
            else:
                await trio.lowlevel.checkpoint()
            if self.error is not None:
                raise self.error
            return self.result
        finally:
            self.running -= 1
            self.finished += 1
            self._poke()

    def _poke(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def wait_calls(self, n: int) -> None:
        """Wait until *n* executions have started."""
        while self.calls < n:
            await self._changed.wait()


def probe_tool(ref: str, probe: Probe, **declaration: Any) -> Any:
    """A LocalExecutor Tool running *probe* (any JSON-object arguments)."""
    return python_tool(probe, ref=ref, **declaration)


# -- models --------------------------------------------------------------------------------


class GatedModel:
    """Answers from a ScriptedModel, each call first waiting for ``gate`` (if set).

    ``started`` is set when a call has begun; ``calls`` counts calls, including those
    cancelled while waiting (they consume no script turn).
    """

    def __init__(self, script: Iterable[Any], *, gate: trio.Event | None = None,
                 repeat_last: bool = False) -> None:
        self.inner = ScriptedModel(script, repeat_last=repeat_last)
        self.gate = gate
        self.started = trio.Event()
        self.calls = 0
        self.requests: list[ModelRequest] = []

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.calls += 1
        self.requests.append(request)
        self.started.set()
        if self.gate is not None:
            await self.gate.wait()
        return await self.inner.complete(request)


# -- builders ------------------------------------------------------------------------------


class RecordingBuilder:
    """Wraps a PromptBuilder and records every hint; ``before_build`` may block."""

    def __init__(self, inner: Any, *, before_build: Callable[[], Any] | None = None) -> None:
        self.inner = inner
        self.hints: list[Any] = []
        self.before_build = before_build

    async def build(self, hint: Any) -> Any:
        self.hints.append(hint)
        if self.before_build is not None:
            await self.before_build()
        return await self.inner.build(hint)


def transcript(writer: Any, store: Any, tools: Sequence[Any] = (), *,
               model: str = MODEL) -> TranscriptBuilder:
    return TranscriptBuilder(writer, store.frozen, model, tools)


# -- executor wrapper ----------------------------------------------------------------------


class ProxyExecutor:
    """Delegates to a real executor; records dispatches and lets a test intercept.

    ``on_dispatch(assignment)`` (async) runs before the inner dispatch and may raise;
    ``on_validate(assignment)`` (async) runs before the inner validate;
    ``on_get_outcome(key)`` (async) runs before the inner read and may raise;
    ``on_outcome(outcome)`` (async) runs after a successful inner read and may block.
    """

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.dispatched: list[effect.Assignment] = []
        self.validated: list[effect.Assignment] = []
        self.on_dispatch: Callable[[Any], Any] | None = None
        self.on_validate: Callable[[Any], Any] | None = None
        self.on_get_outcome: Callable[[Any], Any] | None = None
        self.on_outcome: Callable[[Any], Any] | None = None

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def validate(self, assignment: Any) -> Any:
        self.validated.append(assignment)
        if self.on_validate is not None:
            await self.on_validate(assignment)
        return await self.inner.validate(assignment)

    async def dispatch(self, assignment: Any) -> None:
        if self.on_dispatch is not None:
            await self.on_dispatch(assignment)
        await self.inner.dispatch(assignment)
        self.dispatched.append(assignment)

    async def get_outcome(self, key: Any) -> Any:
        if self.on_get_outcome is not None:
            await self.on_get_outcome(key)
        outcome = await self.inner.get_outcome(key)
        if self.on_outcome is not None:
            await self.on_outcome(outcome)
        return outcome

    # explicit so runtime_checkable protocols see them without __getattr__ tricks
    async def attach(self, assignment: Any) -> Any:
        return await self.inner.attach(assignment)

    async def abort(self, assignment: Any) -> Any:
        return await self.inner.abort(assignment)

    async def cancel(self, key: Any) -> None:
        await self.inner.cancel(key)

    async def acknowledge(self, key: Any) -> None:
        await self.inner.acknowledge(key)

    def settlements(self, epoch: str, after: int) -> Any:
        return self.inner.settlements(epoch, after)

    async def recover_execution(self, key: Any) -> None:
        await self.inner.recover_execution(key)

    def tool_dispatches(self) -> list[effect.Assignment]:
        return [a for a in self.dispatched if isinstance(a.body, effect.ToolAssignment)]

    def model_dispatches(self) -> list[effect.Assignment]:
        return [a for a in self.dispatched if isinstance(a.body, effect.ModelAssignment)]


# -- run store wrappers --------------------------------------------------------------------


class LosingRunStore(FaultyRunStore):
    """A FaultyRunStore whose frozen request bodies are lost."""

    async def frozen_request(self, digest: str) -> Any:
        await trio.lowlevel.checkpoint()
        raise FrozenValueMissingError(f"no frozen body {digest}", digest=digest)


class WrappedWriter:
    """A SessionWriter whose ``run_store()`` is *run_store* (wrapping the writer's own)."""

    def __init__(self, inner: Any, run_store: Any) -> None:
        self.inner = inner
        self.faults = run_store

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run_store(self) -> Any:
        return self.faults


class GateRunStore(FaultyRunStore):
    """A FaultyRunStore with a hook ``before(request)`` (async) run before each commit
    and ``after(request, result)`` after it; for a batch commit (RUN-CMT-9) ``before``
    runs for each request before the batch, ``after`` for each committed one after it."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.before: Callable[[CommitRequest], Any] | None = None
        self.after: Callable[[CommitRequest, CommitResult], Any] | None = None

    async def commit(self, request: CommitRequest) -> CommitResult:
        if self.before is not None:
            await self.before(request)
        result = await super().commit(request)
        if self.after is not None:
            await self.after(request, result)
        return result

    async def commit_batch(self, requests: Sequence[CommitRequest]) -> Any:
        if self.before is not None:
            for request in requests:
                await self.before(request)
        batch = await super().commit_batch(requests)
        if self.after is not None:
            for request, result in zip(requests, batch.results, strict=False):
                await self.after(request, result)
        return batch


def command_type(request: CommitRequest) -> str:
    return type(request.envelope.command).__name__


def attempts_of(faults: FaultyRunStore, command_id: str) -> int:
    return sum(1 for r in faults.attempts if r.envelope.id == command_id)


# -- sinks ---------------------------------------------------------------------------------


class Sink:
    """Collects events; ``wait_for(kind, n)`` waits until *n* events of *kind* arrived."""

    def __init__(self) -> None:
        self.events: list[Any] = []
        self._changed = trio.Event()

    def emit(self, event: Any) -> None:
        self.events.append(event)
        self._changed.set()
        self._changed = trio.Event()

    def of(self, kind: EventKind) -> list[Any]:
        return [e for e in self.events if e.kind is kind]

    async def wait_for(self, kind: EventKind, n: int = 1) -> None:
        while len(self.of(kind)) < n:
            await self._changed.wait()


# -- background operations -----------------------------------------------------------------


@attrs.define
class Box:
    """The result of an operation run in the background."""

    value: Any = None
    error: BaseException | None = None
    done: trio.Event = attrs.Factory(trio.Event)

    async def wait(self) -> Any:
        await self.done.wait()
        return self


def start(nursery: trio.Nursery, fn: Callable[..., Any], *args: Any) -> Box:
    """Run ``await fn(*args)`` in *nursery*; the Box gets its value or exception."""
    box = Box()

    async def run() -> None:
        try:
            box.value = await fn(*args)
        except Exception as exc:
            box.error = exc
        finally:
            box.done.set()

    nursery.start_soon(run)
    return box


# -- reading the log -----------------------------------------------------------------------


def kinds(facts: Iterable[Any]) -> list[type]:
    return [type(f) for f in facts]


def of_type(facts: Iterable[Any], kind: type) -> list[Any]:
    return [f for f in facts if isinstance(f, kind)]


def current_calls(state: MachineState) -> tuple[ToolCallState, ...]:
    cur = state.current
    assert isinstance(cur, ToolStep), cur
    return cur.calls


def current_model(state: MachineState) -> ModelStep:
    cur = state.current
    assert isinstance(cur, ModelStep), cur
    return cur


async def create(writer: Any, run_id: str = RUN, *inputs: str) -> Any:
    """Create *run_id* with text inputs through *writer* (the RunStore-level path)."""
    from runx_actors.testing import builders as b

    items = [b.agent_input(i) for i in (inputs or ("in-1",))]
    return await writer.create_run(NewRun(run_id), items, commit_id=f"create:{run_id}")


STARTS = (F.ModelStepStarted, F.ToolCallStarted)


# -- one-owner environment -----------------------------------------------------------------


@attrs.define
class Env:
    """One owner: a LocalExecutor (``local``), what the runtime sees (``executor``,
    possibly a ProxyExecutor), the writer the runtime uses (possibly wrapped), the
    ActorRuntime and the default builder; ``app`` is the open_runtime facade when the
    environment was opened through it."""

    local: Any
    executor: Any
    writer: Any
    runtime: Any
    builder: Any
    app: Any = None

    @property
    def run_store(self) -> Any:
        return self.runtime.run_store

    @property
    def faults(self) -> Any:
        return self.writer.faults

    def handle(self, run_id: str = RUN, **kw: Any) -> Any:
        return self.runtime.run(run_id, **kw)

    async def drive(self, run_id: str = RUN, builder: Any = None, **kw: Any) -> Any:
        return await self.handle(run_id, **kw).drive(builder or self.builder)

    async def advance(self, run_id: str = RUN, builder: Any = None, **kw: Any) -> Any:
        return await self.handle(run_id, **kw).advance(builder or self.builder)

    async def facts(self, run_id: str = RUN) -> tuple[Any, ...]:
        return tuple(await self.writer.run_facts(run_id))

    async def state(self, run_id: str = RUN) -> MachineState:
        return (await self.writer.record(run_id)).state  # type: ignore[no-any-return]

    async def create(self, run_id: str = RUN, *inputs: str) -> Any:
        return await create(self.writer, run_id, *inputs)


def _served(model: Any, models: dict[str, Any] | None) -> dict[str, Any]:
    served = dict(models or {})
    if model is not None:
        served[MODEL] = model
    return served


@asynccontextmanager
async def open_env(store: Any, *, tools: Sequence[Any] = (), model: Any = None,
                   models: dict[str, Any] | None = None, settings: Any = None,
                   sink: Any = None, proxy: bool = False, reconciler: Any = None,
                   scope: str = SCOPE, offered: Sequence[Any] | None = None,
                   local_executor: Any = None) -> Any:
    """Open a LocalExecutor (or reuse *local_executor*) and ``open_runtime`` over
    *store*; yield an :class:`Env`. ``offered`` (default: *tools*) are the tools the
    TranscriptBuilder offers."""
    from contextlib import AsyncExitStack

    from runx_actors.executors import open_local_executor
    from runx_actors.runtime import open_runtime

    async with AsyncExitStack() as stack:
        local = local_executor
        if local is None:
            local = await stack.enter_async_context(open_local_executor(
                tools=tools, models=_served(model, models)))
        executor = ProxyExecutor(local) if proxy else local
        async with open_runtime(store, executor, scope=scope, settings=settings,
                                model=MODEL, tools=tools if offered is None else offered,
                                sink=sink, reconciler=reconciler) as app:
            yield Env(local, executor, app.writer, app.runtime, app.builder, app)


@asynccontextmanager
async def open_wrapped_env(store: Any, *, tools: Sequence[Any] = (), model: Any = None,
                           models: dict[str, Any] | None = None, settings: Any = None,
                           sink: Any = None, proxy: bool = False,
                           wrap: Callable[[Any], Any] | None = None,
                           local: Any = None, scope: str = SCOPE) -> Any:
    """Like :func:`open_env`, but the runtime runs over ``wrap(writer)`` (default: a
    :class:`FaultyWriter`), built by hand: ``store.open`` → ``recover_interrupted`` →
    ``ActorRuntime``. Pass ``local`` to reuse an already open LocalExecutor."""
    from contextlib import AsyncExitStack

    from runx_actors.executors import open_local_executor
    from runx_actors.runtime import ActorRuntime, Reconciler, recover_interrupted
    from runx_actors.testing.faults import FaultyWriter

    async with AsyncExitStack() as stack:
        if local is None:
            local = await stack.enter_async_context(open_local_executor(
                tools=tools, models=_served(model, models)))
        executor = ProxyExecutor(local) if proxy else local
        inner = await store.open(scope)
        writer = (wrap or FaultyWriter)(inner)
        try:
            await recover_interrupted(writer, Reconciler(executor))
            async with ActorRuntime(writer, executor, settings, sink=sink) as runtime:
                builder = TranscriptBuilder(writer, store.frozen, MODEL, tools)
                yield Env(local, executor, writer, runtime, builder)
        finally:
            with trio.CancelScope(shield=True):
                await inner.aclose()


# -- the SQLite tests' clock (see conftest.py) -----------------------------------------

#: Real seconds of idleness before the mock clock jumps, over SQLite (see module doc).
SQLITE_AUTOJUMP_THRESHOLD = 0.05
#: Real seconds a jump may be held back by I/O in flight before the clock jumps anyway
#: (a store that never answers must still reach the test's own deadline).
MAX_IO_HOLD = 20.0


class StoreAwareClock:
    """Holds a MockClock's autojump back while a registered store has I/O in flight.

    trio's ``MockClock`` cannot be subclassed, so this wraps the clock's own ``_autojump``
    on the instance. ``probes`` are callables returning the number of operations a store
    has handed to a thread and not yet answered; while any is non-zero an autojump is held
    back (for at most :data:`MAX_IO_HOLD` real seconds), so a deadline fires only when the
    loop is idle for a reason of virtual time, not because a real fsync is slow.
    """

    def __init__(self, autojump_threshold: float) -> None:
        self.clock = trio.testing.MockClock(autojump_threshold=autojump_threshold)
        self.probes: list[Callable[[], int]] = []
        self._held_since: float | None = None
        self._jump = self.clock._autojump
        self.clock._autojump = self._autojump  # type: ignore[method-assign]
        self.clock.store_aware = self  # type: ignore[attr-defined]

    def _autojump(self) -> None:
        if any(probe() for probe in self.probes):
            now = time.monotonic()
            if self._held_since is None:
                self._held_since = now
            if now - self._held_since < MAX_IO_HOLD:
                return
        self._held_since = None
        self._jump()
