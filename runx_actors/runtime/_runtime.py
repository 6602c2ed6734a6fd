"""ActorRuntime and RunHandle (spec §5.1; RUN-CMT-6, INV-27, INV-43).

One ActorRuntime per SessionWriter per process: the registry of Run actors, the executor,
the Watcher and the nursery they live in. ``RunHandle`` is the address of one Run; get it
from :meth:`ActorRuntime.run`.
"""

from __future__ import annotations

import contextlib
import weakref
from types import TracebackType
from typing import Any

import trio

from .. import effect
from .._scoped import only_body_error
from ..protocol import commands as C
from ..protocol import facts as F
from ..protocol.commit import CommitRequest, CommitResult, envelope
from ..protocol.errors import (
    DriveCancelledError,
    RunAlreadyRunningError,
    RuntimeClosedError,
    ValidationError,
)
from ._actor import POKE, ActorStatistics, Request, RunActor
from ._events import EventHub, EventSink, tee
from ._gate import DispatchGate
from ._results import LoopResult
from ._settings import Settings

__all__ = ["ActorRuntime", "DriveTicket", "RunHandle"]


def _unmasked(cancelled: trio.Cancelled, request: Request) -> BaseException:
    """What a cancelled caller raises (RUN-ACT-5): its Cancelled, or — when the
    operation failed with an error of its own meanwhile — one group holding that error
    and the Cancelled, so cancellation never hides it (the enclosing cancel scope takes
    the Cancelled, the error goes on, inside an ExceptionGroup)."""
    error = request.error
    if error is None or isinstance(error, RuntimeClosedError) or (
            isinstance(error, DriveCancelledError) and not request.by_cancel_drive):
        # nothing failed, or the stop the cancellation itself caused (the caller's own
        # cancel, or the runtime closing — usually under the same cancelled scope)
        return cancelled
    return BaseExceptionGroup("the operation failed while its caller was cancelled",
                              [error, cancelled])

_WRITERS_WITH_RUNTIME: weakref.WeakSet[Any] = weakref.WeakSet()


