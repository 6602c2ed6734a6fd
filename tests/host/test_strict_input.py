"""Strict loading (issue 12 deliverable 1): every reader of a package, a harness fixture,
an answers file or an ``--input-json`` value refuses duplicate keys, non-finite numbers,
deep nesting, oversized input and non-regular files with a typed error naming the file.

The first tests are the regressions the issue lists under "What did not".
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from loop_support import EXAMPLE

from runx_actors._strictread import (
    LIMITS,
    MAX_DEPTH,
    MalformedInputError,
    limit_for,
    loads_json,
    loads_yaml,
    read_regular_file,
)
from runx_actors.host.context import read_front_matter
from runx_actors.host.errors import InputContractError, PackageError
from runx_actors.host.package import load_package


@pytest.fixture
def package(tmp_path: Path) -> Path:
    root = tmp_path / "pkg"
    shutil.copytree(EXAMPLE, root)
    return root


def _xyaml(root: Path) -> Path:
    return root / "X.yaml"


def _load_error(root: Path) -> PackageError:
    with pytest.raises(PackageError) as info:
        load_package(root)
    return info.value


# -- the regressions ------------------------------------------------------------


def test_duplicate_allowed_tools_key_is_refused(package: Path) -> None:
    text = _xyaml(package).read_text()
    widened = text.replace("    allowed_tools: [fs.read]      # ALLOWED_TOOLS",
                           "    allowed_tools: [fs.read]\n    allowed_tools: [fs.read, fs.write] #",
                           1)
    assert widened != text
    _xyaml(package).write_text(widened)
    err = _load_error(package)
    assert err.reason == "duplicate_key"
    assert err.attrs["line"] == 10
    assert "X.yaml" in str(err)


@pytest.mark.parametrize("line", [
    "    allowed_tools: {fs.read: true, fs.write: false}",  # was read as its keys: widened
    "    allowed_tools: fs.read",                           # was split into letters
    "    allowed_tools: 'fs.read, fs.write'",
    "    allowed_tools: 7",
    "    tools: {fs.read: 1}",
    "    approval_required: fs.write",
])
def test_a_list_field_given_a_mapping_or_a_string_is_refused(package: Path,
                                                             line: str) -> None:
    """A fresh user's find: cattrs structured a mapping as the list of its keys (so
    ``{fs.read: true, fs.write: false}`` allowed fs.write) and a string letter by letter."""
    text = _xyaml(package).read_text()
    key = line.split(":")[0].strip()
    old = next((x for x in text.splitlines() if x.startswith(f"    {key}:")), None)
    if old is None:  # a key the example does not set: add it beside allowed_tools
        old = next(x for x in text.splitlines() if x.startswith("    allowed_tools:"))
        line = f"{old}\n{line}"
    _xyaml(package).write_text(text.replace(old, line, 1))
    err = _load_error(package)
    assert "expected a list" in str(err), str(err)


@pytest.mark.parametrize(("allowed", "stray"), [
    ("[fs.read, fs.delete]", ["fs.delete"]),
    ("[net.fetch, fs.read, shell.run]", ["net.fetch", "shell.run"]),
])
def test_allowed_tools_outside_the_catalog_are_refused(package: Path, tmp_path: Path,
                                                        allowed: str,
                                                        stray: list[str]) -> None:
    """A scripted-run runner's executor holds exactly its ``tools``: an allowed tool that
    is not among them passed the gate and failed every call ``tool_lookup_failed`` (after
    the Run and its receipt were written). Refused at load, naming the tool; the CLI
    exits 1 like every invalid package, writing nothing."""
    text = _xyaml(package).read_text()
    changed = text.replace("    allowed_tools: [fs.read]      # ALLOWED_TOOLS",
                           f"    allowed_tools: {allowed}      # ALLOWED_TOOLS", 1)
    assert changed != text
    _xyaml(package).write_text(changed)
    err = _load_error(package)
    assert err.reason == "allowed_tool_not_offered" and err.attrs["tools"] == stray
    assert all(repr(tool) in str(err) for tool in stray) and "runner turn" in str(err)

    from click.testing import CliRunner

    from runx_actors.cli import main

    env = {"RUNX_RECEIPT_SIGN_KID": "runx-demo-key",
           "RUNX_RECEIPT_SIGN_ED25519_SEED_BASE64": "QkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkJCQkI=",
           "RUNX_RECEIPT_SIGN_ISSUER_TYPE": "hosted", "RUNX_CWD": str(package / "workspace"),
           "RUNX_ACTORS_STORE": ""}
    out = CliRunner().invoke(main, [
        "skill", str(package), "--store", str(tmp_path / "store"), "-R",
        str(tmp_path / "receipts"), "-i", "loop_id=l", "-i", "turn_index=1", "-i",
        "max_turns=3", "-i", "objective=o", "-i", f"requested_tool={stray[0]}", "--json"],
        env=env, catch_exceptions=False)
    assert out.exit_code == 1, out.output
    assert json.loads(out.stdout)["reason"] == "allowed_tool_not_offered"
    assert out.stderr.startswith("runx-actors: skill: runner turn: allowed_tools names ")
    assert not (tmp_path / "store").exists() and not (tmp_path / "receipts").exists()


@pytest.mark.parametrize(("declared", "field"), [
    ("scenario: {type: string, default: 7}", "scenario"),
    ("scenario: {type: string, default: [success]}", "scenario"),
    ("requested_tool: {type: string, default: ''}", "requested_tool"),
    ("count: {type: number, default: three}", "count"),
    ("count: {type: number, default: 9007199254740993}", "count"),
    ("count: {type: number, default: true}", "count"),
    ("dry_run: {type: boolean, default: 'no'}", "dry_run"),
])
def test_a_default_of_the_wrong_type_is_the_package_authors_error(
        package: Path, declared: str, field: str) -> None:
    """A default that its own declaration refuses was reported as the caller's input
    error (InputContractError, "check the inputs"): it is the package's (PackageError,
    reason invalid_default, the runner and field named), at load, before any input."""
    text = _xyaml(package).read_text()
    old = "      scenario: {type: string, default: success}"
    line = f"      {declared}"
    if not declared.startswith("scenario"):
        line = f"{old}\n{line}"
        if field == "requested_tool":
            line = old + "\n      requested_tool: {type: string, default: ''}"
            text = text.replace("      requested_tool: {type: string, default: fs.read}\n",
                                "", 1)
    changed = text.replace(old, line, 1)
    assert changed != text
    _xyaml(package).write_text(changed)
    err = _load_error(package)
    assert not isinstance(err, InputContractError)
    assert err.reason == "invalid_default", str(err)
    assert (err.attrs["runner"], err.attrs["field"]) == ("turn", field)
    assert str(err).startswith(f"runner turn: input {field}: the default ")


def test_a_graph_step_may_allow_tools_the_agent_provides(package: Path) -> None:
    """A graph step's allowed_tools go to the agent's envelope (§6.4): its tools are the
    agent's, not a catalog of the package, so they are not checked against one."""
    text = _xyaml(package).read_text()
    changed = text.replace("        allowed_tools: [fs.read]\n",
                           "        allowed_tools: [fs.read, web.search]\n", 1)
    assert changed != text
    _xyaml(package).write_text(changed)
    assert "web.search" in load_package(package).runner("context-gate").allowed_tools


