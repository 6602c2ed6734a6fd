"""How much of the checker's state space two standard reductions would remove (a measurement;
neither reduction is part of ``runx-actors check``: bench/RESULTS.md, seventh session).

    python bench/check_reductions.py [--profile P] [--calls N] [--crashes N] [--variants]

* **Symmetry of the owners**: the number of orbits of the reachable worlds under swapping
  the two owner processes (their positions in ``World.owners``, the only place an owner's
  identity lives: commits record epochs, not owners). Runs are not counted (the profiles
  have one) and the calls of a step are not interchangeable (the planner starts the
  PENDING calls in call order, and a call's ids derive from its index).
* **Partial-order reduction, executor first**: a breadth-first search in which every world
  with a running execution record whose key no owner is aborting, with no copy of its
  Outcome in flight and no crash left, is expanded by that record's ``Finish`` moves only
  (an ample set: ``Finish`` commutes with every other move there and changes no
  invariant's verdict). Printed beside the unreduced search, with both searches' counts.

``--variants`` runs every broken variant of ``tests/check/test_variants.py`` with and
without the ample sets and prints the verdict and trace length of both (the traces of the
reduced search are real traces of the model: it only leaves moves out). ``cpu_s`` does not
compare the two searches (the second one finds the first one's caches warm). Reference model
only (the core explores the same graph under the same labels). Not a test: nothing here
asserts.
"""

from __future__ import annotations

import argparse
import collections
import importlib.util
import json
import os
import time
from collections.abc import Hashable, Iterable, Sequence
from pathlib import Path
from typing import Any

import attrs

from runx_actors.check import PROFILES, Invariant, check_model
from runx_actors.check.models import load_model


class ExecutorFirst:
    """The model *base* (the reference, or a variant of it), with the executor-first ample
    sets (module doc). Everything but ``actions`` is *base*'s."""

    def __init__(self, base: Any) -> None:
        from runx_spec._state import name  # the spec tree is on the path with the models

        self.base, self.name, self._name = base, f"{base.name}[executor-first]", name

    def initial_states(self) -> Iterable[Hashable]:
        return self.base.initial_states()  # type: ignore[no-any-return]

    def invariants(self) -> Sequence[Invariant]:
        return self.base.invariants()  # type: ignore[no-any-return]

    def first_violation(self, state: Any) -> tuple[Invariant, str] | None:
        return self.base.first_violation(state)  # type: ignore[no-any-return]

    def canonical(self, state: Any) -> Hashable:
        return self.base.canonical(state)  # type: ignore[no-any-return]

    def describe(self, state: Any) -> dict[str, Any]:
        return self.base.describe(state)  # type: ignore[no-any-return]

    def is_final(self, state: Any) -> bool:
        return self.base.is_final(state)  # type: ignore[no-any-return]

    def actions(self, state: Any) -> list[tuple[str, Any]]:
        moves = list(self.base.actions(state))
        if state.crashes:
            return moves
        for rec in state.recs:
            if (rec.status == "running"
                    and not any(rec.effect in o.aborting for o in state.owners)
                    and not any(e == rec.effect for e, _ in state.inflight)):
                prefix = f"executor: Finish({self._name(rec.effect)}, "
                return [m for m in moves if m[0].startswith(prefix)]
        return moves


def owner_orbits(model: Any) -> dict[str, int]:
    """Distinct worlds, their orbits under swapping the owners, and the worlds with a
    running execution record (a full breadth-first search, 64-bit hashes)."""
    queue = collections.deque(model.initial_states())
    seen = {hash(model.canonical(s)) for s in queue}
    orbits: set[int] = set()
    count = running = 0
    while queue:
        w = queue.popleft()
        count += 1
        owners = tuple(sorted(w.owners, key=repr))
        orbits.add(hash((owners, *attrs.astuple(w, recurse=False)[2:], w.store)))
        running += any(r.status == "running" for r in w.recs)
        for _, nxt in model.actions(w):
            if nxt is not w and (key := hash(model.canonical(nxt))) not in seen:
                seen.add(key)
                queue.append(nxt)
    return {"states": count, "owner_orbits": len(orbits), "with_running_record": running}


def _search(model: Any, check_deadlock: bool = False) -> dict[str, Any]:
    start = time.process_time()
    result = check_model(model, compact=True, progress=False, check_deadlock=check_deadlock)
    stats, violation = result.stats, result.violation
    return {"states": stats.distinct_states, "transitions": stats.transitions,
            "depth": stats.max_depth, "complete": stats.complete,
            "verdict": violation.invariant if violation else "OK",
            "trace": len(violation.trace.steps) if violation else None,
            "cpu_s": round(time.process_time() - start, 2)}


def _variants() -> None:
    root = Path(__file__).resolve().parent.parent
    spec = importlib.util.spec_from_file_location(
        "test_variants", root / "tests" / "check" / "test_variants.py")
    assert spec is not None and spec.loader is not None
    cases = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cases)
    differ = 0
    for model_name, variant in cases.CASES:
        if model_name != "reference":
            continue
        deadlock = cases._deadlock(model_name, variant)
        base = load_model(model_name, cases._config(variant), variant)
        plain = _search(base, deadlock)
        reduced = _search(ExecutorFirst(base), deadlock)
        same = (plain["verdict"], plain["trace"]) == (reduced["verdict"], reduced["trace"])
        differ += not same
        print(json.dumps({"variant": variant, "unreduced": plain, "executor_first": reduced,
                          "same_verdict_and_trace_length": same}))
    print(json.dumps({"variants_that_differ": differ}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--profile", default="default", choices=sorted(PROFILES))
    parser.add_argument("--calls", type=int)
    parser.add_argument("--crashes", type=int)
    parser.add_argument("--variants", action="store_true")
    parser.add_argument("--no-orbits", action="store_true",
                        help="skip the orbit count (a third full search)")
    args = parser.parse_args()
    if args.variants:
        _variants()
        return
    changes = {k: v for k, v in (("calls", args.calls), ("crashes", args.crashes))
               if v is not None}
    config = attrs.evolve(PROFILES[args.profile], **changes)
    row: dict[str, Any] = {"profile": args.profile, **changes}
    row["unreduced"] = _search(load_model("reference", config))
    row["executor_first"] = _search(ExecutorFirst(load_model("reference", config)))
    if not args.no_orbits:
        row.update(owner_orbits(load_model("reference", config)))
    row["load"] = os.getloadavg()[0]
    print(json.dumps(row))


if __name__ == "__main__":
    main()
