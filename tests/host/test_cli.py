"""The CLI contract (loop-host §9): scenarios 49-51 of §10, the issue's Done-when checks,
and the commands' error paths (exit codes of §9.1, messages saying what to do).

Commands run through click's CliRunner with a controlled environment; one test runs the
installed ``runx-actors`` script in subprocesses, as on a fresh clone.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import click
import pytest
import trio
from click.testing import CliRunner, Result
from loop_support import EXAMPLE
from loop_support import NOTES as NOTES_BYTES

from runx_actors.cli import main
from runx_actors.host._cli_support import resolve_store
from runx_actors.host._governed import HostConfig
from runx_actors.host.package import load_package
from runx_actors.host.receipts import (
    SIGNING_REQUIRED_MESSAGE,
    ReceiptStore,
    Signer,
    Verifier,
    verify_directory,
)
from runx_actors.host.skill import exit_code_of, run_skill
from runx_actors.protocol.values import ModelRequest, ModelResult
from runx_actors.store.memory import MemoryStore

NOTES = NOTES_BYTES.decode()
SIGNING_ENV = {
    "RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
    "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted",
}
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in (
        *SIGNING_ENV, "RUNX_RECEIPT_VERIFY_KID", "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64",
        "RUNX_RECEIPT_DIR", "RUNX_LOOP_RECEIPT_DIR", "RUNX_PROJECT_DIR", "RUNX_CWD",
        "INIT_CWD", "RUNX_RUN_ID", "RUNX_ACTORS_STORE")
}
OBJECTIVE = "Draft, review, and ratify one tiny safe change."
TURN_1_INPUTS = ["-i", "loop_id=loop-demo-success", "-i", "turn_index=1", "-i", "max_turns=3",
                 "-i", f"objective={OBJECTIVE}", "-i", "scenario=success",
                 "-i", "requested_tool=fs.read"]
#: The exact payload of success turn 1 (§3.4).
TURN_1_PAYLOAD = {
    "schema": "runx.loop_turn.v1", "loop_id": "loop-demo-success",
    "turn_id": "loop-demo-success:turn-1", "turn_index": 1, "max_turns": 3,
    "objective": OBJECTIVE, "previous_summary": "No prior turn.", "requested_tool": "fs.read",
    "allowed_tools": ["fs.read"], "decision": "continue",
    "reason_code": "bounded_next_turn_available", "next_turn_allowed": True,
    "next_turn_reason": "one more governed turn is allowed by policy",
    "projection_update": {
        "latest_summary": "Turn 1 read context and proposed a bounded follow-up.",
        "consumed_authority": {"tools": ["fs.read"], "mutations": 0, "spend_minor": 0}},
    "handoff": {"target": "loop-host", "next_turn_index": 2,
                "reason": "one more governed turn is allowed by policy"},
    "receipt_notes": {"loop_state_owner": "outer-loop-host", "runx_turn_owner": "runx",
                      "context_boundary": "advisory-untrusted"},
}
SKILL_RUN_KEYS = ["schema", "status", "outcome", "skill_name", "runner", "run_id",
                  "receipt_id", "closure", "payload", "next"]
GATE_REQUEST = "agent_task.review-loop-plan.output"
GATE_ANSWER = {"decision": "continue", "requested_tool": "fs.read",
               "summary": "The plan is bounded, uses only fs.read, and may continue.",
               "stop_condition": "max_turns_not_exhausted"}
HEX = "[0-9a-f]{64}"


def demo_transcript(receipts: str) -> list[str]:
    """§9.3's stdout as one regular expression per line."""
    return [
        r"# success: bounded loop over governed turns",
        rf"turn 1 \| run=run_turn_5ef080227d47d7f1 \| receipt=sha256:{HEX} \| "
        r"decision=continue \| reason=bounded_next_turn_available \| next=yes",
        r"  one more governed turn is allowed by policy",
        rf"turn 2 \| run=run_turn_357c317b91ab43e9 \| receipt=sha256:{HEX} \| "
        r"decision=done \| reason=fixture_objective_complete \| next=no",
        r"  review accepted the bounded fixture result",
        r"# refusal: loop policy stops an undeclared tool",
        rf"turn 1 \| run=run_turn_d79a1aecc8e1eb30 \| receipt=sha256:{HEX} \| "
        r"decision=refused \| reason=tool_not_allowed \| next=no",
        r"  fs\.write is not in allowed_tools",
        r"# context-gate: agent turn pauses with bounded, advisory context",
        r"needs_agent run=run_context_gate_[0-9a-f]{16} "
        r"request=agent_task\.review-loop-plan\.output",
        r'allowed_tools=\["fs\.read"\]',
        r"context_artifacts=1",
        rf"- loop-operator-context ref=\./context/loop-operator digest=sha256:{HEX} "
        r"\(untrusted-agent-context\)",
        rf"receipts={re.escape(receipts)}",
        r"store=.+",
    ]


