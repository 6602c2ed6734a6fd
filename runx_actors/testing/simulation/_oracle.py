"""The oracles: what the simulator checks, derived from what the wrappers observed.

Nothing here calls the runtime. The log invariants read the wrapped store's *inner* store
directly and fold with the pure core (``fold_run``), which the spec's model checker
verifies on its own; the contract clauses are judged from the wrappers' records
(commits with the writer's epoch, attempt starts, the requests the application made and
what they returned, the faults injected and where).

Invariant names (the ``invariant`` of a :class:`Violation`):

``fold==projection``  the store's projection (``load``) equals the fold of the Run's log.
``one-start``         at most one start fact per effect id in a Run's log.
``fenced-commit``     no commit is accepted from a writer whose epoch was superseded.
``isolation``         a Run's fault never escapes into the runtime or changes another Run.
``typed-error``       every request ends with a result or a library error (RunxError).
``answered``          every request is answered within drain_timeout when the runtime
                      closes, the actor stops or the Run is cancelled.
``cancel-reaches-work``  after CancelRun is durable no attempt/dispatch of the Run starts,
                      and a running attempt of it is stopped within drain_timeout.
``not-masked``        a caller cancelled while its request failed sees the failure.
``transient-not-final``  the Reconciler never gives up because of a transient condition
                      (the runtime it routes redispatches to being closed).
``no-crash-loop``     a Run whose next action fails the same way every time is parked or
                      failed after a bounded number of tries (across restarts too).
``bounded-time``      a Run whose model misbehaves forever still ends (step bound).
``liveness``          once faults stop, every Run ends or waits for the application.
"""

from __future__ import annotations

from collections import Counter
from typing import TYPE_CHECKING, Any

import attrs
import trio

from ...protocol import facts as F
from ...protocol.commit import CommitRequest, CommitResult, fold_run
from ...protocol.errors import CommandRefusedError, OwnershipLostError, RunxError
from ._wrappers import BuilderFailed, CheckExploded, SimulatedFault

if TYPE_CHECKING:
    from ._world import World

__all__ = ["Violation", "Observer", "INVARIANTS"]

INVARIANTS = ("fold==projection", "one-start", "fenced-commit", "isolation", "typed-error",
              "answered", "cancel-reaches-work", "not-masked", "transient-not-final",
              "no-crash-loop", "bounded-time", "liveness")


@attrs.frozen
class Violation:
    """One broken invariant: which, on which Run, at which step and mock time."""

    invariant: str
    run_id: str
    message: str
    step: int
    time: float

    def to_dict(self) -> dict[str, Any]:
        return {"invariant": self.invariant, "run_id": self.run_id, "message": self.message,
                "step": self.step, "time": self.time}


