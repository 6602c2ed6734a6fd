"""Deliberately broken memory stores: each model_tests machine must catch one.

* :class:`UnfencedMemoryStore` never compares a writer's epoch with the persisted one
  (no fencing, INV-27/28);
* :class:`RedecidingMemoryStore` has a blind replay lookup, so a known command id is
  decided again (INV-9).
"""

from __future__ import annotations

from typing import Any

from runx_actors.store._scope import ScopeLog
from runx_actors.store.memory import MemoryStore


class UnfencedScopeLog(ScopeLog):
    """A log that never compares the writer's epoch with the persisted one."""

    def check_epoch(self, epoch: int) -> None:
        return None


class UnfencedMemoryStore(MemoryStore):
    log_class = UnfencedScopeLog


class _BlindIndex(dict[str, Any]):
    """A commit index whose lookups never find anything (writes still land)."""

    def get(self, key: str, default: Any = None) -> Any:
        return default


class RedecidingScopeLog(ScopeLog):
    """A log whose replay lookup is blind: a known command id is decided again."""

    def __init__(self, scope: str) -> None:
        super().__init__(scope)
        self.index = _BlindIndex()


class RedecidingMemoryStore(MemoryStore):
    log_class = RedecidingScopeLog
