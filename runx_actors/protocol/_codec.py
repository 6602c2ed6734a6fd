"""The wire codec of facts and commands: one cattrs converter (spec §0.4, §2.12, §3.7).

Rules (RUN-WIR-2, RUN-CMP-1):

* keys are lowerCamelCase (``class_`` → ``"class"``);
* omit-zero: a field is left out when it equals its attrs default. Every default in the
  protocol is the zero value of its type (§2.1: "defaults shown are the zero values"), so
  this is the spec's omit-zero rule; for enums the zero member is the field's default. A
  field without a default is always written, even when it holds ``""`` (a provider call id
  may be empty; an UNKNOWN tool failure may carry an empty class);
* enums are written as their string values;
* JSON-text fields (``arguments``, ``payload``, ``output``, ``parameters``) are embedded as
  JSON values, not strings; ``ModelRequest``/``ModelResult`` are their ``body`` object merged
  with their typed fields (§3.7);
* ``RunEnded.end`` is a single-key tagged object: ``{"completed":{}}``,
  ``{"stopped":{…}}`` or ``{"failed":{…}}``;
* a fact's payload carries no run id, except ``RunCreated`` (``{"runId":…,
  "causationId"?:…}``).

Decoding is strict: unknown or missing fields, wrong JSON types, fractional or unsafe
numbers for int fields, bad enum values, a RunEnd with zero or several keys, and trailing
bytes are refused with :class:`DecodeError` (``record`` = the wire name, ``reason`` = the
failures with their JSON paths, ``errors`` = the same as a tuple). Numbers arrive as doubles
(``parse_int=float``) and are converted back for int fields. JSON-text fields are
re-canonicalised on decode, so ``decode(encode(x)) == x`` for every valid value.

Encoding is strict too: a value that could not round-trip exactly (wrong Python types,
unsafe integers, JSON text that is not canonical, an invalid RunEnd) is refused with
:class:`ValidationError` (``CanonicalJSONError`` for JSON-text problems) naming the record.
"""

from __future__ import annotations

import enum
import functools
import types
from collections.abc import Callable
from typing import Any, TypeVar, cast, get_args, get_origin

import attrs
import cattrs
from cattrs.errors import (
    AttributeValidationNote,
    BaseValidationError,
    ClassValidationError,
    ForbiddenExtraKeysError,
    IterableValidationError,
    IterableValidationNote,
)
from cattrs.gen import make_dict_structure_fn, make_dict_unstructure_fn, override

from . import commands as _commands
from . import state as _state
from . import values as _values
from .canonical import (
    MAX_SAFE_INTEGER,
    JSONValue,
    canonical_json_text,
    parse_json_strict,
    read_envelope,
    typed_envelope,
)
from .commands import COMMAND_BY_WIRE_NAME, Command
from .errors import CanonicalJSONError, DecodeError, RunxError, ValidationError
from .facts import FACT_BY_WIRE_NAME, Fact
from .values import (
    ModelRequest,
    ModelResult,
    ModelToolCall,
    RunCompletedEnd,
    RunEnd,
    RunFailedEnd,
    RunReason,
    RunStoppedEnd,
    ToolDefinition,
    Usage,
)

__all__ = [
    "converter",
    "JSON_TEXT_FIELDS",
    "MODEL_REQUEST_KEYS",
    "MODEL_RESULT_KEYS",
    "wire_key",
    "fact_payload",
    "encode_fact",
    "decode_fact",
    "decode_fact_payload",
    "command_payload",
    "encode_command",
    "decode_command",
    "decode_command_payload",
    "encode_value",
    "decode_value",
]

T = TypeVar("T")

#: Fields holding ``JSONText`` that travel as embedded JSON values (§2.12, §3.7).
#: ``ModelRequest.body`` and ``ModelResult.body`` are merged, not embedded, and are handled
#: by their classes' own hooks.
JSON_TEXT_FIELDS: dict[type[Any], frozenset[str]] = {
    _values.ResponseRequest: frozenset({"payload"}),
    _values.ToolCallBinding: frozenset({"arguments"}),
    _values.ToolResult: frozenset({"output"}),
    _values.ToolDefinition: frozenset({"parameters"}),
    _values.ModelToolCall: frozenset({"arguments"}),
    _commands.SubmitToolResponse: frozenset({"payload"}),
    _state.ToolCallState: frozenset({"arguments"}),
}

