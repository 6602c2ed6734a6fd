"""One execution attempt of the LocalExecutor: run a model or a tool once and map what
happened to an Outcome kind (spec §6.5, §6.6; RUN-EXE-2, RUN-EXE-11, §8.4 #80).

Mapping rules:

* model: ``ModelError(code)`` → ``ModelFailed(code)``; the ``model_timeout`` firing →
  ``deadline_exceeded``; any other exception → ``executor_error``; a value that is not a
  ``ModelResult``, cannot be frozen, or reports a token usage that is not a count
  (negative, not an int, past 2^53−1: ``Usage.problem``) → ``malformed_result``.
* tool: arguments refused (schema, signature, the tool's check) → KNOWN
  ``invalid_arguments``; ``ToolError`` → ``ToolExecutionFailed`` (KNOWN);
  ``ToolUnknownError``, the tool's ``timeout`` firing and **any other exception** →
  ``ToolExecutionUnknown`` (the effect may have happened); an output that cannot be
  frozen (``None``, ``""``, non-JSON, nested too deep) → KNOWN ``internal``; an output
  over the executor's ``max_tool_output_bytes`` → KNOWN ``too_large``.

Cancellation is never mapped here: ``trio.Cancelled`` propagates to the worker.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Awaitable, Callable
from typing import Any, cast

import trio

from ..effect import (
    Assignment,
    FailureCode,
    ModelFailed,
    ModelSucceeded,
    OutcomeResult,
    RetryDisposition,
    ToolExecutionFailed,
    ToolExecutionSucceeded,
    ToolExecutionUnknown,
    ToolFailure,
    ToolFailureClass,
)
from ..effect._escape import describe_error, stops_the_process
from ..protocol.canonical import canonical_json_text
from ..protocol.digests import digest_model_result, digest_tool_output
from ..protocol.values import ModelRequest, ModelResult, ToolResult, Usage
from ._fs import TOO_LARGE
from ._models import Model, ModelEmit, ModelError, StreamingModel
from ._tools import Tool, ToolContext, ToolError, ToolUnknownError

__all__ = ["run_model", "run_tool", "streams", "tool_output", "retryable"]


async def run_model(model: Model, request: ModelRequest, emit: ModelEmit,
                    timeout: float | None,
                    note_retry_after: Callable[[float], None] | None = None,
                    max_result_bytes: int | None = None) -> OutcomeResult:
    """Ask *model* once. A ``ModelError`` carrying ``retry_after`` is reported to
    *note_retry_after* (seconds) before it is mapped; a result whose text (content,
    body, tool-call ids, names and arguments, UTF-8) is over *max_result_bytes* is
    ``malformed_result`` naming both sizes. Checkpoint: always (the model's own).
    Raises: only Cancelled."""
    # no timeout: no cancel scope either (a parked attempt then holds one scope fewer)
    limit = trio.move_on_after(timeout) if timeout else None
    result: Any = None
    try:
        if limit is None:
            result = await _ask(model, request, emit)
        else:
            with limit:
                result = await _ask(model, request, emit)
    except ModelError as error:
        asked = getattr(error, "retry_after", None)
        if note_retry_after is not None and isinstance(asked, int | float):
            note_retry_after(float(asked))
        return ModelFailed(error.code, error.message)
    except BaseException as error:  # an Exception, or SystemExit & co. (RUN-ACT-1)
        if stops_the_process(error):
            raise
        return ModelFailed(FailureCode.EXECUTOR_ERROR, describe_error(error))
    if limit is not None and limit.cancelled_caught:
        return ModelFailed(FailureCode.DEADLINE_EXCEEDED, f"no answer within {timeout} s")
    if not isinstance(result, ModelResult):
        return ModelFailed(FailureCode.MALFORMED_RESULT,
                           f"the model returned {type(result).__name__}")
    if not isinstance(result.usage, Usage):
        return ModelFailed(FailureCode.MALFORMED_RESULT,
                           f"the model result's usage is {type(result.usage).__name__}, "
                           "not a Usage")
    bad_usage = result.usage.problem()
    if bad_usage is not None:
        return ModelFailed(FailureCode.MALFORMED_RESULT, f"the model result's {bad_usage}")
    if max_result_bytes is not None:
        size = _result_size(result)
        if size > max_result_bytes:
            return ModelFailed(FailureCode.MALFORMED_RESULT, (
                f"the model result is {size} bytes, over the cap of {max_result_bytes} "
                f"bytes (max_model_result_bytes)"))
    try:
        digest_model_result(result)
    except Exception as error:
        return ModelFailed(FailureCode.MALFORMED_RESULT,
                           f"cannot be frozen: {describe_error(error)}"[:500])
    return ModelSucceeded(result)


def _result_size(result: ModelResult) -> int:
    """Bytes of UTF-8 of a result's texts (a lower bound of its frozen size)."""
    def size(text: object) -> int:
        if not isinstance(text, str):
            return 0
        return len(text.encode("utf-8", "surrogatepass"))

    return size(result.content) + size(result.body) + size(result.finish_reason) + sum(
        size(c.id) + size(c.name) + size(c.arguments) for c in result.tool_calls)


async def run_tool(found: Tool, assignment: Assignment, arguments: str,
                   emit: ModelEmit, max_output_bytes: int | None = None) -> OutcomeResult:
    """Run *found* once with the call's canonical *arguments*. Sync callables run in a
    worker thread that is abandoned on cancellation (the Outcome is then ``Cancelled``
    while the thread may still finish its work). A ``SystemExit`` or another
    BaseException the tool raises is an UNKNOWN outcome, as an Exception is (the Run
    records ``effect_unknown``; :func:`stops_the_process`). Raises: only Cancelled and
    KeyboardInterrupt."""
    refused = found.arguments_failure(arguments)
    if refused is not None:
        return ToolExecutionFailed(refused, RetryDisposition.NEVER)
    context = ToolContext(assignment, emit) if found.context else None
    # no timeout: no cancel scope either (a parked call then holds one scope fewer); the
    # decoded arguments go straight into the call (no local keeps the dict alive)
    limit = trio.move_on_after(found.timeout) if found.timeout else None
    value: Any = None
    try:
        if limit is None:
            value = await _call(found, context, json.loads(arguments))
        else:
            with limit:
                value = await _call(found, context, json.loads(arguments))
    except ToolError as error:
        return ToolExecutionFailed(error.to_failure(), error.retry)
    except ToolUnknownError as error:
        return ToolExecutionUnknown(error.to_failure())
    except BaseException as error:
        if stops_the_process(error):
            raise
        # unexpected — an Exception, or SystemExit (a wrapped CLI's ``sys.exit``) or
        # another BaseException of the tool's code: that call's failure, never the
        # process's nor another Run's (RUN-ACT-1); the effect may or may not have happened
        return ToolExecutionUnknown(ToolFailure(
            ToolFailureClass.EXECUTION_FAILED, describe_error(error)))
    if limit is not None and limit.cancelled_caught:
        return ToolExecutionUnknown(ToolFailure(
            ToolFailureClass.TIMEOUT, f"no answer within {found.timeout} s"))
    return tool_output(value, max_output_bytes)


def streams(model: object) -> bool:
    """``isinstance(model, StreamingModel)`` without the runtime Protocol machinery (which
    rebuilds the protocol's attribute set on every check, ~1% of an agent-loop
    iteration): the one member ``stream`` is there and not None — what the check tests
    on an object that does not subclass the protocol (RUN-EXE-12)."""
    return getattr(model, "stream", None) is not None


def _ask(model: Model, request: ModelRequest, emit: ModelEmit) -> Awaitable[Any]:
    """The model's answer as an awaitable (no coroutine frame of its own)."""
    if streams(model):
        return cast(StreamingModel, model).stream(request, emit)
    return model.complete(request)


def _call(found: Tool, context: ToolContext | None,
          values: dict[str, Any]) -> Awaitable[Any]:
    """The tool call as an awaitable: async tools called directly (no partial: a running
    call holds only its own coroutine), sync ones in a thread."""
    fn = found.fn
    if found.is_async:
        return fn(**values) if context is None else fn(context, **values)  # type: ignore[no-any-return]
    call = (functools.partial(fn, **values) if context is None
            else functools.partial(fn, context, **values))
    return trio.to_thread.run_sync(call, abandon_on_cancel=True)


def tool_output(value: Any, max_bytes: int | None = None) -> OutcomeResult:
    """Freeze a tool's return value; a value that cannot be frozen (nesting too deep
    included) is a KNOWN ``internal`` failure, and a canonical output text longer than
    *max_bytes* bytes of UTF-8 a KNOWN ``too_large`` failure naming both sizes (the tool
    finished, its output is unusable; retry NEVER)."""
    try:
        text = value.output if isinstance(value, ToolResult) else canonical_json_text(value)
        digest_tool_output(text)
    except Exception as error:
        return ToolExecutionFailed(ToolFailure(
            ToolFailureClass.INTERNAL,
            f"the tool output cannot be frozen: {describe_error(error)}"[:500]),
            RetryDisposition.NEVER)
    if max_bytes is not None and len(text) * 4 > max_bytes:  # cheap bound, then exact
        size = len(text.encode("utf-8"))
        if size > max_bytes:
            return ToolExecutionFailed(ToolFailure(TOO_LARGE, (
                f"the tool output is {size} bytes, over the cap of {max_bytes} bytes")),
                RetryDisposition.NEVER)
    return ToolExecutionSucceeded(ToolResult(text))


def retryable(result: OutcomeResult) -> bool:
    """True when the worker may retry: a model failure whose code allows it, or a tool
    failure whose disposition is ALLOWED (RUN-EXE-11)."""
    if isinstance(result, ModelFailed):
        return result.code.retry() is RetryDisposition.ALLOWED
    if isinstance(result, ToolExecutionFailed):
        return result.retry is RetryDisposition.ALLOWED
    return False