class ActorRuntime:
    """The in-process owner of a scope's Runs.

    Use as ``async with ActorRuntime(writer, executor, settings) as rt:``. Entering opens
    the nursery that holds the actors and the Watcher; leaving cancels them (settlements
    in flight finish inside their shielded, time-limited sections).

    Raises:
        ValidationError: a second ActorRuntime for the same writer (§4.5).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """

    def __init__(self, writer: Any, executor: Any, settings: Settings | None = None, *,
                 mailbox_size: int = 16, watcher: Any = None,
                 sink: EventSink | None = None) -> None:
        if writer in _WRITERS_WITH_RUNTIME:
            raise ValidationError("a ActorRuntime already exists for this writer",
                                  scope=getattr(writer, "scope", ""))
        _WRITERS_WITH_RUNTIME.add(writer)
        self.writer = writer
        self.run_store = writer.run_store()
        self.executor = executor
        # optional executor capabilities, detected once (runtime_checkable isinstance
        # checks are slow on the hot path)
        self.acknowledges = isinstance(executor, effect.Acknowledger)
        self.reports_progress = isinstance(executor, effect.ProgressPort)
        self.settings = settings or Settings()
        self.mailbox_size = mailbox_size
        self.hub = EventHub()
        self._sink = sink
        self._watcher = watcher if watcher is not None else self.settings.watcher
        self.watcher: Any = None
        self._actors: dict[str, RunActor] = {}
        #: Business stops in progress or done: no dispatch of such a Run leaves (RUN-ACT-4).
        self.gate = DispatchGate()
        self._nursery: trio.Nursery | None = None
        self._stack: contextlib.AsyncExitStack | None = None
        self._closed = False

    @property
    def scope(self) -> str:
        """The scope whose writer this runtime uses (RUN-CMT-6)."""
        return str(self.writer.scope)

    @property
    def closed(self) -> bool:
        """True from the moment the runtime starts closing (``__aexit__``): requests
        then get RuntimeClosedError (RUN-ACT-3)."""
        return self._closed

    async def __aenter__(self) -> ActorRuntime:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            if self._watcher is None:
                from ..effect import open_watcher

                self.watcher = await stack.enter_async_context(open_watcher(self.executor))
            else:
                self.watcher = self._watcher
            self._nursery = await stack.enter_async_context(trio.open_nursery())
        except BaseException:
            await stack.aclose()
            raise
        self._stack = stack
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> bool | None:
        assert self._stack is not None and self._nursery is not None
        self._closed = True  # no new actor from here on (requests get RuntimeClosedError)
        for actor in [a for a in self._actors.values() if a.parked is not None]:
            actor.close_parked()  # no task to cancel: answer its drive here (RUN-ACT-3)
        self._nursery.cancel_scope.cancel()
        self.hub.close()
        try:
            return await self._stack.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if exc is None or not only_body_error(group, exc):
                raise
            return False  # RUN-ACT-10: the body's own error comes out as itself
        finally:
            _WRITERS_WITH_RUNTIME.discard(self.writer)

    # -- registry ------------------------------------------------------------------------

    def run(self, run_id: str, *, settings: Settings | None = None) -> RunHandle:
        """The handle of *run_id* (no actor is started until a request arrives)."""
        return RunHandle._create(self, run_id, settings or self.settings)

    def live_actors(self) -> frozenset[str]:
        """Run ids that have an actor now (the slot table; empty when idle, INV-43)."""
        return frozenset(self._actors)

    def statistics(self) -> tuple[ActorStatistics, ...]:
        """One ActorStatistics per live actor (mailbox depth, operations; INV-43)."""
        return tuple(a.statistics() for a in self._actors.values())

    def sink_for(self, sink: EventSink | None) -> EventSink | None:
        """The sink committed events go to: the hub, the runtime's sink and *sink*
        (§5.13)."""
        return tee(self.hub, self._sink, sink)

    def progress_sink_for(self, run_id: str, sink: EventSink | None) -> EventSink | None:
        """Where provisional progress goes: None when nobody listens (no relay task)."""
        if not self.reports_progress:
            return None
        hub = self.hub if self.hub.has_subscribers(run_id) else None
        return tee(hub, self._sink, sink)

    def _actor(self, run_id: str) -> RunActor:
        actor = self._actors.get(run_id)
        if actor is None:
            if self._nursery is None or self._closed:
                raise RuntimeClosedError("the runtime is not open", run_id=run_id)
            actor = RunActor(self, run_id, self.mailbox_size)
            self._nursery.start_soon(actor.main, name=f"run-actor:{run_id}")
            self._actors[run_id] = actor  # registered only once it has a task (INV-43)
        return actor

    async def cancel_run(self, run_id: str, command_id: str) -> CommitResult:
        """Stop *run_id* for business reasons (run-protocol §5.9; RUN-LOP-2, RUN-ACT-4).

        Commits ``CancelRun("cancelled")`` under *command_id* (a repeat replays), then
        cancels at the executor every effect the Run had EXECUTING (the ones CancelRun
        closed, and those this runtime's actor is waiting for) and tells a drive in
        progress: it stops waiting for their Outcomes after at most
        ``settings.drain_timeout`` seconds and returns FINISHED. After CancelRun is
        durable no attempt of the Run starts: every later start barrier is refused, and
        the Run's dispatch gate (``runtime/_gate.py``) is closed *before* the commit, so
        a start committed earlier whose dispatch is still on its way (or a redispatch
        that loaded the Run earlier) is never sent, while a dispatch already sent has
        returned — its key known to the executor — before CancelRun is committed and the
        key cancelled (waiting at most ``drain_timeout``).

        Checkpoint: always. Cancellation: before the commit nothing is written; once
        committed, the executor cancels run shielded (at most ``settle_timeout``).
        Raises: RunNotFoundError, RunTerminalError (the Run already ended otherwise),
        OwnershipLostError, RuntimeClosedError (the runtime is closed or closing: nothing
        written), and the store's errors.
        """
        if self._closed:
            raise RuntimeClosedError("the runtime is closed", run_id=run_id)
        request = CommitRequest(0, envelope(run_id, command_id, C.CancelRun("cancelled")))
        # Close the Run's dispatch gate first: a start committed before CancelRun but not
        # yet sent is never sent, and a dispatch already sent has returned (so the
        # executor knows its key) before CancelRun is durable.
        await self.gate.close(run_id, self.settings.drain_timeout)
        try:
            result: CommitResult = await self.run_store.commit(request)
        except BaseException:
            self.gate.reopen(run_id)
            raise
        keys = {effect.AssignmentKey(self.scope, run_id, f.effect) for f in result.facts
                if isinstance(f, F.ToolCallFailed | F.ModelStepFailed) and f.effect}
        actor = self._actors.get(run_id)
        if actor is not None:
            keys.update(actor.in_flight)
        with trio.CancelScope(shield=True), trio.move_on_after(self.settings.settle_timeout):
            for key in sorted(keys, key=lambda k: k.effect):
                try:
                    await self.executor.cancel(key)
                except Exception:  # errors ignored (§5.9): the drive still stops
                    pass
        actor = self._actors.get(run_id)
        if actor is not None:
            actor.run_cancelled()
        return result

    async def deliver(self, outcome: Any, *, sink: EventSink | None = None) -> LoopResult:
        """Route *outcome* to its Run's actor by ``outcome.key.run_id`` (RUN-EXE-4)."""
        return await self.run(outcome.key.run_id).deliver(outcome, sink=sink)


