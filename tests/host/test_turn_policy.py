"""The example's turn policy, the input contract, the policy gate and the output contract
(loop-host §2.2, §3; §10 scenarios 16, 17, 19, 20, 21).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any

import pytest
import trio
from loop_support import (
    EXAMPLE,
    NOTES,
    REFUSAL,
    REFUSAL_RUN,
    SCOPE,
    SUCCESS,
    copy_example,
    make_env,
    of_type,
    run_ids_in,
    tool_facts,
)

from runx_actors import effect
from runx_actors.executors import call_tools, tool_call
from runx_actors.host._hashing import digest_bytes, digest_json
from runx_actors.host.errors import InputContractError, PackageError
from runx_actors.host.loop import derive_turn_key, derive_turn_run_id, derive_turn_trigger
from runx_actors.host.package import apply_input_contract, load_package, package_digest
from runx_actors.host.policy import PolicyGate, policy_gate
from runx_actors.host.skill import exit_code_of, run_skill
from runx_actors.host.turn import (
    RUNX_DEFAULTS,
    TurnInputError,
    final_reply,
    positive_int,
    turn_payload,
)
from runx_actors.protocol import facts as F
from runx_actors.protocol.digests import decode_frozen_value
from runx_actors.protocol.values import ModelRequest, ModelResult, ToolFailureOutcome

SUCCESS_1 = {"loop_id": "loop-demo-success", "turn_index": 1, "max_turns": 3,
             "objective": "Draft, review, and ratify one tiny safe change.",
             "previous_summary": "No prior turn.", "requested_tool": "fs.read",
             "scenario": "success"}
REFUSAL_1 = {**SUCCESS_1, "loop_id": "loop-demo-refusal",
             "objective": "Try to mutate files without explicit authority.",
             "requested_tool": "fs.write", "scenario": "refusal"}


# -- the pure policy (§3.2-§3.4, §4.7 vectors) ----------------------------------------------


def test_turn_payload_exact_success_turn_1() -> None:
    expected = json.loads("""
{"schema": "runx.loop_turn.v1", "loop_id": "loop-demo-success",
 "turn_id": "loop-demo-success:turn-1", "turn_index": 1, "max_turns": 3,
 "objective": "Draft, review, and ratify one tiny safe change.",
 "previous_summary": "No prior turn.", "requested_tool": "fs.read",
 "allowed_tools": ["fs.read"], "decision": "continue",
 "reason_code": "bounded_next_turn_available", "next_turn_allowed": true,
 "next_turn_reason": "one more governed turn is allowed by policy",
 "projection_update": {"latest_summary": "Turn 1 read context and proposed a bounded follow-up.",
                       "consumed_authority": {"tools": ["fs.read"], "mutations": 0,
                                              "spend_minor": 0}},
 "handoff": {"target": "loop-host", "next_turn_index": 2,
             "reason": "one more governed turn is allowed by policy"},
 "receipt_notes": {"loop_state_owner": "outer-loop-host", "runx_turn_owner": "runx",
                   "context_boundary": "advisory-untrusted"}}
