"""Pause, resume and host-attested approvals (loop-host §7; §10 scenarios 31-36)."""

from __future__ import annotations

import hashlib
import re
from pathlib import Path
from typing import Any

import pytest
from loop_support import (
    GATE_ANSWER,
    GATE_OBJECTIVE,
    GATE_REQUEST,
    NOTES,
    PROBE,
    SCOPE,
    make_env,
    of_type,
)

from runx_actors.host._governed import derive_requests
from runx_actors.host._hashing import digest_json
from runx_actors.host.errors import AnswersError, ApprovalNotAttestedError, UnknownRunError
from runx_actors.host.package import load_package
from runx_actors.host.receipts import graph_locator, receipt_uri
from runx_actors.host.resume import (
    ALREADY_ANSWERED,
    ANSWERS_IGNORED,
    parse_answers,
    plan_commits,
    resume_run,
)
from runx_actors.host.skill import exit_code_of, run_skill
from runx_actors.protocol import facts as F
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.digests import digest_tool_response_payload
from runx_actors.protocol.values import ResponseKind, ResponseRequest


async def pause_gate(env: Any, **kw: Any) -> dict[str, Any]:
    return await run_skill(env.store, env.package, runner="context-gate", scope=SCOPE,
                           config=env.config(), inputs={"objective": GATE_OBJECTIVE}, **kw)


async def pause_probe(env: Any, runner: str = "probe", run_id: str = "run_probe") -> Any:
    return await run_skill(env.store, load_package(PROBE), runner=runner, scope=SCOPE,
                           config=env.config(), inputs={}, run_id=run_id)


def commits(env: Any) -> int:
    return len(env.store.scope_log(SCOPE).commits)


def by_uri(env: Any) -> dict[str, dict[str, Any]]:
    return {b["subject"]["ref"]["uri"]: b for b in env.receipt_bodies()}


# -- 31, 32: the context gate pauses, then seals with the host's answer -------------------


