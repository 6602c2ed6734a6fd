"""The wire codec of facts and commands (spec §0.4, §2.6, §2.12; §8.1 item 28).

Plain synchronous pytest plus hypothesis properties (profiles come from conftest).
"""

from __future__ import annotations

import json
import typing
from typing import Any

import attrs
import pytest
from hypothesis import given
from hypothesis import strategies as st

from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol import state as S
from runx_actors.protocol import values as V
from runx_actors.protocol._codec import (
    JSON_TEXT_FIELDS,
    command_payload,
    decode_command,
    decode_command_payload,
    decode_fact,
    decode_fact_payload,
    decode_value,
    encode_command,
    encode_fact,
    encode_value,
    fact_payload,
    wire_key,
)
from runx_actors.protocol.canonical import (
    canonical_json,
    content_digest,
    parse_json_strict,
    typed_envelope,
)
from runx_actors.protocol.errors import CanonicalJSONError, DecodeError, ValidationError
from runx_actors.testing import strategies as rs

D1 = content_digest("agent_input", {"text": "one"})
D2 = content_digest("agent_input", {"text": "two"})
FAILURE = V.Failure("execution_failed", "boom")
BINDING_DIRECT = V.ToolCallBinding(
    call_id="call-0", provider_call_id="p-0", tool_ref="search", definition_digest=D1,
    arguments='{"q":"x"}',
)
BINDING_APPROVAL = V.ToolCallBinding(
    call_id="call-1", tool_ref="rm", definition_digest=D2, arguments="[1,2.5,null]",
    policy=V.ResponsePolicy.APPROVAL_REQUIRED, replay=V.ToolReplay.NEVER,
    placement=V.ToolPlacement.WORKSPACE,
    response=V.ResponseRequest(
        run_id="run-1", step_id="ts-1", call_id="call-1", id="resp-1",
        kind=V.ResponseKind.APPROVAL, payload="[1,2.5,null]",
    ),
)
SPEC = V.ToolSpec(ref="search-v1", name="search", definition_digest=D1)
SPEC_EXTERNAL = V.ToolSpec(
    ref="ask", name="ask", definition_digest=D2, policy=V.ResponsePolicy.EXTERNAL_RESPONSE,
    replay=V.ToolReplay.ALLOWED, placement=V.ToolPlacement.WORKSPACE,
)
REQUEST = V.ModelRequest(
    model="m-1",
    tools=(V.ToolDefinition("search", "find", '{"type":"object"}'), V.ToolDefinition("ask")),
    body='{"messages":[{"content":"hi","role":"user"}]}',
)
RESULT = V.ModelResult(
    content="", tool_calls=(V.ModelToolCall("", "search", '{"q":"x"}'),),
    finish_reason="tool_calls", usage=V.Usage(5, 7), body='{"provider":"test"}',
)

TOOL_STEP_OPENED = F.ToolStepOpened(
    step_id="ts-1", source="s-1", calls=(BINDING_DIRECT, BINDING_APPROVAL),
    scheduling=V.ToolScheduling("sequential", 1),
)
PREPARE = C.PrepareModelRequest(
    step_id="s-1", model="m-1", request=REQUEST, request_digest=D1,
    input_ids=("in-1",), prompt_token="tok", tools=(SPEC, SPEC_EXTERNAL),
)
SUBMIT_TOOL_RESULT = C.SubmitToolResult(
    step_id="ts-1", call_id="call-0", effect="e-2", result=V.ToolResult('{"rows":[1,2]}'),
)
SUBMIT_TOOL_RESPONSE = C.SubmitToolResponse(
    step_id="ts-1", call_id="call-1", response_id="resp-1", response_digest=D2,
    payload='{"answer":"yes"}',
)

