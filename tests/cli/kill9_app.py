"""A Run whose second tool call is in flight when the process is killed (SIGKILL).

``python kill9_app.py first STORE`` prints ``tool started`` once the slow call runs and
then waits forever (the test kills it); ``python kill9_app.py second STORE`` reopens the
store: takeover fails the lost call ``effect_unknown`` and the model answers.
"""

from __future__ import annotations

import json
import sys

import trio

from runx_actors.app import (
    ModelRequest,
    ModelResult,
    call_tools,
    open_sqlite_runtime,
    python_tool,
    reply,
    tool_call,
)

PHASE, STORE = sys.argv[1], sys.argv[2]
NUMBER = {"type": "object", "properties": {"n": {"type": "number"}}}


async def slow(n: int) -> int:
    if PHASE == "first":
        print("tool started", flush=True)
        await trio.sleep_forever()
    return n


def fast(n: int) -> int:
    return n * 2


TOOLS = [python_tool(slow, ref="t.slow", name="slow", parameters=NUMBER),
         python_tool(fast, ref="t.fast", name="fast", parameters=NUMBER)]


class Model:
    async def complete(self, request: ModelRequest) -> ModelResult:
        messages = json.loads(request.body)["messages"]
        results = [m for m in messages if m["role"] == "tool"]
        if not results:
            return call_tools(tool_call("fast", {"n": 21}), tool_call("slow", {"n": 1}))
        return reply("results: " + ", ".join(
            str(m["content"]) if "content" in m else m["error"]["class"] for m in results))


async def main() -> None:
    async with open_sqlite_runtime(STORE, scope="k9", model="m", models={"m": Model()},
                                   tools=TOOLS) as rt:
        await rt.create_run("k9-run", ["go"])
        result = await rt.drive("k9-run")
        print(result.answer.text if result.answer else result.reason)


if __name__ == "__main__":
    trio.run(main)
