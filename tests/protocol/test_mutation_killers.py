"""Direct tests for the defects mutation testing and seeded bugs showed the suite missed
(issue 13 item 8; ``mutmut run``, bench/RESULTS.md "Mutation testing").

The four survivors of the first measurement: the ToolSpec name / definition-digest check
of ``_prepare``; the envelope type-vs-wire-name check (``or`` → ``and``); an empty command
id in a hand-built envelope; an ``AcceptInput`` input without a digest. The two missed
bugs: a Prepare whose base is *ahead* of the Run; ``evolve`` folding ``ToolCallCompleted``
onto a call that is not EXECUTING. Then the survivors of the measurement in RESULTS.md:
every refusal's ``reason`` attribute (callers act on it), the groups' exact facts
(failure messages, usage, effects) and the fold's guards. Errors are checked by type and
attributes (``reason``, ``command``, ``fact``, ``phase``), not by message text.
"""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol._decide import CANCEL_MESSAGE, CANCEL_UNKNOWN_MESSAGE, decide
from runx_actors.protocol._evolve import evolve, valid_run_end
from runx_actors.protocol.commit import (
    CommandEnvelope,
    CommitRequest,
    CommitStatus,
    fold_run,
)
from runx_actors.protocol.digests import decision_digest
from runx_actors.protocol.errors import (
    CommandConflictError,
    CorruptLogError,
    EvolveError,
    PreconditionError,
    StaleRuntimeError,
)
from runx_actors.protocol.ids import derive_model_request_command_id, derive_model_step_id
from runx_actors.protocol.state import OPEN, MachineState, ToolStep
from runx_actors.protocol.values import (
    AgentInput,
    Failure,
    FailureClass,
    ModelRejectDisposition,
    ResponseKind,
    ResponsePolicy,
    RunFailedEnd,
    RunFailure,
    RunReason,
    RunStatus,
    RunStoppedEnd,
    ToolFailureOutcome,
    ToolSpec,
    Usage,
)
from runx_actors.testing import builders as B

RUN = "run-1"
APPROVAL = B.tool_spec("deploy", policy=ResponsePolicy.APPROVAL_REQUIRED)
EXTERNAL = B.tool_spec("ask_human", policy=ResponsePolicy.EXTERNAL_RESPONSE)


def fresh(*inputs: str) -> B.SimpleLog:
    return B.SimpleLog.with_run(RUN, inputs)


def executing(*inputs: str, tools: tuple[B.OfferedTool, ...] = ()) -> B.SimpleLog:
    log = fresh(*inputs)
    log.apply(B.prepare(log.state(), log.position(), tools=tools))
    log.apply(B.start_model(log.state()))
    return log


def tool_step(calls: list[tuple[str, str]], tools: tuple[B.OfferedTool, ...]) -> B.SimpleLog:
    log = executing("in-1", tools=tools)
    log.apply(B.model_result(log.state(), tool_calls=calls))
    assert isinstance(log.state().current, ToolStep)
    return log


def refusal(state: MachineState, built: B.Built | C.Command) -> PreconditionError:
    command = built[1] if isinstance(built, tuple) else built
    with pytest.raises(PreconditionError) as info:
        decide(state, command)
    assert info.value.command is command  # type: ignore[attr-defined]
    assert info.value.phase is not None  # type: ignore[attr-defined]
    return info.value


def fold_refusal(state: MachineState, fact: Any) -> EvolveError:
    with pytest.raises(EvolveError) as info:
        evolve(state, fact)
    assert info.value.fact is fact  # type: ignore[attr-defined]
    return info.value


def commit_error(log: B.SimpleLog, request: CommitRequest) -> Exception:
    before = log.facts()
    with pytest.raises(Exception) as info:
        log.submit(request)
    assert log.facts() == before
    return info.value


# -- the four survivors of the measurement ---------------------------------------


