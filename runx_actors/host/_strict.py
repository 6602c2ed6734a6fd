"""The strict cattrs converter behind every document the host reads: ``X.yaml``, harness
cases and fixtures, answers files (loop-host §3.1, §7.2, §8.2).

No coercion: a value must already be the declared JSON type (a bool is never a number or
a string; an integer is accepted where a number is declared), and unknown keys are
refused (``forbid_extra_keys``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import cattrs

__all__ = ["scalar_hook", "strict_converter"]

_SCALARS: tuple[tuple[type, str], ...] = (
    (str, "a string"), (bool, "a boolean"), (int, "an integer"), (float, "a number"))


def scalar_hook(kind: type, what: str,
                show: Callable[[Any], str] = repr) -> Callable[[Any, Any], Any]:
    """A structure hook accepting only *kind* (an int or float for ``float``, returned as
    a float). Raises TypeError ``expected <what>, got <show(value)>``."""
    accepted: type | tuple[type, ...] = (int, float) if kind is float else kind

    def hook(value: Any, _: Any) -> Any:
        if (isinstance(value, bool) and kind is not bool) or not isinstance(value, accepted):
            raise TypeError(f"expected {what}, got {show(value)}")
        return float(cast("int | float", value)) if kind is float else value

    return hook


def strict_converter(*, detailed_validation: bool = True,
                     show: Callable[[Any], str] = repr) -> cattrs.Converter:
    """A ``forbid_extra_keys`` converter with :func:`scalar_hook` for str, bool, int and
    float; callers register their own hooks on top."""
    conv = cattrs.Converter(forbid_extra_keys=True, detailed_validation=detailed_validation)
    for kind, what in _SCALARS:
        conv.register_structure_hook(kind, scalar_hook(kind, what, show))
    return conv
