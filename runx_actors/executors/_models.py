"""Model backends for the LocalExecutor and the deterministic :class:`ScriptedModel`.

A model is any object with ``async complete(request) -> ModelResult``
(:class:`Model`). A model that can also stream implements :class:`StreamingModel`
(``async stream(request, emit) -> ModelResult``), where ``emit(kind, payload)`` publishes
``model_text_delta`` / ``model_reasoning_delta`` progress frames (RUN-EXE-12). Raise
:class:`ModelError` with a :class:`~runx_actors.effect.FailureCode` for a classified
failure (RUN-EXE-11); any other exception becomes ``executor_error``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any, Protocol, TypeAlias, runtime_checkable

import trio

from ..effect import FailureCode, ProgressKind
from ..protocol.canonical import canonical_json_text, freeze_tool_arguments
from ..protocol.errors import RunxError
from ..protocol.values import ModelRequest, ModelResult, ModelToolCall, Usage

__all__ = [
    "Model",
    "StreamingModel",
    "ModelEmit",
    "ModelError",
    "ScriptTurn",
    "ScriptedModel",
    "reply",
    "tool_call",
    "call_tools",
]

#: ``emit(kind, payload)``: publish one provisional progress frame; never blocks.
ModelEmit = Callable[[ProgressKind, Any], None]


@runtime_checkable
class Model(Protocol):
    """A model backend: ``complete(request)`` answers one frozen request."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Answer the frozen *request* (``request.body`` is its canonical JSON) with one
        ``ModelResult``. Raise ``ModelError`` (``code`` a FailureCode, optional
        ``retry_after`` seconds) for a classified provider failure (RUN-EXE-11)."""
        ...


@runtime_checkable
class StreamingModel(Protocol):
    """A model backend that also streams deltas through ``emit`` while it answers."""

    async def stream(self, request: ModelRequest, emit: ModelEmit) -> ModelResult:
        """As ``complete``, publishing ``model_text_delta`` / ``model_reasoning_delta``
        frames through ``emit(kind, payload)`` (never blocks) while answering (RUN-EXE-12)."""
        ...


class ModelError(RunxError):
    """A classified model failure: becomes ``ModelFailed(code, message)`` (RUN-EXE-11).

    Codes whose ``retry()`` is ALLOWED are retried inside the executor's worker (up to
    its ``max_attempts``, 3 by default). ``retry_after`` (seconds, finite, >= 0, or
    ``None``) is the provider's ``Retry-After``: the worker's next attempt starts no
    sooner, and a value beyond the executor's ``max_retry_after`` ends the retries.
    Raises ValueError for a negative or non-finite ``retry_after``.
    """

    def __init__(self, code: FailureCode, message: str = "", *,
                 retry_after: float | None = None) -> None:
        if retry_after is not None and not 0 <= retry_after < float("inf"):
            raise ValueError(f"retry_after must be finite and >= 0, not {retry_after!r}")
        super().__init__(message or code.value, code=code)
        self.code = code
        self.message = message
        self.retry_after = retry_after

    def __reduce__(self) -> Any:
        return (_rebuild_model_error, (type(self), self.code, self.message, self.retry_after))


def _rebuild_model_error(cls: type[ModelError], code: FailureCode, message: str,
                         retry_after: float | None) -> ModelError:
    return cls(code, message, retry_after=retry_after)


#: One scripted answer: a result, a ModelError to raise, or a function of the request.
ScriptTurn: TypeAlias = "ModelResult | ModelError | Callable[[ModelRequest], ModelResult]"


class ScriptedModel:
    """A deterministic model answering from a script, one turn per ``complete`` call.

    Each turn is a :class:`ModelResult` (returned), a :class:`ModelError` (raised) or a
    callable ``turn(request) -> ModelResult`` (for answers that depend on the frozen
    request). When the script is exhausted the last turn is repeated if
    ``repeat_last`` is set; otherwise ``ModelError(BAD_REQUEST, "script exhausted")``.
    ``delay`` (seconds of trio's clock) is awaited before each answer, so tests can
    cancel a model mid-call. ``requests`` records every request received, in order.

    Streaming: :meth:`stream` emits the answer's content as one ``model_text_delta``
    frame (``{"text": ...}``) before returning it.
    """

    def __init__(self, script: Iterable[ScriptTurn], *, repeat_last: bool = False,
                 delay: float = 0.0) -> None:
        self._script: tuple[Any, ...] = tuple(script)
        self._repeat_last = repeat_last
        self._delay = delay
        self._next = 0
        self._requests: list[ModelRequest] = []

    @property
    def requests(self) -> tuple[ModelRequest, ...]:
        """Every request received so far, in order."""
        return tuple(self._requests)

    @property
    def calls(self) -> int:
        """Number of ``complete``/``stream`` calls so far."""
        return len(self._requests)

    @property
    def remaining(self) -> int:
        """Unused turns left in the script."""
        return max(0, len(self._script) - self._next)

    async def complete(self, request: ModelRequest) -> ModelResult:
        """Answer *request* with the next turn.

        Checkpoint: always (sleeps ``delay`` first).
        Cancellation: the turn is consumed and the request recorded; no answer.
        Raises: ModelError from the script, or when the script is exhausted.
        """
        self._requests.append(request)
        turn = self._take()
        if self._delay > 0:
            await trio.sleep(self._delay)
        else:
            await trio.lowlevel.checkpoint()
        if isinstance(turn, ModelError):
            raise turn
        if isinstance(turn, ModelResult):
            return turn
        result = turn(request)
        if not isinstance(result, ModelResult):
            raise TypeError(f"a script turn returned {type(result).__name__}, not ModelResult")
        return result

    async def stream(self, request: ModelRequest, emit: ModelEmit) -> ModelResult:
        """Like :meth:`complete`, emitting the content as a ``model_text_delta`` first.

        Checkpoint, cancellation and errors as :meth:`complete`.
        """
        result = await self.complete(request)
        if result.content:
            emit(ProgressKind.MODEL_TEXT_DELTA, {"text": result.content})
        return result

    def _take(self) -> Any:
        if self._next < len(self._script):
            turn = self._script[self._next]
            self._next += 1
            return turn
        if self._repeat_last and self._script:
            return self._script[-1]
        return ModelError(FailureCode.BAD_REQUEST, "script exhausted")


def reply(content: str, *, input_tokens: int = 0, output_tokens: int = 0,
          finish_reason: str = "stop") -> ModelResult:
    """A text-only model result (the Run completes on it when no input is pending)."""
    return ModelResult(content=content, finish_reason=finish_reason,
                       usage=Usage(input_tokens, output_tokens))


def tool_call(name: str, arguments: Mapping[str, Any] | str | None = None, *,
              id: str = "") -> ModelToolCall:
    """One tool call by model-facing *name*.

    ``arguments``: a mapping (canonicalised), raw model text (frozen with
    ``freeze_tool_arguments``, so invalid JSON becomes a JSON string), or ``None`` (``{}``).
    """
    if arguments is None:
        text = "{}"
    elif isinstance(arguments, str):
        text = freeze_tool_arguments(arguments)
    else:
        text = canonical_json_text(arguments)
    return ModelToolCall(id=id, name=name, arguments=text)


def call_tools(*calls: ModelToolCall, content: str = "", input_tokens: int = 0,
               output_tokens: int = 0, finish_reason: str = "tool_calls") -> ModelResult:
    """A model result asking for *calls*; calls without an id get ``call_<n>`` (1-based)."""
    numbered = tuple(
        c if c.id else ModelToolCall(id=f"call_{i}", name=c.name, arguments=c.arguments)
        for i, c in enumerate(calls, start=1))
    return ModelResult(content=content, tool_calls=numbered, finish_reason=finish_reason,
                       usage=Usage(input_tokens, output_tokens))

