"""``Trace``: a path through a model, from an initial state through labelled steps."""

from __future__ import annotations

from typing import Any, NamedTuple

import attrs

__all__ = ["Trace", "TraceStep"]


class TraceStep(NamedTuple):
    """One transition of a trace: the action's ``label`` and the ``state`` it led to."""

    label: str
    state: Any


def _steps(value: Any) -> tuple[TraceStep, ...]:
    return tuple(TraceStep(label, state) for label, state in value)


@attrs.frozen
class Trace:
    """An initial state followed by ``steps`` (``(label, state)`` pairs, in order).

    ``len(trace)`` is the number of steps (0 when the initial state itself is the point of
    interest); ``trace.states`` has ``len(trace) + 1`` entries.
    """

    initial: Any
    steps: tuple[TraceStep, ...] = attrs.field(default=(), converter=_steps)

    def __len__(self) -> int:
        return len(self.steps)

    @property
    def states(self) -> tuple[Any, ...]:
        """Every state of the path: ``(initial, steps[0].state, ...)``."""
        return (self.initial, *(step.state for step in self.steps))

    @property
    def labels(self) -> tuple[str, ...]:
        """The step labels, in order."""
        return tuple(step.label for step in self.steps)

    @property
    def final(self) -> Any:
        """The last state of the path (``initial`` for an empty trace)."""
        return self.steps[-1].state if self.steps else self.initial
