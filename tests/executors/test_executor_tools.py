"""Tool declarations: python_tool / @tool, JSON-Schema arguments, ToolError (§6.2)."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from runx_actors import effect
from runx_actors.executors import (
    DEFAULT_PARAMETERS,
    ToolError,
    ToolUnknownError,
    python_tool,
    tool,
)
from runx_actors.executors._schema import schema_errors
from runx_actors.protocol.digests import digest_tool_definition
from runx_actors.protocol.errors import CanonicalJSONError, ValidationError
from runx_actors.protocol.values import (
    ResponsePolicy,
    ToolDefinition,
    ToolPlacement,
    ToolReplay,
    ToolSpec,
)


@tool("web.search.v2", name="search", description="Search the web.",
      parameters='{"type":"object","properties":{"q":{"type":"string"}},"required":["q"]}',
      policy=ResponsePolicy.APPROVAL_REQUIRED, replay=ToolReplay.ALLOWED)
async def search(q: str) -> list[str]:
    return [q]


def test_declaration_and_spec() -> None:
    assert search.ref == "web.search.v2" and search.name == "search"
    assert search.is_async
    assert search.definition == ToolDefinition(
        "search", "Search the web.",
        '{"properties":{"q":{"type":"string"}},"required":["q"],"type":"object"}')
    assert search.definition_digest == digest_tool_definition(search.definition)
    assert search.spec() == ToolSpec(
        ref="web.search.v2", name="search", definition_digest=search.definition_digest,
        policy=ResponsePolicy.APPROVAL_REQUIRED, replay=ToolReplay.ALLOWED,
        placement=ToolPlacement.NONE)
    plain = python_tool(lambda: 1, ref="one")
    assert plain.name == "one" and not plain.is_async
    assert plain.schema == dict(DEFAULT_PARAMETERS)


def test_declaration_mismatch_names_the_fields() -> None:
    body = effect.ToolAssignment(tool_ref="web.search.v2", arguments='{"q":"x"}',
                                 definition_digest=search.definition_digest,
                                 policy=ResponsePolicy.APPROVAL_REQUIRED,
                                 replay=ToolReplay.ALLOWED)
    assert search.declaration_failure(body) is None
    failure = search.declaration_failure(effect.ToolAssignment(
        tool_ref="web.search.v2", arguments="{}", definition_digest="",
        placement=ToolPlacement.WORKSPACE))
    assert failure is not None and failure.class_ == "tool_definition_mismatch"
    for field in ("definition_digest", "policy", "replay", "placement"):
        assert field in failure.message


def test_invalid_declarations_are_refused() -> None:
    with pytest.raises(ValidationError):
        python_tool(lambda: 1, ref="")
    with pytest.raises(CanonicalJSONError):
        python_tool(lambda: 1, ref="x", parameters="{not json")
    with pytest.raises(ValidationError):
        python_tool(lambda: 1, ref="x", timeout=0)


def test_check_hook_runs_after_the_schema() -> None:
    def positive(arguments: Any) -> effect.ToolFailure | None:
        if arguments["n"] <= 0:
            return effect.ToolFailure("invalid_arguments", "n must be positive")
        return None

    counted = python_tool(lambda n: n, ref="n", check=positive,
                          parameters={"type": "object", "properties": {"n": {"type": "integer"}},
                                      "required": ["n"]})
    assert counted.arguments_failure('{"n":3}') is None
    assert counted.arguments_failure('{"n":3.5}') is not None  # schema first
    failure = counted.arguments_failure('{"n":-1}')
    assert failure == effect.ToolFailure("invalid_arguments", "n must be positive")


@pytest.mark.parametrize(("value", "schema", "ok"), [
    ({"a": 1}, {"type": "object", "required": ["a"]}, True),
    ({}, {"type": "object", "required": ["a"]}, False),
    ({"a": 1, "b": 2}, {"type": "object", "properties": {"a": {}},
                        "additionalProperties": False}, False),
    ({"a": 1, "b": "x"}, {"type": "object", "additionalProperties": {"type": "integer"}},
     False),
    ([1, 2, 3], {"type": "array", "items": {"type": "integer"}, "maxItems": 2}, False),
    ([1, "2"], {"type": "array", "items": {"type": "integer"}}, False),
    ([], {"type": "array", "minItems": 1}, False),
    ("abc", {"type": "string", "minLength": 2, "maxLength": 3}, True),
    ("abcd", {"type": "string", "maxLength": 3}, False),
    (5, {"type": "number", "minimum": 1, "maximum": 4}, False),
    (True, {"type": "integer"}, False),
    (3.0, {"type": "integer"}, True),
    (None, {"type": ["string", "null"]}, True),
    ("b", {"enum": ["a", "b"]}, True),
    ("c", {"const": "a"}, False),
    ("anything", True, True),
    ("anything", False, False),
    ("x", {"format": "email"}, True),  # unsupported keywords are ignored
])
def test_schema_subset(value: Any, schema: Any, ok: bool) -> None:
    assert (schema_errors(value, schema) == []) is ok


def test_tool_errors_carry_their_class_and_pickle() -> None:
    error = ToolError("conflict", "busy", retry=effect.RetryDisposition.ALLOWED)
    again = pickle.loads(pickle.dumps(error))
    assert (again.class_, again.message, again.retry) == (
        "conflict", "busy", effect.RetryDisposition.ALLOWED)
    assert error.to_failure() == effect.ToolFailure("conflict", "busy")
    with pytest.raises(ValueError):
        ToolError("effect_unknown")
    with pytest.raises(ValueError):
        ToolError("")
    unknown = pickle.loads(pickle.dumps(ToolUnknownError("timeout", "gateway")))
    assert unknown.to_failure() == effect.ToolFailure("timeout", "gateway")
    assert ToolUnknownError().to_failure().class_ == "execution_failed"
