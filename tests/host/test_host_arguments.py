"""The loop host's entry points refuse arguments of the wrong type with ValidationError
naming them (README: every error is a RunxError; RUN-INP-1): ``load_package(None)`` and
``load_package(5)`` were builtin TypeErrors, ``LoopSpec(fixed_inputs=None)`` a TypeError
from ``LoopHost.run``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from loop_support import EXAMPLE

from runx_actors import RunxError, ValidationError
from runx_actors.host import LoopSpec, load_package


@pytest.mark.parametrize("path", [None, 5, b"examples", "", "a\x00b"],
                         ids=["none", "int", "bytes", "empty", "nul"])
def test_load_package_refuses_a_path_that_is_not_text(path: Any) -> None:
    with pytest.raises(ValidationError) as refused:
        load_package(path)
    assert isinstance(refused.value, RunxError)
    assert getattr(refused.value, "argument", None) == "path"


def test_load_package_takes_a_path_like() -> None:
    assert load_package(Path(EXAMPLE)).name


@pytest.mark.parametrize(("field", "value"), [
    ("fixed_inputs", None), ("fixed_inputs", ["a"]), ("fixed_inputs", {1: "a"}),
    ("loop_id", None), ("loop_id", ""), ("runner", 5), ("scope", None), ("package", "pkg"),
])
def test_loop_spec_refuses_fields_of_the_wrong_type(field: str, value: Any) -> None:
    base: dict[str, Any] = {"loop_id": "l", "package": load_package(EXAMPLE),
                            "max_turns": 1, field: value}
    with pytest.raises(ValidationError) as refused:
        LoopSpec(**base)
    assert getattr(refused.value, "argument", None) == field
