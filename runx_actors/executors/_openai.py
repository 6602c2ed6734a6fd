"""An OpenAI-compatible chat-completions model over ``httpx`` (architecture §5).

:class:`OpenAIChatModel` answers one frozen :class:`ModelRequest` with one
``POST {base_url}/chat/completions`` and returns a :class:`ModelResult` (a text reply, or
tool calls). The translation both ways is pure and deterministic:

* :func:`chat_completions_body` — request → the HTTP JSON body;
* :func:`model_result_from_chat` — the HTTP JSON answer (and the request) → ModelResult.

Request translation (the body a :class:`~runx_actors.runtime.TranscriptBuilder` builds):

* ``body.messages`` — ``system``/``user`` messages pass as they are (a non-string
  ``content`` is sent as canonical JSON text); an ``assistant`` message's ``toolCalls``
  (``[{"id", "name", "arguments"}]``, arguments a JSON value) become ``tool_calls``
  (``{"id", "type": "function", "function": {"name", "arguments": <JSON text>}}``), its
  empty content ``null``; a ``tool`` message's ``toolCallId`` becomes ``tool_call_id``
  and its ``content`` (any JSON value) or ``error`` (``{"class", "message"}``) a string:
  the string itself, else canonical JSON text (``{"error": {...}}`` for an error).
  ``callId`` (the Run's own call id) is dropped; other keys and roles pass unchanged.
* every other key of ``body`` (sampling options such as ``temperature``) is sent
  verbatim and overrides the model's ``defaults``;
* ``request.tools`` → ``tools`` (``{"type": "function", "function": {"name",
  "description"?, "parameters"}}``); with no tools, ``tool_choice`` and
  ``parallel_tool_calls`` are left out (providers refuse them without tools);
* ``"model"`` is the provider model name given to the constructor, not
  ``request.model`` (that is the executor's routing key).

Tool names: the chat-completions API accepts ``^[A-Za-z0-9_-]{1,64}$``. A name outside
that set (``fs.read``) is sent with every other character replaced by ``_`` (and cut to 64
characters) and mapped back in the answer; two tools that would be sent under one name are
refused (``bad_request``).

Failure classification (RUN-EXE-11; every failure is a :class:`ChatCompletionError`, a
:class:`ModelError`, which the LocalExecutor turns into ``ModelFailed(code, message)``):

=====================================================  ============================  =====
what happened                                          FailureCode                   retry
=====================================================  ============================  =====
HTTP 429                                               ``rate_limited``              yes
HTTP 5xx                                               ``provider_unavailable``      yes
connect/read/write/pool timeout, connection refused,   ``connection_failed``         yes
reset or closed mid-answer (``httpx`` transport error);
no complete answer within the overall deadline
(``timeout``, a provider dripping bytes included)
HTTP 401 / 403                                         ``authentication_failed``     no
HTTP 402                                               ``billing``                   no
HTTP 400, 404 and every other 4xx; a bad ``base_url``  ``bad_request``               no
a 2xx answer that is not strict JSON (NaN/Infinity,   ``malformed_result``          no
duplicate keys, lone surrogates, trailing data, not
UTF-8), nested deeper than ``MAX_ANSWER_DEPTH``, over
``max_response_bytes`` (the size is named), has no
choices, no message, a tool call without a function
name, arguments that are neither text nor an object,
or usage tokens beyond 2^53-1
a request body that is not a JSON object / messages    ``malformed_frozen_request``  no
that are not objects
=====================================================  ============================  =====

Tool-call arguments that are text but not valid JSON are *not* a malformed answer: they are
frozen with ``freeze_tool_arguments`` (spec §3.8 / RUN-MCH-2) as a JSON string, and the
tool's validation fails the call as ``invalid_arguments``, which the model then sees. A
``Retry-After`` (or ``retry-after-ms``) header is parsed into
:attr:`ChatCompletionError.retry_after` and named in the message; the LocalExecutor
waits at least that long before its next attempt (RUN-EXE-11).

Bounds (issue 9, issue 12): ``timeout`` (default :data:`DEFAULT_TIMEOUT`, 120 s) is the
overall deadline of one attempt — connect, send, and the whole answer read to its last
byte; ``read_timeout`` (default: ``timeout``) is ``httpx``'s per-phase limit (connect, and
between two bytes); ``max_response_bytes`` (default :data:`DEFAULT_MAX_RESPONSE_BYTES`,
8 MiB, decoded) caps the answer read; :data:`MAX_ANSWER_DEPTH` (64 levels of arrays and
objects) caps its nesting. An error answer (non-2xx) over the size cap is cut there and
keeps its status classification.

The API key is sent as ``Authorization: Bearer <key>`` and is never logged, never part of a
repr, and is replaced by ``***`` in every error message (a provider that echoes it back in
an error body does not leak it).
"""

