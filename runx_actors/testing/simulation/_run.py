"""Running schedules: one (:func:`run_schedule`), many (:func:`explore`), shrinking a
failing one (:func:`shrink`) and the replay string (:class:`Schedule`)."""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import trio
import trio.testing

from ...protocol.errors import ValidationError
from ._control import Choices, PCTChoices, RandomChoices, ReplayChoices, Step
from ._oracle import Violation
from ._world import Config, UnknownFaultError, World, parse_only, temp_sqlite_path

__all__ = ["Schedule", "Result", "run_schedule", "explore", "shrink", "STRATEGIES",
           "ScheduleFormatError", "Exploration"]

STRATEGIES = ("random", "pct", "exhaustive")


class ScheduleFormatError(ValidationError):
    """A replay string that does not parse (``runx-actors simulate --replay``)."""


@attrs.frozen
class Schedule:
    """A schedule: the world's configuration and the decisions made, in order.

    Text form (``str(schedule)``, accepted by :meth:`parse` and ``--replay``)::

        v1/<store>/seed=<int>/runs=<int>/steps=<int>/faults=<0|1>[/only=<kinds>]/<choices>

    where ``<choices>`` is a comma list of ints, ``v*k`` meaning *k* times *v* (``-``
    for none).
    """

    config: Config
    choices: tuple[int, ...]

    def __str__(self) -> str:
        c = self.config
        only = f"only={c.only}/" if c.only else ""
        return (f"v1/{c.store}/seed={c.seed}/runs={c.runs}/steps={c.steps}/"
                f"faults={int(c.faults)}/{only}{_encode(self.choices)}")

    @classmethod
    def parse(cls, text: str) -> Schedule:
        """Raises ScheduleFormatError for anything but the text form above."""
        parts = text.strip().split("/")
        only = ""
        if len(parts) == 8 and parts[6].startswith("only="):
            only = parts.pop(6)[5:]
            try:
                parse_only(only, empty_is_all=False)  # "only=" with nothing is no list
            except UnknownFaultError as exc:
                raise ScheduleFormatError(f"only=: {exc}") from None
        if len(parts) != 7 or parts[0] != "v1" or parts[1] not in ("memory", "sqlite"):
            raise ScheduleFormatError(f"not a v1 schedule: {text[:80]!r}")
        fields: dict[str, int] = {}
        for part, name in zip(parts[2:6], ("seed", "runs", "steps", "faults"), strict=True):
            key, _, value = part.partition("=")
            if key != name or not value.isdigit() or len(value) > 12:
                raise ScheduleFormatError(f"bad field {part!r} (want {name}=<int>)")
            fields[name] = int(value)
        if not 1 <= fields["runs"] <= 64 or not 1 <= fields["steps"] <= 100_000 \
                or fields["faults"] not in (0, 1):
            raise ScheduleFormatError("runs, steps or faults out of range")
        config = Config(seed=fields["seed"], store=parts[1], runs=fields["runs"],
                        steps=fields["steps"], faults=bool(fields["faults"]), only=only)
        return cls(config, _decode(parts[6]))


def _encode(values: Sequence[int]) -> str:
    out: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j < len(values) and values[j] == values[i]:
            j += 1
        out.append(str(values[i]) if j - i == 1 else f"{values[i]}*{j - i}")
        i = j
    return ",".join(out) or "-"


def _decode(text: str) -> tuple[int, ...]:
    if text == "-":
        return ()
    out: list[int] = []
    if len(text) > 1_000_000:
        raise ScheduleFormatError("choices too long")
    for item in text.split(","):
        value, _, times = item.partition("*")
        if not value.isdigit() or (times and not times.isdigit()) or len(value) > 6:
            raise ScheduleFormatError(f"bad choice {item!r}")
        n = int(times) if times else 1
        if n > 1_000_000 or len(out) + n > 1_000_000:
            raise ScheduleFormatError("choices too long")
        out.extend([int(value)] * n)
    return tuple(out)


