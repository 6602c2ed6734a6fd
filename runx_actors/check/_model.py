"""The ``Model`` protocol the checker explores, and its ``Invariant`` records.

A model is a finite transition system given as code:

* ``initial_states()`` — the states exploration starts from (depth 0);
* ``actions(state)`` — every enabled transition of *state* as ``(label, next_state)`` pairs,
  in a deterministic order (the same state always yields the same pairs in the same order:
  traces are rebuilt by replaying it);
* ``invariants()`` — the safety properties that must hold in every reachable state;
* ``canonical(state)`` — the key a state is deduplicated under (symmetry reduction): two
  states with equal keys are treated as one. Return *state* itself for no reduction;
* ``describe(state)`` — a JSON-able summary of a state for traces.

States are immutable hashable values (frozen attrs classes with ``cache_hash=True``,
tuples, frozensets); the checker never copies them. Labels are human-readable strings of
the form ``"actor: action"`` (``"owner1: StartToolCall(call 0)"``); the part before the
first ``": "`` names the sequence-diagram participant (``"env"`` when there is none).

``ModelBase`` supplies the two optional methods (no reduction, ``repr`` summaries).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

import attrs

__all__ = ["Invariant", "Model", "ModelBase", "S"]

S = TypeVar("S", bound=Hashable)


@attrs.frozen
class Invariant:
    """A named safety property checked in every reachable state.

    ``check(state)`` returns ``None`` when the property holds and a short, human-readable
    violation message otherwise. It must be pure and must not raise (an exception is
    reported as a ``ModelCodeError`` with the trace to the state).
    """

    name: str
    """Short id, e.g. ``"INV-6"``; unique within a model."""
    description: str
    """One sentence saying what must hold."""
    check: Callable[[Any], str | None]
    """``state -> None | message``."""


@runtime_checkable
class Model(Protocol[S]):
    """A finite transition system over hashable states of type ``S``.

    Unparameterised, ``Model`` means ``Model[Any]``. Implement it directly or subclass
    :class:`ModelBase` for the default ``canonical`` and ``describe``.
    """

    @property
    def name(self) -> str:
        """Display name of the model (``"reference"``); a plain attribute satisfies it."""
        ...

    def initial_states(self) -> Iterable[S]:
        """The states at depth 0 (duplicates under ``canonical`` are explored once)."""
        ...

    def actions(self, state: S) -> Iterable[tuple[str, S]]:
        """Every enabled transition of *state* as ``(label, next_state)``, deterministically
        ordered. An empty iterable means *state* is terminal."""
        ...

    def invariants(self) -> Sequence[Invariant]:
        """The properties checked in every reachable state, in reporting order."""
        ...

    def canonical(self, state: S) -> Hashable:
        """The deduplication key of *state*: equal keys mean equivalent states (symmetry
        reduction). Must be invariant-preserving. Return *state* for no reduction."""
        ...

    def describe(self, state: S) -> dict[str, Any]:
        """A JSON-able summary of *state* used in rendered traces."""
        ...


class ModelBase:
    """Mixin with the defaults of the optional ``Model`` methods.

    ``canonical`` returns the state unchanged (no symmetry reduction; the checker then
    skips the call entirely) and ``describe`` returns ``{"repr": repr(state)}``.
    """

    __slots__ = ()

    def canonical(self, state: Any) -> Hashable:
        """No reduction: the state is its own key."""
        key: Hashable = state
        return key

    def describe(self, state: Any) -> dict[str, Any]:
        """``{"repr": repr(state)}``."""
        return {"repr": repr(state)}