def test_a_step_field_given_a_string_is_refused(package: Path) -> None:
    text = _xyaml(package).read_text()
    changed = text.replace("context_skills: [./context/loop-operator]",
                           "context_skills: ./context/loop-operator", 1)
    assert changed != text
    _xyaml(package).write_text(changed)
    assert "expected a list" in str(_load_error(package))


def test_a_mapping_field_given_a_list_is_refused(package: Path) -> None:
    text = _xyaml(package).read_text()
    changed = text.replace("runners:", "runners: [a]\nunused:", 1)
    assert changed != text
    _xyaml(package).write_text(changed)
    assert "expected a mapping" in str(_load_error(package))


def test_xyaml_symlink_to_dev_zero_is_refused(package: Path) -> None:
    _xyaml(package).unlink()
    _xyaml(package).symlink_to("/dev/zero")
    err = _load_error(package)
    assert err.reason == "symlink"


def test_xyaml_fifo_is_refused_without_blocking(package: Path) -> None:
    _xyaml(package).unlink()
    os.mkfifo(_xyaml(package))
    assert _load_error(package).reason == "not_regular"


def test_60_mb_xyaml_is_refused_from_its_size(package: Path) -> None:
    with _xyaml(package).open("r+b") as handle:
        handle.truncate(60 * 1024 * 1024)  # sparse: refused from st_size, never read
    err = _load_error(package)
    assert err.reason == "too_large"
    assert str(LIMITS["package_manifest"]) in str(err)