def assert_transcript(stdout: str, receipts: str) -> None:
    lines = stdout.splitlines()
    patterns = demo_transcript(receipts)
    assert len(lines) == len(patterns), stdout
    for line, pattern in zip(lines, patterns, strict=True):
        assert re.fullmatch(pattern, line), (pattern, line)


# -- helpers ---------------------------------------------------------------------------------


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    """``tmp_path/ws`` holding the example's NOTES.md (the workspace of skill runs)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "NOTES.md").write_text(NOTES, encoding="utf-8")
    return ws


def invoke(args: list[str], tmp_path: Path, *, signing: bool = True, stdin: str | None = None,
           **extra: str) -> Result:
    """Run ``runx-actors <args>`` from *tmp_path*; the workspace is ``tmp_path/ws`` and the
    run store defaults to ``tmp_path/ws/.runx/store``."""
    (tmp_path / "ws").mkdir(exist_ok=True)
    env: dict[str, str | None] = {**CLEAN_ENV, "RUNX_CWD": str(tmp_path / "ws")}
    if signing:
        env.update(SIGNING_ENV)
    env.update(extra)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        patch.setattr(tempfile, "tempdir", str(tmp_path))
        return CliRunner().invoke(main, args, env=env, input=stdin, catch_exceptions=False)


def skill_json(tmp_path: Path, *args: str, **extra: str) -> tuple[Result, dict[str, Any]]:
    result = invoke(["skill", str(EXAMPLE), *args, "-R", "D", "--json"], tmp_path,
                    signing=True, stdin=None, **extra)
    return result, (json.loads(result.stdout) if result.stdout.strip() else {})


def receipt_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("sha256-*.json")) if directory.is_dir() else []


def flip_one_byte(path: Path) -> None:
    """Change one byte inside a string value; the file stays valid JSON."""
    data = path.read_bytes()
    index = data.index(b'"reason_code":"') + len(b'"reason_code":"')
    flipped = b"X" if data[index:index + 1] != b"X" else b"Y"
    path.write_bytes(data[:index] + flipped + data[index + 1:])
    json.loads(path.read_bytes())


# -- §10 scenarios 49-51 -----------------------------------------------------------------------


def test_skill_run_json_shape(tmp_path: Path, workspace: Path) -> None:
    """49: skill --runner turn --json with the success turn-1 inputs prints
    runx.skill_run.v1 with the §9.2 keys, status sealed, closure closed and the §3.4
    payload."""
    result, doc = skill_json(tmp_path, "--runner", "turn", *TURN_1_INPUTS)
    assert result.exit_code == 0, result.output
    assert list(doc) == SKILL_RUN_KEYS
    assert doc["schema"] == "runx.skill_run.v1"
    assert doc["status"] == "sealed" and doc["outcome"] == "completed"
    assert doc["skill_name"] == "loop-orchestration" and doc["runner"] == "turn"
    assert re.fullmatch(r"run_turn_[0-9a-f]{16}", doc["run_id"])
    assert re.fullmatch(rf"sha256:{HEX}", doc["receipt_id"])
    assert doc["closure"]["disposition"] == "closed"
    assert doc["closure"]["reason_code"] == "step_closed"
    assert doc["closure"]["summary"].startswith(f"default/{doc['run_id']} ended completed")
    assert doc["payload"] == TURN_1_PAYLOAD
    assert doc["next"] is None
    assert [p.name for p in receipt_files(tmp_path / "D")] == [
        f"sha256-{doc['receipt_id'][7:]}.json"]
    assert (workspace / ".runx" / "store" / "runs.sqlite3").is_file()


class NeverAnswers:
    """A stub model that never answers (§10 scenario 50)."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        await trio.sleep_forever()
        raise AssertionError("unreachable")