FACT_EXAMPLES: list[Any] = [
    F.RunCreated("run-1"),
    F.RunCreated("run-1", causation_id="turn-3"),
    F.ModelStepPrepared(step_id="s-1", model="m-1", request_digest=D1),
    F.ModelStepPrepared(
        step_id="s-1", model="m-1", request_digest=D1, input_ids=("in-1", "in-2"),
        tools=(SPEC, SPEC_EXTERNAL),
    ),
    F.ModelStepWithdrawn("s-1"),
    F.ModelStepStarted("s-1", "e-1"),
    F.ModelStepRecovered("s-1", "e-1"),
    F.ModelStepRejected(step_id="s-1", effect="e-1", failure=V.Failure("malformed_model_result")),
    F.ModelStepRejected(
        step_id="s-1", effect="e-1", usage=V.Usage(3, 0), failure=V.Failure("x", "why"),
    ),
    F.ModelStepFailed(step_id="s-1", effect="e-1", failure=FAILURE),
    F.ModelStepCompleted(step_id="s-1", effect="e-1", result_digest=D2),
    F.ModelStepCompleted(
        step_id="s-1", effect="e-1", usage=V.Usage(1, 2), finish_reason="stop", result_digest=D2,
    ),
    F.ToolStepOpened(step_id="ts-1", source="s-1", calls=(BINDING_DIRECT,)),
    TOOL_STEP_OPENED,
    F.ToolCallStarted(step_id="ts-1", call_id="call-0", effect="e-2"),
    F.ToolCallApproved(step_id="ts-1", call_id="call-1", response_id="resp-1", response_digest=D1),
    F.ToolCallCompleted(step_id="ts-1", call_id="call-0", effect="e-2", output_digest=D2),
    F.ToolCallAnswered(step_id="ts-1", call_id="call-1", response_id="resp-1", response_digest=D2),
    F.ToolCallFailed(step_id="ts-1", call_id="call-0", failure=V.Failure("cancelled")),
    F.ToolCallFailed(
        step_id="ts-1", call_id="call-0", effect="e-2", failure=V.Failure("effect_unknown", "?"),
        outcome=V.ToolFailureOutcome.UNKNOWN,
    ),
    F.InputAccepted(V.AgentInput("in-1", D1)),
    F.RunEnded(V.RunCompletedEnd()),
    F.RunEnded(V.RunStoppedEnd(V.RunReason.CANCELLED)),
    F.RunEnded(V.RunStoppedEnd(V.RunReason.CANCELLED, ("call-0", "call-1"), "s-1")),
    F.RunEnded(V.RunFailedEnd(V.RunReason.PROVIDER_FAILURE, V.RunFailure("provider_failure"))),
    F.RunEnded(
        V.RunFailedEnd(
            V.RunReason.MALFORMED_MODEL_RESULT,
            V.RunFailure("malformed_model_result", "bad json", call_id="call-0"),
        )
    ),
]

COMMAND_EXAMPLES: list[Any] = [
    C.AcceptInput((V.AgentInput("in-1", D1), V.AgentInput("in-2", D2))),
    PREPARE,
    C.PrepareModelRequest(
        step_id="s-1", model="m-1", request=V.ModelRequest("m-1"), request_digest=D1,
    ),
    C.WithdrawPreparedStep("s-1"),
    C.StartModelExecution("s-1", "e-1"),
    C.RecoverModelExecution("s-1", "e-1"),
    C.SubmitModelResult(step_id="s-1", effect="e-1", result=V.ModelResult(content="hello")),
    C.SubmitModelResult(
        step_id="s-1", effect="e-1", result=RESULT, calls=(BINDING_DIRECT,),
        scheduling=V.ToolScheduling("parallel", 4),
    ),
    C.SubmitModelFailure(step_id="s-1", effect="e-1", failure=FAILURE),
    C.RejectModelResult(
        step_id="s-1", effect="e-1", failure=V.Failure("malformed_model_result"),
        disposition=V.ModelRejectDisposition.RETRY,
    ),
    C.RejectModelResult(
        step_id="s-1", effect="e-1", usage=V.Usage(0, 9), failure=V.Failure("m", "x"),
        disposition=V.ModelRejectDisposition.FAIL_RUN,
    ),
    C.StartToolCall(step_id="ts-1", call_id="call-0", effect="e-2"),
    SUBMIT_TOOL_RESULT,
    C.SubmitToolFailure(step_id="ts-1", call_id="call-0", effect="e-2", failure=FAILURE),
    C.SubmitToolFailure(
        step_id="ts-1", call_id="call-0", effect="e-2", failure=V.Failure(""),
        outcome=V.ToolFailureOutcome.UNKNOWN,
    ),
    C.DeclineToolCall(step_id="ts-1", call_id="call-0", failure=V.Failure("tool_lookup_failed")),
    C.ApproveToolCall(step_id="ts-1", call_id="call-1", response_id="resp-1", response_digest=D1),
    C.RejectToolCall(step_id="ts-1", call_id="call-1", response_id="resp-1", response_digest=D1),
    C.RejectToolCall(
        step_id="ts-1", call_id="call-1", response_id="resp-1", response_digest=D1, reason="no",
    ),
    SUBMIT_TOOL_RESPONSE,
    C.CancelRun(),
    C.CancelRun("cancelled"),
]