def test_prepare_refuses_tool_specs_that_do_not_match_the_request() -> None:
    """``_prepare``: one ToolSpec per request tool, naming it, with its definition digest."""
    log = fresh("in-1")
    state, position = log.state(), log.position()
    cid, good = B.prepare(state, position, tools=("search", "fetch"))
    assert isinstance(good, C.PrepareModelRequest)
    renamed = attrs.evolve(good, tools=(attrs.evolve(good.tools[0], name="other"),
                                        good.tools[1]))
    wrong_digest = attrs.evolve(good, tools=(attrs.evolve(
        good.tools[0], definition_digest=good.tools[1].definition_digest), good.tools[1]))
    missing = attrs.evolve(good, tools=good.tools[:1])
    for bad, reason in ((renamed, "tool spec 'other' does not name its definition"),
                        (wrong_digest, "definition digest of 'search' does not match"),
                        (missing, "one ToolSpec per request tool")):
        assert refusal(state, bad).reason == reason  # type: ignore[attr-defined]
        err = commit_error(log, log.request(cid, bad, base=position))
        assert isinstance(err, StaleRuntimeError)
    assert decide(state, good)[0] == F.ModelStepPrepared(
        step_id=good.step_id, model=good.model, request_digest=good.request_digest,
        input_ids=("in-1",), tools=good.tools)


def test_envelope_type_must_name_its_command() -> None:
    """evaluate_commit step 3: a hand-built envelope whose type names another command."""
    log = fresh("in-1")
    cid, command = B.accept_input(log.state(), "in-2")
    for wrong in ("start_tool_call", "", "accept_inputs"):
        request = CommitRequest(log.position(), CommandEnvelope(wrong, RUN, cid, command))
        err = commit_error(log, request)
        assert isinstance(err, CommandConflictError)
        assert err.reason == "envelope"  # type: ignore[attr-defined]
    ok = CommitRequest(log.position(), CommandEnvelope("accept_input", RUN, cid, command))
    assert log.submit(ok).status is CommitStatus.ACCEPTED


def test_hand_built_envelope_with_an_empty_command_id_is_refused() -> None:
    """evaluate_commit step 3: ``envelope`` refuses an empty id; a hand-built one must be
    refused too — even for CancelRun, whose id is free (no derivation catches it)."""
    log = fresh("in-1")
    for command in (C.CancelRun(), B.accept_input(log.state(), "in-2")[1]):
        request = CommitRequest(log.position(), CommandEnvelope(
            type(command).WIRE_NAME, RUN, "", command))
        err = commit_error(log, request)
        assert isinstance(err, CommandConflictError)
        assert err.reason == "envelope"  # type: ignore[attr-defined]
    assert log.state().status is RunStatus.ACTIVE


@pytest.mark.parametrize(("input_id", "digest"), [("in-2", ""), ("", "sha256:" + "1" * 64)])
def test_accept_input_without_id_or_digest_is_the_refusal(input_id: str, digest: str) -> None:
    """decide refuses it (PreconditionError → StaleRuntimeError at commit), never an
    EvolveError escaping from the fold."""
    log = fresh("in-1")
    command = C.AcceptInput((AgentInput(input_id, digest),))
    err = refusal(log.state(), command)
    assert err.reason == "every input needs an id and a digest"  # type: ignore[attr-defined]
    cid = "cid-" + input_id
    failure = commit_error(log, CommitRequest(log.position(), CommandEnvelope(
        "accept_input", RUN, cid, command)))
    assert not isinstance(failure, EvolveError)
    assert isinstance(failure, StaleRuntimeError | CommandConflictError)


def test_accept_input_empty_batch_reason() -> None:
    log = fresh()
    err = refusal(log.state(), C.AcceptInput(()))
    assert err.reason == "empty input batch"  # type: ignore[attr-defined]


# -- the two missed bugs -------------------------------------------------------------------


