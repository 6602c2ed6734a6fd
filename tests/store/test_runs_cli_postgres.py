"""``runx-actors runs …`` on the PostgreSQL store (APP-INS-1): the same commands as on
SQLite, with ``--store`` a DSN. Uses the session's throwaway cluster (``conftest.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import trio
from click.testing import CliRunner

from runx_actors.cli import main
from runx_actors.executors import call_tools, open_local_executor, python_tool, reply, tool_call
from runx_actors.protocol.values import ResponsePolicy
from runx_actors.runtime import LoopDisposition, open_runtime

GATED = python_tool(lambda n: n * 2, ref="math.double", name="double",
                    policy=ResponsePolicy.APPROVAL_REQUIRED,
                    parameters={"type": "object", "properties": {"n": {"type": "number"}}})


class Model:
    async def complete(self, request: Any) -> Any:
        messages = json.loads(request.body)["messages"]
        tools = [m for m in messages if m["role"] == "tool"]
        if not tools:
            return call_tools(tool_call("double", {"n": 21}))
        return reply(f"double is {tools[-1]['content']}")


async def _build(dsn: str) -> None:
    from runx_actors.store.postgres import open_postgres_store

    async with open_postgres_store(dsn) as store, \
            open_local_executor(tools=[GATED], models={"m": Model()}) as ex, \
            open_runtime(store, ex, scope="pg", model="m", tools=[GATED]) as rt:
        await rt.create_run("p1", ["double 21"])
        waiting = await rt.drive("p1")
        assert waiting.disposition is LoopDisposition.WAITING


async def _finish(dsn: str) -> str:
    from runx_actors.store.postgres import open_postgres_store

    async with open_postgres_store(dsn) as store, \
            open_local_executor(tools=[GATED], models={"m": Model()}) as ex, \
            open_runtime(store, ex, scope="pg", model="m", tools=[GATED]) as rt:
        done = await rt.drive("p1")
        assert done.answer is not None
        return done.answer.text


def _json(*args: str) -> Any:
    out = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert out.exit_code == 0, out.output
    return json.loads(out.stdout)


def test_runs_commands_on_postgres(postgres_schema: Callable[[], str]) -> None:
    dsn = postgres_schema()
    trio.run(_build, dsn)
    rows = _json("runs", "list", "--store", dsn)["runs"]
    assert [(r["scope"], r["run_id"], r["status"], r["waiting"]) for r in rows] == [
        ("pg", "p1", "active", 1)]
    (call,) = _json("runs", "show", "p1", "--store", dsn)["waiting"]
    assert call["tool"] == "math.double" and call["arguments"] == {"n": 21}
    assert _json("runs", "approve", "p1", "--store", dsn)["status"] == "accepted"
    assert trio.run(_finish, dsn) == "double is 42"
    facts = _json("runs", "log", "p1", "--store", dsn)["facts"]
    assert facts[-1]["fact"] == "run_ended"
    assert facts[0]["epoch"] == 1 and facts[-1]["epoch"] == 3  # app, cli, app
    out = CliRunner().invoke(main, ["runs", "timeline", "p1", "--store", dsn, "--format",
                                    "json"])
    assert out.exit_code == 0, out.output
    tl = json.loads(out.stdout)
    assert {m["kind"] for m in tl["marks"]} >= {"approval", "takeover", "end"}