""")
    payload = turn_payload(SUCCESS_1)
    assert payload == expected
    assert list(payload) == list(expected)
    assert digest_json(payload) == \
        "sha256:2cf53929a51ecb3bbce2180ba233d36361e121ad7867773a46820915832d815d"


def test_turn_identity_vectors() -> None:
    second = {**SUCCESS_1, "turn_index": 2,
              "previous_summary": "Turn 1 read context and proposed a bounded follow-up."}
    cases = [
        (SUCCESS_1, "094bb8f8f8ba9f4dab69ac725fd2328b15c56227fb0631bec719373c094d2dae",
         "5ef080227d47d7f1cf05b66164aa29367069af828dcea756bc26980df7f1e4c3",
         "2cf53929a51ecb3bbce2180ba233d36361e121ad7867773a46820915832d815d"),
        (second, "9728333928d84ea1969306fc8766b1157301bd6db714a6949380e01cf4719e86",
         "357c317b91ab43e92cc058336e3e6c0840b6357d063d8efaa0c922c36c7e8f8d",
         "9c682f3974756d98a49ea4152f36d54ba479f524f5dfeebeca6451366f9200b4"),
        (REFUSAL_1, "c62479f5634efd48d469b1261b7caa5290743a6a13340b025baf15ef2847e3a6",
         "d79a1aecc8e1eb302bffdfa157fcf76068bdeffd6bad201b9c3a077420fc3e44",
         "035047b2c50f952c39d360d01bb88e1553c07b20d76122b91bea8d46ca5eabd0"),
    ]
    runner = load_package(EXAMPLE).runner("turn")
    for inputs, inputs_sha, key, content in cases:
        canonical = apply_input_contract(runner, inputs)
        assert digest_json(canonical) == "sha256:" + inputs_sha
        turn_key = derive_turn_key(canonical["loop_id"], canonical["turn_index"], canonical)
        assert turn_key == "sha256:" + key
        assert derive_turn_run_id("turn", turn_key) == "run_turn_" + key[:16]
        assert digest_json(turn_payload(canonical)) == "sha256:" + content
    assert derive_turn_trigger("loop-demo-success", 1, None) == \
        "sha256:34f611019e0386e975daf05ffd5e1bfd9f932bc2dc3b693d0573c860666ec6cf"


def test_decision_order_and_defaults() -> None:
    assert turn_payload({})["loop_id"] == RUNX_DEFAULTS["loop_id"] == "loop-demo"
    assert turn_payload({})["decision"] == "continue"  # turn 1 of 3, fs.read, success
    table = [
        ({"turn_index": 4, "max_turns": 3, "requested_tool": "fs.write"},
         ("refused", "turn_budget_exhausted", False, "max_turns has already been exhausted")),
        ({"requested_tool": "net.fetch", "scenario": "pause"},
         ("refused", "tool_not_allowed", False, "net.fetch is not in allowed_tools")),
        ({"scenario": "pause", "turn_index": 3},
         ("needs_human", "side_effect_review_required", False,
          "human review is required before the next turn")),
        ({"turn_index": 2}, ("done", "fixture_objective_complete", False,
                             "review accepted the bounded fixture result")),
        ({"turn_index": 1, "max_turns": 1}, ("done", "fixture_objective_complete", False,
                                             "review accepted the bounded fixture result")),
        ({"turn_index": 1}, ("continue", "bounded_next_turn_available", True,
                             "one more governed turn is allowed by policy")),
    ]
    for inputs, expected in table:
        p = turn_payload(inputs)
        assert (p["decision"], p["reason_code"], p["next_turn_allowed"],
                p["next_turn_reason"]) == expected
        assert (p["handoff"] is not None) == p["next_turn_allowed"]
        assert p["projection_update"]["consumed_authority"]["tools"] == \
            [inputs.get("requested_tool", "fs.read")]
    assert turn_payload({"turn_index": 2})["projection_update"]["latest_summary"] == \
        "Turn 2 ended with done: fixture_objective_complete."


def test_positive_integers() -> None:
    assert positive_int(2.0, "turn_index") == 2
    for bad in (0, -1, 1.5, True, "1", None):
        with pytest.raises(TurnInputError) as caught:
            positive_int(bad, "turn_index")
        assert str(caught.value) == "loop turn failed: turn_index must be a positive integer"


def test_input_contract() -> None:
    runner = load_package(EXAMPLE).runner("turn")
    base = {"loop_id": "l", "turn_index": 1, "max_turns": 3, "objective": "o"}
    assert apply_input_contract(runner, base) == {**base, "previous_summary": "No prior turn.",
                                                  "requested_tool": "fs.read",
                                                  "scenario": "success"}
    assert apply_input_contract(runner, {**base, "turn_index": 2.0})["turn_index"] == 2
    bad = [({**base, "turn_index": "abc"}, "turn_index"), ({**base, "turn_index": True},
                                                           "turn_index"),
           ({**base, "objective": 5}, "objective"), ({**base, "extra": 1}, "extra"),
           ({"loop_id": "l", "turn_index": 1, "max_turns": 3}, "objective"),
           ({**base, "requested_tool": ""}, "requested_tool"),
           ({**base, "requested_tool": "x" * 129}, "requested_tool")]
    for inputs, field in bad:
        with pytest.raises(InputContractError) as caught:
            apply_input_contract(runner, inputs)
        assert caught.value.reason == "input_contract_invalid"
        assert caught.value.field == field
        assert caught.value.exit_code == 1
    assert apply_input_contract(runner, {**base, "requested_tool": "x" * 128})


def test_package_loading_forbids_unknown_keys_and_coercions(tmp_path: Path) -> None:
    for old, new in (("    timeout_seconds: 15\n    tools:", "    timeout_seconds: 15\n"
                      "    colour: blue\n    tools:"),
                     ("name: loop-orchestration", "name: 7"),
                     ("default: true", "default: \"yes\""),
                     ("type: scripted-run", "type: shell")):
        root = copy_example(tmp_path, f"pkg-{abs(hash(new))}")
        xyaml = root / "X.yaml"
        xyaml.write_text(xyaml.read_text().replace(old, new, 1))
        with pytest.raises(PackageError):
            load_package(root)


def test_package_digest_rules(tmp_path: Path) -> None:
    root = copy_example(tmp_path)
    digest = package_digest(root)
    assert digest == package_digest(EXAMPLE)
    (root / ".runx").mkdir()
    (root / ".runx" / "scratch.json").write_text("{}")
    (root / "__pycache__").mkdir()
    (root / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert package_digest(root) == digest
    (root / "extra.txt").write_text("x")
    assert package_digest(root) != digest
    files = sorted(p.relative_to(EXAMPLE).as_posix() for p in EXAMPLE.rglob("*") if p.is_file())
    expected = digest_json({"schema": "runx_actors.package_digest.v1", "files": [
        {"path": f, "sha256": digest_bytes((EXAMPLE / f).read_bytes())} for f in files]})
    assert package_digest(EXAMPLE) == expected
    os.symlink(root / "SKILL.md", root / "link.md")
    with pytest.raises(PackageError) as caught:
        package_digest(root)
    assert caught.value.reason == "symlink"


# -- 16, 17: decisions as real Runs ------------------------------------------------------


async def test_budget_and_pause_decisions(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = await run_skill(env.store, env.package, config=env.config(), scope=SCOPE,
                             run_id="run_budget", inputs={
                                 "loop_id": "loop-demo", "turn_index": 4, "max_turns": 3,
                                 "objective": "o", "requested_tool": "fs.write"})
    assert (result["status"], exit_code_of(result)) == ("sealed", 0)
    assert (result["payload"]["decision"], result["payload"]["reason_code"]) == \
        ("refused", "turn_budget_exhausted")  # rule 1 wins over the disallowed tool
    assert tool_facts(await env.facts("run_budget"))["opened"] == []  # no ToolStep

    outcome = await env.host().run(env.spec("success", loop_id="loop-pause", fixed_inputs={
        **SUCCESS, "scenario": "pause"}))
    (turn,) = outcome.turns
    assert (turn.payload["decision"], turn.payload["reason_code"]) == \
        ("needs_human", "side_effect_review_required")
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("stopped", "next_turn_not_allowed", 0)


@pytest.mark.parametrize("key", ["turn_index", "max_turns"])
async def test_a_number_past_2_53_is_refused_before_the_run_is_written(
        tmp_path: Path, key: str) -> None:
    """The verifier's find: ``-i turn_index=9007199254740993`` wrote the Run (its inputs
    recorded as a double, D-11) and every later call then refused it as "exists with other
    inputs"."""
    env = make_env(tmp_path)
    base = {"loop_id": "loop-demo", "turn_index": 1, "max_turns": 3, "objective": "o"}
    with pytest.raises(InputContractError) as caught:
        await run_skill(env.store, env.package, config=env.config(), scope=SCOPE,
                        run_id="run_big", inputs={**base, key: 2**53 + 1})
    assert caught.value.field == key
    assert run_ids_in(env.store) == []  # nothing written


