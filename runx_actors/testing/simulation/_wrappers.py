"""Wrappers that put a controlled point in front of every store and executor operation.

Nothing here changes what the wrapped object does unless the scheduler injects a fault;
each wrapper also reports what it saw to the world's :class:`~._oracle.Observer` (commits
and their epochs, attempts, dispatches), so the oracles never have to ask the code they
judge.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any

import trio

from ...effect import AttachmentState
from ...protocol.commit import BatchResult, CommitRequest, CommitResult
from ...protocol.errors import OutcomeNotReadyError
from ...store.base import commit_batch

if TYPE_CHECKING:
    from ._world import World

__all__ = ["SimulatedFault", "SimStore", "SimWriter", "SimRunStore", "SimExecutor",
           "SimFrozen", "actor_name"]


class SimulatedFault(Exception):
    """An injected failure (of a store, a tool, a check, a builder). Not a RunxError: the
    oracles accept it only on the Run it was injected into."""


class CheckExploded(RuntimeError):
    """What an exploding tool argument check raises (a symlink loop in ``Path.resolve``
    raises RuntimeError the same way)."""


class BuilderFailed(ValueError):
    """What a failing prompt builder raises (the application's own error)."""


#: Faults a commit may suffer.
COMMIT_FAULTS = ("lost_request", "applied_unanswered", "store_closed")


_HEX = re.compile(r"[0-9a-f]{16,}")


def short(text: str) -> str:
    """*text* with long hex ids cut to 6 characters."""
    return _HEX.sub(lambda m: m.group(0)[:6], text)


def actor_name() -> str:
    """The current task's name, shortened: the actor part of a point's label."""
    name = trio.lowlevel.current_task().name
    return short(name.rsplit(".", 1)[-1].replace(" ", "_"))


def _run_of(request: CommitRequest) -> str:
    return str(request.envelope.run_id)


class SimFrozen:
    """The FrozenStore, behind points."""

    def __init__(self, inner: Any, world: World) -> None:
        self.inner = inner
        self.world = world

    async def put(self, digest: str, data: bytes) -> None:
        await self.world.op("frozen.put", ())
        async with self.world.ctl.real_operation():
            await self.inner.put(digest, data)

    async def get(self, digest: str) -> bytes:
        await self.world.op("frozen.get", ())
        async with self.world.ctl.real_operation():
            return bytes(await self.inner.get(digest))


class SimStore:
    """A SessionStore whose writers and frozen store are wrapped."""

    def __init__(self, inner: Any, world: World, incarnation: int) -> None:
        self.inner = inner
        self.world = world
        self.incarnation = incarnation
        self.frozen = SimFrozen(inner.frozen, world)

    async def open(self, scope: str) -> SimWriter:
        await self.world.op(f"store.open {scope}", ())
        async with self.world.ctl.real_operation():
            writer = await self.inner.open(scope)
        self.world.obs.opened(int(writer.epoch))
        return SimWriter(writer, self.world, self.incarnation)


class SimWriter:
    """A SessionWriter behind points; ``run_store()`` is a :class:`SimRunStore`."""

    def __init__(self, inner: Any, world: World, incarnation: int) -> None:
        self.inner = inner
        self.world = world
        self.incarnation = incarnation
        self.epoch = int(inner.epoch)
        self._run_store = SimRunStore(inner.run_store(), self)

    @property
    def scope(self) -> str:
        return str(self.inner.scope)

    def run_store(self) -> SimRunStore:
        return self._run_store

    def active_runs(self) -> Any:
        return self.inner.active_runs()

    def projection(self) -> Any:
        return self.inner.projection()

    async def record(self, run_id: str) -> Any:
        await self.world.op(f"store.record {run_id}", (), run_id=run_id)
        async with self.world.ctl.real_operation():
            return await self.inner.record(run_id)

    async def run_facts(self, run_id: str) -> Any:
        await self.world.op(f"store.run_facts {run_id}", (), run_id=run_id)
        async with self.world.ctl.real_operation():
            return await self.inner.run_facts(run_id)

    async def tail_facts(self, run_id: str, count: int) -> Any:
        await self.world.op(f"store.tail_facts {run_id}", (), run_id=run_id)
        async with self.world.ctl.real_operation():
            return await self.inner.tail_facts(run_id, count)

    async def create_run(self, new_run: Any, inputs: Any = (), **kw: Any) -> Any:
        await self.world.op(f"store.create_run {new_run.run_id}", ())
        async with self.world.ctl.real_operation():
            return await self.inner.create_run(new_run, inputs, **kw)

    async def append_events(self, commit_id: str, events: Any) -> Any:
        await self.world.op("store.append_events", ())
        async with self.world.ctl.real_operation():
            return await self.inner.append_events(commit_id, events)

    async def commit(self, request: CommitRequest) -> CommitResult:
        return await self._run_store.commit(request)

    async def aclose(self) -> None:
        async with self.world.ctl.real_operation():
            await self.inner.aclose()


class SimRunStore:
    """A RunStore behind points, with commit faults: the request lost (nothing applied),
    applied but unanswered (the caller cannot tell), or the store closing. A batch
    commit (RUN-CMT-9) is one point with the same faults, on either side of its one
    transaction: lost (nothing of the batch applied) or applied but unanswered (all of
    its committed prefix applied)."""

    def __init__(self, inner: Any, writer: SimWriter) -> None:
        self.inner = inner
        self.writer = writer
        self.world = writer.world

    @property
    def scope(self) -> str:
        return str(self.inner.scope)

    def _check_open(self) -> None:
        if self.world.store_closed_at.get(self.writer.incarnation) is not None:
            raise SimulatedFault("the store is closed")

    async def load(self, run_id: str) -> Any:
        fault = await self.world.op(f"store.load {run_id}", self.world.store_faults(),
                                    run_id=run_id)
        if fault:
            self.world.close_store(self.writer.incarnation, run_id)
        self._check_open()
        async with self.world.ctl.real_operation():
            return await self.inner.load(run_id)

    async def frozen_request(self, digest: str) -> Any:
        await self.world.op("store.frozen_request", ())
        self._check_open()
        async with self.world.ctl.real_operation():
            return await self.inner.frozen_request(digest)

    async def commit(self, request: CommitRequest) -> CommitResult:
        run_id = _run_of(request)
        command = type(request.envelope.command).__name__
        faults = COMMIT_FAULTS[:2] + self.world.store_faults()
        fault = await self.world.op(f"store.commit {run_id} {command}", faults, run_id=run_id)
        if fault == "store_closed":
            self.world.close_store(self.writer.incarnation, run_id)
        self._check_open()
        if fault == "lost_request":
            self.world.obs.injected(run_id, fault)
            raise SimulatedFault("commit request lost (nothing applied)")
        try:
            async with self.world.ctl.real_operation():
                result: CommitResult = await self.inner.commit(request)
        except BaseException as exc:
            self.world.obs.commit_refused(self.writer, request, exc)
            raise
        await self.world.obs.committed(self.writer, request, result)
        if fault == "applied_unanswered":
            self.world.obs.injected(run_id, fault)
            raise SimulatedFault("commit applied, answer lost")
        return result

    async def commit_batch(self, requests: Any) -> BatchResult:
        requests = tuple(requests)
        run_id = _run_of(requests[0]) if requests else ""
        commands = "+".join(type(r.envelope.command).__name__ for r in requests)
        faults = COMMIT_FAULTS[:2] + self.world.store_faults()
        fault = await self.world.op(f"store.commit_batch {run_id} {commands}", faults,
                                    run_id=run_id)
        if fault == "store_closed":
            self.world.close_store(self.writer.incarnation, run_id)
        self._check_open()
        if fault == "lost_request":
            self.world.obs.injected(run_id, fault)
            raise SimulatedFault("batch commit request lost (nothing applied)")
        try:
            async with self.world.ctl.real_operation():
                batch = await commit_batch(self.inner, requests)
        except BaseException as exc:
            if requests:
                self.world.obs.commit_refused(self.writer, requests[0], exc)
            raise
        for request, result in zip(requests, batch.results, strict=False):
            await self.world.obs.committed(self.writer, request, result)
        if batch.error is not None and len(batch.results) < len(requests):
            self.world.obs.commit_refused(self.writer, requests[len(batch.results)],
                                          batch.error)
        if fault == "applied_unanswered":
            self.world.obs.injected(run_id, fault)
            raise SimulatedFault("batch commit applied, answer lost")
        return batch


class SimExecutor:
    """The ExecutionPort behind points; records dispatches and cancels. A validate with
    the ``check_raises`` fault makes the tool's own argument check raise (RuntimeError)."""

    def __init__(self, inner: Any, world: World) -> None:
        self.inner = inner
        self.world = world

    @property
    def epoch(self) -> str:
        return str(self.inner.epoch)

    @property
    def closed(self) -> bool:
        return bool(self.inner.closed)

    async def validate(self, a: Any) -> Any:
        faults = ("check_raises",) if a.call_id else ()
        fault = await self.world.op(f"exec.validate {a.run_id} {short(a.call_id) or 'model'}",
                                    faults, run_id=a.run_id)
        if fault:
            # bad input: the check of this call's arguments raises from now on, also
            # after restarts (like a symlink loop in the path it names)
            self.world.obs.injected(a.run_id, fault)
            self.world.check_bombs.add(a.body.arguments)
        return await self.inner.validate(a)

    async def dispatch(self, a: Any) -> None:
        await self.world.op(f"exec.dispatch {a.run_id} {short(a.call_id) or 'model'}", (),
                            run_id=a.run_id)
        self.world.obs.dispatch(a, redispatch=a.run_id in self.world.redispatching)
        await self.inner.dispatch(a)

    async def cancel(self, key: Any) -> None:
        await self.world.op(f"exec.cancel {key.run_id}", (), run_id=key.run_id)
        self.world.obs.executor_cancel(key)
        await self.inner.cancel(key)

    async def get_outcome(self, key: Any) -> Any:
        fault = await self.world.op(f"exec.get_outcome {key.run_id}", ("duplicate", "lost"),
                                    run_id=key.run_id)
        if fault == "lost":  # the answer is lost in transit: the reader must ask again
            raise OutcomeNotReadyError("injected: the outcome's answer was lost")
        outcome = await self.inner.get_outcome(key)
        if fault:
            self.world.duplicate_later(outcome)
        return outcome

    async def get_status(self, key: Any) -> Any:
        await self.world.op(f"exec.get_status {key.run_id}", (), run_id=key.run_id)
        return await self.inner.get_status(key)

    async def attach(self, a: Any) -> Any:
        await self.world.op(f"exec.attach {a.run_id}", (), run_id=a.run_id)
        att = await self.inner.attach(a)
        if att.state is AttachmentState.MISSING:
            self.world.obs.note(f"attach {a.run_id}: missing")
        return att

    async def abort(self, a: Any) -> Any:
        await self.world.op(f"exec.abort {a.run_id}", (), run_id=a.run_id)
        return await self.inner.abort(a)

    async def acknowledge(self, key: Any) -> None:
        await self.world.op(f"exec.acknowledge {key.run_id}", (), run_id=key.run_id)
        await self.inner.acknowledge(key)

    async def recover_execution(self, key: Any) -> None:
        await self.world.op(f"exec.recover_execution {key.run_id}", (), run_id=key.run_id)
        await self.inner.recover_execution(key)

    async def dispose(self, key: Any) -> None:
        await self.world.op(f"exec.dispose {key.run_id}", (), run_id=key.run_id)
        await self.inner.dispose(key)

    def settlements(self, epoch: str, after: int) -> Any:
        return self.inner.settlements(epoch, after)
