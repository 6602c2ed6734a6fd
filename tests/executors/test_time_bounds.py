"""The LocalExecutor bounds time (issue 9 "nothing bounds time", "cancellation reaches the
work"; RUN-EXE-11): models are retried by default, a bounded number of times, with an
exponential, capped and optionally jittered (seeded) pause that honours ``Retry-After``;
``cancel(key)`` stops the running attempt and every later one. Time is trio's MockClock.
"""

from __future__ import annotations

from typing import Any

import pytest
import trio
from local_helpers import model_assignment, outcome_of, tool_assignment, wait_running

from runx_actors import effect
from runx_actors.executors import (
    DEFAULT_MODEL_ATTEMPTS,
    ModelError,
    ScriptedModel,
    ToolError,
    open_local_executor,
    python_tool,
    reply,
)
from runx_actors.protocol.values import ModelRequest, ModelResult

FailureCode = effect.FailureCode


class Clocked:
    """A model that records the (virtual) time of every attempt and answers from
    *turns*: a ModelError is raised, a ModelResult returned; the last turn repeats."""

    def __init__(self, *turns: ModelError | ModelResult, delay: float = 0.0) -> None:
        self.turns = turns
        self.delay = delay
        self.starts: list[float] = []

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.starts.append(trio.current_time())
        turn = self.turns[min(len(self.starts), len(self.turns)) - 1]
        if self.delay:
            await trio.sleep(self.delay)
        else:
            await trio.lowlevel.checkpoint()
        if isinstance(turn, ModelError):
            raise turn
        return turn


def limited(retry_after: float | None = None) -> ModelError:
    return ModelError(FailureCode.RATE_LIMITED, "429", retry_after=retry_after)


async def _outcome(model: Any, **options: Any) -> tuple[effect.OutcomeResult | None, float]:
    async with open_local_executor(models={"m": model}, **options) as ex:
        a = model_assignment("m")
        start = trio.current_time()
        await ex.dispatch(a)
        result = (await outcome_of(ex, a.key)).result
        return result, trio.current_time() - start


# -- bounded retries with exponential backoff ------------------------------------------------------

async def test_models_are_retried_by_default(autojump_clock: Any) -> None:
    refused = ModelError(FailureCode.CONNECTION_FAILED, "connection refused")
    model = Clocked(refused, reply("second time"))
    result, _ = await _outcome(model)
    assert result == effect.ModelSucceeded(reply("second time"))
    assert len(model.starts) == 2 and DEFAULT_MODEL_ATTEMPTS > 1


async def test_default_attempts_are_bounded(autojump_clock: Any) -> None:
    model = Clocked(ModelError(FailureCode.PROVIDER_UNAVAILABLE, "503"))
    result, _ = await _outcome(model)
    assert isinstance(result, effect.ModelFailed)
    assert result.code is FailureCode.PROVIDER_UNAVAILABLE
    assert len(model.starts) == DEFAULT_MODEL_ATTEMPTS


async def test_backoff_is_exponential_and_capped(autojump_clock: Any) -> None:
    model = Clocked(limited())
    await _outcome(model, max_attempts=6, backoff=1.0, max_backoff=5.0)
    t0 = model.starts[0]
    assert [s - t0 for s in model.starts] == pytest.approx([0, 1, 3, 7, 12, 17])


async def test_retry_after_is_honoured(autojump_clock: Any) -> None:
    model = Clocked(limited(retry_after=7.0), reply("ok"))
    result, _ = await _outcome(model, max_attempts=3, backoff=1.0)
    assert isinstance(result, effect.ModelSucceeded)
    assert model.starts[1] - model.starts[0] == pytest.approx(7.0)


async def test_a_retry_after_beyond_the_bound_stops_retrying(autojump_clock: Any) -> None:
    model = Clocked(limited(retry_after=3600.0), reply("never"))
    result, elapsed = await _outcome(model, max_attempts=5, max_retry_after=60.0)
    assert isinstance(result, effect.ModelFailed) and result.code is FailureCode.RATE_LIMITED
    assert "3600" in result.message and "max_retry_after" in result.message
    assert len(model.starts) == 1 and elapsed < 1


