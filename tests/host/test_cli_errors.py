"""No raw traceback reaches a CLI user (issue 12 deliverable 2, RUN-CLI-1).

The regressions of the issue first (deep ``--input-json``, a top-level scalar / list /
empty ``X.yaml``), then the top-level handler's contract (a library error → its
documented exit code, one line and a hint; anything else → 70 and "rerun with --debug";
``--debug`` / ``RUNX_ACTORS_DEBUG=1`` print the traceback), then hypothesis driving the
commands with malformed arguments and files.
"""

from __future__ import annotations

import base64
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result
from hypothesis import given
from hypothesis import strategies as st
from loop_support import EXAMPLE

from runx_actors.cli import EX_SOFTWARE, main
from runx_actors.host import cli_commands

#: The exit codes the README documents for the loop host's commands (loop-host §9.1).
DOCUMENTED = {0, 1, 2, 3, 64}
SIGNING_ENV = {
    "RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
    "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": base64.b64encode(b"B" * 32).decode(),
    "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted",
}
CLEAN_ENV: dict[str, str | None] = {
    name: None for name in (
        "RUNX_RECEIPT_VERIFY_KID", "RUNX_RECEIPT_VERIFY_ED25519_PUBLIC_KEY_BASE64",
        "RUNX_RECEIPT_DIR", "RUNX_LOOP_RECEIPT_DIR", "RUNX_PROJECT_DIR", "RUNX_CWD",
        "INIT_CWD", "RUNX_RUN_ID", "RUNX_ACTORS_STORE", "RUNX_ACTORS_DEBUG")
}


@pytest.fixture(scope="module")
def scratch() -> Iterator[Path]:
    """One directory for the whole module (hypothesis examples share it)."""
    with tempfile.TemporaryDirectory(prefix="runx-cli-errors-") as name:
        root = Path(name)
        shutil.copytree(EXAMPLE, root / "pkg")
        (root / "ws").mkdir()
        yield root


def run(args: list[str], cwd: Path, *, stdin: bytes | None = None, **env: str) -> Result:
    merged: dict[str, str | None] = {**CLEAN_ENV, **SIGNING_ENV, "RUNX_CWD": str(cwd / "ws"),
                                     **env}
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(cwd)
        return CliRunner().invoke(main, args, env=merged, input=stdin,
                                  catch_exceptions=False)


def assert_clean(result: Result, codes: set[int] = DOCUMENTED) -> None:
    output = result.output + (result.stderr if result.stderr_bytes else "")
    assert "Traceback" not in output, output
    assert result.exit_code in codes, (result.exit_code, output)


def _write_xyaml(scratch: Path, text: str | bytes) -> Path:
    package = scratch / "pkg"
    data = text.encode("utf-8", "surrogatepass") if isinstance(text, str) else text
    (package / "X.yaml").write_bytes(data)
    return package


# -- the regressions ---------------------------------------------------------------


@pytest.mark.parametrize("depth", [1_000, 100_000])
def test_deep_input_json_is_a_usage_error(tmp_path: Path, depth: int) -> None:
    (tmp_path / "ws").mkdir()
    result = run(["skill", str(EXAMPLE), "--input-json", "objective=" + "[" * depth
                  + "]" * depth], tmp_path)
    assert_clean(result, {64})
    assert "nested deeper than 64" in result.output


@pytest.mark.parametrize("args", [
    ["-i", "loop_id=a", "-i", "loop_id=b"],
    ["-i", "objective=x", "--input-json", 'objective="y"'],
    ["--input-json", "objective=1", "--input-json", "objective=2"],
])
def test_an_input_given_twice_is_a_usage_error(tmp_path: Path, args: list[str]) -> None:
    """The last one used to win silently (a second -i allowed_tools=… would replace the
    first); the strict reader already refused a duplicate key inside one JSON value."""
    (tmp_path / "ws").mkdir()
    result = run(["skill", str(EXAMPLE), *args, "--store", "s.sqlite3"], tmp_path)
    assert_clean(result, {64})
    assert "given twice" in result.output
    assert not (tmp_path / "s.sqlite3").exists()  # refused before the store is opened


@pytest.mark.parametrize("text", ["42\n", "- a\n", "", "name: [1\n", "a: 1\na: 2\n",
                                  "name: " + "[" * 50_000 + "]" * 50_000])
