"""The decoder validates every Digest against its grammar (issue 12 deliverable 3;
RUN-WIR-6): ``sha256:`` + 64 lowercase hex, nothing else, in facts and commands."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from runx_actors.protocol._codec import (
    decode_command_payload,
    decode_fact,
    decode_fact_payload,
    fact_payload,
)
from runx_actors.protocol.canonical import typed_envelope
from runx_actors.protocol.errors import DecodeError
from runx_actors.protocol.facts import InputAccepted
from runx_actors.protocol.values import AgentInput

GOOD = "sha256:" + "ab" * 32
_GRAMMAR = re.compile(r"sha256:[0-9a-f]{64}")

def _payloads() -> list[tuple[str, dict[str, object], tuple[str, ...]]]:
    """(wire name, payload, path of the digest) of facts holding a Digest."""
    return [
        ("input_accepted", fact_payload(InputAccepted(AgentInput("in-1", GOOD))),
         ("input", "digest")),
    ]


def _set(payload: dict[str, object], path: tuple[str, ...], value: str) -> dict[str, object]:
    out = json.loads(json.dumps(payload))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out  # type: ignore[no-any-return]


def _not_digest(text: str) -> bool:
    return _GRAMMAR.fullmatch(text) is None


BAD = st.one_of(
    st.text(max_size=80),
    st.text(alphabet="0123456789abcdefABCDEF", min_size=64, max_size=64).map(
        lambda h: "sha256:" + h),
    st.text(alphabet="0123456789abcdef", min_size=0, max_size=70).map(lambda h: "sha256:" + h),
    st.just("SHA256:" + "ab" * 32), st.just("sha256:" + "AB" * 32),
    st.just("sha256:" + "ab" * 32 + "\n"), st.just(" sha256:" + "ab" * 32),
    st.just("sha512:" + "ab" * 32),
).filter(_not_digest)


@given(BAD)
def test_fact_digest_outside_the_grammar_is_refused(bad: str) -> None:
    for name, payload, path in _payloads():
        with pytest.raises(DecodeError):
            decode_fact_payload(name, _set(payload, path, bad))
        with pytest.raises(DecodeError):
            decode_fact(typed_envelope(name, _set(payload, path, bad)))


@given(st.text(alphabet="0123456789abcdef", min_size=64, max_size=64))
def test_fact_digest_in_the_grammar_decodes(hex_: str) -> None:
    digest = "sha256:" + hex_
    for name, payload, path in _payloads():
        fact = decode_fact_payload(name, _set(payload, path, digest))
        assert fact == InputAccepted(AgentInput("in-1", digest))


@pytest.mark.parametrize("name, key", [
    ("model_step_completed", "resultDigest"), ("tool_call_completed", "outputDigest"),
    ("model_step_prepared", "requestDigest"), ("tool_call_answered", "responseDigest"),
    ("tool_call_approved", "responseDigest"),
])
def test_every_fact_digest_field_is_checked(name: str, key: str) -> None:
    """A digest whose case changed is named among the failures of every fact holding one."""
    with pytest.raises(DecodeError) as info:
        decode_fact_payload(name, {key: "sha256:" + "AB" * 32})
    assert f"$.{key}" in str(info.value)
    with pytest.raises(DecodeError) as good:
        decode_fact_payload(name, {key: GOOD})
    assert f"$.{key}" not in str(good.value)


@pytest.mark.parametrize("name, key", [
    ("submit_tool_response", "responseDigest"), ("approve_tool_call", "responseDigest"),
    ("reject_tool_call", "responseDigest"), ("prepare_model_request", "requestDigest"),
])
@given(bad=BAD)
def test_command_digest_outside_the_grammar_is_refused(name: str, key: str, bad: str) -> None:
    with pytest.raises(DecodeError) as info:
        decode_command_payload(name, {key: bad})
    assert f"$.{key}" in str(info.value)
