"""Content digests and frozen bodies (spec §3.6, §3.7; RUN-WIR-4, RUN-CMP-1).

A body digest is ``content_digest(type_name, payload)``: the SHA-256 of the typed envelope
``v1:<len>:<type_name>:`` + JCS(payload). The envelope bytes are exactly what the
FrozenStore keeps, so ``sha256(stored bytes) == digest`` always.

| type name                | payload                                                    |
|--------------------------|------------------------------------------------------------|
| ``model_request``        | the ``ModelRequest`` JSON (body + ``model`` + ``tools``?)  |
| ``model_result``         | the ``ModelResult`` JSON (body + ``content``? …)           |
| ``tool_output``          | ``{"output": <value>}``; null or ``""`` refused             |
| ``tool_response_payload``| ``{"payload": <value>}``                                    |
| ``tool_definition``      | the ``ToolDefinition`` JSON (digest only)                  |
| ``tool_response_decision``| ``{"kind", "decision", "reason"?}`` (digest only)         |

Digest functions canonicalise content: a value whose JSON-text fields are valid but not
canonical digests like its canonical twin. Digests of immutable values are cached (they are
computed by ``decide`` and again when the commit freezes the same bodies).
"""

from __future__ import annotations

import functools
from typing import Any

import attrs

from ._codec import decode_value, encode_value
from .canonical import (
    JSONValue,
    canonical_json_text,
    content_digest,
    decode_frozen,
    normalize_json_text,
    parse_json_strict,
    sha256_digest,
    typed_envelope,
)
from .errors import CanonicalJSONError, DecodeError, ValidationError
from .values import (
    Digest,
    JSONText,
    ModelRequest,
    ModelResult,
    ResponseKind,
    ToolDefinition,
)

__all__ = [
    "MODEL_REQUEST",
    "MODEL_RESULT",
    "TOOL_OUTPUT",
    "TOOL_RESPONSE_PAYLOAD",
    "TOOL_DEFINITION",
    "TOOL_RESPONSE_DECISION",
    "FROZEN_TYPES",
    "DECISIONS",
    "model_request_json",
    "model_result_json",
    "tool_definition_json",
    "model_request_from_json",
    "model_result_from_json",
    "tool_definition_from_json",
    "digest_model_request",
    "digest_model_result",
    "digest_tool_output",
    "digest_tool_response_payload",
    "digest_tool_definition",
    "decision_digest",
    "encode_frozen",
    "decode_frozen_value",
    "model_request_from_frozen",
]

MODEL_REQUEST = "model_request"
MODEL_RESULT = "model_result"
TOOL_OUTPUT = "tool_output"
TOOL_RESPONSE_PAYLOAD = "tool_response_payload"
TOOL_DEFINITION = "tool_definition"
TOOL_RESPONSE_DECISION = "tool_response_decision"

#: The body types kept in the FrozenStore (§4.2, §4.10).
FROZEN_TYPES = frozenset({MODEL_REQUEST, MODEL_RESULT, TOOL_OUTPUT, TOOL_RESPONSE_PAYLOAD})

#: Legal ``decision`` values of a ``tool_response_decision``.
DECISIONS = frozenset({"approved", "rejected"})


def _require(value: object, cls: type[Any], record: str) -> None:
    if type(value) is not cls:
        raise ValidationError(
            f"expected {cls.__name__}, got {type(value).__name__}", record=record, reason="type"
        )


def _encode_normalised(value: Any, cls: type[Any], record: str, normalise: Any) -> Any:
    """Encode strictly; if only canonical form is missing, canonicalise and retry."""
    try:
        return encode_value(value, cls, record=record)
    except CanonicalJSONError as exc:
        if getattr(exc, "reason", None) != "not_canonical":
            raise
    return encode_value(normalise(value), cls, record=record)


# --------------------------------------------------------------------------- JSON shapes


def _normal_definition(d: ToolDefinition) -> ToolDefinition:
    return attrs.evolve(d, parameters=normalize_json_text(d.parameters))


def _normal_request(req: ModelRequest) -> ModelRequest:
    return attrs.evolve(
        req,
        body=normalize_json_text(req.body),
        tools=tuple(_normal_definition(t) for t in req.tools),
    )


def _normal_result(res: ModelResult) -> ModelResult:
    return attrs.evolve(
        res,
        body=normalize_json_text(res.body),
        tool_calls=tuple(
            attrs.evolve(c, arguments=normalize_json_text(c.arguments)) for c in res.tool_calls
        ),
    )