async def test_jitter_is_seeded_and_within_its_band(autojump_clock: Any) -> None:
    runs = []
    for seed in (7, 7, 8):
        model = Clocked(limited())
        await _outcome(model, max_attempts=5, backoff=2.0, jitter=0.5, jitter_seed=seed)
        runs.append([b - a for a, b in zip(model.starts, model.starts[1:], strict=False)])
    assert runs[0] == pytest.approx(runs[1]) and runs[0] != pytest.approx(runs[2])
    for pauses in runs:
        for n, pause in enumerate(pauses):
            base = 2.0 * 2 ** n
            assert base * 0.5 <= pause <= base


async def test_a_non_retryable_failure_is_not_retried(autojump_clock: Any) -> None:
    model = Clocked(ModelError(FailureCode.BAD_REQUEST, "400"), reply("x"))
    result, _ = await _outcome(model)
    assert isinstance(result, effect.ModelFailed) and len(model.starts) == 1


async def test_tools_are_not_retried_by_default(autojump_clock: Any) -> None:
    calls: list[int] = []

    def flaky() -> str:
        calls.append(1)
        raise ToolError("unavailable", "try later", retry=effect.RetryDisposition.ALLOWED)

    tool = python_tool(flaky, ref="flaky")
    async with open_local_executor(tools=[tool]) as ex:
        a = tool_assignment(tool)
        await ex.dispatch(a)
        assert isinstance((await outcome_of(ex, a.key)).result, effect.ToolExecutionFailed)
    assert calls == [1]
    calls.clear()
    async with open_local_executor(tools=[tool], tool_max_attempts=3, backoff=0.0) as ex:
        await ex.dispatch(a)
        await outcome_of(ex, a.key)
    assert calls == [1, 1, 1]


async def test_retry_bounds_are_checked() -> None:
    for bad in ({"max_backoff": -1}, {"jitter": 1.5}, {"jitter": -0.1},
                {"max_retry_after": -1}, {"tool_max_attempts": 0}, {"max_attempts": 0},
                {"max_backoff": float("inf")}):
        with pytest.raises(ValueError):
            async with open_local_executor(**bad):
                pass


# -- cancel reaches every later attempt ------------------------------------------------------------

async def test_cancel_during_the_backoff_pause_starts_no_further_attempt(
        autojump_clock: Any) -> None:
    model = Clocked(limited())
    async with open_local_executor(models={"m": model}, max_attempts=5, backoff=1.0) as ex:
        a = model_assignment("m")
        await ex.dispatch(a)
        while len(model.starts) < 2:  # the first retry started; now in attempt 2's pause
            await trio.sleep(0.25)
        await trio.sleep(0.5)
        await ex.cancel(a.key)
        outcome = await outcome_of(ex, a.key)
        await trio.sleep(1000)
        assert isinstance(outcome.result, effect.Cancelled)
        assert len(model.starts) == 2
        assert ex.history(a.key).count("execution_running") == 2
        assert ex.statistics().started == 2


class Swallower:
    """A hostile model: on cancellation it reports a retryable failure instead."""

    def __init__(self) -> None:
        self.starts = 0

    async def complete(self, request: ModelRequest) -> ModelResult:
        self.starts += 1
        try:
            await trio.sleep(10)
        except trio.Cancelled:
            raise ModelError(FailureCode.CONNECTION_FAILED, "swallowed") from None
        raise ModelError(FailureCode.CONNECTION_FAILED, "reset")


async def test_cancel_during_an_attempt_starts_no_further_attempt(autojump_clock: Any) -> None:
    model = Swallower()
    async with open_local_executor(models={"m": model}, max_attempts=5, backoff=0.0) as ex:
        a = model_assignment("m")
        await ex.dispatch(a)
        await wait_running(ex, a.key)
        await trio.sleep(1)
        await ex.cancel(a.key)
        outcome = await outcome_of(ex, a.key)
        await trio.sleep(1000)
    assert isinstance(outcome.result, effect.Cancelled)
    assert model.starts == 1


