"""Create and drive one durable Run on the embedded SQLite store.

The model asks for the `add` tool, reads its result, and answers. Every step is a fact
committed to `quickstart.sqlite3`; run the script twice and the second invocation finds
the finished Run: nothing is called again, the same facts are printed.
"""

import json

import trio

from runx_actors.app import call_tools, open_sqlite_runtime, python_tool, reply, tool_call


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
    # store (SQLite file) + local executor + runtime in one block; the three parts are
    # also available separately (open_sqlite_store, open_local_executor, open_runtime)
    async with open_sqlite_runtime("quickstart.sqlite3", scope="quickstart", model="tiny",
                                   models={"tiny": TinyModel()}, tools=[adder]) as rt:
        # Idempotent: creation is committed under the id "create:run-1"; a second
        # invocation replays it (created.status is ALREADY_APPLIED) instead of creating
        # a second Run; other inputs under the same id would raise RunConflictError.
        created = await rt.create_run("run-1", ["What is 2 + 3?"])
        result = await rt.drive("run-1")
        print(result.disposition.value, result.result.status.value)
        print("answer:", result.answer.text)
        async for event in rt.events("run-1"):  # the whole log, then live; ends at the end
            for fact in event.committed:
                print(" ", fact.WIRE_NAME)
        del created


if __name__ == "__main__":
    trio.run(main)