async def test_invalid_turn_index_fails(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    base = {"loop_id": "loop-demo", "max_turns": 3, "objective": "o"}
    for i, bad in enumerate((0, -1, 1.5)):
        result = await run_skill(env.store, env.package, config=env.config(), scope=SCOPE,
                                 run_id=f"run_bad_{i}", inputs={**base, "turn_index": bad})
        assert (result["status"], result["outcome"], exit_code_of(result)) == \
            ("failure", "failed", 1)
        assert result["closure"]["disposition"] == "failed"
        assert result["closure"]["reason_code"] == "step_failed"
        assert "loop turn failed: turn_index must be a positive integer" in \
            result["closure"]["summary"]
        assert result["payload"] is None
    runs = run_ids_in(env.store)
    # a loop's budget is the host's own counter (§2.4 row 4): one that is not a positive
    # integer is refused before any loop fact, Run or model effect (the CLI's --max-turns
    # refuses it too), not left to the turn's model to notice (§3.2's runtime validation
    # is the standalone turn's, above)
    for bad in (0, -1, 1.5, 2.5):
        with pytest.raises(InputContractError) as refused:
            await env.host().run(env.spec("success", loop_id=f"loop-bad-{bad}",
                                          max_turns=bad))
        assert (refused.value.reason, refused.value.field) == \
            ("input_contract_invalid", "max_turns")
        assert not await env.stream(f"loop/loop-bad-{bad}")
    assert run_ids_in(env.store) == runs
    with pytest.raises(InputContractError) as caught:
        await run_skill(env.store, env.package, config=env.config(), scope=SCOPE,
                        run_id="run_abc", inputs={**base, "turn_index": "abc"})
    assert caught.value.reason == "input_contract_invalid"
    with pytest.raises(InputContractError):
        await env.host().run(env.spec("success", loop_id="loop-abc", max_turns="abc"))
    assert run_ids_in(env.store) == runs  # no Run was created
    assert not await env.stream("loop/loop-abc")  # and no loop fact
    outcome = await env.host().run(env.spec("success", loop_id="loop-float", max_turns=3.0))
    assert (outcome.status, outcome.exit_code) == ("stopped", 0)  # integral: normalised


# -- 19, 20: the policy gate and the real read ----------------------------------------------


class Spy:
    """An ExecutionPort wrapper recording validate/dispatch per tool ref."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.validated: list[str] = []
        self.dispatched: list[str] = []

    def _name(self, a: Any) -> str:
        return getattr(a.body, "tool_ref", "model:" + getattr(a.body, "model", ""))

    async def validate(self, a: Any) -> Any:
        self.validated.append(self._name(a))
        return await self.inner.validate(a)

    async def dispatch(self, a: Any) -> None:
        self.dispatched.append(self._name(a))
        await self.inner.dispatch(a)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def attach(self, a: Any) -> Any:
        return await self.inner.attach(a)

    async def abort(self, a: Any) -> Any:
        return await self.inner.abort(a)

    async def get_status(self, key: Any) -> Any:
        return await self.inner.get_status(key)

    async def get_outcome(self, key: Any) -> Any:
        return await self.inner.get_outcome(key)

    async def cancel(self, key: Any) -> None:
        await self.inner.cancel(key)

    def settlements(self, epoch: str, after: int) -> Any:
        return self.inner.settlements(epoch, after)


def tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        h.update(p.relative_to(root).as_posix().encode())
        if p.is_file():
            h.update(p.read_bytes())
    return h.hexdigest()


async def test_disallowed_tool_never_starts_effect(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    before = tree_digest(env.workspace)
    for tool, loop_id in (("fs.write", "loop-demo-refusal"), ("net.fetch", "loop-net")):
        spies: list[Spy] = []

        def wrap(inner: Any, spies: list[Spy] = spies) -> Spy:
            spies.append(Spy(inner))
            return spies[-1]

        outcome = await env.host(wrap_executor=wrap).run(env.spec(
            "refusal", loop_id=loop_id, fixed_inputs={**REFUSAL, "requested_tool": tool}))
        (turn,) = outcome.turns
        assert (turn.payload["decision"], turn.payload["reason_code"]) == \
            ("refused", "tool_not_allowed")
        assert turn.disposition == "closed"
        facts = tool_facts(await env.facts(turn.run_id))
        assert facts["started"] == [] and facts["completed"] == []
        (failed,) = facts["failed"]
        assert failed.failure.class_ == "tool_not_allowed"
        assert failed.failure.message == f"{tool} is not in allowed_tools"
        assert failed.outcome is ToolFailureOutcome.KNOWN and failed.effect == ""
        (spy,) = spies
        assert tool not in spy.validated and tool not in spy.dispatched
        assert spy.dispatched and all(n.startswith("model:") for n in spy.dispatched)
    assert outcome.turns[0].run_id != REFUSAL_RUN
    assert tree_digest(env.workspace) == before  # byte-identical workspace


async def test_policy_gate_refuses_before_the_wrapped_executor() -> None:
    calls: list[str] = []

    class Inner:
        async def validate(self, a: Any) -> Any:
            calls.append("validate")

        async def dispatch(self, a: Any) -> None:
            calls.append("dispatch")

        async def attach(self, a: Any) -> Any: ...
        async def abort(self, a: Any) -> Any: ...
        async def get_status(self, key: Any) -> Any: ...
        async def get_outcome(self, key: Any) -> Any: ...
        async def cancel(self, key: Any) -> None: ...

    gate = policy_gate(Inner(), ["fs.read"])
    assert isinstance(gate, PolicyGate) and isinstance(gate, effect.ExecutionPort)
    assert not isinstance(gate, effect.SettlementPort)  # offers only the inner's ports

    def tool(name: str) -> effect.Assignment:
        return effect.Assignment(session="s", run_id="r", step_id="st", call_id="c",
                                 effect="e", body=effect.ToolAssignment(
                                     tool_ref=name, arguments='{"path":"NOTES.md"}'))

    refused = await gate.validate(tool("fs.write"))
    assert refused == effect.ToolFailure("tool_not_allowed", "fs.write is not in allowed_tools")
    from runx_actors.protocol.errors import DispatchRejectedError

    with pytest.raises(DispatchRejectedError):
        await gate.dispatch(tool("net.fetch"))
    assert calls == []
    assert await gate.validate(tool("fs.read")) is None
    model = effect.Assignment(session="s", run_id="r", effect="e", body=effect.ModelAssignment(
        model="m", request_digest=""))
    await gate.validate(model)
    assert calls == ["validate", "validate"]


async def test_allowed_tool_really_reads(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    result = await run_skill(env.store, env.package, config=env.config(), scope=SCOPE,
                             run_id="run_read", inputs={**SUCCESS_1})
    assert result["status"] == "sealed"
    facts = await env.facts("run_read")
    (opened,) = of_type(facts, F.ToolStepOpened)
    (binding,) = opened.calls
    assert (binding.tool_ref, json.loads(binding.arguments)) == ("fs.read", {"path": "NOTES.md"})
    assert len(of_type(facts, F.ToolCallStarted)) == 1
    (done,) = of_type(facts, F.ToolCallCompleted)
    data = await env.store.frozen.get(done.output_digest)
    output = json.loads(decode_frozen_value("tool_output", done.output_digest, data))
    assert output == {"path": "NOTES.md", "size_bytes": len(NOTES),
                      "sha256": "sha256:" + hashlib.sha256(NOTES).hexdigest(),
                      "text": NOTES.decode()}

    (env.workspace / "NOTES.md").unlink()
    result = await run_skill(env.store, env.package, config=env.config(), scope=SCOPE,
                             run_id="run_missing", inputs={**SUCCESS_1})
    assert (result["status"], result["closure"]["disposition"]) == ("failure", "failed")
    assert "loop turn failed: fs.read failed: not_found" in result["closure"]["summary"]
    (failed,) = of_type(await env.facts("run_missing"), F.ToolCallFailed)
    assert failed.failure.class_ == "not_found"


# -- 21: the output contract at sealing -----------------------------------------------------


class ContinueAnyway:
    """``loop-turn`` patched to answer ``continue`` whatever the inputs say."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.lowlevel.checkpoint()
        body = json.loads(request.body)
        if not any(m.get("role") == "tool" for m in body["messages"]):
            return call_tools(tool_call(body["inputs"]["requested_tool"],
                                        {"path": "NOTES.md"}))
        payload = turn_payload(body["inputs"])
        reason = "one more governed turn is allowed by policy"
        payload.update(decision="continue", reason_code="bounded_next_turn_available",
                       next_turn_allowed=True, next_turn_reason=reason,
                       handoff={"target": "loop-host", "next_turn_index": 2,
                                "reason": reason})
        return final_reply(payload)


async def test_output_contract_enforced_at_seal(tmp_path: Path) -> None:
    env = make_env(tmp_path)
    outcome = await env.host(models={"loop-turn": ContinueAnyway()}).run(env.spec("refusal"))
    assert (outcome.status, outcome.stop_reason, outcome.exit_code) == \
        ("failed", "turn_failed", 1)
    (turn,) = outcome.turns
    assert (turn.disposition, turn.reason_code, turn.payload) == \
        ("failed", "output_contract_invalid", None)
    (body,) = env.receipt_bodies()
    assert "; output contract violated: " in body["seal"]["summary"]
    assert body["idempotency"]["content_hash"] == digest_json({})
    assert len(run_ids_in(env.store)) == 1
    # the honest model on the same inputs seals closed
    honest = await env.host().run(env.spec("refusal", loop_id="loop-honest"))
    assert honest.turns[0].disposition == "closed"


def test_fs_read_contract(tmp_path: Path) -> None:
    """§3.5: fs.read's output and failure classes, as the turn relies on them."""
    from runx_actors.executors import Workspace, fs_read_tool

    (tmp_path / "NOTES.md").write_bytes(NOTES)
    (tmp_path / "big.txt").write_bytes(b"x" * ((1 << 20) + 1))
    (tmp_path / "link.md").symlink_to("/etc/hostname")
    tool = fs_read_tool(Workspace(tmp_path))
    assert tool.fn(path="NOTES.md") == {
        "path": "NOTES.md", "size_bytes": len(NOTES),
        "sha256": "sha256:" + hashlib.sha256(NOTES).hexdigest(), "text": NOTES.decode()}
    for path in ("/etc/hostname", "../x", "link.md"):
        failure = tool.arguments_failure(json.dumps({"path": path}))
        assert failure is not None and failure.class_ == "invalid_arguments", path
    from runx_actors.executors import ToolError

    for path, cls in (("missing.md", "not_found"), ("big.txt", "too_large")):
        with pytest.raises(ToolError) as caught:
            tool.fn(path=path)
        assert caught.value.class_ == cls


class NeverAnswers:
    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def test_model_that_never_answers_times_out(tmp_path: Path, autojump_clock: Any) -> None:
    env = make_env(tmp_path)
    start = trio.current_time()
    result = await run_skill(env.store, env.package, scope=SCOPE, run_id="run_silent",
                             config=env.config(models={"loop-turn": NeverAnswers()},
                                               seal_timeout=None),
                             inputs={**SUCCESS_1})
    assert trio.current_time() - start == pytest.approx(15)
    assert (result["status"], result["outcome"], exit_code_of(result)) == \
        ("failure", "stopped", 1)
    assert (result["closure"]["disposition"], result["closure"]["reason_code"]) == \
        ("timed_out", "step_timed_out")
    facts = await env.facts("run_silent")
    assert of_type(facts, F.RunEnded)
