"""The parts of the reference machine (``spec/runx_spec``) the core model shares.

The core model runs the reference's *environment* — its moves (``_moves``: owners,
executor, user, faults) over its values (``World``, ``Owner``, ``Rec``, ``Cmd``) — with the
real core's Run semantics (``_core_semantics``); it reuses the readable-name and EffectID
registries filled by the reference's id helpers (``prepare_ids``, ``model_effect``,
``tool_effect``, …), the abstract ``Fact`` / ``RunState`` / ``Store`` values its
invariants read, and the invariant table itself. It never uses the reference's Run
semantics (its ``decide``, ``commit``, ``evolve`` or planner) to drive the core.

The dependency points one way: the reference imports nothing from ``runx_actors``'s
protocol; it derives identities with its own implementation (``runx_spec._ids``). The
reference is plain Python outside the strictly
typed package (it is not installed as a typed distribution), so it is loaded by name and
typed ``Any`` here: this is the one place the core model touches it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["state", "moves", "invariants", "reference", "ids", "name"]

state: Any = importlib.import_module("runx_spec._state")
"""``runx_spec._state``: values, id helpers and the name registry."""
moves: Any = importlib.import_module("runx_spec._moves")
"""``runx_spec._moves``: the environment (``Ctx``, ``moves``, ``initial_world``, …)."""
invariants: Any = importlib.import_module("runx_spec._invariants")
"""``runx_spec._invariants``: ``INVARIANTS`` (the checks the core model reuses)."""
ids: Any = importlib.import_module("runx_spec._ids")
"""``runx_spec._ids``: the spec's own identity derivation (the independent oracle: the
core model never derives an *expected* id with ``runx_actors.protocol.ids``)."""
reference: Any = importlib.import_module("runx_spec.reference")
"""``runx_spec.reference``: ``ReferenceConfig`` (the default bounds) and
``describe_environment`` (trace summaries)."""


def name(ident: str) -> str:
    """Readable label of a derived id (``r0.m1.c0``), as the reference prints it."""
    label: str = state.name(ident)
    return label
