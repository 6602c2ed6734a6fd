"""Transport form of the effect vocabulary (owner ↔ executor; RUN-EXE-1, RUN-EXE-8).

lowerCamelCase keys, the omit-zero rule (a field equal to its default is left out — so an
``UNKNOWN`` replay policy is omitted, §6.1), enums as their wire strings, ``class_`` as
``"class"``, unions tagged (an Assignment body by ``"kind"``: ``model``/``tool``; an
Outcome result by ``"type"``: the snake_case class name). Decoding is strict: unknown keys
are refused.

This is a transport form only: body digests are always computed by
:mod:`runx_actors.protocol` over the §3.7 shapes, never from these dictionaries.
"""

from __future__ import annotations

import re
from typing import Any, TypeVar

import attrs
import cattrs
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from ..protocol.errors import DecodeError
from ..protocol.values import (
    ModelRequest,
    ModelResult,
    ModelToolCall,
    ToolDefinition,
    ToolResult,
    Usage,
)
from ._assignment import (
    Assignment,
    AssignmentBody,
    AssignmentKey,
    ModelAssignment,
    TargetRef,
    ToolAssignment,
)
from ._failure import ToolFailure
from ._outcome import (
    OUTCOME_RESULT_TYPES,
    Cancelled,
    ModelFailed,
    ModelSucceeded,
    Outcome,
    OutcomeResult,
    ToolExecutionFailed,
    ToolExecutionSucceeded,
    ToolExecutionUnknown,
    Unknown,
)
from ._port import Attachment, ExecutionRef, Settlement
from ._progress import ProgressFrame

__all__ = ["to_wire", "from_wire", "WIRE_TYPES"]

T = TypeVar("T")

#: Every class :func:`to_wire` / :func:`from_wire` know.
WIRE_TYPES: tuple[type[Any], ...] = (
    Usage, ToolDefinition, ModelRequest, ModelToolCall, ModelResult, ToolResult,
    AssignmentKey, TargetRef, ModelAssignment, ToolAssignment, Assignment, ToolFailure,
    ModelSucceeded, ModelFailed, ToolExecutionSucceeded, ToolExecutionFailed,
    ToolExecutionUnknown, Cancelled, Unknown, Outcome, ExecutionRef, Attachment,
    Settlement, ProgressFrame,
)

_RESULT: Any = OutcomeResult
_BODY_TAGS = {ModelAssignment: "model", ToolAssignment: "tool"}


def _camel(name: str) -> str:
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part.title() for part in rest)


def _snake(cls: type[Any]) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", cls.__name__).lower()


def _structure_int(value: Any, _: type[int]) -> int:
    if isinstance(value, bool):
        raise DecodeError("expected an integer, got a bool", record="int", reason="bool")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, int):
        return value
    raise DecodeError(f"expected an integer, got {value!r}", record="int", reason="type")


def _register(converter: cattrs.Converter, cls: type[Any]) -> None:
    attrs.resolve_types(cls)
    renames = {a.name: override(rename=_camel(a.name)) for a in attrs.fields(cls)}
    unstructure_fn: Any = make_dict_unstructure_fn
    structure_fn: Any = make_dict_structure_fn
    converter.register_unstructure_hook(cls, unstructure_fn(
        cls, converter, _cattrs_omit_if_default=True, **renames))
    converter.register_structure_hook(cls, structure_fn(
        cls, converter, _cattrs_forbid_extra_keys=True, **renames))


def _structure_bool(value: Any, _: type[bool]) -> bool:
    if not isinstance(value, bool):
        raise DecodeError(f"expected a bool, got {value!r}", record="bool", reason="type")
    return value


def _structure_str(value: Any, _: type[str]) -> str:
    if not isinstance(value, str):
        raise DecodeError(f"expected a string, got {value!r}", record="str", reason="type")
    return value


def _tagged_union(converter: cattrs.Converter, union: Any, tags: dict[type[Any], str],
                  tag_name: str) -> None:
    by_tag = {tag: cls for cls, tag in tags.items()}

    def unstructure(value: Any) -> dict[str, Any]:
        data: dict[str, Any] = converter.unstructure(value, type(value))
        data[tag_name] = tags[type(value)]
        return data

    def structure(data: Any, _: Any) -> Any:
        if not isinstance(data, dict) or data.get(tag_name) not in by_tag:
            raise DecodeError(f"missing or unknown {tag_name!r} tag", record=str(union),
                              reason="tag")
        fields = {k: v for k, v in data.items() if k != tag_name}
        return converter.structure(fields, by_tag[data[tag_name]])

    converter.register_unstructure_hook(union, unstructure)
    converter.register_structure_hook(union, structure)


def _build() -> cattrs.Converter:
    converter = cattrs.Converter()
    converter.register_structure_hook(int, _structure_int)
    converter.register_structure_hook(bool, _structure_bool)
    converter.register_structure_hook(str, _structure_str)
    for cls in WIRE_TYPES:
        if cls not in (Assignment, Outcome):
            _register(converter, cls)
    _tagged_union(converter, AssignmentBody, _BODY_TAGS, "kind")
    _tagged_union(converter, OutcomeResult,
                  {cls: _snake(cls) for cls in OUTCOME_RESULT_TYPES}, "type")
    _register(converter, Assignment)

    def unstructure_outcome(outcome: Outcome) -> dict[str, Any]:
        data: dict[str, Any] = {"key": converter.unstructure(outcome.key)}
        if outcome.result is not None:
            data["result"] = converter.unstructure(outcome.result, OutcomeResult)
        return data

    def structure_outcome(data: Any, _: type[Outcome]) -> Outcome:
        if not isinstance(data, dict) or set(data) - {"key", "result"}:
            raise DecodeError("an Outcome is an object with key and result",
                              record="Outcome", reason="shape")
        result = data.get("result")
        return Outcome(converter.structure(data["key"], AssignmentKey),
                       None if result is None else converter.structure(result, _RESULT))

    converter.register_unstructure_hook(Outcome, unstructure_outcome)
    converter.register_structure_hook(Outcome, structure_outcome)
    return converter


_CONVERTER = _build()  # immutable after construction


def to_wire(value: Any) -> dict[str, Any]:
    """The transport dictionary of an effect value (any of :data:`WIRE_TYPES`).

    Raises ``TypeError`` for a value of another type.
    """
    if not isinstance(value, WIRE_TYPES):
        raise TypeError(f"no wire form for {type(value).__name__}")
    data = _CONVERTER.unstructure(value)
    assert isinstance(data, dict)
    return data


def from_wire(cls: type[T], data: Any) -> T:
    """Decode *data* (a :func:`to_wire` dictionary) as *cls*.

    Raises:
        DecodeError: unknown keys, missing fields or values of the wrong type.
    """
    if cls not in WIRE_TYPES:
        raise TypeError(f"no wire form for {cls.__name__}")
    try:
        return _CONVERTER.structure(data, cls)
    except DecodeError:
        raise
    except Exception as error:
        raise DecodeError(f"cannot decode {cls.__name__}: {error}", record=cls.__name__,
                          reason=repr(error)) from error


assert set(OUTCOME_RESULT_TYPES) <= set(WIRE_TYPES)
