"""Create and drive one durable Run on the embedded SQLite store.

The model asks for the `add` tool, reads its result, and answers. Every step is a fact
committed to `quickstart.sqlite3`; run the script twice and the second invocation finds
the finished Run: nothing is called again, the same facts are printed.
"""

import json

import trio

from runx_actors.executors import call_tools, open_local_executor, python_tool, reply, tool_call
from runx_actors.runtime import open_runtime
from runx_actors.store.sqlite import open_sqlite_store


def add(a: float, b: float) -> float:
    """Add two numbers."""
    return a + b


adder = python_tool(add, ref="math.add", name="add", parameters={
    "type": "object",
    "properties": {"a": {"type": "number"}, "b": {"type": "number"}},
    "required": ["a", "b"],
})


class TinyModel:
    """A deterministic stand-in for an LLM. Like a real model it answers from the request
    alone (the transcript the runtime rebuilt from the Run's log), so a restarted process
    asks it the same question and gets the same answer."""

    async def complete(self, request):
        messages = json.loads(request.body)["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        if not results:
            return call_tools(tool_call("add", {"a": 2, "b": 3}))  # step 1: use the tool
        if "error" in results[-1]:  # e.g. effect_unknown after a crash mid-call
            return reply(f"add failed: {results[-1]['error']['class']}")
        return reply(f"2 + 3 = {results[-1]['content']:g}")       # step 2: answer


async def main() -> None:
    async with open_sqlite_store("quickstart.sqlite3") as store, \
            open_local_executor(tools=[adder], models={"tiny": TinyModel()}) as executor, \
            open_runtime(store, executor, scope="quickstart", model="tiny",
                         tools=[adder]) as rt:
        # Idempotent: creation is committed under the id "create:run-1"; a second
        # invocation replays it (ALREADY_APPLIED) instead of creating a second Run.
        await rt.create_run("run-1", ["What is 2 + 3?"])
        result = await rt.drive("run-1")
        print(result.disposition.value, result.result.status.value)
        for fact in await rt.writer.run_facts("run-1"):
            print(" ", fact.WIRE_NAME)


if __name__ == "__main__":
    trio.run(main)
