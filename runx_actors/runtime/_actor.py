"""RunActor: the single owner of one Run's loop operations (spec §5.1, §5.9).

The actor serves one message at a time. Driver operations (drive, advance) are exclusive
per Run; settlement operations (deliver, redispatch) queue in the bounded mailbox and are
served in order, also while a drive waits for Outcomes. The actor leaves the registry the
moment it is idle, with no checkpoint between the emptiness check and the removal
(INV-43).

A drive that waits for Outcomes with nothing queued *parks* (RUN-ACT-9): the actor's
task ends, the actor stays registered (the Run's one owner) holding only the drive's
small state (:class:`_Drive`) and its Watcher registrations, and the next message put in
its mailbox — an Outcome, a request, a cancel — starts the task again, which continues
the drive and takes the messages in mailbox order.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import attrs
import trio

from .. import effect
from ..effect._escape import stops_the_process
from ..protocol.errors import (
    DispatchUnknownError,
    DriveCancelledError,
    OwnershipLostError,
    RunAlreadyRunningError,
    RuntimeClosedError,
)
from ._events import Durability, Event, EventKind, EventSink, safe_emit
from ._loop import LoopContext, count_started
from ._mailbox import Latch, Mailbox, MailboxStatistics
from ._results import LoopDisposition, LoopResult
from ._settings import Settings

if TYPE_CHECKING:
    from ._runtime import ActorRuntime

__all__ = ["RunActor", "ActorStatistics", "Request"]

_log = logging.getLogger("runx_actors.runtime.actor")

#: Provisional event kind of each progress frame kind (spec §5.13); END closes a stream.
_PROGRESS_EVENT = {
    effect.ProgressKind.MODEL_TEXT_DELTA: EventKind.MODEL_TEXT_DELTA,
    effect.ProgressKind.MODEL_REASONING_DELTA: EventKind.MODEL_REASONING_DELTA,
    effect.ProgressKind.TOOL_PROGRESS: EventKind.TOOL_PROGRESS,
    effect.ProgressKind.RESET: EventKind.PROGRESS_RESET,
}


@attrs.define(eq=False)
class Request:
    """One external request and its one-shot reply."""

    kind: str  # "drive" | "advance" | "deliver" | "redispatch"
    settings: Settings
    sink: EventSink | None = None
    builder: Any = None
    outcome: Any = None
    key: Any = None
    cancelled: bool = False  # the caller went away, or cancel_drive() was called
    by_cancel_drive: bool = False
    done: Latch = attrs.Factory(Latch)
    value: Any = None
    error: BaseException | None = None

    def cancel_requested(self) -> bool:
        """``LoopContext.cancel_requested``: the caller went away or cancelled."""
        return self.cancelled


@attrs.frozen
class _OutcomeArrived:
    key: Any
    outcome: Any


@attrs.frozen
class _ReadFailed:
    key: Any
    error: BaseException


@attrs.frozen
class _Poke:
    pass


@attrs.frozen
class _RunCancelled:
    """CancelRun is durable (RUN-ACT-4): the drive cancels what it waits for and stops
    waiting after ``drain_timeout``."""


RUN_CANCELLED = _RunCancelled()


POKE = _Poke()


@attrs.frozen
class ActorStatistics:
    """Frozen snapshot of an actor: mailbox use, operations, keys in flight, and whether
    it is parked (its drive waits for Outcomes with no task of its own; RUN-ACT-9)."""

    run_id: str
    mailbox: MailboxStatistics
    operations: int
    driving: bool
    keys_in_flight: int
    parked: bool = False


#: ``RunActor.in_flight`` while nothing is in flight (shared, never mutated).
_NOTHING_IN_FLIGHT: dict[Any, Any] = {}


class RunActor:
    """The single owner of one Run's loop operations inside a ActorRuntime."""

    __slots__ = ("driver", "in_flight", "mailbox", "operations", "parked", "run_id", "runtime")

    def __init__(self, runtime: ActorRuntime, run_id: str, mailbox_size: int) -> None:
        self.runtime = runtime
        self.run_id = run_id
        self.mailbox = Mailbox(mailbox_size)
        self.operations = 0  # requests queued or in progress
        self.driver: Request | None = None
        self.in_flight: dict[Any, Any] = _NOTHING_IN_FLIGHT
        #: The drive's state while the actor is parked (no task; RUN-ACT-9), else None.
        self.parked: _Drive | None = None

    def statistics(self) -> ActorStatistics:
        """A snapshot of the actor: mailbox, operations, driver, keys in flight, parked
        (RUN-ACT-9). Not a checkpoint."""
        return ActorStatistics(self.run_id, self.mailbox.statistics(), self.operations,
                               self.driver is not None, len(self.in_flight),
                               self.parked is not None)

    # -- lifetime --------------------------------------------------------------------------

    def _retire_if_idle(self) -> bool:
        """Leave the registry if idle. Synchronous: no checkpoint can split it (INV-43).

        Idle = no operation in progress and no request queued. Internal messages left
        over from a finished operation (a wake-up poke, an Outcome that arrived as the
        drive ended) are stale: nothing waits for them, so they are dropped rather than
        keeping the actor registered after its caller has been answered.
        """
        if self.operations == 0 and self.mailbox.external_empty():
            self.mailbox.clear_internal()
            if self.runtime._actors.get(self.run_id) is self:
                del self.runtime._actors[self.run_id]
            return True
        return False

    async def main(self) -> None:
        """The actor's task: serve messages until idle (retire) or parked (§4.10,
        RUN-ACT-9). A parked drive is continued first when the task starts again."""
        parked = False
        try:
            while True:
                drive = self.parked
                if drive is not None:
                    self.parked = None
                    parked = await self._drive_op(drive)
                    if parked:
                        return
                    continue
                if self._retire_if_idle():
                    return
                message = await self.mailbox.get()
                if isinstance(message, Request):
                    parked = await self._serve(message)
                    if parked:
                        return
                # internal messages outside a drive are stale: nothing waits for them
        finally:
            if parked:
                # the drive waits and nothing is queued: no task until a message arrives
                self.mailbox.sleeper = self
            else:
                if self.runtime._actors.get(self.run_id) is self:
                    del self.runtime._actors[self.run_id]
                self.mailbox.close()  # senders waiting for room raise RuntimeClosedError
                self._fail_queued()

    def wake(self) -> None:
        """A message arrived for a parked actor: start its task again (the Mailbox calls
        this once per park; not a checkpoint). Does nothing while the runtime closes:
        ``close_parked`` answers the parked drive then."""
        rt = self.runtime
        if rt._nursery is None or rt._closed or self.parked is None:
            return
        rt._nursery.start_soon(self.main, name=f"run-actor:{self.run_id}")

    def close_parked(self) -> None:
        """The runtime closes while this actor is parked: answer its drive (and anything
        queued) with RuntimeClosedError, drop its registrations, leave the registry
        (RUN-ACT-3). Synchronous, not a checkpoint."""
        drive, self.parked = self.parked, None
        self.mailbox.sleeper = None
        if drive is None:
            return
        self._end_drive(drive)
        request = drive.request
        request.error = RuntimeClosedError("the runtime closed during the request",
                                           run_id=self.run_id)
        self._answered(request)
        if self.runtime._actors.get(self.run_id) is self:
            del self.runtime._actors[self.run_id]
        self.mailbox.close()
        self._fail_queued()

    def _fail_queued(self) -> None:
        """Answer every queued request with RuntimeClosedError (RUN-ACT-3)."""
        while (message := self.mailbox.get_nowait()) is not None:
            if isinstance(message, Request) and not message.done.is_set():
                message.error = RuntimeClosedError("the runtime closed before the request "
                                                   "was served", run_id=self.run_id)
                message.done.set()

    # -- serving ---------------------------------------------------------------------------

    def context(self, request: Request) -> LoopContext:
        """The LoopContext one loop operation of *request* runs with (its settings,
        sink, the runtime's store, executor and dispatch gate)."""
        rt = self.runtime
        return LoopContext(
            store=rt.run_store, executor=rt.executor, run_id=self.run_id,
            settings=request.settings, sink=rt.sink_for(request.sink),
            started_tool_calls=self._started_tool_calls,
            run_facts=self._run_facts,
            cancel_requested=request.cancel_requested,
            gate=rt.gate,
            progress_sink=rt.progress_sink_for(self.run_id, request.sink),
            acknowledges=rt.acknowledges,
        )

    async def _run_facts(self) -> Any:
        return await self.runtime.writer.run_facts(self.run_id)

    async def _started_tool_calls(self) -> int:
        return count_started(await self.runtime.writer.run_facts(self.run_id))

    async def _serve(self, request: Request) -> bool:
        """Serve *request*; True when it is a drive that parked (not answered yet)."""
        if request.kind == "drive":
            return await self._drive_op(_Drive(request))
        try:
            ctx = self.context(request)
            if request.kind == "advance":
                request.value = await self._advance(request, ctx)
            elif request.kind == "deliver":
                request.value = await ctx.deliver(request.outcome)
            elif request.kind == "redispatch":
                await ctx.redispatch(request.key)
            else:  # pragma: no cover - handles build only these kinds
                raise ValueError(f"unknown request kind {request.kind!r}")
        except trio.Cancelled:
            # The runtime is shutting down (its nursery was cancelled). The Cancelled
            # belongs to the actor's scope, not to the caller's: hand the caller an
            # error of its own instead of a foreign Cancelled.
            request.error = self._closed_error()
            raise
        except BaseException as exc:
            if stops_the_process(exc):  # Ctrl-C, a group holding Cancelled: not the caller's
                raise
            # an Exception, or a SystemExit from the caller's own builder or sink: the
            # request's error, raised in the caller's task, never in another Run's
            request.error = exc
        finally:
            self._answered(request)
        return False

    async def _drive_op(self, drive: _Drive) -> bool:
        """Run (or continue) *drive* until it finishes — its request answered — or parks:
        True, the request still open, ``self.parked`` holding the drive's state."""
        request = drive.request
        parked = False
        try:
            result = await self._drive(drive, self.context(request))
            if result is None:
                parked = True
                self.parked = drive
            else:
                request.value = result
        except trio.Cancelled:
            request.error = self._closed_error()  # as in _serve
            raise
        except BaseException as exc:
            if stops_the_process(exc):  # as in _serve
                raise
            request.error = exc
        finally:
            if not parked:
                self._answered(request)
        return parked

    def _closed_error(self) -> RuntimeClosedError:
        return RuntimeClosedError("the runtime closed during the request",
                                  run_id=self.run_id)

    def _answered(self, request: Request) -> None:
        self.operations -= 1
        if self.driver is request:
            self.driver = None
        request.done.set()

    def run_cancelled(self) -> None:
        """Tell a drive in progress that CancelRun is durable (not a checkpoint)."""
        if self.driver is not None:
            self.mailbox.put_internal_nowait(RUN_CANCELLED)

    def _watch(self, key: Any) -> Any:
        # the actor is the Registration's Receiver: no bound method per watched key
        return self.runtime.watcher.watch_for(key, self)

    def outcome_arrived(self, outcome: effect.Outcome) -> None:
        """Receiver of the actor's Watcher registrations (``effect.Receiver``): queue
        the Outcome for the drive (internal mailbox path; not a checkpoint, never
        blocks). The Watcher hands a key only the Outcome of that very key."""
        self.mailbox.put_internal_nowait(_OutcomeArrived(outcome.key, outcome))

    def read_failed(self, key: effect.AssignmentKey, error: Exception) -> None:
        """Receiver of the actor's Watcher registrations: queue a definitive read error
        of *key* for the drive (not a checkpoint, never blocks)."""
        self.mailbox.put_internal_nowait(_ReadFailed(key, error))

    def _relay_progress(self, key: Any, ctx: LoopContext) -> trio.CancelScope | None:
        """Relay *key*'s progress frames to the drive's sink as provisional events
        (§5.9, §5.13), if the executor offers progress. Cancel the scope to stop."""
        executor = self.runtime.executor
        nursery = self.runtime._nursery
        if ctx.progress_sink is None or nursery is None:
            return None
        scope = trio.CancelScope()
        nursery.start_soon(_relay, executor, key, ctx.progress_sink, ctx.scope, scope,
                           name=f"run-progress:{key.effect}")
        return scope

    async def _cancel_at_executor(self, keys: Any) -> None:
        for key in tuple(keys):
            try:
                await self.runtime.executor.cancel(key)
            except Exception:  # errors ignored (§5.9)
                pass

    async def _advance(self, request: Request, ctx: LoopContext) -> LoopResult:
        try:
            result = await ctx.advance(request.builder)
        except OwnershipLostError:
            await self._cancel_at_executor(ctx.take_in_batch())
            raise
        except DispatchUnknownError:
            raise  # carries .dispatched: the caller owns those keys (D-4)
        except Exception:
            keys = ctx.take_in_batch()
            if keys:  # interrupted mid-batch: the caller never sees these keys
                await self._settle_pending(ctx, list(keys), cancel=False)
            raise
        if request.cancelled and result.disposition is LoopDisposition.DISPATCHED:
            # The caller will never receive these keys: cancel, await and settle them.
            await self._settle_pending(ctx, list(result.dispatched), cancel=True)
        return result

    async def _settle_pending(self, ctx: LoopContext, keys: list[Any], *, cancel: bool) -> None:
        pending = {k: self._watch(k) for k in keys}
        self.in_flight = pending
        try:
            if cancel:
                await self._cancel_at_executor(pending)
            fenced = False
            while pending:
                message = await self.mailbox.get()
                if isinstance(message, _OutcomeArrived) and message.key in pending:
                    del pending[message.key]
                    if not fenced:
                        try:
                            await ctx.deliver(message.outcome)
                        except OwnershipLostError:
                            fenced = True
                elif isinstance(message, _ReadFailed) and message.key in pending:
                    del pending[message.key]
                elif isinstance(message, Request):
                    await self._serve_during_drive(message)
        finally:
            for registration in pending.values():
                registration.cancel()
            self.in_flight = _NOTHING_IN_FLIGHT

    async def _serve_during_drive(self, message: Request) -> None:
        if message.kind in ("deliver", "redispatch"):
            await self._serve(message)
        else:  # a second driver (defensive: handles refuse it before queueing)
            message.error = RunAlreadyRunningError("the Run already has a driver",
                                                   run_id=self.run_id)
            self.operations -= 1
            message.done.set()

    def _watch_all(self, keys: Any, pending: dict[Any, Any], d: _Drive,
                   ctx: LoopContext) -> None:
        """Watch each of *keys* (dispatched effects) and relay its progress."""
        for key in keys:
            pending[key] = self._watch(key)
            relay = self._relay_progress(key, ctx)
            if relay is not None:
                d.relays = (*d.relays, relay)

    def _may_park(self, drive: _Drive) -> bool:
        """A drive parks only while it waits for Outcomes with nothing queued, no
        CancelRun deadline running, and the runtime open."""
        rt = self.runtime
        return (drive.stop_at is None and self.mailbox.empty() and not rt._closed
                and rt._nursery is not None)

    def _end_drive(self, drive: _Drive) -> None:
        """Drop what a finished (or abandoned) drive still holds."""
        for registration in self.in_flight.values():
            registration.cancel()
        for relay in drive.relays:
            relay.cancel()
        drive.relays = ()
        self.in_flight = _NOTHING_IN_FLIGHT

    async def _drive(self, d: _Drive, ctx: LoopContext) -> LoopResult | None:
        """The drive loop of §5.9: advance, watch, settle, until nothing more can happen.

        Returns None when the drive parks (RUN-ACT-9): it waits for Outcomes, nothing is
        queued, and its state is all in *d* and ``self.in_flight``; :meth:`main` ends the
        task and the next message starts it again, continuing here.
        """
        request = d.request
        if d.fresh:
            d.fresh = False
            self.in_flight = {}
        pending = self.in_flight
        parking = False
        try:
            while True:
                if request.cancelled and not d.cancelled:
                    d.cancelled = True
                    await self._cancel_at_executor(pending)
                if not pending:
                    if d.fenced is not None:
                        raise d.fenced
                    if d.deferred is not None:
                        raise d.deferred
                    if d.cancelled:
                        raise DriveCancelledError("the drive was cancelled", run_id=self.run_id)
                    try:
                        result = await ctx.advance(request.builder)
                    except DispatchUnknownError as exc:  # D-4
                        d.deferred = exc
                        keys = tuple(getattr(exc, "dispatched", ()))
                    except OwnershipLostError:
                        # fenced mid-batch: what already started is cancelled, never settled
                        await self._cancel_at_executor(ctx.take_in_batch())
                        raise
                    except Exception as exc:
                        # interrupted mid-batch: settle what really started, then raise
                        keys = ctx.take_in_batch()
                        if not keys:
                            raise
                        d.deferred = exc
                    else:
                        if result.disposition is not LoopDisposition.DISPATCHED:
                            if request.cancelled:
                                continue
                            return result
                        keys = result.dispatched
                    self._watch_all(keys, pending, d, ctx)
                    continue
                if d.stop_at is None:
                    if self._may_park(d):
                        parking = True  # keep the registrations and relays
                        return None
                    message = await self.mailbox.get()
                else:
                    message = None
                    with trio.move_on_at(d.stop_at):
                        message = await self.mailbox.get()
                    if message is None:
                        # The Run is over (CancelRun) and the executor did not answer
                        # within drain_timeout: stop waiting, the log already closed them.
                        for registration in pending.values():
                            registration.cancel()
                        pending.clear()
                        continue
                if isinstance(message, _RunCancelled):
                    if d.stop_at is None:
                        d.stop_at = trio.current_time() + ctx.settings.drain_timeout
                    await self._cancel_at_executor(pending)
                elif isinstance(message, _OutcomeArrived):
                    if message.key not in pending:
                        continue
                    del pending[message.key]
                    if d.fenced is not None:
                        continue  # drain without settling
                    # RUN-LOP-11: when the drive would advance right after this settlement
                    # (nothing else in flight), deliver fuses it with advance's next
                    # commits and dispatches what they started (errors as advance's)
                    fuse = (ctx.settings.fused_commits and not pending and d.deferred is None
                            and not request.cancelled and d.stop_at is None)
                    try:
                        result = await ctx.deliver(
                            message.outcome, request.builder if fuse else None)
                    except OwnershipLostError as exc:
                        d.fenced = exc
                        await self._cancel_at_executor([*pending, *ctx.take_in_batch()])
                        continue
                    except DispatchUnknownError as exc:  # D-4 (fused starts)
                        d.deferred = exc
                        self._watch_all(getattr(exc, "dispatched", ()), pending, d, ctx)
                        continue
                    except Exception as exc:
                        keys = ctx.take_in_batch()
                        if not keys:
                            raise
                        d.deferred = exc  # interrupted fused starts: settle them, then raise
                        self._watch_all(keys, pending, d, ctx)
                        continue
                    if result.disposition is LoopDisposition.FINISHED:
                        return result
                    self._watch_all(result.dispatched, pending, d, ctx)
                elif isinstance(message, _ReadFailed):
                    if message.key not in pending:
                        continue
                    if d.fenced is not None:
                        del pending[message.key]
                        continue
                    raise message.error
                elif isinstance(message, Request):
                    await self._serve_during_drive(message)
        finally:
            if not parking:
                self._end_drive(d)