async def _timed_out_run(tmp_path: Path) -> dict[str, Any]:
    package_dir = tmp_path / "stall"
    package_dir.mkdir()
    (package_dir / "X.yaml").write_text(
        "name: stall\nrunners:\n  stall:\n    default: true\n    type: scripted-run\n"
        "    script: never-answers\n    timeout_seconds: 15\n", encoding="utf-8")
    signer = Signer.demo()
    config = HostConfig(
        receipts=ReceiptStore(tmp_path / "D", verifier=Verifier(keyring=signer.keyring())),
        signer=signer, workspace=tmp_path, models={"never-answers": NeverAnswers()},
        seal_timeout=None)  # sealing runs in worker threads, which the autojump clock skips
    start = trio.current_time()
    result = await run_skill(MemoryStore(), load_package(package_dir), inputs={},
                             config=config, run_id="run_stall_1")
    assert trio.current_time() - start >= 15
    return result


async def test_exit_code_mapping_timeout(tmp_path: Path, autojump_clock: Any) -> None:
    """50 (part): a stub model that never answers is sealed timed_out / step_timed_out
    after timeout_seconds, which exits 1."""
    result = await _timed_out_run(tmp_path)
    assert result["status"] == "failure"
    assert result["outcome"] == "stopped"
    assert result["closure"]["disposition"] == "timed_out"
    assert result["closure"]["reason_code"] == "step_timed_out"
    assert exit_code_of(result) == 1


def test_exit_code_mapping(tmp_path: Path, workspace: Path) -> None:
    """50: closed exits 0 and parked 2; failed, declined (and blocked, timed_out) exit 1;
    a verification failure exits 3; a bad flag exits 64."""
    closed, _ = skill_json(tmp_path, "--runner", "turn", *TURN_1_INPUTS)
    assert closed.exit_code == 0
    parked, gate = skill_json(tmp_path, "--runner", "context-gate",
                              "-i", "objective=Review whether the next turn may continue.")
    assert parked.exit_code == 2 and gate["status"] == "needs_agent"
    failed, doc = skill_json(tmp_path, "--runner", "turn", "-i", "loop_id=l", "-i",
                             "turn_index=0", "-i", "max_turns=3", "-i", "objective=o")
    assert failed.exit_code == 1
    assert doc["status"] == "failure" and doc["closure"]["reason_code"] == "step_failed"
    assert "loop turn failed: turn_index must be a positive integer" in \
        doc["closure"]["summary"]
    answers = {"answers": {GATE_REQUEST: {**GATE_ANSWER,
                                          "closure": {"disposition": "declined"}}}}
    declined = invoke(["resume", gate["run_id"], "-", "-R", "D", "--json"], tmp_path,
                      stdin=json.dumps(answers))
    assert declined.exit_code == 1
    assert json.loads(declined.stdout)["closure"]["disposition"] == "declined"
    for status, code in (("policy_denied", 1), ("failure", 1), ("needs_approval", 2),
                         ("sealed", 0)):
        assert exit_code_of({"status": status}) == code
    flip_one_byte(receipt_files(tmp_path / "D")[0])
    assert invoke(["verify", "-R", "D"], tmp_path).exit_code == 3
    assert invoke(["skill", str(EXAMPLE), "--no-such-flag"], tmp_path).exit_code == 64
    assert invoke(["verify", "--bogus"], tmp_path).exit_code == 64
    assert invoke(["demo", "loop-orchestration", "--scenario", "nope"],
                  tmp_path).exit_code == 64


def test_demo_transcript(tmp_path: Path) -> None:
    """51: the demo's stdout matches §9.3 line for line and exits 0; D gains three
    receipts that verify; --scenario context-gate exits 2."""
    receipts = tmp_path / "D"
    result = invoke(["demo", "loop-orchestration"], tmp_path, signing=False,
                    RUNX_LOOP_RECEIPT_DIR=str(receipts))
    assert result.exit_code == 0, result.output
    assert_transcript(result.stdout, str(receipts))
    assert len(receipt_files(receipts)) == 3
    report = verify_directory(receipts, keyring=Signer.demo().keyring())
    assert report.valid and len(report.trees) == 3
    store = Path(result.stdout.splitlines()[-1].removeprefix("store="))
    assert store.is_dir() and store.parent.name.startswith("runx-loop-")
    assert (store.parent / "workspace" / "NOTES.md").read_text(encoding="utf-8") == NOTES

    gate = invoke(["demo", "loop-orchestration", "--scenario", "context-gate"], tmp_path,
                  signing=False, RUNX_LOOP_RECEIPT_DIR=str(receipts))
    assert gate.exit_code == 2
    assert gate.stdout.splitlines()[0].startswith("# context-gate:")
    assert len(receipt_files(receipts)) == 3  # the pause writes no receipt
    for scenario, lines in (("success", 5), ("refusal", 3)):
        one = invoke(["demo", "loop-orchestration", "--scenario", scenario], tmp_path,
                     signing=False)
        assert one.exit_code == 0, one.output
        assert len(one.stdout.splitlines()) == lines + 2  # + receipts= and store=


