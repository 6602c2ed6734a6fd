"""A predicted request is decided once (RUN-CMT-10).

``predict_commit`` decides a request on the snapshot the caller expects the store to
hold; ``evaluate_commit`` returns that decision instead of deciding again only when the
view locates the very same snapshot object, the request is the one predicted (same
envelope object, same base), the prediction was sealed by ``predict_commit`` and there is
no prompt-token guard to call on a Prepare. These tests hold the shortcut to the full
evaluation: the same answer wherever it is taken (``decide`` not called), and the full
evaluation — never the carried decision — wherever one of those conditions fails (a
deliberately wrong carried decision shows which path answered).
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import attrs
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from runx_actors.protocol import commit as commit_module
from runx_actors.protocol.commit import (
    Append,
    CommitRequest,
    Prediction,
    Replay,
    Snapshot,
    envelope,
    evaluate_batch,
    evaluate_commit,
    predict_commit,
)
from runx_actors.protocol.errors import CommandConflictError, RunxError, StaleRuntimeError
from runx_actors.protocol.values import RunStatus
from runx_actors.testing import builders as b
from runx_actors.testing import strategies as rs

RUN = "run-1"
TOOL = "lookup"


@pytest.fixture
def decides(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every command ``evaluate_commit`` decides (its call of ``decide``)."""
    seen: list[Any] = []
    real = commit_module.decide

    def counting(state: Any, command: Any) -> Any:
        seen.append(command)
        return real(state, command)

    monkeypatch.setattr(commit_module, "decide", counting)
    return seen


def _outcome(fn: Callable[[], Any]) -> Any:
    """The value of *fn*, or its exception's type, message and attributes."""
    try:
        return ("value", fn())
    except RunxError as exc:
        return ("error", type(exc), str(exc), exc.reason if hasattr(exc, "reason") else None)


def _life() -> Iterator[Callable[[Snapshot], b.Built]]:
    """The commands of a Run's life: prepare, start, a model result asking for two
    tools, their starts and results, the next prepare, start and a text answer."""
    yield lambda s: b.prepare(s.state, s.position, tools=[TOOL])
    yield lambda s: b.start_model(s.state)
    yield lambda s: b.model_result(s.state, tool_calls=[(TOOL, "{}"), (TOOL, '{"q":1}')])
    yield lambda s: b.start_tool(s.state, 0)
    yield lambda s: b.start_tool(s.state, 1)
    yield lambda s: b.tool_result(s.state, 0, '{"ok":true}')
    yield lambda s: b.tool_result(s.state, 1, '{"ok":false}')
    yield lambda s: b.prepare(s.state, s.position, tools=[TOOL])
    yield lambda s: b.start_model(s.state)
    yield lambda s: b.model_result(s.state, text="done")


def _request(snap: Snapshot, build: Callable[[Snapshot], b.Built]) -> CommitRequest:
    command_id, command = build(snap)
    return CommitRequest(snap.position, envelope(RUN, command_id, command))


def _wrong(request: CommitRequest) -> CommitRequest:
    """*request* carrying a sealed prediction whose decision is deliberately wrong (no
    facts): whoever answers with it took the shortcut."""
    assert request.predicted is not None
    bogus = Append((), request.predicted.on)
    return attrs.evolve(request, predicted=attrs.evolve(request.predicted, decision=bogus))


def test_predicted_life_is_decided_once(decides: list[Any]) -> None:
    """Through a whole Run: each predicted request answers exactly the full evaluation's
    decision, without calling decide; the log ends the same."""
    log = b.SimpleLog.with_run(RUN, ["in-1"])
    for build in _life():
        snap = log.snapshot(RUN)
        request = _request(snap, build)
        predicted, decision = predict_commit(snap, request)
        assert predicted == request and predicted.predicted is not None
        decides.clear()
        full = evaluate_commit(log, request)
        assert decides, "the plain request is decided"
        decides.clear()
        answer = evaluate_commit(log, predicted)
        assert decides == [], "the predicted request was decided again"
        assert answer == full == decision
        log.submit(predicted)
    assert log.state(RUN).status is RunStatus.COMPLETED


def test_a_predicted_batch_is_decided_once(decides: list[Any]) -> None:
    """A chain predicted one after the other (each on the snapshot the one before
    leaves) is a batch the store decides without deciding again, with the decisions
    the plain batch gets."""
    log = b.SimpleLog.with_run(RUN, ["in-1"])
    snap = log.snapshot(RUN)
    plain, predicted = [], []
    for build in list(_life())[:3]:
        request = _request(snap, build)
        with_prediction, decision = predict_commit(snap, request)
        plain.append(request)
        predicted.append(with_prediction)
        snap = decision.snapshot
    decides.clear()
    full, error = evaluate_batch(log, plain, scope=log.scope)
    assert error is None and len(decides) == 3
    decides.clear()
    fast, error = evaluate_batch(log, predicted, scope=log.scope)
    assert error is None and decides == []
    assert fast == full