class _Drive:
    """The state of one drive between messages (RUN-ACT-9): all a parked drive keeps.

    The keys it waits for are the actor's ``in_flight`` (key → Watcher registration);
    ``relays`` the cancel scopes of its progress relays; ``fenced`` / ``deferred`` the
    error to raise once nothing is in flight; ``stop_at`` the trio time CancelRun's
    drain ends (a drive never parks while it runs).
    """

    __slots__ = ("cancelled", "deferred", "fenced", "fresh", "relays", "request", "stop_at")

    def __init__(self, request: Request) -> None:
        self.request = request
        self.fresh = True
        self.cancelled = False
        self.fenced: OwnershipLostError | None = None
        self.deferred: Exception | None = None
        self.stop_at: float | None = None
        self.relays: tuple[trio.CancelScope, ...] = ()


async def _relay(executor: Any, key: Any, sink: EventSink, session: str,
                 scope: trio.CancelScope) -> None:
    """Emit *key*'s progress frames as provisional events until END or *scope* is
    cancelled. Provisional events carry no promise: any error just ends the relay."""
    with scope:
        try:
            async for frame in executor.progress(key):
                kind = _PROGRESS_EVENT.get(frame.kind)
                if kind is None:  # END: the stream is over
                    return
                safe_emit(sink, Event(
                    kind=kind, durability=Durability.PROVISIONAL, session=session,
                    run_id=key.run_id, effect=key.effect, generation=frame.generation,
                    sequence=frame.sequence, payload=frame.payload))
        except Exception as exc:
            _log.debug("progress relay of %r ended: %r", key, exc)
