"""Loop results (spec §5.3)."""

from __future__ import annotations

import enum
from typing import Any

import attrs

from ..protocol.values import RunResult

__all__ = ["LoopDisposition", "LoopResult", "EXECUTION_RECOVERY"]

EXECUTION_RECOVERY = "execution_recovery"


class LoopDisposition(enum.Enum):
    WAITING = "waiting"
    FINISHED = "finished"
    DISPATCHED = "dispatched"
    DELIVERED = "delivered"
    DROPPED = "dropped"


def _tuple(value: Any) -> tuple[Any, ...]:
    return tuple(value)


@attrs.frozen(kw_only=True)
class LoopResult:
    """What a loop operation ended with. ``result`` is set when FINISHED; ``dispatched``
    when DISPATCHED; ``execution_recovery`` when WAITING on an effect nobody will start."""

    disposition: LoopDisposition
    reason: str = ""
    execution_recovery: bool = False
    result: RunResult | None = None
    dispatched: tuple[Any, ...] = attrs.field(default=(), converter=_tuple)