class RunHandle:
    """The address of one Run's actor. Obtain it from :meth:`ActorRuntime.run`."""

    __slots__ = ("_runtime", "run_id", "settings")

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("RunHandle is obtained from ActorRuntime.run()")

    @classmethod
    def _create(cls, runtime: ActorRuntime, run_id: str, settings: Settings) -> RunHandle:
        self = object.__new__(cls)
        self._runtime = runtime
        self.run_id = run_id
        self.settings = settings
        return self

    _runtime: ActorRuntime
    run_id: str
    settings: Settings

    async def _enqueue(self, request: Request, *, driver: bool) -> RunActor:
        await trio.lowlevel.checkpoint_if_cancelled()  # already cancelled: nothing written
        actor = self._runtime._actor(self.run_id)
        if driver and actor.driver is not None and actor.driver.cancelled:
            # An abandoned drive still winding down (its caller went away; it cancels
            # and settles what it dispatched, RUN-ACT-2): wait for it, at most
            # ``drain_timeout``, rather than refuse this drive (simulator finding R3).
            abandoned = actor.driver
            with trio.move_on_after(self.settings.drain_timeout):
                await abandoned.done.wait()
            actor = self._runtime._actor(self.run_id)  # it may have retired meanwhile
        if driver:
            if actor.driver is not None:
                raise RunAlreadyRunningError("the Run already has a driver", run_id=self.run_id)
            actor.driver = request
        actor.operations += 1
        try:
            await actor.mailbox.put(request)
        except BaseException:
            actor.operations -= 1
            if actor.driver is request:
                actor.driver = None
            actor.mailbox.put_internal_nowait(POKE)  # let an idle actor retire
            raise
        return actor

    # drive() and advance() wait for their reply in their own frame (no helper coroutine
    # in between): a parked drive is one coroutine frame shallower.

    async def _abandon_driver_op(self, actor: RunActor, request: Request) -> None:
        """The caller of a drive/advance was cancelled: tell the actor, wait (shielded,
        at most ``drain_timeout``) for it to wind the operation down."""
        request.cancelled = True
        actor.mailbox.put_internal_nowait(POKE)
        with trio.CancelScope(shield=True):
            with trio.move_on_after(self.settings.drain_timeout):
                await request.done.wait()

    @staticmethod
    def _reply(request: Request) -> Any:
        if request.error is not None:
            raise request.error
        return request.value

    async def drive(self, builder: Any, *, sink: EventSink | None = None) -> LoopResult:
        """Drive the Run until it ends or needs something from outside (§5.9).

        Checkpoint: always. A drive started in an already-cancelled scope raises at once
        and writes nothing.
        Cancellation: the actor starts no further effect, cancels what it dispatched,
            settles their Outcomes (waiting shielded at most ``settings.drain_timeout``),
            then trio.Cancelled is re-raised — or, if the drive failed with an error of
            its own meanwhile, a BaseExceptionGroup of that error and the Cancelled
            (RUN-ACT-5: the error is never masked).
        Returns: FINISHED (with ``result``) or WAITING.
        Raises:
            RunAlreadyRunningError: another drive/advance of this Run is in progress (one
                whose caller went away is first waited for, at most ``drain_timeout``).
            DriveCancelledError: another task called :meth:`cancel_drive`.
            OwnershipLostError: another writer took over the scope; nothing more settles.
            PrepareStalledError, ModelUnavailableError, FrozenValueMissingError,
            DispatchUnknownError, read errors of the executor: see §5.9.
        """
        request = Request("drive", self.settings, sink=sink, builder=builder)
        actor = await self._enqueue(request, driver=True)
        try:
            await request.done.wait()
        except trio.Cancelled as cancelled:
            await self._abandon_driver_op(actor, request)
            error = _unmasked(cancelled, request)
            if error is cancelled:
                raise
            raise error from None
        return self._reply(request)  # type: ignore[no-any-return]

    async def start_drive(self, builder: Any, *, sink: EventSink | None = None
                          ) -> DriveTicket:
        """Queue a drive of the Run and return at once with its :class:`DriveTicket`;
        nobody has to wait for it, so a Run whose drive waits for Outcomes holds no task
        of the caller's (RUN-ACT-9). The drive behaves as :meth:`drive`'s.

        Checkpoint: always (it may wait for room in the mailbox). Cancellation: while
        waiting for room nothing is queued; once the ticket is returned the drive runs
        on, whatever happens to the caller (stop it with ``ticket.cancel()``).
        Raises: RunAlreadyRunningError (another drive/advance is in progress),
        RuntimeClosedError (the runtime is closed or closing).
        """
        request = Request("drive", self.settings, sink=sink, builder=builder)
        await self._enqueue(request, driver=True)
        return DriveTicket._create(self._runtime, self.run_id, request)

    async def advance(self, builder: Any, *, sink: EventSink | None = None) -> LoopResult:
        """Do what can be done now without waiting for an effect (§5.5).

        Returns WAITING, FINISHED or DISPATCHED (with the keys). Raises as :meth:`drive`.
        """
        request = Request("advance", self.settings, sink=sink, builder=builder)
        actor = await self._enqueue(request, driver=True)
        try:
            await request.done.wait()
        except trio.Cancelled as cancelled:
            await self._abandon_driver_op(actor, request)
            error = _unmasked(cancelled, request)
            if error is cancelled:
                raise
            raise error from None
        return self._reply(request)  # type: ignore[no-any-return]

    async def _settle_op(self, request: Request) -> Any:
        actor = await self._enqueue(request, driver=False)
        try:
            await request.done.wait()
        except trio.Cancelled as cancelled:
            if actor.mailbox.withdraw(request):
                # still queued, nothing done yet: withdraw it and return at once
                actor.operations -= 1
                actor.mailbox.put_internal_nowait(POKE)  # let an idle actor retire
                raise
            with trio.CancelScope(shield=True):
                with trio.move_on_after(self.settings.settle_timeout):
                    await request.done.wait()
            error = _unmasked(cancelled, request)
            if error is cancelled:
                raise
            raise error from None
        del actor
        return self._reply(request)

    async def deliver(self, outcome: Any, *, sink: EventSink | None = None) -> LoopResult:
        """Settle *outcome* on this Run's actor and report what happened (§5.8).

        Checkpoint: always, even when the mailbox has room.
        Cancellation: while waiting for a mailbox slot, nothing has been queued; a
            message still queued (the actor busy with another request) is withdrawn and
            Cancelled raised at once (RUN-ACT-3). Once the actor took the message, the
            settlement finishes shielded (at most
            ``settings.settle_timeout``) and then Cancelled is raised (in a group with
            the operation's own error, if it failed: RUN-ACT-5).
        Returns: DELIVERED, FINISHED, or DROPPED (late, duplicate, stale, unknown Run).
        Raises:
            OwnershipLostError: another runtime took over the session.
            FrozenValueMissingError: ``.result`` is the DELIVERED LoopResult (D-7).
        """
        return await self._settle_op(  # type: ignore[no-any-return]
            Request("deliver", self.settings, sink=sink, outcome=outcome))

    async def redispatch(self, key: Any) -> None:
        """Offer the Assignment of an EXECUTING target once more (§5.10).

        Raises: EffectNotExecutingError, FrozenValueMissingError, dispatch errors.
        """
        await self._settle_op(Request("redispatch", self.settings, key=key))

    def cancel_drive(self) -> None:
        """Stop the current drive from another task; it raises DriveCancelledError.

        Synchronous, not a checkpoint; does nothing when no drive is in progress.
        """
        actor = self._runtime._actors.get(self.run_id)
        if actor is not None and actor.driver is not None:
            actor.driver.cancelled = True
            actor.driver.by_cancel_drive = True
            actor.mailbox.put_internal_nowait(POKE)


