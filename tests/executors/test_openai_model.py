"""OpenAIChatModel: the OpenAI-compatible chat-completions model over httpx (architecture §5;
RUN-EXE-11 failure classification, §3.8 tool-argument freezing).

Most tests serve the API in-process with ``httpx.MockTransport`` (a handler that checks the
request and returns a canned answer); one test talks to a real HTTP server on 127.0.0.1
through a socket, under trio.
"""

from __future__ import annotations

import json
import pickle
import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trio
from local_helpers import model_assignment, outcome_of

from runx_actors import effect
from runx_actors.executors import (
    ChatCompletionError,
    OpenAIChatModel,
    call_tools,
    chat_completions_body,
    model_result_from_chat,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.values import ModelRequest, ModelResult, RunStatus, ToolDefinition
from runx_actors.runtime import LoopDisposition, open_runtime
from runx_actors.store.memory import MemoryStore

FailureCode = effect.FailureCode
KEY = "sk-test-0123456789abcdefSECRET"
BASE = "https://llm.example.test/v1"
URL = BASE + "/chat/completions"


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


ADD = python_tool(add, ref="math.add", name="math.add", description="Add two numbers.",
                  parameters={"type": "object",
                              "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
                              "required": ["a", "b"]})
ADD_SCHEMA = {"type": "object", "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
              "required": ["a", "b"]}
ADD_WIRE = {"type": "function", "function": {"name": "math_add",
                                             "description": "Add two numbers.",
                                             "parameters": ADD_SCHEMA}}


def request_of(messages: list[dict[str, Any]], *, tools: tuple[ToolDefinition, ...] = (
        ADD.definition,), **options: Any) -> ModelRequest:
    return ModelRequest("gpt", tools, canonical_json_text({"messages": messages, **options}))


USER_ONLY = request_of([{"role": "user", "content": "What is 2 + 3?"}])


def completion(message: dict[str, Any], *, finish: str | None = "stop",
               usage: dict[str, Any] | None = None) -> dict[str, Any]:
    """A chat-completions answer with one choice."""
    body: dict[str, Any] = {"id": "chatcmpl-1", "object": "chat.completion",
                            "choices": [{"index": 0, "message": {"role": "assistant",
                                                                 **message},
                                         "finish_reason": finish}]}
    if usage is not None:
        body["usage"] = usage
    return body


Handler = Callable[[httpx.Request], httpx.Response]


@asynccontextmanager
async def served(handler: Handler, **options: Any) -> AsyncIterator[OpenAIChatModel]:
    """An OpenAIChatModel whose HTTP client is served by *handler* (no socket)."""
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        yield OpenAIChatModel(base_url=BASE, model="gpt-test", api_key=KEY, client=client,
                              **options)


def answer(status: int, body: Any = None, **headers: str) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, json=body, headers=headers)

    return handler


async def failure_of(handler: Handler, request: ModelRequest = USER_ONLY) -> ChatCompletionError:
    async with served(handler) as model:
        with pytest.raises(ChatCompletionError) as info:
            await model.complete(request)
    return info.value


# -- request translation: a pure function ----------------------------------------------------

TRANSCRIPT: list[dict[str, Any]] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "What is 2 + 3?"},
    {"role": "assistant", "content": "",
     "toolCalls": [{"id": "call_A", "name": "math.add", "arguments": {"a": 2, "b": 3}},
                   {"id": "call_B", "name": "other", "arguments": "not json"}]},
    {"role": "tool", "toolCallId": "call_A", "callId": "run-call-1", "content": 5},
    {"role": "tool", "toolCallId": "call_B", "callId": "run-call-2",
     "error": {"class": "tool_lookup_failed", "message": "no such tool"}},
    {"role": "tool", "toolCallId": "call_C", "callId": "run-call-3", "content": {"k": [1]}},
    {"role": "assistant", "content": "2 + 3 = 5"},
]


