"""X.yaml as a package author writes it: a YAML 1.2 float with an exponent and no dot or
sign (``1e308``) is a number, and an invalid field is named by its path in the
document (``runners['turn'].timeout_seconds``), never by cattrs' internal
"Structuring class ScriptedRunner @ …" notes (RUN-CLI-1; the eighth session's break
round)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from loop_support import EXAMPLE

from runx_actors._strictread import MalformedInputError, loads_yaml
from runx_actors.host.errors import PackageError
from runx_actors.host.package import load_package


@pytest.mark.parametrize(("text", "value"), [
    ("1e308", 1e308), ("1.0e308", 1e308), ("2.5E3", 2500.0), (".5e-3", 0.0005),
    ("-1e5", -1e5), ("+1e2", 100.0), ("1.0e+3", 1000.0),
    ("1e", "1e"), ("e5", "e5"), ("1e3x", "1e3x"), ("15", 15), ("1.5", 1.5)])
def test_exponent_floats_are_numbers(text: str, value: object) -> None:
    got = loads_yaml(f"a: {text}", source="t")["a"]
    assert got == value and type(got) is type(value)
    assert yaml.safe_load("a: 1e308") == {"a": "1e308"}  # PyYAML's own loader unchanged


def test_an_exponent_past_the_double_range_is_refused() -> None:
    with pytest.raises(MalformedInputError) as refused:
        loads_yaml("a: 1e999", source="t")
    assert refused.value.reason == "non_finite"


def _package(tmp_path: Path, old: str, new: str) -> Path:
    root = tmp_path / "pkg"
    shutil.copytree(EXAMPLE, root)
    xyaml = root / "X.yaml"
    text = xyaml.read_text()
    assert old in text
    xyaml.write_text(text.replace(old, new, 1))
    return root


def test_a_huge_timeout_is_a_number(tmp_path: Path) -> None:
    loaded = load_package(_package(tmp_path, "timeout_seconds: 15", "timeout_seconds: 1e308"))
    assert loaded.runner("turn").timeout_seconds == 1e308


@pytest.mark.parametrize(("old", "new", "says"), [
    ("timeout_seconds: 15", "timeout_seconds: [1]",
     "runners['turn'].timeout_seconds: expected a number, got [1]"),
    ("allowed_tools: [fs.read]", "allowed_tools: 7",
     "runners['turn'].allowed_tools: expected a list, got 7"),
    ("default: true", "default: true\n    bogus: 1", "runners['turn']: unknown keys ['bogus']"),
    ("- id: review", "- id: [review]", "runners['context-gate'].steps[0].id: expected a "
                                       "string"),
])
def test_an_invalid_field_is_named_by_its_path(tmp_path: Path, old: str, new: str,
                                               says: str) -> None:
    with pytest.raises(PackageError) as refused:
        load_package(_package(tmp_path, old, new))
    message = str(refused.value)
    assert says in message, message
    for internal in ("Structuring", "runx_actors.", "ScriptedRunner", "PackageSpec"):
        assert internal not in message, message
