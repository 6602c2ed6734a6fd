"""OpenAIChatModel bounds what it reads and how long it waits (issue 9 "nothing bounds
time", issue 12 "unbounded reads" / "wrong classifications"; RUN-EXE-11).

* ``timeout`` is an OVERALL deadline per attempt: a provider dripping one byte a second
  fails the attempt as a retryable ``connection_failed`` once it passes (under trio's
  MockClock with ``httpx.MockTransport``, and over a real socket with a small deadline);
* the answer is read strictly: NaN/Infinity, duplicate keys, nesting past
  ``MAX_ANSWER_DEPTH`` → ``malformed_result`` (never ``executor_error``, never
  RecursionError);
* an answer over ``max_response_bytes`` is refused as ``malformed_result`` naming the
  size, whether or not the provider sent a Content-Length.
"""

from __future__ import annotations

import threading
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx
import pytest
import trio

from runx_actors import effect
from runx_actors.executors import ChatCompletionError, OpenAIChatModel, reply
from runx_actors.executors._openai import MAX_ANSWER_DEPTH
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.values import ModelRequest

FailureCode = effect.FailureCode
BASE = "https://llm.example.test/v1"
REQUEST = ModelRequest("gpt", (), canonical_json_text(
    {"messages": [{"role": "user", "content": "hi"}]}))
GOOD = (b'{"choices":[{"message":{"role":"assistant","content":"ok"},'
        b'"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":1}}')

Handler = Callable[[httpx.Request], Any]


@asynccontextmanager
async def served(handler: Handler, **options: Any) -> AsyncIterator[OpenAIChatModel]:
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        yield OpenAIChatModel(base_url=BASE, model="gpt-test", api_key="k", client=client,
                              **options)


def raw(body: bytes, status: int = 200, **headers: str) -> Handler:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(status, content=body,
                              headers={"Content-Type": "application/json", **headers})
    return handler


async def failure_of(handler: Handler, **options: Any) -> ChatCompletionError:
    async with served(handler, **options) as model:
        with pytest.raises(ChatCompletionError) as info:
            await model.complete(REQUEST)
    return info.value


# -- the overall deadline -----------------------------------------------------------------------

def dripping(payload: bytes, every: float = 1.0) -> Handler:
    """An answer whose body arrives one byte every *every* seconds (trio's clock)."""
    async def body() -> AsyncIterator[bytes]:
        for i in range(len(payload)):
            await trio.sleep(every)
            yield payload[i:i + 1]

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body(),
                              headers={"Content-Type": "application/json"})
    return handler


async def test_a_dripping_provider_fails_the_attempt_at_the_overall_deadline(
        autojump_clock: Any) -> None:
    start = trio.current_time()
    error = await failure_of(dripping(GOOD), timeout=30.0)
    assert error.code is FailureCode.CONNECTION_FAILED
    assert error.code.retry() is effect.RetryDisposition.ALLOWED
    assert "30" in error.message and "deadline" in error.message
    # the attempt ended at its deadline, not after the len(GOOD) s the drip would take
    assert trio.current_time() - start == pytest.approx(30.0)


async def test_an_answer_within_the_deadline_is_read(autojump_clock: Any) -> None:
    async with served(dripping(GOOD, every=0.01), timeout=30.0) as model:
        result = await model.complete(REQUEST)
    assert result == reply("ok", input_tokens=3, output_tokens=1)


async def test_a_stalled_handshake_is_bounded_too(autojump_clock: Any) -> None:
    async def handler(request: httpx.Request) -> httpx.Response:
        await trio.sleep(10_000)
        return httpx.Response(200, content=GOOD)

    error = await failure_of(handler, timeout=5.0)
    assert error.code is FailureCode.CONNECTION_FAILED