@pytest.mark.parametrize("opener", ["[", "{a: "])
def test_deeply_nested_xyaml_is_refused(package: Path, opener: str) -> None:
    closer = "]" if opener == "[" else "}"
    _xyaml(package).write_text("name: " + opener * 50_000 + "1" + closer * 50_000 + "\n")
    assert _load_error(package).reason == "too_deep"


@pytest.mark.parametrize(("text", "kind"), [("42\n", "scalar"), ("- a\n- b\n", "sequence"),
                                            ("", "empty"), ("# only a comment\n", "empty")])
def test_top_level_non_mapping_xyaml_is_refused(package: Path, text: str, kind: str) -> None:
    _xyaml(package).write_text(text)
    err = _load_error(package)
    assert err.reason == "not_mapping"
    assert kind in str(err)


def test_other_package_files_must_be_regular(package: Path) -> None:
    os.mkfifo(package / "workspace" / "pipe")
    assert _load_error(package).reason == "not_regular"


def test_oversized_package_file_is_refused(package: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RUNX_ACTORS_MAX_PACKAGE_FILE_BYTES", "100")
    (package / "workspace" / "big.bin").write_bytes(b"x" * 101)
    assert _load_error(package).reason == "too_large"


def test_skill_md_front_matter_duplicate_key_is_refused(package: Path) -> None:
    (package / "SKILL.md").write_text("---\nname: a\nname: b\n---\nbody\n")
    assert _load_error(package).reason == "duplicate_key"


def test_context_skill_front_matter_is_strict() -> None:
    with pytest.raises(ValueError, match="duplicate key"):
        read_front_matter("---\nname: a\nname: b\n---\n")


# -- the readers themselves -------------------------------------------------------------


@pytest.mark.parametrize(("text", "reason"), [
    ('{"a": 1, "a": 2}', "duplicate_key"),
    ("[NaN]", "non_finite"),
    ("[-Infinity]", "non_finite"),
    ("1e400", "non_finite"),
    ("[" * 100_000 + "]" * 100_000, "too_deep"),
    ('"\\ud800"', "surrogate"),
    ("[1] [2]", "syntax"),
    ("1" + "0" * 5000, "syntax"),
    (b"\xff", "utf8"),
])
def test_loads_json_refusals(text: str | bytes, reason: str) -> None:
    with pytest.raises(MalformedInputError) as info:
        loads_json(text, source="doc.json")
    assert info.value.reason == reason
    assert info.value.source == "doc.json"


def test_loads_json_depth_boundary_and_brackets_in_strings() -> None:
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads_json(at_limit, source="x") is not None
    with pytest.raises(MalformedInputError):
        loads_json("[" + at_limit + "]", source="x")
    # brackets inside strings do not count, escaped quotes do not end a string
    tricky = json.dumps(["[" * 200, '\\"[[[' * 50])
    assert loads_json(tricky, source="x") == ["[" * 200, '\\"[[[' * 50]


def test_loads_json_size_cap() -> None:
    assert loads_json(b"[1]", source="x", max_bytes=3) == [1]
    with pytest.raises(MalformedInputError) as info:
        loads_json(b"[1] ", source="x", max_bytes=3)
    assert info.value.reason == "too_large"


@pytest.mark.parametrize(("text", "reason"), [
    ("a: 1\nb: 2\na: 3\n", "duplicate_key"),
    ("yes: 1\ntrue: 2\n", "duplicate_key"),
    ("a: &x [*x]\n", "yaml_alias"),
    ("a: &a [" + ",".join(["x"] * 100) + "]\nb: &b [" + ",".join(["*a"] * 100) + "]\n"
     "c: &c [" + ",".join(["*b"] * 100) + "]\n", "yaml_alias"),
    ("<<: {a: 1}\nb: 2\n", "yaml_merge"),
    ("a: .nan\n", "non_finite"),
    ("a: -.inf\n", "non_finite"),
    ("a: [" * 100 + "]" * 100, "too_deep"),
    ("a: !!python/object:os.system x\n", "syntax"),
    ("a: [1\n", "syntax"),
    ("a: 1" + "0" * 100_000 + "\n", "syntax"),  # past int()'s digit limit: not a ValueError
])
def test_loads_yaml_refusals(text: str, reason: str) -> None:
    with pytest.raises(MalformedInputError) as info:
        loads_yaml(text, source="X.yaml")
    assert info.value.reason == reason


def test_loads_yaml_aliases_count_towards_depth_and_are_otherwise_allowed() -> None:
    assert loads_yaml("a: &x [1]\nb: *x\n", source="x") == {"a": [1], "b": [1]}
    chain = "a0: &a0 [1]\n" + "".join(f"a{i}: &a{i} [*a{i - 1}]\n" for i in range(1, 70))
    with pytest.raises(MalformedInputError) as info:
        loads_yaml(chain, source="x")
    assert info.value.reason == "too_deep"


def test_loads_yaml_depth_boundary() -> None:
    at_limit = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads_yaml(at_limit, source="x") is not None
    with pytest.raises(MalformedInputError):
        loads_yaml("[" + at_limit + "]", source="x")


def test_read_regular_file_refusals(tmp_path: Path) -> None:
    link = tmp_path / "link"
    link.symlink_to("/dev/zero")
    for path, reason in ((link, "symlink"), (Path("/dev/zero"), "not_regular"),
                         (tmp_path, "not_regular")):
        with pytest.raises(MalformedInputError) as info:
            read_regular_file(path, max_bytes=10)
        assert info.value.reason == reason
    big = tmp_path / "big"
    big.write_bytes(b"x" * 11)
    with pytest.raises(MalformedInputError) as info:
        read_regular_file(big, max_bytes=10)
    assert info.value.reason == "too_large"
    assert read_regular_file(big, max_bytes=11) == b"x" * 11
    with pytest.raises(FileNotFoundError):
        read_regular_file(tmp_path / "missing", max_bytes=10)


def test_limit_override(monkeypatch: pytest.MonkeyPatch) -> None:
    assert limit_for("answers", {}) == LIMITS["answers"]
    assert limit_for("answers", {"RUNX_ACTORS_MAX_ANSWERS_BYTES": "5"}) == 5
    with pytest.raises(MalformedInputError):
        limit_for("answers", {"RUNX_ACTORS_MAX_ANSWERS_BYTES": "-5"})


def test_readme_documents_every_file_cap() -> None:
    """The README's "Hostile input" table names each cap and its override as LIMITS has
    them (the kinds a user can hit from the CLI)."""
    readme = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    documented = {"package_manifest", "skill_md", "package_file", "harness_case", "answers",
                  "input_json", "receipt", "receipt_index"}
    for kind in documented:
        size = LIMITS[kind] // (1024 * 1024)
        row = f"| {size} MiB | `RUNX_ACTORS_MAX_{kind.upper()}_BYTES` |"
        assert row in readme, row


def test_oversized_file_is_refused_from_its_size_without_reading(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    big = tmp_path / "big"
    with big.open("wb") as handle:
        handle.truncate(60 * 1024 * 1024)

    def no_read(*_: object) -> bytes:
        raise AssertionError("read a file already known to be too large")

    monkeypatch.setattr("runx_actors._strictread.os.read", no_read)
    with pytest.raises(MalformedInputError) as info:
        read_regular_file(big, max_bytes=1024)
    assert info.value.reason == "too_large"


def test_a_growing_file_is_read_at_most_cap_plus_one(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """st_size says small, the content keeps coming (a file appended to while read)."""
    small = tmp_path / "small"
    small.write_bytes(b"x")
    seen: list[int] = []

    def endless(_fd: int, size: int) -> bytes:
        seen.append(size)
        return b"y" * size

    monkeypatch.setattr("runx_actors._strictread.os.read", endless)
    with pytest.raises(MalformedInputError) as info:
        read_regular_file(small, max_bytes=3 * 1024 * 1024)
    assert info.value.reason == "too_large"
    assert sum(seen) == 3 * 1024 * 1024 + 1
