"""The fast canonical-JSON path is byte-equal to the rfc8785 reference (RUN-CMP-1, §3.5).

``canonical_json`` writes a *plain* value (exact JSON types, ASCII keys, safe integers,
integral floats) with orjson and everything else with ``rfc8785``. These tests are the
proof the fast path rests on:

* on any value of the protocol's domain (all the JSON types, tuples, integers inside and
  outside ±(2^53-1), every float including NaN and ±Infinity, any code point in strings and
  keys, lone surrogates included), ``canonical_json`` and ``reference_canonical_json``
  return the same bytes or raise the same ``CanonicalJSONError`` reason;
* on the plain domain the fast path is really taken (so the first property is not won by
  always falling back), and its bytes are the reference's;
* every code point, as a string value, and every ASCII key order, exhaustively.
"""

from __future__ import annotations

import enum
import math
from typing import Any

import pytest
import rfc8785
from hypothesis import given
from hypothesis import strategies as st

from runx_actors.protocol import canonical
from runx_actors.protocol.canonical import (
    MAX_SAFE_INTEGER,
    canonical_json,
    parse_json_strict,
    reference_canonical_json,
)
from runx_actors.protocol.errors import CanonicalJSONError

# every code point, lone surrogates included (the default alphabet leaves them out)
_ANY_CHAR = st.characters(codec=None, categories=None)
_ANY_TEXT = st.text(alphabet=_ANY_CHAR, max_size=12)
_ASCII_TEXT = st.text(alphabet=st.characters(max_codepoint=0x7F), max_size=8)

_INTS = st.one_of(
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.integers(-(2**70), 2**70),
    st.sampled_from([MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 0]),
)
_FLOATS = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER).map(float),
    st.sampled_from([-0.0, 0.0, 1e15, 1e21, 1e-7, 2.0**53, float(MAX_SAFE_INTEGER), 0.1]),
)

_LEAVES = st.one_of(st.none(), st.booleans(), _INTS, _FLOATS, _ANY_TEXT)
_KEYS = st.one_of(_ASCII_TEXT, _ANY_TEXT)

_VALUES = st.recursive(
    _LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(_KEYS, children, max_size=5),
    ),
    max_leaves=30,
)

# the plain domain: what the codec's unstructuring and strict parsing produce
_PLAIN_LEAVES = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER),
    st.integers(-MAX_SAFE_INTEGER, MAX_SAFE_INTEGER).map(float),
    st.text(max_size=12),  # any code point but the surrogates
)
_PLAIN = st.recursive(
    _PLAIN_LEAVES,
    lambda children: st.one_of(
        st.lists(children, max_size=5),
        st.lists(children, max_size=5).map(tuple),
        st.dictionaries(_ASCII_TEXT, children, max_size=5),
    ),
    max_leaves=30,
)


def _outcome(fn: Any, value: object) -> tuple[str, object]:
    try:
        return "ok", fn(value)
    except CanonicalJSONError as exc:
        return "error", exc.reason


@given(_VALUES)
def test_canonical_json_equals_the_reference_on_the_whole_domain(value: object) -> None:
    assert _outcome(canonical_json, value) == _outcome(reference_canonical_json, value)


@given(_PLAIN)
def test_the_fast_path_is_taken_and_exact_on_the_plain_domain(value: object) -> None:
    fast = canonical._fast_canonical(value)
    assert fast is not None
    assert fast == reference_canonical_json(value)
    # and what strict parsing reads back (every number a float) writes the same bytes
    assert canonical_json(parse_json_strict(fast)) == fast


def test_every_code_point_as_a_string_value() -> None:
    chunk = 4096
    for start in range(0, 0x110000, chunk):
        text = "".join(
            chr(c) for c in range(start, min(start + chunk, 0x110000))
            if not 0xD800 <= c <= 0xDFFF
        )
        fast = canonical._fast_canonical([text])
        assert fast is not None
        assert fast == rfc8785.dumps([text])


def test_ascii_keys_sort_like_utf16_code_units() -> None:
    keys = [chr(a) + chr(b) for a in range(128) for b in range(0, 128, 7)]
    keys += [chr(a) for a in range(128)] + [""]
    value = {k: i for i, k in enumerate(reversed(keys))}
    fast = canonical._fast_canonical(value)
    assert fast is not None
    assert fast == rfc8785.dumps(value)


class _Kind(enum.StrEnum):
    A = "a"


class _Dict(dict[str, Any]):
    pass


@pytest.mark.parametrize(
    "value",
    [
        1.5,  # a fraction: the number formats differ
        1e21,  # integral but beyond 2^53: JCS writes 1e+21
        float(MAX_SAFE_INTEGER + 1),
        MAX_SAFE_INTEGER + 1,  # rounded to a double first [D-11]
        {"é": 1},  # a non-ASCII key
        {"\U0001f600": 1, "\uffff": 2},  # keys whose UTF-8 and UTF-16 orders differ
        _Kind.A,  # a str subclass
        _Dict(a=1),  # a dict subclass
        "\ud800",  # a lone surrogate (the reference raises)
        math.nan,
        b"bytes",
    ],
)
def test_values_outside_the_plain_domain_take_the_reference(value: object) -> None:
    assert canonical._fast_canonical(value) is None
    assert _outcome(canonical_json, value) == _outcome(reference_canonical_json, value)


def test_nesting_orjson_refuses_is_written_by_the_reference() -> None:
    value: list[Any] = []
    inner = value
    for _ in range(300):  # orjson stops at 255 levels, rfc8785 does not
        nxt: list[Any] = []
        inner.append(nxt)
        inner = nxt
    assert canonical._fast_canonical(value) is None
    assert canonical_json(value) == b"[" * 301 + b"]" * 301


def _has_surrogate(text: str) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for c in text)


@given(st.dictionaries(_ANY_TEXT, _ANY_TEXT, max_size=3), st.booleans())
def test_strict_parsing_refuses_every_lone_surrogate_escaped_or_raw(
    value: dict[str, str], ascii_only: bool
) -> None:
    # the surrogate walk is skipped only for text with no \\u escape and no raw surrogate
    import json

    text = json.dumps(value, ensure_ascii=ascii_only)
    bad = any(_has_surrogate(k) or _has_surrogate(v) for k, v in value.items())
    if bad:
        with pytest.raises(CanonicalJSONError) as info:
            parse_json_strict(text)
        assert info.value.reason == "lone_surrogate"
    else:
        assert parse_json_strict(text) == value
