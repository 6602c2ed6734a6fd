"""Identity and encoding scenarios (spec §8.2 items 30-38) plus digest and envelope checks.

Plain synchronous pytest: the protocol core has no I/O.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import pytest

from runx_actors.protocol import ids
from runx_actors.protocol._codec import encode_command, encode_fact
from runx_actors.protocol.canonical import (
    canonical_json,
    canonical_json_text,
    content_digest,
    decode_envelope,
    decode_frozen,
    freeze_tool_arguments,
    normalize_json_text,
    parse_json_strict,
    read_envelope,
    sha256_digest,
    typed_envelope,
)
from runx_actors.protocol.commands import CancelRun
from runx_actors.protocol.digests import (
    decision_digest,
    decode_frozen_value,
    digest_model_request,
    digest_model_result,
    digest_tool_definition,
    digest_tool_output,
    digest_tool_response_payload,
    encode_frozen,
    model_request_from_json,
    model_request_json,
    model_result_from_json,
    model_result_json,
    tool_definition_from_json,
    tool_definition_json,
)
from runx_actors.protocol.errors import CanonicalJSONError, DecodeError, ValidationError
from runx_actors.protocol.facts import InputAccepted
from runx_actors.protocol.values import (
    AgentInput,
    ModelRequest,
    ModelResult,
    ModelToolCall,
    ResponseKind,
    ToolDefinition,
    Usage,
    is_digest,
)

# --------------------------------------------------------------------------- helpers


def _independent_namespaced_hash(namespace: str, *parts: str | int) -> str:
    """A second, test-only implementation of spec §3.2, written from its text."""
    out = bytearray()
    for part in (namespace, *parts):
        text = part if isinstance(part, str) else format(part, "d")
        data = text.encode("utf-8")
        out += str(len(data)).encode("ascii") + b":" + data
    return hashlib.sha256(bytes(out)).hexdigest()


# (id, namespace, parts, derive function of runx_actors.protocol.ids, prefix, suffix)
GOLDEN: list[tuple[str, str, tuple[str | int, ...], Callable[[], str], str, str]] = [
    ("G1", "twilight/model-request", ("run-1", 7),
     lambda: ids.derive_prepare_command_id("run-1", 7), "7e42f750", "763d"),
    ("G2", "twilight/model-step", ("run-1", "cmd-1"),
     lambda: ids.derive_model_step_id("run-1", "cmd-1"), "883c5ef2", "a8e6"),
    ("G3", "twilight/tool-call", ("step-1", 0),
     lambda: ids.derive_call_id("step-1", 0), "cca7fd2e", "ea11"),
    ("G4", "twilight/tool-step", ("step-1",),
     lambda: ids.derive_tool_step_id("step-1"), "6f62a482", "419d"),
    ("G5", "twilight/response", ("run-1", "step-1", "call-1", "approval"),
     lambda: ids.derive_response_id("run-1", "step-1", "call-1", "approval"),
     "819924b4", "e77e"),
    ("G6", "twilight/response-command", ("run-1", "step-1", "call-1", "resp-1"),
     lambda: ids.derive_response_command_id("run-1", "step-1", "call-1", "resp-1"),
     "aacf7d24", "b32b"),
    ("G7", "twilight/input-command", ("run-1", "in-1"),
     lambda: ids.derive_input_command_id("run-1", "in-1"), "ce57abe2", "6aad"),
    ("G8", "twilight/withdraw-command", ("run-1", "step-1"),
     lambda: ids.derive_withdraw_command_id("run-1", "step-1"), "582ffed8", "1a8c"),
    ("G9", "twilight/effect", ("run-1", "step-1", "", 1),
     lambda: ids.derive_effect_id("run-1", "step-1", "", 1), "553f030a", "3394"),
    ("G10", "twilight/effect", ("run-1", "step-1", "call-1", 0),
     lambda: ids.derive_effect_id("run-1", "step-1", "call-1", 0), "20fd10fd", "be78"),
    ("G11", "twilight/start-command", ("effect-1",),
     lambda: ids.derive_start_command_id("effect-1"), "5fbd4523", "fd3b"),
    ("G12", "twilight/settlement-command", ("effect-1",),
     lambda: ids.derive_settlement_command_id("effect-1"), "6e05abc3", "a01d"),
    ("G13", "twilight/recovery-command", ("effect-1",),
     lambda: ids.derive_recovery_command_id("effect-1"), "3059f690", "6735"),
    ("G14", "twilight/decline-command", ("run-1", "step-1", "call-1"),
     lambda: ids.derive_decline_command_id("run-1", "step-1", "call-1"), "c5eab65b", "d49a"),
]

DIGEST = content_digest("agent_input", {"text": "hello"})

# --------------------------------------------------------------------------- §8.2 30-38


def test_derived_identity_golden() -> None:
    """30: the 14 inputs of §3.4 give the listed visible ends, and the full values agree
    with an independent recomputation of §3.2."""
    assert len(GOLDEN) == 14
    for name, namespace, parts, derive_fn, prefix, suffix in GOLDEN:
        full = derive_fn()
        assert full == ids.derive(namespace, *parts), name
        assert full == _independent_namespaced_hash(namespace, *parts), name
        assert len(full) == 64 and all(c in "0123456789abcdef" for c in full), name
        assert full.startswith(prefix) and full.endswith(suffix), name
        assert not full.startswith("sha256:"), name


def test_derive_stability() -> None:
    """31: length prefixes separate parts; namespaces separate families; pure."""
    ns = ids.NS_EFFECT
    assert ids.derive(ns, "ab", "c") != ids.derive(ns, "a", "bc")
    assert ids.derive(ns, "a", "") != ids.derive(ns, "a")
    assert ids.derive(ids.NS_START_COMMAND, "e") != ids.derive(ids.NS_SETTLEMENT_COMMAND, "e")
    assert ids.derive(ids.NS_RECOVERY_COMMAND, "e") != ids.derive(ids.NS_SETTLEMENT_COMMAND, "e")
    assert ids.derive(ns, "x", 7) == ids.derive(ns, "x", "7")
    first = ids.derive_effect_id("run-1", "step-1", "call-1", 0)
    assert all(ids.derive_effect_id("run-1", "step-1", "call-1", 0) == first for _ in range(3))
    assert _independent_namespaced_hash(ns, "ab", "c") == ids.derive(ns, "ab", "c")


FROZEN_NAMESPACES = (
    ids.NS_MODEL_REQUEST, ids.NS_MODEL_STEP, ids.NS_TOOL_CALL, ids.NS_TOOL_STEP,
    ids.NS_RESPONSE, ids.NS_RESPONSE_COMMAND, ids.NS_INPUT_COMMAND, ids.NS_WITHDRAW_COMMAND,
    ids.NS_EFFECT, ids.NS_START_COMMAND, ids.NS_SETTLEMENT_COMMAND, ids.NS_RECOVERY_COMMAND,
    ids.NS_DECLINE_COMMAND,
)


class _NoHashing:
    """A stand-in for ``hashlib`` whose ``sha256`` refuses to run."""

    @staticmethod
    def sha256(*_: object) -> Any:
        raise AssertionError("hashed a namespace the prefix table holds")


def test_frozen_namespaces_derive_from_their_precomputed_prefix(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """31 (issue 11): a derive in a frozen namespace copies the namespace's precomputed
    SHA-256 state, so no namespace is hashed again — and the ids are still §3.2's, every
    namespace and several parts, cache cleared, each twice (a prefix updated in place
    would change the second); the prefixes themselves stay the state after f(namespace)."""
    assert set(ids._PREFIXES) == set(FROZEN_NAMESPACES)
    ids.derive.cache_clear()
    monkeypatch.setattr(ids, "hashlib", _NoHashing)
    for namespace in FROZEN_NAMESPACES:
        for parts in (("run-1", 3), ("run-1", "step-1", "", 0), ()):
            expected = _independent_namespaced_hash(namespace, *parts)
            assert ids.derive(namespace, *parts) == expected, namespace
            ids.derive.cache_clear()
            assert ids.derive(namespace, *parts) == expected, namespace
    for namespace, prefix in ids._PREFIXES.items():
        assert prefix.hexdigest() == _independent_namespaced_hash(namespace), namespace
    with pytest.raises(AssertionError, match="hashed a namespace"):
        ids.derive("twilight/not-frozen", "x")  # any other namespace is hashed
    ids.derive.cache_clear()


def test_other_namespaces_are_hashed_as_before() -> None:
    """31: a namespace outside the table (an empty one, an int, non-ASCII) derives by
    §3.2; a bool namespace and a lone surrogate are refused as parts are."""
    ids.derive.cache_clear()
    for namespace in ("", "twilight/other", 7, "é/ns"):
        assert ids.derive(namespace, "a", 1) == _independent_namespaced_hash(
            namespace, "a", 1)  # type: ignore[arg-type]
    ids.derive.cache_clear()
    with pytest.raises(TypeError):
        ids.derive(True, "a")  # type: ignore[arg-type]
    with pytest.raises(UnicodeEncodeError):
        ids.derive("\ud800", "a")
    ids.derive.cache_clear()


def test_derive_response_id_per_kind() -> None:
    """32: approval and external_response ResponseIDs differ for the same coordinates."""
    approval = ids.derive_response_id("run-1", "step-1", "call-1", "approval")
    external = ids.derive_response_id("run-1", "step-1", "call-1", "external_response")
    assert approval != external
    kind: Any = ResponseKind.APPROVAL  # an enum member is accepted too (its value is used)
    assert ids.derive_response_id("run-1", "step-1", "call-1", kind) == approval


RFC8785_INPUT = (
    '{"numbers":[333333333.33333329,1E30,4.50,2e-3,0.000000000000000000000000001],'
    '"string":"\\u20ac$\\u000F\\u000aA\'\\u0042\\u0022\\u005c\\\\\\"\\/",'
    '"literals":[null,true,false]}'
)
RFC8785_OUTPUT = (
    '{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],'
    '"string":"€$\\u000f\\nA\'B\\"\\\\\\\\\\"/"}'
)


def test_canonical_json_rfc8785_vectors() -> None:
    """33: the RFC 8785 sample of §3.5 and the number vectors serialise as stated."""
    assert canonical_json_text(parse_json_strict(RFC8785_INPUT)) == RFC8785_OUTPUT
    assert canonical_json(parse_json_strict(RFC8785_INPUT.encode())) == RFC8785_OUTPUT.encode()
    numbers = {
        1e21: "1e+21",
        1e20: "100000000000000000000",
        1e-7: "1e-7",
        0.000001: "0.000001",
        -0.0: "0",
        4.50: "4.5",
        12345678901234567890: "12345678901234567000",  # D-11
        2**53 - 1: "9007199254740991",
        -(2**53) + 1: "-9007199254740991",
    }
    for value, text in numbers.items():
        assert canonical_json_text(value) == text, value
    for source, text in [("1e21", "1e+21"), ("-0", "0"), ("4.50", "4.5"), ("1E-7", "1e-7")]:
        assert normalize_json_text(source) == text
    assert canonical_json_text(True) == "true" and canonical_json_text(1) == "1"  # bool first
    assert canonical_json_text({"b": [1, True, None], "a": "/é"}) == '{"a":"/é","b":[1,true,null]}'
    # keys sort by UTF-16 code units: U+E000 (one unit) after U+1F600 (surrogate pair)
    assert canonical_json_text({"\ue000": 1, "\U0001f600": 2}) == '{"\U0001f600":2,"\ue000":1}'


@pytest.mark.parametrize(
    "data",
    [
        b'{"a":1,"a":2}',  # duplicate keys
        b'{"a":{"b":1,"b":1}}',  # nested duplicate
        b'["\\ud800"]',  # lone high surrogate escape
        b'{"\\udc00":1}',  # lone low surrogate escape in a key
        b'"\\ude00\\ud83d"',  # reversed pair
        b'"\xff"',  # invalid UTF-8
        b'"\xed\xa0\x80"',  # UTF-8 encoded surrogate
        b'{"a":1} x',  # trailing data
        b'{"a":1}{}',  # a second document
        b"NaN",
        b"[Infinity]",
        b"-Infinity",
        b"1e400",  # overflows a double
        b"",
        b"   ",
        b"{'a':1}",
        b'"a\x01"',  # raw control character in a string
    ],
)
def test_canonical_json_rejects(data: bytes) -> None:
    """34: strict reading refuses these inputs with CanonicalJSONError."""
    with pytest.raises(CanonicalJSONError):
        parse_json_strict(data)


@pytest.mark.parametrize(
    "value",
    [float("nan"), float("inf"), -float("inf"), "\ud800", {"\udc00": 1}, 10**400, {1: 2},
     object(), b"bytes", {"a": {1, 2}}],
)
def test_canonical_json_rejects_values(value: object) -> None:
    """34 (writing side): NaN/Infinity, lone surrogates, huge ints, odd types are refused."""
    with pytest.raises(CanonicalJSONError):
        canonical_json(value)


def test_canonical_json_rejects_raw_surrogate_text() -> None:
    """34: a str holding a raw lone surrogate is not UTF-8 and is refused."""
    with pytest.raises(CanonicalJSONError):
        parse_json_strict('"\ud800"')


def test_canonical_determinism() -> None:
    """35: other key orders and whitespace canonicalise to identical bytes and digest."""
    variants = [
        '{"b":[1,2,{"y":null,"x":true}],"a":"é","c":1.0}',
        ' { "c" : 1 , "a" : "\\u00e9" ,\n "b" : [ 1 , 2.0 , { "x" : true , "y" : null } ] } ',
        '{"a":"é","c":1e0,"b":[1e0,2,{"x":true,"y":null}]}',
    ]
    canon = {canonical_json(parse_json_strict(v)) for v in variants}
    assert canon == {b'{"a":"\xc3\xa9","b":[1,2,{"x":true,"y":null}],"c":1}'}
    digests = {content_digest("tool_output", {"output": parse_json_strict(v)}) for v in variants}
    assert len(digests) == 1
    assert len({digest_tool_output(v) for v in variants}) == 1


def test_digest_preimage_covers_version_prefix() -> None:
    """36: the digest hashes the whole envelope; version and type name change it."""
    payload = {"output": "x"}
    envelope = typed_envelope("tool_output", payload)
    digest = content_digest("tool_output", payload)
    assert digest == "sha256:" + hashlib.sha256(envelope).hexdigest()
    assert digest != "sha256:" + hashlib.sha256(canonical_json(payload)).hexdigest()
    assert digest != sha256_digest(typed_envelope("tool_output", payload, version=2))
    assert digest != content_digest("tool_response_payload", payload)
    assert envelope == b'v1:11:tool_output:{"output":"x"}'
    assert is_digest(digest)


def test_canonical_golden_envelopes() -> None:
    """37: the two confirmed envelopes of §3.6."""
    assert encode_command(CancelRun(reason="cancelled")) == (
        b'v1:10:cancel_run:{"reason":"cancelled"}'
    )
    expected = b'v1:14:input_accepted:{"input":{"digest":"' + DIGEST.encode() + b'","id":"in-1"}}'
    assert encode_fact(InputAccepted(AgentInput("in-1", DIGEST))) == expected


def test_freeze_tool_arguments_binding_form() -> None:
    """38: the canonical binding form of tool arguments (§3.8)."""
    assert freeze_tool_arguments('{"b":1,"a":2}') == '{"a":2,"b":1}'
    assert freeze_tool_arguments("") == "{}"
    assert freeze_tool_arguments("hello") == '"hello"'
    assert freeze_tool_arguments(b'{"b":1,"a":2}') == '{"a":2,"b":1}'
    assert freeze_tool_arguments(" ") == '" "'  # whitespace-only is "other text"
    assert freeze_tool_arguments("[1, 2.50]") == "[1,2.5]"
    assert freeze_tool_arguments("null") == "null"
    assert freeze_tool_arguments('{"a":1,"a":2}') == json.dumps('{"a":1,"a":2}')
    assert freeze_tool_arguments('"\\ud800"') == json.dumps('"\\ud800"')
    assert freeze_tool_arguments("NaN") == '"NaN"'
    with pytest.raises(CanonicalJSONError):
        freeze_tool_arguments(b"\xff\xfe{")
    with pytest.raises(CanonicalJSONError):
        freeze_tool_arguments("x\ud800")


# --------------------------------------------------------------------------- envelopes


def test_envelope_round_trip_and_strictness() -> None:
    data = typed_envelope("tool_output", {"output": [1, "a"]})
    assert decode_envelope("tool_output", data) == {"output": [1.0, "a"]}
    assert read_envelope(data) == ("tool_output", {"output": [1.0, "a"]})
    assert read_envelope(typed_envelope("a:b", {})) == ("a:b", {})  # colons in names are fine
    bad = [
        b'v2:11:tool_output:{"output":1}',  # other version
        b'V1:11:tool_output:{"output":1}',
        b'1:11:tool_output:{"output":1}',
        b'v01:11:tool_output:{"output":1}',  # leading zero
        b'v1:011:tool_output:{"output":1}',
        b'v1:12:tool_output:{"output":1}',  # wrong length
        b'v1:10:tool_output:{"output":1}',
        b'v1:0::{"output":1}',
        b'v1:11:tool_output:{"output":1} ',  # trailing byte
        b'v1:11:tool_output: {"output":1}',
        b'v1:11:tool_output:{"output":1,"output":2}',
        b"v1:11:tool_output:",
        b"v1:11:tool_output",
        b"v1:x:tool_output:{}",
        b"",
    ]
    for item in bad:
        with pytest.raises(DecodeError) as info:
            decode_envelope("tool_output", item)
        assert info.value.record == "tool_output", item
    with pytest.raises(DecodeError) as info:
        decode_envelope("model_result", data)
    assert info.value.record == "model_result"


def test_typed_envelope_refuses_bad_arguments() -> None:
    with pytest.raises(ValidationError):
        typed_envelope("", {})
    with pytest.raises(ValidationError):
        typed_envelope("x", {}, version=0)
    with pytest.raises(ValidationError):
        typed_envelope("\ud800", {})
    with pytest.raises(CanonicalJSONError):
        typed_envelope("x", {"a": float("nan")})


def test_decode_frozen_checks_the_digest() -> None:
    digest, data = encode_frozen("tool_output", '{"b":2,"a":1}')
    assert digest == sha256_digest(data) == digest_tool_output('{"a":1,"b":2}')
    assert decode_frozen("tool_output", digest, data) == {"output": {"a": 1.0, "b": 2.0}}
    assert decode_frozen_value("tool_output", digest, data) == '{"a":1,"b":2}'
    other = digest_tool_output('"x"')
    with pytest.raises(DecodeError) as info:
        decode_frozen("tool_output", other, data)
    assert info.value.reason == "digest_mismatch"
    with pytest.raises(DecodeError):
        decode_frozen("tool_output", "sha256:XYZ", data)
    with pytest.raises(DecodeError):
        decode_frozen_value("tool_definition", digest, data)


# --------------------------------------------------------------------------- body digests

REQUEST = ModelRequest(
    model="gpt-test",
    tools=(
        ToolDefinition("search", "find things", '{"properties":{"q":{"type":"string"}}}'),
        ToolDefinition("noop"),
    ),
    body='{"messages":[{"content":"hi","role":"user"}],"temperature":0.5}',
)
RESULT = ModelResult(
    content="done",
    tool_calls=(ModelToolCall("", "search", '{"q":"x"}'), ModelToolCall("", "noop", "{}")),
    finish_reason="tool_calls",
    usage=Usage(3, 4),
    body='{"id":"resp-1"}',
)


def test_model_request_json_shape_and_inverse() -> None:
    obj = model_request_json(REQUEST)
    assert obj == {
        "messages": [{"content": "hi", "role": "user"}],
        "temperature": 0.5,
        "model": "gpt-test",
        "tools": [
            {
                "name": "search",
                "description": "find things",
                "parameters": {"properties": {"q": {"type": "string"}}},
            },
            {"name": "noop"},
        ],
    }
    assert model_request_from_json(parse_json_strict(canonical_json(obj))) == REQUEST
    assert model_request_json(ModelRequest("m")) == {"model": "m"}
    assert digest_model_request(REQUEST) == content_digest("model_request", obj)
    digest, data = encode_frozen("model_request", REQUEST)
    assert digest == digest_model_request(REQUEST) == sha256_digest(data)
    assert decode_frozen_value("model_request", digest, data) == REQUEST


def test_model_request_body_rules() -> None:
    for body in ('{"model":"x"}', '{"tools":[]}', "[]", '"text"', "not json"):
        with pytest.raises(ValidationError):
            model_request_json(ModelRequest("m", body=body))
        with pytest.raises(ValidationError):
            digest_model_request(ModelRequest("m", body=body))
    with pytest.raises(ValidationError):
        digest_model_request("not a request")  # type: ignore[arg-type]
    # content is what counts: a non-canonical body digests like its canonical twin
    loose = ModelRequest("m", body='{ "b" : 1, "a" : [ 1.0 ] }')
    tight = ModelRequest("m", body='{"a":[1],"b":1}')
    assert digest_model_request(loose) == digest_model_request(tight)


@pytest.mark.parametrize(
    "obj",
    [
        [],
        {},
        {"model": 1},
        {"model": "m", "tools": {}},
        {"model": "m", "tools": [{"description": "x"}]},
        {"model": "m", "tools": [{"name": "x", "extra": 1}]},
        {"model": "m", "tools": [{"name": "x", "description": None}]},
    ],
)
def test_model_request_from_json_is_strict(obj: object) -> None:
    with pytest.raises(DecodeError) as info:
        model_request_from_json(obj)
    assert info.value.record == "model_request"


def test_model_result_json_shape_and_inverse() -> None:
    obj = model_result_json(RESULT)
    assert obj == {
        "id": "resp-1",
        "content": "done",
        "toolCalls": [
            {"id": "", "name": "search", "arguments": {"q": "x"}},
            {"id": "", "name": "noop", "arguments": {}},
        ],
        "finishReason": "tool_calls",
        "usage": {"inputTokens": 3, "outputTokens": 4},
    }
    assert model_result_from_json(parse_json_strict(canonical_json(obj))) == RESULT
    assert model_result_json(ModelResult()) == {}
    assert model_result_from_json({}) == ModelResult()
    digest, data = encode_frozen("model_result", RESULT)
    assert digest == digest_model_result(RESULT) == content_digest("model_result", obj)
    assert decode_frozen_value("model_result", digest, data) == RESULT
    for body in ('{"usage":1}', '{"content":"x"}', '{"toolCalls":[]}', '{"finishReason":""}'):
        with pytest.raises(ValidationError):
            model_result_json(ModelResult(body=body))
    for bad in [{"usage": {"inputTokens": 1.5}}, {"toolCalls": [{"id": "", "name": "x"}]},
                {"content": 3}, {"usage": {"tokens": 1}}]:
        with pytest.raises(DecodeError) as info:
            model_result_from_json(bad)
        assert info.value.record == "model_result"


def test_tool_definition_digest() -> None:
    definition = ToolDefinition("search", "", '{"type":"object"}')
    obj = tool_definition_json(definition)
    assert obj == {"name": "search", "parameters": {"type": "object"}}
    assert tool_definition_from_json(obj) == definition
    assert digest_tool_definition(definition) == content_digest("tool_definition", obj)
    assert digest_tool_definition(ToolDefinition("x")) == content_digest(
        "tool_definition", {"name": "x"}
    )
    assert digest_tool_definition(definition) != digest_tool_definition(
        ToolDefinition("search", "d", '{"type":"object"}')
    )
    with pytest.raises(DecodeError):
        tool_definition_from_json({"name": "x", "parameters": {"a": 1}, "other": 2})


def test_tool_output_and_response_payload_digests() -> None:
    assert digest_tool_output('{"ok":true}') == content_digest(
        "tool_output", {"output": {"ok": True}}
    )
    for bad in ("null", '""', " null "):
        with pytest.raises(ValidationError):
            digest_tool_output(bad)
        with pytest.raises(ValidationError):
            encode_frozen("tool_output", bad)
    for not_json in ("", "nope"):
        with pytest.raises(CanonicalJSONError):
            digest_tool_output(not_json)
    with pytest.raises(ValidationError):
        digest_tool_output(None)  # type: ignore[arg-type]
    assert digest_tool_output('"0"') != digest_tool_output("0")
    assert digest_tool_response_payload('{"a":1}') == content_digest(
        "tool_response_payload", {"payload": {"a": 1}}
    )
    assert digest_tool_response_payload("null") == content_digest(
        "tool_response_payload", {"payload": None}
    )
    digest, data = encode_frozen("tool_response_payload", "[1, 2]")
    assert digest == digest_tool_response_payload("[1,2]")
    assert decode_frozen_value("tool_response_payload", digest, data) == "[1,2]"
    with pytest.raises(ValidationError):
        encode_frozen("tool_definition", "{}")
    with pytest.raises(ValidationError):
        encode_frozen("model_request", "{}")


def test_frozen_tool_output_payload_shape_is_strict() -> None:
    for payload in ({"output": None}, {"output": ""}, {"output": 1, "x": 2}, {"out": 1}, [1]):
        data = typed_envelope("tool_output", payload)
        with pytest.raises(DecodeError):
            decode_frozen_value("tool_output", sha256_digest(data), data)


def test_decision_digest() -> None:
    approved = decision_digest(ResponseKind.APPROVAL, "approved", "")
    assert approved == decision_digest("approval", "approved")
    assert approved == content_digest(
        "tool_response_decision", {"kind": "approval", "decision": "approved"}
    )
    rejected = decision_digest(ResponseKind.EXTERNAL_RESPONSE, "rejected", "no")
    assert rejected == content_digest(
        "tool_response_decision",
        {"kind": "external_response", "decision": "rejected", "reason": "no"},
    )
    assert decision_digest("approval", "rejected", "no") != rejected
    for kind, decision in [("approve", "approved"), ("approval", "ok"), (None, "approved")]:
        with pytest.raises(ValidationError):
            decision_digest(kind, decision)  # type: ignore[arg-type]
