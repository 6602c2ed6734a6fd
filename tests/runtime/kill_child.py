"""Child process of test_kill9: drives N Runs on a SQLite file until all are terminal.

Usage: python kill_child.py DB SIDE_FILE N_RUNS

Prints one line ``c`` per committed loop event (the parent kills it after a random
number of lines) and ``ALL_DONE`` when every Run is terminal. The tool appends
``<run_id> <effect>`` to SIDE_FILE (fsynced) each time it starts: a duplicate line for
one effect would be a duplicate start of a non-replayable tool.
"""

from __future__ import annotations

import json
import os
import sys
import time

import trio

from runx_actors.executors import (
    ToolContext,
    call_tools,
    open_local_executor,
    python_tool,
    reply,
    tool_call,
)
from runx_actors.protocol.values import ModelRequest, ModelResult, RunStatus, ToolReplay
from runx_actors.runtime import LoopDisposition, open_runtime
from runx_actors.runtime._events import Event, EventKind
from runx_actors.store.sqlite import open_sqlite_store

TOOL_CALLS_PER_RUN = 2


class PlanModel:
    """Deterministic from the request alone: call ``append`` until the transcript holds
    TOOL_CALLS_PER_RUN tool messages (results or failures), then answer."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        messages = json.loads(request.body)["messages"]
        tool_messages = sum(1 for m in messages if m["role"] == "tool")
        await trio.lowlevel.checkpoint()
        if tool_messages < TOOL_CALLS_PER_RUN:
            return call_tools(tool_call("append", {"n": tool_messages}), input_tokens=1)
        return reply("done", input_tokens=1)


class LineSink:
    def emit(self, event: Event) -> None:
        if event.kind is EventKind.AGENT_COMMITTED:
            sys.stdout.write("c\n")
            sys.stdout.flush()


def make_tool(side_file: str) -> object:
    def append(context: ToolContext, n: int) -> dict[str, int]:
        with open(side_file, "a") as f:
            f.write(f"{context.key.run_id} {context.key.effect}\n")
            f.flush()
            os.fsync(f.fileno())
        time.sleep(0.05)  # a tool that takes a while: kills land mid-execution too
        return {"n": n}

    return python_tool(append, ref="append", context=True, replay=ToolReplay.NEVER,
                       parameters={"type": "object", "properties": {"n": {"type": "number"}}})


async def main(db: str, side_file: str, runs: int) -> None:
    tool = make_tool(side_file)
    async with open_sqlite_store(db) as store, \
            open_local_executor(tools=[tool], models={"plan": PlanModel()}) as ex, \
            open_runtime(store, ex, scope="kill", model="plan", tools=[tool],
                         sink=LineSink()) as rt:
        for i in range(runs):
            await rt.create_run(f"run-{i}", ["go"])
        pending = [f"run-{i}" for i in range(runs)]
        while pending:
            results: dict[str, LoopDisposition] = {}

            async def one(run_id: str, results: dict[str, LoopDisposition] = results) -> None:
                results[run_id] = (await rt.drive(run_id)).disposition

            async with trio.open_nursery() as nursery:
                for run_id in pending:
                    nursery.start_soon(one, run_id)
            pending = [r for r, d in results.items() if d is not LoopDisposition.FINISHED]
            for run_id in pending:  # nothing should be left waiting: say so loudly
                snap = await rt.snapshot(run_id)
                assert snap.state.status is RunStatus.ACTIVE, snap
                raise SystemExit(f"run {run_id} waits: {results[run_id]}")
    print("ALL_DONE", flush=True)


if __name__ == "__main__":
    trio.run(main, sys.argv[1], sys.argv[2], int(sys.argv[3]))
