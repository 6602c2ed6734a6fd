"""``runx-actors runs …`` on the PostgreSQL store (APP-INS-1): the same commands as on
SQLite, with ``--store`` a DSN. Uses the session's throwaway cluster (``conftest.py``)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
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


# -- a DSN that cannot be reached (RUN-CLI-2) ---------------------------------------------

DSN_COMMANDS = {
    "runs list": ["runs", "list", "--store"],
    "runs show": ["runs", "show", "p1", "--store"],
    "runs log": ["runs", "log", "p1", "--store"],
    "runs approve": ["runs", "approve", "p1", "--store"],
    "loop status": ["loop", "status", "L", "--store"],
    "store check": ["store", "check"],
}


def _with_password(dsn: str, **changes: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = {**conninfo_to_dict(dsn), "password": "s3cret", **changes}
    return make_conninfo(**params)


def _free_port() -> str:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return str(sock.getsockname()[1])


@pytest.fixture
def no_pool(monkeypatch: Any) -> None:
    """A pool would retry a refused connection until its timeout (30 s, then an untyped
    PoolTimeout, exit 70): the commands must fail before they open one."""
    import runx_actors.store.postgres as pg

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("a pool was opened for a store that cannot be reached")

    monkeypatch.setattr(pg, "make_pool", refuse)


@pytest.mark.parametrize("command", sorted(DSN_COMMANDS))
@pytest.mark.parametrize("broken", ["missing database", "refused port"])
def test_an_unreachable_dsn_fails_fast_typed_and_masked(postgres_dsn: str, no_pool: None,
                                                       command: str, broken: str) -> None:
    dsn = _with_password(postgres_dsn, **({"dbname": "missing_db"} if broken ==
                                          "missing database" else {"port": _free_port()}))
    args = [*DSN_COMMANDS[command], dsn]
    out = CliRunner().invoke(main, args, catch_exceptions=False)
    assert out.exit_code == 1, out.output
    assert "s3cret" not in out.output and "password=***" in out.stderr
    first = out.stderr.splitlines()[0]
    assert first.startswith(f"runx-actors: {command}: cannot reach the PostgreSQL store ")
    assert ("missing_db" in first) if broken == "missing database" else ("refused" in first)
    assert out.stderr.splitlines()[1].startswith("hint: check the DSN")
    as_json = CliRunner().invoke(main, [*args, "--json"], catch_exceptions=False)
    assert as_json.exit_code == 1
    doc = json.loads(as_json.stdout)
    assert doc["ok"] is False and doc["error"] == "StoreUnreachableError"
    assert doc["exit_code"] == 1 and doc["command"] == command
    assert "s3cret" not in as_json.stdout and "password=***" in doc["target"]


@pytest.mark.parametrize("command", ["runs list", "runs show", "loop status"])
def test_a_database_without_a_store_is_not_given_one(postgres_schema: Callable[[], str],
                                                    command: str) -> None:
    """A read names an empty schema: StoreMissingError (exit 1), and no table is created
    (a pool's open had created the schema's tables)."""
    import psycopg

    dsn = postgres_schema()
    out = CliRunner().invoke(main, [*DSN_COMMANDS[command], dsn], catch_exceptions=False)
    assert out.exit_code == 1, out.output
    assert "no run store in" in out.stderr and "has no runx_meta table" in out.stderr
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = "
                              "current_schema()").fetchone()
    assert tables == (0,)


def test_an_unknown_scope_on_postgres_exits_1(postgres_schema: Callable[[], str]) -> None:
    dsn = postgres_schema()
    trio.run(_build, dsn)
    out = CliRunner().invoke(main, ["runs", "list", "--store", dsn, "--scope", "nosuch"])
    assert out.exit_code == 1 and "no scope 'nosuch'" in out.stderr, out.output


def test_store_check_of_a_database_without_a_store(postgres_schema: Callable[[], str]) -> None:
    """``store check`` of a schema with none of a store's tables is StoreMissingError
    (exit 64, as a SQLite path where nothing exists; ``runs list`` says the same error,
    exit 1) with a hint — not a damaged store (``missing_table``, exit 3) — and creates
    nothing; a schema with some of the tables stays damaged."""
    import psycopg

    dsn = postgres_schema()
    out = CliRunner().invoke(main, ["store", "check", dsn, "--json"],
                             catch_exceptions=False)
    assert out.exit_code == 64, out.output
    doc = json.loads(out.stdout)
    assert doc["error"] == "StoreMissingError" and doc["exit_code"] == 64 and doc["hint"]
    assert "none of a store's tables" in doc["message"]
    first, hint = out.stderr.splitlines()
    assert first.startswith("runx-actors: store check: there is no store in ")
    assert hint == f"hint: {doc['hint']}"
    with psycopg.connect(dsn) as conn:
        tables = conn.execute("SELECT count(*) FROM pg_tables WHERE schemaname = "
                              "current_schema()").fetchone()
        assert tables == (0,)
        conn.execute("CREATE TABLE scopes (scope TEXT PRIMARY KEY)")
        conn.commit()
    out = CliRunner().invoke(main, ["store", "check", dsn, "--json"], catch_exceptions=False)
    assert out.exit_code == 3, out.output
    assert {p["reason"] for p in json.loads(out.stdout)["problems"]} == {"missing_table"}