#: Keys a ``ModelRequest`` body object must not hold (they are the typed fields, §3.7).
MODEL_REQUEST_KEYS = frozenset({"model", "tools"})
#: Keys a ``ModelResult`` body object must not hold (they are the typed fields, §3.7).
MODEL_RESULT_KEYS = frozenset({"content", "toolCalls", "finishReason", "usage"})

_RUN_END_TAGS: dict[str, type[Any]] = {
    "completed": RunCompletedEnd,
    "stopped": RunStoppedEnd,
    "failed": RunFailedEnd,
}
_RUN_END_TAG_OF = {cls: tag for tag, cls in _RUN_END_TAGS.items()}

_STEP_TAGS: dict[str, type[Any]] = {
    "open": _state.Open,
    "modelStep": _state.ModelStep,
    "toolStep": _state.ToolStep,
}
_STEP_TAG_OF = {cls: tag for tag, cls in _STEP_TAGS.items()}
_CURRENT_STEP = _state.Open | _state.ModelStep | _state.ToolStep | None


class _Bad(ValueError):
    """Internal: one decoding failure at the current path (message is the description)."""


def wire_key(name: str) -> str:
    """Return the lowerCamelCase wire key of attribute *name* (``class_`` → ``class``).

    The key rule of §0.4 (RUN-WIR-2). Pure; raises nothing.
    """
    head, *rest = name.rstrip("_").split("_")
    return head + "".join(part[:1].upper() + part[1:] for part in rest)


# --------------------------------------------------------------------------- primitives