@pytest.mark.parametrize("offset", [-1, 1, 5])
def test_prepare_base_behind_or_ahead_is_stale(offset: int) -> None:
    """The hard CAS compares ``base`` with the position for equality: a base ahead of the
    Run (a snapshot from the future) is refused like one behind it."""
    log = fresh("in-1")
    log.apply(B.accept_input(log.state(), "in-2"))
    position = log.position()
    base = position + offset
    cid, command = B.prepare(log.state(), base)
    assert cid == derive_model_request_command_id(RUN, base)  # its own derived id
    assert command.step_id == derive_model_step_id(RUN, cid)  # type: ignore[attr-defined]
    err = commit_error(log, CommitRequest(base, CommandEnvelope(
        "prepare_model_request", RUN, cid, command)))
    assert isinstance(err, StaleRuntimeError)
    assert (err.base, err.position) == (base, position)  # type: ignore[attr-defined]
    log.apply(B.prepare(log.state(), position))  # the current base is accepted


def test_tool_call_completed_only_folds_onto_an_executing_call() -> None:
    """``evolve`` refuses ToolCallCompleted for a PENDING call and for a FAILED one;
    ``fold_run`` of such a log raises CorruptLogError naming the fact."""
    log = tool_step([("search", "{}"), ("search", "{}")], ("search",))
    start = B.start_tool(log.state(), 0)
    log.apply(start)
    log.apply(B.tool_failure(log.state(), 0))
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    failed, pending = cur.calls
    effect = failed.effect
    for call, eff in ((failed, effect), (pending, effect)):
        fact = F.ToolCallCompleted(step_id=cur.id, call_id=call.call_id, effect=eff,
                                   output_digest="sha256:" + "2" * 64)
        err = fold_refusal(state, fact)
        assert err.reason.endswith("not executing")  # type: ignore[attr-defined]
        with pytest.raises(CorruptLogError) as info:
            fold_run((*log.facts(), fact), run_id=RUN)
        assert info.value.index == len(log.facts())  # type: ignore[attr-defined]
        assert info.value.wire_name == "tool_call_completed"  # type: ignore[attr-defined]


# -- survivors of the RESULTS.md measurement: decide ---------------------------------------


def test_decide_refusal_reasons() -> None:
    """Every refusal names its reason (an attribute callers act on) and the phase."""
    log = executing("in-1")
    running = log.state()
    cases: list[tuple[MachineState, C.Command | B.Built, str]] = []
    prepared_log = fresh("in-1")
    prepared_log.apply(B.prepare(prepared_log.state(), prepared_log.position()))
    cases.append((prepared_log.state(), B.withdraw(prepared_log.state()),
                  "withdraw needs pending inputs"))
    cases.append((running, B.model_failure(running, failure_class=""),
                  "failure class is required"))
    _, reject = B.reject_model_result(running)
    cases.append((running, attrs.evolve(reject, disposition="retry"),
                  "disposition must be RETRY or FAIL_RUN"))
    cases.append((running, B.cancel(running, reason="bored"),
                  "cancel reason must be '' or 'cancelled'"))
    tools = tool_step([("deploy", "{}"), ("ask_human", "{}"), ("search", "{}")],
                      (APPROVAL, EXTERNAL, "search"))
    ts = tools.state()
    cases.append((ts, B.decline(ts, 2, failure_class=FailureClass.EFFECT_UNKNOWN),
                  "a decline needs a class other than effect_unknown"))
    _, approve = B.approve(ts, 0)
    cases.append((ts, attrs.evolve(approve, response_digest=decision_digest(
        ResponseKind.APPROVAL, "approved", "why")),
        "response digest is not the approval decision"))
    cases.append((ts, attrs.evolve(approve, response_id="other"),
                  "response id does not match the waiting request"))
    ext = ts.current.calls[1]  # type: ignore[union-attr]
    cases.append((ts, attrs.evolve(approve, call_id=ext.call_id, response_id=ext.waiting.id),
                  "call does not wait for approval"))
    _, answer = B.answer(ts, 1, '{"a":1}')
    cases.append((ts, attrs.evolve(answer, response_digest="sha256:" + "3" * 64),
                  "response digest does not match the payload"))
    appr = ts.current.calls[0]  # type: ignore[union-attr]
    cases.append((ts, attrs.evolve(answer, call_id=appr.call_id, response_id=appr.waiting.id),
                  "call does not wait for external_response"))
    _, reject_call = B.reject(ts, 0, "no")
    cases.append((ts, attrs.evolve(reject_call, reason="other"),
                  "response digest is not the rejection decision"))
    for state, built, reason in cases:
        err = refusal(state, built)
        assert err.reason == reason, (built, err)  # type: ignore[attr-defined]


