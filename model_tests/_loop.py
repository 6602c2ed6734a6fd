"""A trio loop owned by one hypothesis state machine (the shipped one:
``runx_actors.testing._trio_thread``, which the conformance state machines use too)."""

from __future__ import annotations

from runx_actors.testing._trio_thread import Hosted, TrioLoopThread

__all__ = ["TrioLoopThread", "Hosted"]