# -- the issue's Done-when, end to end through the installed script ----------------------------


def test_done_when_fresh_clone(tmp_path: Path) -> None:
    """On a fresh clone: the demo prints §9.3 and exits 0; the harness reports passed with
    3 cases and D holds 4 receipts; verify -R D says valid; one tampered byte makes verify
    exit 3."""
    script = Path(sys.executable).parent / "runx-actors"
    command = [str(script)] if script.exists() else None
    if command is None:
        found = shutil.which("runx-actors")
        if found is None:
            pytest.skip("the runx-actors script is not installed")
        command = [found]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RUNX_", "INIT_CWD"))}
    env["TMPDIR"] = str(tmp_path)

    def run(*args: str, **extra: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*command, *args], cwd=tmp_path, env={**env, **extra},
                              capture_output=True, text=True, timeout=300, check=False)

    demo = run("demo", "loop-orchestration")
    assert demo.returncode == 0, demo.stderr
    receipts = re.search(r"^receipts=(.+)$", demo.stdout, re.MULTILINE)
    assert receipts is not None
    assert_transcript(demo.stdout, receipts.group(1))

    signing = {**SIGNING_ENV, "RUNX_CWD": str(tmp_path)}
    harness = run("harness", str(EXAMPLE), "-R", "D", "--json", **signing)
    assert harness.returncode == 0, harness.stderr
    report = json.loads(harness.stdout)
    assert report["status"] == "passed" and report["case_count"] == 3
    assert len(receipt_files(tmp_path / "D")) == 4

    verify = run("verify", "-R", "D", **signing)
    assert verify.returncode == 0, verify.stdout + verify.stderr
    assert verify.stdout.splitlines()[-1] == "valid: 3 trees"

    flip_one_byte(receipt_files(tmp_path / "D")[0])
    tampered = run("verify", "-R", "D", "--json", **signing)
    assert tampered.returncode == 3
    assert json.loads(tampered.stdout)["valid"] is False


# -- commands and their error paths --------------------------------------------------------------


def test_text_next_carries_the_store_scope_and_receipt_dir(tmp_path: Path,
                                                            workspace: Path) -> None:
    """The text ``next:`` line of a parked run names the --store/--scope/-R that were
    given, so following it finds the run; the JSON ``next`` stays as §7.1 writes it."""
    parked = invoke(["skill", str(EXAMPLE), "--runner", "context-gate", "-i",
                     "objective=Review whether the next turn may continue.", "-R", "D",
                     "--store", "S", "--scope", "gate"], tmp_path)
    assert parked.exit_code == 2, parked.output
    line = next(x for x in parked.stdout.splitlines() if x.startswith("next: "))
    run_id = parked.stdout.split("run=")[1].split()[0]
    assert line == f"next: runx-actors resume {run_id} - --json --store S --scope gate -R D"
    answers = json.dumps({"answers": {GATE_REQUEST: GATE_ANSWER}})
    follow = invoke(line[len("next: runx-actors "):].split(), tmp_path, stdin=answers)
    assert follow.exit_code == 0, follow.output
    assert json.loads(follow.stdout)["status"] == "sealed"


def test_package_argument_errors_say_what_to_fix(tmp_path: Path, workspace: Path) -> None:
    """A wrong package path or runner name exits 1 with a hint about the argument."""
    missing = invoke(["skill", "no-such-package"], tmp_path)
    assert missing.exit_code == 1
    assert "hint: give the path of a package directory" in missing.stderr
    runner = invoke(["skill", str(EXAMPLE), "--runner", "nope"], tmp_path)
    assert runner.exit_code == 1 and "has no runner 'nope'" in runner.stderr
    assert "hint: use --runner with a runner declared under `runners:`" in runner.stderr
    partial = invoke(["demo", "loop-orchestration"], tmp_path, signing=False,
                     RUNX_RECEIPT_SIGN_KID="k")
    assert partial.exit_code == 1
    assert "all three or none" in partial.stderr and "demo key instead" not in partial.stderr


