"""Fuzz: the codecs raise nothing but ``DecodeError`` (issue 12 deliverable 6).

Valid facts, commands and records (``MachineState``, the largest record) are encoded,
then mutated at the byte level (flip, insert, delete) and at the value level (any JSON
value at any path of the payload, keys added or removed, the wire name changed), and
decoded again: the result is a value or a ``DecodeError``, never any other exception.
Bounded by the hypothesis ``ci`` profile.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from runx_actors.protocol import DecodeError
from runx_actors.protocol._codec import (
    COMMAND_BY_WIRE_NAME,
    FACT_BY_WIRE_NAME,
    decode_command,
    decode_command_payload,
    decode_fact,
    decode_fact_payload,
    decode_value,
    encode_command,
    encode_fact,
    encode_value,
)
from runx_actors.protocol.canonical import parse_json_strict, read_envelope, typed_envelope
from runx_actors.protocol.state import MachineState
from runx_actors.testing import strategies as rs

JSON = rs.json_values(max_leaves=6)


def _only_decode_error(decode: Callable[[], Any]) -> None:
    try:
        decode()
    except DecodeError:
        pass


@st.composite
def byte_mutations(draw: st.DrawFn, data: bytes) -> bytes:
    blob = bytearray(data)
    for _ in range(draw(st.integers(1, 4))):
        if not blob:
            blob.extend(draw(st.binary(min_size=1, max_size=4)))
            continue
        index = draw(st.integers(0, len(blob) - 1))
        op = draw(st.sampled_from(["flip", "insert", "delete", "digit"]))
        if op == "flip":
            blob[index] ^= 1 << draw(st.integers(0, 7))
        elif op == "insert":
            blob[index:index] = draw(st.binary(min_size=1, max_size=4))
        elif op == "digit":  # numbers and lengths are where strict parsers slip
            blob[index:index + 1] = draw(st.sampled_from(
                [b"0", b"9", b"-", b".", b"e", b"1e400", b"NaN", b'"', b"{", b"["]))
        else:
            del blob[index]
    return bytes(blob)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix]
    if isinstance(value, dict):
        for key, sub in value.items():
            out.extend(_paths(sub, (*prefix, key)))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            out.extend(_paths(sub, (*prefix, index)))
    return out


@st.composite
def value_mutations(draw: st.DrawFn, payload: Any) -> Any:
    doc = copy.deepcopy(payload)
    for _ in range(draw(st.integers(1, 3))):
        path = draw(st.sampled_from(_paths(doc)))
        if not path:
            doc = draw(JSON)
            continue
        parent = doc
        for part in path[:-1]:
            parent = parent[part]
        action = draw(st.sampled_from(["replace", "delete", "add"]))
        if action == "replace":
            parent[path[-1]] = draw(JSON)
        elif action == "delete":
            del parent[path[-1]]
        elif isinstance(parent, dict):
            parent[draw(rs.texts(max_size=8))] = draw(JSON)
        else:
            parent.insert(0, draw(JSON))
    return doc


@given(fact=rs.facts(), data=st.data())
def test_byte_mutated_facts_raise_only_decode_error(fact: Any, data: st.DataObject) -> None:
    blob = data.draw(byte_mutations(encode_fact(fact)))
    _only_decode_error(lambda: decode_fact(blob))


@given(fact=rs.facts(), data=st.data(), rename=st.booleans())
def test_value_mutated_facts_raise_only_decode_error(fact: Any, data: st.DataObject,
                                                     rename: bool) -> None:
    name, payload = read_envelope(encode_fact(fact), record="fact")
    mutated = data.draw(value_mutations(payload))
    if rename:
        name = data.draw(st.sampled_from(sorted(FACT_BY_WIRE_NAME)))
    _only_decode_error(lambda: decode_fact_payload(name, mutated))
    _only_decode_error(lambda: decode_fact(typed_envelope(name, mutated)))


@given(command=rs.commands(), data=st.data())
def test_byte_mutated_commands_raise_only_decode_error(command: Any,
                                                       data: st.DataObject) -> None:
    blob = data.draw(byte_mutations(encode_command(command)))
    _only_decode_error(lambda: decode_command(blob))


@given(command=rs.commands(), data=st.data(), rename=st.booleans())
def test_value_mutated_commands_raise_only_decode_error(command: Any, data: st.DataObject,
                                                        rename: bool) -> None:
    name, payload = read_envelope(encode_command(command), record="command")
    mutated = data.draw(value_mutations(payload))
    if rename:
        name = data.draw(st.sampled_from(sorted(COMMAND_BY_WIRE_NAME)))
    _only_decode_error(lambda: decode_command_payload(name, mutated))


@given(state=rs.machine_states(), data=st.data())
def test_mutated_records_raise_only_decode_error(state: MachineState,
                                                 data: st.DataObject) -> None:
    wire = parse_json_strict(typed_envelope("state", encode_value(state))[len(b"v1:5:state:"):])
    mutated = data.draw(value_mutations(wire))
    _only_decode_error(lambda: decode_value(MachineState, mutated))
