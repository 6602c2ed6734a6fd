"""Ours beside LangGraph and DBOS, on one agent shape, in one invocation.

The agent shape (issue 11): a model → tool loop of ``--loop`` iterations (default 20) with
instant nodes — the model answers from memory, the tool returns at once — so each figure
measures the framework's own durable bookkeeping. One *iteration* is one model call plus
one tool call (two effects).

Rows (each side's durability settings are printed with the figures):

* ``durable SQLite, 1 at a time`` — ours on the SQLite store (WAL, ``synchronous=FULL``)
  driving one Run at a time; LangGraph with ``SqliteSaver`` and ``durability="sync"``
  (a checkpoint written before the next step starts).
* ``durable SQLite, 100 concurrent`` — ours with 100 Runs driven concurrently in one trio
  program; LangGraph with ``AsyncSqliteSaver`` and 100 concurrent ``ainvoke``.
* ``memory, 1 at a time`` / ``memory, 100 concurrent`` — ours on the memory store;
  LangGraph without a checkpointer (and with ``InMemorySaver``, reported beside it).
* ``durable SQLite (WAL), 1 workflow`` — effects/s: ours (2 effects per iteration) against
  a DBOS workflow whose every model and tool call is a ``@DBOS.step`` on a SQLite system
  database.

Rounds alternate the sides (``--rounds``, default 2) and the median of each row is
printed. The peers are optional: install them with ``pip install -e '.[bench]'``; a peer
that is not installed is reported as missing and its row keeps our figure alone. This
script never asserts; it is not a test and never a CI gate. Targets: bench/RESULTS.md.

Usage: ``python bench/peers.py [--loop 20] [--loops 15] [--concurrent 100] [--rounds 2]
[--json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any, TypedDict

import trio

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from agent_loop import loop_rate

# --------------------------------------------------------------------------- ours


async def ours(kind: str, runs: int, concurrent: bool, loop: int, workdir: str,
               tag: str) -> dict[str, Any]:
    """*runs* Runs of *loop* iterations each, one at a time or all at once
    (``agent_loop.loop_rate``), with the store's durability settings."""
    result = await loop_rate(kind, runs, loop, workdir, concurrent=concurrent, tag=f"-{tag}")
    path = os.path.join(workdir, f"loop-{kind}-{runs}-{tag}.sqlite3")
    result["durability"] = "memory" if kind == "memory" else _sqlite_settings(path)
    return result


def _sqlite_settings(path: str) -> str:
    """The journal mode of *path* and the store's documented ``synchronous`` setting."""
    with sqlite3.connect(path) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return f"journal_mode={mode}, synchronous=FULL (set by the store on every connection)"


# --------------------------------------------------------------------------- LangGraph


class _LoopState(TypedDict):
    n: int


def _graph(loop: int) -> Any:
    from langgraph.graph import END, START, StateGraph

    def model(state: _LoopState) -> dict[str, int]:
        return {"n": state["n"] + 1}

    def tool(state: _LoopState) -> dict[str, int]:
        return {}

    def route(state: _LoopState) -> str:
        return "tool" if state["n"] <= loop else END

    graph = StateGraph(_LoopState)
    graph.add_node("model", model)
    graph.add_node("tool", tool)
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", route, {"tool": "tool", END: END})
    graph.add_edge("tool", "model")
    return graph


def _lg_check(result: dict[str, Any], loop: int) -> bool:
    return bool(result["n"] == loop + 1)


def langgraph_sync(runs: int, loop: int, workdir: str, saver: str, tag: str) -> dict[str, Any]:
    """*runs* sequential ``invoke`` calls; *saver* is none, memory or sqlite."""
    graph = _graph(loop)
    conn = None
    durability: str
    if saver == "sqlite":
        from langgraph.checkpoint.sqlite import SqliteSaver

        path = os.path.join(workdir, f"lg-{tag}.sqlite3")
        conn = sqlite3.connect(path, check_same_thread=False)
        app = graph.compile(checkpointer=SqliteSaver(conn))
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        sync = conn.execute("PRAGMA synchronous").fetchone()[0]
        durability = f'SqliteSaver, durability="sync", journal_mode={mode}, synchronous={sync}'
    elif saver == "memory":
        from langgraph.checkpoint.memory import InMemorySaver

        app = graph.compile(checkpointer=InMemorySaver())
        durability = 'InMemorySaver, durability="sync"'
    else:
        app = graph.compile()
        durability = "no checkpointer"
    ok = 0
    start = time.perf_counter()
    for i in range(runs):
        config = {"configurable": {"thread_id": f"{tag}-{i}"}, "recursion_limit": 4 * loop + 10}
        kwargs: dict[str, Any] = {"durability": "sync"} if saver != "none" else {}
        ok += _lg_check(app.invoke({"n": 0}, config, **kwargs), loop)
    elapsed = time.perf_counter() - start
    if conn is not None:
        conn.close()
    return {"iterations": runs * loop, "seconds": elapsed, "finished": ok,
            "durability": durability}