@attrs.frozen
class Result:
    """What one schedule did."""

    schedule: Schedule
    violations: tuple[Violation, ...]
    trace: tuple[Step, ...]
    steps: int
    faults: int
    stats: dict[str, int]
    arity: tuple[int, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.violations

    def signature(self) -> frozenset[str]:
        return frozenset(v.invariant for v in self.violations)


def _trio_seed(seed: int) -> None:
    """Seed trio's run-queue tie-breaker so a schedule replays exactly (it is otherwise
    drawn from an unseeded module-level Random)."""
    from trio._core import _run

    _run._r.seed(seed)


def run_schedule(config: Config, choices: Choices, *,
                 make_store: Callable[[], Any] | None = None) -> Result:
    """Run one world under *choices* to the end (synchronous: its own ``trio.run``).

    *make_store* replaces the memory store's class (tests hand in deliberately broken
    stores to see the oracles fire)."""
    with _sqlite_path(config) as path:
        world = World(config, choices, path=path, make_store=make_store)
        clock = trio.testing.MockClock()
        _trio_seed(config.seed)
        trio.run(world.main, clock, clock=clock)
    arity = tuple(choices.arity) if isinstance(choices, ReplayChoices) else ()
    # trailing zeros are implied (a replay decides 0 past the end of its schedule)
    return Result(Schedule(config, _trim(tuple(choices.record))), tuple(world.obs.violations),
                  tuple(world.ctl.trace), world.ctl.steps, world.ctl.faults_used,
                  dict(world.stats), arity)


@contextlib.contextmanager
def _sqlite_path(config: Config) -> Iterator[Any]:
    if config.store != "sqlite":
        yield None
        return
    tmp, path = temp_sqlite_path()
    with tmp:
        yield path


def replay(schedule: Schedule) -> Result:
    """Run *schedule* exactly again."""
    return run_schedule(schedule.config, ReplayChoices(schedule.choices))


def choices_for(strategy: str, seed: int, config: Config) -> Choices:
    rate = config.fault_rate if config.faults else 0.0
    if strategy == "random":
        return RandomChoices(seed, rate)
    if strategy == "pct":
        return PCTChoices(seed, rate, horizon=config.steps)
    raise ValidationError(f"unknown strategy {strategy!r}")


def shrink(result: Result, *, budget: int = 150,
           keep: Callable[[Result], bool] | None = None) -> Result:
    """Delta-debug *result*'s choices: drop chunks, zero values, cut the tail, keeping
    every schedule that still breaks one of the same invariants. At most *budget* reruns.
    """
    target = result.signature()

    def still(r: Result) -> bool:
        if keep is not None:
            return keep(r)
        return bool(r.signature() & target)

    best = result
    runs = 0

    def attempt(values: tuple[int, ...]) -> bool:
        nonlocal best, runs
        if runs >= budget:
            return False
        runs += 1
        r = replay(Schedule(best.schedule.config, values))
        if not r.ok and still(r):
            # the record is the schedule actually taken (past the end: all 0)
            best = attrs.evolve(r, schedule=Schedule(r.schedule.config,
                                                     _trim(r.schedule.choices)))
            return True
        return False

    # 1. the shortest prefix that fails (binary search on the cut)
    values = best.schedule.choices
    lo, hi = 0, len(values)
    while lo < hi and runs < budget:
        mid = (lo + hi) // 2
        if attempt(values[:mid]):
            hi = min(mid, len(best.schedule.choices))
            values = best.schedule.choices
        else:
            lo = mid + 1
    # 2. remove chunks, then zero single values
    chunk = max(len(best.schedule.choices) // 4, 1)
    while chunk >= 1 and runs < budget:
        i = 0
        changed = False
        while i < len(best.schedule.choices) and runs < budget:
            v = best.schedule.choices
            if any(v[i:i + chunk]) and attempt(v[:i] + (0,) * len(v[i:i + chunk])
                                                 + v[i + chunk:]):
                changed = True
            elif attempt(v[:i] + v[i + chunk:]):
                changed = True
                continue
            i += chunk
        if not changed:
            chunk //= 2
    return best


def _trim(values: tuple[int, ...]) -> tuple[int, ...]:
    end = len(values)
    while end and values[end - 1] == 0:
        end -= 1
    return values[:end]


@attrs.define
class Exploration:
    """What :func:`explore` did."""

    schedules: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0  # process CPU time (all threads): the figure a loaded box keeps
    failures: list[Result] = attrs.Factory(list)
    by_invariant: dict[str, int] = attrs.Factory(dict)
    steps: int = 0
    faults: int = 0


def explore(config: Config, *, strategy: str, seeds: Sequence[int],
            stop_at_first: bool = False,
            on_result: Callable[[Result], None] | None = None) -> Exploration:
    """Run one schedule per seed with *strategy* (``exhaustive``: *seeds* bounds how
    many schedules of the depth-first enumeration of choice prefixes run)."""
    if strategy not in STRATEGIES:
        raise ValidationError(f"unknown strategy {strategy!r}")
    out = Exploration()
    started = time.perf_counter()
    cpu = time.process_time()

    def take(r: Result) -> bool:
        out.schedules += 1
        out.steps += r.steps
        out.faults += r.faults
        if on_result is not None:
            on_result(r)
        if not r.ok:
            out.failures.append(r)
            for inv in r.signature():
                out.by_invariant[inv] = out.by_invariant.get(inv, 0) + 1
            return stop_at_first
        return False

    if strategy == "exhaustive":
        for r in _exhaustive(config, limit=len(seeds)):
            if take(r):
                break
    else:
        for seed in seeds:
            cfg = attrs.evolve(config, seed=seed)
            if take(run_schedule(cfg, choices_for(strategy, seed, cfg))):
                break
    out.seconds = time.perf_counter() - started
    out.cpu_seconds = time.process_time() - cpu
    return out


def _exhaustive(config: Config, *, limit: int, depth: int = 24) -> Iterator[Result]:
    """Depth-first enumeration of the first *depth* decisions (the rest default to 0):
    every alternative of every decision in the bounded prefix, up to *limit* schedules."""
    prefix: list[int] = []
    for _ in range(limit):
        r = run_schedule(config, ReplayChoices(prefix))
        yield r
        arity = list(r.arity[:depth])
        taken = list(r.schedule.choices[:depth])
        taken += [0] * (len(arity) - len(taken))  # the trimmed trailing zeros
        # next prefix: bump the deepest decision that still has an untried alternative
        while taken:
            i = len(taken) - 1
            if taken[i] + 1 < arity[i]:
                taken[i] += 1
                break
            taken.pop()
            arity.pop()
        if not taken:
            return
        prefix = taken


def seeds_from(start: int, count: int) -> list[int]:
    return list(range(start, start + count))


def random_seed() -> int:
    return random.SystemRandom().randrange(1 << 31)
