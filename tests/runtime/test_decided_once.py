"""The fused loop's commands are decided once (RUN-CMT-10, RUN-LOP-11).

The loop predicts each command of a fused chain with ``predict_commit``; the store,
finding the Run at the predicted snapshot, returns that decision instead of deciding
again. These tests run the same agent loop with the predictions and with them stripped
(the store then decides everything itself, as before RUN-CMT-10) and hold the two to
the same bytes in the store — every table of the SQLite store, every event of the memory
store — and count the decisions: one per command with predictions, two without.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest
import trio

from runx_actors.executors import open_local_executor, python_tool
from runx_actors.protocol import commit as commit_module
from runx_actors.protocol.canonical import canonical_json_text
from runx_actors.protocol.commit import CommitRequest
from runx_actors.protocol.plan import Prompt
from runx_actors.protocol.values import (
    ModelRequest,
    ModelResult,
    ModelToolCall,
    ToolScheduling,
    Usage,
)
from runx_actors.runtime import LoopDisposition, Settings, _loop, open_runtime
from runx_actors.store._sqlite_schema import TABLES
from runx_actors.store.memory import MemoryStore
from runx_actors.store.sqlite import open_sqlite_store

ITERATIONS = 6
RUNS = 3
#: One call at a time: parallel calls settle in trio's (randomised) order, which would
#: make two drives of the same Runs write different logs whatever the store does.
SEQUENTIAL = ToolScheduling("sequential")


class _Model:
    """Asks for the tool ``ITERATIONS`` times per Run (two calls every other time),
    then answers with text."""

    def __init__(self) -> None:
        self.calls: dict[str, int] = {}

    async def complete(self, request: ModelRequest) -> ModelResult:
        run = json.loads(request.body)["run"]
        n = self.calls.get(run, 0)
        self.calls[run] = n + 1
        await trio.lowlevel.checkpoint()
        if n < ITERATIONS:
            calls = tuple(ModelToolCall(id=f"c{n}-{i}", name="echo",
                                        arguments=canonical_json_text({"n": n, "i": i}))
                          for i in range(1 + n % 2))
            return ModelResult(tool_calls=calls, usage=Usage(1, 1))
        return ModelResult(content=f"done {run}", usage=Usage(1, 1))


async def _echo(n: int, i: int) -> dict[str, int]:
    return {"n": n, "i": i}


class _Builder:
    reads_pending = True

    def __init__(self, tool: Any) -> None:
        self.tool = tool

    async def build(self, hint: Any) -> Prompt:
        request = ModelRequest("m", (self.tool.definition,), canonical_json_text(
            {"run": hint.run_id, "pending": len(hint.pending)}))
        return Prompt(request=request, input_ids=tuple(i.id for i in hint.inputs),
                      tools=(self.tool.spec(),))


async def _drive(store: Any) -> None:
    tool = python_tool(_echo, ref="echo")
    async with open_local_executor(tools=[tool], models={"m": _Model()}) as ex, \
            open_runtime(store, ex, scope="s", builder=_Builder(tool),
                         settings=Settings(max_model_steps=ITERATIONS + 2,
                                           scheduling=SEQUENTIAL)) as rt:
        for i in range(RUNS):
            await rt.create_run(f"run-{i}", ["go"])
        for i in range(RUNS):
            result = await rt.drive(f"run-{i}")
            assert result.disposition is LoopDisposition.FINISHED


@pytest.fixture
def decides(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    seen: list[Any] = []
    real = commit_module.decide

    def counting(state: Any, command: Any) -> Any:
        seen.append(type(command).__name__)
        return real(state, command)

    monkeypatch.setattr(commit_module, "decide", counting)
    return seen


def _strip(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loop's predictions without the request carrying them: the slow path."""
    real = _loop.predict_commit

    def plain(snapshot: Any, request: CommitRequest) -> Any:
        predicted, decision = real(snapshot, request)
        return CommitRequest(predicted.base, predicted.envelope), decision

    monkeypatch.setattr(_loop, "predict_commit", plain)


def _memory_rows(store: MemoryStore) -> list[Any]:
    log = store.scope_log("s")
    return [(c.commit_id, c.epoch, [(e.stream, e.index, e.type, e.data) for e in c.events])
            for c in log.commits] + [sorted(log.cache.items())]


def _sqlite_rows(path: Path) -> dict[str, list[Any]]:
    conn = sqlite3.connect(path)
    try:
        return {t: sorted(conn.execute(f"SELECT * FROM {t}").fetchall())
                for t in TABLES if t != "scopes"}
    finally:
        conn.close()


@pytest.mark.parametrize("kind", ["memory", "sqlite"])
async def test_predicted_commits_write_the_same_bytes(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        decides: list[Any]) -> None:
    """The same Runs with and without the predictions on the requests: identical rows
    (commit ids, events' bytes and chain digests, heads, cache, frozen bodies), and each
    fused command decided once instead of twice."""
    rows, counts = [], []
    for stripped in (False, True):
        if stripped:
            _strip(monkeypatch)
        decides.clear()
        if kind == "memory":
            store = MemoryStore()
            await _drive(store)
            rows.append(_memory_rows(store))
        else:
            path = tmp_path / f"{stripped}.sqlite3"
            async with open_sqlite_store(str(path)) as opened:
                await _drive(opened)
            rows.append(_sqlite_rows(path))
        counts.append(len(decides))
    assert rows[0] == rows[1]
    fast, slow = counts
    # every command but each Run's first prepare/start (advance, not fused) and the
    # last settlement (a chain of one, committed alone) is fused and predicted
    assert slow - fast >= RUNS * (ITERATIONS * 4), (fast, slow)
