"""The traceability table of ``spec/SPEC.md`` is complete and cites only real checks.

The table (section ``## Traceability``) has one row per requirement id (``RUN-*``,
``APP-*``) and per invariant (``INV-1`` … ``INV-43``). Its "Checked by" cell cites pytest
functions or collected ``Test*`` classes (``test_name``, ``tests/path.py::test_name``,
``tests/path.py::TestMachine``) and invariants of the reference model (``check:INV-n``, or
another id the model exports, such as ``check:EXEC-1``). These tests read files only; they
import nothing but the reference model, and only for the ``check:`` citations.
"""

from __future__ import annotations

import functools
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SPEC = ROOT / "spec" / "SPEC.md"
#: Where pytest collects tests from (``pyproject.toml`` ``testpaths``).
TEST_DIRS = (ROOT / "tests", ROOT / "model_tests")
#: Shipped conformance suites: their ``test_*`` functions run when a test module imports them.
SUITE_DIRS = (ROOT / "runx_actors" / "testing",)

INVARIANT_COUNT = 43
ID = r"(?:RUN-[A-Z]{3}-\d+|APP-[A-Z]{3}-\d+|INV-\d+)"
HEADING = re.compile(rf"^### ({ID}) — \S", re.MULTILINE)
ROW = re.compile(rf"^\|\s*`?({ID})`?\s*\|(.*)\|\s*$")
TOKEN = re.compile(r"`([^`]+)`")
TEST_REF = re.compile(r"^(?:(?P<path>[\w./-]+\.py)::)?(?P<name>(?:test_|Test)\w+)$")
CHECK_REF = re.compile(r"^check:([A-Z]+-\d+)$")
DEFINITION = re.compile(
    r"^[ \t]*(?:async[ \t]+)?def[ \t]+(test_\w+)[ \t]*\("  # def test_x( / async def test_x(
    r"|^((?:test_|Test)\w+)[ \t]*="  # TestMachine = Machine.TestCase
    r"|^class[ \t]+(Test\w+)\b",  # class TestSomething:
    re.MULTILINE,
)


def _defined(match: re.Match[str]) -> str:
    return next(group for group in match.groups() if group)


def _spec_text() -> str:
    return SPEC.read_text(encoding="utf-8")


def _traceability_section(text: str) -> str:
    start = text.find("\n## Traceability")
    assert start >= 0, "spec/SPEC.md has no '## Traceability' section"
    rest = text[start + 1 :]
    end = rest.find("\n## ", 1)
    return rest if end < 0 else rest[:end]


@functools.cache
def _rows() -> dict[str, list[str]]:
    """Requirement or invariant id → the citations of its "Checked by" cell."""
    rows: dict[str, list[str]] = {}
    duplicates: list[str] = []
    for line in _traceability_section(_spec_text()).splitlines():
        match = ROW.match(line)
        if match is None:
            continue
        ident, cell = match.group(1), match.group(2)
        if ident in rows:
            duplicates.append(ident)
        tokens = TOKEN.findall(cell)
        if not tokens:  # tolerate unquoted, comma-separated citations
            tokens = [t.strip() for t in re.split(r",|<br>", cell) if t.strip()]
        rows[ident] = tokens
    assert not duplicates, f"ids with more than one row: {duplicates}"
    return rows


def _heading_ids() -> list[str]:
    return HEADING.findall(_spec_text())


def _py_files(directories: tuple[Path, ...]) -> list[Path]:
    return sorted(p for d in directories if d.is_dir() for p in d.rglob("*.py"))