def tool_definition_json(definition: ToolDefinition) -> dict[str, JSONValue]:
    """Return ``{"name", "description"?, "parameters"?}`` for *definition* (§3.7).

    ``parameters`` is embedded as a JSON value and omitted when it is ``{}``. The preimage
    of ``definition_digest`` (RUN-WIR-4).

    Raises:
        ValidationError: not a ToolDefinition, or wrong field types.
        CanonicalJSONError: ``parameters`` is not strict JSON text.
    """
    _require(definition, ToolDefinition, TOOL_DEFINITION)
    result: dict[str, JSONValue] = _encode_normalised(
        definition, ToolDefinition, TOOL_DEFINITION, _normal_definition
    )
    return result


def model_request_json(request: ModelRequest) -> dict[str, JSONValue]:
    """Return the ``model_request`` JSON: ``request.body`` merged with ``"model"`` and
    ``"tools"`` (omitted if empty; each a :func:`tool_definition_json`) (§3.7; RUN-WIR-4).

    Raises:
        ValidationError: not a ModelRequest, a body that is not a JSON object, or a body
            holding the keys ``"model"`` or ``"tools"``.
        CanonicalJSONError: a JSON-text field (body, parameters) is not strict JSON.
    """
    _require(request, ModelRequest, MODEL_REQUEST)
    result: dict[str, JSONValue] = _encode_normalised(
        request, ModelRequest, MODEL_REQUEST, _normal_request
    )
    return result


def model_result_json(result: ModelResult) -> dict[str, JSONValue]:
    """Return the ``model_result`` JSON: ``result.body`` merged with ``"content"``?,
    ``"toolCalls"``? (``[{"arguments", "id", "name"}]``), ``"finishReason"``? and
    ``"usage"``? (``{"inputTokens"?, "outputTokens"?}``), zero fields omitted (§3.7;
    RUN-WIR-4).

    Raises:
        ValidationError: not a ModelResult, a body that is not a JSON object, or a body
            holding one of the typed keys.
        CanonicalJSONError: a JSON-text field (body, arguments) is not strict JSON.
    """
    _require(result, ModelResult, MODEL_RESULT)
    obj: dict[str, JSONValue] = _encode_normalised(
        result, ModelResult, MODEL_RESULT, _normal_result
    )
    return obj


def tool_definition_from_json(obj: object) -> ToolDefinition:
    """Inverse of :func:`tool_definition_json`, strict (§3.7; RUN-WIR-4).

    Raises:
        DecodeError: not an object, unknown or missing keys, wrong types
            (``record="tool_definition"``).
    """
    return decode_value(ToolDefinition, obj, record=TOOL_DEFINITION)


def model_request_from_json(obj: object) -> ModelRequest:
    """Inverse of :func:`model_request_json`: ``model`` (required string) and ``tools``
    (optional array of tool definitions) are read; every other key forms the canonical
    ``body`` (§3.7; RUN-WIR-4). Used by ``RunStore.frozen_request``.

    Raises:
        DecodeError: not an object, ``model`` missing or not a string, a malformed tool
            definition (``record="model_request"``).
    """
    return decode_value(ModelRequest, obj, record=MODEL_REQUEST)


def model_result_from_json(obj: object) -> ModelResult:
    """Inverse of :func:`model_result_json`: the typed keys are read strictly, every other
    key forms the canonical ``body`` (§3.7; RUN-WIR-4).

    Raises:
        DecodeError: not an object, wrong types of the typed keys, malformed tool calls or
            usage (``record="model_result"``).
    """
    return decode_value(ModelResult, obj, record=MODEL_RESULT)


# --------------------------------------------------------------------------- frozen bodies


def _frozen(type_name: str, payload: object) -> tuple[Digest, bytes]:
    data = typed_envelope(type_name, payload)
    return sha256_digest(data), data


@functools.lru_cache(maxsize=64)
def _frozen_request(request: ModelRequest) -> tuple[Digest, bytes]:
    return _frozen(MODEL_REQUEST, model_request_json(request))


@functools.lru_cache(maxsize=64)
def _frozen_result(result: ModelResult) -> tuple[Digest, bytes]:
    return _frozen(MODEL_RESULT, model_result_json(result))


def _require_text(value: object, record: str) -> None:
    if not isinstance(value, str):
        raise ValidationError(
            f"{record} must be JSON text (str), got {type(value).__name__}",
            record=record,
            reason="type",
        )


