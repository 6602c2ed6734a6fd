"""Fuzz: packages, answers files and the strict readers give a typed error or a valid
value, never another exception (issue 12 deliverable 6). Bounded by the ``ci`` profile.

* the strict readers (``loads_yaml``, ``loads_json``) on any text or bytes →
  ``MalformedInputError`` or a value;
* ``load_package`` on a mutated ``X.yaml`` or ``SKILL.md`` → ``PackageError`` (a
  ``ContextRefError`` included) or a package;
* ``resume_run`` of a parked Run with any answers document → a host error
  (``AnswersError``…) or an outcome.
"""

from __future__ import annotations

import copy
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio
import yaml
from hypothesis import given
from hypothesis import strategies as st
from loop_support import EXAMPLE, GATE_ANSWER, GATE_OBJECTIVE, GATE_REQUEST, SCOPE, make_env

from runx_actors._strictread import MalformedInputError, loads_json, loads_yaml
from runx_actors.host.errors import HostError, PackageError
from runx_actors.host.package import load_package
from runx_actors.host.resume import resume_run
from runx_actors.host.skill import run_skill

XYAML = (EXAMPLE / "X.yaml").read_text(encoding="utf-8")
SKILL_MD = (EXAMPLE / "SKILL.md").read_text(encoding="utf-8")
YAML_PIECES = st.sampled_from([
    ":", "- ", "{", "}", "[", "]", "&a ", "*a", "<<: ", "!!str ", "!!python/tuple ", "\t",
    "\n", "  ", "#", "'", '"', "|", ">", "? ", ".nan", ".inf", "~", "null", "yes", "0x1F",
    "1e999", "\x00", "\ufeff", "---\n", "...\n", "%YAML 1.1\n", "allowed_tools: [fs.write]\n",
    "name: x\n",
])


@st.composite
def mutated_text(draw: st.DrawFn, text: str) -> str:
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(text)))
        end = draw(st.integers(start, min(len(text), start + 30)))
        text = text[:start] + draw(st.one_of(YAML_PIECES, st.text(max_size=6))) + text[end:]
    return text


@given(text=st.one_of(st.text(max_size=300), mutated_text(XYAML),
                      st.binary(max_size=200).map(lambda b: b.decode("latin-1"))))
def test_loads_yaml_gives_a_value_or_a_typed_error(text: str) -> None:
    try:
        loads_yaml(text, source="X.yaml")
    except MalformedInputError as exc:
        assert exc.source == "X.yaml" and exc.reason


@given(data=st.one_of(st.binary(max_size=300), st.text(max_size=300),
                      st.recursive(st.none() | st.floats() | st.integers() | st.text(max_size=5),
                                   lambda inner: st.lists(inner, max_size=3)
                                   | st.dictionaries(st.text(max_size=4), inner, max_size=3),
                                   max_leaves=10).map(json.dumps)))
def test_loads_json_gives_a_value_or_a_typed_error(data: str | bytes) -> None:
    try:
        loads_json(data, source="doc")
    except MalformedInputError as exc:
        assert exc.source == "doc" and exc.reason


@pytest.fixture(scope="module")
def package_copy() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="runx-fuzz-pkg-") as name:
        target = Path(name) / "pkg"
        shutil.copytree(EXAMPLE, target)
        yield target


@given(xyaml=mutated_text(XYAML), skill_md=st.one_of(st.just(SKILL_MD),
                                                      mutated_text(SKILL_MD)))
def test_load_package_gives_a_package_or_a_package_error(package_copy: Path, xyaml: str,
                                                         skill_md: str) -> None:
    (package_copy / "X.yaml").write_text(xyaml, encoding="utf-8", errors="surrogatepass")
    (package_copy / "SKILL.md").write_text(skill_md, encoding="utf-8",
                                           errors="surrogatepass")
    try:
        load_package(package_copy)
    except PackageError as exc:
        assert exc.reason


@given(spec=st.one_of(
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                 lambda inner: st.lists(inner, max_size=3)
                 | st.dictionaries(st.text(max_size=8), inner, max_size=3), max_leaves=10),
    st.builds(lambda d: yaml.safe_load(XYAML) | d,
              st.dictionaries(st.sampled_from(["name", "runners", "harness", "x"]),
                              st.none() | st.integers() | st.text(max_size=4)
                              | st.lists(st.integers(), max_size=2), max_size=2))))
def test_structured_xyaml_of_any_shape_is_a_package_error(package_copy: Path,
                                                          spec: Any) -> None:
    (package_copy / "SKILL.md").write_text(SKILL_MD, encoding="utf-8")
    (package_copy / "X.yaml").write_text(yaml.safe_dump(spec), encoding="utf-8")
    try:
        load_package(package_copy)
    except PackageError as exc:
        assert exc.reason


def _answers() -> st.SearchStrategy[Any]:
    value = st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=8),
                         lambda inner: st.lists(inner, max_size=2)
                         | st.dictionaries(st.text(max_size=6), inner, max_size=2),
                         max_leaves=6)

    def near_valid(changes: dict[str, Any]) -> dict[str, Any]:
        answer = copy.deepcopy(GATE_ANSWER) | changes
        return {"answers": {GATE_REQUEST: answer}}

    return st.one_of(
        value,
        st.dictionaries(st.sampled_from(["answers", "approvals", "x"]), value, max_size=2),
        st.builds(near_valid, st.dictionaries(
            st.sampled_from(["decision", "summary", "closure", "extra", "requested_tool"]),
            value, max_size=2)),
        st.builds(lambda v: {"answers": {GATE_REQUEST: v}}, value),
        st.builds(lambda v: {"approvals": {GATE_REQUEST: v}}, value),
    )


@given(document=_answers())
def test_resume_with_any_answers_gives_an_outcome_or_a_host_error(document: Any) -> None:
    async def main(tmp: Path) -> None:
        env = make_env(tmp)
        parked = await run_skill(env.store, env.package, runner="context-gate", scope=SCOPE,
                                 config=env.config(), inputs={"objective": GATE_OBJECTIVE})
        try:
            await resume_run(env.store, parked["run_id"], document, config=env.config(),
                             scope=SCOPE)
        except HostError as exc:
            assert exc.reason

    with tempfile.TemporaryDirectory(prefix="runx-fuzz-resume-") as name:
        trio.run(main, Path(name))