def test_decide_groups_carry_their_exact_values() -> None:
    """The facts keep the command's effect, usage, failure and messages."""
    log = executing("in-1")
    running = log.state()
    step = running.current
    usage = Usage(input_tokens=3, output_tokens=4)
    _, reject = B.reject_model_result(running, usage=usage, message="bad json",
                                      disposition=ModelRejectDisposition.FAIL_RUN)
    rejected, ended = decide(running, reject)
    assert rejected == F.ModelStepRejected(step_id=step.id, effect=step.effect,  # type: ignore[union-attr]
                                           usage=usage, failure=reject.failure)  # type: ignore[attr-defined]
    assert ended == F.RunEnded(RunFailedEnd(RunReason.MALFORMED_MODEL_RESULT, RunFailure(
        FailureClass.MALFORMED_MODEL_RESULT, "bad json")))
    _, recover = B.recover_model(running)
    assert decide(running, recover) == (F.ModelStepRecovered(step.id, step.effect),)  # type: ignore[union-attr]
    failed, end = decide(running, B.model_failure(running, message="down")[1])
    assert failed == F.ModelStepFailed(step_id=step.id, effect=step.effect,  # type: ignore[union-attr]
                                       failure=Failure(FailureClass.PROVIDER_FAILURE, "down"))
    assert end.end == RunFailedEnd(RunReason.PROVIDER_FAILURE, RunFailure(  # type: ignore[attr-defined]
        FailureClass.PROVIDER_FAILURE, "down"))
    # cancel: the messages of the failures it writes
    assert decide(running, C.CancelRun())[0].failure == Failure(  # type: ignore[attr-defined]
        FailureClass.EFFECT_UNKNOWN, CANCEL_UNKNOWN_MESSAGE)
    tools = tool_step([("deploy", "{}"), ("search", "{}")], (APPROVAL, "search"))
    tools.apply(B.start_tool(tools.state(), 1))
    waiting_fail, executing_fail, _ = decide(tools.state(), C.CancelRun())
    assert waiting_fail.failure == Failure(FailureClass.CANCELLED, CANCEL_MESSAGE)  # type: ignore[attr-defined]
    assert executing_fail.failure == Failure(FailureClass.EFFECT_UNKNOWN,  # type: ignore[attr-defined]
                                             CANCEL_UNKNOWN_MESSAGE)


@pytest.mark.parametrize(("spec", "klass"), [(APPROVAL, FailureClass.PERMISSION_DENIED),
                                             (EXTERNAL, FailureClass.RESPONSE_REJECTED)])
def test_rejecting_a_waiting_call_names_its_kind(spec: ToolSpec, klass: str) -> None:
    log = tool_step([(spec.name, "{}")], (spec,))
    (fact,) = decide(log.state(), B.reject(log.state(), 0, "no")[1])
    assert isinstance(fact, F.ToolCallFailed)
    assert (fact.failure, fact.outcome, fact.effect) == (
        Failure(klass, "no"), ToolFailureOutcome.KNOWN, "")


# -- survivors of the RESULTS.md measurement: evolve ---------------------------------------


