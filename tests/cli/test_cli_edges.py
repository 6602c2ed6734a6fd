"""Hostile input at the CLI (RUN-CLI-2): a scope the store does not have, a scope or Run
id that is no valid name (RUN-WIR-1), a PostgreSQL DSN where a SQLite store is needed,
and ``--json`` errors — every one typed, named, with its documented exit code, the
user's value shown with ``repr``, and with ``--json`` one JSON object on stdout.

The PostgreSQL-only cases (a DSN that cannot be reached) are in
``tests/store/test_runs_cli_postgres.py``."""

from __future__ import annotations

from pathlib import Path

import pytest
from cli_helpers import EXAMPLE, SIGNING_ENV, json_error
from click.testing import CliRunner, Result
from runs_scenario import build_store

from runx_actors.cli import main


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_store(tmp_path_factory.mktemp("edges") / "runs.sqlite3")


def cli(*args: str, **env: str) -> Result:
    return CliRunner().invoke(main, list(args), env={"RUNX_ACTORS_STORE": "", **env},
                              catch_exceptions=False)


def _scoped_reads(store: Path, scope: str) -> dict[str, list[str]]:
    s = str(store)
    return {
        "runs list": ["runs", "list", "--store", s, "--scope", scope],
        "runs show": ["runs", "show", "busy", "--store", s, "--scope", scope],
        "runs log": ["runs", "log", "busy", "--store", s, "--scope", scope],
        "runs approve": ["runs", "approve", "pending", "--store", s, "--scope", scope],
        "loop status": ["loop", "status", "L", "--store", s, "--scope", scope],
        "store check": ["store", "check", s, "--scope", scope],
    }


@pytest.mark.parametrize("command", ["runs list", "runs show", "runs log", "runs approve",
                                     "loop status", "store check"])
def test_an_unknown_scope_exits_1_naming_it(store: Path, command: str) -> None:
    args = _scoped_reads(store, "nosuch")[command]
    result = cli(*args)
    assert result.exit_code == 1, result.output
    assert f"runx-actors: {command}: the store has no scope 'nosuch'" in result.stderr
    doc = json_error(cli(*args, "--json"))
    assert doc["error"] == "ScopeNotFoundError" and doc["command"] == command


def test_an_unknown_scope_of_check_log_stays_66(store: Path) -> None:
    result = cli("check", "--log", str(store), "--scope", "nosuch")
    assert result.exit_code == 66 and "no scope 'nosuch'" in result.stderr


def test_a_known_scope_still_reads(store: Path) -> None:
    for args in _scoped_reads(store, "app").values():
        if args[1] in ("approve",) or args[0] == "loop":
            continue  # a write / a loop the store does not hold
        result = cli(*args)
        assert result.exit_code == 0, (args, result.output)


HOSTILE = [("s\x01", "U+0001 at index 1"), ("a\u202eb", "U+202E at index 1"),
           ("s" * 513, "513 UTF-8 bytes, more than 512"), ("", "non-empty")]


@pytest.mark.parametrize(("scope", "what"), HOSTILE)
@pytest.mark.parametrize("command", ["runs list", "runs show", "runs log", "runs approve",
                                     "loop status", "store check"])
def test_an_invalid_scope_is_a_usage_error(store: Path, command: str, scope: str,
                                           what: str) -> None:
    args = _scoped_reads(store, scope)[command]
    result = cli(*args)
    assert result.exit_code == 64, result.output
    shown = repr(scope[:64])[:-1]  # a longer value is cut at 64 characters, then "..."
    assert f"Invalid value for '--scope': {shown}" in result.stderr and what in result.stderr
    # the raw character never reaches the terminal: it is shown escaped
    assert "\x01" not in result.output and "\u202e" not in result.output
    doc = json_error(cli(*args, "--json"))
    assert doc["exit_code"] == 64 and doc["error"] == "BadParameter"


@pytest.mark.parametrize("option", ["--scope", "--run"])
def test_check_log_refuses_an_invalid_name(store: Path, option: str) -> None:
    result = cli("check", "--log", str(store), option, "s\x01")
    assert result.exit_code == 64 and "'s\\x01'" in result.stderr, result.output