def _output_value(output: JSONText) -> JSONValue:
    value = parse_json_strict(output)
    if value is None or value == "":
        raise ValidationError(
            "tool output must not be null or empty", record=TOOL_OUTPUT, reason="empty_output"
        )
    return value


@functools.lru_cache(maxsize=32)
def _frozen_output(output: JSONText) -> tuple[Digest, bytes]:
    return _frozen(TOOL_OUTPUT, {"output": _output_value(output)})


@functools.lru_cache(maxsize=32)
def _frozen_payload(payload: JSONText) -> tuple[Digest, bytes]:
    return _frozen(TOOL_RESPONSE_PAYLOAD, {"payload": parse_json_strict(payload)})


def digest_model_request(request: ModelRequest) -> Digest:
    """Return ``content_digest("model_request", model_request_json(request))`` (§3.6).

    Used for ``request_digest`` (RUN-WIR-4, RUN-MCH-2). Cached per request value.

    Raises:
        ValidationError / CanonicalJSONError: as :func:`model_request_json`.
    """
    _require(request, ModelRequest, MODEL_REQUEST)
    return _frozen_request(request)[0]


def digest_model_result(result: ModelResult) -> Digest:
    """Return ``content_digest("model_result", model_result_json(result))`` (§3.6).

    Used for ``result_digest`` (RUN-WIR-4). Cached per result value.

    Raises:
        ValidationError / CanonicalJSONError: as :func:`model_result_json`.
    """
    _require(result, ModelResult, MODEL_RESULT)
    return _frozen_result(result)[0]


def digest_tool_output(output: JSONText) -> Digest:
    """Return ``content_digest("tool_output", {"output": <value of output>})`` (§3.6).

    *output* is JSON text (canonicalised here). Used for ``output_digest`` (RUN-WIR-4).

    Raises:
        ValidationError: the output is ``null`` or the empty string ``""`` (C10).
        CanonicalJSONError: *output* is not strict JSON text.
    """
    _require_text(output, TOOL_OUTPUT)
    return _frozen_output(output)[0]


def digest_tool_response_payload(payload: JSONText) -> Digest:
    """Return ``content_digest("tool_response_payload", {"payload": <value>})`` (§3.6).

    The ``response_digest`` an external response must carry (C15; RUN-WIR-4).

    Raises:
        ValidationError: *payload* is not a str.
        CanonicalJSONError: *payload* is not strict JSON text.
    """
    _require_text(payload, TOOL_RESPONSE_PAYLOAD)
    return _frozen_payload(payload)[0]


@functools.lru_cache(maxsize=1024)
def _definition_digest(definition: ToolDefinition) -> Digest:
    return content_digest(TOOL_DEFINITION, tool_definition_json(definition))


def digest_tool_definition(definition: ToolDefinition) -> Digest:
    """Return ``content_digest("tool_definition", tool_definition_json(definition))``.

    The ``definition_digest`` of a ToolSpec (C2; RUN-WIR-4). Cached per definition.

    Raises:
        ValidationError / CanonicalJSONError: as :func:`tool_definition_json`.
    """
    _require(definition, ToolDefinition, TOOL_DEFINITION)
    return _definition_digest(definition)


@functools.lru_cache(maxsize=1024)
def _decision_digest(kind: str, decision: str, reason: str) -> Digest:
    payload: dict[str, str] = {"decision": decision, "kind": kind}
    if reason:
        payload["reason"] = reason
    return content_digest(TOOL_RESPONSE_DECISION, payload)


def decision_digest(kind: ResponseKind | str, decision: str, reason: str = "") -> Digest:
    """Return the ``response_digest`` of an approval or rejection (§3.6; RUN-WIR-4).

    ``content_digest("tool_response_decision", {"kind": kind, "decision": decision,
    "reason"?: reason})``; ``reason`` is omitted when empty. *kind* is a ResponseKind or
    its wire string (``approval`` / ``external_response``); *decision* is ``approved`` or
    ``rejected``. Cached.

    Raises:
        ValidationError: unknown kind or decision, or a non-str reason.
    """
    kind_value = kind.value if isinstance(kind, ResponseKind) else kind
    if not isinstance(kind_value, str) or kind_value not in {k.value for k in ResponseKind}:
        raise ValidationError(f"unknown response kind {kind!r}", reason="kind")
    if decision not in DECISIONS:
        raise ValidationError(f"unknown decision {decision!r}", reason="decision")
    if not isinstance(reason, str):
        raise ValidationError("decision reason must be a str", reason="reason")
    return _decision_digest(kind_value, decision, reason)


