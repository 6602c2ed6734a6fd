"""The harness (loop-host §8): scenarios 41-48 of §10, plus the parsing, assertion and
fixture-mode rules they rest on.

Every scenario runs the real ``runx-actors harness`` command through click's CliRunner,
with the demo signing identity in the environment (unless a scenario removes it), the
workspace ``RUNX_CWD`` under ``tmp_path`` and the receipt directory ``D``.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner, Result
from loop_support import EXAMPLE

from runx_actors.cli import main
from runx_actors.host._harness_assert import (
    CaseEvidence,
    assert_case,
    receipt_fields,
    subset_mismatches,
)
from runx_actors.host._harness_cases import (
    HarnessParseError,
    parse_case,
    parse_fixture,
)
from runx_actors.host.harness import PIN_CREATED_AT, classify_targets
from runx_actors.host.receipts import (
    SIGNING_REQUIRED_MESSAGE,
    Receipt,
    Signer,
    receipt_hash,
    verify_directory,
)

SIGNING_ENV = {
    "RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
    "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted",
}
#: Variables the tests control; None removes one from the environment of the command.
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in (
        *SIGNING_ENV, "RUNX_RECEIPT_VERIFY_KID", "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64",
        "RUNX_RECEIPT_DIR", "RUNX_LOOP_RECEIPT_DIR", "RUNX_PROJECT_DIR", "RUNX_CWD",
        "INIT_CWD", "RUNX_RUN_ID", "RUNX_ACTORS_STORE")
}
CASE_NAMES = ["loop-turn-continues", "loop-turn-refuses-disallowed-tool",
              "loop-context-gate-seals-with-host-answer"]
GATE_ANSWER = {"decision": "continue", "requested_tool": "fs.read",
               "summary": "The plan is bounded, uses only fs.read, and may continue.",
               "stop_condition": "max_turns_not_exhausted"}


# -- helpers ---------------------------------------------------------------------------------


def invoke(args: list[str], tmp_path: Path, *, signing: bool = True,
           **extra: str) -> Result:
    """Run ``runx-actors <args>`` from *tmp_path* with workspace ``tmp_path/ws``."""
    workspace = tmp_path / "ws"
    workspace.mkdir(exist_ok=True)
    env: dict[str, str | None] = {**CLEAN_ENV, "RUNX_CWD": str(workspace)}
    if signing:
        env.update(SIGNING_ENV)
    env.update(extra)
    runner = CliRunner()
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(tmp_path)
        return runner.invoke(main, args, env=env, catch_exceptions=False)


def copy_example(tmp_path: Path, name: str = "pkg",
                 cases: list[dict[str, Any]] | None = None) -> Path:
    """A copy of the example package, its ``harness.cases`` replaced by *cases*."""
    target = tmp_path / name
    shutil.copytree(EXAMPLE, target)
    if cases is not None:
        xyaml = target / "X.yaml"
        doc = yaml.safe_load(xyaml.read_text(encoding="utf-8"))
        doc["harness"]["cases"] = cases
        xyaml.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return target


def example_case(name: str) -> dict[str, Any]:
    """One of the example's three cases, as parsed YAML."""
    doc = yaml.safe_load((EXAMPLE / "X.yaml").read_text(encoding="utf-8"))
    return dict(next(c for c in doc["harness"]["cases"] if c["name"] == name))


def receipt_files(directory: Path) -> list[Path]:
    return sorted(directory.glob("sha256-*.json")) if directory.is_dir() else []


def report_of(result: Result) -> dict[str, Any]:
    report: dict[str, Any] = json.loads(result.stdout)
    return report


# -- §10 scenarios 41-48 -----------------------------------------------------------------------


