"""RUN-WIR-1 through the runtime's API, on the memory and SQLite stores: a Run id that no
store can carry (a control or bidirectional character, a lone surrogate — what a shell
makes of an undecodable byte — or over the byte limit) is refused at creation, is "no
such Run" on every lookup, and ``events()`` refuses it at the call instead of waiting for
a stream that can never start."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from runx_actors.executors import ScriptedModel, open_local_executor, reply
from runx_actors.protocol.errors import RunNotFoundError, ValidationError
from runx_actors.runtime import open_runtime
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store

BAD = ["a\x00b", "a\nb", "a\u202eb", "a\ud800b", "r" * 513]


async def _exercise(store: Any) -> None:
    async with open_local_executor(models={"m": ScriptedModel([reply("hi")])}) as ex, \
            open_runtime(store, ex, scope="s", model="m") as rt:
        await rt.create_run("ok", ["hi"])
        for bad in BAD:
            with pytest.raises(ValidationError):
                await rt.create_run(bad, ["hi"])
            for lookup in (rt.snapshot, rt.record, rt.answer, rt.transcript, rt.waiting,
                           rt.drive):
                with pytest.raises(RunNotFoundError):
                    await lookup(bad)
            with pytest.raises(RunNotFoundError):
                await rt.accept_input(bad, "more")
            with pytest.raises(ValidationError):
                rt.events(bad)
        assert (await rt.snapshot("ok")).position == 1  # nothing else was created


async def test_memory(tmp_path: Path) -> None:
    await _exercise(MemoryStore())


async def test_sqlite(tmp_path: Path) -> None:
    async with open_sqlite_store(str(tmp_path / "s.sqlite3")) as store:
        await _exercise(store)