async def test_a_real_dripping_socket_is_cut_at_the_deadline(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A real HTTP server on 127.0.0.1 that sends its headers, then one byte every 50 ms
    of a body it claims is 4000 bytes: per-byte read timeouts (0.2 s) never fire; the
    overall deadline (0.5 s) does. No timing is asserted."""
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy",
                 "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    stop = threading.Event()

    class Drip(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers["Content-Length"]))
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "4000")
                self.end_headers()
                for _ in range(4000):
                    if stop.wait(0.05):
                        return
                    self.wfile.write(b" ")
                    self.wfile.flush()
            except OSError:
                pass

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Drip)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        model = OpenAIChatModel(base_url=f"http://127.0.0.1:{server.server_address[1]}/v1",
                                model="m", timeout=0.5, read_timeout=0.2)
        with pytest.raises(ChatCompletionError) as info:
            await model.complete(REQUEST)
        assert info.value.code is FailureCode.CONNECTION_FAILED
        assert "deadline" in info.value.message
    finally:
        stop.set()
        await trio.to_thread.run_sync(server.shutdown)
        server.server_close()
        thread.join(5)


def test_deadline_arguments_are_checked() -> None:
    for bad in ({"timeout": 0}, {"read_timeout": -1}, {"max_response_bytes": 0}):
        with pytest.raises(ValueError):
            OpenAIChatModel(base_url=BASE, model="m", **bad)  # type: ignore[arg-type]


# -- strict reading -----------------------------------------------------------------------------

@pytest.mark.parametrize("body", [
    b'{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":NaN}}',
    b'{"choices":[{"message":{"content":"x"}}],"usage":{"completion_tokens":Infinity}}',
    b'{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":-Infinity}}',
    b'{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":1e400}}',
    b'{"choices":[{"message":{"content":"x"}}],"extra":NaN}',
    b'{"choices":[{"message":{"content":"x"}}],"choices":[{"message":{"content":"y"}}]}',
    b'{"choices":[{"message":{"content":"x","content":"y"}}]}',
    b'{"choices":[{"message":{"content":"x"}}]} trailing',
    b'{"choices":[{"message":{"content":"\\ud800"}}]}',
    b'\xff\xfe{}',
], ids=["nan", "inf", "-inf", "overflow", "nan-elsewhere", "dup-top", "dup-inner",
        "trailing", "lone-surrogate", "not-utf8"])
async def test_non_standard_json_is_a_malformed_result(body: bytes) -> None:
    error = await failure_of(raw(body))
    assert error.code is FailureCode.MALFORMED_RESULT, error


@pytest.mark.parametrize("depth", [MAX_ANSWER_DEPTH + 1, 600, 100_000])
async def test_a_deeply_nested_answer_is_a_malformed_result(depth: int) -> None:
    nested = b"[" * depth + b"]" * depth
    body = b'{"choices":[{"message":{"content":"x"}}],"extra":' + nested + b"}"
    error = await failure_of(raw(body))
    assert error.code is FailureCode.MALFORMED_RESULT
    assert "deep" in error.message


async def test_an_answer_within_the_depth_is_read() -> None:
    depth = MAX_ANSWER_DEPTH - 2  # the top object counts as one level
    body = (b'{"choices":[{"message":{"content":"ok"}}],"extra":'
            + b"[" * depth + b"]" * depth + b"}")
    async with served(raw(body)) as model:
        assert (await model.complete(REQUEST)).content == "ok"


async def test_usage_tokens_beyond_a_safe_integer_are_malformed() -> None:
    body = b'{"choices":[{"message":{"content":"x"}}],"usage":{"prompt_tokens":1e300}}'
    assert (await failure_of(raw(body))).code is FailureCode.MALFORMED_RESULT


# -- the size cap -------------------------------------------------------------------------------

async def test_an_answer_over_the_size_cap_is_refused_naming_the_size() -> None:
    body = GOOD[:-1] + b',"pad":"' + b"x" * 5000 + b'"}'
    error = await failure_of(raw(body), max_response_bytes=4096)
    assert error.code is FailureCode.MALFORMED_RESULT
    assert "4096" in error.message and str(len(body)) in error.message


async def test_a_streamed_answer_over_the_cap_is_cut_without_reading_it_all() -> None:
    sent: list[int] = []

    async def body() -> AsyncIterator[bytes]:
        for _ in range(10_000):  # 10 MB if read to the end
            sent.append(1)
            yield b"x" * 1000
            await trio.lowlevel.checkpoint()

    async def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, content=body())  # no Content-Length: chunked

    error = await failure_of(handler, max_response_bytes=64 * 1024)
    assert error.code is FailureCode.MALFORMED_RESULT
    assert str(64 * 1024) in error.message
    assert len(sent) < 100


async def test_the_default_cap_refuses_a_64_mib_answer() -> None:
    body = b'{"choices":[{"message":{"content":"' + b"x" * (64 << 20) + b'"}}]}'
    error = await failure_of(raw(body))
    assert error.code is FailureCode.MALFORMED_RESULT
    assert "bytes" in error.message


async def test_an_error_answer_over_the_cap_keeps_its_status_classification() -> None:
    error = await failure_of(raw(b"e" * 10_000, status=503), max_response_bytes=1000)
    assert error.code is FailureCode.PROVIDER_UNAVAILABLE and error.status == 503


# -- Retry-After reaches the executor's pause --------------------------------------------------

async def test_a_429_retry_after_sets_the_pause_before_the_next_send(autojump_clock: Any
                                                                      ) -> None:
    from local_helpers import model_assignment, outcome_of

    from runx_actors.executors import open_local_executor

    sends: list[float] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sends.append(trio.current_time())
        if len(sends) == 1:
            return httpx.Response(429, json={"error": {"message": "slow down"}},
                                  headers={"Retry-After": "5"})
        return httpx.Response(200, content=GOOD)

    async with served(handler) as model, open_local_executor(models={"gpt": model}) as ex:
        a = model_assignment("gpt", REQUEST)
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
    assert isinstance(result, effect.ModelSucceeded)
    assert len(sends) == 2 and sends[1] - sends[0] == pytest.approx(5.0)


@pytest.mark.parametrize("depth", [300, 900, 5000])
async def test_a_deeply_nested_request_is_a_malformed_frozen_request(depth: int) -> None:
    nested = "[" * depth + "]" * depth
    body = '{"messages":[{"role":"user","content":"hi","extra":' + nested + "}]}"
    request = ModelRequest("gpt", (), body)
    async with served(raw(GOOD)) as model:
        try:
            result = await model.complete(request)
        except ChatCompletionError as error:
            assert error.code is FailureCode.MALFORMED_FROZEN_REQUEST
        else:
            assert result.content == "ok"  # shallow enough to be sent as it is