def test_valid_run_end() -> None:
    assert valid_run_end(RunStoppedEnd(RunReason.CANCELLED))
    assert not valid_run_end(RunStoppedEnd(RunReason.NONE))
    assert not valid_run_end(RunStoppedEnd("cancelled"))  # type: ignore[arg-type]
    assert valid_run_end(RunFailedEnd(RunReason.PROVIDER_FAILURE, RunFailure("x")))
    assert not valid_run_end(RunFailedEnd(RunReason.NONE, RunFailure("x")))
    assert not valid_run_end(RunFailedEnd(RunReason.PROVIDER_FAILURE, RunFailure("")))
    assert not valid_run_end(RunFailedEnd("provider_failure", RunFailure("x")))  # type: ignore[arg-type]
    assert not valid_run_end(object())
    assert not valid_run_end(None)


def test_fold_guards_and_their_reasons() -> None:
    log = executing("in-1")
    running = log.state()
    step = running.current
    bad_end = F.RunEnded(RunStoppedEnd(RunReason.NONE))
    assert fold_refusal(running, bad_end).reason == "invalid end"  # type: ignore[attr-defined]
    ok_end = F.RunEnded(RunStoppedEnd(RunReason.CANCELLED))
    assert fold_refusal(running, ok_end).reason == (  # type: ignore[attr-defined]
        "the model step is still executing")
    for fact in (F.ModelStepFailed(step_id=step.id, effect=step.effect,  # type: ignore[union-attr]
                                   failure=Failure("")),
                 F.ModelStepFailed(step_id=step.id, effect="",  # type: ignore[union-attr]
                                   failure=Failure(FailureClass.PROVIDER_FAILURE))):
        assert fold_refusal(running, fact).reason == (  # type: ignore[attr-defined]
            "effect and failure class are required")
    after = evolve(running, F.ModelStepFailed(step_id=step.id, effect=step.effect,  # type: ignore[union-attr]
                                              failure=Failure(FailureClass.PROVIDER_FAILURE)))
    assert after.current == OPEN and after.status is RunStatus.ACTIVE
    recovered = evolve(running, F.ModelStepRecovered(step.id, step.effect))  # type: ignore[union-attr]
    assert recovered.current == OPEN
    assert recovered.model_steps == running.model_steps - 1
    prepared = fresh("in-1")
    prepared.apply(B.prepare(prepared.state(), prepared.position()))
    withdrawn = F.ModelStepWithdrawn(prepared.state().current.id)  # type: ignore[union-attr]
    assert fold_refusal(prepared.state(), withdrawn).reason == (  # type: ignore[attr-defined]
        "withdraw needs pending inputs")


def test_run_end_refused_while_any_tool_call_executes() -> None:
    """Only-EXECUTING calls (and one EXECUTING among others) block RunEnded."""
    one = tool_step([("search", "{}")], ("search",))
    one.apply(B.start_tool(one.state(), 0))
    two = tool_step([("search", "{}"), ("search", "{}")], ("search",))
    two.apply(B.start_tool(two.state(), 0))
    end = F.RunEnded(RunStoppedEnd(RunReason.CANCELLED))
    for log in (one, two):
        assert fold_refusal(log.state(), end).reason == (  # type: ignore[attr-defined]
            "a tool call is still executing")


def test_run_result_keeps_the_usage() -> None:
    log = executing("in-1")
    usage = Usage(input_tokens=5, output_tokens=7)
    result = log.apply(B.model_result(log.state(), text="done", usage=usage))
    state = result.snapshot.state
    assert state.status is RunStatus.COMPLETED
    assert state.result is not None and state.result.usage == usage
    for end in (RunStoppedEnd(RunReason.CANCELLED),
                RunFailedEnd(RunReason.PROVIDER_FAILURE, RunFailure("x"))):
        other = fresh("in-1")
        other.apply(B.prepare(other.state(), other.position()))
        other.apply(B.start_model(other.state()))
        other.apply(B.model_result(other.state(), tool_calls=[("search", "{}")],
                                   usage=usage))
        ended = evolve(other.state(), F.RunEnded(end))
        assert ended.result is not None and ended.result.usage == usage


