"""The projection cache's fast decoder answers as the strict codec does (RUN-CMT-2).

``_cache.decode_state`` reads a cache entry with a decoder written for the MachineState
tree and asks the strict codec (``decode_state_strict``: ``json.loads`` and
``decode_value``) whenever the fast decoder gives up. These tests hold the fast decoder
*alone* (``fast_decode``) to the strict codec's answer — the same value, typed exactly
(an ``int`` is not a ``float``, ``Open()`` is an ``Open``), or a refusal where the strict
codec refuses — on valid entries and on damaged, forged and truncated ones, so the
fallback is never what makes them agree.
"""

from __future__ import annotations

import codecs
import json
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runx_actors.protocol._codec import encode_value, wire_key
from runx_actors.protocol.state import MachineState
from runx_actors.protocol.values import (
    ModelStepStatus,
    ResponseKind,
    ResponsePolicy,
    RunReason,
    RunStatus,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolPlacement,
    ToolReplay,
)
from runx_actors.store import _cache
from runx_actors.store._cache import decode_state, decode_state_strict, encode_state, fast_decode
from runx_actors.testing.strategies import json_values, machine_states

REFUSED = object()  # the fast decoder gave up


def _fast(raw: bytes) -> Any:
    try:
        return fast_decode(raw)
    except Exception:
        return REFUSED


def _same(a: object, b: object) -> bool:
    """Equal and of the same types all the way down (``1 == 1.0`` is not enough)."""
    if type(a) is not type(b):
        return False
    if attrs.has(type(a)):
        return all(_same(getattr(a, f.name), getattr(b, f.name)) for f in attrs.fields(type(a)))
    if isinstance(a, tuple):
        assert isinstance(b, tuple)
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def _agree(raw: bytes) -> None:
    """The fast decoder alone gives the strict codec's answer; so does decode_state."""
    strict = decode_state_strict(raw)
    fast = _fast(raw)
    if strict is None:
        assert fast is REFUSED, f"the fast decoder accepted what the strict codec refuses: {raw!r}"
    else:
        assert fast is not REFUSED, f"the fast decoder refused a valid entry: {raw!r}"
        assert _same(fast, strict), (fast, strict)
    combined = decode_state(raw)
    assert (combined is None) == (strict is None) and (strict is None or _same(combined, strict))


def _entry(obj: Any, *, ascii_only: bool = False) -> bytes:
    """``c1:`` + the JSON of *obj*; lone surrogates become the (invalid) UTF-8 bytes
    ``json.loads`` still reads (``surrogatepass``), NaN/Infinity the literals it reads."""
    text = json.dumps(obj, ensure_ascii=ascii_only, separators=(",", ":"))
    return _cache.CACHE_FORMAT + text.encode("utf-8", "surrogatepass")


# -- the key tables follow the protocol classes ---------------------------------------


def test_key_tables_are_the_classes_wire_keys() -> None:
    """Every class the fast decoder reads has exactly its attrs fields' wire keys in
    ``KEYS``: a field added to the protocol shows here (the fast decoder would give up on
    entries carrying it — slower, never different)."""
    for cls, keys in _cache.KEYS.items():
        assert keys == {wire_key(a.name) for a in attrs.fields(cls)}, cls.__name__


def test_enum_tables_hold_every_member() -> None:
    for table, cls in ((_cache._RUN_STATUS, RunStatus), (_cache._RUN_REASON, RunReason),
                       (_cache._STEP_STATUS, ModelStepStatus),
                       (_cache._CALL_STATUS, ToolCallStatus), (_cache._POLICY, ResponsePolicy),
                       (_cache._REPLAY, ToolReplay), (_cache._PLACEMENT, ToolPlacement),
                       (_cache._OUTCOME, ToolFailureOutcome), (_cache._KIND, ResponseKind)):
        assert {k: v for k, v in table.items() if isinstance(k, str)} == {
            m.value: m for m in cls}


# -- valid entries ----------------------------------------------------------------------


@settings(max_examples=100, deadline=None)
@given(state=machine_states())
def test_fast_decoder_reads_every_valid_entry(state: MachineState) -> None:
    """Every entry the writer can write is read by the fast decoder itself (never the
    fallback), as the strict codec reads it, and equals the state written."""
    raw = encode_state(state)
    fast = fast_decode(raw)
    assert _same(fast, decode_state_strict(raw))
    assert fast == state


# -- damaged, forged and truncated entries ---------------------------------------------

