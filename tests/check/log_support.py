"""Stores with real logs for the trace-validation tests (``check --log``), and doctoring.

``drive_runs(store, n)`` drives *n* Runs to the end on the real runtime (model: call the
``append`` tool twice, one of them through an approval-free direct call, then answer);
``edit_fact`` rewrites one stored fact of a SQLite store in place.
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Callable
from pathlib import Path
from typing import Any

import attrs
import trio

from runx_actors.executors import call_tools, open_local_executor, python_tool, reply, tool_call
from runx_actors.protocol._codec import decode_fact, encode_fact
from runx_actors.protocol.values import ModelRequest, ModelResult, ResponsePolicy
from runx_actors.runtime import open_runtime

SCOPE = "trace"


class TwoCalls:
    """Calls ``append`` twice then answers; for an input "guard", calls the approval-gated
    ``guarded`` tool once instead."""

    async def complete(self, request: ModelRequest) -> ModelResult:
        messages = json.loads(request.body)["messages"]
        tools = sum(1 for m in messages if m["role"] == "tool")
        await trio.lowlevel.checkpoint()
        if "guard" in json.dumps(messages[:2]):
            if tools < 1:
                return call_tools(tool_call("guarded", {"n": 0}), input_tokens=1)
        elif tools < 2:
            return call_tools(tool_call("append", {"n": tools}), input_tokens=1)
        return reply("done", input_tokens=1)


def _append(n: int) -> dict[str, int]:
    return {"n": n}


_PARAMS = {"type": "object", "properties": {"n": {"type": "number"}}}
TOOLS = [python_tool(_append, ref="append", parameters=_PARAMS),
         python_tool(_append, ref="guarded", parameters=_PARAMS,
                     policy=ResponsePolicy.APPROVAL_REQUIRED)]


async def drive_runs(store: Any, runs: int, scope: str = SCOPE) -> None:
    """*runs* Runs driven to the end, plus three more: one approved, one rejected (both
    through the approval-gated tool), one cancelled while Open after an extra input."""
    async with open_local_executor(tools=TOOLS, models={"plan": TwoCalls()}) as ex, \
            open_runtime(store, ex, scope=scope, model="plan", tools=TOOLS) as rt:
        for i in range(runs):
            await rt.create_run(f"run-{i}", ["go"])
        for i in range(runs):
            await rt.drive(f"run-{i}")
        for name in ("approved", "rejected", "cancelled"):
            await rt.create_run(name, ["guard"])
        for name in ("approved", "rejected"):
            await rt.drive(name)
        await rt.approve("approved")
        await rt.reject("rejected", reason="no")
        await rt.accept_input("cancelled", "more")
        await rt.cancel("cancelled", "req-1")
        for name in ("approved", "rejected"):
            await rt.drive(name)


def edit_fact(db: Path, kind: type[Any], change: Callable[[Any], dict[str, Any]],
              nth: int = 0) -> tuple[str, int]:
    """Rewrite the *nth* stored fact of type *kind* with ``attrs.evolve(fact, **change)``
    (re-encoded, so it still decodes); returns its (run id, position)."""
    with sqlite3.connect(db) as conn:
        rows = conn.execute("SELECT scope, stream, idx, data FROM events WHERE stream LIKE "
                            "'run/%' ORDER BY commit_seq, idx").fetchall()
        hits = [r for r in rows if isinstance(decode_fact(r[3]), kind)]
        scope, stream, idx, data = hits[nth]
        fact = decode_fact(data)
        conn.execute("UPDATE events SET data = ? WHERE scope = ? AND stream = ? AND idx = ?",
                     (encode_fact(attrs.evolve(fact, **change(fact))), scope, stream, idx))
    return stream[len("run/"):], int(idx)
