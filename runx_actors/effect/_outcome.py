"""Outcomes: the executor's single authoritative answer per key (spec §6.5; RUN-EXE-2).

Import the module, not the names: ``effect.Cancelled`` and ``effect.Unknown`` must never
meet ``trio.Cancelled``. No outcome kind holds an exception object.
"""

from __future__ import annotations

from typing import Any, TypeAlias

import attrs

from ..protocol.errors import ValidationError
from ..protocol.values import ModelResult, ToolResult
from ._assignment import AssignmentKey
from ._failure import FailureCode, RetryDisposition, ToolFailure
from ._status import ExecutionStatus
from ._validators import any_str

__all__ = [
    "ModelSucceeded",
    "ModelFailed",
    "ToolExecutionSucceeded",
    "ToolExecutionFailed",
    "ToolExecutionUnknown",
    "Cancelled",
    "Unknown",
    "OutcomeResult",
    "OUTCOME_RESULT_TYPES",
    "Outcome",
]


@attrs.frozen
class ModelSucceeded:
    """The model answered; ``result`` is frozen-able (else it is ModelFailed(MALFORMED_RESULT))."""

    result: ModelResult = attrs.field(validator=attrs.validators.instance_of(ModelResult))


@attrs.frozen
class ModelFailed:
    """The model execution failed with ``code`` (RUN-EXE-11)."""

    code: FailureCode = attrs.field(validator=attrs.validators.instance_of(FailureCode))
    message: str = attrs.field(default="", validator=any_str)


@attrs.frozen
class ToolExecutionSucceeded:
    """The tool finished; ``result.output`` is canonical JSON text."""

    result: ToolResult = attrs.field(validator=attrs.validators.instance_of(ToolResult))


@attrs.frozen
class ToolExecutionFailed:
    """The tool failed in a *known* way (a KNOWN failure for the Run); ``retry`` says
    whether a repeat is safe (RUN-EXE-11)."""

    failure: ToolFailure = attrs.field(validator=attrs.validators.instance_of(ToolFailure))
    retry: RetryDisposition = attrs.field(
        default=RetryDisposition.UNKNOWN,
        validator=attrs.validators.instance_of(RetryDisposition))


@attrs.frozen
class ToolExecutionUnknown:
    """The tool may or may not have had its effect (an UNKNOWN failure for the Run)."""

    failure: ToolFailure = attrs.field(validator=attrs.validators.instance_of(ToolFailure))


@attrs.frozen
class Cancelled:
    """The execution stopped as asked (``cancel``). Not ``trio.Cancelled``."""

    message: str = attrs.field(default="", validator=any_str)


@attrs.frozen
class Unknown:
    """The executor closed its recovery with no answer from the provider (for example
    after ``dispose`` or a failed re-adoption)."""

    message: str = attrs.field(default="", validator=any_str)


OutcomeResult: TypeAlias = (
    ModelSucceeded | ModelFailed | ToolExecutionSucceeded | ToolExecutionFailed
    | ToolExecutionUnknown | Cancelled | Unknown
)

#: The closed set of outcome result kinds.
OUTCOME_RESULT_TYPES: tuple[type[OutcomeResult], ...] = (
    ModelSucceeded, ModelFailed, ToolExecutionSucceeded, ToolExecutionFailed,
    ToolExecutionUnknown, Cancelled, Unknown,
)

_STATUS: dict[type[OutcomeResult], ExecutionStatus] = {
    ModelSucceeded: ExecutionStatus.COMPLETED,
    ToolExecutionSucceeded: ExecutionStatus.COMPLETED,
    ModelFailed: ExecutionStatus.FAILED,
    ToolExecutionFailed: ExecutionStatus.FAILED,
    Cancelled: ExecutionStatus.CANCELLED,
    Unknown: ExecutionStatus.UNKNOWN,
    ToolExecutionUnknown: ExecutionStatus.UNKNOWN,
}


def _result(_: object, attribute: attrs.Attribute[Any], value: Any) -> None:
    if value is not None and not isinstance(value, OUTCOME_RESULT_TYPES):
        raise ValidationError("result must be an outcome kind or None",
                              field=attribute.name, value=value)


@attrs.frozen
class Outcome:
    """The executor's single authoritative answer for one accepted Assignment (RUN-EXE-2).

    ``result`` is ``None`` when the executor delivered nothing usable (the loop maps that
    like a result of the wrong kind, §5.8).
    """

    key: AssignmentKey = attrs.field(validator=attrs.validators.instance_of(AssignmentKey))
    result: OutcomeResult | None = attrs.field(default=None, validator=_result)

    def status(self) -> ExecutionStatus:
        """The terminal status of this Outcome (spec §6.4): succeeded → COMPLETED;
        ModelFailed, ToolExecutionFailed → FAILED; Cancelled → CANCELLED; Unknown,
        ToolExecutionUnknown and a missing result → UNKNOWN."""
        if self.result is None:
            return ExecutionStatus.UNKNOWN
        return _STATUS[type(self.result)]