def langgraph_async(runs: int, loop: int, workdir: str, saver: str, tag: str) -> dict[str, Any]:
    """*runs* concurrent ``ainvoke`` calls on one asyncio loop."""
    graph = _graph(loop)

    async def go() -> dict[str, Any]:
        if saver == "sqlite":
            from langgraph.checkpoint.sqlite.aio import AsyncSqliteSaver

            path = os.path.join(workdir, f"lga-{tag}.sqlite3")
            async with AsyncSqliteSaver.from_conn_string(path) as cp:
                app = graph.compile(checkpointer=cp)
                cursor = await cp.conn.execute("PRAGMA journal_mode")
                mode = (await cursor.fetchone())[0]
                cursor = await cp.conn.execute("PRAGMA synchronous")
                sync = (await cursor.fetchone())[0]
                out = await _gather(app, runs, loop, tag, {"durability": "sync"})
                out["durability"] = (f'AsyncSqliteSaver, durability="sync", '
                                     f"journal_mode={mode}, synchronous={sync}")
                return out
        out = await _gather(graph.compile(), runs, loop, tag, {})
        out["durability"] = "no checkpointer"
        return out

    return asyncio.run(go())


async def _gather(app: Any, runs: int, loop: int, tag: str,
                  kwargs: dict[str, Any]) -> dict[str, Any]:
    configs = [{"configurable": {"thread_id": f"{tag}-{i}"}, "recursion_limit": 4 * loop + 10}
               for i in range(runs)]
    start = time.perf_counter()
    results = await asyncio.gather(*(app.ainvoke({"n": 0}, c, **kwargs) for c in configs))
    elapsed = time.perf_counter() - start
    return {"iterations": runs * loop, "seconds": elapsed,
            "finished": sum(_lg_check(r, loop) for r in results)}


# --------------------------------------------------------------------------- DBOS


def dbos_sqlite(workflows: int, loop: int, workdir: str, tag: str) -> dict[str, Any]:
    """*workflows* sequential DBOS workflows; each iteration is two ``@DBOS.step`` calls."""
    from dbos import DBOS

    path = os.path.join(workdir, f"dbos-{tag}.sqlite3")
    DBOS.destroy(destroy_registry=True)
    dbos = DBOS(config={"name": f"bench-{tag}", "system_database_url": f"sqlite:///{path}",
                        "log_level": "WARNING", "console_log_level": "WARNING"})

    @DBOS.step()
    def model_step(n: int) -> int:
        return n + 1

    @DBOS.step()
    def tool_step(n: int) -> int:
        return n

    @DBOS.workflow()
    def agent() -> int:
        n = 0
        for _ in range(loop):
            n = model_step(n)
            tool_step(n)
        return n

    DBOS.launch()
    try:
        ok = 0
        start = time.perf_counter()
        for _ in range(workflows):
            ok += agent() == loop
        elapsed = time.perf_counter() - start
    finally:
        DBOS.destroy(destroy_registry=True)
    del dbos
    with sqlite3.connect(path) as conn:
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
    return {"iterations": workflows * loop, "effects": workflows * loop * 2,
            "seconds": elapsed, "finished": ok,
            "durability": f"DBOS {_version('dbos')}, SQLite system database, "
                          f"journal_mode={mode}, synchronous=default of its SQLAlchemy engine"}


# --------------------------------------------------------------------------- driver


def _version(name: str) -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(name)
    except PackageNotFoundError:
        return "not installed"