async def test_cancel_of_a_retrying_scripted_model(autojump_clock: Any) -> None:
    model = ScriptedModel([limited()], repeat_last=True, delay=0.5)
    async with open_local_executor(models={"m": model}, max_attempts=10, backoff=1.0) as ex:
        a = model_assignment("m")
        await ex.dispatch(a)
        await trio.sleep(2.0)
        calls = model.calls
        await ex.cancel(a.key)
        await outcome_of(ex, a.key)
        await trio.sleep(10_000)
    assert model.calls == calls < 10


# -- what the executor serves (fail fast at open) ------------------------------------------------

async def test_the_executor_says_which_models_and_tools_it_serves() -> None:
    tool = python_tool(lambda: "x", ref="t")
    async with open_local_executor(tools=[tool], models={"m": Clocked(reply("x"))}) as ex:
        assert ex.models == frozenset({"m"})
        assert ex.serves_model("m") and not ex.serves_model("mistyped")
        assert ex.tool_offers() == (tool,)
        assert [o.spec() for o in ex.tool_offers()] == [tool.spec()]
        assert ex.tool_offers()[0].definition == tool.definition


async def test_a_runtime_can_take_its_offers_from_the_executor(autojump_clock: Any) -> None:
    from runx_actors.executors import call_tools, tool_call
    from runx_actors.protocol.values import RunStatus
    from runx_actors.runtime import open_runtime
    from runx_actors.store.memory import MemoryStore

    tool = python_tool(lambda: "pong", ref="ping")
    model = ScriptedModel([call_tools(tool_call("ping")), reply("done")])
    async with open_local_executor(tools=[tool], models={"m": model}) as ex, \
            open_runtime(MemoryStore(), ex, scope="offers", model="m",
                         tools=ex.tool_offers()) as rt:
        await rt.create_run("run-1", ["go"])
        result = await rt.drive("run-1")
    assert result.result is not None and result.result.status is RunStatus.COMPLETED
    assert model.requests[0].tools == (tool.definition,)


# -- end to end: a dripping provider no longer keeps a Run ACTIVE forever ------------------------

async def test_a_run_against_a_dripping_provider_ends_failed_in_bounded_time(
        autojump_clock: Any) -> None:
    """issue 9: "a provider dripping one byte a second keeps a Run ACTIVE forever". The
    provider here drips forever; each attempt ends at the 120 s overall deadline, the
    executor makes 3 attempts (0.5 s, 1 s pauses), and the Run fails with a typed
    provider failure. Bounded by a virtual-time guard far above the expected 361.5 s."""
    import httpx

    from runx_actors.executors import OpenAIChatModel
    from runx_actors.protocol.values import RunStatus
    from runx_actors.runtime import open_runtime
    from runx_actors.store.memory import MemoryStore

    sends: list[float] = []

    async def forever() -> Any:
        while True:
            await trio.sleep(1)
            yield b" "

    async def handler(request: httpx.Request) -> httpx.Response:
        sends.append(trio.current_time())
        return httpx.Response(200, content=forever())

    store = MemoryStore()
    start = trio.current_time()
    with trio.fail_after(100_000):
        async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
            model = OpenAIChatModel(base_url="https://drip.test/v1", model="m", client=client)
            async with open_local_executor(models={"gpt": model}) as ex, \
                    open_runtime(store, ex, scope="drip", model="gpt") as rt:
                await rt.create_run("run-1", ["hello"])
                result = await rt.drive("run-1")
    assert result.result is not None and result.result.status is RunStatus.FAILED
    assert len(sends) == DEFAULT_MODEL_ATTEMPTS
    assert trio.current_time() - start == pytest.approx(3 * 120 + 0.5 + 1.0)
