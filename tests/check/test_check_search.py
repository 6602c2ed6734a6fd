"""The checker's searches on synthetic models with known state spaces."""

from __future__ import annotations

import pytest
from synthetic_models import Counter, Exploding, Grid, Mutex, assert_trace_is_a_path

from runx_actors.check import (
    DEADLOCK,
    Invariant,
    ModelBase,
    ModelCodeError,
    ProgressSnapshot,
    StopReason,
    Strategy,
    TraceReplayError,
    _search,
    check_model,
)

STRATEGIES = [Strategy.BFS, Strategy.DFS]


# --- exact statistics ------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("compact", [False, True])
@pytest.mark.parametrize("n", [0, 1, 10])
def test_grid_statistics_are_exact(strategy: Strategy, compact: bool, n: int) -> None:
    result = check_model(Grid(n), strategy=strategy, compact=compact, progress=False)
    assert result.ok and result.violation is None
    stats = result.stats
    assert stats.distinct_states == (n + 1) ** 2
    assert stats.transitions == 4 * (n + 1) ** 2 - 4 * (n + 1)
    assert stats.complete and stats.stop_reason is None
    if strategy is Strategy.BFS:
        assert stats.max_depth == 2 * n
    assert stats.duration_s >= 0 and stats.states_per_s >= 0


@pytest.mark.parametrize("procs", [1, 2, 3, 4])
def test_mutex_statistics_are_exact(procs: int) -> None:
    result = check_model(Mutex(procs), progress=False)
    assert result.ok and result.stats.complete
    assert result.stats.distinct_states == 2**procs + procs * 2 ** (procs - 1)


# --- counterexamples -------------------------------------------------------------------------


def test_bfs_finds_the_shortest_counterexample() -> None:
    model = Grid(10, bug=(4, 3))
    result = check_model(model, progress=False)
    assert not result.ok
    violation = result.violation
    assert violation is not None
    assert violation.invariant == "NOT-BUG"
    assert violation.message == "walker at (4, 3)"
    assert violation.description == "the walker never reaches the bug cell"
    assert len(violation.trace) == 7
    assert violation.trace.final == (4, 3)
    assert_trace_is_a_path(model, violation.trace)
    assert result.stats.stop_reason is StopReason.VIOLATION
    assert not result.stats.complete


def test_dfs_finds_a_valid_possibly_longer_counterexample() -> None:
    model = Grid(10, bug=(4, 3))
    result = check_model(model, strategy="dfs", progress=False)
    assert result.violation is not None
    trace = result.violation.trace
    assert trace.final == (4, 3)
    assert len(trace) >= 7
    assert len(trace) > 7  # right-first DFS snakes through the grid before reaching it
    assert_trace_is_a_path(model, trace)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_racy_mutex_is_caught_and_correct_mutex_holds(strategy: Strategy) -> None:
    assert check_model(Mutex(2), strategy=strategy, progress=False).ok
    model = Mutex(2, racy=True)
    result = check_model(model, strategy=strategy, progress=False)
    assert result.violation is not None
    assert result.violation.invariant == "MUTEX"
    assert result.violation.message == "p0 and p1 are both critical"
    assert_trace_is_a_path(model, result.violation.trace)
    if strategy is Strategy.BFS:
        # try, see lock free, enter -- for each process
        assert len(result.violation.trace) == 6


def test_violation_in_an_initial_state_has_an_empty_trace() -> None:
    result = check_model(Counter(5, bad=0), progress=False)
    assert result.violation is not None
    assert len(result.violation.trace) == 0
    assert result.violation.trace.initial == 0
    assert result.stats.distinct_states == 1


# --- symmetry reduction ----------------------------------------------------------------------


@pytest.mark.parametrize("procs", [2, 3, 4])
def test_symmetry_reduction_lowers_distinct_states(procs: int) -> None:
    full = check_model(Mutex(procs), progress=False)
    reduced = check_model(Mutex(procs, symmetric=True), progress=False)
    assert reduced.ok
    assert reduced.stats.distinct_states == 2 * procs + 1
    assert reduced.stats.distinct_states < full.stats.distinct_states