from __future__ import annotations

import email.utils
import json
import math
import re
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import trio
from attrs import evolve

from ..effect import FailureCode, classify_provider_error
from ..protocol.canonical import (
    MAX_SAFE_INTEGER,
    canonical_json_text,
    freeze_tool_arguments,
    parse_json_strict,
)
from ..protocol.errors import CanonicalJSONError
from ..protocol.values import ModelRequest, ModelResult, ModelToolCall
from ._models import ModelError, call_tools, reply

if TYPE_CHECKING:
    import httpx

__all__ = [
    "DEFAULT_MAX_RESPONSE_BYTES",
    "DEFAULT_TIMEOUT",
    "MAX_ANSWER_DEPTH",
    "ChatCompletionError",
    "OpenAIChatModel",
    "chat_completions_body",
    "model_result_from_chat",
]

#: Seconds one attempt may take overall: connect, send and read the whole answer (default).
DEFAULT_TIMEOUT = 120.0
#: Bytes of (decoded) answer body read at most (8 MiB, default of ``max_response_bytes``).
DEFAULT_MAX_RESPONSE_BYTES = 8 << 20
#: Levels of nested arrays/objects an answer may have (the top object is level 1).
MAX_ANSWER_DEPTH = 64
#: Characters of a provider's error text kept in a failure message.
_ERROR_TEXT_LIMIT = 300
_NAME_OK = re.compile(r"[A-Za-z0-9_-]{1,64}")
_NAME_BAD_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_NO_TOOLS_DROP = ("tool_choice", "parallel_tool_calls")


class ChatCompletionError(ModelError):
    """A classified chat-completions failure (RUN-EXE-11).

    ``code`` is the :class:`FailureCode` (``code.retry()`` says whether the executor may
    retry), ``status`` the HTTP status when there was an answer (else ``None``),
    ``retry_after`` the seconds a ``Retry-After``/``retry-after-ms`` header asked for
    (else ``None``). The message never contains the API key.
    """

    def __init__(self, code: FailureCode, message: str = "", *, status: int | None = None,
                 retry_after: float | None = None) -> None:
        super().__init__(code, message, retry_after=retry_after)
        self.status = status

    def __reduce__(self) -> Any:
        return (_rebuild_error, (self.code, self.message, self.status, self.retry_after))


def _rebuild_error(code: FailureCode, message: str, status: int | None,
                   retry_after: float | None) -> ChatCompletionError:
    return ChatCompletionError(code, message, status=status, retry_after=retry_after)


# --------------------------------------------------------------------------- translation


def _wire_names(request: ModelRequest) -> dict[str, str]:
    """Model-facing tool name → the name sent to the provider (see module doc).

    Raises ChatCompletionError(bad_request) when two tools would be sent under one name.
    """
    names: dict[str, str] = {}
    for definition in request.tools:
        name = definition.name
        if name in names:
            continue
        names[name] = name if _NAME_OK.fullmatch(name) else (
            _NAME_BAD_CHAR.sub("_", name)[:64] or "_")
    sent: dict[str, str] = {}
    for name, wire in names.items():
        if wire in sent:
            raise ChatCompletionError(FailureCode.BAD_REQUEST, (
                f"tools {sent[wire]!r} and {name!r} would both be sent as {wire!r}"))
        sent[wire] = name
    return names


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else canonical_json_text(value)


def _malformed_request(message: str) -> ChatCompletionError:
    return ChatCompletionError(FailureCode.MALFORMED_FROZEN_REQUEST, message)


