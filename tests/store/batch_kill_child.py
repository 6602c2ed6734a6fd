"""Child process of test_batch_kill9: commits batches of 2–3 commands on a SQLite file,
for ever, until it is killed.

Usage: python batch_kill_child.py DB INTENTS

It is a fork server, so that ~20 kills do not pay ~20 interpreter start-ups: it imports
everything, prints ``ready``, then per line on stdin: ``go`` forks a writer process
(printing ``pid N``), ``wait N`` reaps it (printing ``exit STATUS``), ``quit`` ends. The
server itself never starts trio or opens the database; each forked writer does both.

On start it opens the scope (fencing the killed writer) and continues from the durable
state of the active Run (or creates the next one). Before each batch it appends the
batch's command ids as one JSON line to INTENTS and fsyncs it; after the batch returned
it prints ``c``. The parent kills it at random moments and checks that every intended
batch is durable entirely or not at all (RUN-CMT-9).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

import trio

from runx_actors.protocol.canonical import sha256_digest, typed_envelope
from runx_actors.protocol.commit import CommitStatus, Snapshot
from runx_actors.protocol.state import ModelStep, Open, ToolStep
from runx_actors.protocol.values import ModelStepStatus, NewRun, ToolCallStatus
from runx_actors.store.sqlite import open_sqlite_store
from runx_actors.testing import builders as b
from runx_actors.testing.conformance import batch_requests

SCOPE = "kill"
#: A Run is cancelled after this many model steps (its log stays short).
STEPS_PER_RUN = 4


def plan(snap: Snapshot) -> list[Any]:
    """The next batch's builders for the Run at *snap* (2 or 3 commands)."""
    state, cur = snap.state, snap.state.current
    tag = f"{state.run_id}-{snap.position}"
    if isinstance(cur, Open):
        return [lambda s: b.accept_input(s.state, f"in-{tag}"),
                lambda s: b.prepare(s.state, s.position),
                lambda s: b.start_model(s.state)]
    if isinstance(cur, ModelStep):
        if cur.status is ModelStepStatus.PREPARED:  # only a torn batch leaves this
            return [lambda s: b.start_model(s.state),
                    lambda s: b.model_result(s.state, tool_calls=[("t", "{}")])]
        return [lambda s: b.model_result(s.state, tool_calls=[("t", f'{{"p":{snap.position}}}')]),
                lambda s: b.start_tool(s.state, 0)]
    assert isinstance(cur, ToolStep), cur
    if cur.calls[0].status is ToolCallStatus.PENDING:  # only a torn batch leaves this
        return [lambda s: b.start_tool(s.state, 0),
                lambda s: b.tool_result(s.state, 0, "{}")]
    if state.model_steps >= STEPS_PER_RUN:
        return [lambda s: b.tool_result(s.state, 0, f'{{"p":{snap.position}}}'),
                lambda s: b.cancel(s.state, "cancelled")]
    return [lambda s: b.tool_result(s.state, 0, f'{{"p":{snap.position}}}'),
            lambda s: b.prepare(s.state, s.position),
            lambda s: b.start_model(s.state)]


async def freeze_input(store: Any, input_id: str) -> None:
    data = typed_envelope("agent_input", {"text": input_id})
    await store.frozen.put(sha256_digest(data), data)


async def main(db: str, intents_path: str, server: int) -> None:
    intents = open(intents_path, "a")
    async with open_sqlite_store(db) as store:
        writer = await store.open(SCOPE)
        rs = writer.run_store()
        active = sorted(writer.projection())
        run_id = active[0] if active else None
        runs = len(await writer.read_stream("app/runs"))
        while True:
            if os.getppid() != server:  # the fork server is gone: never outlive it
                os._exit(2)
            if run_id is None:
                run_id = f"run-{runs}"
                await freeze_input(store, f"in-{run_id}")
                await writer.create_run(
                    NewRun(run_id), [b.agent_input(f"in-{run_id}")],
                    commit_id=f"create:{run_id}",
                    extra_events=[_note(run_id)])
                runs += 1
            snap = await rs.load(run_id)
            if isinstance(snap.state.current, Open):
                await freeze_input(store, f"in-{run_id}-{snap.position}")
            requests = batch_requests(run_id, snap, *plan(snap))
            intents.write(json.dumps([r.envelope.id for r in requests]) + "\n")
            intents.flush()
            os.fsync(intents.fileno())
            result = await rs.commit_batch(requests)
            assert result.error is None, result.error
            assert all(r.status is CommitStatus.ACCEPTED for r in result.results), result
            sys.stdout.write("c\n")
            sys.stdout.flush()
            if result.results[-1].snapshot.state.status.value != "active":
                run_id = None


def _note(run_id: str) -> Any:
    from runx_actors.store.base import ForeignEvent

    return ForeignEvent("app/runs", "app/run", run_id)


def serve(db: str, intents: str) -> None:
    print("ready", flush=True)
    for line in sys.stdin:
        command = line.split()
        if command == ["go"]:
            sys.stdout.flush()
            pid = os.fork()
            if pid == 0:  # the writer: runs until it is killed
                try:
                    trio.run(main, db, intents, os.getppid())
                finally:
                    os._exit(1)
            print(f"pid {pid}", flush=True)
        elif command[:1] == ["wait"]:
            _, status = os.waitpid(int(command[1]), 0)
            print(f"exit {status}", flush=True)
        elif command == ["quit"]:
            return


if __name__ == "__main__":
    serve(sys.argv[1], sys.argv[2])
