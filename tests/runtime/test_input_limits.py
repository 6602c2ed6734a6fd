"""Inputs are bounded (RUN-INP-2): at most MAX_INPUTS_PER_COMMAND per create_run or
accept_input, MAX_INPUTS_PER_RUN over a Run's life, and MAX_INPUT_TEXT_BYTES per text (a
20 MB input was accepted and frozen); each refusal is a ValidationError and writes
nothing."""

from __future__ import annotations

from typing import Any

import pytest

import runx_actors.runtime._app as app_module
from runx_actors import RunNotFoundError, ValidationError
from runx_actors.app import open_runtime, reply
from runx_actors.executors import ScriptedModel, open_local_executor
from runx_actors.protocol import facts as F
from runx_actors.runtime import MAX_INPUT_TEXT_BYTES, MAX_INPUTS_PER_COMMAND
from runx_actors.store.memory import MemoryStore


async def _runtime_case(body: Any) -> None:
    store = MemoryStore()
    async with open_local_executor(models={"m": ScriptedModel([reply("ok")])}) as ex, \
            open_runtime(store, ex, model="m") as rt:
        await body(rt)


async def test_create_run_takes_at_most_the_command_cap_of_inputs() -> None:
    async def body(rt: Any) -> None:
        with pytest.raises(ValidationError) as refused:
            await rt.create_run("r", ["x"] * (MAX_INPUTS_PER_COMMAND + 1))
        assert refused.value.limit == MAX_INPUTS_PER_COMMAND
        with pytest.raises(RunNotFoundError):  # nothing written
            await rt.writer.run_facts("r")
        created = await rt.create_run("r2", ["x"] * MAX_INPUTS_PER_COMMAND)
        assert created.status.name == "ACCEPTED"

    await _runtime_case(body)


async def test_a_text_over_the_byte_cap_is_refused_before_anything_is_written() -> None:
    async def body(rt: Any) -> None:
        big = "é" * (MAX_INPUT_TEXT_BYTES // 2) + "x"  # 2 bytes each: cap + 1 bytes
        with pytest.raises(ValidationError) as refused:
            await rt.create_run("r", ["ok", big])
        assert (refused.value.index, refused.value.size) == (1, MAX_INPUT_TEXT_BYTES + 1)
        with pytest.raises(RunNotFoundError):  # nothing written
            await rt.writer.run_facts("r")
        await rt.create_run("r", ["ok"])
        with pytest.raises(ValidationError):
            await rt.accept_input("r", big)
        facts = await rt.writer.run_facts("r")
        assert sum(isinstance(f, F.InputAccepted) for f in facts) == 1

    await _runtime_case(body)


async def test_accept_input_refuses_past_the_run_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(app_module, "MAX_INPUTS_PER_RUN", 5)

    async def body(rt: Any) -> None:
        await rt.create_run("r", ["a", "b", "c"])
        with pytest.raises(ValidationError) as refused:
            await rt.accept_input("r", "d", "e", "f")
        assert refused.value.limit == 5
        await rt.accept_input("r", "d", "e")  # exactly at the cap
        facts = await rt.writer.run_facts("r")
        assert sum(isinstance(f, F.InputAccepted) for f in facts) == 5

    await _runtime_case(body)
