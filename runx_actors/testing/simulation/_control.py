"""The controlled scheduler: every store / executor / tool / model / application operation
of a simulated world waits at a *point* until the scheduler releases it.

The scheduler runs as one task beside the world. It makes a choice only when the world is
quiescent (every task blocked, no real operation such as a SQLite thread call in flight):
which waiting point goes next, and which fault (if any) that point suffers. When nothing
waits it advances the ``MockClock`` to the next deadline itself (no autojump), so virtual
time moves only by the scheduler's decisions and a schedule replays exactly.

Every decision is one integer drawn from a :class:`Choices` source; the integers in order
are the *schedule*. Replaying a schedule feeds the same integers back (0 past its end: the
first waiting point, no fault), which is what the shrinker edits.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from typing import Any

import attrs
import trio
import trio.testing

__all__ = ["Choices", "RandomChoices", "PCTChoices", "ReplayChoices", "Controller", "Step",
           "StopWorld"]


#: Virtual seconds one released operation takes.
TICK = 0.01


class StopWorld(Exception):
    """Raised inside the world when the step or time bound is reached (not a finding by
    itself: the liveness oracle decides)."""


class Choices:
    """Where decisions come from. ``pick(n, kind, labels)`` returns an int in ``[0, n)``;
    ``record`` holds every value returned, in order (the schedule)."""

    def __init__(self) -> None:
        self.record: list[int] = []

    def _draw(self, n: int, kind: str, labels: Sequence[str]) -> int:
        raise NotImplementedError

    def pick(self, n: int, kind: str, labels: Sequence[str] = ()) -> int:
        value = self._draw(n, kind, labels) if n > 1 else 0
        value = min(max(value, 0), n - 1) if n > 0 else 0
        self.record.append(value)
        return value

    def faults_over(self) -> None:
        """The fault phase ended (strategies may change behaviour)."""


class RandomChoices(Choices):
    """Random walk: every waiting point equally likely; a fault with probability
    *fault_rate* at each point that offers some."""

    def __init__(self, seed: int, fault_rate: float) -> None:
        super().__init__()
        self.rng = random.Random(seed)
        self.fault_rate = fault_rate

    def _draw(self, n: int, kind: str, labels: Sequence[str]) -> int:
        if kind == "fault":
            if self.rng.random() >= self.fault_rate:
                return 0
            return 1 + self.rng.randrange(n - 1)
        return self.rng.randrange(n)


class PCTChoices(RandomChoices):
    """PCT priority scheduling (Burckhardt et al.): each actor (the part of a point's
    label before ``": "``) gets a random priority on first sight; the highest-priority
    waiting point runs; at *depth* - 1 random change points the running actor's priority
    drops below every other. Faults as in :class:`RandomChoices`."""

    def __init__(self, seed: int, fault_rate: float, *, depth: int = 3,
                 horizon: int = 400) -> None:
        super().__init__(seed, fault_rate)
        self.priority: dict[str, float] = {}
        self.changes = sorted(self.rng.randrange(max(horizon, 1)) for _ in range(depth - 1))
        self.low = 0.0
        self.steps = 0
        self.fair = False

    def faults_over(self) -> None:
        """The liveness phase needs a fair scheduler: PCT starves low priorities by
        design, so from here on it walks randomly."""
        self.fair = True

    def _draw(self, n: int, kind: str, labels: Sequence[str]) -> int:
        if kind == "fault" or self.fair:
            return super()._draw(n, kind, labels)
        actors = [label.split(": ", 1)[0] for label in labels]
        for actor in actors:
            if actor not in self.priority:
                self.priority[actor] = 1.0 + self.rng.random()
        best = max(range(n), key=lambda i: (self.priority[actors[i]], -i))
        self.steps += 1
        if self.changes and self.steps >= self.changes[0]:
            self.changes.pop(0)
            self.low -= 1.0
            self.priority[actors[best]] = self.low
        return best


class ReplayChoices(Choices):
    """Feed back a recorded schedule; past its end every decision is 0. ``arity`` holds
    the number of alternatives each decision had (the exhaustive explorer uses it)."""

    def __init__(self, values: Sequence[int]) -> None:
        super().__init__()
        self.values = list(values)
        self.arity: list[int] = []

    def _draw(self, n: int, kind: str, labels: Sequence[str]) -> int:
        i = len(self.record)
        return self.values[i] if i < len(self.values) else 0

    def pick(self, n: int, kind: str, labels: Sequence[str] = ()) -> int:
        self.arity.append(max(n, 1))
        return super().pick(n, kind, labels)


@attrs.define
class Step:
    """One released point (the trace)."""

    index: int
    time: float
    label: str
    fault: str = ""


@attrs.define(eq=False)
class _Point:
    label: str
    faults: tuple[str, ...]
    serial: int
    go: trio.Event = attrs.Factory(trio.Event)
    fault: str = ""


class Controller:
    """The scheduler of one world. ``await point(label, faults)`` from inside the world;
    ``await run(clock)`` as a task beside it.

    * ``max_steps``: released points before :attr:`exhausted` is set.
    * ``fault_steps``: faults are offered only to the first *fault_steps* steps (after
      that the world is fault-free: the liveness phase).
    """

    def __init__(self, choices: Choices, *, max_steps: int, fault_steps: int,
                 faults: bool = True, allows: Callable[[str], bool] | None = None) -> None:
        self._allows = allows
        self.choices = choices
        self.max_steps = max_steps
        self.fault_steps = fault_steps if faults else 0
        self.pending: list[_Point] = []
        self.busy = 0
        self._idle = trio.Event()
        self._idle.set()
        self.trace: list[Step] = []
        self.exhausted = trio.Event()
        self.finished = False
        self.stalled = trio.Event()
        self.on_step: Callable[[Step], None] | None = None
        self._serial = 0
        self.faults_used = 0
        self.steps = 0

    @property
    def faulting(self) -> bool:
        return self.steps < self.fault_steps

    def extend(self, steps: int) -> None:
        """Allow *steps* more released points from now (a new phase's bound)."""
        self.max_steps = self.steps + steps
        self.exhausted = trio.Event()

    def note(self, label: str) -> None:
        """Record an observation in the trace (not a decision)."""
        self.trace.append(Step(len(self.trace), trio.current_time(), label, "note"))

    async def point(self, label: str, faults: Sequence[str] = ()) -> str:
        """Wait until the scheduler releases this point; return the injected fault ("" for
        none). Cancellation while waiting: the point is withdrawn."""
        self._serial += 1
        offered = tuple(f for f in faults if self._allows is None or self._allows(f))
        p = _Point(label, offered if self.faulting else (), self._serial)
        self.pending.append(p)
        try:
            await p.go.wait()
        except BaseException:
            if p in self.pending:
                self.pending.remove(p)
            raise
        return p.fault

    def real_operation(self) -> _Busy:
        """``async with controller.real_operation():`` around an operation that may
        leave the trio loop (a SQLite thread call): no choice is made until it is over."""
        return _Busy(self)

    async def run(self, clock: trio.testing.MockClock) -> None:
        """Release points one at a time until cancelled."""
        while True:
            await trio.testing.wait_all_tasks_blocked()
            if self.busy:
                await self._idle.wait()
                continue
            if self.pending:
                # every operation costs TICK seconds: timers fire even while some task
                # keeps the world busy (a livelocked Run must not freeze the clock)
                clock.jump(TICK)
                self._release()
                continue
            dt = trio.lowlevel.current_statistics().seconds_to_next_deadline
            if math.isinf(dt):
                self.stalled.set()
                await trio.sleep_forever()
            clock.jump(max(dt, 0.0))

    def _release(self) -> None:
        self.pending.sort(key=lambda p: (p.label, p.serial))
        labels = [p.label for p in self.pending]
        i = self.choices.pick(len(labels), "order", labels)
        p = self.pending.pop(i)
        if p.faults and self.faulting:
            f = self.choices.pick(len(p.faults) + 1, "fault", p.faults)
            p.fault = p.faults[f - 1] if f else ""
            if p.fault:
                self.faults_used += 1
        self.steps += 1
        step = Step(len(self.trace), trio.current_time(), p.label, p.fault)
        self.trace.append(step)
        if self.on_step is not None:
            self.on_step(step)
        if self.steps >= self.fault_steps:
            self.choices.faults_over()
        if self.steps >= self.max_steps:
            self.exhausted.set()
        p.go.set()


class _Busy:
    def __init__(self, controller: Controller) -> None:
        self._c = controller

    async def __aenter__(self) -> None:
        self._c.busy += 1
        self._c._idle = trio.Event()

    async def __aexit__(self, *exc: Any) -> None:
        self._c.busy -= 1
        if self._c.busy == 0:
            self._c._idle.set()
