"""Systematic testing of the real runtime under a controlled scheduler (issue 9).

The real ``open_runtime`` / ``RunRuntime``, a real store (memory or SQLite) and the real
``LocalExecutor`` run under ``trio.testing.MockClock``; every store, executor, tool,
model, builder and application operation waits at a controlled point where a seeded
strategy (random walk, PCT, bounded exhaustive) picks the order and injects faults.
Oracles (:mod:`._oracle`) check the protocol invariants and the actor contract.

Entry points: :func:`run_schedule`, :func:`replay`, :func:`explore`, :func:`shrink`,
:class:`Schedule` (the replay string) and ``runx-actors simulate``.
"""

from ._control import PCTChoices as PCTChoices
from ._control import RandomChoices as RandomChoices
from ._control import ReplayChoices as ReplayChoices
from ._oracle import INVARIANTS as INVARIANTS
from ._oracle import Violation as Violation
from ._run import STRATEGIES as STRATEGIES
from ._run import Exploration as Exploration
from ._run import Result as Result
from ._run import Schedule as Schedule
from ._run import ScheduleFormatError as ScheduleFormatError
from ._run import choices_for as choices_for
from ._run import explore as explore
from ._run import replay as replay
from ._run import run_schedule as run_schedule
from ._run import shrink as shrink
from ._world import FAULT_KINDS as FAULT_KINDS
from ._world import Config as Config
from ._world import UnknownFaultError as UnknownFaultError

__all__ = ["PCTChoices", "RandomChoices", "ReplayChoices", "INVARIANTS", "Violation",
           "STRATEGIES", "Exploration", "Result", "Schedule", "ScheduleFormatError",
           "choices_for", "explore", "replay", "run_schedule", "shrink", "Config", "FAULT_KINDS",
           "UnknownFaultError"]
