"""Checks of a public function's arguments: each refuses with ValidationError naming the
argument (its ``argument`` attribute) and the value's type or value, never a builtin
TypeError/ValueError from deeper down (README: every error is a RunxError).

Pure (no I/O); used by the stores, executors, runtime and host at their entry points,
before anything is opened or written.
"""

from __future__ import annotations

import math
from typing import Any

from .canonical import MAX_SAFE_INTEGER
from .errors import ValidationError

__all__ = ["check_count", "check_seconds", "check_type", "check_fraction"]


def _shown(value: Any) -> str:
    return repr(value)[:64]


def check_type(value: Any, what: str, kinds: type | tuple[type, ...], described: str) -> None:
    """Raise ValidationError unless *value* is an instance of *kinds* (*described* names
    them for people: ``"a str"``)."""
    if not isinstance(value, kinds):
        raise ValidationError(f"{what} must be {described}, not {type(value).__name__} "
                              f"{_shown(value)}", argument=what, value=_shown(value))


def check_count(value: Any, what: str, *, minimum: int = 0,
                maximum: int = MAX_SAFE_INTEGER) -> int:
    """*value* if it is an ``int`` (not a bool) in ``minimum..maximum`` (default bound
    2^53−1, the largest integer every JSON reader keeps exactly); else ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValidationError(f"{what} must be an integer, not {type(value).__name__} "
                              f"{_shown(value)}", argument=what, value=_shown(value))
    if not minimum <= value <= maximum:
        raise ValidationError(f"{what} must be in {minimum}..{maximum}, got {_shown(value)}",
                              argument=what, value=_shown(value))
    return value


def check_seconds(value: Any, what: str, *, positive: bool = False,
                  infinite: bool = False) -> float:
    """*value* if it is a real number of seconds (int or float, not a bool, not NaN),
    ``>= 0`` (``> 0`` when *positive*) and finite unless *infinite* (``inf`` then means
    "no limit"); else ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValidationError(f"{what} must be a number of seconds, not "
                              f"{type(value).__name__} {_shown(value)}", argument=what,
                              value=_shown(value))
    number = float(value)
    if math.isnan(number) or (math.isinf(number) and not infinite) or number < 0 or (
            positive and number == 0):
        bound = "> 0" if positive else ">= 0"
        limit = " (inf: no limit)" if infinite else " and finite"
        raise ValidationError(f"{what} must be {bound}{limit}, got {_shown(value)}",
                              argument=what, value=_shown(value))
    return value


def check_fraction(value: Any, what: str) -> float:
    """*value* if it is a real number in [0, 1] (not a bool, not NaN); else ValidationError."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= 1:
        raise ValidationError(f"{what} must be a number in [0, 1], not "
                              f"{type(value).__name__} {_shown(value)}", argument=what,
                              value=_shown(value))
    return float(value)
