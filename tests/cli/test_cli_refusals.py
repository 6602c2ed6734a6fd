"""A fresh user's CLI mistakes, refused before anything is written, as the project's one
error format (RUN-CLI-1, RUN-CLI-2, RUN-STO-4): an unknown ``script:``, runner or input
creates no store and no Run; a busy SQLite store is a typed error with a hint (exit 1);
every error is ``runx-actors: <command>: <message>`` plus a ``hint:`` line."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from cli_helpers import EXAMPLE, SIGNING_ENV, json_error
from click.testing import CliRunner, Result

from runx_actors.cli import main

CLEAN_ENV: dict[str, str | None] = {
    name: None for name in (
        "RUNX_RECEIPT_VERIFY_KID", "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64",
        "RUNX_RECEIPT_DIR", "RUNX_LOOP_RECEIPT_DIR", "RUNX_PROJECT_DIR", "RUNX_CWD",
        "INIT_CWD", "RUNX_RUN_ID", "RUNX_ACTORS_STORE", "RUNX_ACTORS_DEBUG")
}
TURN_INPUTS = ["-i", "loop_id=l", "-i", "turn_index=1", "-i", "max_turns=3",
               "-i", "objective=x"]


def cli(cwd: Path, *args: str, **env: str) -> Result:
    merged: dict[str, str | None] = {**CLEAN_ENV, **SIGNING_ENV, **env}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        return CliRunner().invoke(main, list(args), env=merged, catch_exceptions=False)



def one_format(result: Result, command: str) -> list[str]:
    """stderr is ``runx-actors: <command>: …`` then ``hint: …`` (and nothing else)."""
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    assert lines[0].startswith(f"runx-actors: {command}: "), lines
    assert lines[1].startswith("hint: ") and len(lines[1]) > len("hint: "), lines
    return lines


@pytest.fixture
def package(tmp_path: Path) -> Path:
    shutil.copytree(EXAMPLE, tmp_path / "pkg")
    return tmp_path / "pkg"


# -- 1, 2: refused before the store exists ----------------------------------------------


def test_an_unknown_script_is_refused_before_any_run(tmp_path: Path, package: Path) -> None:
    xyaml = package / "X.yaml"
    xyaml.write_text(xyaml.read_text().replace("script: loop-turn", "script: nope"))
    ws = str(package / "workspace")
    for args in (["skill", "pkg", *TURN_INPUTS, "--json"],
                 ["loop", "run", "pkg", "--loop-id", "L", "-i", "objective=x", "--json"]):
        for _ in range(2):  # a retry is refused the same way (no stuck Run piles up)
            result = cli(tmp_path, *args, "--store", "st", "-R", "rc", RUNX_CWD=ws)
            assert result.exit_code == 1, result.output
            doc = json_error(result)
            assert doc["error"] == "PackageError" and doc["reason"] == "unknown_script"
            assert "'nope'" in doc["message"] and "loop-turn" in doc["message"]
            assert "rt.cancel" not in doc["message"] and doc["hint"]
            one_format(result, " ".join(args[:2]) if args[0] == "loop" else "skill")
        assert not (tmp_path / "st").exists() and not (tmp_path / "rc").exists()


@pytest.mark.parametrize("extra", [
    ["skill", "pkg", *TURN_INPUTS, "--runner", "nope"],
    ["skill", "pkg", *TURN_INPUTS, "-i", "bogus=1"],
    ["skill", "pkg", *TURN_INPUTS[:2], *TURN_INPUTS[4:], "-i", "turn_index=NaN"],
    ["skill", "pkg", *TURN_INPUTS[2:]],                       # loop_id missing
    ["loop", "run", "pkg", "--loop-id", "L", "-i", "objective=x", "-i", "turn_index=5"],
    ["loop", "run", "pkg", "--loop-id", "L", "-i", "objective=x", "--runner", "nope"],
    ["loop", "run", "pkg", "--loop-id", "L"],                 # objective missing
], ids=["runner", "unknown-input", "nan", "missing", "loop-managed", "loop-runner",
        "loop-missing"])
def test_a_refused_run_creates_no_store(tmp_path: Path, package: Path,
                                        extra: list[str]) -> None:
    result = cli(tmp_path, *extra, "--store", "st", "-R", "rc",
                 RUNX_CWD=str(package / "workspace"))
    assert result.exit_code == 1, result.output
    one_format(result, " ".join(extra[:2]) if extra[0] == "loop" else "skill")
    assert not (tmp_path / "st").exists(), sorted(p.name for p in (tmp_path / "st").iterdir())


# -- 6: resume names the right error ------------------------------------------------------


@pytest.fixture(scope="module")
def app_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store whose Runs were made through the API (scope ``app``), not by ``skill``."""
    from runs_scenario import build_store

    return build_store(tmp_path_factory.mktemp("app") / "runs.sqlite3")