def _name(value: object) -> str:
    return type(value).__name__


# --------------------------------------------------------------------------- §8.1 item 28


RUN_ENDED_INVALID = [
    b'v1:9:run_ended:{"end":{}}',  # zero keys
    b'v1:9:run_ended:{"end":{"completed":{},"stopped":{"reason":"cancelled"}}}',  # two keys
    b'v1:9:run_ended:{"end":{"stopped":{}}}',  # stopped without reason
    b'v1:9:run_ended:{"end":{"stopped":{"reason":""}}}',  # empty reason
    b'v1:9:run_ended:{"end":{"failed":{"reason":"provider_failure","failure":{}}}}',  # no class
    b'v1:9:run_ended:{"end":{"failed":{"reason":"provider_failure",'
    b'"failure":{"class":""}}}}',  # empty class
    b'v1:9:run_ended:{"end":{"failed":{"failure":{"class":"x"}}}}',  # failed without reason
    b'v1:9:run_ended:{"end":{"completed":{"extra":1}}}',  # extra field in the variant
    b'v1:9:run_ended:{"end":{"stopped":{"reason":"cancelled","why":"x"}}}',
    b'v1:9:run_ended:{"end":{"completed":{}},"runId":"run-1"}',  # extra field in the fact
    b'v1:9:run_ended:{"end":{"completed":{}}}x',  # trailing data
    b'v1:9:run_ended:{"end":{"completed":{}}}\n',
    b'v1:9:run_ended:{"end":{"ended":{}}}',  # unknown variant
    b'v1:9:run_ended:{"end":"completed"}',
    b'v1:9:run_ended:{"end":null}',
    b'v1:9:run_ended:{"end":{"completed":null}}',
    b'v1:9:run_ended:{"end":{"stopped":{"reason":"paused"}}}',  # bad enum value
    b'v1:9:run_ended:{}',  # missing end
]


def test_run_ended_tagged_union_rejects_invalid_values() -> None:
    """28: decoding {}, two keys, a stopped end without reason, a failed end without class,
    an extra field, or trailing data is refused."""
    assert decode_fact(b'v1:9:run_ended:{"end":{"completed":{}}}') == F.RunEnded(
        V.RunCompletedEnd()
    )
    for data in RUN_ENDED_INVALID:
        with pytest.raises(DecodeError) as info:
            decode_fact(data)
        assert info.value.record == "run_ended", data
        assert info.value.reason, data


def test_run_ended_wire_shapes() -> None:
    assert fact_payload(F.RunEnded(V.RunCompletedEnd())) == {"end": {"completed": {}}}
    assert fact_payload(F.RunEnded(V.RunStoppedEnd(V.RunReason.CANCELLED, ("c",), "s"))) == {
        "end": {"stopped": {"reason": "cancelled", "uncertainCalls": ["c"], "uncertainModel": "s"}}
    }
    assert fact_payload(
        F.RunEnded(V.RunFailedEnd(V.RunReason.EFFECT_UNKNOWN, V.RunFailure("effect_unknown")))
    ) == {"end": {"failed": {"failure": {"class": "effect_unknown"}, "reason": "effect_unknown"}}}