def test_resume_command_roundtrip(tmp_path: Path, workspace: Path) -> None:
    """resume: answers from stdin or a file seal the parked run (exit 0); a second resume
    replays the sealed result with a warning; a bad answers file exits 1 and commits
    nothing."""
    parked, gate = skill_json(tmp_path, "--runner", "context-gate",
                              "-i", "objective=Review whether the next turn may continue.")
    assert parked.exit_code == 2
    request = gate["requests"][0]
    assert request["id"] == GATE_REQUEST and request["kind"] == "agent_act"
    assert gate["next"] == f"runx-actors resume {gate['run_id']} - --json"
    assert receipt_files(tmp_path / "D") == []

    bad = invoke(["resume", gate["run_id"], "-", "-R", "D"], tmp_path,
                 stdin=json.dumps({"answers": {GATE_REQUEST: {"decision": "continue"}}}))
    assert bad.exit_code == 1
    assert "runx-actors: resume:" in bad.stderr and "hint:" in bad.stderr
    assert invoke(["resume", gate["run_id"], "-", "-R", "D"], tmp_path,
                  stdin="not json").exit_code == 1

    (tmp_path / "answers.json").write_text(json.dumps({"answers": {GATE_REQUEST: GATE_ANSWER}}),
                                           encoding="utf-8")
    sealed = invoke(["resume", gate["run_id"], "answers.json", "-R", "D", "--json"], tmp_path)
    assert sealed.exit_code == 0, sealed.output
    doc = json.loads(sealed.stdout)
    assert list(doc) == SKILL_RUN_KEYS
    assert doc["status"] == "sealed" and doc["payload"] == GATE_ANSWER
    assert doc["closure"]["reason_code"] == "graph_closed"
    assert len(receipt_files(tmp_path / "D")) == 2

    again = invoke(["resume", gate["run_id"], "answers.json", "-R", "D"], tmp_path)
    assert again.exit_code == 0
    assert "warning: answers ignored" in again.stderr
    assert again.stdout.startswith(f"sealed run={gate['run_id']} receipt={doc['receipt_id']}")


def test_resume_unknown_run_and_missing_store(tmp_path: Path) -> None:
    missing = invoke(["resume", "run_nope", "-"], tmp_path, stdin="{}")
    assert missing.exit_code == 1
    assert "unknown run 'run_nope'" in missing.stderr and "hint:" in missing.stderr
    (tmp_path / "ws").mkdir(exist_ok=True)
    invoke(["skill", str(EXAMPLE), "-i", "objective=x", "-i", "loop_id=l", "-i",
            "turn_index=1", "-i", "max_turns=1"], tmp_path)
    unknown = invoke(["resume", "run_nope", "-"], tmp_path, stdin="{}")
    assert unknown.exit_code == 1 and "unknown run 'run_nope'" in unknown.stderr


def test_governed_commands_require_signing(tmp_path: Path, workspace: Path) -> None:
    """skill, resume and harness refuse to run without the signing identity (§4.5)."""
    for args, stdin in ((["skill", str(EXAMPLE), *TURN_1_INPUTS], None),
                        (["resume", "run_x", "-"], "{}")):
        result = invoke(args, tmp_path, signing=False, stdin=stdin)
        assert result.exit_code == 1
        assert SIGNING_REQUIRED_MESSAGE in result.stderr
        assert "hint: set RUNX_RECEIPT_SIGN_KID" in result.stderr
    local = invoke(["skill", str(EXAMPLE), *TURN_1_INPUTS], tmp_path,
                   RUNX_RECEIPT_SIGN_ISSUER_TYPE="local")
    assert local.exit_code == 1 and SIGNING_REQUIRED_MESSAGE in local.stderr
    assert receipt_files(tmp_path / "D") == []


