"""The effect vocabulary (spec §6.1-§6.6, §8.2 #39-#41): pure values, no trio needed."""

from __future__ import annotations

import pickle

import attrs
import pytest

from runx_actors import effect
from runx_actors.protocol.errors import ValidationError
from runx_actors.protocol.values import (
    ModelRequest,
    ModelResult,
    ResponsePolicy,
    ToolCallBinding,
    ToolPlacement,
    ToolReplay,
    ToolResult,
)

DIGEST = "sha256:" + "ab" * 32
KEY = effect.AssignmentKey("scope-1", "run-1", "effect-1")

ALL_RESULTS: list[effect.OutcomeResult] = [
    effect.ModelSucceeded(ModelResult(content="hi")),
    effect.ModelFailed(effect.FailureCode.RATE_LIMITED, "slow down"),
    effect.ToolExecutionSucceeded(ToolResult('{"ok":true}')),
    effect.ToolExecutionFailed(effect.ToolFailure("not_found", "gone"),
                               effect.RetryDisposition.NEVER),
    effect.ToolExecutionUnknown(effect.ToolFailure("timeout")),
    effect.Cancelled("stop"),
    effect.Unknown("disposed"),
]


def test_execution_status_terminal() -> None:
    """#39: exactly completed, failed, cancelled, unknown, aborted are terminal, and
    Outcome.status() maps per §6.4 (RUN-EXE-3)."""
    terminal = {s.value for s in effect.ExecutionStatus if s.is_terminal}
    assert terminal == {"completed", "failed", "cancelled", "unknown", "aborted"}
    assert {s.value for s in effect.TERMINAL_STATUSES} == terminal
    assert {s.value for s in effect.ExecutionStatus} == terminal | {
        "not_found", "accepted", "dispatching", "running", "cancel_requested"}

    expected = {
        effect.ModelSucceeded: effect.ExecutionStatus.COMPLETED,
        effect.ToolExecutionSucceeded: effect.ExecutionStatus.COMPLETED,
        effect.ModelFailed: effect.ExecutionStatus.FAILED,
        effect.ToolExecutionFailed: effect.ExecutionStatus.FAILED,
        effect.Cancelled: effect.ExecutionStatus.CANCELLED,
        effect.Unknown: effect.ExecutionStatus.UNKNOWN,
        effect.ToolExecutionUnknown: effect.ExecutionStatus.UNKNOWN,
    }
    assert set(expected) == set(effect.OUTCOME_RESULT_TYPES)
    for result in ALL_RESULTS:
        status = effect.Outcome(KEY, result).status()
        assert status is expected[type(result)]
        assert status.is_terminal
    assert effect.Outcome(KEY, None).status() is effect.ExecutionStatus.UNKNOWN


def test_attachment_state_vocabulary() -> None:
    """#40: exactly the five states, with the reconcile verdicts of §6.4."""
    assert [s.value for s in effect.AttachmentState] == [
        "missing", "active", "orphaned", "terminal", "aborted"]
    verdicts = {s.value: s.verdict for s in effect.AttachmentState}
    assert verdicts == {
        "missing": effect.Verdict.DISPOSE,
        "active": effect.Verdict.KEEP,
        "orphaned": effect.Verdict.DEFER,
        "terminal": effect.Verdict.KEEP,
        "aborted": effect.Verdict.DISPOSE,
    }
    # missing disposes only after a won abort (INV-31); nothing else needs one
    assert [s for s in effect.AttachmentState if s.needs_abort] == [
        effect.AttachmentState.MISSING]
    assert {v.value for v in effect.Verdict} == {"keep", "defer", "redispatch", "dispose"}


def _binding(replay: ToolReplay) -> ToolCallBinding:
    return ToolCallBinding(call_id="call-1", tool_ref="fs.read", definition_digest=DIGEST,
                           arguments='{"path":"NOTES.md"}', replay=replay,
                           placement=ToolPlacement.WORKSPACE)


def _assignment_from(binding: ToolCallBinding) -> effect.Assignment:
    return effect.Assignment(
        session="scope-1", run_id="run-1", step_id="step-1", call_id=binding.call_id,
        effect="effect-1", body=effect.ToolAssignment(
            tool_ref=binding.tool_ref, definition_digest=binding.definition_digest,
            arguments=binding.arguments, policy=binding.policy, replay=binding.replay,
            placement=binding.placement))


