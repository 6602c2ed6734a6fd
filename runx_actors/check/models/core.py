"""The ``core`` model: the real ``runx_actors.protocol`` driven through the reference's
environment, so the shipped code itself is model-checked (architecture §7).

Shared with the reference (``spec/runx_spec``): the environment itself —
``runx_spec._moves``, the one definition of the moves: two owner processes, an executor
with execution records, a user, crash-and-restart, worker crashes, takeovers, lost /
duplicated / late Outcomes, dispatch accepted / retryable / unknown — parameterised by a
Run semantics, here the real core's (``_core_semantics``); the same default bounds
(``ReferenceConfig``) and the same exact reduction (``canonical``); the readable names and
EffectID registry; and the invariant table, which runs on the image of each core state
under :func:`~._core_world.abstract_world`.

Real: every command (``_core_commands``: real ids and digests), its evaluation
(``evaluate_commit``, hence ``decide`` and ``evolve``) on an immutable ``ScopeLog``
(``_core_store``), the facts and the ``MachineState`` snapshots, the loop's planning
(``plan_next``) and takeover's dispositions (``recovery_targets``, ``recovery_command``).
Four checks are the core's own: ``IDS`` (every id the core derives equals the reference's
derivation), ``INV-40.record`` (``fold_run`` of the log equals the projection),
``INV-3.state`` (``validate_machine_state`` on every projected state) and ``CORE-EVOLVE``
(a decided fact always folds).

``build_model(config, variant)``; ``VARIANTS`` are deliberately broken versions of the core
(``_core_impl``), ``EXPECTED`` the invariant that catches each.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any

import attrs

from ...protocol import facts as F
from ...protocol.state import ModelStep, Open, ToolStep
from .._model import Invariant, ModelBase
from . import _core_spec as spec
from ._core_impl import EXPECTED, VARIANTS, impl_for
from ._core_semantics import CoreSemantics
from ._core_world import IMAGE_CACHE as _world_cache
from ._core_world import abstract_store, abstract_world, record_report, state_report

__all__ = ["CoreConfig", "CoreModel", "VARIANTS", "EXPECTED", "CORE_INVARIANTS",
           "build_model", "describe"]

name = spec.name


@attrs.frozen(kw_only=True)
class CoreConfig:
    """Bounds of the core model: the first five are ``CheckConfig``'s, the others the
    reference's extra knobs. A knob the given config does not have takes the reference's
    default (``runx_spec.reference.ReferenceConfig``), so by default both models explore
    the same environment; the values below are used only if the reference lacks a knob."""

    runs: int = 1
    calls: int = 2
    crashes: int = 1
    takeovers: int = 1
    duplicates: int = 1
    inputs: int = 0
    max_prepares: int = 1
    approvals: bool = False
    malformed: bool = False
    failures: bool = False
    cancel: bool = False
    stale_reads: bool = False
    adversarial: bool = False
    fused: bool = True


def _ghost(prefix: str) -> Callable[[Any], str | None]:
    def check(w: Any) -> str | None:
        return next((g for g in w.ghosts if g.startswith(prefix)), None)
    return check


def _on_image(check: Callable[[Any], str | None]) -> Callable[[Any], str | None]:
    """A reference invariant evaluated on the image of a core state."""
    last = _world_cache

    def on_image(w: Any) -> str | None:
        return check(last[1] if last[0] is w else abstract_world(w))
    return on_image


#: The core's own checks, after the reference's.
CORE_INVARIANTS: tuple[Invariant, ...] = (
    Invariant("IDS", "Every id the core derives (commands, steps, calls, responses, "
                     "effects) equals the reference's derivation.", _ghost("IDS")),
    Invariant("INV-40.record", "fold_run of each Run's stream (record) equals the "
                               "projection's snapshot, state and position.",
              lambda w: record_report(w.store)),
    Invariant("INV-3.state", "Every projected MachineState passes validate_machine_state "
                             "(INV-3 and the call table of §2.5).",
              lambda w: state_report(w.store)),
    Invariant("CORE-EVOLVE", "evaluate_commit never raises EvolveError: every decided fact "
                             "folds (§4.3 step 10).", _ghost("CORE-EVOLVE")),
)


#: Core invariants read from the store alone (cached per store by :func:`_store_verdict`).
_STORE_ONLY: frozenset[str] = frozenset({*spec.invariants.STORE_ONLY, "INV-40.record",
                                         "INV-3.state"})


@functools.lru_cache(maxsize=1 << 16)
def _store_verdict(store: Any) -> dict[str, str]:
    """The violated store-only invariants of a core store (name -> message)."""
    bad: dict[str, str] = dict(spec.invariants.store_verdict(abstract_store(store)))
    for name_, report in (("INV-40.record", record_report(store)),
                          ("INV-3.state", state_report(store))):
        if report is not None:
            bad[name_] = report
    return bad


class CoreModel(ModelBase):
    """The real core as a ``runx_actors.check`` Model."""

    def __init__(self, config: Any = None, variant: str | None = None) -> None:
        own = CoreConfig()
        shared = spec.reference.ReferenceConfig()
        config = config if config is not None else shared

        def get(field: str) -> Any:
            return getattr(config, field, getattr(shared, field, getattr(own, field)))

        self.config = config
        self.variant = variant
        self.impl = impl_for(variant)
        self.ctx = spec.moves.Ctx(
            runs=get("runs"), calls=get("calls"), inputs=get("inputs"),
            max_prepares=get("max_prepares"), approvals=bool(get("approvals")),
            malformed=bool(get("malformed")), failures=bool(get("failures")),
            cancel=bool(get("cancel")), stale_reads=bool(get("stale_reads")),
            bugs=self.impl.shell_bugs, sem=CoreSemantics(self.impl),
            adversarial=bool(get("adversarial")), fused=bool(get("fused")))
        self._budgets = (get("crashes"), get("takeovers"), get("duplicates"))
        self.name = "core" + (f"[{variant}]" if variant else "")
        self._invariants = (
            *(Invariant(inv.name, inv.description, _on_image(inv.check))
              for inv in spec.invariants.INVARIANTS),
            *CORE_INVARIANTS,
        )
        by_name = {inv.name: inv for inv in self._invariants}
        self._world = tuple((by_name[inv.name], inv.check)
                            for inv in spec.invariants.WORLD_INVARIANTS)

    def initial_states(self) -> Iterable[Hashable]:
        """The one initial world: the configured Runs created, budgets full."""
        return [spec.moves.initial_world(self.ctx, *self._budgets)]

    def actions(self, state: Hashable) -> Iterable[tuple[str, Hashable]]:
        """Every environment move enabled in *state*, as ``(label, next world)``, driven
        through the real protocol core."""
        assert isinstance(state, spec.state.World)
        return list(spec.moves.moves(self.ctx, state))

    def invariants(self) -> Sequence[Invariant]:
        """The invariants checked in every reachable world (the reference's, on the image)."""
        return self._invariants

    def first_violation(self, state: Hashable) -> tuple[Invariant, str] | None:
        """What checking :meth:`invariants` in order gives, incrementally: the verdict of
        the store-only checks (the reference's log walk on the image, ``INV-40.record``,
        ``INV-3.state``) is cached per store, ghosts are read only when there are some,
        and otherwise only the executor and owner invariants run (on the image)."""
        assert isinstance(state, spec.state.World)
        bad = _store_verdict(state.store)
        if not bad and not state.ghosts:
            image = abstract_world(state)
            for inv, world_check in self._world:
                message = world_check(image)
                if message is not None:
                    return inv, message
            return None
        for inv in self._invariants:
            message = bad.get(inv.name) if inv.name in _STORE_ONLY else inv.check(state)
            if message is not None:
                return inv, message
        return None

    def canonical(self, state: Hashable) -> Hashable:
        """The reference's one exact reduction (``runx_spec._moves.canonical``: a fenced
        idle writer is an OwnershipLostError'd one) — unless the implementation does not
        fence."""
        if not self.impl.check_epoch:
            return state
        assert isinstance(state, spec.state.World)
        reduced: Hashable = spec.moves.canonical(state)
        return reduced

    def describe(self, state: Any) -> dict[str, Any]:
        """A JSON-ready description of *state* for counterexample traces."""
        assert isinstance(state, spec.state.World)
        return describe(state)

    def is_final(self, state: Any) -> bool:
        """The reference's notion (``runx_spec._moves.is_final``) on the image of the
        state: Runs ended or waiting for the outside world are not a deadlock."""
        assert isinstance(state, spec.state.World)
        final: bool = spec.moves.is_final(self.ctx, state)
        return final

    def shared_tables(self) -> tuple[dict[Any, Any], ...]:
        """The reference's derivation caches the moves read (``EFFECTS``, ``NAMES``): a
        parallel search merges what each worker process adds to them into the others."""
        return (spec.state.EFFECTS, spec.state.NAMES)


def _step(cur: Any) -> Any:
    if cur is None:
        return None
    if isinstance(cur, Open):
        return "open"
    if isinstance(cur, ModelStep):
        return {"model_step": name(cur.id), "status": cur.status.value,
                "effect": name(cur.effect) if cur.effect else "", "rejects": cur.rejects}
    assert isinstance(cur, ToolStep)
    return {"tool_step": name(cur.id), "calls": {
        name(c.call_id): c.status.value + (f"/{c.failure.outcome.value}" if c.failure else "")
        for c in cur.calls}}


def _fact(f: Any) -> str:
    args = [name(x) for x in (getattr(f, "step_id", ""), getattr(f, "call_id", ""),
                              getattr(f, "effect", "")) if x]
    if isinstance(f, F.RunCreated):
        args.append(f.run_id)
    elif isinstance(f, F.InputAccepted):
        args.append(f.input.id)
    elif isinstance(f, F.ToolCallFailed):
        args.append(f"{f.outcome.value}/{f.failure.class_}")
    elif isinstance(f, F.RunEnded):
        args.append(type(f.end).__name__)
    return f"{type(f).__name__}({', '.join(args)})"


def _origin(origin: str) -> str:
    if origin.startswith("deliver:"):
        return "deliver:" + name(origin[len("deliver:"):])
    return origin


def describe(w: Any) -> dict[str, Any]:
    """A JSON-able summary of a core world: the reference's fields with real values, plus
    ``last_commit`` (the newest group, so a text trace shows what each step appended)."""
    store = w.store
    log = [f"{c.cid if ':' in c.cid else c.cid[:8]}@e{c.epoch} {_origin(c.origin)}: "
           + "; ".join(_fact(f) for f in c.facts) for c in store.log]
    return {
        "epoch": store.epoch,
        "runs": [{"status": snap.state.status.value, "current": _step(snap.state.current),
                  "pending": [i.id for i in snap.state.pending_inputs],
                  "model_steps": snap.state.model_steps, "position": snap.position}
                 for snap in store.proj],
        "last_commit": log[-1],
        **spec.reference.describe_environment(w),
        "log": log,
    }


def build_model(config: Any = None, variant: str | None = None) -> CoreModel:
    """The core model for *config* (a ``CheckConfig`` or any object with some of
    :class:`CoreConfig`'s attributes; missing ones take the reference's defaults),
    optionally with one broken *variant* from :data:`VARIANTS`.

    Raises:
        ValueError: an unknown variant.
    """
    return CoreModel(config, variant)