def test_run_ended_encoding_refuses_invalid_ends() -> None:
    invalid = [
        V.RunStoppedEnd(V.RunReason.NONE),
        V.RunFailedEnd(V.RunReason.NONE, V.RunFailure("x")),
        V.RunFailedEnd(V.RunReason.PROVIDER_FAILURE, V.RunFailure("")),
        "completed",
    ]
    for end in invalid:
        with pytest.raises(ValidationError) as info:
            encode_fact(F.RunEnded(end))  # type: ignore[arg-type]
        assert info.value.attrs["record"] == "run_ended"


# --------------------------------------------------------------------------- round trips


def test_examples_cover_every_fact_and_command_type() -> None:
    assert {type(f) for f in FACT_EXAMPLES} == set(F.FACT_TYPES)
    assert {type(c) for c in COMMAND_EXAMPLES} == set(C.COMMAND_TYPES)
    assert len(F.FACT_TYPES) == 16 and len(C.COMMAND_TYPES) == 16


@pytest.mark.parametrize("fact", FACT_EXAMPLES, ids=_name)
def test_fact_round_trip(fact: Any) -> None:
    data = encode_fact(fact)
    assert data.startswith(b"v1:%d:%s:" % (len(fact.WIRE_NAME), fact.WIRE_NAME.encode()))
    assert data == typed_envelope(fact.WIRE_NAME, fact_payload(fact))
    decoded = decode_fact(data)
    assert decoded == fact and type(decoded) is type(fact)
    assert encode_fact(decoded) == data
    reparsed = parse_json_strict(canonical_json(fact_payload(fact)))
    assert decode_fact_payload(fact.WIRE_NAME, reparsed) == fact
    assert decode_fact(bytearray(data)) == fact
    assert decode_fact(memoryview(data)) == fact


@pytest.mark.parametrize("command", COMMAND_EXAMPLES, ids=_name)
def test_command_round_trip(command: Any) -> None:
    data = encode_command(command)
    assert data == typed_envelope(command.WIRE_NAME, command_payload(command))
    decoded = decode_command(data)
    assert decoded == command and type(decoded) is type(command)
    assert encode_command(decoded) == data
    assert decode_command_payload(command.WIRE_NAME, command_payload(command)) == command


def test_fact_payloads_carry_no_run_id_except_run_created() -> None:
    assert fact_payload(F.RunCreated("run-1")) == {"runId": "run-1"}
    assert fact_payload(F.RunCreated("run-1", "c")) == {"runId": "run-1", "causationId": "c"}
    for fact in FACT_EXAMPLES:
        if not isinstance(fact, F.RunCreated):
            assert "runId" not in fact_payload(fact), fact


def test_wire_shapes_camel_case_omit_zero_and_embedded_json() -> None:
    payload = fact_payload(TOOL_STEP_OPENED)
    assert payload == {
        "stepId": "ts-1",
        "source": "s-1",
        "scheduling": {"mode": "sequential", "maxParallel": 1},
        "calls": [
            {
                "callId": "call-0", "providerCallId": "p-0", "toolRef": "search",
                "definitionDigest": D1, "arguments": {"q": "x"},
            },
            {
                "callId": "call-1", "toolRef": "rm", "definitionDigest": D2,
                "arguments": [1, 2.5, None], "policy": "approval_required",
                "replay": "never", "placement": "workspace",
                "response": {
                    "runId": "run-1", "stepId": "ts-1", "callId": "call-1", "id": "resp-1",
                    "kind": "approval", "payload": [1, 2.5, None],
                },
            },
        ],
    }
    assert fact_payload(F.ToolCallFailed(step_id="s", call_id="c", failure=V.Failure("x"))) == {
        "stepId": "s", "callId": "c", "failure": {"class": "x"},
    }
    assert fact_payload(F.ModelStepPrepared(step_id="s", model="m", request_digest=D1)) == {
        "stepId": "s", "model": "m", "requestDigest": D1,
    }
    assert command_payload(C.CancelRun()) == {}
    # a field without a default is written even when empty (an UNKNOWN failure's class)
    failure = C.SubmitToolFailure(
        step_id="s", call_id="c", effect="e", failure=V.Failure(""),
        outcome=V.ToolFailureOutcome.UNKNOWN,
    )
    assert command_payload(failure)["failure"] == {"class": ""}
    assert command_payload(PREPARE)["request"] == {
        "messages": [{"content": "hi", "role": "user"}],
        "model": "m-1",
        "tools": [
            {"name": "search", "description": "find", "parameters": {"type": "object"}},
            {"name": "ask"},
        ],
    }
    assert command_payload(SUBMIT_TOOL_RESULT)["result"] == {"output": {"rows": [1, 2]}}
    assert command_payload(SUBMIT_TOOL_RESPONSE)["payload"] == {"answer": "yes"}


