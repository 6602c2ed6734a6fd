"""Receipt canonical JSON ``runx.receipt.c14n.v1`` (loop-host §4.1) and its hashes.

``C(x)`` is, byte for byte, ``json.dumps(x, sort_keys=True, separators=(",", ":"),
ensure_ascii=False).encode("utf-8")``:

* keys sorted by code point (UTF-8 byte order, *not* the UTF-16 order of JCS);
* strings with plain JSON escapes and raw UTF-8 for non-ASCII; lone surrogates rejected;
* ints written as they are; a float with an integral value written as an int.

Two modes differ only for floats. The **sealer** (``strict=True``) accepts a float only if
it is integral and within ±2^53 (where the int form and the JS ``JSON.stringify`` form
agree) and rejects every other float, NaN and infinity with a ``TypeError``
(:class:`ReceiptCanonicalizationError`). The **verifier** (``strict=False``) writes any
finite float of a foreign receipt with ECMAScript ``Number::toString``, which is what the
``rfc8785`` library implements for numbers.

This is deliberately *not* the inner layer's JCS (``runx_actors.protocol.canonical``):
§4.1 forbids mixing the two.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from typing import Any

import rfc8785

from ..._strictread import loads_json
from ._errors import ReceiptCanonicalizationError
from ._json import pointer

__all__ = [
    "C14N_ID",
    "receipt_canonical_json",
    "receipt_hash",
    "bytes_hash",
    "parse_receipt_json",
]

#: The ``canonicalization`` value of every receipt we seal (§4.2).
C14N_ID = "runx.receipt.c14n.v1"

#: Largest integral float the sealer writes (§4.1; the int and JS forms agree up to here).
_MAX_EXACT_FLOAT = float(2**53)

_encode_string = json.JSONEncoder(ensure_ascii=False).encode


def _check_text(text: str, path: list[str | int]) -> None:
    if text.isascii():
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise ReceiptCanonicalizationError(
            "string holds a lone surrogate", reason="lone_surrogate", path=pointer(*path)
        ) from None


def _float(value: float, strict: bool, path: list[str | int]) -> str:
    if not math.isfinite(value):
        raise ReceiptCanonicalizationError(
            f"{value!r} is not a JSON number", reason="non_finite", path=pointer(*path)
        )
    if strict:
        if not value.is_integer() or abs(value) > _MAX_EXACT_FLOAT:
            raise ReceiptCanonicalizationError(
                f"the sealer rejects the float {value!r} (only integral values within "
                "±2^53 are allowed)",
                reason="float",
                path=pointer(*path),
            )
        return str(int(value))
    text: bytes = rfc8785.dumps(value)  # ECMAScript Number::toString
    return text.decode("ascii")


def _write(value: Any, out: list[str], strict: bool, path: list[str | int]) -> None:
    if isinstance(value, str):
        _check_text(value, path)
        out.append(_encode_string(value))
    elif value is None:
        out.append("null")
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif isinstance(value, int):
        out.append(int.__repr__(value))
    elif isinstance(value, float):
        out.append(_float(value, strict, path))
    elif isinstance(value, Mapping):
        keys = list(value.keys())
        for key in keys:
            if not isinstance(key, str):
                raise ReceiptCanonicalizationError(
                    f"object key {key!r} is not a string",
                    reason="non_string_key",
                    path=pointer(*path),
                )
            _check_text(key, path)
        out.append("{")
        for index, key in enumerate(sorted(keys)):
            if index:
                out.append(",")
            out.append(_encode_string(key))
            out.append(":")
            path.append(key)
            _write(value[key], out, strict, path)
            path.pop()
        out.append("}")
    elif isinstance(value, (list, tuple)):
        out.append("[")
        for index, item in enumerate(value):
            if index:
                out.append(",")
            path.append(index)
            _write(item, out, strict, path)
            path.pop()
        out.append("]")
    else:
        raise ReceiptCanonicalizationError(
            f"{type(value).__name__} is not a JSON value",
            reason="unsupported_type",
            path=pointer(*path),
        )


def receipt_canonical_json(value: Any, *, strict: bool = True) -> bytes:
    """Return ``C(value)``, the receipt canonical JSON bytes (loop-host §4.1).

    *value* is JSON data (``None``, ``bool``, ``int``, ``float``, ``str``, lists or
    tuples, mappings with ``str`` keys). ``strict=True`` is the sealer's mode,
    ``strict=False`` the verifier's (see the module docstring).

    Raises:
        ReceiptCanonicalizationError: (a ``TypeError``) a float the mode rejects, NaN or
            infinity, a lone surrogate, a non-string key or a non-JSON type; or nesting
            too deep to serialise.
    """
    out: list[str] = []
    try:
        _write(value, out, strict, [])
    except RecursionError:
        raise ReceiptCanonicalizationError(
            "value nested too deeply", reason="too_deep", path=""
        ) from None
    return "".join(out).encode("utf-8")


def receipt_hash(value: Any, *, strict: bool = True) -> str:
    """Return ``H(value) = "sha256:" + hex(sha256(C(value)))`` (loop-host notation, §4.1).

    Raises:
        ReceiptCanonicalizationError: as :func:`receipt_canonical_json`.
    """
    return bytes_hash(receipt_canonical_json(value, strict=strict))


def bytes_hash(data: bytes | bytearray | memoryview) -> str:
    """Return ``Hb(data) = "sha256:" + hex(sha256(data))`` (loop-host notation)."""
    return "sha256:" + hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- reading


def parse_receipt_json(data: bytes | bytearray | memoryview | str, *,
                       source: str = "receipt", max_bytes: int | None = None) -> Any:
    """Parse one JSON document of a receipt file, an index file or verify input
    (loop-host §5.1, §5.4) with the project's strict JSON reader
    (``runx_actors._strictread.loads_json``).

    UTF-8 only; duplicate keys, ``NaN``/``Infinity``, numbers outside the double range,
    lone surrogates, nesting past 64 levels, more than *max_bytes* bytes and trailing data
    are refused. Integers stay ``int`` and fractions ``float``, so ``C`` of the parsed
    value reproduces a canonical file byte for byte.

    Raises:
        MalformedInputError: (a ``ValueError``) the data is not such a document; the
            message names *source* and says why.
    """
    return loads_json(data, source=source, max_bytes=max_bytes)
