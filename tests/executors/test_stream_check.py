"""The executor's streaming check answers as ``isinstance(model, StreamingModel)``
(RUN-EXE-12): ``_attempt.streams`` skips the runtime Protocol machinery, so it is compared
here with the Protocol check itself on every shape a model can take."""

from __future__ import annotations

from typing import Any

import pytest

from runx_actors.executors import ScriptedModel, StreamingModel
from runx_actors.executors._attempt import streams


class Plain:
    async def complete(self, request: Any) -> Any: ...


class Streaming(Plain):
    async def stream(self, request: Any, emit: Any) -> Any: ...


class Blocked(Streaming):
    stream = None  # type: ignore[assignment]


class Attribute(Plain):
    def __init__(self) -> None:
        self.stream = lambda request, emit: None


class NoneAttribute(Plain):
    def __init__(self) -> None:
        self.stream = None


class Property(Plain):
    @property
    def stream(self) -> Any:
        return lambda request, emit: None


class Text(Plain):
    stream = "not callable, but there"


MODELS = [Plain(), Streaming(), Blocked(), Attribute(), NoneAttribute(), Property(), Text(),
          ScriptedModel([]), object()]


@pytest.mark.parametrize("model", MODELS, ids=lambda m: type(m).__name__)
def test_streams_is_the_protocol_check(model: object) -> None:
    assert streams(model) is isinstance(model, StreamingModel)


def test_both_answers_occur() -> None:
    assert {streams(m) for m in MODELS} == {True, False}