def test_json_text_fields_are_recanonicalised_on_decode() -> None:
    data = (
        b'v1:17:tool_call_started:{"callId":"c","effect":"e","stepId":"s"}'
    )
    assert decode_fact(data) == F.ToolCallStarted(step_id="s", call_id="c", effect="e")
    payload = {
        "stepId": "s", "source": "m",
        "calls": [{"callId": "c", "toolRef": "t", "arguments": {"b": 1.0, "a": [2.50, "é"]}}],
    }
    fact = decode_fact_payload("tool_step_opened", payload)
    assert isinstance(fact, F.ToolStepOpened)
    assert fact.calls[0].arguments == '{"a":[2.5,"é"],"b":1}'
    null_args = decode_fact_payload("tool_step_opened", {**payload, "calls": [
        {"callId": "c", "toolRef": "t", "arguments": None}]})
    assert isinstance(null_args, F.ToolStepOpened)
    assert null_args.calls[0].arguments == "null"


def test_integral_doubles_are_accepted_for_int_fields() -> None:
    data = (
        b'v1:20:model_step_completed:{"effect":"e","resultDigest":"%s","stepId":"s",'
        b'"usage":{"inputTokens":2.0,"outputTokens":1e1}}' % D1.encode()
    )
    fact = decode_fact(data)
    assert isinstance(fact, F.ModelStepCompleted)
    assert fact.usage == V.Usage(2, 10)
    assert type(fact.usage.input_tokens) is int


def test_explicit_zero_values_are_accepted() -> None:
    payload = {
        "stepId": "s", "callId": "c", "effect": "", "failure": {"class": "x", "message": ""},
        "outcome": "known",
    }
    assert decode_fact_payload("tool_call_failed", payload) == F.ToolCallFailed(
        step_id="s", call_id="c", failure=V.Failure("x")
    )
    binding: dict[str, Any] = {"callId": "c", "toolRef": "t", "arguments": {}, "response": None,
               "replay": "", "placement": ""}
    fact = decode_fact_payload("tool_step_opened", {"stepId": "s", "source": "m",
                                                    "calls": [binding]})
    assert isinstance(fact, F.ToolStepOpened)
    assert fact.calls[0] == V.ToolCallBinding(call_id="c", tool_ref="t", arguments="{}")


# --------------------------------------------------------------------------- strict decoding