def test_request_body_translation_is_pure_and_deterministic() -> None:
    request = request_of(TRANSCRIPT, temperature=0, tool_choice="auto")
    before = request.body
    body = chat_completions_body(request, model="gpt-test",
                                 defaults={"temperature": 1, "max_tokens": 64})
    assert body == {
        "temperature": 0,  # the request's own option wins over the default
        "max_tokens": 64,
        "tool_choice": "auto",
        "model": "gpt-test",
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "What is 2 + 3?"},
            {"role": "assistant", "content": None, "tool_calls": [
                {"id": "call_A", "type": "function",
                 "function": {"name": "math_add", "arguments": '{"a":2,"b":3}'}},
                {"id": "call_B", "type": "function",
                 "function": {"name": "other", "arguments": '"not json"'}}]},
            {"role": "tool", "tool_call_id": "call_A", "content": "5"},
            {"role": "tool", "tool_call_id": "call_B",
             "content": '{"error":{"class":"tool_lookup_failed","message":"no such tool"}}'},
            {"role": "tool", "tool_call_id": "call_C", "content": '{"k":[1]}'},
            {"role": "assistant", "content": "2 + 3 = 5"},
        ],
        "tools": [ADD_WIRE],
    }
    again = chat_completions_body(request, model="gpt-test",
                                  defaults={"temperature": 1, "max_tokens": 64})
    assert json.dumps(again) == json.dumps(body) and request.body == before


def test_without_tools_no_tool_options_are_sent() -> None:
    request = request_of([{"role": "user", "content": "hi"}], tools=(),
                         tool_choice="required", parallel_tool_calls=False)
    assert chat_completions_body(request, model="m") == {
        "model": "m", "messages": [{"role": "user", "content": "hi"}]}


def test_tool_names_that_would_collide_are_refused() -> None:
    request = ModelRequest("gpt", (ToolDefinition("fs.read"), ToolDefinition("fs_read")))
    with pytest.raises(ChatCompletionError) as info:
        chat_completions_body(request, model="m")
    assert info.value.code is FailureCode.BAD_REQUEST


@pytest.mark.parametrize("body", ['[]', '{"messages": {}}', '{"messages": ["hi"]}'])
def test_a_request_body_that_cannot_be_translated_is_malformed(body: str) -> None:
    with pytest.raises(ChatCompletionError) as info:
        chat_completions_body(ModelRequest("gpt", (), body), model="m")
    assert info.value.code is FailureCode.MALFORMED_FROZEN_REQUEST


# -- answers ------------------------------------------------------------------------------------

async def test_text_reply_over_http_under_trio() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        trio.lowlevel.current_task()  # raises RuntimeError unless called inside trio
        seen.append(request)
        return httpx.Response(200, json=completion(
            {"content": "It is 5."},
            usage={"prompt_tokens": 17, "completion_tokens": 4, "total_tokens": 21}))

    async with served(handler, defaults={"temperature": 0}) as model:
        result = await model.complete(USER_ONLY)

    assert result == reply("It is 5.", input_tokens=17, output_tokens=4, finish_reason="stop")
    (request,) = seen
    assert request.method == "POST" and str(request.url) == URL
    assert request.headers["authorization"] == f"Bearer {KEY}"
    assert request.headers["content-type"] == "application/json"
    assert json.loads(request.content) == {
        "temperature": 0, "model": "gpt-test",
        "messages": [{"role": "user", "content": "What is 2 + 3?"}], "tools": [ADD_WIRE]}


async def test_two_parallel_tool_calls_become_a_model_result_with_calls() -> None:
    message = {"content": None, "tool_calls": [
        {"id": "call_A", "type": "function",
         "function": {"name": "math_add", "arguments": '{"a": 2, "b": 3}'}},
        {"id": "call_B", "type": "function",
         "function": {"name": "math_add", "arguments": '{"a": 10, "b": -1}'}}]}
    async with served(answer(200, completion(message, finish="tool_calls", usage={
            "prompt_tokens": 30, "completion_tokens": 12}))) as model:
        result = await model.complete(USER_ONLY)

    assert result == call_tools(
        tool_call("math.add", {"a": 2, "b": 3}, id="call_A"),
        tool_call("math.add", {"a": 10, "b": -1}, id="call_B"),
        input_tokens=30, output_tokens=12)
    assert [c.name for c in result.tool_calls] == ["math.add", "math.add"]  # mapped back