@pytest.mark.parametrize(("run_id", "scope", "error", "reason", "says"), [
    ("pending", "nope", "ScopeNotFoundError", None, "no scope 'nope'"),
    ("pending", "app", "UnknownRunError", "not_governed", "was not made by `runx-actors skill`"),
    ("ghost", "app", "UnknownRunError", "unknown_run", "unknown run 'ghost' in scope 'app'"),
], ids=["no-scope", "not-governed", "no-run"])
def test_resume_names_what_is_wrong(tmp_path: Path, app_store: Path, run_id: str, scope: str,
                                    error: str, reason: str | None, says: str) -> None:
    (tmp_path / "answers.json").write_text('{"approvals": {"x": true}}')
    before = app_store.read_bytes()
    result = cli(tmp_path, "resume", run_id, "answers.json", "--store", str(app_store),
                 "--scope", scope, "-R", "rc", "--json")
    assert result.exit_code == 1, result.output
    doc = json_error(result)
    assert doc["error"] == error and doc.get("reason") == reason and says in doc["message"]
    assert doc["hint"] == one_format(result, "resume")[1].removeprefix("hint: ")
    assert app_store.read_bytes() == before  # nothing was written


# -- 7: runs timeline -o ---------------------------------------------------------------------


def test_timeline_output_dash_is_stdout(tmp_path: Path, app_store: Path) -> None:
    result = cli(tmp_path, "runs", "timeline", "pending", "--store", str(app_store), "-o", "-")
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("gantt\n") and "wrote" not in result.stderr
    assert list(tmp_path.iterdir()) == []  # no file named '-'


@pytest.mark.parametrize("value", ["", "."], ids=["empty", "directory"])
def test_timeline_output_that_names_no_file_is_a_usage_error(tmp_path: Path, app_store: Path,
                                                             value: str) -> None:
    result = cli(tmp_path, "runs", "timeline", "pending", "--store", str(app_store),
                 "-o", value)
    assert result.exit_code == 64, result.output
    assert "-o" in result.stderr and list(tmp_path.iterdir()) == []


# -- 5: one format for every error ----------------------------------------------------------


def test_a_demo_configuration_error_is_one_line_and_a_hint(tmp_path: Path) -> None:
    result = cli(tmp_path, "demo", "loop-orchestration", RUNX_RECEIPT_SIGN_KID="")
    assert result.exit_code == 1, result.output
    first, hint = one_format(result, "demo")
    assert "RUNX_RECEIPT_SIGN_KID not set" in first and "RUNX_RECEIPT_SIGN_" in hint
    assert result.stdout == ""  # no receipts= / store= lines: no demonstration ran


@pytest.mark.parametrize("target", ["/nonexistent", "dir", "dir/x.sqlite3"])
def test_store_check_of_no_store_is_store_missing_with_a_hint(tmp_path: Path,
                                                              target: str) -> None:
    (tmp_path / "dir").mkdir()
    result = cli(tmp_path, "store", "check", target, "--json")
    assert result.exit_code == 64, result.output
    doc = json_error(result)
    assert doc["error"] == "StoreMissingError" and doc["command"] == "store check"
    assert doc["hint"] == one_format(result, "store check")[1].removeprefix("hint: ")
    assert [p.name for p in tmp_path.iterdir()] == ["dir"] and not any(
        (tmp_path / "dir").iterdir())  # nothing was created
