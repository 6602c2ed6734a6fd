"""Canonical JSON, strict JSON reading and typed envelopes (spec §3.5, §3.6, §3.8).

These byte formats are digest preimages of Agent Run Protocol v1 and are frozen forever
(RUN-CMT-8, RUN-CMP-1):

* ``canonical_json`` is RFC 8785 (JCS), produced by the ``rfc8785`` library after the
  checks of §3.5 (bool before int, integers beyond ±(2^53-1) rounded to the nearest
  double [D-11], non-finite numbers and lone surrogates refused). ``rfc8785`` is the
  reference; a value in the *plain* domain (below) is written by ``orjson`` instead,
  which ``tests/protocol/test_canonical_fast.py`` proves byte-equal to the reference
  there. Everything else (any non-integral float, a non-ASCII key, an unsafe integer,
  a type that is not exactly a JSON type) takes the reference path.
* ``parse_json_strict`` is the only JSON reader of the protocol: UTF-8 only, no duplicate
  keys, no lone-surrogate escapes, no ``NaN``/``Infinity``, no trailing data, every number
  read as a double.
* ``typed_envelope`` is ``v<version>:<len(name)>:<name>:`` + JCS(payload); its SHA-256 is
  the ``sha256:`` content digest (RUN-WIR-4).

Everything here is pure and synchronous (tier T1).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from typing import TypeAlias, cast

import orjson
import rfc8785

from .errors import CanonicalJSONError, DecodeError, ValidationError
from .values import Digest, JSONText, is_digest

__all__ = [
    "JSONValue",
    "MAX_SAFE_INTEGER",
    "ENVELOPE_VERSION",
    "canonical_json",
    "reference_canonical_json",
    "canonical_json_text",
    "parse_json_strict",
    "normalize_json_text",
    "typed_envelope",
    "sha256_digest",
    "content_digest",
    "read_envelope",
    "decode_envelope",
    "decode_frozen",
    "freeze_tool_arguments",
]

#: A JSON document as Python data. ``parse_json_strict`` yields floats for every number;
#: ``canonical_json`` also accepts ints, tuples and any ``Mapping`` with ``str`` keys.
JSONValue: TypeAlias = "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"

#: Largest integer magnitude written as an exact integer (2^53 - 1) (§3.5, D-11).
MAX_SAFE_INTEGER = 2**53 - 1

#: The only payload version of Agent Run Protocol v1 (RUN-CMP-1).
ENVELOPE_VERSION = 1

_JSON_WS = re.compile(r"[ \t\n\r]*")
_DIGITS = frozenset(b"0123456789")


# --------------------------------------------------------------------------- writing


def _check_text(value: str, what: str) -> None:
    if value.isascii():
        return
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise CanonicalJSONError(
            f"{what} is not encodable as UTF-8 (lone surrogate)", reason="lone_surrogate"
        ) from exc


def _prepare(value: object) -> object:
    """Return *value* as plain JSON data rfc8785 accepts, applying the §3.5 pre-checks."""
    # exact-type fast paths first: they cover everything parse_json_strict produces and
    # what the codec's unstructuring yields (the hot path: every fact of every commit)
    t = type(value)
    if t is str:
        _check_text(value, "string")  # type: ignore[arg-type]
        return value
    if t is dict:
        return _prepare_mapping(value)  # type: ignore[arg-type]
    if t is list:
        return [_prepare(item) for item in value]  # type: ignore[attr-defined]
    if t is int and -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:  # type: ignore[operator]
        return value
    if t is float:
        return _finite(value)  # type: ignore[arg-type]
    if value is None or isinstance(value, bool):  # bool before int (§3.5)
        return value
    if isinstance(value, str):
        _check_text(value, "string")
        return value
    if isinstance(value, int):
        if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
            return int(value)
        try:
            return float(value)  # round to the nearest double [D-11]
        except OverflowError as exc:
            raise CanonicalJSONError(
                "integer too large for a double", reason="integer_overflow"
            ) from exc
    if isinstance(value, float):
        return _finite(float(value))
    return _prepare_container(value)


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise CanonicalJSONError(f"{value!r} is not a JSON number", reason="non_finite")
    return value


def _prepare_mapping(value: Mapping[object, object]) -> dict[str, object]:
    """A JSON object: string keys (checked like text), values prepared in order."""
    out: dict[str, object] = {}
    for key, item in value.items():
        if type(key) is not str and not isinstance(key, str):
            raise CanonicalJSONError(
                f"object key {key!r} is not a string", reason="non_string_key"
            )
        _check_text(key, "object key")
        out[key] = _prepare(item)
    return out


def _prepare_container(value: object) -> object:
    if isinstance(value, (list, tuple)):
        return [_prepare(item) for item in value]
    if isinstance(value, Mapping):
        return _prepare_mapping(value)
    raise CanonicalJSONError(
        f"{type(value).__name__} is not a JSON value", reason="unsupported_type"
    )


# The fast path. A value is *plain* when it is built only from exactly ``None``, ``bool``,
# ``str``, ``int`` within ±(2^53-1), ``list``/``tuple`` and ``dict`` with ASCII ``str``
# keys, plus ``float`` values that are integral and within ±(2^53-1) (what strict parsing
# yields for JSON integers). On that domain RFC 8785 and ``orjson`` with sorted keys agree
# byte for byte, once integral floats are written as ints (JCS prints such a double as its
# integer digits, "-0" as "0"): ASCII keys sort the same by UTF-16 code units and by
# UTF-8 bytes, both write the same compact separators and the same string escapes (the two
# quotes, backslash, ``\b \t \n \f \r`` and ``\u00xx`` for the other controls, every
# other code point as UTF-8). A lone surrogate, nesting orjson refuses (255 levels) or
# anything unexpected makes orjson raise, and the value goes to the reference path, which
# either writes it or raises the §3.5 error.

_PLAIN, _FLOATS, _SLOW = 0, 1, 2
_SORT_KEYS = orjson.OPT_SORT_KEYS


def _classify(value: object) -> int:
    """``_PLAIN``, ``_FLOATS`` (plain once integral floats become ints) or ``_SLOW``."""
    t = type(value)
    if t is str or t is bool or value is None:
        return _PLAIN
    if t is int:
        return _PLAIN if -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER else _SLOW  # type: ignore[operator]
    if t is dict:
        found = _PLAIN
        for key, item in value.items():  # type: ignore[attr-defined]
            if type(key) is not str or not key.isascii():
                return _SLOW
            kind = _classify(item)
            if kind == _SLOW:
                return _SLOW
            found |= kind
        return found
    if t is list or t is tuple:
        found = _PLAIN
        for item in value:  # type: ignore[attr-defined]
            kind = _classify(item)
            if kind == _SLOW:
                return _SLOW
            found |= kind
        return found
    if t is float:
        number = cast(float, value)
        return _FLOATS if number.is_integer() and abs(number) <= MAX_SAFE_INTEGER else _SLOW
    return _SLOW


def _integral(value: object) -> object:
    """A copy of a ``_FLOATS`` value with its (integral, safe) floats as ints."""
    t = type(value)
    if t is float:
        return int(value)  # type: ignore[call-overload]
    if t is dict:
        return {key: _integral(item) for key, item in value.items()}  # type: ignore[attr-defined]
    if t is list or t is tuple:
        return [_integral(item) for item in value]  # type: ignore[attr-defined]
    return value


def _fast_canonical(value: object) -> bytes | None:
    """The canonical bytes of a plain *value* via orjson, or None (take the reference)."""
    try:
        kind = _classify(value)
        if kind == _SLOW:
            return None
        return orjson.dumps(_integral(value) if kind == _FLOATS else value, option=_SORT_KEYS)
    except (TypeError, ValueError, RecursionError):  # orjson.JSONEncodeError is a TypeError
        return None


def reference_canonical_json(value: object) -> bytes:
    """``canonical_json`` by the reference path only (``rfc8785`` after the §3.5 checks).

    The oracle the fast path is tested against; same contract as :func:`canonical_json`.

    Raises:
        CanonicalJSONError: as :func:`canonical_json`.
    """
    try:
        prepared = _prepare(value)
        return rfc8785.dumps(prepared)  # type: ignore[arg-type]
    except CanonicalJSONError:
        raise
    except RecursionError as exc:
        raise CanonicalJSONError("value nested too deeply", reason="too_deep") from exc
    except (rfc8785.CanonicalizationError, UnicodeError, ValueError, TypeError) as exc:
        raise CanonicalJSONError(f"cannot canonicalise: {exc}", reason="rfc8785") from exc


def canonical_json(value: object) -> bytes:
    """Serialise *value* as RFC 8785 canonical JSON (UTF-8 bytes) (§3.5; RUN-CMP-1).

    *value* is JSON data: ``None``, ``bool``, ``int``, ``float``, ``str``, lists or tuples,
    and mappings with ``str`` keys. Integers beyond ±(2^53-1) are converted to the nearest
    double first [D-11].

    Raises:
        CanonicalJSONError: NaN or ±Infinity, an integer too large for a double, a string
            or key with a lone surrogate, a non-string key, an unsupported type, or
            nesting too deep to serialise.
    """
    fast = _fast_canonical(value)
    if fast is not None:
        return fast
    return reference_canonical_json(value)


def canonical_json_text(value: object) -> JSONText:
    """Return ``canonical_json(value)`` as ``str``: the form every ``JSONText`` holds
    (§0.4, §3.5; RUN-CMP-1).

    Raises:
        CanonicalJSONError: as :func:`canonical_json`.
    """
    return canonical_json(value).decode("utf-8")


# --------------------------------------------------------------------------- reading


class JSONRefusal(Exception):
    """Raised from the strict decoder hooks below (``reason`` names the kind of refusal:
    ``duplicate_key``, ``non_finite``); each reader turns it into its own typed error
    (``CanonicalJSONError`` here, ``MalformedInputError`` in ``runx_actors._strictread``).
    Shared so every strict JSON reader of the project refuses the same things (RUN-WIR-2)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def strict_object_pairs(pairs: list[tuple[str, object]]) -> dict[str, object]:
    """``object_pairs_hook`` that refuses a duplicate key (raises JSONRefusal)."""
    obj = dict(pairs)
    if len(obj) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise JSONRefusal(f"duplicate key {key[:64]!r}", "duplicate_key")
            seen.add(key)
    return obj