def _have(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except ModuleNotFoundError:
        return False


Row = tuple[str, Callable[[str, str], dict[str, Any]], Callable[[str, str], dict[str, Any]] | None,
            str]


def rows(args: argparse.Namespace) -> list[Row]:
    """(row name, ours, peer or None, unit) per comparison row."""
    loop, n, c = args.loop, args.loops, args.concurrent
    lg = _have("langgraph")
    lg_sqlite = lg and _have("langgraph.checkpoint.sqlite")
    lg_async = lg_sqlite and _have("aiosqlite")
    db = _have("dbos")

    def o(kind: str, runs: int, conc: bool) -> Callable[[str, str], dict[str, Any]]:
        return lambda w, t: trio.run(ours, kind, runs, conc, loop, w, t)

    return [
        ("durable SQLite, 1 at a time", o("sqlite", n, False),
         (lambda w, t: langgraph_sync(n, loop, w, "sqlite", t)) if lg_sqlite else None, "it"),
        (f"durable SQLite, {c} concurrent", o("sqlite", c, True),
         (lambda w, t: langgraph_async(c, loop, w, "sqlite", t)) if lg_async else None, "it"),
        ("memory, 1 at a time", o("memory", n, False),
         (lambda w, t: langgraph_sync(n, loop, w, "none", t)) if lg else None, "it"),
        ("memory, 1 at a time (LangGraph InMemorySaver)", o("memory", n, False),
         (lambda w, t: langgraph_sync(n, loop, w, "memory", t)) if lg else None, "it"),
        (f"memory, {c} concurrent", o("memory", c, True),
         (lambda w, t: langgraph_async(c, loop, w, "none", t)) if lg else None, "it"),
        ("durable SQLite (WAL), 1 workflow at a time", o("sqlite", n, False),
         (lambda w, t: dbos_sqlite(n, loop, w, t)) if db else None, "effects"),
    ]


def _rate(result: dict[str, Any], unit: str) -> float:
    count = result.get("effects", result["iterations"] * 2) if unit == "effects" \
        else result["iterations"]
    return float(count / result["seconds"])


def measure(args: argparse.Namespace) -> dict[str, Any]:
    out: dict[str, Any] = {"versions": {p: _version(p) for p in (
        "runx-actors", "langgraph", "langgraph-checkpoint-sqlite", "aiosqlite", "dbos")},
        "loop": args.loop, "rows": []}
    table = rows(args)
    samples: dict[str, dict[str, list[float]]] = {name: {"ours": [], "peer": []}
                                                  for name, *_ in table}
    notes: dict[str, dict[str, str]] = {name: {} for name, *_ in table}
    with tempfile.TemporaryDirectory() as workdir:
        for r in range(args.rounds):
            for name, mine, peer, unit in table:
                sides = [("ours", mine), ("peer", peer)]
                if r % 2:  # alternate which side goes first
                    sides.reverse()
                for side, fn in sides:
                    if fn is None:
                        continue
                    result = fn(workdir, f"{side}-{r}-{len(samples[name][side])}-{abs(hash(name))}")
                    expected = result["iterations"] // args.loop
                    if result["finished"] != expected:
                        raise SystemExit(f"{name} ({side}): {result['finished']} of "
                                         f"{expected} finished; the figure would be wrong")
                    samples[name][side].append(_rate(result, unit))
                    notes[name][side] = result["durability"]
    for name, _, _peer, unit in table:
        mine = statistics.median(samples[name]["ours"])
        theirs = statistics.median(samples[name]["peer"]) if samples[name]["peer"] else None
        out["rows"].append({
            "row": name, "unit": f"{unit}/s", "ours": mine, "peer": theirs,
            "ratio": (mine / theirs) if theirs else None,
            "ours_samples": samples[name]["ours"], "peer_samples": samples[name]["peer"],
            "ours_durability": notes[name].get("ours", ""),
            "peer_durability": notes[name].get("peer", "peer not installed"),
        })
    return out


def _print(out: dict[str, Any]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    table = Table(title=f"agent loop, {out['loop']} iterations per Run/graph/workflow "
                        "(medians of alternating rounds, one invocation)")
    for col in ("row", "unit", "ours", "peer", "ratio"):
        table.add_column(col, justify="left" if col == "row" else "right")
    for r in out["rows"]:
        table.add_row(r["row"], r["unit"], f"{r['ours']:,.0f}",
                      "—" if r["peer"] is None else f"{r['peer']:,.0f}",
                      "—" if r["ratio"] is None else f"{r['ratio']:.2f}×")
    console.print(table)
    for r in out["rows"]:
        console.print(f"[bold]{r['row']}[/bold]\n  ours: {r['ours_durability']}\n"
                      f"  peer: {r['peer_durability']}")
    console.print("versions: " + ", ".join(f"{k} {v}" for k, v in out["versions"].items()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--loop", type=int, default=20, help="iterations per Run/graph/workflow")
    parser.add_argument("--loops", type=int, default=15,
                        help="Runs/graphs/workflows per one-at-a-time row")
    parser.add_argument("--concurrent", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    if min(args.loop, args.loops, args.concurrent, args.rounds) < 1:
        parser.error("every count must be at least 1")
    out = measure(args)
    if args.json:
        json.dump(out, sys.stdout, indent=2)
        print()
    else:
        _print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
