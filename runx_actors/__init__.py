"""runx_actors: durable, governed AI-agent runs as trio actors.

The package root re-exports the error types eagerly (they are pure) and the runtime's
entry points lazily, so that ``import runx_actors.protocol`` never imports trio
(RUN-SCP-1). Subpackages: ``protocol`` (pure core), ``effect``, ``store``, ``runtime``,
``executors``, ``host``, ``check``, ``testing``.
"""

from __future__ import annotations

import importlib
from typing import Any

from .protocol.errors import *  # noqa: F403 - the error hierarchy is public API
from .protocol.errors import __all__ as _errors_all

__version__ = "0.1.0"

_LAZY = {
    "open_runtime": "runx_actors.runtime",
    "ActorRuntime": "runx_actors.runtime",
    "RunRuntime": "runx_actors.runtime",
    "RunHandle": "runx_actors.runtime",
    "Settings": "runx_actors.runtime",
    "LoopResult": "runx_actors.runtime",
    "LoopDisposition": "runx_actors.runtime",
    "Reconciler": "runx_actors.runtime",
    "MemoryStore": "runx_actors.store.memory",
    "open_sqlite_store": "runx_actors.store.sqlite",
}

__all__ = [*_errors_all, *_LAZY, "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runx_actors' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
