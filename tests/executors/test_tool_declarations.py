"""A tool's declaration is refused where it is made, not on every call (RUN-EXE-5,
RUN-ACT-8): an invalid parameters schema (F18 of the seventh-session break round) and two
tools with one model-facing name (F19)."""

from __future__ import annotations

from typing import Any

import jsonschema
import pytest
import referencing.exceptions
import trio

from runx_actors.executors import ScriptedModel, Tool, open_local_executor, python_tool, reply
from runx_actors.executors._schema import schema_problem
from runx_actors.protocol.errors import ToolOfferError, ValidationError
from runx_actors.protocol.values import ToolDefinition
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore

HANG = 30


async def echo(**kw: Any) -> dict[str, Any]:
    return {"got": kw}


#: (parameters, a word of the refusal); each made every call fail invalid_arguments
#: before, blaming the model for the declaration
INVALID = [
    ({"type": "bogus"}, "invalid"),
    ({"type": "object", "properties": {"n": {"type": 5}}}, "invalid"),
    ({"type": "object", "required": "n"}, "invalid"),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"n": {"minimum": "zero"}}}, "invalid"),
    ([1, 2], "JSON object"),
    (True, "JSON object"),
    ({"type": "string"}, "describe a JSON object"),
    ({"type": ["string", "null"]}, "describe a JSON object"),
]


@pytest.mark.parametrize(("parameters", "word"), INVALID)
def test_python_tool_refuses_an_invalid_schema(parameters: Any, word: str) -> None:
    with pytest.raises(ValidationError) as refused:
        python_tool(echo, ref="t.a", name="a", parameters=parameters)
    assert word in str(refused.value) and refused.value.tool_ref == "t.a"


@pytest.mark.parametrize(("parameters", "word"), INVALID)
def test_the_oracle_agrees_the_schema_cannot_serve_object_arguments(
        parameters: Any, word: str) -> None:
    # independent of schema_problem: jsonschema's own check for the draft, or the fact
    # that no JSON object satisfies the schema's top-level type
    try:
        cls = jsonschema.validators.validator_for(parameters,
                                                  default=jsonschema.Draft202012Validator)
        cls.check_schema(parameters)
    except (jsonschema.exceptions.SchemaError, TypeError, AttributeError):
        return
    assert not isinstance(parameters, dict) or not cls(parameters).is_valid({})


#: (parameters, arguments reaching the $ref): a $ref that resolves to nothing; each was
#: accepted at creation and made every call reaching it fail invalid_arguments
UNRESOLVABLE = [
    ({"type": "object", "properties": {"n": {"$ref": "#/$defs/missing"}}}, {"n": 1}),
    ({"type": "object", "$ref": "#/nope"}, {}),
    ({"type": "object", "properties": {"n": {"$ref": "#no-such-anchor"}}}, {"n": 1}),
    ({"type": "object", "properties": {"n": {"$ref": "https://example.com/n.json"}}},
     {"n": 1}),
    ({"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
      "properties": {"n": {"$ref": "#/definitions/gone"}}}, {"n": 1}),
    ({"type": "object", "properties": {"n": {"items": {"$ref": "#/$defs/x"}}}},
     {"n": [1]}),
]


@pytest.mark.parametrize(("parameters", "arguments"), UNRESOLVABLE)
def test_a_ref_that_resolves_to_nothing_is_refused_at_creation(
        parameters: Any, arguments: Any) -> None:
    # the oracle: jsonschema itself cannot validate arguments that reach the $ref
    cls = jsonschema.validators.validator_for(parameters,
                                              default=jsonschema.Draft202012Validator)
    with pytest.raises(referencing.exceptions.Unresolvable):
        cls(parameters).is_valid(arguments)
    with pytest.raises(ValidationError) as refused:
        python_tool(echo, ref="t.a", name="a", parameters=parameters)
    assert "$ref" in str(refused.value) and refused.value.tool_ref == "t.a"


