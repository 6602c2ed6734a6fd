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
import os
from collections.abc import AsyncIterator, Iterable, Mapping

from ._scoped import body_errors_unwrapped
from .effect import ToolFailure, ToolFailureClass
from .executors import Model, Tool, call_tools, open_local_executor, python_tool, reply, tool_call
from .executors._local import _catalog, _model_table
from .protocol.commit import CommitStatus
from .protocol.errors import (
    ModelUnavailableError,
    OwnershipLostError,
    RunConflictError,
    RunExistsError,
    RunxError,
)
from .protocol.values import (
    ModelRef,
    ModelRequest,
    ModelResult,
    ResponsePolicy,
    RunStatus,
)
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
from .runtime._preflight import check_open_arguments
from .store.sqlite import open_sqlite_store, store_path

__all__ = [
    "open_sqlite_runtime", "open_runtime", "Runtime", "Settings", "LoopResult",
    "LoopDisposition", "Answer", "WaitingCall", "Created", "python_tool", "reply",
    "call_tools", "tool_call", "Model", "Tool", "ModelRequest", "ModelResult",
    "ResponsePolicy", "RunStatus", "CommitStatus", "Event", "EventKind", "EventSink",
    "RunxError", "OwnershipLostError", "RunConflictError", "RunExistsError",
]


@body_errors_unwrapped
@contextlib.asynccontextmanager
async def open_sqlite_runtime(path: str | os.PathLike[str], *, model: ModelRef,
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

    Every argument is checked before anything is opened or created (no store file is
    made for a refused call): *path* (:func:`~runx_actors.store.sqlite.store_path`),
    *tools* (Tools, no ref or model-facing name twice), *models* (a mapping of refs to
    models), *model*, *scope*, *system*, *settings*, *sink*.

    Raises: ValidationError (a ValueError; any of those arguments refused, e.g. two tools
    with the same ref; attribute ``argument`` or ``tool_ref``), ModelUnavailableError
    (*model* is not "" and not a key of *models*; before anything opens), the store's
    open errors (StoreOpenError, SchemaVersionError, CorruptStoreError; StoreBusyError
    when another connection holds the file's lock for more than 30 s, here or on a later
    write), OwnershipLostError (another process opened the scope meanwhile).

    An exception raised in the block comes out as itself, not in an ExceptionGroup; an error
    of a background task comes out in an ExceptionGroup (RUN-ACT-10).
    """
    store_path(path)
    tools = tuple(_catalog(tools).values())
    models = _model_table(models)
    check_open_arguments(scope=scope, settings=settings, model=model, tools=tools,
                         system=system, sink=sink)
    if model and model not in models:  # what check_offers finds, before the file is made
        raise ModelUnavailableError(
            "open_runtime: the executor refuses the default model", model=model,
            failure=ToolFailure(ToolFailureClass.PROVIDER_FAILURE,
                                f"model {model!r} is not served by this executor"))
    async with open_sqlite_store(path) as store, \
            open_local_executor(tools=tools, models=models) as executor, \
            open_runtime(store, executor, scope=scope, model=model, tools=tools,
                         system=system, settings=settings, sink=sink) as rt:
        yield rt
