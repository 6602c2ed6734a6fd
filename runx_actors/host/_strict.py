"""The strict cattrs converter behind every document the host reads: ``X.yaml``, harness
cases and fixtures, answers files (loop-host §3.1, §7.2, §8.2).

No coercion: a value must already be the declared JSON type (a bool is never a number or
a string; an integer is accepted where a number is declared; a list is a YAML/JSON
sequence — never a string, which cattrs would take letter by letter, nor a mapping, which
it would take as its keys: ``allowed_tools: {fs.read: true, fs.write: false}`` would
allow ``fs.write``; a mapping is a mapping), and unknown keys are refused
(``forbid_extra_keys``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, MutableMapping, MutableSequence, Sequence
from typing import Any, cast, get_args, get_origin

import cattrs
from cattrs.errors import IterableValidationError, IterableValidationNote

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
    conv.register_structure_hook_factory(
        lambda t: _origin(t) in _SEQUENCES, lambda t: _sequence_hook(conv, t, show))
    conv.register_structure_hook_factory(
        lambda t: _origin(t) in _MAPPINGS, lambda t: _mapping_hook(conv, t, show))
    return conv


_SEQUENCES: tuple[object, ...] = (tuple, list, Sequence, MutableSequence)
_MAPPINGS: tuple[object, ...] = (dict, Mapping, MutableMapping)


def _origin(kind: Any) -> object:
    """The generic origin of *kind* (``tuple`` for ``tuple[str, ...]``), or None."""
    return cast(object, get_origin(kind))


def _sequence_hook(conv: cattrs.Converter, kind: Any,
                   show: Callable[[Any], str]) -> Callable[[Any, Any], Any]:
    """``tuple[X, ...]``, ``tuple[A, B]``, ``list[X]``: only a list (or tuple) is
    accepted, each item structured as declared. Raises TypeError."""
    origin, args = get_origin(kind), get_args(kind)
    fixed = origin is tuple and not (len(args) == 2 and args[1] is Ellipsis)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, list | tuple):
            raise TypeError(f"expected a list, got {show(value)}")
        if fixed and len(value) != len(args):
            raise TypeError(f"expected a list of {len(args)} items, got {len(value)}")
        types = args if fixed else (args[0] if args else Any,) * len(value)
        items = _each(conv, kind, [(i, v, t) for i, (v, t) in enumerate(zip(value, types))])
        return items if origin is list else tuple(items)

    return hook


def _each(conv: cattrs.Converter, kind: Any,
          items: list[tuple[int | str, Any, Any]]) -> list[Any]:
    """Structure each ``(index, value, type)``; with detailed validation every failure is
    collected, tagged with its index or key (cattrs' ``IterableValidationNote``, which
    error renderers turn into a path) and raised as one ``IterableValidationError``."""
    if not conv.detailed_validation:
        return [conv.structure(v, t) for _, v, t in items]
    out: list[Any] = []
    errors: list[Exception] = []
    for index, value, type_ in items:
        try:
            out.append(conv.structure(value, type_))
        except Exception as exc:
            exc.__notes__ = [*getattr(exc, "__notes__", []), IterableValidationNote(
                f"Structuring {kind} @ index {index!r}", index, type_)]
            errors.append(exc)
    if errors:
        raise IterableValidationError(f"While structuring {kind}", errors, kind)
    return out


def _mapping_hook(conv: cattrs.Converter, kind: Any,
                  show: Callable[[Any], str]) -> Callable[[Any, Any], Any]:
    """``dict[K, V]``: only a mapping is accepted, keys and values structured as
    declared. Raises TypeError."""
    args = get_args(kind)
    key, val = args if len(args) == 2 else (Any, Any)

    def hook(value: Any, _: Any) -> Any:
        if not isinstance(value, Mapping):
            raise TypeError(f"expected a mapping, got {show(value)}")
        keys = _each(conv, kind, [(repr(k), k, key) for k in value])
        values = _each(conv, kind, [(str(k), v, val) for k, v in value.items()])
        return dict(zip(keys, values, strict=True))

    return hook