def test_tool_assignment_carries_replay_policy() -> None:
    """#41: the replay policy reaches the ToolAssignment; UNKNOWN is omitted on the wire
    (RUN-EXE-1, RUN-EXE-9)."""
    for replay in ToolReplay:
        assignment = _assignment_from(_binding(replay))
        assert isinstance(assignment.body, effect.ToolAssignment)
        assert assignment.body.replay is replay
        wire = effect.to_wire(assignment)
        if replay is ToolReplay.UNKNOWN:
            assert "replay" not in wire["body"]
        else:
            assert wire["body"]["replay"] == replay.value
        assert effect.from_wire(effect.Assignment, wire) == assignment
    assert effect.ToolAssignment(tool_ref="t", arguments="{}").replay is ToolReplay.UNKNOWN


def test_assignment_key_kind_and_digest_only_form() -> None:
    request = ModelRequest("model-a")
    model = effect.Assignment(
        session="s", run_id="r", step_id="st", effect="e",
        target=effect.TargetRef("pool", "gpu-1"),
        body=effect.ModelAssignment(model="model-a", request_digest=DIGEST, request=request))
    assert model.kind == "model"
    assert model.key == effect.AssignmentKey("s", "r", "e")
    light = model.digest_only()
    assert isinstance(light.body, effect.ModelAssignment)
    assert light.body.request is None and light.body.request_digest == DIGEST
    assert light.key == model.key and light.target == model.target
    assert light.digest_only() is light
    tool = _assignment_from(_binding(ToolReplay.NEVER))
    assert tool.kind == "tool" and tool.digest_only() is tool
    probe = effect.Assignment.for_key(KEY)
    assert probe.key == KEY


def test_value_validators_raise_validation_error() -> None:
    with pytest.raises(ValidationError):
        effect.TargetRef("", "x")
    with pytest.raises(ValidationError):
        effect.TargetRef("pool", "")
    with pytest.raises(ValidationError):
        effect.ToolAssignment(tool_ref="", arguments="{}")
    with pytest.raises(ValidationError):
        effect.ToolAssignment(tool_ref="t", arguments="{}", definition_digest="md5:x")
    with pytest.raises(ValidationError):
        effect.ModelAssignment(model="m", request_digest="nope")
    with pytest.raises(ValidationError):
        effect.Assignment(session="s", run_id="r", effect="e", body="tool")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        effect.ToolFailure("")
    with pytest.raises(ValidationError):
        effect.Outcome(KEY, "done")  # type: ignore[arg-type]
    with pytest.raises(ValidationError):
        effect.ProgressFrame(key=KEY, generation=-1, sequence=1, kind=effect.ProgressKind.END)


def test_values_are_frozen_and_hashable() -> None:
    outcomes = {effect.Outcome(KEY, result) for result in ALL_RESULTS}
    assert len(outcomes) == len(ALL_RESULTS)
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        KEY.effect = "other"  # type: ignore[misc]
    assert pickle.loads(pickle.dumps(effect.Outcome(KEY, ALL_RESULTS[3]))) == effect.Outcome(
        KEY, ALL_RESULTS[3])


def test_failure_codes_and_retry_dispositions() -> None:
    """RUN-EXE-11: wire-stable codes; retry() computed, ALLOWED for exactly three."""
    assert {c.value for c in effect.FailureCode} == {
        "executor_error", "frozen_value_missing", "malformed_frozen_request",
        "malformed_result", "deadline_exceeded", "rate_limited", "provider_unavailable",
        "connection_failed", "authentication_failed", "billing", "bad_request"}
    allowed = {c.value for c in effect.FailureCode
               if c.retry() is effect.RetryDisposition.ALLOWED}
    assert allowed == {"rate_limited", "provider_unavailable", "connection_failed"}
    assert all(c.retry() is effect.RetryDisposition.NEVER for c in effect.FailureCode
               if c.value not in allowed)
    assert effect.RetryDisposition.UNKNOWN.value == ""
    assert effect.ToolExecutionFailed(effect.ToolFailure("x")).retry is (
        effect.RetryDisposition.UNKNOWN)


