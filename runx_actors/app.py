"""One import for the common case (APP-OPN-1): a trio app on the embedded SQLite store
with Python tools and a local model.

    from runx_actors.app import open_sqlite_runtime, python_tool, reply

    async with open_sqlite_runtime("app.sqlite3", model="m", models={"m": MyModel()},
                                   tools=[my_tool], scope="app") as rt:
        await rt.create_run("run-1", ["hello"])
        result = await rt.drive("run-1")
        print(result.answer.text if result.answer else result.reason)

The three parts stay available separately: ``runx_actors.store.sqlite.open_sqlite_store``,
``runx_actors.executors.open_local_executor`` and ``runx_actors.runtime.open_runtime``.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path

from ._scoped import body_errors_unwrapped
from .executors import Model, Tool, call_tools, open_local_executor, python_tool, reply, tool_call
from .protocol.commit import CommitStatus
from .protocol.errors import OwnershipLostError, RunConflictError, RunExistsError, RunxError
from .protocol.values import ModelRef, ModelRequest, ModelResult, ResponsePolicy, RunStatus
from .runtime import (
    Answer,
    Created,
    Event,
    EventKind,
    EventSink,
    LoopDisposition,
    LoopResult,
    Runtime,
    Settings,
    WaitingCall,
    open_runtime,
)
from .store.sqlite import open_sqlite_store

__all__ = [
    "open_sqlite_runtime", "open_runtime", "Runtime", "Settings", "LoopResult",
    "LoopDisposition", "Answer", "WaitingCall", "Created", "python_tool", "reply",
    "call_tools", "tool_call", "Model", "Tool", "ModelRequest", "ModelResult",
    "ResponsePolicy", "RunStatus", "CommitStatus", "Event", "EventKind", "EventSink",
    "RunxError", "OwnershipLostError", "RunConflictError", "RunExistsError",
]


@body_errors_unwrapped
@contextlib.asynccontextmanager
async def open_sqlite_runtime(path: str | Path, *, model: ModelRef,
                              models: Mapping[ModelRef, Model],
                              tools: Iterable[Tool] = (), scope: str = "default",
                              system: str = "", settings: Settings | None = None,
                              sink: EventSink | None = None) -> AsyncIterator[Runtime]:
    """Store, executor and runtime in one ``async with`` (APP-OPN-1).

    Opens the SQLite store at *path* (created if missing), a local executor with *tools*
    (``python_tool(...)``, ``fs_read`` …) and *models* (``{ref: Model}``: objects with
    ``async complete(request) -> ModelResult``), and :func:`open_runtime` for *scope*
    offering *model* and *tools* (with the *system* message). Yields the
    :class:`~runx_actors.runtime.Runtime`.

    Leaving the block closes the runtime, then the executor (live executions settle
    ``Cancelled``), then the store.

    Raises: ValueError (duplicate tool refs; before anything opens), the store's open
    errors (SchemaVersionError, CorruptRecordError, StoreOpenError; StoreBusyError when
    another connection holds the file's lock for more than 30 s, here or on a later
    write), OwnershipLostError (another process opened the scope meanwhile).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """
    tools = tuple(tools)
    async with open_sqlite_store(path) as store, \
            open_local_executor(tools=tools, models=dict(models)) as executor, \
            open_runtime(store, executor, scope=scope, model=model, tools=tools,
                         system=system, settings=settings, sink=sink) as rt:
        yield rt
