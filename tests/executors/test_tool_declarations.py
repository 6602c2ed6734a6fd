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


#: (python_tool keyword arguments, the argument the refusal names); each was accepted
#: (or an attrs NotCallableError / builtin TypeError) before the eighth session
BAD_DECLARATIONS: list[tuple[str, dict[str, Any], str]] = [
    ("fn_not_callable", {"fn": 5}, "fn"),
    ("empty_name", {"name": ""}, "name"),
    ("name_with_space", {"name": "a b"}, "name"),
    ("name_5000_chars", {"name": "x" * 5000}, "name"),
    ("name_65_chars", {"name": "x" * 65}, "name"),
    ("name_not_str", {"name": 5}, "name"),
    ("ref_with_newline", {"ref": "a\nb"}, "ref"),
    ("ref_with_bidi", {"ref": "a\u202eb"}, "ref"),
    ("ref_600_bytes", {"ref": "r" * 600}, "ref"),
    ("ref_not_str", {"ref": 5}, "ref"),
    ("timeout_text", {"timeout": "5"}, "timeout"),
    ("timeout_nan", {"timeout": float("nan")}, "timeout"),
    ("check_not_callable", {"check": 5}, "check"),
]


@pytest.mark.parametrize(("case", "kwargs", "argument"), BAD_DECLARATIONS,
                         ids=[c for c, _, _ in BAD_DECLARATIONS])
def test_a_bad_name_ref_or_callable_is_refused(case: str, kwargs: dict[str, Any],
                                               argument: str) -> None:
    """RUN-EXE-5: a ref is a name (RUN-WIR-1: 512 UTF-8 bytes, no control, line-separator
    or bidi character); a model-facing name is 1 to 64 of A-Z a-z 0-9 _ - . (the
    providers' ^[a-zA-Z0-9_-]{1,64}$ plus '.')."""
    args: dict[str, Any] = {"fn": echo, "ref": "t", **kwargs}
    with pytest.raises(ValidationError) as refused:
        python_tool(args.pop("fn"), **args)
    assert getattr(refused.value, "argument", None) == argument, (case, refused.value)


@pytest.mark.parametrize("dialect", ["http://bogus", "https://json-schema.org/draft/2099/schema",
                                     5, None])
def test_an_unknown_schema_dialect_is_refused(dialect: object) -> None:
    """RUN-EXE-5: the README says the schema is checked against its $schema; an unknown
    $schema was silently validated as Draft 2020-12."""
    with pytest.raises(ValidationError, match=r"\$schema") as refused:
        python_tool(echo, ref="t", parameters={"$schema": dialect, "type": "object"})
    assert refused.value.tool_ref == "t"  # type: ignore[attr-defined]


def test_known_dialects_names_with_dots_and_the_default_parameters_are_kept() -> None:
    for uri in ("http://json-schema.org/draft-07/schema#",
                "http://json-schema.org/draft-07/schema",
                "https://json-schema.org/draft/2020-12/schema"):
        python_tool(echo, ref="t", parameters={"$schema": uri, "type": "object"})
    assert python_tool(echo, ref="fs.read").name == "fs.read"
    assert python_tool(echo, ref="x" * 512, name="y" * 64).name == "y" * 64
    assert python_tool(echo, ref="t", parameters=None).any_object  # None: any object