#: Values a mutation puts somewhere in an entry: every JSON type, the number forms the
#: strict codec treats apart, enum values of the wrong field, digests almost right.
_ODD_VALUES = st.sampled_from([
    None, True, False, 0, 1, -1, 1.0, 1.5, -0.0, 2**53 - 1, 2**53, -(2**53 - 1), -(2**53),
    float(2**53), 1e300, 10**30, float("nan"), float("inf"), "", "x", "\ud800", "a\udfffb",
    "é", "\x00", "sha256:" + "0" * 64, "sha256:" + "A" * 64, "sha256:" + "0" * 63, [], {},
    [1], [{}], {"a": 1}, {"open": {}}, {"toolStep": {}}, {"open": {}, "modelStep": {}},
    *(m.value for e in (RunStatus, RunReason, ModelStepStatus, ToolCallStatus,
                        ResponsePolicy, ToolReplay, ToolPlacement, ToolFailureOutcome,
                        ResponseKind) for m in e),
]) | json_values(max_leaves=4)

#: Keys a mutation adds: every wire key of the tree (in the wrong place, mostly) and others.
_KEYS = st.sampled_from(sorted({k for keys in _cache.KEYS.values() for k in keys}
                               | {"open", "modelStep", "toolStep", "extra", ""}))


def _containers(obj: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Paths of every object and array inside *obj* (itself included)."""
    out = []
    if isinstance(obj, (dict, list)):
        out.append(path)
        items = obj.items() if isinstance(obj, dict) else enumerate(obj)
        for k, v in items:
            out += _containers(v, (*path, k))
    return out


def _at(obj: Any, path: tuple[Any, ...]) -> Any:
    for k in path:
        obj = obj[k]
    return obj


@st.composite
def _mutated(draw: st.DrawFn) -> Any:
    """The JSON of a valid state with one to three edits: a member replaced, removed or
    added, an array item replaced, removed or duplicated, a value wrapped in an array."""
    obj = encode_value(draw(machine_states()), MachineState)
    for _ in range(draw(st.integers(1, 3))):
        target = _at(obj, draw(st.sampled_from(_containers(obj))))
        op = draw(st.sampled_from(["replace", "remove", "add", "wrap", "dup"]))
        if isinstance(target, dict):
            if op == "add" or not target:
                target[draw(_KEYS)] = draw(_ODD_VALUES)
                continue
            key = draw(st.sampled_from(sorted(target)))
            if op == "remove":
                del target[key]
            elif op == "wrap":
                target[key] = [target[key]]
            else:
                target[key] = draw(_ODD_VALUES)
        elif target:
            index = draw(st.integers(0, len(target) - 1))
            if op == "remove":
                del target[index]
            elif op == "dup":
                target.append(target[index])
            else:
                target[index] = draw(_ODD_VALUES)
        else:
            target.append(draw(_ODD_VALUES))
    return obj


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(obj=_mutated(), ascii_only=st.booleans())
def test_fast_decoder_agrees_on_edited_entries(obj: Any, ascii_only: bool) -> None:
    """Forged entries (well-formed JSON, edited content): the fast decoder accepts
    exactly what the strict codec accepts, with the same value."""
    _agree(_entry(obj, ascii_only=ascii_only))


@settings(max_examples=100, deadline=None)
@given(state=machine_states(), data=st.data())
def test_fast_decoder_agrees_on_damaged_bytes(state: MachineState, data: st.DataObject) -> None:
    """Damaged entries: truncated, a byte changed, bytes inserted or removed, anywhere
    (the prefix included)."""
    raw = bytearray(encode_state(state))
    for _ in range(data.draw(st.integers(1, 2))):
        op = data.draw(st.sampled_from(["truncate", "flip", "insert", "delete"]))
        at = data.draw(st.integers(0, len(raw)))
        if op == "truncate":
            del raw[at:]
        elif op == "flip" and at < len(raw):
            raw[at] ^= data.draw(st.integers(1, 255))
        elif op == "insert":
            raw[at:at] = data.draw(st.binary(min_size=1, max_size=3)
                                   | st.sampled_from([b",", b"{", b"}", b'"', b"\\u", b"0"]))
        elif at < len(raw):
            del raw[at:at + data.draw(st.integers(1, 4))]
    _agree(bytes(raw))


# -- one example of each damage class, named ------------------------------------------

_VALID = {"runId": "run-1", "status": "active", "current": {"toolStep": {
    "id": "s1", "source": "m1", "calls": [{
        "callId": "c1", "toolRef": "noop", "arguments": {"b": [1, 2.5], "a": None},
        "status": "executing", "providerCallId": "p1",
        "definitionDigest": "sha256:" + "ab" * 32, "effect": "e1"}]}},
    "modelSteps": 1, "usage": {"inputTokens": 1, "outputTokens": 1}}


def _edit(path: tuple[Any, ...], value: Any = ..., *, delete: bool = False) -> Any:
    obj = json.loads(json.dumps(_VALID))
    parent = _at(obj, path[:-1])
    if delete:
        del parent[path[-1]]
    else:
        parent[path[-1]] = value
    return obj


_CALL = ("current", "toolStep", "calls", 0)
_VALID_RAW = _entry(_VALID)

DAMAGE = {
    "truncated": _VALID_RAW[:-1],
    "truncated to the prefix": _VALID_RAW[:3],
    "a flipped brace": _VALID_RAW.replace(b"{", b"[", 1),
    "not the c1: prefix": b"c2:" + _VALID_RAW[3:],
    "UTF-16 text (json.loads reads it: accepted)":
        _cache.CACHE_FORMAT + json.dumps(_VALID).encode("utf-16"),
    "a UTF-8 byte order mark": _cache.CACHE_FORMAT + codecs.BOM_UTF8 + _VALID_RAW[3:],
    "trailing bytes": _VALID_RAW + b"x",
    "an unknown key": _entry(_edit(("extra",), 1)),
    "an unknown key in a call": _entry(_edit((*_CALL, "extra"), "")),
    "a missing required key": _entry(_edit(("runId",), delete=True)),
    "a missing required key in a call": _entry(_edit((*_CALL, "arguments"), delete=True)),
    "a string as a number": _entry(_edit(("modelSteps",), "1")),
    "a boolean as a number": _entry(_edit(("modelSteps",), True)),
    "a fraction as an integer": _entry(_edit(("modelSteps",), 1.5)),
    "an integral float (accepted as the int)": _entry(_edit(("modelSteps",), 2.0)),
    "an unsafe integer": _entry(_edit(("usage", "inputTokens"), 2**53)),
    "NaN as an integer": _entry(_edit(("modelSteps",), float("nan"))),
    "NaN in JSON text": _entry(_edit((*_CALL, "arguments"), [float("nan")])),
    "a huge integer in JSON text": _entry(_edit((*_CALL, "arguments"), 10**30)),
    "a number as a string": _entry(_edit(("runId",), 7)),
    "a lone surrogate": _entry(_edit(("runId",), "run-\ud800")),
    "a lone surrogate, escaped": _entry(_edit((*_CALL, "toolRef"), "\udc00"), ascii_only=True),
    "an unknown enum value": _entry(_edit((*_CALL, "status"), "exekuting")),
    "an enum value of another field": _entry(_edit((*_CALL, "status"), "active")),
    "null for an enum with a default": _entry(_edit((*_CALL, "policy"), None)),
    "null for a string with a default": _entry(_edit((*_CALL, "effect"), None)),
    "null for an optional object (accepted)": _entry(_edit((*_CALL, "result"), None)),
    "null for usage": _entry(_edit(("usage",), None)),
    "a step with two keys": _entry(_edit(("current", "open"), {})),
    "an unknown step variant": _entry(_edit(("current",), {"closed": {}})),
    "open with a field": _entry(_edit(("current",), {"open": {"x": 1}})),
    "current missing": _entry(_edit(("current",), delete=True)),
    "calls not an array": _entry(_edit(("current", "toolStep", "calls"), {})),
    "an object as an array item": _entry(_edit(("pendingInputs",), [[]])),
    "a bad digest in a result": _entry(_edit((*_CALL, "result"), {"outputDigest": "sha256:x"})),
    "an upper-case digest": _entry(_edit(("pendingInputs",), [
        {"id": "i", "digest": "sha256:" + "AB" * 32}])),
    "a valid input (accepted)": _entry(_edit(("pendingInputs",), [
        {"id": "i", "digest": "sha256:" + "ab" * 32}])),
    "an array for the state": _entry([_VALID]),
}


@pytest.mark.parametrize("name", sorted(DAMAGE))
def test_each_damage_class_gets_the_strict_answer(name: str) -> None:
    _agree(DAMAGE[name])


def test_the_valid_example_is_read_fast() -> None:
    state = fast_decode(_VALID_RAW)
    assert state.run_id == "run-1" and state.current.calls[0].arguments == '{"a":null,"b":[1,2.5]}'