@pytest.mark.parametrize("command", ["show", "log", "timeline", "approve", "cancel"])
def test_an_invalid_run_id_is_a_usage_error(store: Path, command: str) -> None:
    result = cli("runs", command, "b\x01", "--store", str(store))
    assert result.exit_code == 64, result.output
    assert "Invalid value for 'RUN_ID': 'b\\x01'" in result.stderr
    assert "\x01" not in result.output


def test_a_missing_run_is_named_with_repr(store: Path) -> None:
    result = cli("runs", "show", "no such", "--store", str(store), "--scope", "app")
    assert result.exit_code == 1
    assert "'no such'" in result.stderr, result.stderr


def test_a_missing_store_with_json_is_one_json_object(tmp_path: Path) -> None:
    missing = tmp_path / "nothing" / "here"
    result = cli("runs", "list", "--store", str(missing), "--json")
    assert result.exit_code == 1
    doc = json_error(result)
    assert doc["error"] == "StoreMissingError" and doc["hint"]
    assert not missing.exists()  # nothing was created
    check = cli("store", "check", str(missing), "--json")
    assert check.exit_code == 64 and json_error(check)["error"] == "StoreMissingError"


def test_a_bad_payload_with_json_is_one_json_object(store: Path) -> None:
    result = cli("runs", "respond", "asks", "c", "{", "--store", str(store), "--json")
    assert result.exit_code == 64
    assert "not strict JSON" in json_error(result)["message"]


def test_without_json_stdout_stays_empty_on_error(store: Path) -> None:
    result = cli("runs", "list", "--store", str(store), "--scope", "nosuch")
    assert result.exit_code == 1 and result.stdout == ""


DSN = "postgresql://runx:s3cret@127.0.0.1:1/nodb"