@pytest.mark.parametrize("kind", ["approved", "answered"])
def test_responses_fold_only_onto_their_kind(kind: str) -> None:
    log = tool_step([("deploy", "{}"), ("ask_human", "{}")], (APPROVAL, EXTERNAL))
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    approval, external = cur.calls
    target = external if kind == "approved" else approval
    assert target.waiting is not None
    fact: Any
    if kind == "approved":
        fact = F.ToolCallApproved(step_id=cur.id, call_id=target.call_id,
                                  response_id=target.waiting.id,
                                  response_digest=decision_digest(ResponseKind.APPROVAL,
                                                                  "approved"))
        want = "call is not waiting for approval"
    else:
        fact = F.ToolCallAnswered(step_id=cur.id, call_id=target.call_id,
                                  response_id=target.waiting.id,
                                  response_digest="sha256:" + "4" * 64)
        want = "call is not waiting for external_response"
    assert fold_refusal(state, fact).reason == want  # type: ignore[attr-defined]
    mine = approval if kind == "approved" else external
    assert mine.waiting is not None
    wrong_id = attrs.evolve(fact, call_id=mine.call_id, response_id="other")
    assert fold_refusal(state, wrong_id).reason == "response id does not match"  # type: ignore[attr-defined]
    not_waiting = attrs.evolve(fact, call_id=mine.call_id)
    done = evolve(state, attrs.evolve(not_waiting, response_id=mine.waiting.id))
    assert fold_refusal(done, attrs.evolve(not_waiting, response_id=mine.waiting.id)).reason \
        == "call is not waiting"  # type: ignore[attr-defined]
    if kind == "approved":
        bad = attrs.evolve(fact, call_id=mine.call_id, response_id=mine.waiting.id,
                           response_digest="sha256:" + "5" * 64)
        assert fold_refusal(state, bad).reason == (  # type: ignore[attr-defined]
            "response digest is not the approval decision")
    else:
        bad = attrs.evolve(fact, call_id=mine.call_id, response_id=mine.waiting.id,
                           response_digest="")
        assert fold_refusal(state, bad).reason == "response_digest is required"  # type: ignore[attr-defined]


@pytest.mark.parametrize("queued", [True, False])
def test_duplicate_input_id_is_a_conflict_naming_it(queued: bool) -> None:
    """decide's identity refusal: an input id already pending, or twice in one batch."""
    log = fresh("in-1")
    batch = (B.agent_input("in-1"),) if queued else (B.agent_input("in-2"),) * 2
    command = C.AcceptInput(batch)
    with pytest.raises(CommandConflictError) as info:
        decide(log.state(), command)
    assert info.value.command is command  # type: ignore[attr-defined]
    expected = "input id 'in-1' already queued" if queued else "input id 'in-2' already queued"
    assert info.value.reason == expected  # type: ignore[attr-defined]


# -- survivors of the second measurement: tool settlements ---------------------------------


def _running_tool() -> tuple[B.SimpleLog, MachineState]:
    log = tool_step([("search", "{}"), ("search", "{}")], ("search",))
    log.apply(B.start_tool(log.state(), 0))
    return log, log.state()