def _at_prepare() -> tuple[b.SimpleLog, CommitRequest]:
    log = b.SimpleLog.with_run(RUN, ["in-1"])
    snap = log.snapshot(RUN)
    request, _ = predict_commit(snap, _request(snap, next(_life())))
    return log, request


def test_the_shortcut_answers_when_every_condition_holds() -> None:
    """The control for the tests below: with a wrong carried decision and every
    condition holding, the carried decision is what answers (the shortcut is taken)."""
    log, request = _at_prepare()
    assert evaluate_commit(log, _wrong(request)) == Append((), log.snapshot(RUN))


def test_an_equal_but_other_snapshot_is_decided_in_full() -> None:
    """The store's snapshot equals the predicted one but is another object (a Run
    reloaded or rebuilt): decided in full (identity, not equality, is the proof)."""
    log, request = _at_prepare()
    wrong = _wrong(request)
    twin = copy.deepcopy(log.snapshot(RUN))
    assert twin == log.snapshot(RUN) and twin is not log.snapshot(RUN)
    log._active[RUN] = twin
    decision = evaluate_commit(log, wrong)
    assert isinstance(decision, Append) and decision.facts


def test_a_moved_run_refuses_the_predicted_prepare() -> None:
    """The Run moved on after the prediction: the store's own check refuses the stale
    Prepare (its base is not the position), as without the prediction."""
    log, request = _at_prepare()
    log.apply(b.accept_input(log.state(RUN), "in-2"))
    with pytest.raises(StaleRuntimeError):
        evaluate_commit(log, _wrong(request))


def test_an_applied_id_replays_whatever_was_predicted() -> None:
    """The id is in the replay index: ALREADY_APPLIED with the original facts."""
    log, request = _at_prepare()
    first = log.submit(request)
    decision = evaluate_commit(log, _wrong(request))
    assert decision == Replay(first.facts)


def test_a_prediction_moved_to_another_request_is_ignored() -> None:
    """A prediction carried by a request it was not made for (another envelope, or the
    same envelope under another base) is not used."""
    log, request = _at_prepare()
    wrong = _wrong(request)
    snap = log.snapshot(RUN)
    other = CommitRequest(snap.position, envelope(RUN, request.envelope.id,
                                                  request.envelope.command),
                          wrong.predicted)
    assert other.envelope == request.envelope and other.envelope is not request.envelope
    decision = evaluate_commit(log, other)
    assert isinstance(decision, Append) and decision.facts
    moved = attrs.evolve(wrong, base=snap.position + 1)
    with pytest.raises(CommandConflictError):  # the full check: the id derives from base
        evaluate_commit(log, moved)


def test_an_unsealed_prediction_is_ignored() -> None:
    """A Prediction not made by predict_commit (no seal) is never trusted."""
    log, request = _at_prepare()
    assert request.predicted is not None
    forged = Prediction(request.predicted.on, request.envelope, request.base,
                        Append((), request.predicted.on), object())
    decision = evaluate_commit(log, attrs.evolve(request, predicted=forged))
    assert isinstance(decision, Append) and decision.facts


def test_a_prompt_token_guard_is_still_called_on_a_predicted_prepare() -> None:
    """A store with a prompt-token guard decides a predicted Prepare in full, so the
    guard runs and may refuse it [D-9]."""
    log, request = _at_prepare()
    calls: list[tuple[str, str, str]] = []

    def guard(scope: str, run_id: str, token: str) -> None:
        calls.append((scope, run_id, token))
        raise StaleRuntimeError("prompt token is stale")

    with pytest.raises(StaleRuntimeError, match="prompt token"):
        evaluate_commit(log, _wrong(request), scope=log.scope, prompt_token_guard=guard)
    assert calls == [(log.scope, RUN, "")]


def test_the_prediction_is_not_part_of_the_request_value() -> None:
    """Equality, hash and repr of a request ignore its prediction."""
    _, request = _at_prepare()
    plain = CommitRequest(request.base, request.envelope)
    assert request == plain and hash(request) == hash(plain)
    assert repr(request) == repr(plain)