@pytest.mark.parametrize("args", [
    ["loop", "run", str(EXAMPLE), "--loop-id", "L", "-i", "objective=x"],
    ["skill", str(EXAMPLE), "-i", "objective=x", "-i", "loop_id=l", "-i", "turn_index=1",
     "-i", "max_turns=3"],
    ["resume", "run-1", "answers.json"],
])
@pytest.mark.parametrize("via", ["option", "env"])
def test_a_dsn_where_a_sqlite_store_is_needed_is_refused(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch,
                                                         args: list[str], via: str) -> None:
    """``skill``/``resume``/``loop run`` take a SQLite store only: a DSN is refused before
    anything is created (it had become a directory ``postgresql:/runx:s3cret@…`` holding
    a new SQLite store), its password masked."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "answers.json").write_text('{"answers": {}}')
    if via == "option":
        result = cli(*args, "--store", DSN, "-R", "r", "--json", **SIGNING_ENV)
    else:
        result = cli(*args, "-R", "r", "--json", **SIGNING_ENV, RUNX_ACTORS_STORE=DSN)
    assert result.exit_code == 64, result.output
    assert "is a PostgreSQL DSN" in result.stderr and "password=***" in result.stderr
    assert "s3cret" not in result.output
    assert json_error(result)["exit_code"] == 64
    assert not (tmp_path / "postgresql:").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["answers.json"]


def test_a_dsn_that_does_not_parse_is_not_echoed() -> None:
    """libpq's parse error quotes the text around the fault (it may be the password):
    the message says only that the DSN does not parse."""
    result = cli("store", "check", "host=x password s3cret", "--json")
    assert result.exit_code == 1, result.output
    assert "s3cret" not in result.output
    doc = json_error(result)
    assert doc["error"] == "StoreUnreachableError" and doc["reason"] == "bad_dsn"


# -- found by probing every command and option (RUN-CLI-2) -------------------------------


@pytest.mark.parametrize("args", [
    ["check", "--time-limit", "nan"],  # FloatRange lets NaN through: it was exit 70
    ["check", "--runs", "99999999999999999999"],  # an OverflowError in the model: exit 70
    ["check", "--calls", "1001"],
])
def test_out_of_range_check_options_are_usage_errors(args: list[str]) -> None:
    result = cli(*args, "--json")
    assert result.exit_code == 64, result.output
    assert "Invalid value for" in result.stderr
    assert json_error(result)["exit_code"] == 64


def test_check_workers_are_capped() -> None:
    """``--workers 100000`` forked that many processes. The declared range is asserted
    first, so that a regression fails here instead of forking."""
    import click

    from runx_actors.cli import MAX_WORKERS, check

    (option,) = [p for p in check.params if p.name == "workers"]
    assert isinstance(option.type, click.IntRange) and option.type.max == MAX_WORKERS
    result = cli("check", "--workers", str(MAX_WORKERS + 1), "--max-states", "1")
    assert result.exit_code == 64 and "Invalid value for '--workers'" in result.stderr


def test_a_huge_count_in_a_check_config_file_is_a_usage_error(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text("runs = 100000000000000000000\n")
    result = cli("check", "--config", str(config))
    assert result.exit_code == 64, result.output
    assert "runs must be an integer from 1 to 1000" in result.stderr


def test_a_timeline_into_a_missing_directory_names_the_file(store: Path,
                                                           tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "t.html"
    result = cli("runs", "timeline", "busy", "--store", str(store), "-o", str(target))
    assert result.exit_code == 1, result.output
    assert result.stderr.splitlines()[0] == (
        f"runx-actors: runs timeline: cannot write {str(target)!r}: No such file or "
        "directory")
    assert result.stderr.splitlines()[1].startswith("hint: ")


def test_an_unknown_receipt_id_is_shown_with_repr(tmp_path: Path) -> None:
    (tmp_path / "r").mkdir()
    result = cli("verify", "a\x01b", "-R", str(tmp_path / "r"))
    assert result.exit_code == 1, result.output
    assert "receipt 'a\\x01b' is not in" in result.stderr and "\x01" not in result.output


@pytest.mark.parametrize(("args", "what"), [
    (["loop", "run", str(EXAMPLE), "--loop-id", "L\x01", "-i", "objective=x"],
     "Invalid value for '--loop-id': 'L\\x01'"),
    (["loop", "status", "L" * 1020], "loop id is 1020 UTF-8 bytes, more than 1019"),
])
def test_an_invalid_loop_id_is_a_usage_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             args: list[str], what: str) -> None:
    """A loop id lives in its stream's name (``loop/<id>``): it was refused deep inside
    as a 'foreign stream' (exit 1), after the receipt directory and store were made."""
    monkeypatch.chdir(tmp_path)
    result = cli(*args, "--store", "s.sqlite3", "-R", "r", **SIGNING_ENV) if args[1] == \
        "run" else cli(*args, "--store", "s.sqlite3")
    assert result.exit_code == 64, result.output
    assert what in result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_bad_size_override_gets_its_own_hint(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ws").mkdir()
    result = cli("skill", str(EXAMPLE), "-i", "objective=x", "--store", "s.sqlite3", "-R",
                 "r", **SIGNING_ENV, RUNX_CWD=str(tmp_path / "ws"),
                 RUNX_ACTORS_MAX_PACKAGE_MANIFEST_BYTES="lots")
    assert result.exit_code == 1, result.output
    lines = result.stderr.splitlines()
    assert "RUNX_ACTORS_MAX_PACKAGE_MANIFEST_BYTES" in lines[0] and "'lots'" in lines[0]
    assert lines[1].startswith("hint: set the RUNX_ACTORS_MAX_<KIND>_BYTES variable")


#: Every key of the one JSON error object (``runx_actors._clierror.error_document``).
ERROR_KEYS = {"ok", "command", "error", "message", "hint", "exit_code"}


def _json_error_cases(tmp: Path) -> dict[str, tuple[list[str], int, str, str]]:
    """name -> (argv, exit code, command, error class) of a user-caused ``--json`` error
    (the files are made by :func:`_json_error_files`)."""
    missing = str(tmp / "nowhere")
    return {
        "harness: no such target": (["harness", missing], 1, "harness", "HarnessError"),
        "harness: bad X.yaml": (["harness", str(tmp / "pkg")], 1, "harness", "HarnessError"),
        "harness: no target": (["harness"], 64, "harness", "UsageError"),
        "verify: no such directory": (["verify", "-R", missing], 1, "verify",
                                      "ReceiptDirectoryNotFoundError"),
        "verify: unknown receipt": (["verify", "sha256:" + "0" * 64, "-R", str(tmp / "empty")],
                                    1, "verify", "ReceiptNotFoundError"),
        "verify: not JSON": (["verify", "--receipt", str(tmp / "bad.json")], 1, "verify",
                             "ReceiptInputError"),
        "verify: no such file": (["verify", "--receipt", missing], 1, "verify",
                                 "ReceiptInputError"),
        "verify: --receipt with -R": (["verify", "--receipt", missing, "-R", missing], 64,
                                      "verify", "UsageError"),
        "check --log: no such store": (["check", "--log", missing + ".db"], 66, "check",
                                       "LogUnreadableError"),
        "runs list: no such store": (["runs", "list", "--store", missing], 1, "runs list",
                                     "StoreMissingError"),
    }


def _json_error_files(tmp: Path) -> None:
    (tmp / "bad.json").write_text("{")
    (tmp / "pkg").mkdir()
    (tmp / "pkg" / "X.yaml").write_text("name: [\n")
    (tmp / "empty").mkdir()


@pytest.mark.parametrize("case", sorted(_json_error_cases(Path("/nonexistent"))))
def test_every_json_error_is_the_one_error_object(tmp_path: Path, case: str) -> None:
    """RUN-CLI-2: a user-caused error under ``--json`` is exactly one JSON object on
    stdout, of the one shape (``ERROR_KEYS``; harness, verify and ``check --log`` had
    none or their own), with the process's exit code; the text stays on stderr."""
    _json_error_files(tmp_path)
    argv, code, command, error = _json_error_cases(tmp_path)[case]
    result = cli(*argv, "--json", **SIGNING_ENV)
    assert result.exit_code == code, result.output
    doc = json_error(result)
    assert ERROR_KEYS <= doc.keys(), doc
    assert (doc["command"], doc["error"]) == (command, error), doc
    assert doc["hint"] and not doc["message"].startswith("runx-actors"), doc
    assert result.stderr.startswith("runx-actors: "), result.stderr
    assert doc["message"] in " ".join(result.stderr.split()), (doc, result.stderr)