def _message(msg: Any, names: Mapping[str, str]) -> dict[str, Any]:
    if not isinstance(msg, dict):
        raise _malformed_request(f"a message is {type(msg).__name__}, not an object")
    out = {k: v for k, v in msg.items()
           if k not in ("toolCalls", "toolCallId", "callId", "error")}
    role = msg.get("role")
    if "content" in out and out["content"] is not None:
        out["content"] = _as_text(out["content"])
    if role == "assistant" and msg.get("toolCalls"):
        calls = msg["toolCalls"]
        if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
            raise _malformed_request("an assistant message's toolCalls is not a list of objects")
        out["tool_calls"] = [
            {"id": str(c.get("id", "")), "type": "function",
             "function": {"name": names.get(str(c.get("name", "")), str(c.get("name", ""))),
                          "arguments": canonical_json_text(c.get("arguments", {}))}}
            for c in calls]
        if not out.get("content"):
            out["content"] = None
    elif role == "tool":
        if "toolCallId" in msg:
            out["tool_call_id"] = str(msg["toolCallId"])
        if "error" in msg:
            out["content"] = canonical_json_text({"error": msg["error"]})
        elif out.get("content") is None:
            out["content"] = ""
    return out


def chat_completions_body(request: ModelRequest, *, model: str,
                          defaults: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """The chat-completions JSON body for *request* (pure and deterministic).

    Shape: ``{**defaults, **body-without-messages, "model": model, "messages": [...],
    "tools"?: [...]}`` as described in the module doc.

    Raises:
        ChatCompletionError: ``malformed_frozen_request`` when ``request.body`` is not a
            JSON object, its ``messages`` is not a list of objects, or a tool's
            ``parameters`` is not JSON; ``bad_request`` when two tool names collide.
    """
    try:
        body = json.loads(request.body)
    except (ValueError, RecursionError) as error:
        raise _malformed_request(f"the request body is not JSON: {error}") from None
    if not isinstance(body, dict):
        raise _malformed_request("the request body is not a JSON object")
    messages = body.pop("messages", [])
    if not isinstance(messages, list):
        raise _malformed_request("the request body's messages is not a list")
    names = _wire_names(request)
    out: dict[str, Any] = dict(defaults or {})
    out.update(body)
    out["model"] = model
    out["messages"] = [_message(m, names) for m in messages]
    if request.tools:
        tools = []
        for definition in request.tools:
            try:
                parameters = json.loads(definition.parameters)
            except (ValueError, RecursionError) as error:
                raise _malformed_request(
                    f"tool {definition.name!r} parameters are not JSON: {error}") from None
            function: dict[str, Any] = {"name": names[definition.name]}
            if definition.description:
                function["description"] = definition.description
            function["parameters"] = parameters
            tools.append({"type": "function", "function": function})
        out["tools"] = tools
    else:
        for key in _NO_TOOLS_DROP:
            out.pop(key, None)
    return out


def _malformed(message: str) -> ChatCompletionError:
    return ChatCompletionError(FailureCode.MALFORMED_RESULT, message)


def _tokens(usage: Any, key: str) -> int:
    value = usage.get(key) if isinstance(usage, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return 0
    if not math.isfinite(value) or abs(value) > MAX_SAFE_INTEGER:
        raise _malformed(f"usage {key} is {value!r}, not a token count")
    return max(0, int(value))


def _depth_over(value: Any, limit: int) -> int:
    """The nesting level (top container = 1) at which *value* first exceeds *limit*, or
    0 when it does not (iterative: never RecursionError)."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, level = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if level > limit:
            return level
        stack.extend((child, level + 1) for child in children)
    return 0


def parse_answer(body: bytes) -> Any:
    """The answer *body* parsed strictly (``parse_json_strict``: UTF-8, no duplicate keys,
    no NaN/Infinity, no lone surrogates, no trailing data) and at most
    :data:`MAX_ANSWER_DEPTH` deep.

    Raises: ChatCompletionError(``malformed_result``) naming what was wrong.
    """
    try:
        data = parse_json_strict(body)
    except CanonicalJSONError as error:
        reason = getattr(error, "reason", "") or "invalid"
        raise _malformed(f"the answer is not strict JSON ({reason}): {error}") from None
    level = _depth_over(data, MAX_ANSWER_DEPTH)
    if level:
        raise _malformed(f"the answer is nested too deep (past level {MAX_ANSWER_DEPTH})")
    return data


def _provider_error_text(data: Any) -> str:
    """The provider's own error text in *data* (``{"error": {"message"}}`` or a string)."""
    error = data.get("error") if isinstance(data, dict) else None
    if isinstance(error, dict):
        error = error.get("message", error)
    if error is None:
        return ""
    return (error if isinstance(error, str) else json.dumps(error))[:_ERROR_TEXT_LIMIT]


def _tool_call(raw: Any, back: Mapping[str, str]) -> ModelToolCall:
    if not isinstance(raw, dict):
        raise _malformed("a tool call is not an object")
    if raw.get("type", "function") != "function":
        raise _malformed(f"a tool call of type {raw.get('type')!r}, not 'function'")
    function = raw.get("function")
    if not isinstance(function, dict):
        raise _malformed("a tool call without a function object")
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise _malformed("a tool call without a function name")
    arguments = function.get("arguments")
    call_id = raw.get("id")
    try:
        if arguments is None:
            text = "{}"
        elif isinstance(arguments, str):
            text = freeze_tool_arguments(arguments)  # §3.8: non-JSON → a JSON string
        elif isinstance(arguments, dict):
            text = canonical_json_text(arguments)
        else:
            raise _malformed(f"tool call {name!r} has arguments of type "
                             f"{type(arguments).__name__}")
    except CanonicalJSONError as error:  # lone surrogates, NaN, numbers out of range
        raise _malformed(f"tool call {name!r} arguments cannot be frozen: {error}") from None
    return ModelToolCall(id=call_id if isinstance(call_id, str) else "",
                         name=back.get(name, name), arguments=text)


def model_result_from_chat(data: Any, request: ModelRequest) -> ModelResult:
    """The :class:`ModelResult` of a chat-completions answer *data* (parsed JSON) to
    *request* (pure and deterministic).

    The first choice is read: ``message.content`` (string or ``null``) → ``content``;
    ``message.tool_calls`` → ``tool_calls`` (ids kept, a missing id becomes ``call_<n>``;
    names mapped back to the model-facing names; arguments frozen per §3.8);
    ``finish_reason`` → ``finish_reason``; ``usage.prompt_tokens`` /
    ``usage.completion_tokens`` → ``Usage(input_tokens, output_tokens)`` (tokens; absent
    or non-numeric → 0). A ``message.refusal`` text is kept in ``body`` as
    ``{"refusal": text}``.

    Raises:
        ChatCompletionError: ``malformed_result`` for an answer that is not an object,
            has no ``choices``, whose first choice has no ``message`` object, whose
            content is neither a string nor null, or whose tool calls are malformed.
    """
    if not isinstance(data, dict):
        raise _malformed(f"the answer is {type(data).__name__}, not a JSON object")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        detail = _provider_error_text(data)
        raise _malformed("the answer has no choices" + (f": {detail}" if detail else ""))
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise _malformed("the first choice has no message object")
    message = choice["message"]
    content = message.get("content")
    if content is None:
        content = ""
    if not isinstance(content, str):
        raise _malformed(f"the message content is {type(content).__name__}, not a string")
    raw_calls = message.get("tool_calls") or []
    if not isinstance(raw_calls, list):
        raise _malformed("the message's tool_calls is not a list")
    back = {wire: name for name, wire in _wire_names(request).items()}
    calls = [_tool_call(raw, back) for raw in raw_calls]
    finish = choice.get("finish_reason")
    finish_reason = finish if isinstance(finish, str) else ""
    usage = data.get("usage")
    tokens = {"input_tokens": _tokens(usage, "prompt_tokens"),
              "output_tokens": _tokens(usage, "completion_tokens")}
    if calls:
        result = call_tools(*calls, content=content, finish_reason=finish_reason, **tokens)
    else:
        result = reply(content, finish_reason=finish_reason, **tokens)
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        result = evolve(result, body=canonical_json_text({"refusal": refusal}))
    return result


# --------------------------------------------------------------------------- the model


def _seconds(value: float) -> float | None:
    return max(0.0, value) if math.isfinite(value) else None


def _retry_after(headers: httpx.Headers) -> float | None:
    """Seconds asked for by ``retry-after-ms`` or ``Retry-After`` (seconds or HTTP date);
    ``None`` when absent or unreadable (``inf``/``nan`` included)."""
    raw_ms = headers.get("retry-after-ms")
    if raw_ms:
        try:
            return _seconds(float(raw_ms) / 1000.0)
        except ValueError:
            pass
    raw = headers.get("retry-after")
    if not raw:
        return None
    try:
        return _seconds(float(raw))
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(raw)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


class OpenAIChatModel:
    """A :class:`~runx_actors.executors.Model` speaking the OpenAI chat-completions API.

    * ``base_url``: the API root, e.g. ``"https://api.openai.com/v1"``; requests go to
      ``{base_url}/chat/completions``.
    * ``model``: the provider's model name sent as ``"model"`` (e.g. ``"gpt-4o-mini"``).
    * ``api_key``: sent as ``Authorization: Bearer <key>``; ``None`` sends no
      Authorization header (local servers, or a key given in ``headers``). Never shown.
    * ``timeout``: the overall deadline of one attempt in seconds (default
      :data:`DEFAULT_TIMEOUT`, 120 s): connecting, sending and reading the answer to its
      last byte must all end within it, or the attempt fails as ``connection_failed``
      (retryable: the executor's next attempt sends again). ``None``: no overall limit.
    * ``read_timeout``: ``httpx``'s per-phase limit in seconds (connect, write, pool, and
      the pause between two bytes of the answer); default ``timeout``. It also ends the
      attempt as ``connection_failed``.
    * ``max_response_bytes``: the answer body read at most, in bytes after content
      decoding (default :data:`DEFAULT_MAX_RESPONSE_BYTES`, 8 MiB); a larger 2xx answer is
      ``malformed_result`` naming the size, and is not read further.
    * ``client``: an ``httpx.AsyncClient`` to send with (connection pooling, tests with
      ``httpx.MockTransport``); the caller owns and closes it. Without one, each call
      opens and closes its own client.
    * ``headers``: extra request headers. ``defaults``: body keys sent with every request
      (``temperature``, ``max_tokens`` …), overridden by the request body's own keys.

    It runs under trio (``httpx`` reaches trio through ``anyio``/``sniffio``).
    Cancellation abandons the HTTP request and closes its connection.
    """

    def __init__(self, *, base_url: str, model: str, api_key: str | None = None,
                 timeout: float | None = DEFAULT_TIMEOUT,
                 client: httpx.AsyncClient | None = None,
                 headers: Mapping[str, str] | None = None,
                 defaults: Mapping[str, Any] | None = None,
                 read_timeout: float | None = None,
                 max_response_bytes: int = DEFAULT_MAX_RESPONSE_BYTES) -> None:
        if not base_url:
            raise ValueError("base_url must not be empty")
        if not model:
            raise ValueError("model must not be empty")
        for name, value in (("timeout", timeout), ("read_timeout", read_timeout)):
            if value is not None and not value > 0:
                raise ValueError(f"{name} must be > 0 or None")
        if isinstance(max_response_bytes, bool) or not max_response_bytes >= 1:
            raise ValueError("max_response_bytes must be >= 1")
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.timeout = timeout
        self.read_timeout = read_timeout if read_timeout is not None else timeout
        self.max_response_bytes = max_response_bytes
        self.defaults: dict[str, Any] = dict(defaults or {})
        self._api_key = api_key
        self._client = client
        self._headers = dict(headers or {})

    @property
    def url(self) -> str:
        """The endpoint: ``{base_url}/chat/completions``."""
        return f"{self.base_url}/chat/completions"

    def __repr__(self) -> str:
        key = "'***'" if self._api_key else "None"
        return (f"{type(self).__name__}(base_url={self.base_url!r}, model={self.model!r}, "
                f"api_key={key}, timeout={self.timeout!r})")

    def body(self, request: ModelRequest) -> dict[str, Any]:
        """The HTTP JSON body for *request* (:func:`chat_completions_body`)."""
        return chat_completions_body(request, model=self.model, defaults=self.defaults)

    def _redact(self, text: str) -> str:
        return text.replace(self._api_key, "***") if self._api_key else text

    def _error(self, code: FailureCode, message: str, *, status: int | None = None,
               retry_after: float | None = None) -> ChatCompletionError:
        return ChatCompletionError(code, self._redact(message), status=status,
                                   retry_after=retry_after)

    async def complete(self, request: ModelRequest) -> ModelResult:
        """POST *request* to ``{base_url}/chat/completions`` and return its ModelResult.

        The whole exchange runs under the overall deadline ``timeout``; the answer is read
        up to ``max_response_bytes`` and parsed strictly (see the module doc).

        Checkpoint: always (network I/O). Cancellation: the request is abandoned; nothing
        is returned.

        Raises:
            ChatCompletionError: classified as in the module doc (RUN-EXE-11).
        """
        try:
            content = json.dumps(self.body(request), ensure_ascii=False,
                                 separators=(",", ":"), allow_nan=False).encode("utf-8")
        except ChatCompletionError:
            raise
        except (ValueError, RecursionError) as error:  # nested too deep, not encodable
            raise self._error(FailureCode.MALFORMED_FROZEN_REQUEST, (
                f"the request cannot be sent: {type(error).__name__}: {error}")[:500]
            ) from None
        headers = {**self._headers, "Content-Type": "application/json",
                   "Accept": "application/json"}
        if self._api_key:
            headers["Authorization"] = f"Bearer {self._api_key}"
        deadline = (trio.move_on_after(self.timeout) if self.timeout is not None
                    else trio.CancelScope())
        answer: tuple[int, httpx.Headers, bytes, bool] | None = None
        with deadline:
            answer = await self._send(content, headers)
        if answer is None or deadline.cancelled_caught:
            raise self._error(FailureCode.CONNECTION_FAILED, (
                f"no complete answer from {self.url} within the overall deadline of "
                f"{self.timeout} s"))
        return self._result(*answer, request)

    async def _send(self, content: bytes, headers: dict[str, str]
                    ) -> tuple[int, httpx.Headers, bytes, bool]:
        """``(status, headers, body, cut)`` of one POST; transport errors classified."""
        import httpx

        timeout = httpx.Timeout(self.read_timeout)
        try:
            if self._client is not None:
                return await self._exchange(self._client, content, headers, timeout)
            async with httpx.AsyncClient(timeout=timeout) as client:
                return await self._exchange(client, content, headers, timeout)
        except httpx.TimeoutException as error:
            raise self._error(FailureCode.CONNECTION_FAILED, (
                f"{type(error).__name__} after {self.read_timeout} s from {self.url}")
            ) from None
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as error:
            raise self._error(FailureCode.BAD_REQUEST, (
                f"cannot send to {self.base_url!r}: {type(error).__name__}: {error}")) from None
        except (httpx.NetworkError, httpx.RemoteProtocolError, httpx.ProxyError) as error:
            raise self._error(classify_provider_error(network=True), (
                f"{type(error).__name__} talking to {self.url}: {error}")) from None
        except httpx.HTTPError as error:
            raise self._error(FailureCode.EXECUTOR_ERROR, (
                f"{type(error).__name__} talking to {self.url}: {error}")) from None

    async def _exchange(self, client: httpx.AsyncClient, content: bytes,
                        headers: dict[str, str], timeout: httpx.Timeout
                        ) -> tuple[int, httpx.Headers, bytes, bool]:
        """Stream one answer, reading at most ``max_response_bytes`` of its body. A 2xx
        answer over the cap raises ``malformed_result``; an error answer is cut there
        (``cut`` is True) and keeps its status."""
        cap = self.max_response_bytes
        async with client.stream("POST", self.url, content=content, headers=headers,
                                 timeout=timeout) as response:
            status = response.status_code
            ok = 200 <= status <= 299
            declared = response.headers.get("content-length", "")
            if ok and declared.isdigit() and int(declared) > cap:
                raise self._too_large(f"{int(declared)} bytes (Content-Length)", status)
            chunks: list[bytes] = []
            size = 0
            async for chunk in response.aiter_bytes():
                size += len(chunk)
                if size > cap:
                    if ok:
                        raise self._too_large(f"more than {cap} bytes (read {size})", status)
                    chunks.append(chunk[:len(chunk) - (size - cap)])
                    return status, response.headers, b"".join(chunks), True
                chunks.append(chunk)
            return status, response.headers, b"".join(chunks), False

    def _too_large(self, size: str, status: int) -> ChatCompletionError:
        return self._error(FailureCode.MALFORMED_RESULT, (
            f"HTTP {status} from {self.url}: the answer is {size}, over the cap of "
            f"{self.max_response_bytes} bytes (max_response_bytes)"), status=status)

    def _result(self, status: int, headers: httpx.Headers, body: bytes, cut: bool,
                request: ModelRequest) -> ModelResult:
        if not 200 <= status <= 299:
            code = classify_provider_error(status=status)
            retry_after = _retry_after(headers)
            try:
                detail = "" if cut else _provider_error_text(parse_answer(body))
            except ChatCompletionError:
                detail = ""
            if not detail:
                detail = body[:_ERROR_TEXT_LIMIT].decode("utf-8", "replace")
            message = f"HTTP {status} from {self.url}"
            if retry_after is not None:
                message += f" (retry after {retry_after:g} s)"
            if detail:
                message += f": {detail}"
            raise self._error(code, message, status=status, retry_after=retry_after)
        try:
            data = parse_answer(body)
        except ChatCompletionError as error:
            raise self._error(error.code, f"HTTP {status} from {self.url}: {error.message}",
                              status=status) from None
        try:
            return model_result_from_chat(data, request)
        except ChatCompletionError as error:
            raise self._error(error.code, error.message, status=status) from None
