"""The loop host (outer layer, loop-host.md): loop record, turn policy, receipts, context
skills and harness.

The entry points load on first use (``from runx_actors.host import LoopHost, HostConfig,
LoopSpec, LoopOutcome, load_package``); importing this package itself imports nothing
else, so the pure receipt code (``runx_actors.host.receipts``) never pulls in trio.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from ._governed import HostConfig as HostConfig
    from .loop import LoopHost as LoopHost
    from .loop import LoopOutcome as LoopOutcome
    from .loop import LoopSpec as LoopSpec
    from .package import load_package as load_package

_LAZY = {
    "LoopHost": "runx_actors.host.loop",
    "LoopSpec": "runx_actors.host.loop",
    "LoopOutcome": "runx_actors.host.loop",
    "HostConfig": "runx_actors.host._governed",
    "load_package": "runx_actors.host.package",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'runx_actors.host' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value