class DriveTicket:
    """A drive started by :meth:`RunHandle.start_drive` (RUN-ACT-9): holds its request
    and, once answered, its result or error. Holding a ticket costs no task."""

    __slots__ = ("_request", "_runtime", "run_id")

    def __init__(self, *_: Any, **__: Any) -> None:
        raise TypeError("DriveTicket is obtained from RunHandle.start_drive()")

    _request: Request
    _runtime: ActorRuntime
    run_id: str

    @classmethod
    def _create(cls, runtime: ActorRuntime, run_id: str, request: Request) -> DriveTicket:
        self = object.__new__(cls)
        self._runtime = runtime
        self.run_id = run_id
        self._request = request
        return self

    @property
    def done(self) -> bool:
        """True once the drive ended (result or error). Not a checkpoint."""
        return self._request.done.is_set()

    def result(self) -> LoopResult:
        """The drive's LoopResult (FINISHED or WAITING), or raise its error (as
        :meth:`RunHandle.drive` would). Not a checkpoint.

        Raises: trio.WouldBlock while the drive is still in progress; else what
        :meth:`RunHandle.drive` raises.
        """
        if not self._request.done.is_set():
            raise trio.WouldBlock("the drive is still in progress")
        return RunHandle._reply(self._request)  # type: ignore[no-any-return]

    async def wait(self) -> LoopResult:
        """Wait for the drive to end and return :meth:`result`. Checkpoint: always.

        Cancellation: only the waiting stops; the drive goes on (``cancel()`` stops it).
        """
        await self._request.done.wait()
        return self.result()

    def cancel(self) -> None:
        """Stop this drive (it ends with DriveCancelledError, like
        :meth:`RunHandle.cancel_drive`); nothing if it already ended. Synchronous, not a
        checkpoint."""
        request = self._request
        if request.done.is_set():
            return
        request.cancelled = True
        request.by_cancel_drive = True
        actor = self._runtime._actors.get(self.run_id)
        if actor is not None:
            actor.mailbox.put_internal_nowait(POKE)
