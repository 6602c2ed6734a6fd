"""runx_actors: durable, governed AI-agent runs as trio actors.

The package root imports nothing eagerly: the error types (``runx_actors.protocol.errors``)
and the runtime's entry points are loaded on first use, so that ``import runx_actors``
is instant (the ``runx-actors`` command handles a Ctrl-C from its first line on:
``runx_actors._entry``) and ``import runx_actors.protocol`` never imports trio
(RUN-SCP-1). Subpackages: ``protocol`` (pure core), ``effect``, ``store``, ``runtime``,
``executors``, ``host``, ``check``, ``testing``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # what a type checker sees: the error hierarchy, eagerly
    from .protocol.errors import *  # noqa: F403 - the error hierarchy is public API

__version__ = "0.1.0"

_ERRORS = "runx_actors.protocol.errors"
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


def _errors_all() -> list[str]:
    names: list[str] = importlib.import_module(_ERRORS).__all__
    return names


def __getattr__(name: str) -> Any:
    if name == "__all__":  # ``from runx_actors import *``, computed on first use
        value: Any = [*_errors_all(), *_LAZY, "__version__"]
    elif name in _LAZY:
        value = getattr(importlib.import_module(_LAZY[name]), name)
    elif not name.startswith("__") and name in _errors_all():
        value = getattr(importlib.import_module(_ERRORS), name)
    else:
        raise AttributeError(f"module 'runx_actors' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__getattr__("__all__")})