DECODE_FAILURES: list[tuple[str, object, str]] = [
    ("model_step_started", {"stepId": "s", "effect": "e", "extra": 1}, "unknown field"),
    ("model_step_started", {"stepId": "s", "effect": "e", "step_id": "s"}, "unknown field"),
    ("model_step_started", {"stepId": "s"}, "missing"),
    ("model_step_started", {"stepId": 1, "effect": "e"}, "string"),
    ("model_step_started", {"stepId": None, "effect": "e"}, "string"),
    ("model_step_started", [], "object"),
    ("model_step_started", None, "object"),
    ("run_created", {}, "missing"),
    ("run_created", {"runId": "r", "stepId": "s"}, "unknown field"),
    ("model_step_completed", {"stepId": "s", "effect": "e", "resultDigest": D1,
                              "usage": {"inputTokens": 1.5}}, "fraction"),
    ("model_step_completed", {"stepId": "s", "effect": "e", "resultDigest": D1,
                              "usage": {"inputTokens": True}}, "integer"),
    ("model_step_completed", {"stepId": "s", "effect": "e", "resultDigest": D1,
                              "usage": {"inputTokens": "1"}}, "integer"),
    ("model_step_completed", {"stepId": "s", "effect": "e", "resultDigest": D1,
                              "usage": {"inputTokens": 2.0**60}}, "2^53"),
    ("model_step_completed", {"stepId": "s", "effect": "e", "resultDigest": D1,
                              "usage": []}, "object"),
    ("tool_call_failed", {"stepId": "s", "callId": "c", "failure": {"class": "x"},
                          "outcome": "maybe"}, "ToolFailureOutcome"),
    ("tool_call_failed", {"stepId": "s", "callId": "c", "failure": {"class": "x"},
                          "outcome": 1}, "ToolFailureOutcome"),
    ("tool_call_failed", {"stepId": "s", "callId": "c", "failure": {"class_": "x"}},
     "unknown field"),
    ("tool_step_opened", {"stepId": "s", "source": "m", "calls": {}}, "array"),
    ("tool_step_opened", {"stepId": "s", "source": "m", "calls": "ab"}, "array"),
    ("tool_step_opened", {"stepId": "s", "source": "m",
                          "calls": [{"callId": "c", "toolRef": "t"}]}, "missing"),
    ("tool_step_opened", {"stepId": "s", "source": "m",
                          "calls": [{"callId": "c", "toolRef": "t", "arguments": {},
                                     "policy": "DIRECT_EXECUTION"}]}, "ResponsePolicy"),
    ("tool_step_opened", {"stepId": "s", "source": "m",
                          "calls": [{"callId": "c", "toolRef": "t", "arguments": {},
                                     "response": 5}]}, "object"),
    ("tool_step_opened", {"stepId": "s", "source": "m", "calls": [],
                          "scheduling": {"maxParallel": 0.5}}, "fraction"),
    ("model_step_prepared", {"stepId": "s", "model": "m", "requestDigest": D1,
                             "inputIds": ["a", 1]}, "string"),
    ("input_accepted", {"input": {"id": "in-1"}}, "missing"),
    ("input_accepted", {"input": {"id": "in-1", "digest": D1, "text": "x"}}, "unknown field"),
    ("input_accepted", {"input": {"id": "\ud800", "digest": D1}}, "surrogate"),
]


@pytest.mark.parametrize(("wire_name", "payload", "fragment"), DECODE_FAILURES)
def test_strict_fact_decoding_names_the_record(
    wire_name: str, payload: object, fragment: str
) -> None:
    with pytest.raises(DecodeError) as info:
        decode_fact_payload(wire_name, payload)
    err = info.value
    assert err.record == wire_name
    assert err.attrs["errors"] and all(" @ $" in e for e in err.attrs["errors"])
    assert fragment.lower() in err.reason.lower()  # the reason names the problem


def test_decode_error_paths_use_wire_keys() -> None:
    with pytest.raises(DecodeError) as info:
        decode_fact_payload(
            "tool_step_opened",
            {"stepId": "s", "source": "m",
             "calls": [{"callId": "c", "toolRef": "t", "arguments": {}},
                       {"callId": 3, "toolRef": "t", "arguments": {}}]},
        )
    assert info.value.attrs["errors"] == ("expected a string, got number @ $.calls[1].callId",)
    with pytest.raises(DecodeError) as info:
        decode_fact_payload("tool_call_failed", {"stepId": "s", "callId": "c", "failure": {}})
    assert info.value.attrs["errors"] == ("missing required field @ $.failure.class",)


@pytest.mark.parametrize(
    "data",
    [
        b'v1:7:unknown:{}',  # unknown wire name
        b'v1:10:cancel_run:{"reason":"cancelled"}',  # a command is not a fact
        b'v2:17:tool_call_started:{"callId":"c","effect":"e","stepId":"s"}',
        b'v1:17:tool_call_started:{"callId":"c","effect":"e","stepId":"s"} ',
        b'v1:17:tool_call_started:{"callId":"c","effect":"e","stepId":"s","stepId":"t"}',
        b'v1:17:tool_call_started:["c"]',
        b'v1:18:tool_call_started:{"callId":"c","effect":"e","stepId":"s"}',
        b"",
    ],
)
def test_decode_fact_refuses_bad_envelopes(data: bytes) -> None:
    with pytest.raises(DecodeError) as info:
        decode_fact(data)
    assert info.value.record in {"fact", "unknown", "cancel_run", "tool_call_started"}


