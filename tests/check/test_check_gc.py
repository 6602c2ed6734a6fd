"""The search keeps the cyclic collector off its own heap (``_search.frozen_heap``) and
hands everything back when it ends; it never touches a heap the caller froze itself, nor
freezes anything with the collector disabled."""

from __future__ import annotations

import gc
from collections.abc import Iterator

import pytest
from synthetic_models import Grid

from runx_actors.check import Invariant, check_model


class _Watched(Grid):
    """The grid, recording the collector's frozen count at every 100th state checked
    (counting the frozen objects walks them all: not at every state)."""

    def __init__(self, n: int) -> None:
        super().__init__(n)
        self.frozen: list[int] = []
        self.checked = 0

    def invariants(self) -> list[Invariant]:
        def note(state: object) -> None:
            if not self.checked % 100:
                self.frozen.append(gc.get_freeze_count())
            self.checked += 1
            return None
        return [Invariant("NOTE", "records the frozen count", note)]


@pytest.fixture
def thawed() -> Iterator[None]:
    """A heap nobody froze, with the collector on; restored as it was afterwards."""
    if gc.get_freeze_count():
        pytest.skip("something in this process froze the heap already")
    enabled = gc.isenabled()
    gc.enable()
    try:
        yield
    finally:
        gc.unfreeze()
        if not enabled:
            gc.disable()


def test_the_heap_is_frozen_during_the_search_and_thawed_after(thawed: None) -> None:
    model = _Watched(40)  # 1,681 states: several ticks of 256 expansions
    result = check_model(model, progress=False)
    assert result.ok and result.stats.distinct_states == 41 * 41
    assert model.frozen[0] == 0  # nothing frozen before the first tick
    assert max(model.frozen) > 0  # frozen once the ticks came
    assert gc.get_freeze_count() == 0  # all handed back to the collector


def test_a_heap_the_caller_froze_is_left_alone(thawed: None) -> None:
    gc.freeze()
    before = gc.get_freeze_count()
    assert before > 0
    model = _Watched(40)
    check_model(model, progress=False)
    # Neither more frozen nor thawed. The count may only fall: a frozen object that
    # another thread or a finaliser frees leaves the permanent generation (seen once
    # under load), so equality would be flaky; a search that froze its own heap raises
    # the count past *before*, one that thawed the caller's drops it to 0.
    after = gc.get_freeze_count()
    assert 0 < after <= before
    assert all(0 < n <= before for n in model.frozen)


def test_nothing_is_frozen_with_the_collector_disabled(thawed: None) -> None:
    gc.disable()
    model = _Watched(40)
    check_model(model, progress=False)
    assert set(model.frozen) == {0}
    assert not gc.isenabled()  # the search did not turn it on