def strict_float(text: str) -> float:
    """``parse_float`` that refuses a number outside the double range (JSONRefusal)."""
    number = float(text)
    if not math.isfinite(number):
        raise JSONRefusal(f"number {text[:32]!r} is outside the range of a double",
                          "non_finite")
    return number


def refuse_constant(name: str) -> object:
    """``parse_constant`` that refuses ``NaN``/``Infinity``/``-Infinity`` (JSONRefusal)."""
    raise JSONRefusal(f"{name} is not JSON", "non_finite")


_Refused = JSONRefusal
_object_pairs = strict_object_pairs
_number = strict_float
_constant = refuse_constant


_DECODER = json.JSONDecoder(
    object_pairs_hook=_object_pairs,
    parse_float=_number,
    parse_int=_number,  # every number is a double, whoever parses it (§3.5)
    parse_constant=_constant,
    strict=True,
)


def _check_strings(value: object) -> None:
    """Refuse strings (values and keys) holding surrogate code points."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            _check_text(item, "string")
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            for key, sub in item.items():
                _check_text(key, "object key")
                stack.append(sub)


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def _decode_text(data: bytes | bytearray | memoryview | str) -> str:
    if isinstance(data, str):
        return data
    if isinstance(data, (bytes, bytearray, memoryview)):
        try:
            return bytes(data).decode("utf-8")
        except UnicodeDecodeError as exc:
            raise CanonicalJSONError("JSON text is not valid UTF-8", reason="utf8") from exc
    raise CanonicalJSONError(
        f"JSON text must be bytes or str, not {type(data).__name__}", reason="unsupported_type"
    )


def _skip_whitespace(text: str, pos: int) -> int:
    match = _JSON_WS.match(text, pos)
    return pos if match is None else match.end()


def _parse(text: str, *, allow_whitespace: bool) -> JSONValue:
    start = _skip_whitespace(text, 0) if allow_whitespace else 0
    try:
        value, end = _DECODER.raw_decode(text, start)
    except _Refused as exc:
        raise CanonicalJSONError(str(exc), reason=exc.reason) from None
    except json.JSONDecodeError as exc:
        raise CanonicalJSONError(f"invalid JSON: {exc}", reason="syntax") from None
    except RecursionError:
        raise CanonicalJSONError("JSON nested too deeply", reason="too_deep") from None
    if allow_whitespace:
        end = _skip_whitespace(text, end)
    if end != len(text):
        raise CanonicalJSONError(
            f"trailing data after the JSON value at offset {end}", reason="trailing_data"
        )
    if "\\u" in text or not (text.isascii() or _encodable(text)):
        # only an escape or a raw surrogate in the text can put one in a string
        _check_strings(value)
    return cast(JSONValue, value)


def parse_json_strict(data: bytes | bytearray | memoryview | str) -> JSONValue:
    """Read one JSON document strictly (§3.5; RUN-WIR-2, RUN-CMP-1): the protocol's only
    JSON reader.

    *data* is UTF-8 bytes or text. Whitespace around the value is allowed. Objects become
    ``dict``, arrays ``list`` and every number a ``float`` (``parse_int=float``), so a
    value canonicalises the same way whichever side parsed it.

    Raises:
        CanonicalJSONError: invalid UTF-8, a syntax error, a duplicate object key, a
            string or key holding a lone surrogate (escaped or raw), ``NaN``/``Infinity``
            or a number outside the double range, trailing non-whitespace data, or nesting
            too deep. ``err.reason`` names the kind of failure.
    """
    return _parse(_decode_text(data), allow_whitespace=True)


def normalize_json_text(data: bytes | bytearray | memoryview | str) -> JSONText:
    """Return the canonical text of the strict JSON document *data* (§0.4, §3.5; RUN-CMP-1).

    Raises:
        CanonicalJSONError: *data* is not strict JSON (see :func:`parse_json_strict`).
    """
    return canonical_json_text(parse_json_strict(data))


# --------------------------------------------------------------------------- envelopes


def _type_name_bytes(type_name: str) -> bytes:
    if not isinstance(type_name, str) or not type_name:
        raise ValidationError("envelope type name must be a non-empty string", type_name=type_name)
    try:
        return type_name.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValidationError("envelope type name is not UTF-8", type_name=type_name) from exc


def _check_version(version: int) -> None:
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise ValidationError("envelope version must be a positive int", version=version)


def typed_envelope(type_name: str, payload: object, version: int = ENVELOPE_VERSION) -> bytes:
    """Return ``b"v<version>:<len>:<type_name>:" + canonical_json(payload)`` (§3.6; RUN-WIR-4).

    ``<len>`` is the UTF-8 byte length of *type_name* in decimal. This is the stored form
    of facts (with their wire name) and of frozen bodies, and the preimage of every
    content digest.

    Raises:
        ValidationError: empty or non-UTF-8 *type_name*, or a version that is not a
            positive int.
        CanonicalJSONError: *payload* cannot be canonicalised.
    """
    name = _type_name_bytes(type_name)
    _check_version(version)
    return b"v%d:%d:%s:" % (version, len(name), name) + canonical_json(payload)


def sha256_digest(data: bytes | bytearray | memoryview) -> Digest:
    """Return ``"sha256:" + lowercase hex SHA-256(data)``: the Digest of stored bytes
    (§3.6, §4.10; RUN-WIR-4). Raises nothing for bytes-like *data* (TypeError otherwise).
    """
    return "sha256:" + hashlib.sha256(data).hexdigest()


def content_digest(type_name: str, payload: object) -> Digest:
    """Return ``"sha256:" + hex(SHA-256(typed_envelope(type_name, payload)))`` (§3.6; RUN-WIR-4).

    The digest covers the whole envelope (version prefix and type name included).

    Raises:
        ValidationError / CanonicalJSONError: as :func:`typed_envelope`.
    """
    return sha256_digest(typed_envelope(type_name, payload))


def _read_decimal(data: bytes, start: int, record: str, what: str) -> tuple[int, int]:
    """Read ``<decimal>:`` at *start*; return (number, index after the colon)."""
    end = data.find(b":", start)
    digits = data[start:end] if end >= 0 else b""
    if (
        not digits
        or len(digits) > 9
        or any(b not in _DIGITS for b in digits)
        or (len(digits) > 1 and digits[0] == ord("0"))
    ):
        raise DecodeError(f"envelope {what} is malformed", record=record, reason=f"bad_{what}")
    return int(digits), end + 1


def _split(data: object, record: str, version: int) -> tuple[str, bytes]:
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError(
            f"envelope must be bytes, not {type(data).__name__}", record=record, reason="type"
        )
    raw = bytes(data)
    if not raw.startswith(b"v"):
        raise DecodeError("envelope does not start with 'v'", record=record, reason="bad_prefix")
    found, pos = _read_decimal(raw, 1, record, "version")
    if found != version:
        raise DecodeError(
            f"envelope version v{found} is not v{version}", record=record, reason="version"
        )
    length, pos = _read_decimal(raw, pos, record, "length")
    if length == 0 or pos + length >= len(raw) or raw[pos + length] != ord(":"):
        raise DecodeError(
            "envelope type-name length does not match", record=record, reason="bad_length"
        )
    try:
        name = raw[pos : pos + length].decode("utf-8")
    except UnicodeDecodeError:
        raise DecodeError("envelope type name is not UTF-8", record=record, reason="utf8") from None
    return name, raw[pos + length + 1 :]


def _parse_body(body: bytes, record: str) -> JSONValue:
    try:
        return _parse(_decode_text(body), allow_whitespace=False)
    except CanonicalJSONError as exc:
        raise DecodeError(
            f"envelope payload is not strict JSON: {exc}",
            record=record,
            reason=getattr(exc, "reason", "json"),
        ) from exc


def read_envelope(
    data: bytes | bytearray | memoryview,
    *,
    version: int = ENVELOPE_VERSION,
    record: str = "envelope",
) -> tuple[str, JSONValue]:
    """Split a typed envelope into ``(type_name, payload)`` (§2.12, §3.6; RUN-WIR-2).

    Used where the type is read from the data (``decode_fact``). The payload JSON must be
    strict and fill the rest of *data* exactly (no whitespace, no trailing bytes).

    Raises:
        DecodeError: wrong prefix or version, a type-name length that does not match,
            non-UTF-8 name, or a payload that is not strict JSON. ``record`` is the type
            name when it could be read, else *record*.
    """
    name, body = _split(data, record, version)
    return name, _parse_body(body, name)


def decode_envelope(
    type_name: str, data: bytes | bytearray | memoryview, *, version: int = ENVELOPE_VERSION
) -> JSONValue:
    """Decode ``typed_envelope(type_name, payload)`` strictly and return the payload (§3.6).

    Checks the ``v1:`` prefix, the name length, that the name equals *type_name*, and that
    the rest is one strict JSON value with no trailing bytes (RUN-WIR-2, RUN-WIR-4).

    Raises:
        DecodeError: any mismatch; ``record == type_name``, ``reason`` names the check.
    """
    name, body = _split(data, type_name, version)
    if name != type_name:
        raise DecodeError(
            f"envelope holds {name!r}, expected {type_name!r}", record=type_name, reason="type"
        )
    return _parse_body(body, type_name)


def decode_frozen(
    type_name: str, digest: Digest, data: bytes | bytearray | memoryview
) -> JSONValue:
    """Decode a frozen body: check ``sha256(data) == digest``, then :func:`decode_envelope`.

    Returns the payload (§3.6, §4.10; RUN-WIR-4).

    Raises:
        DecodeError: *digest* is not ``sha256:`` + 64 lowercase hex, the data does not hash
            to it (``reason="digest_mismatch"``), or the envelope does not decode.
    """
    if not is_digest(digest):
        raise DecodeError(f"{digest!r} is not a digest", record=type_name, reason="bad_digest")
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise DecodeError("frozen data must be bytes", record=type_name, reason="type")
    if sha256_digest(data) != digest:
        raise DecodeError(
            "frozen data does not hash to its digest", record=type_name, reason="digest_mismatch"
        )
    return decode_envelope(type_name, data)


# --------------------------------------------------------------------------- tool arguments


def freeze_tool_arguments(raw: str | bytes | bytearray | memoryview) -> JSONText:
    """Turn the arguments a model produced into a binding's canonical ``arguments`` (§3.8).

    * text ``parse_json_strict`` accepts (any JSON value) → its canonical text;
    * exactly ``""`` → ``"{}"`` (whitespace-only text is "other text");
    * any other text → the canonical JSON *string* holding the raw text (the tool later
      fails it as ``invalid_arguments``).

    Supports RUN-MCH-2 (canonical arguments).

    Raises:
        CanonicalJSONError: bytes that are not valid UTF-8, or text with a lone surrogate
            (the whole model result is then malformed, §5.8).
    """
    text = _decode_text(raw)
    _check_text(text, "tool arguments")
    if text == "":
        return "{}"
    try:
        value = _parse(text, allow_whitespace=True)
    except CanonicalJSONError:
        return canonical_json_text(text)
    return canonical_json_text(value)
