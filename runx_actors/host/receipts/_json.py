"""Immutable JSON values and JSON pointers for receipts.

Receipts are frozen attrs values (style §3.1), so the JSON they hold is frozen too:
objects become :class:`FrozenMap`, arrays become tuples. :func:`thaw_json` gives back
plain ``dict``/``list`` data for callers that want to edit a copy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

__all__ = ["FrozenMap", "freeze_json", "thaw_json", "pointer"]


class FrozenMap(Mapping[str, Any]):
    """A read-only, hashable JSON object (insertion order kept, equality as a mapping)."""

    __slots__ = ("_hash", "_items")

    def __init__(self, items: Mapping[str, Any] | None = None) -> None:
        self._items: dict[str, Any] = dict(items or {})
        self._hash: int | None = None

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        if self._hash is None:
            self._hash = hash(frozenset(self._items.items()))
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, FrozenMap):
            return self._items == other._items
        if isinstance(other, Mapping):
            return self._items == dict(other)
        return NotImplemented

    def __repr__(self) -> str:
        return f"FrozenMap({self._items!r})"


def freeze_json(value: Any) -> Any:
    """Return *value* with every object frozen to :class:`FrozenMap` and every array to a
    tuple. Scalars are returned unchanged. Raises nothing (non-JSON leaves stay as they
    are; canonicalization rejects them later)."""
    if isinstance(value, FrozenMap):
        return value
    if isinstance(value, Mapping):
        return FrozenMap({key: freeze_json(item) for key, item in value.items()})
    if isinstance(value, (list, tuple)):
        return tuple(freeze_json(item) for item in value)
    return value


def thaw_json(value: Any) -> Any:
    """Return a deep, mutable copy of *value*: objects as ``dict``, arrays as ``list``."""
    if isinstance(value, Mapping):
        return {key: thaw_json(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [thaw_json(item) for item in value]
    return value


def pointer(*parts: str | int) -> str:
    """Join *parts* into an RFC 6901 JSON pointer (``pointer("a", 0) == "/a/0"``)."""
    return "".join(
        "/" + str(part).replace("~", "~0").replace("/", "~1") for part in parts
    )