@functools.cache
def _test_inventory() -> dict[str, set[str]]:
    """Test name → the files (relative to the repo) that make pytest collect it.

    A name counts if ``def test_x(`` / ``async def test_x(`` / ``TestX = …`` / ``class
    TestX`` appears in a file under ``tests/`` or ``model_tests/``, or if a shipped suite under
    ``runx_actors/testing/`` defines it and a test module names it (imports it).
    """
    found: dict[str, set[str]] = {}
    test_texts: dict[str, str] = {}
    for path in _py_files(TEST_DIRS):
        rel = path.relative_to(ROOT).as_posix()
        text = path.read_text(encoding="utf-8")
        test_texts[rel] = text
        for match in DEFINITION.finditer(text):
            found.setdefault(_defined(match), set()).add(rel)
    for path in _py_files(SUITE_DIRS):
        for match in DEFINITION.finditer(path.read_text(encoding="utf-8")):
            name = _defined(match)
            word = re.compile(rf"\b{name}\b")
            for rel, text in test_texts.items():
                if word.search(text):
                    found.setdefault(name, set()).add(rel)
    return found


def _citations() -> tuple[dict[str, list[str]], dict[str, list[str]], dict[str, list[str]]]:
    """Split every cell into test references, checker references and unparseable items."""
    tests: dict[str, list[str]] = {}
    checks: dict[str, list[str]] = {}
    bad: dict[str, list[str]] = {}
    for ident, tokens in _rows().items():
        for token in tokens:
            if TEST_REF.match(token):
                tests.setdefault(token, []).append(ident)
            elif CHECK_REF.match(token):
                checks.setdefault(token, []).append(ident)
            else:
                bad.setdefault(ident, []).append(token)
    return tests, checks, bad


def test_every_requirement_and_invariant_has_a_row() -> None:
    headings = _heading_ids()
    rows = _rows()
    requirements = [h for h in headings if not h.startswith("INV-")]
    invariants = [f"INV-{n}" for n in range(1, INVARIANT_COUNT + 1)]
    assert requirements, "no '### RUN-XXX-n — title' headings found in spec/SPEC.md"
    assert [h for h in headings if h.startswith("INV-")] == invariants, (
        "the invariant headings must be exactly INV-1 … INV-43, in order"
    )
    assert len(set(headings)) == len(headings), "a requirement heading appears twice"
    missing = [i for i in requirements + invariants if i not in rows]
    assert not missing, f"ids without a traceability row: {missing}"
    orphans = sorted(set(rows) - set(headings))
    assert not orphans, f"rows for ids that have no heading: {orphans}"


def test_no_checked_by_cell_is_empty() -> None:
    empty = sorted(ident for ident, tokens in _rows().items() if not tokens)
    assert not empty, f"rows with an empty 'Checked by' cell: {empty}"
    _, _, bad = _citations()
    assert not bad, f"citations that are neither a test nor check:<id>: {bad}"


def test_every_cited_test_exists() -> None:
    tests, _, _ = _citations()
    inventory = _test_inventory()
    missing: dict[str, list[str]] = {}
    for ref, idents in sorted(tests.items()):
        match = TEST_REF.match(ref)
        assert match is not None
        name, path = match.group("name"), match.group("path")
        files = inventory.get(name, set())
        if not files or (path is not None and path not in files):
            missing[ref] = sorted(set(idents))
    assert not missing, (
        f"{len(missing)} cited test(s) do not exist under tests/ or model_tests/ "
        "(name → rows citing it):\n"
        + "\n".join(f"  {ref} → {', '.join(idents)}" for ref, idents in missing.items())
    )


def test_every_cited_checker_invariant_exists() -> None:
    _, checks, _ = _citations()
    if not checks:
        return
    try:
        reference = importlib.import_module("runx_spec.reference")
    except ModuleNotFoundError as exc:
        if exc.name not in {"runx_spec", "runx_spec.reference"}:
            raise
        pytest.skip("runx_spec.reference does not exist yet; check:INV-n citations unverified")
    exported = {str(i) for i in reference.INVARIANT_IDS}
    unknown = {
        ref: sorted(set(idents))
        for ref, idents in sorted(checks.items())
        if CHECK_REF.match(ref).group(1) not in exported  # type: ignore[union-attr]
    }
    assert not unknown, f"check: citations not in runx_spec.reference.INVARIANT_IDS: {unknown}"
