"""``model_request_from_frozen`` answers what the strict read answers (RUN-WIR-4): it is
memoised on (digest, bytes), so a pair read once is not parsed again, and any other pair —
damaged bytes under a digest already read, the same bytes under another digest — is read
in full and refused as the strict read refuses it. The oracle is the strict read itself,
``model_request_from_json(decode_frozen(...))``, which has no memo."""

from __future__ import annotations

import pytest

from runx_actors.protocol.canonical import decode_frozen
from runx_actors.protocol.digests import (
    encode_frozen,
    model_request_from_frozen,
    model_request_from_json,
)
from runx_actors.protocol.errors import DecodeError
from runx_actors.protocol.values import ModelRequest, ToolDefinition


def _strict(digest: str, data: bytes) -> ModelRequest:
    return model_request_from_json(decode_frozen("model_request", digest, data))


REQUEST = ModelRequest("m", (ToolDefinition("noop"),), '{"messages":[{"content":"hi"}]}')
OTHER = ModelRequest("m", (), '{"messages":[]}')


def test_a_hit_is_the_strict_answer() -> None:
    digest, data = encode_frozen("model_request", REQUEST)
    first = model_request_from_frozen(digest, data)
    again = model_request_from_frozen(digest, bytes(bytearray(data)))  # equal, not same
    view = model_request_from_frozen(digest, memoryview(data))
    assert first == again == view == _strict(digest, data) == REQUEST


def test_damaged_bytes_under_a_digest_already_read_are_refused() -> None:
    digest, data = encode_frozen("model_request", REQUEST)
    assert model_request_from_frozen(digest, data) == REQUEST
    damaged = data.replace(b'"hi"', b'"ho"')
    assert damaged != data
    with pytest.raises(DecodeError) as strict:
        _strict(digest, damaged)
    with pytest.raises(DecodeError) as memo:
        model_request_from_frozen(digest, damaged)
    assert str(memo.value) == str(strict.value)


def test_bytes_already_read_under_another_digest_are_refused() -> None:
    digest, data = encode_frozen("model_request", REQUEST)
    other_digest, _ = encode_frozen("model_request", OTHER)
    assert model_request_from_frozen(digest, data) == REQUEST
    with pytest.raises(DecodeError):
        _strict(other_digest, data)
    with pytest.raises(DecodeError):
        model_request_from_frozen(other_digest, data)


def test_a_refusal_is_not_remembered_as_an_answer() -> None:
    digest, data = encode_frozen("model_request", OTHER)
    for _ in range(2):
        with pytest.raises(DecodeError):
            model_request_from_frozen(digest, data + b" ")
    assert model_request_from_frozen(digest, data) == OTHER