@pytest.mark.parametrize("parameters", [
    None, {}, {"type": "object"}, {"type": ["object", "null"]},
    {"type": "object", "properties": {"n": {"$ref": "#/$defs/n"}},
     "$defs": {"n": {"type": "integer"}}},
    {"type": "object", "properties": {"n": {"$ref": "#/$defs/a%20b"}},
     "$defs": {"a b": {"type": "integer"}}},
    {"type": "object", "properties": {"n": {"$ref": "#n"}},
     "$defs": {"n": {"$anchor": "n", "type": "integer"}}},
    {"type": "object", "properties": {"n": {"$id": "https://example.com/n",
                                            "$ref": "#/$defs/i",
                                            "$defs": {"i": {"type": "integer"}}}}},
    {"type": "object", "properties": {"n": {"enum": [{"$ref": "#/data, not a ref"}]}}},
    {"type": "object", "properties": {"n": {"$ref": "https://json-schema.org/draft/2020-12/schema"}}},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"n": {"$ref": "#/definitions/n"}},
     "definitions": {"n": {"type": "integer"}}},
    {"properties": {"n": {"type": "integer"}}, "required": ["n"]},
    {"$schema": "http://json-schema.org/draft-07/schema#", "type": "object",
     "properties": {"n": {"type": "integer", "minimum": 0}}},
    '{"type": "object", "additionalProperties": false}',
])
def test_valid_object_schemas_are_kept(parameters: Any) -> None:
    tool = python_tool(echo, ref="t.a", name="a", parameters=parameters)
    assert schema_problem(tool.schema) is None


def test_a_tool_declared_directly_is_checked_too() -> None:
    # the check lives in Tool itself: python_tool, @tool and Tool(...) all pass it
    with pytest.raises(ValidationError, match="invalid"):
        Tool(ref="t.a", definition=ToolDefinition(name="a", parameters='{"type":"bogus"}'),
             fn=echo)
    with pytest.raises(ValidationError, match="strict JSON"):
        Tool(ref="t.a", definition=ToolDefinition(name="a", parameters="{not json"),
             fn=echo)


async def test_an_offer_with_another_schema_than_the_executor_is_refused_at_open() -> None:
    # an offer made another way (a ToolOffer whose definition differs from the executor's
    # tool) is a definition mismatch at open (RUN-ACT-8), not a failure of every call
    good = python_tool(echo, ref="t.a", name="a")

    class Offer:
        definition = ToolDefinition(name="a", parameters='{"type":"bogus"}')

        def spec(self) -> Any:
            return attrs_evolve(good.spec(), self.definition)

    with trio.fail_after(HANG):
        async with open_local_executor(tools=[good],
                                       models={"m": ScriptedModel([reply("x")])}) as ex:
            with pytest.raises(ToolOfferError) as refused:
                async with open_runtime(MemoryStore(), ex, scope="s", model="m",
                                        tools=[Offer()]):
                    pass
            assert refused.value.failure.class_ == "tool_definition_mismatch"


def attrs_evolve(spec: Any, definition: ToolDefinition) -> Any:
    import attrs

    from runx_actors.protocol.digests import digest_tool_definition

    return attrs.evolve(spec, definition_digest=digest_tool_definition(definition))


async def test_the_executor_refuses_two_tools_with_one_name() -> None:
    a = python_tool(echo, ref="t.a", name="same")
    b = python_tool(echo, ref="t.b", name="same")
    with pytest.raises(ValidationError) as refused:
        async with open_local_executor(tools=[a, b]):
            pass  # pragma: no cover - refused before the block
    assert refused.value.name == "same" and refused.value.tool_ref == "t.b"
    with pytest.raises(ValidationError, match="duplicate tool ref"):
        async with open_local_executor(tools=[a, python_tool(echo, ref="t.a", name="x")]):
            pass  # pragma: no cover
    async with open_local_executor(tools=[a, python_tool(echo, ref="t.b", name="other")]):
        pass


async def test_the_runtime_refuses_two_offers_with_one_name() -> None:
    a = python_tool(echo, ref="t.a", name="same")
    b = python_tool(echo, ref="t.b", name="same")
    c = python_tool(echo, ref="t.c", name="c")
    store = MemoryStore()
    with trio.fail_after(HANG):
        async with open_local_executor(tools=[a, c],
                                       models={"m": ScriptedModel([reply("x")])}) as ex:
            for offers, name in (([a, b], "same"), ([a, c, a], "same")):
                with pytest.raises(ToolOfferError) as refused:
                    async with open_runtime(store, ex, scope="s", model="m", tools=offers):
                        pass  # pragma: no cover - refused before the scope opens
                assert refused.value.name == name and refused.value.failure is None
            assert not store.scope_log("s").streams  # nothing was written
            async with open_runtime(store, ex, scope="s", model="m", tools=[a, c]):
                pass