async def test_context_gate_pauses(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = await pause_gate(env)
    assert (result["status"], result["outcome"], exit_code_of(result)) == \
        ("needs_agent", "waiting", 2)
    assert env.receipt_files() == []  # D unchanged
    assert (result["receipt_id"], result["closure"], result["payload"]) == (None, None, None)
    run_id = result["run_id"]
    assert re.fullmatch(r"run_context_gate_[0-9a-f]{16}", run_id)
    assert result["next"] == f"runx-actors resume {run_id} - --json"
    (request,) = result["requests"]
    assert (request["id"], request["kind"], request["tool"]) == \
        (GATE_REQUEST, "agent_act", "agent_task.review-loop-plan")
    envelope = request["invocation"]["envelope"]
    assert envelope["allowed_tools"] == ["fs.read"]
    assert envelope["run_id"] == run_id and envelope["step_id"] == "review"
    assert envelope["inputs"] == {"objective": GATE_OBJECTIVE}
    assert envelope["output"] == {"decision": "string", "summary": "string",
                                  "requested_tool": "string", "stop_condition": "string"}
    assert envelope["historical_context"] == []
    assert envelope["instructions_sha256"] == \
        "sha256:" + hashlib.sha256(envelope["instructions"].encode()).hexdigest()
    assert envelope["provenance"] == {
        "package": "loop-orchestration", "package_digest": env.package.digest,
        "runner": "context-gate", "graph": "loop-context-gate", "step_id": "review",
        "agent": "reviewer", "task": "review-loop-plan"}
    (entry,) = envelope["current_context"]
    data = entry["data"]
    assert (data["name"], data["ref"], data["security_boundary"]) == \
        ("loop-operator-context", "./context/loop-operator", "untrusted-agent-context")
    assert entry["meta"]["hash"] == digest_json(data)
    assert entry["meta"]["run_id"] == run_id and entry["meta"]["step_id"] == "review"
    assert entry["meta"]["created_at"] == "2026-01-01T00:00:00.000Z"
    facts = await env.facts(run_id)
    (opened,) = of_type(facts, F.ToolStepOpened)
    assert request["response_id"] == opened.calls[0].response.id  # the inner ResponseID
    assert not of_type(facts, F.RunEnded)


async def test_resume_with_answers_seals(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    run_id = (await pause_gate(env))["run_id"]
    resumed = await resume_run(env.store, run_id, {"answers": {GATE_REQUEST: GATE_ANSWER}},
                               config=env.config(), scope=SCOPE)
    assert (resumed.result["status"], resumed.exit_code, resumed.warnings) == ("sealed", 0, ())
    assert resumed.result["outcome"] == "completed"
    assert resumed.result["payload"] == GATE_ANSWER
    receipts = by_uri(env)
    child, root = receipts[f"hrn_{run_id}_review"], receipts[f"hrn_{run_id}_graph"]
    assert (child["seal"]["disposition"], child["seal"]["reason_code"]) == \
        ("closed", "agent_act_closed")
    assert (root["seal"]["disposition"], root["seal"]["reason_code"]) == \
        ("closed", "graph_closed")
    assert (child["subject"]["kind"], root["subject"]["kind"]) == ("skill", "graph")
    assert root["lineage"]["children"] == [{"type": "receipt", "uri": receipt_uri(child["id"]),
                                            "locator": child["digest"]}]
    assert root["subject"]["ref"]["locator"] == graph_locator([child["id"]])
    assert root["idempotency"]["content_hash"] == digest_json(GATE_ANSWER)
    assert child["subject"]["commitments"] == root["subject"]["commitments"]
    assert resumed.result["receipt_id"] == root["id"]


# -- 33, 34: answers are validated whole; approvals are host-attested ------------------------


async def test_answer_closure_sets_disposition(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    run_id = (await pause_gate(env))["run_id"]
    before = commits(env)
    for bad in ({"answers": {GATE_REQUEST: {**GATE_ANSWER, "extra": "x"}}},
                {"answers": {GATE_REQUEST: {k: v for k, v in GATE_ANSWER.items()
                                            if k != "summary"}}},
                {"answers": {GATE_REQUEST: {**GATE_ANSWER, "closure": {"disposition": "x"}}}},
                {"answers": {GATE_REQUEST: {**GATE_ANSWER, "closure": {
                    "disposition": "closed", "why": "x"}}}},
                {"answers": {"agent_task.unknown.output": GATE_ANSWER}},
                {"answers": {}, "comments": "x"}):
        with pytest.raises(AnswersError) as caught:
            await resume_run(env.store, run_id, bad, config=env.config(), scope=SCOPE)
        assert caught.value.exit_code == 1
        assert commits(env) == before  # nothing committed
    declined = {**GATE_ANSWER, "closure": {"disposition": "declined"}}
    resumed = await resume_run(env.store, run_id, {"answers": {GATE_REQUEST: declined}},
                               config=env.config(), scope=SCOPE)
    assert (resumed.result["status"], resumed.exit_code) == ("failure", 1)
    assert resumed.result["closure"]["disposition"] == "declined"
    assert resumed.result["payload"] is None
    receipts = by_uri(env)
    assert receipts[f"hrn_{run_id}_review"]["seal"]["disposition"] == "declined"
    assert receipts[f"hrn_{run_id}_review"]["seal"]["reason_code"] == "agent_act_declined"
    assert receipts[f"hrn_{run_id}_graph"]["seal"]["reason_code"] == "graph_declined"


async def test_agent_authored_approval_rejected(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    probe = await pause_probe(env)
    gate_run = (await pause_gate(env))["run_id"]
    before = commits(env)
    cases = [
        (probe["run_id"], {"approvals": {"approval.fs.read": {"approved": True,
                                                              "actor": "agent"}}}),
        (gate_run, {"approvals": {GATE_REQUEST: True}}),
        (probe["run_id"], {"answers": {"approval.fs.read": {"approved": "true"}}}),
    ]
    for run_id, answers in cases:
        facts = await env.facts(run_id)
        with pytest.raises(ApprovalNotAttestedError) as caught:
            await resume_run(env.store, run_id, answers, config=env.config(), scope=SCOPE)
        assert str(caught.value).startswith("approval must be host-attested")
        assert caught.value.exit_code == 1
        assert await env.facts(run_id) == facts and commits(env) == before
    with pytest.raises(UnknownRunError):
        await resume_run(env.store, "run_nope", {}, config=env.config(), scope=SCOPE)


# -- 35: the approval gate round trip -----------------------------------------------------


async def test_approval_gate_roundtrip(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    paused = await pause_probe(env, run_id="run_probe_yes")
    assert (paused["status"], exit_code_of(paused)) == ("needs_approval", 2)
    (request,) = paused["requests"]
    assert (request["id"], request["kind"], request["tool"]) == \
        ("approval.fs.read", "approval", "fs.read")
    assert request["invocation"] == {"arguments": {"path": "NOTES.md"}}
    assert not of_type(await env.facts("run_probe_yes"), F.ToolCallStarted)
    resumed = await resume_run(env.store, "run_probe_yes", {"approvals": {
        "approval.fs.read": True}}, config=env.config(), scope=SCOPE)
    assert (resumed.result["status"], resumed.result["closure"]["disposition"]) == \
        ("sealed", "closed")
    assert resumed.result["payload"] == {
        "approved": True, "read_sha256": "sha256:" + hashlib.sha256(NOTES).hexdigest()}
    facts = await env.facts("run_probe_yes")
    assert len(of_type(facts, F.ToolCallApproved)) == 1
    assert len(of_type(facts, F.ToolCallCompleted)) == 1

    await pause_probe(env, run_id="run_probe_no")
    resumed = await resume_run(env.store, "run_probe_no", {"approvals": {"approval.fs.read": {
        "approved": False, "reason": "no mutation authority", "actor": "human"}}},
        config=env.config(), scope=SCOPE)
    assert resumed.result["payload"] == {"approved": False, "read_sha256": None}
    facts = await env.facts("run_probe_no")
    (failed,) = of_type(facts, F.ToolCallFailed)
    assert (failed.failure.class_, failed.failure.message) == \
        ("permission_denied", "no mutation authority")
    assert not of_type(facts, F.ToolCallStarted)  # the read never ran

    await pause_probe(env, runner="probe-gate-closed", run_id="run_probe_gate")
    resumed = await resume_run(env.store, "run_probe_gate", {"approvals": {
        "approval.fs.read": True}}, config=env.config(), scope=SCOPE)
    facts = await env.facts("run_probe_gate")
    assert len(of_type(facts, F.ToolCallApproved)) == 1  # approved, and still declined
    (failed,) = of_type(facts, F.ToolCallFailed)
    assert failed.failure.class_ == "tool_not_allowed" and failed.effect == ""
    assert not of_type(facts, F.ToolCallStarted)
    assert resumed.result["payload"] == {"approved": True, "read_sha256": None}


# -- 36: resume is idempotent -------------------------------------------------------------


async def test_resume_is_idempotent(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    run_id = (await pause_gate(env))["run_id"]
    answers = {"answers": {GATE_REQUEST: GATE_ANSWER}}
    first = await resume_run(env.store, run_id, answers, config=env.config(), scope=SCOPE)
    files, before = env.receipt_files(), commits(env)
    again = await resume_run(env.store, run_id, answers, config=env.config(), scope=SCOPE)
    assert again.result == first.result and again.exit_code == 0
    assert again.warnings == (ANSWERS_IGNORED,)
    assert (commits(env), env.receipt_files()) == (before, files)  # nothing committed
    other = {"answers": {GATE_REQUEST: {**GATE_ANSWER, "decision": "done"}}}
    late = await resume_run(env.store, run_id, other, config=env.config(), scope=SCOPE)
    assert late.warnings == (ANSWERS_IGNORED,)
    assert late.result["payload"] == GATE_ANSWER  # the recorded answer stands
    assert commits(env) == before


def test_answers_for_answered_requests() -> None:
    """§7.3 step 3: the same answer again is accepted; a different one is skipped."""
    payload = canonical_json_text({"step_id": "review"})
    request = ResponseRequest(run_id="r", step_id="s", call_id="c", id="resp",
                              kind=ResponseKind.EXTERNAL_RESPONSE, payload=payload)
    (info,) = derive_requests([("agent_task.review-loop-plan", request)])
    assert info.id == GATE_REQUEST
    settled = F.ToolCallAnswered(step_id="s", call_id="c", response_id="resp",
                                 response_digest=digest_tool_response_payload(
                                     canonical_json_text(GATE_ANSWER)))
    runner = load_package(PROBE.parent.parent.parent / "examples" / "loop-orchestration"
                          ).runner("context-gate")
    requests = {info.id: (info, settled)}
    same, warnings = plan_commits(runner, requests, parse_answers(
        {"answers": {GATE_REQUEST: GATE_ANSWER}}), "r")
    assert (same, warnings) == ([], [])
    other, warnings = plan_commits(runner, requests, parse_answers(
        {"answers": {GATE_REQUEST: {**GATE_ANSWER, "decision": "done"}}}), "r")
    assert other == [] and warnings == [f"{ALREADY_ANSWERED}: {GATE_REQUEST}"]
    approvals = derive_requests([
        ("fs.read", ResponseRequest(run_id="r", step_id="s", call_id=f"c{i}", id=f"a{i}",
                                    kind=ResponseKind.APPROVAL, payload="{}"))
        for i in range(3)])
    assert [a.id for a in approvals] == ["approval.fs.read", "approval.fs.read.2",
                                         "approval.fs.read.3"]
    with pytest.raises(AnswersError):
        parse_answers({"approvals": {"approval.fs.read": "yes"}})


@pytest.mark.parametrize("closure", [None, [], 3, "closed", True])
async def test_a_closure_that_is_not_an_object_is_an_answers_error(
        tmp_path: Path, closure: Any) -> None:
    """Found by tests/host/test_fuzz_inputs.py (dev profile): ``"closure": null`` raised
    AttributeError out of cattrs."""
    env = make_env(tmp_path)
    parked = await pause_gate(env)
    before = commits(env)
    with pytest.raises(AnswersError):
        await resume_run(env.store, parked["run_id"],
                         {"answers": {GATE_REQUEST: {**GATE_ANSWER, "closure": closure}}},
                         config=env.config(), scope=SCOPE)
    assert commits(env) == before