@pytest.mark.parametrize(("status", "code"), [
    (429, "rate_limited"), (500, "provider_unavailable"), (503, "provider_unavailable"),
    (401, "authentication_failed"), (403, "authentication_failed"), (402, "billing"),
    (400, "bad_request"), (404, "bad_request"), (200, None), (302, None),
])
def test_classify_http_status(status: int, code: str | None) -> None:
    found = effect.classify_http_status(status)
    assert (found.value if found else None) == code


def test_classify_provider_error_order() -> None:
    classify = effect.classify_provider_error
    assert classify(status=429, network=True) is effect.FailureCode.RATE_LIMITED
    assert classify(network=True) is effect.FailureCode.CONNECTION_FAILED
    assert classify(network=True, deadline=True) is effect.FailureCode.DEADLINE_EXCEEDED
    assert classify() is effect.FailureCode.EXECUTOR_ERROR
    assert classify(status=200) is effect.FailureCode.EXECUTOR_ERROR


def test_tool_failure_converts_to_protocol_failure() -> None:
    failure = effect.ToolFailure("invalid_arguments", "bad path").to_failure()
    assert (failure.class_, failure.message) == ("invalid_arguments", "bad path")


def test_outcome_kinds_never_meet_trio_cancelled() -> None:
    import trio

    kinds: set[object] = {effect.Cancelled, effect.Unknown}
    assert trio.Cancelled not in kinds
    assert not issubclass(effect.Cancelled, BaseException)
    assert effect.Cancelled.__module__ == "runx_actors.effect"


def test_wire_round_trips_every_outcome_kind() -> None:
    for result in [*ALL_RESULTS, None]:
        outcome = effect.Outcome(KEY, result)
        wire = effect.to_wire(outcome)
        assert effect.from_wire(effect.Outcome, wire) == outcome
    wire = effect.to_wire(effect.Outcome(KEY, ALL_RESULTS[3]))
    assert wire["result"] == {"type": "tool_execution_failed", "retry": "never",
                              "failure": {"class": "not_found", "message": "gone"}}
    assert effect.to_wire(effect.Outcome(KEY, effect.Cancelled()))["result"] == {
        "type": "cancelled"}


def test_wire_round_trips_ports_values() -> None:
    values = [
        effect.Attachment(state=effect.AttachmentState.ACTIVE,
                          execution=effect.ExecutionRef("local", "x/1"), owner="o",
                          backend_attached=True),
        effect.Settlement(KEY, "epoch-1", 7),
        effect.Settlement(None, "epoch-1", 0),
        effect.ProgressFrame(key=KEY, generation=1, sequence=2,
                             kind=effect.ProgressKind.TOOL_PROGRESS, payload='{"pct":5}'),
        effect.Assignment(session="s", run_id="r", effect="e",
                          body=effect.ModelAssignment(model="m", request_digest=DIGEST,
                                                      request=ModelRequest("m"))),
    ]
    for value in values:
        assert effect.from_wire(type(value), effect.to_wire(value)) == value
    assert effect.to_wire(effect.Attachment(state=effect.AttachmentState.MISSING)) == {
        "state": "missing"}
    assert "policy" not in effect.to_wire(_assignment_from(_binding(ToolReplay.NEVER)))["body"]
    assert effect.to_wire(effect.ToolAssignment(
        tool_ref="t", arguments="{}", policy=ResponsePolicy.APPROVAL_REQUIRED))["policy"] == (
        "approval_required")


@pytest.mark.parametrize("bad", [
    {"session": "s", "runId": "r", "effect": "e", "extra": 1},
    {"session": "s", "runId": "r"},
    {"session": "s", "runId": "r", "effect": 3},
])
def test_wire_decoding_is_strict(bad: object) -> None:
    from runx_actors.protocol.errors import DecodeError

    with pytest.raises(DecodeError):
        effect.from_wire(effect.AssignmentKey, bad)
    with pytest.raises(DecodeError):
        effect.from_wire(effect.Outcome, {"key": effect.to_wire(KEY),
                                          "result": {"type": "exploded"}})
    with pytest.raises(TypeError):
        effect.to_wire(object())


def test_effect_exports() -> None:
    for name in effect.__all__:
        obj = getattr(effect, name)
        if isinstance(obj, type):
            assert obj.__module__ == "runx_actors.effect", name