def _candidates(snap: Snapshot) -> Iterator[b.Built]:
    """Every command a builder can derive on *snap* (valid or not for its phase)."""
    s, pos = snap.state, snap.position
    builds: list[Callable[[], b.Built]] = [
        lambda: b.prepare(s, pos, tools=[TOOL]), lambda: b.prepare(s, pos - 1),
        lambda: b.withdraw(s), lambda: b.start_model(s), lambda: b.recover_model(s),
        lambda: b.model_result(s, tool_calls=[(TOOL, "{}")]),
        lambda: b.model_result(s, text="done"), lambda: b.model_failure(s),
        lambda: b.reject_model_result(s), lambda: b.accept_input(s, f"in-{pos}"),
        lambda: b.cancel(s),
    ]
    for call in (0, 1):
        builds += [lambda c=call: b.start_tool(s, c),
                   lambda c=call: b.tool_result(s, c, '{"ok":true}'),
                   lambda c=call: b.tool_failure(s, c), lambda c=call: b.decline(s, c)]
    for build in builds:
        try:
            yield build()
        except (ValueError, LookupError, AssertionError):
            continue  # no target for this builder on this state


@pytest.mark.parametrize("calls", [1, 2])
def test_every_derivable_command_along_a_life(calls: int, decides: list[Any]) -> None:
    """At every state of a Run's life, every command a builder derives there: where
    ``predict_commit`` accepts it, the predicted request answers the full evaluation's
    decision without deciding again; the states reached include appends of every
    family (prepare, start, settlements, declines, inputs, cancel)."""
    log = b.SimpleLog.with_run(RUN, ["in-1"])
    accepted: set[str] = set()
    life = list(_life()) if calls == 2 else [
        f for i, f in enumerate(_life()) if i not in (4, 6)]
    if calls == 1:
        life[2] = lambda s: b.model_result(s.state, tool_calls=[(TOOL, "{}")])
    for build in life:
        snap = log.snapshot(RUN)
        for command_id, command in _candidates(snap):
            request = CommitRequest(snap.position, envelope(RUN, command_id, command))
            try:
                predicted, decision = predict_commit(snap, request)
            except RunxError:
                continue
            decides.clear()
            answer = evaluate_commit(log, predicted)
            assert decides == [] and answer is decision
            assert answer == evaluate_commit(log, request)
            accepted.add(type(command).__name__)
        log.submit(_request(snap, build))
    assert {"PrepareModelRequest", "StartModelExecution", "SubmitModelResult",
            "SubmitModelFailure", "RejectModelResult", "StartToolCall", "SubmitToolResult",
            "SubmitToolFailure", "DeclineToolCall", "AcceptInput", "CancelRun"
            } <= accepted, accepted


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(state=rs.machine_states(), command=rs.commands(), position=st.integers(0, 40),
       base=st.integers(-1, 41), derived=st.booleans(), replayed=st.booleans())
def test_prediction_equals_full_evaluation_on_any_state(
        state: Any, command: Any, position: int, base: int, derived: bool,
        replayed: bool) -> None:
    """On arbitrary states and commands: wherever ``predict_commit`` accepts a request,
    ``evaluate_commit`` of the predicted request on a view holding that snapshot (with
    the id applied before, or not) answers what it answers for the plain request."""
    from runx_actors.protocol.commit import expected_command_ids

    run_id = state.run_id
    ids = expected_command_ids(run_id, base, command)
    command_id = ids[0] if derived and ids else "cmd-free"
    snap = Snapshot(state, position)
    request = CommitRequest(base, envelope(run_id, command_id, command))
    try:
        predicted, decision = predict_commit(snap, request)
    except RunxError:
        return  # refused on that state: the runtime does not send it predicted
    view = _View(snap, replayed, command_id)
    plain_answer = _outcome(lambda: evaluate_commit(view, request))
    assert _outcome(lambda: evaluate_commit(view, predicted)) == plain_answer
    if not replayed:
        assert plain_answer == ("value", decision)


class _View:
    """A CommitView holding one Run at *snap*; *replayed*: *command_id* is in its index."""

    def __init__(self, snap: Snapshot, replayed: bool, command_id: str) -> None:
        self.snap, self.replayed, self.command_id = snap, replayed, command_id

    def replay_facts(self, command_id: str, run_id: str) -> tuple[Any, ...] | None:
        return () if self.replayed and command_id == self.command_id else None

    def active(self, run_id: str) -> Snapshot | None:
        state = self.snap.state
        ok = state.run_id == run_id and state.status is RunStatus.ACTIVE
        return self.snap if ok else None

    def stream_exists(self, run_id: str) -> bool:
        return True