class Observer:
    """Collects observations and violations of one world."""

    def __init__(self, world: World) -> None:
        self.world = world
        self.violations: list[Violation] = []
        self.max_epoch = 0
        self.faulted: Counter[str] = Counter()  # run_id -> faults injected into it
        self.cancel_durable: dict[str, float] = {}
        self.running_attempts: dict[str, int] = Counter()
        self.attempts: Counter[str] = Counter()
        self.model_calls: Counter[str] = Counter()
        self.world_fault_at: float | None = None
        self.given_up_transient: set[Any] = set()

    # -- recording ------------------------------------------------------------------------

    def violate(self, invariant: str, run_id: str, message: str) -> None:
        step = self.world.ctl.steps
        if any(v.invariant == invariant and v.run_id == run_id for v in self.violations):
            return  # one report per invariant and Run is enough
        now = _now()
        self.violations.append(Violation(invariant, run_id, message, step, now))
        self.world.ctl.note(f"VIOLATION {invariant} {run_id}: {message}")

    def note(self, text: str) -> None:
        self.world.ctl.note(text)

    def injected(self, run_id: str, fault: str) -> None:
        self.faulted[run_id] += 1
        self.note(f"fault {fault} -> {run_id or 'world'}")

    def opened(self, epoch: int) -> None:
        self.max_epoch = max(self.max_epoch, epoch)

    # -- store ----------------------------------------------------------------------------

    async def committed(self, writer: Any, request: CommitRequest,
                        result: CommitResult) -> None:
        run_id = str(request.envelope.run_id)
        if writer.epoch < self.max_epoch:
            self.violate("fenced-commit", run_id,
                         f"{type(request.envelope.command).__name__} accepted from epoch "
                         f"{writer.epoch} after epoch {self.max_epoch} opened the scope")
        if type(request.envelope.command).__name__ == "CancelRun":
            pass  # durable only once the application is answered (see World.cancel)
        await self.check_log(writer, run_id)

    def commit_refused(self, writer: Any, request: CommitRequest, exc: BaseException) -> None:
        if isinstance(exc, OwnershipLostError) and writer.epoch >= self.max_epoch:
            self.note(f"ownership lost at current epoch {writer.epoch}")

    async def check_log(self, writer: Any, run_id: str) -> None:
        """fold == projection and one start per effect, read from the inner store."""
        inner = writer.inner
        async with self.world.ctl.real_operation():
            facts = tuple(await inner.run_facts(run_id))
            loaded = await inner.run_store().load(run_id)
        try:
            folded = fold_run(facts, run_id=run_id)
        except RunxError as exc:
            self.violate("fold==projection", run_id, f"the log does not fold: {exc}")
            return
        if folded != loaded.state:
            self.violate("fold==projection", run_id,
                         f"projection differs from the fold of {len(facts)} facts")
        starts = Counter(f.effect for f in facts
                         if isinstance(f, (F.ModelStepStarted, F.ToolCallStarted)))
        for effect_id, n in starts.items():
            if n > 1:
                self.violate("one-start", run_id, f"effect {effect_id} started {n} times")

    # -- executor -------------------------------------------------------------------------

    def dispatch(self, assignment: Any, *, redispatch: bool) -> None:
        """A dispatch after CancelRun: a redispatch breaks the clause at once; a start
        barrier's dispatch only if an attempt then starts (see :meth:`attempt_started`)."""
        run_id = str(assignment.run_id)
        at = self.cancel_durable.get(run_id)
        if at is None:
            return
        what = assignment.call_id[:6] or "the model step"
        if redispatch:
            self.violate("cancel-reaches-work", run_id,
                         f"redispatch of {what} at t={_now():.1f} after CancelRun was "
                         f"durable at t={at:.1f}")
        else:
            self.note(f"dispatch of {what} of {run_id} after CancelRun (decided before it)")

    def executor_cancel(self, key: Any) -> None:
        self.note(f"executor cancel {key.run_id}")

    def attempt_started(self, run_id: str, what: str) -> None:
        self.attempts[run_id] += 1
        at = self.cancel_durable.get(run_id)
        if at is not None:
            self.violate("cancel-reaches-work", run_id,
                         f"{what} attempt started at t={_now():.1f} after CancelRun was "
                         f"durable at t={at:.1f}")

    # -- requests -------------------------------------------------------------------------

    def request_error(self, run_id: str, what: str, exc: BaseException,
                      world_fault: bool) -> None:
        """A request of the application ended with *exc* (not Cancelled)."""
        if isinstance(exc, CheckExploded):
            self.violate("isolation", run_id,
                         f"{what}: the tool check's {type(exc).__name__} escaped "
                         f"executor.validate and ended the drive instead of becoming the "
                         f"call's typed failure (the call stays PENDING)")
            return
        if isinstance(exc, BuilderFailed):
            return  # the application's own builder error, handed back unchanged
        if isinstance(exc, SimulatedFaultTypes):
            if not self.faulted[run_id] and not world_fault:
                self.violate("isolation", run_id,
                             f"{what} failed with a fault injected into another Run: {exc!r}")
            return
        if not isinstance(exc, RunxError):
            self.violate("typed-error", run_id,
                         f"{what} raised {type(exc).__name__}: {exc} (not a library error)")
            return
        if not what.startswith("drive") or isinstance(exc, CommandRefusedError):
            return  # refusals (the Run ended, a conflict) are answers
        if not self.faulted[run_id] and not world_fault and not isinstance(
                exc, OwnershipLostError):
            self.violate("isolation", run_id,
                         f"{what} failed although no fault touched this Run: "
                         f"{type(exc).__name__}: {exc}")


def _now() -> float:
    try:
        return trio.current_time()
    except RuntimeError:
        return 0.0


SimulatedFaultTypes: tuple[type[BaseException], ...] = (SimulatedFault,)