def test_decode_fact_record_is_the_wire_name() -> None:
    with pytest.raises(DecodeError) as info:
        decode_fact(b'v1:17:tool_call_started:{"callId":"c","stepId":"s"}')
    assert info.value.record == "tool_call_started"
    with pytest.raises(DecodeError) as info:
        decode_fact(b'v1:10:cancel_run:{"reason":"cancelled"}')
    assert info.value.record == "cancel_run" and info.value.reason == "unknown_type"
    with pytest.raises(DecodeError) as info:
        decode_command(b'v1:14:input_accepted:{"input":{"digest":"d","id":"i"}}')
    assert info.value.record == "input_accepted"
    with pytest.raises(DecodeError) as info:
        decode_command_payload("cancel_run", {"reason": 1})
    assert info.value.record == "cancel_run"
    with pytest.raises(DecodeError):
        decode_fact("v1:10:run_created:{}")  # type: ignore[arg-type]


# --------------------------------------------------------------------------- strict encoding


def test_encoding_refuses_values_that_cannot_round_trip() -> None:
    cases: list[tuple[Any, type[Exception]]] = [
        (F.ToolStepOpened(step_id="s", source="m", calls=(
            attrs.evolve(BINDING_DIRECT, arguments='{"q": "x"}'),)), CanonicalJSONError),
        (F.ToolStepOpened(step_id="s", source="m", calls=(
            attrs.evolve(BINDING_DIRECT, arguments="not json"),)), CanonicalJSONError),
        (F.ModelStepCompleted(step_id="s", effect="e", usage=V.Usage(True, 0),
                              result_digest=D1), ValidationError),
        (F.ModelStepCompleted(step_id="s", effect="e", usage=V.Usage(2**53, 0),
                              result_digest=D1), ValidationError),
        (F.ModelStepCompleted(step_id="s", effect="e", usage=V.Usage(1.0, 0),  # type: ignore[arg-type]
                              result_digest=D1), ValidationError),
        (F.ModelStepStarted("s", 5), ValidationError),  # type: ignore[arg-type]
        (F.ToolCallFailed(step_id="s", call_id="c", failure=FAILURE,
                          outcome="unknown"), ValidationError),  # type: ignore[arg-type]
        (F.RunCreated("r\ud800"), CanonicalJSONError),
    ]
    for value, error in cases:
        with pytest.raises(error) as info:
            encode_fact(value)
        assert getattr(info.value, "record", None) == value.WIRE_NAME, value
    bad_body = C.PrepareModelRequest(
        step_id="s", model="m", request=V.ModelRequest("m", body='{"tools":1}'),
        request_digest=D1,
    )
    with pytest.raises(ValidationError) as info:
        encode_command(bad_body)
    assert info.value.attrs["record"] == "prepare_model_request"
    loose = C.SubmitToolResponse(step_id="s", call_id="c", response_id="r",
                                 response_digest=D1, payload="[ 1 ]")
    with pytest.raises(CanonicalJSONError):
        encode_command(loose)


def test_non_facts_and_non_commands_are_refused() -> None:
    with pytest.raises(ValidationError):
        encode_fact(C.CancelRun())  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        encode_command(F.RunCreated("r"))  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        fact_payload({"runId": "r"})  # type: ignore[arg-type]


# --------------------------------------------------------------------------- codec tables


def _json_text_annotated_fields() -> set[tuple[type[Any], str]]:
    found = set()
    for module in (V, F, C, S):
        for obj in vars(module).values():
            if isinstance(obj, type) and attrs.has(obj) and obj.__module__ == module.__name__:
                hints = typing.get_type_hints(obj, include_extras=False)
                raw = getattr(obj, "__annotations__", {})
                for a in attrs.fields(obj):
                    if raw.get(a.name) == "JSONText" or (
                        a.name in {"arguments", "payload", "output", "parameters", "body"}
                        and hints.get(a.name) is str
                    ):
                        found.add((obj, a.name))
    return found


