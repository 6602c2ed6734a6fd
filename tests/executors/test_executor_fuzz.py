"""Hostile input never escapes as an untyped exception (issue 12 bullets 4 and 6): any
answer body a provider sends gives a ModelResult or a ChatCompletionError; any path and
any arguments a model sends give a ToolFailure or ``None`` from ``validate``. Bounded by
the hypothesis ``ci`` profile."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import trio
from hypothesis import given
from hypothesis import strategies as st

from runx_actors.executors import (
    ChatCompletionError,
    OpenAIChatModel,
    Workspace,
    fs_read_tool,
    fs_write_tool,
)
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.values import ModelRequest, ModelResult

REQUEST = ModelRequest("gpt", (), canonical_json_text(
    {"messages": [{"role": "user", "content": "hi"}]}))

json_values = st.recursive(
    st.none() | st.booleans() | st.floats(allow_nan=True) | st.integers()
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.sampled_from(["choices", "message", "content", "tool_calls",
                                       "function", "name", "arguments", "usage",
                                       "prompt_tokens", "id", "type", "error", "x"]),
                      inner, max_size=5),
    max_leaves=30)


def _answer(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def _skeleton(content: Any, calls: Any, finish: Any, prompt: Any, completion: Any) -> bytes:
    """A well-formed answer shape with fuzzed leaves (NaN, Infinity, huge numbers …)."""
    return _answer({"choices": [{"message": {"content": content, "tool_calls": calls},
                                 "finish_reason": finish}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": completion}})


hostile = st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e300, 2**60, -1,
                           0.5, "7", None, True, [], {}])
leaves = hostile | st.floats() | st.integers() | st.text(max_size=10)
skeletons = st.builds(_skeleton, leaves, json_values, leaves, leaves, leaves)
answers = (json_values.map(_answer)
           | st.builds(lambda v: _answer({"choices": [{"message": v}]}), json_values)
           | skeletons
           | st.integers(1, 3000).map(lambda n: b'{"choices":' + b"[" * n + b"]" * n + b"}")
           | st.binary(max_size=200))


def _complete(body: bytes, status: int) -> ModelResult | ChatCompletionError:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body)

    async def main() -> ModelResult | ChatCompletionError:
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            model = OpenAIChatModel(base_url="https://x.test/v1", model="m", client=client,
                                    max_response_bytes=150)
            try:
                return await model.complete(REQUEST)
            except ChatCompletionError as error:
                return error

    return trio.run(main)


@given(answers, st.sampled_from([200, 200, 200, 429, 500, 400]))
def test_any_answer_body_gives_a_result_or_a_classified_error(body: bytes,
                                                              status: int) -> None:
    outcome = _complete(body, status)
    assert isinstance(outcome, ModelResult | ChatCompletionError)


@given(skeletons)
def test_any_answer_of_the_right_shape_gives_a_result_or_a_classified_error(body: bytes
                                                                           ) -> None:
    assert isinstance(_complete(body, 200), ModelResult | ChatCompletionError)


paths = (st.lists(st.sampled_from(["a", "b", ".", "..", "loop", "f", "n" * 300, "", "C:",
                                    "\x00", " "]), max_size=6)
         .flatmap(lambda parts: st.sampled_from(["/", "\\"]).map(lambda sep: sep.join(parts)))
         | st.text(max_size=40))


@given(paths)
def test_any_path_gives_a_failure_or_none(tmp_path_factory: Any, path: str) -> None:
    root = _root(tmp_path_factory)
    failure = Workspace(root).check_path({"path": path})
    assert failure is None or failure.class_ == "invalid_arguments"


@given(json_values)
def test_any_arguments_give_a_failure_or_none(tmp_path_factory: Any, value: Any) -> None:
    root = _root(tmp_path_factory)
    try:
        text = canonical_json_text(value)
    except Exception:
        return
    for tool in (fs_read_tool(root), fs_write_tool(root)):
        failure = tool.arguments_failure(text)
        assert failure is None or failure.class_ == "invalid_arguments"


_ROOTS: dict[int, Path] = {}


def _root(factory: Any) -> Path:
    key = id(factory)
    if key not in _ROOTS:
        root = factory.mktemp("fuzz")
        (root / "loop").symlink_to("loop")
        (root / "a").symlink_to("b")
        (root / "b").symlink_to("a")
        (root / "f").write_text("x", encoding="utf-8")
        _ROOTS[key] = root
    return _ROOTS[key]