def test_malformed_xyaml_exits_1_with_one_line(tmp_path: Path, text: str) -> None:
    (tmp_path / "ws").mkdir()
    package = tmp_path / "pkg"
    shutil.copytree(EXAMPLE, package)
    (package / "X.yaml").write_text(text)
    result = run(["skill", str(package)], tmp_path)
    assert_clean(result, {1})
    lines = result.output.splitlines()
    assert lines[0].startswith("runx-actors: skill: ") and lines[1].startswith("hint: ")
    assert len(lines) == 2


def test_xyaml_symlink_to_dev_zero_via_cli(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    package = tmp_path / "pkg"
    shutil.copytree(EXAMPLE, package)
    (package / "X.yaml").unlink()
    (package / "X.yaml").symlink_to("/dev/zero")
    for command in (["skill", str(package)], ["harness", str(package)]):
        result = run(command, tmp_path)
        assert_clean(result, {1})
        assert "symlink" in result.output


# -- the top-level handler -------------------------------------------------------------------


def _boom(*_: Any, **__: Any) -> Any:
    raise RuntimeError("simulated bug")


def test_unexpected_exception_exits_70_with_one_line(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.setattr(cli_commands, "load_package", _boom)
    result = run(["skill", str(EXAMPLE)], tmp_path)
    assert result.exit_code == EX_SOFTWARE
    assert "Traceback" not in result.output
    assert result.output.splitlines() == [
        "runx-actors: skill: internal error: RuntimeError: simulated bug",
        "hint: this is a bug; rerun with --debug (or RUNX_ACTORS_DEBUG=1) for the traceback"]
    result = run(["skill", str(EXAMPLE), "--json"], tmp_path)  # the JSON names the command
    doc = json.loads(result.stdout)
    assert doc["command"] == "skill" and doc["error"] == "RuntimeError"
    assert doc["exit_code"] == EX_SOFTWARE


class _Unprintable(Exception):
    def __str__(self) -> str:
        raise RuntimeError("str boom")


def test_an_unprintable_internal_error_is_named(tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(*_: Any, **__: Any) -> Any:
        raise _Unprintable()

    (tmp_path / "ws").mkdir()
    monkeypatch.setattr(cli_commands, "load_package", boom)
    result = run(["skill", str(EXAMPLE)], tmp_path)
    assert result.exit_code == EX_SOFTWARE
    assert result.stderr.splitlines()[0] == (
        "runx-actors: skill: internal error: _Unprintable: <unprintable _Unprintable>")


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_shows_the_traceback(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                   how: str) -> None:
    (tmp_path / "ws").mkdir()
    monkeypatch.setattr(cli_commands, "load_package", _boom)
    args = ["--debug", "skill", str(EXAMPLE)] if how == "flag" else ["skill", str(EXAMPLE)]
    extra = {"RUNX_ACTORS_DEBUG": "1"} if how == "env" else {}
    result = run(args, tmp_path, **extra)
    assert result.exit_code == EX_SOFTWARE
    assert "Traceback (most recent call last)" in result.output
    assert "RuntimeError: simulated bug" in result.output


def test_library_error_escaping_a_command_keeps_its_exit_code(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A RunxError no command caught still gets its documented code (LoopIntegrityError:
    3), one line and its hint."""
    from runx_actors.host.errors import LoopIntegrityError

    def integrity(*_: Any, **__: Any) -> Any:
        raise LoopIntegrityError("receipt chain broken", loop_id="l", turn_index=1,
                                 check="x")

    monkeypatch.setattr(cli_commands, "verify_command", integrity)
    result = run(["verify", "-R", "D"], tmp_path)
    assert result.exit_code == 3
    assert result.output.splitlines()[0] == "runx-actors: verify: receipt chain broken"
    assert result.output.splitlines()[1].startswith("hint: ")


# -- hypothesis: malformed arguments and files ---------------------------------------------

_EXAMPLE_XYAML = (EXAMPLE / "X.yaml").read_text(encoding="utf-8")
_HOSTILE_YAML = st.sampled_from([
    "", "~", "42", "[]", "- 1", "!!binary AAAA", "a: !!python/name:os.system x", "a: &x [*x]",
    "<<: {name: x}", "name: .nan", "name: x\nname: y", "{" * 200 + "}" * 200,
    "runners: {turn: {type: scripted-run, allowed_tools: [a], allowed_tools: [a, b]}}",
    "name: loop\nrunners: 7", "name: loop\nrunners: {turn: []}", "\ufeffname: x",
])


@st.composite
def mutated_xyaml(draw: st.DrawFn) -> str:
    text = _EXAMPLE_XYAML
    start = draw(st.integers(0, len(text)))
    end = draw(st.integers(start, min(len(text), start + 40)))
    insert = draw(st.one_of(st.text(max_size=20), _HOSTILE_YAML))
    return text[:start] + insert + text[end:]


@given(text=st.one_of(_HOSTILE_YAML, st.text(max_size=200), mutated_xyaml(),
                      st.binary(max_size=100).map(lambda b: b.decode("latin-1"))))
def test_skill_with_malformed_xyaml_never_tracebacks(scratch: Path, text: str) -> None:
    package = _write_xyaml(scratch, text)
    assert_clean(run(["skill", str(package), "-R", "D", "--store", "s.sqlite"], scratch))


_JSONISH = st.one_of(
    st.text(max_size=120),
    st.sampled_from(["NaN", "[Infinity]", '{"a":1,"a":2}', "1e999", "[" * 5000, '"\\ud800"',
                     "{" * 70 + "}" * 70, '{"answers": {"x": {"y": NaN}}}',
                     '{"answers": [], "approvals": 3}', "null", "[]", '{"answers": {}}']),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=5), inner, max_size=3),
                 max_leaves=12).map(json.dumps),
)


@given(value=_JSONISH, key=st.sampled_from(["objective", "turn_index", "k", "", "loop_id"]),
       strict=st.booleans())
def test_skill_inputs_never_traceback(scratch: Path, value: str, key: str,
                                      strict: bool) -> None:
    option = "--input-json" if strict else "-i"
    assert_clean(run(["skill", str(EXAMPLE), option, f"{key}={value}", "-R", "D",
                      "--store", "s.sqlite"], scratch))


@given(document=st.one_of(_JSONISH, st.binary(max_size=100).map(
    lambda b: b.decode("latin-1"))), via_stdin=st.booleans())
def test_resume_with_malformed_answers_never_tracebacks(scratch: Path, document: str,
                                                        via_stdin: bool) -> None:
    data = document.encode("utf-8", "surrogatepass")
    if via_stdin:
        result = run(["resume", "run_x", "-", "--store", "s.sqlite"], scratch, stdin=data)
    else:
        (scratch / "answers.json").write_bytes(data)
        result = run(["resume", "run_x", "answers.json", "--store", "s.sqlite"], scratch)
    assert_clean(result, {1})


_VOCABULARY = st.sampled_from([
    "skill", "resume", "harness", "verify", "demo", "--json", "-R", "--store", "--scope",
    "--runner", "-i", "--input-json", "--receipt", "-", "--scenario", "--debug", "x=1",
    "=", "loop-orchestration", "nonexistent", "/dev/null", "/", "", "--no-such-option",
    "--allow-local-development-signatures", "sha256:" + "0" * 64, "D", "pkg", "pkg/X.yaml",
    "--help",
])


@given(args=st.lists(st.one_of(_VOCABULARY, st.text(max_size=12)), min_size=1, max_size=6))
def test_random_arguments_never_traceback(scratch: Path, args: list[str]) -> None:
    if args[0] == "demo" and "--help" not in args:
        args = [*args[:1], "--scenario", "no-such-scenario", *args[1:]]  # keep it quick
    if "check" in args:  # model checking with random bounds is not a quick usage test
        return
    assert_clean(run(args, scratch, RUNX_LOOP_RECEIPT_DIR=str(scratch / "loopD")))


@given(data=st.one_of(st.binary(max_size=300), _JSONISH.map(str.encode)))
def test_verify_receipt_input_never_tracebacks(scratch: Path, data: bytes) -> None:
    (scratch / "r.json").write_bytes(data)
    assert_clean(run(["verify", "--receipt", "r.json"], scratch), {1, 3})
    assert_clean(run(["verify", "--receipt", "-"], scratch, stdin=data), {1, 3})


def test_verify_receipt_refuses_a_fifo_without_blocking(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "pipe.json")
    result = run(["verify", "--receipt", "pipe.json"], tmp_path)
    assert_clean(result, {1})
    assert "not a regular file" in result.output


_FIXTURE = "name: f\nkind: graph\ntarget: pkg\nrunner: context-gate\n" \
           "inputs: {objective: x}\nexpect: {status: sealed}\n"


@given(text=st.one_of(_HOSTILE_YAML, st.text(max_size=120), st.builds(
    lambda start, insert: _FIXTURE[:start] + insert + _FIXTURE[start:],
    st.integers(0, len(_FIXTURE)), st.one_of(_HOSTILE_YAML, st.text(max_size=10)))))
def test_harness_with_malformed_fixture_files_never_tracebacks(scratch: Path,
                                                               text: str) -> None:
    (scratch / "pkg" / "X.yaml").write_text(_EXAMPLE_XYAML, encoding="utf-8")
    (scratch / "fixture.yaml").write_text(text, encoding="utf-8", errors="surrogatepass")
    assert_clean(run(["harness", "fixture.yaml", "-R", "HD"], scratch))


# -- hypothesis: damaged stores (``store check``) and receipt directories (``verify -R``) ---


@pytest.fixture(scope="module")
def sealed(scratch: Path) -> Path:
    """``scratch/sealed``: one sealed turn of the example, made once through the CLI: its
    store ``store.sqlite3`` and its receipt directory ``R``."""
    root = scratch / "sealed"
    root.mkdir()
    shutil.copytree(EXAMPLE / "workspace", root / "ws")  # fs.read reads its NOTES.md
    result = run(["skill", str(EXAMPLE), "-i", "loop_id=l", "-i", "turn_index=1", "-i",
                  "max_turns=3", "-i", "objective=x", "--store", "store.sqlite3", "-R", "R"],
                 root)
    assert result.exit_code == 0, result.output
    return root


@st.composite
def damaged_bytes(draw: st.DrawFn, original: bytes) -> bytes:
    """*original* truncated, or with a byte range overwritten / deleted."""
    how = draw(st.sampled_from(["truncate", "overwrite", "delete", "random"]))
    if how == "random":
        return draw(st.binary(max_size=300))
    start = draw(st.integers(0, len(original)))
    if how == "truncate":
        return original[:start]
    end = draw(st.integers(start, min(len(original), start + 64)))
    if how == "delete":
        return original[:start] + original[end:]
    return original[:start] + draw(st.binary(min_size=1, max_size=16)) + original[end:]


def _fingerprint(path: Path) -> list[tuple[str, bytes]]:
    return sorted((p.name, p.read_bytes()) for p in path.parent.glob(path.name + "*"))


@given(data=st.data())
def test_store_check_on_a_damaged_file_never_tracebacks(sealed: Path,
                                                         data: st.DataObject) -> None:
    """``store check`` on a store file damaged at random: exit 0 (the damage missed
    every page that is read) or 3, never a traceback, and the file is left as it was."""
    original = (sealed / "store.sqlite3").read_bytes()
    target = sealed / "damaged.sqlite3"
    for leftover in sealed.glob("damaged.sqlite3*"):
        leftover.unlink()
    target.write_bytes(data.draw(damaged_bytes(original)))
    before = _fingerprint(target)
    result = run(["store", "check", "damaged.sqlite3", "--json"], sealed)
    assert_clean(result, {0, 3})
    assert _fingerprint(target) == before


@given(data=st.data(), which=st.sampled_from(["receipt", "index"]),
       kind=st.sampled_from(["bytes", "fifo", "directory", "symlink"]))
def test_verify_on_a_damaged_receipt_directory_never_tracebacks(
        sealed: Path, data: st.DataObject, which: str, kind: str) -> None:
    """``verify -R`` on a copy of a sealed receipt directory with its receipt or its
    index damaged, or replaced by a FIFO, a directory or a symlink: a documented exit
    code (0 only when the receipt itself is untouched), never a traceback, never a
    blocked read."""
    import os

    copy = sealed / "Rdamaged"
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(sealed / "R", copy)
    receipt = next(copy.glob("sha256-*.json"))
    victim = receipt if which == "receipt" else copy / "index.json"
    original = victim.read_bytes()
    victim.unlink()
    if kind == "bytes":
        damaged = data.draw(damaged_bytes(original))
        victim.write_bytes(damaged)
    elif kind == "fifo":
        os.mkfifo(victim)
    elif kind == "directory":
        victim.mkdir()
    else:
        victim.symlink_to("/dev/zero")
    result = run(["verify", "-R", "Rdamaged", "--json"], sealed)
    assert_clean(result, {0, 1, 3})
    if which == "receipt" and (kind != "bytes" or damaged != original):
        assert result.exit_code != 0, result.output  # a damaged receipt never verifies


def test_an_empty_scope_is_a_usage_error(tmp_path: Path) -> None:
    (tmp_path / "ws").mkdir()
    result = run(["skill", str(EXAMPLE), "-i", "objective=x", "-i", "loop_id=l", "-i",
                  "turn_index=1", "-i", "max_turns=3", "--scope", "", "--store",
                  "s.sqlite3"], tmp_path)
    assert_clean(result, {64})  # refused as a bad option, before anything opens
    assert "Invalid value for '--scope': '' is not a valid scope: scope must be a " \
        "non-empty string" in result.stderr
    assert not (tmp_path / "s.sqlite3").exists()


@pytest.mark.parametrize("content", [b"[1]", b'{"a": 1, "a": 2}', b"{"])
def test_a_refused_receipt_file_gets_a_hint(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "r.json").write_bytes(content)
    result = run(["verify", "--receipt", "r.json"], tmp_path)
    assert_clean(result, {1})
    lines = result.stderr.splitlines()
    assert lines[0].startswith("runx-actors: verify: ") and lines[1].startswith("hint: ")


@pytest.mark.parametrize(("option", "env", "what"), [
    (["--scope", "a\u202eb"], {}, "scope contains U+202E at index 1"),
    (["--scope", "s" * 513], {}, "scope is 513 UTF-8 bytes, more than 512"),
    ([], {"RUNX_RUN_ID": "run\nforged line"}, "run id contains U+000A at index 3"),
])
def test_a_hostile_name_is_refused_in_one_line(tmp_path: Path, option: list[str],
                                                env: dict[str, str], what: str) -> None:
    """RUN-WIR-1 from the CLI: a scope or run id with a control or bidirectional character,
    or past the byte limit, is refused in one line naming the code point or the size —
    a ``--scope`` as a bad option (exit 64, before anything opens; RUN-CLI-2), a
    ``RUNX_RUN_ID`` by the runtime (exit 1) — nothing is stored under it, and no traceback
    is printed."""
    (tmp_path / "ws").mkdir()
    result = run(["skill", str(EXAMPLE), "-i", "objective=x", "-i", "loop_id=l", "-i",
                  "turn_index=1", "-i", "max_turns=3", *option, "--store", "s.sqlite3"],
                 tmp_path, **env)
    if option:
        assert_clean(result, {64})
        error = [line for line in result.output.splitlines()
                 if line.startswith("runx-actors: skill: ")]
        assert len(error) == 1 and "Invalid value for '--scope'" in error[0] \
            and what in error[0], result.output
    else:
        assert_clean(result, {1})
        first = result.output.splitlines()[0]
        assert first.startswith("runx-actors: skill: ") and what in first, result.output
    assert "Traceback" not in result.output
    stores = list(tmp_path.rglob("s.sqlite3"))
    for db in stores:  # the store may have been opened; no Run and no commit is in it
        import sqlite3

        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT count(*) FROM runs").fetchone() == (0,)
            assert conn.execute("SELECT count(*) FROM commits").fetchone() == (0,)


def test_an_argument_that_is_not_utf8_is_a_usage_error(tmp_path: Path) -> None:
    """A shell passes an undecodable byte as a lone surrogate; every command refuses such
    an argument up front with exit 64 naming the argument and the byte (it used to reach
    the stores and exit 70, "internal error: UnicodeEncodeError")."""
    for args in (["runs", "show", "\udcff", "--store", "s.sqlite3"],
                 ["runs", "list", "--scope", "a\udcffb", "--store", "s.sqlite3"],
                 ["store", "check", "s.sqlite3", "--scope", "\udcff"]):
        result = run(args, tmp_path)
        assert_clean(result, {64})
        assert "is not valid UTF-8 (byte 0xff at index" in result.output, result.output
