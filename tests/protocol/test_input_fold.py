"""Folding pending inputs is linear and keeps the duplicate rule (RUN-INP-2): the fold
scanned every pending input for each InputAccepted (``any(...)``) and copied the tuple —
create_run(id, ["x"] * 4000) on MemoryStore cost 0.49 CPU-s, and SQLite 1.45 s per
record() at 8,000 inputs. Runs of inputs now fold in one pass (``evolve_all``)."""

from __future__ import annotations

from typing import Any

import pytest

from runx_actors.protocol import facts as F
from runx_actors.protocol._evolve import evolve, evolve_all
from runx_actors.protocol.commit import fold_run
from runx_actors.protocol.errors import CorruptLogError, EvolveError
from runx_actors.protocol.values import AgentInput

RUN = "run-1"
DIGEST = "sha256:" + "1" * 64


def _inputs(*ids: str) -> list[F.InputAccepted]:
    return [F.InputAccepted(AgentInput(i, DIGEST)) for i in ids]


def _prepared_over(ids: list[str]) -> F.ModelStepPrepared:
    return F.ModelStepPrepared(step_id="s1", model="m", request_digest=DIGEST,
                               input_ids=tuple(ids), tools=())


@pytest.mark.parametrize(("facts", "index"), [
    ([F.RunCreated(RUN, "c"), *_inputs("in-1", "in-1")], 2),
    ([F.RunCreated(RUN, "c"), *_inputs("in-1", "in-2", "in-3", "in-2")], 4),
    ([F.RunCreated(RUN, "c"), *_inputs("in-1", "in-2"), *_inputs("in-2")], 3),
    ([F.RunCreated(RUN, "c"), *_inputs("in-1", ""), *_inputs("in-3")], 2),
], ids=["adjacent", "later_in_the_run", "next_run_of_inputs", "empty_id"])
def test_an_illegal_input_fact_is_a_corrupt_log_at_its_index(facts: list[Any],
                                                             index: int) -> None:
    """The duplicate rule still holds: an input id already pending does not fold (nor
    does an empty id), at the index of the offending fact."""
    with pytest.raises(CorruptLogError) as refused:
        fold_run(facts, run_id=RUN)
    assert refused.value.index == index  # type: ignore[attr-defined]
    assert refused.value.wire_name == "input_accepted"  # type: ignore[attr-defined]


def test_an_input_id_is_pending_again_after_its_step_consumed_it() -> None:
    """An id is refused only while pending: once a prepared step took the inputs, the
    pending set starts empty (the per-fact rule, unchanged)."""
    facts: list[Any] = [F.RunCreated(RUN, "c"), *_inputs("in-1", "in-2"),
                        _prepared_over(["in-1", "in-2"]), *_inputs("in-1", "in-3")]
    state = fold_run(facts, run_id=RUN)
    assert [i.id for i in state.pending_inputs] == ["in-1", "in-3"]


def test_a_subclass_of_input_accepted_is_refused_as_evolve_refuses_it() -> None:
    """evolve dispatches on the exact fact type, so a subclass is "not a fact"; the
    one-pass input fold must not take it for an input (it did with isinstance)."""
    import attrs

    @attrs.frozen
    class Lookalike(F.InputAccepted):
        pass

    fake = Lookalike(AgentInput("in-9", DIGEST))
    state = fold_run([F.RunCreated(RUN, "c")], run_id=RUN)
    with pytest.raises(EvolveError) as one:
        evolve(state, fake)
    with pytest.raises(EvolveError) as all_:
        evolve_all(state, [fake])
    assert all_.value.message == one.value.message  # type: ignore[attr-defined]


def test_evolve_all_equals_evolve_fact_by_fact() -> None:
    facts: list[Any] = [F.RunCreated(RUN, "c"), *_inputs(*(f"in-{k}" for k in range(50)))]
    one_by_one = None
    for fact in facts:
        one_by_one = evolve(one_by_one, fact)
    assert evolve_all(None, facts) == one_by_one
    with pytest.raises(EvolveError) as refused:
        evolve_all(one_by_one, _inputs("in-x", "in-7"))
    assert refused.value.index == 1  # type: ignore[attr-defined]


class _CountingId(str):
    """An input id that counts how often it is compared for equality."""

    compared = 0

    __hash__ = str.__hash__

    def __eq__(self, other: object) -> bool:
        _CountingId.compared += 1
        return str.__eq__(self, other)

    def __ne__(self, other: object) -> bool:
        return not self.__eq__(other)


def test_folding_n_inputs_compares_ids_linearly_not_quadratically() -> None:
    """A structural bound, not a timing: folding 2,000 inputs compares input ids fewer
    than 2,000 times (the per-fact scan compared n·(n-1)/2 ≈ 2 million times)."""
    n = 2000
    _CountingId.compared = 0
    facts: list[Any] = [F.RunCreated(RUN, "c"),
                        *(F.InputAccepted(AgentInput(_CountingId(f"in-{k}"), DIGEST))
                          for k in range(n))]
    state = fold_run(facts, run_id=RUN)
    assert len(state.pending_inputs) == n
    assert _CountingId.compared < n, _CountingId.compared
