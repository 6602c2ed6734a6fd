"""``CheckConfig``: the bounds of a model-checking configuration (how big the world is)."""

from __future__ import annotations

from typing import Any

import attrs

__all__ = ["CheckConfig"]


def _at_least(minimum: int) -> Any:
    def validate(instance: Any, attribute: attrs.Attribute[int], value: int) -> None:
        if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
            raise ValueError(f"{attribute.name} must be an integer >= {minimum}, got {value!r}")

    return validate


@attrs.frozen(kw_only=True)
class CheckConfig:
    """How many of each thing a model may create; the model's state space grows with each.

    All counts are integers; ``runs`` is at least 1, the others at least 0.
    Raises ``ValueError`` on a count out of range.
    """

    runs: int = attrs.field(default=1, validator=_at_least(1))
    """Runs created (each a separate fact log)."""
    calls: int = attrs.field(default=2, validator=_at_least(0))
    """Tool calls the model step of a Run may request."""
    crashes: int = attrs.field(default=1, validator=_at_least(0))
    """Runtime crashes (and restarts) the environment may inject."""
    takeovers: int = attrs.field(default=1, validator=_at_least(0))
    """Session takeovers by a second runtime (epoch bumps)."""
    duplicates: int = attrs.field(default=1, validator=_at_least(0))
    """Duplicated or late outcome deliveries the environment may inject."""