def test_a_half_set_verify_key_is_the_one_error_object_with_a_hint(tmp_path: Path) -> None:
    """RUN-CLI-2: a verify key given without its kid (KeyringConfigError) printed an
    empty hint in the JSON object and no ``hint:`` line; it now has both."""
    (tmp_path / "d").mkdir()
    result = cli("verify", "-R", str(tmp_path / "d"), "--json",
                 RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64="AAAA")
    assert result.exit_code == 1, result.output
    doc = json_error(result)
    assert (doc["command"], doc["error"]) == ("verify", "KeyringConfigError"), doc
    assert "RUNX_RECEIPT_VERIFY_KID" in doc["hint"], doc
    assert result.stderr.splitlines()[1] == f"hint: {doc['hint']}", result.stderr


@pytest.mark.parametrize(("argv", "command"), [
    (["nosuch"], ""),
    (["--bogus"], ""),
    (["runs", "show"], "runs show"),
    (["runs", "list", "--scope", "a\x01b"], "runs list"),
    (["check", "--model", "nope"], "check"),
    (["check", "--bogus"], "check"),
    (["harness"], "harness"),
    (["verify", "--receipt", "x.json", "-R", "d"], "verify"),
    # (store check of a path where nothing exists is StoreMissingError, exit 64, with its
    # own hint: test_cli_refusals.test_store_check_of_no_store_is_store_missing_with_a_hint)
    (["runs", "list", "--store", "\udcff"], ""),  # not UTF-8: refused before click parses
], ids=lambda v: " ".join(v) if isinstance(v, list) else v)
def test_a_usage_error_is_the_projects_two_lines(argv: list[str], command: str) -> None:
    """RUN-CLI-1: a usage error was click's block ("Usage: …", "Try '… --help' for
    help.", "", "Error: …") beside the project's one line and hint; it is now the
    project's: ``runx-actors: <command>: <message>`` and a ``hint:`` naming ``--help``,
    exit 64, and with ``--json`` the one JSON error object carrying the same hint."""
    result = cli(*argv)
    assert result.exit_code == 64, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 2, result.stderr
    first, hint = lines
    assert first.startswith(f"runx-actors: {command}: " if command else "runx-actors: ")
    assert hint.startswith("hint: ") and " --help`" in hint, hint
    assert not any(word in result.stderr for word in ("Usage:", "Try '", "Error:"))
    assert result.stdout == ""
    doc = json_error(cli(*argv, "--json"))
    assert doc["exit_code"] == 64 and doc["command"] == command
    assert doc["hint"] == hint.removeprefix("hint: ") and doc["message"] in first