def test_every_json_text_field_is_embedded() -> None:
    """Every field declared ``JSONText`` is in the codec's table (bodies are merged)."""
    table = {(cls, name) for cls, names in JSON_TEXT_FIELDS.items() for name in names}
    merged = {(V.ModelRequest, "body"), (V.ModelResult, "body")}
    assert _json_text_annotated_fields() == table | merged


def test_wire_key() -> None:
    assert wire_key("class_") == "class"
    assert wire_key("step_id") == "stepId"
    assert wire_key("provider_call_id") == "providerCallId"
    assert wire_key("effect") == "effect"


# --------------------------------------------------------------------------- state values


def test_machine_state_round_trip() -> None:
    ts = S.ToolStep(
        id="ts-1", source="s-1",
        calls=(S.ToolCallState(call_id="c", tool_ref="t", arguments='{"a":1}',
                               status=V.ToolCallStatus.PENDING),),
    )
    states = [
        S.MachineState(run_id="r", status=V.RunStatus.ACTIVE, current=S.OPEN),
        S.MachineState(run_id="r", status=V.RunStatus.ACTIVE, current=ts,
                       pending_inputs=(V.AgentInput("in-1", D1),), model_steps=1),
        S.MachineState(
            run_id="r", status=V.RunStatus.ACTIVE,
            current=S.ModelStep(id="s", model="m", request_digest=D1, tools=(SPEC,),
                                status=V.ModelStepStatus.EXECUTING, effect="e", rejects=2),
        ),
        S.MachineState(
            run_id="r", status=V.RunStatus.STOPPED, current=None, last_tool_step=ts,
            result=V.RunResult(status=V.RunStatus.STOPPED, reason=V.RunReason.CANCELLED),
        ),
    ]
    for state in states:
        obj = encode_value(state)
        assert decode_value(S.MachineState, parse_json_strict(canonical_json(obj))) == state
    assert encode_value(states[0]) == {"runId": "r", "status": "active", "current": {"open": {}}}
    assert encode_value(states[3])["current"] is None
    with pytest.raises(DecodeError) as info:
        decode_value(S.MachineState, {"runId": "r", "status": "active", "current": {"x": {}}})
    assert info.value.record == "MachineState"


# --------------------------------------------------------------------------- properties


@given(rs.facts())
def test_fact_codec_round_trip_property(fact: Any) -> None:
    data = encode_fact(fact)
    decoded = decode_fact(data)
    assert decoded == fact
    assert encode_fact(decoded) == data


@given(rs.commands())
def test_command_codec_round_trip_property(command: Any) -> None:
    data = encode_command(command)
    decoded = decode_command(data)
    assert decoded == command
    assert encode_command(decoded) == data


@given(rs.machine_states())
def test_machine_state_codec_round_trip_property(state: S.MachineState) -> None:
    obj = encode_value(state, S.MachineState)
    assert decode_value(S.MachineState, parse_json_strict(canonical_json(obj))) == state


@given(rs.json_values())
def test_canonical_json_is_idempotent_under_reparse(value: Any) -> None:
    once = canonical_json(value)
    twice = canonical_json(parse_json_strict(once))
    assert once == twice
    assert canonical_json(parse_json_strict(once.decode("utf-8"))) == once


@given(rs.json_values(), st.sampled_from(["", " ", "\n\t", "\r\n  "]))
def test_canonical_json_ignores_layout(value: Any, ws: str) -> None:
    loose = ws + json.dumps(value, indent=2, ensure_ascii=True, allow_nan=False) + ws
    assert canonical_json(parse_json_strict(loose)) == canonical_json(value)


@given(st.sampled_from(list(F.FACT_BY_WIRE_NAME)), rs.json_values())
def test_decoding_arbitrary_payloads_raises_only_decode_error(name: str, payload: Any) -> None:
    """Strict decoding either builds a fact that re-encodes, or raises DecodeError."""
    try:
        fact = decode_fact_payload(name, parse_json_strict(canonical_json(payload)))
    except DecodeError as err:
        assert err.record == name
    else:
        assert decode_fact(encode_fact(fact)) == fact
