"""``check_model(workers=N)``: the parallel search gives the single search's result.

Counts, depth, stop reason, verdict and the (shortest) counterexample must be identical to
``workers=1`` — on synthetic models, on bounded searches, and on broken variants of the
reference and of the real core (whose moves read process-wide derivation caches, merged
across the worker processes through ``shared_tables``).
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner
from synthetic_models import Counter, Exploding, Grid, Mutex, assert_trace_is_a_path

from runx_actors import cli
from runx_actors.check import CheckConfig, CheckResult, ModelCodeError, Strategy, check_model
from runx_actors.check.models import load_model

pytest.importorskip("runx_spec.reference")


def _summary(result: CheckResult) -> tuple[Any, ...]:
    stats = result.stats
    violation = result.violation
    trace = None
    if violation is not None:
        trace = (violation.invariant, violation.message, violation.trace.initial,
                 [(step.label, step.state) for step in violation.trace.steps])
    return (stats.distinct_states, stats.transitions, stats.max_depth, stats.stop_reason,
            stats.complete, trace)


def _both(model: Any, **kwargs: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    one = check_model(model, progress=False, **kwargs)
    two = check_model(model, progress=False, workers=2, **kwargs)
    return _summary(one), _summary(two)


@pytest.mark.parametrize("compact", [False, True])
def test_complete_search_counts_are_identical(compact: bool) -> None:
    one, two = _both(Grid(30), compact=compact)
    assert one == two
    assert one[0] == 31 * 31  # and right


@pytest.mark.parametrize("compact", [False, True])
def test_violation_and_shortest_trace_are_identical(compact: bool) -> None:
    model = Mutex(4, racy=True)
    one, two = _both(model, compact=compact)
    assert one == two
    assert one[5] is not None and one[5][0] == "MUTEX"
    result = check_model(model, progress=False, workers=2, compact=compact)
    assert result.violation is not None
    assert_trace_is_a_path(model, result.violation.trace)


def test_the_first_violation_in_search_order_is_reported() -> None:
    """Several violations at the same depth: the one the single search meets first."""
    one, two = _both(Grid(40, bug=(7, 3)), compact=True)
    assert one == two
    assert one[5] is not None and len(one[5][3]) == 10


@pytest.mark.parametrize("limit", [1, 17, 500])
def test_max_states_stops_at_the_same_state(limit: int) -> None:
    one, two = _both(Grid(30), max_states=limit, compact=True)
    assert one == two


@pytest.mark.parametrize("depth", [0, 5, 100])
def test_max_depth_is_identical(depth: int) -> None:
    one, two = _both(Mutex(5), max_depth=depth, compact=True)
    assert one == two


def test_deadlock_verdicts_are_identical() -> None:
    one, two = _both(Counter(limit=9), check_deadlock=True, compact=True)
    assert one == two
    assert one[5] is not None and len(one[5][3]) == 9


def test_symmetry_reduction_is_identical() -> None:
    one, two = _both(Mutex(6, symmetric=True), compact=True)
    assert one == two and one[0] == 13


def test_model_exception_in_a_worker_is_reported_with_its_trace() -> None:
    with pytest.raises(ModelCodeError) as info:
        check_model(Exploding(at=6), progress=False, workers=2, compact=True)
    assert info.value.where == "actions"
    assert info.value.state == 6
    assert info.value.trace is not None and len(info.value.trace.steps) == 6
    assert isinstance(info.value.__cause__, RuntimeError)


def test_bad_worker_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="workers"):
        check_model(Grid(2), workers=0)
    with pytest.raises(ValueError, match="BFS"):
        check_model(Grid(2), workers=2, strategy=Strategy.DFS)


TINY: dict[str, Any] = dict(runs=1, calls=1, crashes=0, takeovers=0, duplicates=0,
                            inputs=0, max_prepares=1, approvals=False, malformed=False,
                            failures=False, cancel=False, stale_reads=False,
                            adversarial=False)


@pytest.mark.parametrize(("name", "variant", "needs"), [
    ("reference", None, {"takeovers": 1, "inputs": 1, "cancel": True}),
    ("reference", "dispose_orphaned", {"crashes": 1, "takeovers": 1}),
    ("core", "replay_reapplies", {"duplicates": 1, "inputs": 1}),
    ("core", "complete_non_executing", {"adversarial": True, "calls": 2, "approvals": True}),
])
def test_the_real_models_give_identical_results(
        name: str, variant: str | None, needs: dict[str, Any]) -> None:
    model = load_model(name, CheckConfig(**{**TINY, **needs}), variant)
    one, two = _both(model, compact=True)
    assert one == two
    assert (one[5] is None) == (variant is None)


def test_cli_workers_flag() -> None:
    runner = CliRunner()
    args = ["check", "--model", "reference", "--profile", "quick", "--no-progress", "--json"]
    one = runner.invoke(cli.main, args)
    two = runner.invoke(cli.main, [*args, "--workers", "2"])
    assert one.exit_code == two.exit_code == 0, (one.output, two.output)
    assert '"distinct_states"' in two.output
    stats_one = [line for line in one.output.splitlines() if "states\"" in line or
                 "transitions" in line]
    stats_two = [line for line in two.output.splitlines() if "states\"" in line or
                 "transitions" in line]
    assert stats_one == stats_two and stats_one
    refused = runner.invoke(cli.main, [*args, "--workers", "2", "--strategy", "dfs"])
    assert refused.exit_code == 64, refused.output
    assert "--workers above 1 needs --strategy bfs" in refused.output