def test_answer_translation_details() -> None:
    data = completion({"content": None, "refusal": "I cannot help with that.",
                       "tool_calls": [
                           {"type": "function", "function": {"name": "math_add",
                                                             "arguments": '{"a": 1'}},
                           {"id": "x", "function": {"name": "unknown.tool"}}]},
                      finish=None)
    result = model_result_from_chat(data, USER_ONLY)
    assert result == ModelResult(
        tool_calls=(
            # §3.8: text that is not JSON is frozen as a JSON string (the tool's validation
            # then fails the call as invalid_arguments); a missing id is numbered
            tool_call("math.add", '{"a": 1', id="call_1"),
            tool_call("unknown.tool", None, id="x")),
        body='{"refusal":"I cannot help with that."}')
    assert result.tool_calls[0].arguments == json.dumps('{"a": 1')


# -- failure classification (RUN-EXE-11) --------------------------------------------------------

@pytest.mark.parametrize(("status", "code"), [
    (429, FailureCode.RATE_LIMITED),
    (500, FailureCode.PROVIDER_UNAVAILABLE),
    (502, FailureCode.PROVIDER_UNAVAILABLE),
    (503, FailureCode.PROVIDER_UNAVAILABLE),
    (400, FailureCode.BAD_REQUEST),
    (401, FailureCode.AUTHENTICATION_FAILED),
    (402, FailureCode.BILLING),
    (403, FailureCode.AUTHENTICATION_FAILED),
    (404, FailureCode.BAD_REQUEST),
    (422, FailureCode.BAD_REQUEST),
])
async def test_http_status_is_classified(status: int, code: FailureCode) -> None:
    error = await failure_of(answer(status, {"error": {"message": "nope", "type": "x"}}))
    assert error.code is code and error.status == status
    retryable = status == 429 or status >= 500
    assert error.code.retry() is (effect.RetryDisposition.ALLOWED if retryable
                                  else effect.RetryDisposition.NEVER)
    assert f"HTTP {status}" in error.message and "nope" in error.message


@pytest.mark.parametrize(("headers", "seconds"), [
    ({"Retry-After": "7"}, 7.0),
    ({"retry-after-ms": "1500", "Retry-After": "2"}, 1.5),
    ({}, None),
])
async def test_retry_after_is_reported(headers: dict[str, str], seconds: float | None) -> None:
    error = await failure_of(answer(429, {"error": {"message": "slow down"}}, **headers))
    assert error.code is FailureCode.RATE_LIMITED and error.retry_after == seconds
    assert ("retry after" in error.message) is (seconds is not None)


@pytest.mark.parametrize("exc", [httpx.ConnectTimeout, httpx.ReadTimeout, httpx.WriteTimeout,
                                 httpx.PoolTimeout, httpx.ConnectError, httpx.ReadError,
                                 httpx.RemoteProtocolError])
async def test_transport_failures_are_retryable_connection_failures(
        exc: type[httpx.TransportError]) -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise exc("boom", request=request)

    error = await failure_of(handler)
    assert error.code is FailureCode.CONNECTION_FAILED
    assert error.code.retry() is effect.RetryDisposition.ALLOWED and error.status is None


async def test_an_unusable_base_url_is_a_bad_request() -> None:
    model = OpenAIChatModel(base_url="ftp://llm.example.test/v1", model="m")
    with pytest.raises(ChatCompletionError) as info:
        await model.complete(USER_ONLY)
    assert info.value.code is FailureCode.BAD_REQUEST


def _raw(status: int, content: bytes) -> Handler:
    return lambda request: httpx.Response(status, content=content)