def _type_name(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


def _unstructure_str(value: object) -> str:
    if not isinstance(value, str):
        raise ValidationError(f"expected str, got {type(value).__name__}", reason="type")
    return value


def _structure_str(value: object, _: Any) -> str:
    if not isinstance(value, str):
        raise _Bad(f"expected a string, got {_type_name(value)}")
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise _Bad("string holds a lone surrogate") from None
    return value


def _unstructure_int(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValidationError(f"expected int, got {type(value).__name__}", reason="type")
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise ValidationError(f"int {value} is outside ±(2^53-1)", reason="unsafe_integer")
    return int(value)


def _structure_int(value: object, _: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _Bad(f"expected an integer, got {_type_name(value)}")
    if isinstance(value, float) and not value.is_integer():
        raise _Bad(f"expected an integer, got the fraction {value!r}")
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise _Bad(f"integer {value!r} is outside ±(2^53-1)")
    return int(value)


def _is_enum(t: Any) -> bool:
    return isinstance(t, type) and issubclass(t, enum.Enum)


def _enum_unstructure_factory(t: type[enum.Enum]) -> Callable[[Any], Any]:
    def unstructure(value: object) -> Any:
        if not isinstance(value, t):
            raise ValidationError(
                f"expected a {t.__name__} member, got {value!r}", reason="type"
            )
        return value.value

    return unstructure


def _enum_structure(value: object, t: type[enum.Enum]) -> enum.Enum:
    if not isinstance(value, str):
        raise _Bad(f"expected a {t.__name__} string, got {_type_name(value)}")
    try:
        return t(value)
    except ValueError:
        raise _Bad(f"{value!r} is not a {t.__name__} value") from None


def _is_hom_tuple(t: Any) -> bool:
    args = get_args(t)
    return get_origin(t) is tuple and len(args) == 2 and args[1] is Ellipsis


def _tuple_unstructure_factory(t: Any) -> Callable[[Any], Any]:
    item_type = get_args(t)[0]
    item_hook = converter.get_unstructure_hook(item_type)

    def unstructure(value: object) -> list[Any]:
        if not isinstance(value, tuple):
            raise ValidationError(f"expected a tuple, got {type(value).__name__}", reason="type")
        return [item_hook(item) for item in value]

    return unstructure


def _tuple_structure_factory(t: Any) -> Callable[[Any, Any], Any]:
    item_type = get_args(t)[0]
    item_hook = converter.get_structure_hook(item_type)

    def structure(value: object, _: Any) -> tuple[Any, ...]:
        if not isinstance(value, list):
            raise _Bad(f"expected an array, got {_type_name(value)}")
        out: list[Any] = []
        errors: list[Exception] = []
        for index, item in enumerate(value):
            try:
                out.append(item_hook(item, item_type))
            except Exception as exc:
                exc.add_note(IterableValidationNote(f"item {index}", index, item_type))
                errors.append(exc)
        if errors:
            raise IterableValidationError("invalid array items", errors, t)
        return tuple(out)

    return structure


# --------------------------------------------------------------------------- JSON text


def _json_text_value(text: object, field: str) -> JSONValue:
    """The embedded JSON value of a JSONText field; the text must be canonical (§0.4)."""
    if not isinstance(text, str):
        raise ValidationError(
            f"{field} must be JSON text (str), got {type(text).__name__}", reason="type"
        )
    try:
        value = parse_json_strict(text)
    except CanonicalJSONError as exc:
        raise CanonicalJSONError(
            f"{field} is not strict JSON text: {exc}", reason="json_text", field=field
        ) from exc
    canonical = (
        _is_canonical_text(text)
        if len(text) <= _CACHED_TEXT_SIZE
        else canonical_json_text(value) == text
    )
    if not canonical:
        raise CanonicalJSONError(
            f"{field} is not canonical JSON text", reason="not_canonical", field=field
        )
    return value


#: JSON texts up to this length have their "is canonical" verdict cached.
_CACHED_TEXT_SIZE = 2048


@functools.lru_cache(maxsize=4096)
def _is_canonical_text(text: str) -> bool:
    """Whether strict JSON *text* is already canonical (cached: texts are immutable)."""
    return canonical_json_text(parse_json_strict(text)) == text


def _json_text_unstructure(field: str) -> Callable[[Any], Any]:
    def unstructure(text: object) -> JSONValue:
        return _json_text_value(text, field)

    return unstructure


def _structure_json_text(value: object, _: Any) -> str:
    try:
        return canonical_json_text(value)
    except CanonicalJSONError as exc:
        raise _Bad(f"not a JSON value: {exc}") from None


# --------------------------------------------------------------------------- attrs classes


def _require_object(value: object) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise _Bad(f"expected an object, got {_type_name(value)}")
    return value


def _structure_digest(value: object, _: Any) -> str:
    """A ``Digest`` field: ``sha256:`` + 64 lowercase hex, nothing else (RUN-WIR-5)."""
    text = _structure_str(value, str)
    if not _values.is_digest(text):
        raise _Bad(f"{text[:80]!r} is not a digest (sha256: + 64 lowercase hex)")
    return text


def _digest_fields(cl: type[Any]) -> frozenset[str]:
    """The fields of *cl* annotated ``Digest`` (an alias of ``str``). Read from the raw
    (string) annotations: ``attrs.resolve_types`` replaces ``Attribute.type`` by ``str``."""
    names: set[str] = set()
    for klass in reversed(cl.__mro__):
        for name, annotation in vars(klass).get("__annotations__", {}).items():
            if annotation == "Digest":
                names.add(name)
    return frozenset(names)


def _overrides(cl: type[Any]) -> dict[str, Any]:
    json_fields = JSON_TEXT_FIELDS.get(cl, frozenset())
    result: dict[str, Any] = {}
    digests = _digest_fields(cl)
    for a in attrs.fields(cl):
        if a.name in digests:
            result[a.name] = override(rename=wire_key(a.name), struct_hook=_structure_digest)
        elif a.name in json_fields:
            result[a.name] = override(
                rename=wire_key(a.name),
                unstruct_hook=_json_text_unstructure(f"{cl.__name__}.{a.name}"),
                struct_hook=_structure_json_text,
            )
        else:
            result[a.name] = override(rename=wire_key(a.name))
    return result


def _attrs_unstructure_factory(cl: type[Any]) -> Callable[[Any], Any]:
    if cl is ModelRequest:
        return _unstructure_model_request
    if cl is ModelResult:
        return _unstructure_model_result
    generated = make_dict_unstructure_fn(
        cl, converter, _cattrs_omit_if_default=True, **_overrides(cl)
    )

    def unstructure(value: object) -> dict[str, Any]:
        if type(value) is not cl:
            raise ValidationError(
                f"expected {cl.__name__}, got {type(value).__name__}", reason="type"
            )
        return generated(value)

    return unstructure


def _attrs_structure_factory(cl: type[Any]) -> Callable[[Any, Any], Any]:
    if cl is ModelRequest:
        return _structure_model_request
    if cl is ModelResult:
        return _structure_model_result
    generated = make_dict_structure_fn(
        cl, converter, _cattrs_forbid_extra_keys=True, **_overrides(cl)
    )

    def structure(value: object, _: Any) -> Any:
        return generated(_require_object(value), cl)

    return structure


def _gather(cl: type[Any], steps: list[tuple[str, Callable[[], Any]]]) -> list[Any]:
    """Run each step; collect failures under their key like cattrs' generated code does."""
    results: list[Any] = []
    errors: list[Exception] = []
    for name, step in steps:
        try:
            results.append(step())
        except Exception as exc:
            exc.add_note(AttributeValidationNote(f"Structuring {name}", name, cl))
            errors.append(exc)
    if errors:
        raise ClassValidationError(f"While structuring {cl.__name__}", errors, cl)
    return results


def _body_object(text: str, field: str, reserved: frozenset[str]) -> dict[str, JSONValue]:
    body = _json_text_value(text, field)
    if not isinstance(body, dict):
        raise ValidationError(f"{field} must be a JSON object", reason="body_not_object")
    clash = reserved.intersection(body)
    if clash:
        raise ValidationError(
            f"{field} must not contain the keys {sorted(clash)}", reason="reserved_key"
        )
    return body


def _unstructure_model_request(req: object) -> dict[str, Any]:
    if type(req) is not ModelRequest:
        raise ValidationError(f"expected ModelRequest, got {type(req).__name__}", reason="type")
    out: dict[str, Any] = dict(_body_object(req.body, "ModelRequest.body", MODEL_REQUEST_KEYS))
    out["model"] = _unstructure_str(req.model)
    if req.tools:
        out["tools"] = converter.unstructure(req.tools, tuple[ToolDefinition, ...])
    return out


def _structure_model_request(value: object, _: Any) -> ModelRequest:
    obj = dict(_require_object(value))
    model_value = obj.pop("model", _MISSING)
    tools_value = obj.pop("tools", _MISSING)

    def model() -> str:
        if model_value is _MISSING:
            raise KeyError("model")
        return _structure_str(model_value, str)

    def tools() -> tuple[ToolDefinition, ...]:
        if tools_value is _MISSING:
            return ()
        return converter.structure(tools_value, tuple[ToolDefinition, ...])

    m, t = _gather(ModelRequest, [("model", model), ("tools", tools)])
    return ModelRequest(model=m, tools=t, body=canonical_json_text(obj))


def _unstructure_model_result(res: object) -> dict[str, Any]:
    if type(res) is not ModelResult:
        raise ValidationError(f"expected ModelResult, got {type(res).__name__}", reason="type")
    out: dict[str, Any] = dict(_body_object(res.body, "ModelResult.body", MODEL_RESULT_KEYS))
    if _unstructure_str(res.content):
        out["content"] = res.content
    if res.tool_calls:
        out["toolCalls"] = converter.unstructure(res.tool_calls, tuple[ModelToolCall, ...])
    if _unstructure_str(res.finish_reason):
        out["finishReason"] = res.finish_reason
    usage = converter.unstructure(res.usage, Usage)
    if usage:
        out["usage"] = usage
    return out


def _structure_model_result(value: object, _: Any) -> ModelResult:
    obj = dict(_require_object(value))
    found = {key: obj.pop(key, _MISSING) for key in MODEL_RESULT_KEYS}

    def typed(key: str, t: Any, default: Any) -> Callable[[], Any]:
        def step() -> Any:
            if found[key] is _MISSING:
                return default
            return converter.structure(found[key], t)

        return step

    content, tool_calls, finish_reason, usage = _gather(
        ModelResult,
        [
            ("content", typed("content", str, "")),
            ("toolCalls", typed("toolCalls", tuple[ModelToolCall, ...], ())),
            ("finishReason", typed("finishReason", str, "")),
            ("usage", typed("usage", Usage, Usage())),
        ],
    )
    return ModelResult(
        content=content,
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        usage=usage,
        body=canonical_json_text(obj),
    )


class _Missing(enum.Enum):
    MISSING = enum.auto()


_MISSING = _Missing.MISSING


# --------------------------------------------------------------------------- tagged unions


def _check_run_end(end: object) -> None:
    if isinstance(end, (RunStoppedEnd, RunFailedEnd)) and end.reason is RunReason.NONE:
        raise ValidationError("a stopped or failed end needs a reason", reason="no_reason")
    if isinstance(end, RunFailedEnd) and not end.failure.class_:
        raise ValidationError("a failed end needs a failure class", reason="no_class")


def _unstructure_run_end(end: object) -> dict[str, Any]:
    tag = _RUN_END_TAG_OF.get(type(end))
    if tag is None:
        raise ValidationError(f"{type(end).__name__} is not a RunEnd", reason="type")
    inner = converter.unstructure(end, type(end))
    _check_run_end(end)
    return {tag: inner}


def _structure_tagged(
    value: object, union: Any, tags: dict[str, type[Any]], what: str
) -> Any:
    obj = _require_object(value)
    if len(obj) != 1:
        raise _Bad(f"{what} must have exactly one key of {sorted(tags)}, got {sorted(obj)}")
    ((tag, inner),) = obj.items()
    cls = tags.get(tag)
    if cls is None:
        raise _Bad(f"unknown {what} variant {tag!r}")
    try:
        return converter.structure(inner, cls)
    except Exception as exc:
        exc.add_note(AttributeValidationNote(f"Structuring {tag}", tag, cls))
        raise ClassValidationError(f"While structuring {what}", [exc], union) from None


def _structure_run_end(value: object, _: Any) -> RunEnd:
    end = _structure_tagged(value, RunEnd, _RUN_END_TAGS, "RunEnd")
    try:
        _check_run_end(end)
    except ValidationError as exc:
        raise _Bad(str(exc)) from None
    return cast(RunEnd, end)


def _unstructure_current(step: object) -> dict[str, Any] | None:
    if step is None:
        return None
    tag = _STEP_TAG_OF.get(type(step))
    if tag is None:
        raise ValidationError(f"{type(step).__name__} is not a step", reason="type")
    return {tag: converter.unstructure(step, type(step))}


def _structure_current(value: object, _: Any) -> Any:
    if value is None:
        return None
    return _structure_tagged(value, _CURRENT_STEP, _STEP_TAGS, "step")


def _is_union(target: Any) -> Callable[[Any], bool]:
    def predicate(t: Any) -> bool:
        return isinstance(t, types.UnionType) and t == target

    return predicate


# --------------------------------------------------------------------------- the converter

#: The one converter of the wire form (§0.4, §2.12). Use the functions below rather than
#: calling it directly: they add the strict checks and the error mapping.
converter = cattrs.Converter(
    detailed_validation=True, forbid_extra_keys=True, omit_if_default=True
)
converter.register_unstructure_hook(str, _unstructure_str)
converter.register_structure_hook(str, _structure_str)
converter.register_unstructure_hook(int, _unstructure_int)
converter.register_structure_hook(int, _structure_int)
converter.register_unstructure_hook_factory(_is_enum, _enum_unstructure_factory)
converter.register_structure_hook_func(_is_enum, _enum_structure)
converter.register_unstructure_hook_factory(_is_hom_tuple, _tuple_unstructure_factory)
converter.register_structure_hook_factory(_is_hom_tuple, _tuple_structure_factory)
converter.register_unstructure_hook_factory(attrs.has, _attrs_unstructure_factory)
converter.register_structure_hook_factory(attrs.has, _attrs_structure_factory)
converter.register_unstructure_hook_func(_is_union(RunEnd), _unstructure_run_end)
converter.register_structure_hook_func(_is_union(RunEnd), _structure_run_end)
converter.register_unstructure_hook_func(_is_union(_CURRENT_STEP), _unstructure_current)
converter.register_structure_hook_func(_is_union(_CURRENT_STEP), _structure_current)


# --------------------------------------------------------------------------- errors


def _messages(exc: BaseException, path: str) -> list[str]:
    if isinstance(exc, ClassValidationError):
        with_notes, without = exc.group_exceptions()
        out: list[str] = []
        for sub, note in with_notes:
            out += _messages(sub, f"{path}.{wire_key(note.name)}")
        for sub in without:
            out += _messages(sub, path)
        return out
    if isinstance(exc, IterableValidationError):
        items, rest = exc.group_exceptions()
        out = []
        for sub, item_note in items:
            out += _messages(sub, f"{path}[{item_note.index!r}]")
        for sub in rest:
            out += _messages(sub, path)
        return out
    if isinstance(exc, KeyError):
        return [f"missing required field @ {path}"]
    if isinstance(exc, ForbiddenExtraKeysError):
        return [f"unknown field(s) {sorted(exc.extra_fields)} @ {path}"]
    if isinstance(exc, (_Bad, RunxError)):
        return [f"{exc} @ {path}"]
    return [f"{type(exc).__name__}: {exc} @ {path}"]


def _decode(obj: object, cl: Any, record: str) -> Any:
    try:
        return converter.structure(obj, cl)
    except (BaseValidationError, _Bad, RunxError, KeyError, TypeError, ValueError) as exc:
        errors = tuple(_messages(exc, "$"))
        raise DecodeError(
            f"{record}: " + "; ".join(errors), record=record, reason="; ".join(errors),
            errors=errors,
        ) from exc


def _encode(value: object, cl: Any, record: str) -> Any:
    try:
        return converter.unstructure(value, cl)
    except RunxError as exc:
        attrs_ = {**exc.attrs, "record": record}
        raise type(exc)(f"{record}: {exc.message}", **attrs_) from exc


# --------------------------------------------------------------------------- facts


def _fact_class(fact: object) -> type[Any]:
    cls = type(fact)
    if FACT_BY_WIRE_NAME.get(getattr(cls, "WIRE_NAME", "")) is not cls:
        raise ValidationError(f"{cls.__name__} is not a fact", record=cls.__name__, reason="type")
    return cls


def fact_payload(fact: Fact) -> dict[str, JSONValue]:
    """Return the wire payload of *fact*: its fields as a JSON object (§2.12; RUN-WIR-2).

    Keys are lowerCamelCase, zero fields are omitted, JSON-text fields are embedded as
    JSON values, ``RunEnded.end`` is tagged; only ``RunCreated`` carries the run id.

    Raises:
        ValidationError: not a fact, or a field that cannot round-trip (wrong Python type,
            an int beyond ±(2^53-1), an invalid RunEnd); ``record`` is the wire name.
        CanonicalJSONError: a JSON-text field that is not canonical JSON text.
    """
    cls = _fact_class(fact)
    return cast(dict[str, JSONValue], _encode(fact, cls, cls.WIRE_NAME))


def encode_fact(fact: Fact) -> bytes:
    """Return the stored form of *fact*: ``typed_envelope(fact.WIRE_NAME, fact_payload(fact))``.

    E.g. ``InputAccepted(AgentInput("in-1", d))`` →
    ``v1:14:input_accepted:{"input":{"digest":"<d>","id":"in-1"}}`` (§2.12, §3.6;
    RUN-WIR-2, RUN-CMP-1).

    Raises:
        ValidationError / CanonicalJSONError: as :func:`fact_payload`.
    """
    cls = _fact_class(fact)
    return _envelope(cls.WIRE_NAME, fact_payload(fact))


def _envelope(record: str, payload: dict[str, JSONValue]) -> bytes:
    try:
        return typed_envelope(record, payload)
    except RunxError as exc:
        raise type(exc)(f"{record}: {exc.message}", **{**exc.attrs, "record": record}) from exc


def decode_fact_payload(wire_name: str, payload: object) -> Fact:
    """Build the fact named *wire_name* from its JSON payload, strictly (§2.12; RUN-WIR-2).

    *payload* is what ``parse_json_strict`` returns (numbers may be floats).

    Raises:
        DecodeError: unknown wire name, a payload that is not an object, unknown or
            missing fields, wrong JSON types, fractional or unsafe numbers for int fields,
            bad enum values, an invalid RunEnd union. ``record == wire_name``.
    """
    cls = FACT_BY_WIRE_NAME.get(wire_name)
    if cls is None:
        raise DecodeError(
            f"unknown fact type {wire_name!r}", record=wire_name, reason="unknown_type"
        )
    return cast(Fact, _decode(payload, cls, wire_name))


def decode_fact(data: bytes | bytearray | memoryview) -> Fact:
    """Decode stored fact bytes (a typed envelope) into a fact (§2.12; RUN-WIR-2, RUN-CMP-1).

    The wire name is read from the envelope and selects the fact type.

    Raises:
        DecodeError: a malformed envelope (prefix, version, name length, trailing bytes,
            non-strict JSON) or any payload failure of :func:`decode_fact_payload`;
            ``record`` is the wire name (``"fact"`` if it could not be read).
    """
    name, payload = read_envelope(data, record="fact")
    return decode_fact_payload(name, payload)


# --------------------------------------------------------------------------- commands


def _command_class(command: object) -> type[Any]:
    cls = type(command)
    if COMMAND_BY_WIRE_NAME.get(getattr(cls, "WIRE_NAME", "")) is not cls:
        raise ValidationError(
            f"{cls.__name__} is not a command", record=cls.__name__, reason="type"
        )
    return cls


def command_payload(command: Command) -> dict[str, JSONValue]:
    """Return the wire payload of *command* (§2.12; RUN-WIR-3), same rules as facts.

    Raises:
        ValidationError / CanonicalJSONError: as :func:`fact_payload`; ``record`` is the
            command's wire name.
    """
    cls = _command_class(command)
    return cast(dict[str, JSONValue], _encode(command, cls, cls.WIRE_NAME))


def encode_command(command: Command) -> bytes:
    """Return ``typed_envelope(command.WIRE_NAME, command_payload(command))`` (§2.12).

    Commands are encoded only for digests and golden tests; e.g.
    ``CancelRun("cancelled")`` → ``v1:10:cancel_run:{"reason":"cancelled"}`` (RUN-CMP-1).

    Raises:
        ValidationError / CanonicalJSONError: as :func:`command_payload`.
    """
    cls = _command_class(command)
    return _envelope(cls.WIRE_NAME, command_payload(command))


def decode_command_payload(wire_name: str, payload: object) -> Command:
    """Build the command named *wire_name* from its JSON payload, strictly (§2.12;
    RUN-WIR-3, RUN-CMP-1).

    Raises:
        DecodeError: as :func:`decode_fact_payload`; ``record == wire_name``.
    """
    cls = COMMAND_BY_WIRE_NAME.get(wire_name)
    if cls is None:
        raise DecodeError(
            f"unknown command type {wire_name!r}", record=wire_name, reason="unknown_type"
        )
    return cast(Command, _decode(payload, cls, wire_name))


def decode_command(data: bytes | bytearray | memoryview) -> Command:
    """Decode a command's typed envelope (the inverse of :func:`encode_command`) (§2.12;
    RUN-WIR-3, RUN-CMP-1).

    Raises:
        DecodeError: as :func:`decode_fact` (``"command"`` if the name could not be read).
    """
    name, payload = read_envelope(data, record="command")
    return decode_command_payload(name, payload)


# --------------------------------------------------------------------------- any value


def encode_value(value: object, cl: Any = None, *, record: str | None = None) -> Any:
    """Return the wire JSON of any protocol value (an attrs value, RunEnd, tuple …).

    *cl* is the declared type (default: ``type(value)``); *record* names the value in
    errors (default: its wire name or class name). Shapes follow the module rules; e.g.
    ``MachineState.current`` is tagged ``{"open":{}}`` / ``{"modelStep":…}`` /
    ``{"toolStep":…}`` or ``null``. For stores persisting values other than facts
    (RUN-WIR-2).

    Raises:
        ValidationError / CanonicalJSONError: as :func:`fact_payload`.
    """
    target = type(value) if cl is None else cl
    return _encode(value, target, record or _record_name(target))


def decode_value(cl: type[T], obj: object, *, record: str | None = None) -> T:
    """Build a value of type *cl* from its wire JSON, strictly (inverse of encode_value;
    RUN-WIR-2).

    Raises:
        DecodeError: as :func:`decode_fact_payload`; ``record`` is *record* or the type's
            wire or class name.
    """
    return cast(T, _decode(obj, cl, record or _record_name(cl)))


def _record_name(cl: Any) -> str:
    return str(getattr(cl, "WIRE_NAME", None) or getattr(cl, "__name__", None) or cl)