@pytest.mark.parametrize("strategy", STRATEGIES)
@pytest.mark.parametrize("compact", [False, True])
def test_symmetric_counterexample_is_a_real_path(strategy: Strategy, compact: bool) -> None:
    model = Mutex(3, racy=True, symmetric=True)
    result = check_model(model, strategy=strategy, compact=compact, progress=False)
    assert result.violation is not None
    assert_trace_is_a_path(model, result.violation.trace)
    if strategy is Strategy.BFS:
        assert len(result.violation.trace) == 6


# --- bounds ----------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_states_reports_incomplete(strategy: Strategy) -> None:
    result = check_model(Grid(10), strategy=strategy, max_states=50, progress=False)
    assert result.ok
    assert result.stats.distinct_states == 50
    assert not result.stats.complete
    assert result.stats.stop_reason is StopReason.MAX_STATES


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_states_equal_to_the_state_space_is_complete(strategy: Strategy) -> None:
    result = check_model(Grid(3), strategy=strategy, max_states=16, progress=False)
    assert result.stats.complete and result.stats.distinct_states == 16


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_depth_explores_exactly_the_states_within_it(strategy: Strategy) -> None:
    # cells with x + y <= 5 on an 11 x 11 grid: 1 + 2 + ... + 6
    result = check_model(Grid(10), strategy=strategy, max_depth=5, progress=False)
    assert result.stats.distinct_states == 21
    assert result.stats.max_depth == 5
    assert result.stats.stop_reason is StopReason.MAX_DEPTH
    assert not result.stats.complete


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_depth_beyond_the_diameter_is_complete(strategy: Strategy) -> None:
    result = check_model(Counter(4), strategy=strategy, max_depth=4, progress=False)
    assert result.stats.complete and result.stats.distinct_states == 5
    result = check_model(Counter(4), strategy=strategy, max_depth=3, progress=False)
    assert result.stats.stop_reason is StopReason.MAX_DEPTH
    assert result.stats.distinct_states == 4


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_max_depth_zero_checks_only_initial_states(strategy: Strategy) -> None:
    result = check_model(Grid(3), strategy=strategy, max_depth=0, progress=False)
    assert result.stats.distinct_states == 1
    assert result.stats.transitions == 0
    assert result.stats.stop_reason is StopReason.MAX_DEPTH


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_time_limit_stops_an_infinite_model(strategy: Strategy) -> None:
    result = check_model(Counter(None), strategy=strategy, time_limit=0.05, progress=False)
    assert result.ok
    assert result.stats.stop_reason is StopReason.TIME_LIMIT
    assert result.stats.distinct_states > 0


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError):
        check_model(Grid(1), max_states=0)
    with pytest.raises(ValueError):
        check_model(Grid(1), max_depth=-1)
    with pytest.raises(ValueError):
        check_model(Grid(1), time_limit=0)
    with pytest.raises(ValueError):
        check_model(Grid(1), strategy="sideways")


# --- deadlock --------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_terminal_states_are_fine_unless_deadlock_detection_is_on(strategy: Strategy) -> None:
    assert check_model(Counter(3), strategy=strategy, progress=False).ok
    result = check_model(Counter(3), strategy=strategy, check_deadlock=True, progress=False)
    assert result.violation is not None
    assert result.violation.invariant == DEADLOCK
    assert result.violation.trace.final == 3
    assert len(result.violation.trace) == 3


def test_deadlock_in_an_initial_state() -> None:
    result = check_model(Counter(0), check_deadlock=True, progress=False)
    assert result.violation is not None and len(result.violation.trace) == 0


def test_no_deadlock_in_a_live_model() -> None:
    assert check_model(Mutex(2), check_deadlock=True, progress=False).ok


# --- initial states --------------------------------------------------------------------------


class _TwoStarts(ModelBase):
    name = "two-starts"

    def initial_states(self) -> list[int]:
        return [0, 10, 0]

    def actions(self, state: int) -> list[tuple[str, int]]:
        return [("env: step", state + 1)] if state % 10 < 3 else []

    def invariants(self) -> list[Invariant]:
        return [Invariant("LT-13", "below 13", lambda s: None if s < 13 else "too big")]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_several_initial_states_are_deduplicated_and_all_explored(strategy: Strategy) -> None:
    result = check_model(_TwoStarts(), strategy=strategy, progress=False)
    assert result.violation is not None
    assert result.violation.trace.initial == 10
    assert len(result.violation.trace) == 3
    assert check_model(_TwoStarts(), strategy=strategy, max_depth=2, progress=False).ok