@pytest.mark.parametrize("handler", [
    _raw(200, b"<html>gateway</html>"),
    _raw(200, b"\xff\xfe not utf-8"),
    answer(200, ["not", "an", "object"]),
    answer(200, {}),
    answer(200, {"choices": []}),
    answer(200, {"error": {"message": "upstream overloaded"}}),
    answer(200, {"choices": [{"index": 0}]}),
    answer(200, completion({"content": 5})),
    answer(200, completion({"tool_calls": "math_add"})),
    answer(200, completion({"tool_calls": [{"id": "c", "type": "function"}]})),
    answer(200, completion({"tool_calls": [{"id": "c", "function": {"arguments": "{}"}}]})),
    answer(200, completion({"tool_calls": [{"id": "c", "function": {"name": "math_add",
                                                                     "arguments": 42}}]})),
    answer(200, completion({"tool_calls": [{"id": "c", "type": "retrieval",
                                            "function": {"name": "math_add"}}]})),
], ids=["html", "not-utf8", "array", "no-choices", "empty-choices", "error-200",
        "no-message", "content-number", "tool-calls-not-list", "no-function", "no-name",
        "arguments-number", "not-function-type"])
async def test_an_invalid_answer_is_a_malformed_result(handler: Handler) -> None:
    error = await failure_of(handler)
    assert error.code is FailureCode.MALFORMED_RESULT and error.status == 200
    assert error.code.retry() is effect.RetryDisposition.NEVER


async def test_the_api_key_is_sent_but_never_shown() -> None:
    seen: list[str] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["authorization"])
        return httpx.Response(401, json={"error": {
            "message": f"Incorrect API key provided: {KEY}.", "code": "invalid_api_key"}})

    error = await failure_of(handler)
    assert seen == [f"Bearer {KEY}"]
    assert error.code is FailureCode.AUTHENTICATION_FAILED
    assert "Incorrect API key provided: ***" in error.message
    copy = pickle.loads(pickle.dumps(error))
    assert (copy.code, copy.message, copy.status) == (error.code, error.message, 401)
    model = OpenAIChatModel(base_url=BASE, model="gpt-test", api_key=KEY)
    for text in (str(error), repr(error), error.message, str(copy), repr(model), str(model)):
        assert KEY not in text
    assert "api_key='***'" in repr(model)


async def test_without_an_api_key_no_authorization_is_sent() -> None:
    seen: list[httpx.Headers] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers)
        return httpx.Response(200, json=completion({"content": "ok"}))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        model = OpenAIChatModel(base_url=BASE + "/", model="local", client=client,
                                headers={"X-Org": "acme"})
        assert await model.complete(USER_ONLY) == reply("ok")
    assert "authorization" not in seen[0] and seen[0]["x-org"] == "acme"


# -- inside the LocalExecutor and a whole Run ---------------------------------------------------

