"""Self-test of the checker: every deliberately broken variant of the reference and of the
core is caught, by the expected invariant, with a shortest (BFS) counterexample that
renders as text and as a Mermaid sequence diagram; the unbroken models pass.

The configurations are the smallest in which each defect is reachable; the default
configurations of both models are checked in full (each about ten seconds here), and both
models are shown to explore the same state graph under the same labels (both run the one
environment of ``runx_spec._moves``, each with its own Run semantics: the real core must
refine the reference's, or these tests fail).
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from click.testing import CliRunner

from runx_actors import cli
from runx_actors.check import (
    DEADLOCK,
    CheckConfig,
    check_model,
    render_mermaid,
    render_text,
    split_label,
)
from runx_actors.check.models import core as core_model
from runx_actors.check.models import load_model, model_variants

reference = pytest.importorskip("runx_spec.reference")

#: Every knob off: one Run, one call, no faults. Each variant switches on what it needs.
TINY: dict[str, Any] = dict(runs=1, calls=1, crashes=0, takeovers=0, duplicates=0,
                            inputs=0, max_prepares=1, approvals=False, malformed=False,
                            failures=False, cancel=False, stale_reads=False,
                            adversarial=False)

#: What each variant needs on top of TINY (the same for both models where both have it).
NEEDS: dict[str, dict[str, Any]] = {
    "double_tool_start": {},
    "restart_replay_never": {"crashes": 1},
    "settle_foreign_effect": {"duplicates": 1, "malformed": True},
    "replay_redecides": {"duplicates": 1, "inputs": 1},
    "replay_reapplies": {"duplicates": 1, "inputs": 1},
    "no_epoch_check": {"takeovers": 1},
    "shared_epoch": {"takeovers": 1},
    "run_ended_while_executing": {"cancel": True},
    "late_outcome_written": {"cancel": True},
    "dispose_without_abort": {"takeovers": 1},
    "dispose_orphaned": {"crashes": 1, "takeovers": 1},
    "abort_overrides_accept": {"takeovers": 1},
    "dispatch_before_start": {"takeovers": 1},
    "start_despite_inputs": {"inputs": 1},
    "loop_skips_tool_calls": {},
    "fused_split": {},  # fused commits are on by default (TINY leaves ``fused`` alone)
    # the single-edit mutants of the real core (issue 13): the adversary finds them
    "prepare_cas_behind_only": {"adversarial": True},
    # a forged completion of a call that is not EXECUTING needs one outside a fused batch:
    # with fused commits a direct call is started in the batch that opens its step
    "complete_non_executing": {"adversarial": True, "calls": 2, "approvals": True},
    "input_id_first_only": {"adversarial": True},
    "toolspec_unchecked": {"adversarial": True},
    "envelope_type_and": {"adversarial": True},
    "empty_command_id": {"adversarial": True},
    "input_missing_digest": {"adversarial": True},
    "terminal_before_replay": {"cancel": True, "duplicates": 1},
}

CASES = [("reference", v) for v in sorted(reference.VARIANTS)] + [
    ("core", v) for v in sorted(core_model.VARIANTS)]


def _config(variant: str) -> Any:
    return reference.ReferenceConfig(**{**TINY, **NEEDS[variant]})


def _expected(model: str, variant: str) -> str:
    table = reference.EXPECTED if model == "reference" else core_model.EXPECTED
    return str(table[variant])


def _deadlock(model: str, variant: str) -> bool:
    """Variants that only stall the Run: found by ``check_deadlock``."""
    return _expected(model, variant) == DEADLOCK


def test_every_variant_has_a_configuration_and_an_expected_invariant() -> None:
    assert len(core_model.VARIANTS) >= 6 and len(reference.VARIANTS) >= 6
    assert set(core_model.EXPECTED) == set(core_model.VARIANTS)
    assert set(reference.EXPECTED) == set(reference.VARIANTS)
    assert set(reference.VARIANTS) | set(core_model.VARIANTS) <= set(NEEDS)
    assert dict(model_variants("core")) == core_model.VARIANTS


@pytest.mark.parametrize(("model_name", "variant"), CASES)
def test_variant_is_caught_with_a_shortest_trace(model_name: str, variant: str) -> None:
    model = load_model(model_name, _config(variant), variant)
    deadlock = _deadlock(model_name, variant)
    result = check_model(model, progress=False, check_deadlock=deadlock)
    assert result.violation is not None, f"{model_name}[{variant}] was not caught"
    violation = result.violation
    assert violation.invariant == _expected(model_name, variant), violation.message
    trace = violation.trace
    assert len(trace) >= 1
    # shortest: with BFS no state at depth len(trace) - 1 or less violates anything
    shallower = check_model(model, max_depth=len(trace) - 1, progress=False,
                            check_deadlock=deadlock)
    assert shallower.ok, (shallower.violation, len(trace))
    # the trace renders, naming the invariant and every step in order
    text = render_text(trace, model.describe, violation=violation)
    assert violation.invariant in text and violation.message.splitlines()[0][:40] in text
    positions = [text.index(label) for label in trace.labels]
    assert positions == sorted(positions)
    mermaid = render_mermaid(trace, violation=violation)
    assert mermaid.startswith("sequenceDiagram\n")
    actors = {split_label(label)[0] for label in trace.labels}
    assert all(f" as {actor}" in mermaid for actor in actors)
    assert f"{violation.invariant} violated" in mermaid


#: Same name, same defect in both models (``double_tool_start`` is an executor defect in
#: the reference and a planner + decide defect in the core).
SHARED = sorted(v for v in set(core_model.VARIANTS) & set(reference.VARIANTS)
                if v != "double_tool_start")


@pytest.mark.parametrize("variant", SHARED)
def test_shared_variants_are_caught_by_the_same_invariant_in_both_models(variant: str) -> None:
    found = {}
    for model_name in ("reference", "core"):
        result = check_model(load_model(model_name, _config(variant), variant), progress=False,
                             check_deadlock=_deadlock(model_name, variant))
        assert result.violation is not None
        found[model_name] = (result.violation.invariant, len(result.violation.trace))
    assert found["core"][0] == found["reference"][0]


def test_check_reference_default_config_passes() -> None:
    """``runx-actors check --model reference`` with its defaults (about ten seconds)."""
    result = check_model(load_model("reference", CheckConfig()), progress=False)
    assert result.ok, result.violation
    assert result.stats.complete and result.stats.distinct_states > 10_000


def test_check_core_default_config_passes() -> None:
    """``runx-actors check --model core`` with its defaults: the reference's environment,
    the same state graph (about ten seconds)."""
    core = check_model(load_model("core", CheckConfig()), progress=False)
    assert core.ok, core.violation
    assert core.stats.complete and core.stats.distinct_states > 10_000


@pytest.mark.parametrize("config", [
    dict(calls=1, crashes=1, takeovers=1),
    dict(calls=2, takeovers=1, approvals=True),
    dict(calls=1, inputs=1, malformed=True, failures=True, duplicates=1),
    dict(calls=1, inputs=1, max_prepares=2, stale_reads=True),
    dict(calls=2, approvals=True, failures=True, duplicates=1, adversarial=True),
])
def test_core_and_reference_explore_the_same_state_graph(config: dict[str, Any]) -> None:
    """Both models run the environment of ``runx_spec._moves`` and the real core refines the
    reference's Run semantics, so both graphs have the same size. A difference means the
    core's semantics (``_core_semantics``) answers differently from the reference's."""
    cfg = reference.ReferenceConfig(**{**TINY, "cancel": True, **config})
    stats = {name: check_model(load_model(name, cfg), progress=False).stats
             for name in ("reference", "core")}
    assert stats["core"].complete and stats["reference"].complete
    assert stats["core"].distinct_states == stats["reference"].distinct_states
    if not config.get("adversarial"):  # the core's own forgeries add (refused) self-loops
        assert stats["core"].transitions == stats["reference"].transitions


def _labels(model: Any) -> Counter[str]:
    """Every transition label of a complete exploration (BFS over canonical keys)."""
    seen: set[Any] = set()
    frontier = list(model.initial_states())
    labels: Counter[str] = Counter()
    while frontier:
        state = frontier.pop()
        key = model.canonical(state)
        if key in seen:
            continue
        seen.add(key)
        for label, nxt in model.actions(state):
            labels[label] += 1
            frontier.append(nxt)
    return labels


@pytest.mark.parametrize("config", [
    dict(crashes=1, takeovers=1, duplicates=1),
    dict(calls=2, approvals=True, inputs=1, malformed=True, failures=True),
])
def test_core_and_reference_label_their_moves_alike(config: dict[str, Any]) -> None:
    """The same moves under the same labels (a label that depends on the semantics — a step
    or effect id, a commit status — shows up here when the core differs)."""
    cfg = reference.ReferenceConfig(**{**TINY, "cancel": True, **config})
    ref, core = (_labels(load_model(n, cfg)) for n in ("reference", "core"))
    assert set(core) == set(ref), (sorted(set(core) - set(ref))[:5],
                                   sorted(set(ref) - set(core))[:5])
    assert core == ref


def test_core_model_runs_the_one_environment_of_the_reference() -> None:
    """There is one definition of the moves (``runx_spec._moves``); the core model supplies
    only its Run semantics, an adapter over ``runx_actors.protocol``."""
    moves = pytest.importorskip("runx_spec._moves")
    model: Any = load_model("core", CheckConfig())
    assert isinstance(model.ctx, moves.Ctx)
    assert type(model.ctx.sem).__module__ == "runx_actors.check.models._core_semantics"
    ref: Any = load_model("reference", CheckConfig())
    assert type(ref.ctx.sem).__module__ == "runx_spec._semantics"


def test_cli_checks_the_core_and_exits_zero() -> None:
    result = CliRunner().invoke(cli.main, ["check", "--model", "core", "--json", "--no-progress",
                                           "--calls", "1", "--duplicates", "0"])
    assert result.exit_code == 0, result.output
    assert '"ok": true' in result.stdout


def test_cli_shows_a_core_counterexample() -> None:
    result = CliRunner().invoke(cli.main, ["check", "--model", "core", "--no-progress",
                                           "--variant", "no_epoch_check", "--calls", "1",
                                           "--trace-format", "mermaid"])
    assert result.exit_code == 1, result.output
    assert result.stdout.startswith("sequenceDiagram")
    assert "INV-28" in result.stdout
