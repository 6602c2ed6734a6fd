"""``evaluate_batch`` (RUN-CMT-9): a batch is its requests committed one after another,
stopping at the first refusal, evaluated purely on an overlay of the view."""

from __future__ import annotations

import copy

import pytest

from runx_actors.protocol import BatchResult, evaluate_batch
from runx_actors.protocol.commit import Append, CommitRequest, Replay, envelope
from runx_actors.protocol.errors import (
    EvolveError,
    RunTerminalError,
    StaleRuntimeError,
    ValidationError,
)
from runx_actors.testing import builders as b

RUN = "run-1"


def _log(*inputs: str) -> b.SimpleLog:
    return b.SimpleLog.with_run(RUN, inputs)


def _sequential(log: b.SimpleLog, builds: list) -> tuple[list[CommitRequest], list]:
    """Commit builders one by one on a copy of *log*: the requests and the results."""
    shadow = copy.deepcopy(log)
    requests, results = [], []
    for build in builds:
        snap = shadow.snapshot(RUN)
        command_id, command = build(snap)
        request = CommitRequest(snap.position, envelope(RUN, command_id, command))
        requests.append(request)
        results.append(shadow.submit(request))
    return requests, results


def test_batch_equals_sequential_commits() -> None:
    """Prepare + Start + AcceptInput as one batch: the same facts and snapshots as
    committing them one after another; nothing is written to the view."""
    log = _log("in-1")
    requests, expected = _sequential(log, [
        lambda s: b.prepare(s.state, s.position),
        lambda s: b.start_model(s.state),
        lambda s: b.accept_input(s.state, "in-2"),
    ])
    before = log.facts(RUN)
    decisions, error = evaluate_batch(log, requests, scope=log.scope)
    assert error is None
    got = [(d.facts, d.snapshot) for d in decisions if isinstance(d, Append)]
    want = [(r.facts, r.snapshot) for r in expected]
    assert got == want, f"expected {want}\nactual {got}"
    assert log.facts(RUN) == before  # pure: the view is untouched


def test_batch_stops_at_first_refusal() -> None:
    """A refused request in the middle ends the batch: the prefix is decided, the
    refusal is returned (not raised), the request after it is not evaluated."""
    log = _log("in-1")
    requests, _ = _sequential(log, [
        lambda s: b.accept_input(s.state, "in-2"),
        lambda s: b.prepare(s.state, s.position),
    ])
    # The Prepare names the position before the AcceptInput: stale inside the batch.
    stale = CommitRequest(1, envelope(RUN, *b.prepare(log.state(RUN), 1)))
    later = CommitRequest(0, envelope(RUN, *b.accept_input(log.state(RUN), "in-3")))
    decisions, error = evaluate_batch(log, [requests[0], stale, later])
    assert [type(d) for d in decisions] == [Append]
    assert isinstance(error, StaleRuntimeError)
    # The same Prepare with the base the first request leaves is accepted.
    decisions, error = evaluate_batch(log, requests)
    assert error is None and [type(d) for d in decisions] == [Append, Append]
    assert decisions[1].snapshot.position == decisions[0].snapshot.position + 1


def test_batch_replay_sees_earlier_ids() -> None:
    """A later request repeating an earlier id of the batch replays that request's
    facts; an id applied before the batch replays from the view."""
    log = _log("in-1")
    requests, expected = _sequential(log, [lambda s: b.accept_input(s.state, "in-2")])
    decisions, error = evaluate_batch(log, [requests[0], requests[0]])
    assert error is None
    assert isinstance(decisions[0], Append) and isinstance(decisions[1], Replay)
    assert decisions[1].facts == expected[0].facts
    log.submit(requests[0])
    again, error = evaluate_batch(log, requests)
    assert error is None and again == (Replay(expected[0].facts),)


def test_batch_terminal_inside() -> None:
    """A Run ended by an earlier request of the batch refuses the next one as terminal."""
    log = _log("in-1")
    cancel = CommitRequest(0, envelope(RUN, *b.cancel(log.state(RUN), "cancelled")))
    after = CommitRequest(0, envelope(RUN, *b.accept_input(log.state(RUN), "in-2")))
    decisions, error = evaluate_batch(log, [cancel, after])
    assert [type(d) for d in decisions] == [Append]
    assert isinstance(error, RunTerminalError)
    # The cancel repeated after the end still replays (first wins).
    decisions, error = evaluate_batch(log, [cancel, cancel])
    assert error is None and isinstance(decisions[1], Replay)


def test_batch_validation() -> None:
    """An empty batch, a non-request and mixed Runs are ValidationErrors (raised)."""
    log = _log("in-1")
    log.create("run-2", ["x"])
    one = CommitRequest(0, envelope(RUN, *b.accept_input(log.state(RUN), "a")))
    two = CommitRequest(0, envelope("run-2", *b.accept_input(log.state("run-2"), "a")))
    with pytest.raises(ValidationError, match="at least one"):
        evaluate_batch(log, [])
    with pytest.raises(ValidationError, match="different Runs"):
        evaluate_batch(log, [one, two])
    with pytest.raises(ValidationError, match="not a commit request"):
        evaluate_batch(log, [one, "nope"])  # type: ignore[list-item]


def test_batch_prompt_token_guard_and_internal_errors() -> None:
    """The prompt-token guard refuses inside the batch (returned); an internal error
    (EvolveError from a guard, standing in for a bug) is raised, not returned."""
    log = _log("in-1")
    requests, _ = _sequential(log, [
        lambda s: b.accept_input(s.state, "in-2"),
        lambda s: b.prepare(s.state, s.position),
    ])

    def refuse(scope: str, run_id: str, token: str) -> None:
        raise StaleRuntimeError("token")

    decisions, error = evaluate_batch(log, requests, prompt_token_guard=refuse)
    assert len(decisions) == 1 and isinstance(error, StaleRuntimeError)

    def broken(scope: str, run_id: str, token: str) -> None:
        raise EvolveError("bug")

    with pytest.raises(EvolveError):
        evaluate_batch(log, requests, prompt_token_guard=broken)


def test_batch_result_shape() -> None:
    """BatchResult holds a tuple of results and the refusal (None when complete)."""
    result = BatchResult([], None)
    assert result.results == () and result.error is None
