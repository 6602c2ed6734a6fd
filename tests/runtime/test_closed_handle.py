"""The application handle's edges (RUN-ACT-3, APP-NEW-1), found by a fresh user's tries:

* a ``Runtime`` that escaped its ``open_runtime`` block used to keep committing (a new
  Run, a CancelRun); now every method that writes raises RuntimeClosedError and the store
  is left as the block left it, while the reads still answer from the store;
* ``create_run(id, "hello")`` used to create five inputs ``h e l l o``, and ``5``,
  ``None`` or a dict were accepted as inputs; now they are refused before anything is
  frozen or written;
* ``events(run, since=-1)`` used to yield the last fact at position -1.
"""

from __future__ import annotations

from typing import Any

import pytest

from runx_actors.executors import ScriptedModel, open_local_executor, reply
from runx_actors.protocol.errors import (
    RunNotFoundError,
    RuntimeClosedError,
    ValidationError,
)
from runx_actors.protocol.values import AgentInput
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore


def _model() -> ScriptedModel:
    return ScriptedModel([reply("hi")] * 4)


async def test_a_closed_handle_writes_nothing_and_still_reads() -> None:
    store = MemoryStore()
    async with open_local_executor(models={"m": _model()}) as ex:
        async with open_runtime(store, ex, scope="s", model="m") as rt:
            await rt.create_run("r", ["hello"])
        escaped = rt
        writes: list[tuple[str, Any]] = [
            ("create_run", lambda: escaped.create_run("r2", ["x"])),
            ("accept_input", lambda: escaped.accept_input("r", "more")),
            ("cancel", lambda: escaped.cancel("r")),
            ("approve", lambda: escaped.approve("r")),
            ("reject", lambda: escaped.reject("r")),
            ("respond", lambda: escaped.respond("r", "c", {})),
            ("drive", lambda: escaped.drive("r")),
            ("start_drive", lambda: escaped.start_drive("r")),
        ]
        for name, call in writes:
            with pytest.raises(RuntimeClosedError):
                await call()
                pytest.fail(f"{name} answered on a closed runtime")
        # the reads answer what is durable
        assert (await escaped.record("r")).position == 1
        assert (await escaped.snapshot("r")).position == 1
        assert await escaped.answer("r") is None
        assert await escaped.waiting("r") == ()
        assert [m["role"] for m in await escaped.transcript("r")] == ["user"]
        history = [event async for event in escaped.events("r")]  # ends: the hub closed
        assert [e.position for e in history] == [0]
        with pytest.raises(RuntimeClosedError):
            await escaped.runtime.cancel_run("r", "cancel:r")
        # the store holds what the block left: r active at its creation, no r2
        async with open_runtime(store, ex, scope="s", model="m") as again:
            snap = await again.record("r")
            assert snap.position == 1 and snap.state.status.value == "active"
            with pytest.raises(RunNotFoundError):
                await again.record("r2")


@pytest.mark.parametrize("inputs", ["hello", b"hello", [5], [None], [{"a": 1}],
                                    ["ok", 3.5], 7])
async def test_inputs_that_are_not_texts_are_refused_before_anything_is_written(
        inputs: Any) -> None:
    store = MemoryStore()
    async with open_local_executor(models={"m": _model()}) as ex, \
            open_runtime(store, ex, scope="s", model="m") as rt:
        with pytest.raises(ValidationError):
            await rt.create_run("r", inputs)
        with pytest.raises(RunNotFoundError):
            await rt.record("r")
        assert len(store.frozen.bodies) == 0  # no body frozen either
        await rt.create_run("ok", ["fine"])
        before = len(store.frozen.bodies)
        if isinstance(inputs, str):
            return  # accept_input("ok", "hello") is one text: fine
        if not isinstance(inputs, list):
            inputs = [inputs]
        with pytest.raises(ValidationError):
            await rt.accept_input("ok", *inputs)
        assert (await rt.record("ok")).position == 1
        assert len(store.frozen.bodies) == before


async def test_texts_and_agent_inputs_are_still_accepted() -> None:
    async with open_local_executor(models={"m": _model()}) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m") as rt:
        created = await rt.create_run("r", ("one", "two"))
        assert [i.id for i in created.snapshot.state.pending_inputs] == ["r/input-0",
                                                                         "r/input-1"]
        given = AgentInput.text("mine", "three")
        result = await rt.accept_input("r", given)
        assert result.snapshot.state.pending_inputs[-1] == given
        with pytest.raises(ValidationError):
            await rt.accept_input("r")  # no input at all


async def test_a_run_id_that_is_not_text_is_a_validation_error() -> None:
    store = MemoryStore()
    async with open_local_executor(models={"m": _model()}) as ex, \
            open_runtime(store, ex, scope="s", model="m") as rt:
        for bad in (5, None, b"r"):
            with pytest.raises(ValidationError):
                await rt.create_run(bad, ["x"])  # type: ignore[arg-type]
        assert len(store.frozen.bodies) == 0


@pytest.mark.parametrize("since", [-1, -5, True, 1.0, "0"])
async def test_events_since_must_be_a_position(since: Any) -> None:
    async with open_local_executor(models={"m": _model()}) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m") as rt:
        await rt.create_run("r", ["x"])
        with pytest.raises(ValidationError):
            rt.events("r", since=since)
        stream = rt.events("r", since=1)  # a position inside the log still streams
        first = await stream.__anext__()
        assert first.position == 1
        await stream.aclose()


async def test_events_since_is_checked_for_every_stream_and_finish_has_a_real_position(
        ) -> None:
    """The verifier's find: ``events(None, since=-1)`` was not checked, and a *since*
    past the end of an ended Run gave RUN_FINISHED at position since-1, which no fact
    has."""
    async with open_local_executor(models={"m": _model()}, tools=[]) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m") as rt:
        for since in (-1, 3, True):
            with pytest.raises(ValidationError):
                rt.events(None, since=since)
        await rt.create_run("r", ["x"])
        await rt.cancel("r")
        last = (await rt.record("r")).position
        for since in (0, last, last + 1, 10**30):
            events = [e async for e in rt.events("r", since=since)]
            assert events[-1].kind.value == "run_finished"
            assert events[-1].position == last, (since, events[-1].position)


async def test_a_run_id_that_is_not_a_string_is_a_validation_error_everywhere() -> None:
    """The verifier's find: a number as the run id of a lookup or a command was a raw
    TypeError from deep inside the store; ``cancel("r", 5)`` was accepted."""
    async with open_local_executor(models={"m": _model()}) as ex, \
            open_runtime(MemoryStore(), ex, scope="s", model="m") as rt:
        await rt.create_run("r", ["x"])
        calls: list[Any] = [
            lambda: rt.snapshot(5), lambda: rt.record(5), lambda: rt.answer(5),
            lambda: rt.transcript(5), lambda: rt.waiting(5), lambda: rt.drive(5),
            lambda: rt.start_drive(5), lambda: rt.accept_input(5, "x"),
            lambda: rt.approve(None), lambda: rt.reject(5), lambda: rt.respond(5, "c", 1),
            lambda: rt.cancel(5), lambda: rt.cancel("r", 5),  # type: ignore[arg-type]
        ]
        for call in calls:
            with pytest.raises(ValidationError):
                await call()
        assert (await rt.record("r")).state.status.value == "active"  # nothing written
