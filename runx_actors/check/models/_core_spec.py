"""The parts of the reference machine (``spec/runx_spec``) the core model shares.

The core model reuses the reference's *environment* values and its invariants: owners
(``Owner``), executor records (``Rec``), the readable-name and EffectID registries filled
by the reference's id helpers (``prepare_ids``, ``model_effect``, ``tool_effect``, …), the
abstract ``Fact`` / ``RunState`` / ``Store`` / ``World`` values its invariants read, and
the invariant table itself. It never uses the reference's Run semantics (its ``decide``,
``commit`` or ``evolve``) to drive the core.

The reference is plain Python outside the strictly typed package (it is not installed as
a typed distribution), so it is loaded by name and typed ``Any`` here: this is the one
place the core model touches it.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = ["state", "invariants", "reference", "store", "name", "register_effect"]

state: Any = importlib.import_module("runx_spec._state")
"""``runx_spec._state``: values, id helpers and the name registry."""
store: Any = importlib.import_module("runx_spec._store")
"""``runx_spec._store``: only ``CANCEL_PREFIX`` is used (the CancelRun command id)."""
invariants: Any = importlib.import_module("runx_spec._invariants")
"""``runx_spec._invariants``: ``INVARIANTS`` (the checks the core model reuses)."""
reference: Any = importlib.import_module("runx_spec.reference")
"""``runx_spec.reference``: ``describe`` (trace summaries) and ``ReferenceConfig``."""


def name(ident: str) -> str:
    """Readable label of a derived id (``r0.m1.c0``), as the reference prints it."""
    label: str = state.name(ident)
    return label


def register_effect(effect: str, *, run: int, step: str, call: str, kind: str, seq: int,
                    label: str) -> None:
    """Enter an EffectID the reference never derives (a broken core's) in the reference's
    EffectID registry, so the environment and the invariants can look it up."""
    if effect not in state.EFFECTS:
        state.EFFECTS[effect] = state.EffectInfo(run, step, call, kind, seq)
        state.NAMES[effect] = label