# --- misbehaving models ----------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_model_exception_is_reported_with_a_trace(strategy: Strategy) -> None:
    with pytest.raises(ModelCodeError) as info:
        check_model(Exploding(at=4), strategy=strategy, progress=False)
    err = info.value
    assert err.where == "actions"  # type: ignore[attr-defined]
    assert err.state == 4  # type: ignore[attr-defined]
    assert err.trace.final == 4  # type: ignore[attr-defined]
    assert isinstance(err.__cause__, RuntimeError)


def test_raising_invariant_is_reported_with_its_name() -> None:
    class Model(Counter):
        def invariants(self) -> list[Invariant]:
            return [Invariant("INV-X", "raises", lambda s: 1 / (s - 2) and None)]

    with pytest.raises(ModelCodeError) as info:
        check_model(Model(5), progress=False)
    assert info.value.where == "invariant INV-X"  # type: ignore[attr-defined]
    assert info.value.trace.final == 2  # type: ignore[attr-defined]


def test_nondeterministic_model_cannot_replay() -> None:
    class Flaky(Grid):
        """Forgets every action once the violation has been seen (replay then fails)."""

        forgetful = False

        def actions(self, state: tuple[int, int]) -> list[tuple[str, tuple[int, int]]]:
            return [] if self.forgetful else super().actions(state)

        def invariants(self) -> list[Invariant]:
            def at_bug(state: tuple[int, int]) -> str | None:
                if state == self.bug:
                    self.forgetful = True
                    return "at bug"
                return None

            return [Invariant("NOT-BUG", "", at_bug)]

    with pytest.raises(TraceReplayError):
        check_model(Flaky(10, bug=(4, 3)), progress=False)


# --- progress --------------------------------------------------------------------------------


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_progress_callback_receives_snapshots(
    strategy: Strategy, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_search, "REPORT_INTERVAL_S", 0.0)
    snapshots: list[ProgressSnapshot] = []
    result = check_model(Grid(60), strategy=strategy, progress=snapshots.append)
    assert snapshots
    counts = [s.distinct_states for s in snapshots]
    assert counts == sorted(counts)
    assert counts[-1] <= result.stats.distinct_states


def test_progress_is_throttled() -> None:
    snapshots: list[ProgressSnapshot] = []
    check_model(Grid(60), progress=snapshots.append)  # well under a quarter second
    assert len(snapshots) <= 1


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_raising_initial_states_is_reported(strategy: Strategy) -> None:
    class NoStart(Counter):
        def initial_states(self) -> list[int]:
            raise KeyError("no start")

    with pytest.raises(ModelCodeError) as info:
        check_model(NoStart(3), strategy=strategy, progress=False)
    assert info.value.where == "initial_states"  # type: ignore[attr-defined]
    assert info.value.trace is None  # type: ignore[attr-defined]


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_boolean_invariant_check_is_refused(strategy: Strategy) -> None:
    class Predicate(Counter):
        def invariants(self) -> list[Invariant]:
            return [Invariant("SMALL", "a predicate by mistake", lambda s: s < 3)]

    with pytest.raises(ModelCodeError) as info:
        check_model(Predicate(5), strategy=strategy, progress=False)
    assert info.value.where == "invariant SMALL"  # type: ignore[attr-defined]
    assert isinstance(info.value.__cause__, TypeError)


class _DuckCounter:
    """Implements only the required methods (no ModelBase, no canonical, no describe)."""

    name = "duck"

    def initial_states(self) -> list[int]:
        return [0]

    def actions(self, state: int) -> list[tuple[str, int]]:
        return [("tick", state + 1)] if state < 9 else []

    def invariants(self) -> list[Invariant]:
        return []


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_duck_typed_model_without_optional_methods(strategy: Strategy) -> None:
    result = check_model(_DuckCounter(), strategy=strategy, progress=False)  # type: ignore[arg-type]
    assert result.ok and result.stats.distinct_states == 10
