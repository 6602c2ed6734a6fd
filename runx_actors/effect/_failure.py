"""Failure codes, tool failure classes and retry dispositions (spec §6.6; RUN-EXE-11)."""

from __future__ import annotations

import enum

import attrs

from ..protocol.values import Failure
from ._validators import any_str, non_empty_str

__all__ = [
    "RetryDisposition",
    "FailureCode",
    "ToolFailureClass",
    "ToolFailure",
    "classify_http_status",
    "classify_provider_error",
]


class RetryDisposition(enum.Enum):
    """Whether repeating a failed execution is safe (RUN-EXE-11).

    ``ALLOWED`` means the failure shows that no side effect happened which a repeat would
    duplicate. ``UNKNOWN`` (the default, omitted on the wire) is never retried.
    """

    UNKNOWN = ""
    NEVER = "never"
    ALLOWED = "allowed"


class FailureCode(enum.Enum):
    """Why a model execution failed (wire-stable strings, RUN-EXE-11).

    The retry disposition is computed by :meth:`retry`, never stored next to the code.
    """

    EXECUTOR_ERROR = "executor_error"
    FROZEN_VALUE_MISSING = "frozen_value_missing"
    MALFORMED_FROZEN_REQUEST = "malformed_frozen_request"
    MALFORMED_RESULT = "malformed_result"
    DEADLINE_EXCEEDED = "deadline_exceeded"
    RATE_LIMITED = "rate_limited"
    PROVIDER_UNAVAILABLE = "provider_unavailable"
    CONNECTION_FAILED = "connection_failed"
    AUTHENTICATION_FAILED = "authentication_failed"
    BILLING = "billing"
    BAD_REQUEST = "bad_request"

    def retry(self) -> RetryDisposition:
        """``ALLOWED`` for rate_limited, provider_unavailable and connection_failed;
        ``NEVER`` for every other code."""
        return RetryDisposition.ALLOWED if self in _RETRYABLE else RetryDisposition.NEVER


_RETRYABLE = frozenset({
    FailureCode.RATE_LIMITED,
    FailureCode.PROVIDER_UNAVAILABLE,
    FailureCode.CONNECTION_FAILED,
})


class ToolFailureClass:
    """Tool failure classes (open strings; these are the conventional ones, §6.6).

    They say what went wrong, not whether to retry. ``EXECUTION_FAILED`` is the
    unclassified failure. The validate-time classes of §6.2 are listed too.
    """

    NOT_FOUND = "not_found"
    INVALID_INPUT = "invalid_input"
    TIMEOUT = "timeout"
    UNAVAILABLE = "unavailable"
    RATE_LIMITED = "rate_limited"
    CONFLICT = "conflict"
    INTERNAL = "internal"
    EXECUTION_FAILED = "execution_failed"
    # validate (spec §6.2)
    TOOL_LOOKUP_FAILED = "tool_lookup_failed"
    TOOL_DEFINITION_MISMATCH = "tool_definition_mismatch"
    INVALID_ARGUMENTS = "invalid_arguments"
    PROVIDER_FAILURE = "provider_failure"


@attrs.frozen
class ToolFailure:
    """A failure reported by an executor: a non-empty class (wire key ``class``) and an
    informative message (spec §6.2). ``validate`` returns one to refuse an Assignment."""

    class_: str = attrs.field(validator=non_empty_str)
    message: str = attrs.field(default="", validator=any_str)

    def to_failure(self) -> Failure:
        """The same class and message as a protocol :class:`Failure`."""
        return Failure(self.class_, self.message)


def classify_http_status(status: int) -> FailureCode | None:
    """FailureCode of a provider HTTP status, or ``None`` when the status is no error.

    429 → rate_limited; 5xx → provider_unavailable; 401/403 → authentication_failed;
    402 → billing; any other 4xx → bad_request (RUN-EXE-11).
    """
    if status == 429:
        return FailureCode.RATE_LIMITED
    if 500 <= status <= 599:
        return FailureCode.PROVIDER_UNAVAILABLE
    if status in (401, 403):
        return FailureCode.AUTHENTICATION_FAILED
    if status == 402:
        return FailureCode.BILLING
    if 400 <= status <= 499:
        return FailureCode.BAD_REQUEST
    return None


def classify_provider_error(*, status: int | None = None, network: bool = False,
                            deadline: bool = False) -> FailureCode:
    """Classify a provider error: HTTP status first, then network/EOF errors
    (``connection_failed``, or ``deadline_exceeded`` when a deadline fired inside), else
    ``executor_error`` (RUN-EXE-11)."""
    if status is not None:
        code = classify_http_status(status)
        if code is not None:
            return code
    if deadline:
        return FailureCode.DEADLINE_EXCEEDED
    if network:
        return FailureCode.CONNECTION_FAILED
    return FailureCode.EXECUTOR_ERROR
