"""Progress frames: provisional, generation-scoped streams per key (spec §6.8; RUN-EXE-12)."""

from __future__ import annotations

import enum

import attrs

from ._assignment import AssignmentKey
from ._validators import any_str, non_negative_int

__all__ = ["ProgressKind", "ProgressFrame", "DEFAULT_PROGRESS_RING"]

#: Frames an executor keeps per key before the oldest ones drop out (spec §6.8).
DEFAULT_PROGRESS_RING = 256


class ProgressKind(enum.Enum):
    """Kind of one progress frame.

    ``RESET`` starts a new generation and voids every earlier frame of the key; ``END``
    closes the stream (the execution settled).
    """

    MODEL_TEXT_DELTA = "model_text_delta"
    MODEL_REASONING_DELTA = "model_reasoning_delta"
    TOOL_PROGRESS = "tool_progress"
    RESET = "reset"
    END = "end"


@attrs.frozen(kw_only=True)
class ProgressFrame:
    """One provisional progress frame (RUN-EXE-12).

    ``generation`` counts restarts of the execution (0 for the first run); ``sequence``
    starts at 1 inside each generation, so a gap in it shows dropped frames. ``payload``
    is canonical JSON text.
    """

    key: AssignmentKey = attrs.field(validator=attrs.validators.instance_of(AssignmentKey))
    generation: int = attrs.field(validator=non_negative_int)
    sequence: int = attrs.field(validator=non_negative_int)
    kind: ProgressKind = attrs.field(validator=attrs.validators.instance_of(ProgressKind))
    payload: str = attrs.field(default="{}", validator=any_str)