def test_harness_example_passes(tmp_path: Path) -> None:
    """41: the example's report is §8.6's; D holds four receipts that verify; the scratch
    root is gone."""
    result = invoke(["harness", str(EXAMPLE), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    report = report_of(result)
    assert list(report) == ["status", "case_count", "assertion_error_count",
                            "assertion_errors", "case_names", "receipt_ids",
                            "graph_case_count"]
    assert report["status"] == "passed"
    assert report["case_count"] == 3
    assert report["assertion_error_count"] == 0 and report["assertion_errors"] == []
    assert report["case_names"] == CASE_NAMES
    assert len(report["receipt_ids"]) == 3
    assert all(rid.startswith("sha256:") and len(rid) == 71 for rid in report["receipt_ids"])
    assert report["graph_case_count"] == 1
    assert result.stdout == json.dumps(report, indent=2) + "\n"
    # D: the two turn receipts, the graph root and its review child
    files = receipt_files(tmp_path / "D")
    assert len(files) == 4
    stems = {f.name.removeprefix("sha256-").removesuffix(".json") for f in files}
    assert {rid.removeprefix("sha256:") for rid in report["receipt_ids"]} <= stems
    verified = invoke(["verify", "-R", "D", "--json"], tmp_path)
    assert verified.exit_code == 0, verified.output
    tree_report = json.loads(verified.stdout)
    assert tree_report["valid"] is True
    assert sorted(t["receipt_count"] for t in tree_report["trees"]) == [1, 1, 2]
    # the scratch root is removed
    harness_dir = tmp_path / "ws" / ".runx" / "harness"
    assert not harness_dir.exists() or list(harness_dir.iterdir()) == []


def test_harness_failed_assertion_reports(tmp_path: Path) -> None:
    """42: a case expecting disposition failed: the report is still printed with one
    assertion error naming expect.receipt.disposition, and the exit code is 1."""
    case = example_case("loop-turn-continues")
    case["expect"]["receipt"]["disposition"] = "failed"
    package = copy_example(tmp_path, cases=[case])
    result = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 1
    report = report_of(result)
    assert report["status"] == "failed"
    assert report["assertion_error_count"] == 1
    assert report["assertion_errors"] == [
        "loop-turn-continues: expect.receipt.disposition: expected failed, got closed"]
    assert len(report["receipt_ids"]) == 1


@pytest.mark.parametrize(("variant", "message"), [
    ("unknown", "loop-turn-continues: expect.receipt.foo is not a known field"),
    ("retired", "loop-turn-continues: expect.receipt.skill_name is a retired field"),
    ("mcp", "probe: kind: mcp fixtures are not supported by this host"),
])
def test_harness_unknown_and_retired_keys(tmp_path: Path, variant: str, message: str) -> None:
    """43: unknown and retired expect.receipt keys and kind: mcp abort the harness with
    the §8.2 stderr prefix, no report and exit 1."""
    case = example_case("loop-turn-continues")
    if variant == "unknown":
        case["expect"]["receipt"]["foo"] = "bar"
    elif variant == "retired":
        case["expect"]["receipt"]["skill_name"] = "loop-orchestration"
    package = copy_example(tmp_path, cases=[case])
    if variant == "mcp":
        (package / "fixtures").mkdir()
        (package / "fixtures" / "probe.yaml").write_text(yaml.safe_dump(
            {"name": "probe", "kind": "mcp", "target": "..", "inputs": {}}), encoding="utf-8")
    result = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 1
    # no §8.4 report: stdout is the CLI's one JSON error object (RUN-CLI-2)
    error = json.loads(result.stdout)
    assert "status" not in error and error["error"] == "HarnessError"
    assert error["exit_code"] == 1 and message in error["message"]
    assert result.stderr.startswith(f"runx-actors: package harness failed for {package}: ")
    assert message in result.stderr
    assert receipt_files(tmp_path / "D") == []


def test_harness_deterministic_ids(tmp_path: Path) -> None:
    """44: two runs in fresh directories (and from two copies of the package) give the
    same receipt ids, body digests and receipt digests."""
    first, second = tmp_path / "one", tmp_path / "two"
    first.mkdir()
    second.mkdir()
    runs = []
    for base, package in ((first, EXAMPLE), (second, copy_example(second))):
        result = invoke(["harness", str(package), "-R", "D", "--json"], base)
        assert result.exit_code == 0, result.output
        receipts = {}
        for path in receipt_files(base / "D"):
            receipt = Receipt.from_bytes(path.read_bytes())
            receipts[receipt.id] = (receipt.digest, receipt_hash(receipt.body))
            assert receipt.created_at == PIN_CREATED_AT
        runs.append((report_of(result)["receipt_ids"], receipts))
    assert runs[0] == runs[1]
    assert len(runs[0][1]) == 4


def test_harness_input_contract_failure(tmp_path: Path) -> None:
    """45: turn_index "abc" fails the input contract: the case passes when failure is
    expected, and fails when sealed is expected."""
    case = example_case("loop-turn-continues")
    case["inputs"]["turn_index"] = "abc"
    case["expect"] = {"status": "failure"}
    package = copy_example(tmp_path, "expects-failure", cases=[case])
    passing = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert passing.exit_code == 0, passing.output
    assert report_of(passing)["status"] == "passed"
    assert report_of(passing)["receipt_ids"] == []

    case["expect"] = {"status": "sealed"}
    package = copy_example(tmp_path, "expects-sealed", cases=[case])
    failing = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert failing.exit_code == 1
    errors = report_of(failing)["assertion_errors"]
    assert len(errors) == 1
    assert errors[0].startswith("loop-turn-continues: expect.status: expected sealed, got "
                                "failure")
    assert "input_contract_invalid" in errors[0]
    assert receipt_files(tmp_path / "D") == []


def test_harness_usage_and_not_declared(tmp_path: Path) -> None:
    """46: a package plus a fixture file, or no target, exits 64; a package without cases
    reports not_declared and exits 0."""
    fixture = tmp_path / "f.yaml"
    fixture.write_text(yaml.safe_dump({"name": "f", "kind": "skill", "target": "pkg"}),
                       encoding="utf-8")
    mixed = invoke(["harness", str(EXAMPLE), str(fixture)], tmp_path)
    assert mixed.exit_code == 64
    assert invoke(["harness"], tmp_path).exit_code == 64
    assert invoke(["harness", str(EXAMPLE), "--bogus"], tmp_path).exit_code == 64

    package = copy_example(tmp_path, cases=[])
    result = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    assert report_of(result) == {
        "status": "not_declared", "case_count": 0, "assertion_error_count": 0,
        "assertion_errors": [], "case_names": [], "receipt_ids": [], "graph_case_count": 0}
    text = invoke(["harness", str(package / "SKILL.md"), "-R", "D"], tmp_path)
    assert text.exit_code == 0 and text.stdout.startswith("not_declared")


def test_harness_missing_answer_needs_agent(tmp_path: Path) -> None:
    """47: case 3 without caller.answers ends needs_agent with no receipt; expecting
    needs_agent passes."""
    case = example_case("loop-context-gate-seals-with-host-answer")
    del case["caller"]
    case["expect"] = {"status": "needs_agent", "steps": ["review"]}
    package = copy_example(tmp_path, cases=[case])
    result = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    report = report_of(result)
    assert report["status"] == "passed"
    assert report["receipt_ids"] == []
    assert report["graph_case_count"] == 1
    assert receipt_files(tmp_path / "D") == []

    case["expect"] = {"status": "sealed"}
    package = copy_example(tmp_path, "expects-sealed", cases=[case])
    failing = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert failing.exit_code == 1
    assert report_of(failing)["assertion_errors"] == [
        "loop-context-gate-seals-with-host-answer: expect.status: expected sealed, "
        "got needs_agent"]


def test_harness_signing_missing(tmp_path: Path) -> None:
    """48: without a signing identity every case records the signing error, stderr shows
    the §4.5 hint, and the exit code is 1."""
    result = invoke(["harness", str(EXAMPLE), "-R", "D", "--json"], tmp_path, signing=False)
    assert result.exit_code == 1
    report = report_of(result)
    assert report["status"] == "failed"
    assert report["assertion_errors"] == [
        f"{name}: receipt signing is not configured" for name in CASE_NAMES]
    assert report["receipt_ids"] == []
    assert SIGNING_REQUIRED_MESSAGE in result.stderr
    assert receipt_files(tmp_path / "D") == []
    partial = invoke(["harness", str(EXAMPLE), "-R", "D", "--json"], tmp_path,
                     signing=False, RUNX_RECEIPT_SIGN_KID="runx-demo-key")
    assert partial.exit_code == 1
    assert SIGNING_REQUIRED_MESSAGE in partial.stderr


# -- further rules ---------------------------------------------------------------------------


def test_harness_text_report_and_receipt_dir_from_env(tmp_path: Path) -> None:
    """Without --json: one line per case and a summary; the output directory falls back
    to $RUNX_RECEIPT_DIR."""
    result = invoke(["harness", str(EXAMPLE)], tmp_path,
                    RUNX_RECEIPT_DIR=str(tmp_path / "from-env"))
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert [line.split()[1] for line in lines[:3]] == CASE_NAMES
    assert all(line.startswith("ok ") for line in lines[:3])
    assert lines[3].startswith("passed: 3 cases, 0 assertion errors")
    assert len(receipt_files(tmp_path / "from-env")) == 4


def test_harness_default_receipt_dir_is_workspace(tmp_path: Path) -> None:
    """Without -R and $RUNX_RECEIPT_DIR, receipts go to <workspace>/.runx/receipts."""
    result = invoke(["harness", str(EXAMPLE), "--json"], tmp_path)
    assert result.exit_code == 0, result.output
    assert len(receipt_files(tmp_path / "ws" / ".runx" / "receipts")) == 4


def test_harness_fixture_mode_prints_top_receipts(tmp_path: Path) -> None:
    """Fixture mode prints the top receipt (an object for one fixture, an array for
    several) and stops at the first failure with exit 1."""
    copy_example(tmp_path)
    turn = example_case("loop-turn-continues")
    gate = example_case("loop-context-gate-seals-with-host-answer")
    fixtures = tmp_path / "fx"
    fixtures.mkdir()
    (fixtures / "turn.yaml").write_text(yaml.safe_dump(
        {**turn, "kind": "skill", "target": "../pkg", "metadata": {"note": "ignored"}}),
        encoding="utf-8")
    (fixtures / "gate.yaml").write_text(yaml.safe_dump(
        {**gate, "kind": "graph", "target": "../pkg",
         "expect": {**gate["expect"],
                    "step_outputs": {"review": {"subset": {"decision": "continue"}}},
                    "output": {"exact": GATE_ANSWER}}}), encoding="utf-8")
    one = invoke(["harness", "fx/turn.yaml", "-R", "D"], tmp_path)
    assert one.exit_code == 0, one.output
    receipt = json.loads(one.stdout)
    assert receipt["schema"] == "runx.receipt.v1"
    assert receipt["subject"]["ref"]["uri"] == "hrn_harness-loop-turn-continues_turn"
    both = invoke(["harness", "fx/turn.yaml", "fx/gate.yaml", "-R", "D"], tmp_path)
    assert both.exit_code == 0, both.output
    receipts = json.loads(both.stdout)
    assert [r["seal"]["reason_code"] for r in receipts] == ["step_closed", "graph_closed"]
    assert len(receipt_files(tmp_path / "D")) == 3

    bad = {**turn, "kind": "skill", "target": "../pkg",
           "expect": {"status": "sealed", "receipt": {"disposition": "failed"}}}
    (fixtures / "bad.yaml").write_text(yaml.safe_dump(bad), encoding="utf-8")
    failing = invoke(["harness", "fx/bad.yaml", "fx/gate.yaml", "-R", "D"], tmp_path)
    assert failing.exit_code == 1
    assert failing.stdout == ""
    assert "loop-turn-continues: expect.receipt.disposition: expected failed, got closed" \
        in failing.stderr


def test_harness_fixture_setup_receipts_and_kind_checks(tmp_path: Path) -> None:
    """setup.receipts are put into the case store first; a fixture whose kind does not
    match its runner is a parse error; a missing target exits 1."""
    package = copy_example(tmp_path)
    seeded = invoke(["harness", str(EXAMPLE), "-R", "seed", "--json"], tmp_path)
    assert seeded.exit_code == 0
    (package / "seed").mkdir()
    for path in receipt_files(tmp_path / "seed")[:2]:
        shutil.copy(path, package / "seed" / path.name)
    names = sorted(p.name for p in (package / "seed").iterdir())
    case = example_case("loop-turn-continues")
    fixture = {**case, "kind": "skill", "target": ".",
               "setup": {"receipts": [f"./seed/{n}" for n in names]}}
    (package / "with-setup.yaml").write_text(yaml.safe_dump(fixture), encoding="utf-8")
    result = invoke(["harness", "pkg/with-setup.yaml", "-R", "D"], tmp_path)
    assert result.exit_code == 0, result.output
    assert len(receipt_files(tmp_path / "D")) == 1  # only the case's own tree is copied

    (package / "wrong-kind.yaml").write_text(yaml.safe_dump({**fixture, "kind": "graph"}),
                                             encoding="utf-8")
    wrong = invoke(["harness", "pkg/wrong-kind.yaml"], tmp_path)
    assert wrong.exit_code == 1
    assert "kind: graph fixtures need a graph runner" in wrong.stderr
    assert invoke(["harness", "nowhere.yaml"], tmp_path).exit_code == 1


def test_harness_bad_answer_is_a_case_failure(tmp_path: Path) -> None:
    """An answer that breaks the answers rules (an extra key) fails the case through the
    resume path; nothing is sealed."""
    case = example_case("loop-context-gate-seals-with-host-answer")
    case["caller"]["answers"]["agent_task.review-loop-plan.output"]["extra"] = "x"
    package = copy_example(tmp_path, cases=[case])
    result = invoke(["harness", str(package), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 1
    (error,) = report_of(result)["assertion_errors"]
    assert error.startswith("loop-context-gate-seals-with-host-answer: expect.status: "
                            "expected sealed, got failure (AnswersError")


def test_harness_receipt_fields_and_outputs(tmp_path: Path) -> None:
    """Every expect.receipt key, steps, output and step_outputs compare against the
    sealed receipts: a fixture over the unchanged example, expecting the values of a first
    run, passes (same package digest and run id, so the same receipt)."""
    first = invoke(["harness", str(EXAMPLE), "-R", "D", "--json"], tmp_path)
    gate_id = report_of(first)["receipt_ids"][2]
    gate = Receipt.from_bytes((tmp_path / "D" / f"sha256-{gate_id[7:]}.json").read_bytes())
    fields = receipt_fields(gate)
    assert fields["child_receipt_count"] == 1
    assert fields["act_ids"] == fields["decision_ids"] == fields["verification_refs"] == []
    case = example_case("loop-context-gate-seals-with-host-answer")
    case["expect"] = {
        "status": "sealed", "steps": ["review"], "receipt": fields,
        "output": {"exact": GATE_ANSWER},
        "step_outputs": {"review": {"exact": GATE_ANSWER}},
    }
    fixture = tmp_path / "gate.yaml"
    fixture.write_text(yaml.safe_dump({**case, "kind": "graph", "target": str(EXAMPLE)}),
                       encoding="utf-8")
    result = invoke(["harness", "gate.yaml", "-R", "D2"], tmp_path)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["id"] == gate_id
    fixture.write_text(yaml.safe_dump({**case, "kind": "graph", "target": str(EXAMPLE),
                                       "expect": {"step_outputs": {
                                           "review": {"subset": {"decision": "done"}}}}}),
                       encoding="utf-8")
    mismatch = invoke(["harness", "gate.yaml", "-R", "D2"], tmp_path)
    assert mismatch.exit_code == 1
    assert ("loop-context-gate-seals-with-host-answer: expect.step_outputs.review.subset."
            "decision: expected done, got continue") in mismatch.stderr


# -- parsing and assertion units ----------------------------------------------------------------


@pytest.mark.parametrize(("doc", "message"), [
    ({"name": "c", "bogus": 1}, "c: bogus is not a known field"),
    ({"name": "c", "caller": {"answer": {}}}, "c: caller.answer is not a known field"),
    ({"name": "c", "expect": {"receipt": {"owner": "x"}}},
     "c: expect.receipt.owner is a retired field"),
    ({"name": "c", "expect": {"status": "done"}}, "c: expect.status: 'done' is not one of"),
    ({"name": "c", "expect": {"steps": "turn"}}, "c: expect.steps: expected a list"),
    ({"name": "c", "expect": {"output": {}}}, "exactly one of exact or subset"),
    ({"name": "c", "env": {"X": 1}}, "c: env.X: expected a string"),
    ({"name": "c", "caller": {"http_responses": [{}]}}, "c: caller.http_responses must be"),
    ({"inputs": {}}, "cases[4]: name is required"),
])
def test_case_parse_errors(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(HarnessParseError) as caught:
        parse_case(doc, 4)
    assert message in str(caught.value)


def test_fixture_parse_rules(tmp_path: Path) -> None:
    path = tmp_path / "f.yaml"
    base = {"name": "f", "kind": "skill", "target": "."}
    assert parse_fixture(base, path).target_path() == tmp_path.resolve()
    for doc, message in [
        ({**base, "kind": "a2a"}, "kind: a2a fixtures are not supported"),
        ({**base, "kind": "nope"}, "kind: 'nope' is not one of"),
        ({"name": "f", "kind": "skill"}, "target is required"),
        ({**base, "metadata": {"graph_shape": "fixture_replay"}}, "fixture_replay"),
        ({**base, "setup": {"receipts": ["../x.json"]}}, "must stay inside the package"),
        ({**base, "setup": {"receipts": ["/x.json"]}}, "package-relative"),
        ({**base, "setup": {"receipts": ["x.txt"]}}, "not a .json file"),
        ({**base, "setup": {"receipts": ["x.json", "./x.json"]}}, "duplicate"),
        ({**base, "setup": {"receipts": [f"r{i}.json" for i in range(33)]}}, "at most 32"),
    ]:
        with pytest.raises(HarnessParseError) as caught:
            parse_fixture(doc, path)
        assert message in str(caught.value), doc


def test_subset_and_assertion_messages() -> None:
    expected = {"a": 1, "b": {"c": [1, 2]}, "d": "x"}
    got: Mapping[str, Any] = {"a": 1.0, "b": {"c": [1, 2], "extra": True}, "e": 0}
    assert subset_mismatches(expected, got, "expect.output.subset") == [
        ("expect.output.subset.d", "x", "missing")]
    assert subset_mismatches({"l": [1]}, {"l": [1, 2]}, "s") == [("s.l", [1], [1, 2])]
    assert subset_mismatches({"t": True}, {"t": 1}, "s") == [("s.t", True, 1)]
    case = parse_case({"name": "c", "expect": {"status": "sealed",
                                                "steps": ["turn"],
                                                "output": {"subset": {"d": "x"}}}}, 0)
    evidence = CaseEvidence(status="sealed", steps=("turn", "other"), payload={"d": "y"})
    assert assert_case("c", case.expect, evidence) == [
        "c: expect.steps: expected turn, got turn,other",
        "c: expect.output.subset.d: expected x, got y",
    ]
    failed = CaseEvidence(status="failure", detail="boom")
    assert assert_case("c", case.expect, failed) == [
        "c: expect.status: expected sealed, got failure (boom)"]
    no_status = parse_case({"name": "c"}, 0)
    assert assert_case("c", no_status.expect, failed) == [
        "c: expect.status: expected sealed, got failure (boom)"]
    assert assert_case("c", no_status.expect, CaseEvidence(status="needs_agent")) == []


def test_classify_targets(tmp_path: Path) -> None:
    from runx_actors.host.harness import HarnessError, HarnessUsageError

    (tmp_path / "a.yaml").write_text("{}", encoding="utf-8")
    (tmp_path / "b.txt").write_text("", encoding="utf-8")
    assert classify_targets([str(EXAMPLE)], tmp_path).package == EXAMPLE
    assert classify_targets(["a.yaml"], tmp_path).fixtures == (tmp_path / "a.yaml",)
    for bad in ([], [str(EXAMPLE), "a.yaml"], [str(EXAMPLE), str(EXAMPLE)], ["b.txt"]):
        with pytest.raises(HarnessUsageError):
            classify_targets(bad, tmp_path)
    with pytest.raises(HarnessError):
        classify_targets(["missing"], tmp_path)


def test_verify_directory_trusts_demo_key_after_harness(tmp_path: Path) -> None:
    """The harness's receipts verify against the signing identity's key only."""
    result = invoke(["harness", str(EXAMPLE), "-R", "D", "--json"], tmp_path)
    assert result.exit_code == 0
    report = verify_directory(tmp_path / "D", keyring=Signer.demo().keyring())
    assert report.valid and len(report.trees) == 3