def test_tool_settlement_refusal_reasons() -> None:
    _, state = _running_tool()
    cases: list[tuple[C.Command, str]] = []
    _, ok = B.tool_result(state, 0, '{"a":1}')
    for empty in ("", "null", '""'):
        cases.append((attrs.evolve(ok, result=attrs.evolve(ok.result, output=empty)),  # type: ignore[attr-defined]
                      "tool output must not be empty or null"))
    _, fail = B.tool_failure(state, 0)
    known = "a KNOWN failure needs a class other than effect_unknown"
    cases.append((attrs.evolve(fail, failure=Failure("")), known))
    cases.append((attrs.evolve(fail, failure=Failure(FailureClass.EFFECT_UNKNOWN)), known))
    cases.append((attrs.evolve(fail, outcome=ToolFailureOutcome.UNKNOWN,
                               failure=Failure(FailureClass.EXECUTION_FAILED)),
                  "an UNKNOWN failure has class effect_unknown"))
    cases.append((attrs.evolve(fail, outcome="lost"), "outcome must be KNOWN or UNKNOWN"))
    for command, reason in cases:
        assert refusal(state, command).reason == reason, command  # type: ignore[attr-defined]


def test_unknown_tool_failure_keeps_its_message_under_effect_unknown() -> None:
    _, state = _running_tool()
    _, fail = B.tool_failure(state, 0, failure_class="", message="lost the worker",
                             outcome=ToolFailureOutcome.UNKNOWN)
    (fact,) = decide(state, fail)
    assert fact.failure == Failure(FailureClass.EFFECT_UNKNOWN, "lost the worker")  # type: ignore[attr-defined]
    assert fact.outcome is ToolFailureOutcome.UNKNOWN  # type: ignore[attr-defined]


def test_tool_settlement_fold_guards() -> None:
    _, state = _running_tool()
    cur = state.current
    assert isinstance(cur, ToolStep)
    running, pending = cur.calls
    digest = "sha256:" + "6" * 64

    def completed(**kw: Any) -> F.ToolCallCompleted:
        fields = {"step_id": cur.id, "call_id": running.call_id, "effect": running.effect,
                  "output_digest": digest, **kw}
        return F.ToolCallCompleted(**fields)

    def failed(**kw: Any) -> F.ToolCallFailed:
        fields = {"step_id": cur.id, "call_id": running.call_id, "effect": running.effect,
                  "failure": Failure(FailureClass.EXECUTION_FAILED),
                  "outcome": ToolFailureOutcome.KNOWN, **kw}
        return F.ToolCallFailed(**fields)

    cases: list[tuple[MachineState, Any, str]] = [
        (state, completed(output_digest=""), "output_digest is required"),
        (state, completed(effect="e" * 64), "effect is not the running one"),
        (state, failed(effect="e" * 64), "effect is not the call's effect"),
        (state, failed(call_id=pending.call_id, effect="", outcome=ToolFailureOutcome.UNKNOWN,
                       failure=Failure(FailureClass.EFFECT_UNKNOWN)),
         "UNKNOWN only from EXECUTING"),
        (state, failed(failure=Failure("")), "failure class is required"),
        (state, failed(failure=Failure(FailureClass.EFFECT_UNKNOWN)),
         "failure class and outcome disagree"),
        (state, failed(outcome=ToolFailureOutcome.UNKNOWN), "failure class and outcome disagree"),
    ]
    done = evolve(state, failed())
    cases.append((done, failed(), "call is already failed"))
    for at, fact, reason in cases:
        assert fold_refusal(at, fact).reason == reason, fact  # type: ignore[attr-defined]


def test_settling_another_effect_and_the_completed_result() -> None:
    _, state = _running_tool()
    cur = state.current
    assert isinstance(cur, ToolStep)
    _, ok = B.tool_result(state, 0, '{"a":1}')
    for wrong in (attrs.evolve(ok, effect="e" * 64),
                  attrs.evolve(B.tool_failure(state, 0)[1], effect="e" * 64)):
        assert refusal(state, wrong).reason == "effect is not the running one"  # type: ignore[attr-defined]
    (fact,) = decide(state, ok)
    after = evolve(state, fact)
    assert isinstance(after.current, ToolStep)
    call = after.current.calls[0]
    assert call.result is not None
    assert call.result.output_digest == fact.output_digest  # type: ignore[attr-defined]