async def test_executor_retries_retryable_failures_only() -> None:
    statuses = {"flaky": [503, 200], "denied": [401, 200]}
    calls = {"flaky": 0, "denied": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        name = request.url.path.split("/")[1]
        status = statuses[name][calls[name]]
        calls[name] += 1
        if status != 200:
            return httpx.Response(status, json={"error": {"message": f"bad key {KEY}"}})
        return httpx.Response(200, json=completion({"content": "recovered"}))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        models = {name: OpenAIChatModel(base_url=f"https://h.test/{name}/v1", model="m",
                                        api_key=KEY, client=client) for name in statuses}
        async with open_local_executor(models=models, max_attempts=3, backoff=0.0) as ex:
            flaky = model_assignment("flaky", USER_ONLY, effect_id="flaky")
            denied = model_assignment("denied", USER_ONLY, effect_id="denied")
            await ex.dispatch(flaky)
            await ex.dispatch(denied)
            ok = (await outcome_of(ex, flaky.key)).result
            refused = (await outcome_of(ex, denied.key)).result

    assert ok == effect.ModelSucceeded(reply("recovered"))
    assert isinstance(refused, effect.ModelFailed)
    assert refused.code is FailureCode.AUTHENTICATION_FAILED and KEY not in refused.message
    assert calls == {"flaky": 2, "denied": 1}


async def test_a_run_calls_a_python_tool_through_the_openai_model() -> None:
    bodies: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["authorization"] == f"Bearer {KEY}"
        body = json.loads(request.content)
        bodies.append(body)
        if not any(m["role"] == "tool" for m in body["messages"]):
            return httpx.Response(200, json=completion({"content": None, "tool_calls": [
                {"id": "call_add", "type": "function",
                 "function": {"name": "math_add", "arguments": '{"a": 2, "b": 3}'}}]},
                finish="tool_calls", usage={"prompt_tokens": 20, "completion_tokens": 5}))
        tool_message = body["messages"][-1]
        return httpx.Response(200, json=completion(
            {"content": f"2 + 3 = {tool_message['content']}"},
            usage={"prompt_tokens": 40, "completion_tokens": 7}))

    store = MemoryStore()
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        model = OpenAIChatModel(base_url=BASE, model="gpt-test", api_key=KEY, client=client)
        async with open_local_executor(tools=[ADD], models={"gpt": model}) as executor, \
                open_runtime(store, executor, scope="openai", model="gpt", tools=[ADD],
                             system="Use tools.") as rt:
            await rt.create_run("run-1", ["What is 2 + 3?"])
            result = await rt.drive("run-1")
            facts = [f.WIRE_NAME for f in await rt.writer.run_facts("run-1")]
            transcript = await rt.builder.messages("run-1")

    assert result.disposition is LoopDisposition.FINISHED
    assert result.result is not None and result.result.status is RunStatus.COMPLETED
    assert result.result.usage.total == 20 + 5 + 40 + 7
    assert facts == [
        "run_created", "input_accepted", "model_step_prepared", "model_step_started",
        "model_step_completed", "tool_step_opened", "tool_call_started",
        "tool_call_completed", "model_step_prepared", "model_step_started",
        "model_step_completed", "run_ended"]
    assert len(bodies) == 2 and all(b["tools"] == [ADD_WIRE] for b in bodies)
    assert bodies[0]["messages"] == [{"role": "system", "content": "Use tools."},
                                     {"role": "user", "content": "What is 2 + 3?"}]
    assert bodies[1]["messages"][2:] == [
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "call_add", "type": "function",
             "function": {"name": "math_add", "arguments": '{"a":2,"b":3}'}}]},
        {"role": "tool", "tool_call_id": "call_add", "content": "5"}]
    assert transcript[-1] == {"role": "assistant", "content": "2 + 3 = 5"}


# -- a real socket ------------------------------------------------------------------------------

async def test_real_local_http_server_under_trio(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    received: list[tuple[str, str, dict[str, Any]]] = []
    release = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            data = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            received.append((self.path, self.headers.get("Authorization", ""), data))
            if self.path.startswith("/stall/"):
                release.wait(10)  # answer only after the client has given up
            payload = json.dumps(completion({"content": "over a socket"})).encode()
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        root = f"http://127.0.0.1:{server.server_address[1]}"
        model = OpenAIChatModel(base_url=root + "/v1", model="gpt-test", api_key=KEY)
        result = await model.complete(USER_ONLY)
        assert result == reply("over a socket")
        stalled = OpenAIChatModel(base_url=root + "/stall/v1", model="gpt-test",
                                  api_key=KEY, timeout=0.3)
        with pytest.raises(ChatCompletionError) as info:
            await stalled.complete(USER_ONLY)
        assert info.value.code is FailureCode.CONNECTION_FAILED  # a read timeout
    finally:
        release.set()
        await trio.to_thread.run_sync(server.shutdown)
        server.server_close()
        thread.join(5)
    assert [(path, auth) for path, auth, _ in received] == [
        ("/v1/chat/completions", f"Bearer {KEY}"),
        ("/stall/v1/chat/completions", f"Bearer {KEY}")]
    assert received[0][2]["messages"] == [{"role": "user", "content": "What is 2 + 3?"}]