def encode_frozen(type_name: str, value: object) -> tuple[Digest, bytes]:
    """Return ``(digest, envelope bytes)`` of a body to put in the FrozenStore (§4.2).

    *value* is a ``ModelRequest`` (``model_request``), a ``ModelResult``
    (``model_result``), or JSON text (``tool_output``, ``tool_response_payload``). The bytes
    are ``typed_envelope(type_name, payload)`` and ``digest == sha256(bytes)``; the digest
    equals the matching ``digest_*`` function's (RUN-WIR-4, INV-38). Cached.

    Raises:
        ValidationError: unknown body type, a value of the wrong type, or a null/empty tool
            output.
        CanonicalJSONError: the value cannot be canonicalised.
    """
    if type_name == MODEL_REQUEST:
        _require(value, ModelRequest, type_name)
        return _frozen_request(value)
    if type_name == MODEL_RESULT:
        _require(value, ModelResult, type_name)
        return _frozen_result(value)
    if type_name == TOOL_OUTPUT:
        _require_text(value, type_name)
        return _frozen_output(value)
    if type_name == TOOL_RESPONSE_PAYLOAD:
        _require_text(value, type_name)
        return _frozen_payload(value)
    raise ValidationError(
        f"{type_name!r} is not a frozen body type", record=type_name, reason="unknown_type"
    )


def _single_key(payload: JSONValue, type_name: str, key: str) -> JSONValue:
    if not isinstance(payload, dict) or set(payload) != {key}:
        raise DecodeError(
            f"{type_name} payload must be an object with exactly the key {key!r}",
            record=type_name,
            reason="shape",
        )
    return payload[key]


def decode_frozen_value(
    type_name: str, digest: Digest, data: bytes | bytearray | memoryview
) -> ModelRequest | ModelResult | JSONText:
    """Decode a stored body back into its value (inverse of :func:`encode_frozen`).

    Checks the SHA-256 against *digest* and the envelope strictly (``decode_frozen``),
    then the payload shape. Returns a ModelRequest, a ModelResult, or the canonical JSON
    text of the tool output / response payload (§3.6, §4.10; RUN-WIR-4).

    Raises:
        DecodeError: unknown body type, digest mismatch, malformed envelope or payload
            (``record == type_name``).
    """
    if type_name not in FROZEN_TYPES:
        raise DecodeError(
            f"{type_name!r} is not a frozen body type", record=type_name, reason="unknown_type"
        )
    payload = decode_frozen(type_name, digest, data)
    if type_name == MODEL_REQUEST:
        return model_request_from_json(payload)
    if type_name == MODEL_RESULT:
        return model_result_from_json(payload)
    if type_name == TOOL_OUTPUT:
        output = _single_key(payload, type_name, "output")
        if output is None or output == "":
            raise DecodeError(
                "tool output must not be null or empty", record=type_name, reason="empty_output"
            )
        return canonical_json_text(output)
    return canonical_json_text(_single_key(payload, type_name, "payload"))


@functools.lru_cache(maxsize=64)
def _request_from_frozen(digest: Digest, data: bytes) -> ModelRequest:
    return model_request_from_json(decode_frozen(MODEL_REQUEST, digest, data))


def model_request_from_frozen(digest: Digest, data: bytes | bytearray | memoryview
                              ) -> ModelRequest:
    """``model_request_from_json(decode_frozen("model_request", digest, data))``: the
    frozen request stored as *data* under *digest* (§3.7, §4.10; RUN-WIR-4), read strictly
    (SHA-256 against *digest*, the envelope, the payload).

    Memoised on the pair (*digest*, the bytes themselves): a hit is a pair already read
    successfully, so the answer is the same; other bytes under the same digest (a damaged
    body) or the same bytes under another digest miss and are checked in full. Refusals
    are not memoised. The loop reads the request it just froze once per model step; this
    keeps it from parsing and decoding it again each time.

    Raises:
        DecodeError: as :func:`~runx_actors.protocol.canonical.decode_frozen` and
            :func:`model_request_from_json` (``record="model_request"``).
    """
    return _request_from_frozen(digest, data if type(data) is bytes else bytes(data))
