"""Single-field validators shared by the effect vocabulary (raise ``ValidationError``)."""

from __future__ import annotations

from typing import Any

import attrs

from ..protocol.errors import ValidationError
from ..protocol.values import is_digest

__all__ = ["non_empty_str", "any_str", "digest_or_empty", "non_negative_int"]


def any_str(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """The value is a ``str`` (possibly empty)."""
    if not isinstance(value, str):
        raise ValidationError(f"{attribute.name} must be a str, got {type(value).__name__}",
                              field=attribute.name, value=value)


def non_empty_str(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """The value is a non-empty ``str``."""
    if not isinstance(value, str) or not value:
        raise ValidationError(f"{attribute.name} must be a non-empty str",
                              field=attribute.name, value=value)


def digest_or_empty(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """The value is ``""`` or a ``sha256:`` digest."""
    if value != "" and not is_digest(value):
        raise ValidationError(f"{attribute.name} must be a sha256 digest or empty",
                              field=attribute.name, value=value)


def non_negative_int(_: Any, attribute: attrs.Attribute[Any], value: object) -> None:
    """The value is an ``int`` (not ``bool``) that is at least 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValidationError(f"{attribute.name} must be an int >= 0",
                              field=attribute.name, value=value)