def test_skill_input_errors(tmp_path: Path, workspace: Path) -> None:
    """Input-contract violations exit 1 with no run and no receipt; malformed -i or
    --input-json are usage errors (64); --input-json values are JSON."""
    result = invoke(["skill", str(EXAMPLE), "-i", "turn_index=\"abc\"", "-i", "loop_id=l",
                     "-i", "max_turns=3", "-i", "objective=o", "-R", "D"], tmp_path)
    assert result.exit_code == 1
    assert "input_contract_invalid" in result.stderr
    assert receipt_files(tmp_path / "D") == []
    assert invoke(["skill", str(EXAMPLE), "-i", "novalue"], tmp_path).exit_code == 64
    assert invoke(["skill", str(EXAMPLE), "--input-json", "k={"], tmp_path).exit_code == 64
    ok, doc = skill_json(tmp_path, "--input-json", "turn_index=1", "--input-json",
                         "max_turns=3", "-i", "loop_id=l", "-i", "objective=o")
    assert ok.exit_code == 0 and doc["payload"]["turn_index"] == 1
    unknown_runner = invoke(["skill", str(EXAMPLE), "--runner", "nope"], tmp_path)
    assert unknown_runner.exit_code == 1 and "nope" in unknown_runner.stderr


def test_store_selection(tmp_path: Path, workspace: Path) -> None:
    """--store, then $RUNX_ACTORS_STORE, then <P>/store (§9.1)."""
    cwd = tmp_path
    assert resolve_store("s", {}, cwd) == cwd / "s" / "runs.sqlite3"
    assert resolve_store("s.db", {}, cwd) == cwd / "s.db"
    assert resolve_store(None, {"RUNX_ACTORS_STORE": "e"}, cwd) == cwd / "e" / "runs.sqlite3"
    assert resolve_store(None, {"RUNX_PROJECT_DIR": "p"}, cwd) == cwd / "p" / "store" / \
        "runs.sqlite3"
    assert resolve_store(None, {"RUNX_CWD": "w"}, cwd) == cwd / "w" / ".runx" / "store" / \
        "runs.sqlite3"
    result, _ = skill_json(tmp_path, *TURN_1_INPUTS, "--store", "explicit")
    assert result.exit_code == 0
    assert (tmp_path / "explicit" / "runs.sqlite3").is_file()
    result, _ = skill_json(tmp_path, *TURN_1_INPUTS, RUNX_ACTORS_STORE="from-env.sqlite3")
    assert result.exit_code == 0
    assert (tmp_path / "from-env.sqlite3").is_file()


def test_verify_command_modes(tmp_path: Path, workspace: Path) -> None:
    """verify: tree mode exits 0 valid, 3 invalid, 1 on a missing directory; single mode
    prints runx.verify_verdict.v1 with lineage unverified, from a file or stdin."""
    closed, doc = skill_json(tmp_path, *TURN_1_INPUTS)
    assert closed.exit_code == 0
    tree = invoke(["verify", "-R", "D", "--json"], tmp_path)
    assert tree.exit_code == 0 and json.loads(tree.stdout)["valid"] is True
    assert invoke(["verify", "-R", "missing"], tmp_path).exit_code == 1
    assert invoke(["verify", doc["receipt_id"], "-R", "D"], tmp_path).exit_code == 0
    path = receipt_files(tmp_path / "D")[0]
    single = invoke(["verify", "--receipt", str(path), "--json"], tmp_path)
    assert single.exit_code == 0, single.output
    verdict = json.loads(single.stdout)
    assert verdict["schema"] == "runx.verify_verdict.v1"
    assert verdict["lineage"]["status"] == "unverified"
    piped = invoke(["verify", "--receipt", "-", "--json"], tmp_path,
                   stdin=path.read_text(encoding="utf-8"))
    assert piped.exit_code == 0 and json.loads(piped.stdout)["valid"] is True
    assert invoke(["verify", "--receipt", "-", "-R", "D"], tmp_path).exit_code == 64
    no_key = invoke(["verify", "-R", "D"], tmp_path, signing=False)
    assert no_key.exit_code == 3 and "KeyUnknown" in no_key.stdout
    assert "hint: the keyring is read from RUNX_RECEIPT_VERIFY_KID" in no_key.stderr
    assert "hint:" not in invoke(["verify", "-R", "D"], tmp_path).stderr


def test_commands_registered_lazily() -> None:
    """The host commands join ``check``; importing the CLI loads neither trio nor SQLite."""
    ctx = click.Context(main)
    assert main.list_commands(ctx) == ["check", "demo", "harness", "keys", "loop", "resume",
                                       "runs", "simulate", "skill", "store", "verify"]
    assert all(main.get_command(ctx, name) is not None for name in main.list_commands(ctx))
    code = ("import sys, runx_actors.cli; "
            "assert not [m for m in ('trio', 'sqlite3') if m in sys.modules]")
    subprocess.run([sys.executable, "-c", code], check=True)
