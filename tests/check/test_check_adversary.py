"""The adversarial environment (issue 13): forged commands and foreign-log facts.

* every refusal the protocol defines at commit (fenced, not found, terminal, conflict,
  stale) and at the fold (corrupt), and the replay answer, is reached by some move;
* the unmodified models refuse every forgery (their exploration passes with the
  adversary on, and both models reach the same states);
* the ``default`` profile — what ``runx-actors check`` runs without options — catches each
  bug of issue 13, implemented as a single-edit mutant of the real core, with a shortest
  counterexample;
* the mutants really are the shipped source with one edit (a stale edit refuses to build).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from runx_actors.check import PROFILES, check_model
from runx_actors.check.models import core as core_model
from runx_actors.check.models import load_model
from runx_actors.check.models._core_impl import MUTANT_VARIANTS
from runx_actors.check.models._mutants import MutantError, mutant_function

reference = pytest.importorskip("runx_spec.reference")

SMALL = reference.ReferenceConfig(runs=1, calls=1, crashes=0, takeovers=1, duplicates=1,
                                  cancel=True, adversarial=True)

#: commit statuses of the protocol's refusals (OwnershipLostError, RunNotFoundError,
#: RunTerminalError, CommandConflictError, StaleRuntimeError), the replay, and the fold's
#: CorruptLogError ("corrupt", core only: the reference's fold checks nothing).
CORE_KINDS = {"fenced", "not_found", "terminal", "conflict", "stale", "already_applied",
              "corrupt"}
REFERENCE_KINDS = {"fenced", "terminal", "conflict", "stale", "already_applied"}


def _statuses(model: Any, limit: int = 50_000) -> Counter[str]:
    """The commit status at the end of every transition label of a full exploration."""
    seen: set[Any] = set()
    frontier = list(model.initial_states())
    kinds: Counter[str] = Counter()
    while frontier:
        state = frontier.pop()
        key = model.canonical(state)
        if key in seen:
            continue
        seen.add(key)
        assert len(seen) < limit, "the small configuration grew unexpectedly"
        for label, nxt in model.actions(state):
            if " -> " in label:
                kinds[label.rsplit(" -> ", 1)[1].split()[0].rstrip(",:")] += 1
            frontier.append(nxt)
    return kinds


@pytest.mark.parametrize(("name", "wanted"), [("core", CORE_KINDS),
                                               ("reference", REFERENCE_KINDS)])
def test_every_refusal_kind_is_reached_by_some_move(name: str, wanted: set[str]) -> None:
    kinds = _statuses(load_model(name, SMALL))
    assert wanted <= set(kinds), sorted(wanted - set(kinds))
    assert "internal" not in kinds  # a correct core never fails to fold what it decided


def test_the_unmodified_models_refuse_every_forgery() -> None:
    config = reference.ReferenceConfig(runs=1, calls=2, crashes=0, takeovers=0, duplicates=0,
                                       inputs=1, approvals=True, cancel=True, failures=True,
                                       adversarial=True)
    results = {name: check_model(load_model(name, config), progress=False)
               for name in ("reference", "core")}
    for result in results.values():
        assert result.ok, result.violation
        assert result.stats.complete
    assert results["core"].stats.distinct_states == results["reference"].stats.distinct_states


#: The bugs of issue 13 (mutants of the real core), and what they need to be seen.
ISSUE_13 = ("prepare_cas_behind_only", "complete_non_executing", "input_id_first_only",
            "toolspec_unchecked", "envelope_type_and", "empty_command_id",
            "input_missing_digest", "terminal_before_replay")


def test_the_core_has_a_mutant_variant_for_each_bug_of_issue_13() -> None:
    assert set(ISSUE_13) <= set(MUTANT_VARIANTS) <= set(core_model.VARIANTS)


@pytest.mark.parametrize("variant", ISSUE_13)
def test_the_default_profile_catches_the_mutant_with_a_shortest_trace(variant: str) -> None:
    model = load_model("core", PROFILES["default"], variant)
    result = check_model(model, progress=False)
    assert result.violation is not None, f"core[{variant}] passed the default profile"
    assert result.violation.invariant == core_model.EXPECTED[variant], result.violation.message
    depth = len(result.violation.trace)
    assert check_model(model, max_depth=depth - 1, progress=False).ok  # nothing shallower


def test_a_mutant_whose_edit_no_longer_matches_refuses_to_build() -> None:
    with pytest.raises(MutantError):
        mutant_function("runx_actors.protocol.commit", "evaluate_commit",
                        (("this text is not in the source", ""),))
