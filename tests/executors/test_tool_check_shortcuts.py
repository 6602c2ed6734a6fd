"""The tool-argument check's shortcuts answer what the full check answers (RUN-EXE-5).

``Tool.arguments_failure`` skips the JSON-Schema validation for the parameter schemas
every JSON object satisfies (``_ANY_OBJECT_SCHEMAS``) and binds the arguments to the
signature read once, when the Tool was made. The oracle below is the check without any
shortcut — strict parse, object, ``jsonschema`` on the schema, ``inspect.signature(fn)``
bound afresh — and never calls the Tool's own check.
"""

from __future__ import annotations

import inspect
import json
from typing import Any

import jsonschema
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from runx_actors.executors import python_tool
from runx_actors.executors._tools import _ANY_OBJECT_SCHEMAS
from runx_actors.protocol.canonical import canonical_json_text, parse_json_strict
from runx_actors.protocol.errors import ValidationError
from runx_actors.testing import strategies as rs


def _any(**kwargs: Any) -> str:
    return "ok"


def _one(a: Any) -> str:
    return "ok"


def _two(a: Any, b: int = 1) -> str:
    return "ok"


def _kw(*, q: Any) -> str:
    return "ok"


def _none() -> str:
    return "ok"


FUNCTIONS = (_any, _one, _two, _kw, _none)
CONSTRAINED = (
    {"type": "object", "required": ["a"]},
    {"type": "object", "additionalProperties": False},
    {"type": "object", "properties": {"a": {"type": "integer"}}},
    {"type": "object", "minProperties": 1},
    {"type": "object", "properties": {}, "required": ["q"]},
    # ({"type": "array"} was here: a schema no object satisfies by its type is refused
    # when the Tool is made now, test_tool_declarations.py; a type list keeps the case)
    {"type": ["array", "object"], "required": ["a"]},
    {"not": {}},
)


def _oracle(fn: Any, schema: Any, arguments: str) -> str | None:
    """The refusal message the full check gives (None: accepted)."""
    try:
        parse_json_strict(arguments)
    except ValidationError:
        return "not valid JSON"
    value = json.loads(arguments)
    if not isinstance(value, dict):
        return "arguments must be a JSON object"
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    if list(cls(schema).iter_errors(value)):
        return "schema"
    try:
        inspect.signature(fn).bind(**value)
    except TypeError:
        return "binding"
    return None


def _verdict(failure: Any) -> str | None:
    if failure is None:
        return None
    message = failure.message
    if "not valid JSON" in message:
        return "not valid JSON"
    if message.startswith("arguments must be a JSON object"):
        return "arguments must be a JSON object"
    if "do not fit the tool" in message:
        return "binding"
    return "schema"


def test_the_skipped_schemas_are_canonical_and_accept_every_object() -> None:
    """Each skipped schema is canonical text (what ToolDefinition.parameters holds) and
    a Tool declared with it takes the shortcut; constrained ones do not."""
    for text in _ANY_OBJECT_SCHEMAS:
        assert canonical_json_text(json.loads(text)) == text
        assert python_tool(_any, ref="t", parameters=text).any_object
    for schema in CONSTRAINED:
        assert not python_tool(_any, ref="t", parameters=schema).any_object
    assert python_tool(_any, ref="t").any_object  # DEFAULT_PARAMETERS


@settings(max_examples=300, deadline=None)
@given(value=rs.json_objects())
def test_jsonschema_accepts_every_object_under_the_skipped_schemas(value: Any) -> None:
    """jsonschema itself finds no violation of a skipped schema by any JSON object:
    skipping it changes no answer."""
    for text in _ANY_OBJECT_SCHEMAS:
        schema = json.loads(text)
        cls = jsonschema.validators.validator_for(schema,
                                                  default=jsonschema.Draft202012Validator)
        assert list(cls(schema).iter_errors(value)) == []


ARGUMENTS = st.one_of(
    rs.json_objects().map(canonical_json_text),
    st.sampled_from(['{}', '{"a":1}', '{"a":"x","b":2}', '{"q":null}', '{"b":1}', '[]',
                     '1', '{"a":1,', '{"a":1e400}']),
)


@settings(max_examples=400, deadline=None)
@given(fn=st.sampled_from(FUNCTIONS),
       schema=st.sampled_from([json.loads(t) for t in sorted(_ANY_OBJECT_SCHEMAS)]
                              + list(CONSTRAINED)),
       arguments=ARGUMENTS)
def test_arguments_failure_equals_the_full_check(fn: Any, schema: Any,
                                                 arguments: str) -> None:
    """On every function, schema (skipped or not) and argument text: the Tool refuses
    for the reason the full check refuses for, and accepts what it accepts."""
    tool = python_tool(fn, ref="t", parameters=schema)
    assert _verdict(tool.arguments_failure(arguments)) == _oracle(fn, schema, arguments)


@pytest.mark.parametrize("fn, arguments, fits", [
    (_one, '{"a":1}', True), (_one, '{}', False), (_kw, '{"q":1}', True),
    (_kw, '{"a":1}', False), (_none, '{}', True), (_none, '{"a":1}', False),
])
def test_the_signature_read_once_is_the_callables(fn: Any, arguments: str,
                                                  fits: bool) -> None:
    """The signature the Tool bound is its own callable's (an object without an
    introspectable signature is left to the call)."""
    tool = python_tool(fn, ref="t")
    assert tool.signature == inspect.signature(fn)
    assert (tool.arguments_failure(arguments) is None) is fits
    opaque = python_tool(max, ref="p")  # a builtin: inspect.signature raises
    with pytest.raises(ValueError):
        inspect.signature(max)
    assert opaque.signature is None and opaque.arguments_failure('{"x":1}') is None
