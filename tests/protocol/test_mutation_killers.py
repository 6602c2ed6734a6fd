"""Direct tests for the defects mutation testing and seeded bugs showed the suite missed
(issue 13 item 8; ``mutmut run``, bench/RESULTS.md "Mutation testing").

The four survivors of the first measurement: the ToolSpec name / definition-digest check
of ``_prepare``; the envelope type-vs-wire-name check (``or`` → ``and``); an empty command
id in a hand-built envelope; an ``AcceptInput`` input without a digest. The two missed
bugs: a Prepare whose base is *ahead* of the Run; ``evolve`` folding ``ToolCallCompleted``
onto a call that is not EXECUTING; and a third, ``derive_input_command_id`` hashing only
the first input of a batch (checked against an independent framing of spec §3.2). Then the
survivors of the measurements in RESULTS.md:
every refusal's ``reason`` attribute (callers act on it), the groups' exact facts
(failure messages, usage, effects) and the fold's guards. Errors are checked by type and
attributes (``reason``, ``command``, ``fact``, ``phase``); the ``refusal`` and
``fold_refusal`` helpers also pin the message framing (``"<Type>: <reason>"``), and
``test_messages.py`` checks the exact text of every other raise site.
"""

from __future__ import annotations

import copy
import hashlib
from typing import Any

import attrs
import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol import commit as commit_module
from runx_actors.protocol import facts as F
from runx_actors.protocol._decide import CANCEL_MESSAGE, CANCEL_UNKNOWN_MESSAGE, Phase, decide
from runx_actors.protocol._evolve import evolve, valid_run_end
from runx_actors.protocol.commit import (
    Append,
    CommandEnvelope,
    CommitRequest,
    CommitStatus,
    Replay,
    Snapshot,
    check_batch,
    create_group,
    envelope,
    evaluate_batch,
    evaluate_commit,
    expected_command_ids,
    fold_run,
    initialize_run,
    predict_commit,
    validate_identity,
)
from runx_actors.protocol.digests import decision_digest, digest_model_result
from runx_actors.protocol.errors import (
    CommandConflictError,
    CorruptLogError,
    EvolveError,
    PreconditionError,
    RunNotFoundError,
    RunTerminalError,
    StaleRuntimeError,
    ValidationError,
)
from runx_actors.protocol.ids import (
    derive,
    derive_call_id,
    derive_effect_id,
    derive_input_command_id,
    derive_model_request_command_id,
    derive_model_step_id,
    derive_recovery_command_id,
    derive_response_id,
    derive_settlement_command_id,
    derive_start_command_id,
    derive_tool_step_id,
)
from runx_actors.protocol.state import OPEN, MachineState, ModelStep, ToolCallState, ToolStep
from runx_actors.protocol.values import (
    AgentInput,
    Failure,
    FailureClass,
    ModelRejectDisposition,
    ModelStepStatus,
    NewRun,
    ResponseKind,
    ResponsePolicy,
    ResponseRequest,
    RunCompletedEnd,
    RunFailedEnd,
    RunFailure,
    RunReason,
    RunResult,
    RunStatus,
    RunStoppedEnd,
    ToolCallBinding,
    ToolCallFailure,
    ToolCallResult,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolPlacement,
    ToolReplay,
    ToolScheduling,
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
    # the user-visible text: "<CommandType>: <reason>" (the callers check the reason)
    assert str(info.value) == f"{type(command).__name__}: {info.value.reason}"  # type: ignore[attr-defined]
    return info.value


def fold_refusal(state: MachineState, fact: Any) -> EvolveError:
    with pytest.raises(EvolveError) as info:
        evolve(state, fact)
    assert info.value.fact is fact  # type: ignore[attr-defined]
    # the user-visible text: "<FactType>: <reason>" (the callers check the reason)
    assert str(info.value) == f"{type(fact).__name__}: {info.value.reason}"  # type: ignore[attr-defined]
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
    for wrong in ("start_tool_call", "", "accept_inputs", C.CancelRun.WIRE_NAME):
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
    cid = derive_input_command_id(RUN, input_id)  # its own derived id: only decide refuses
    failure = commit_error(log, CommitRequest(log.position(), CommandEnvelope(
        "accept_input", RUN, cid, command)))
    assert isinstance(failure, StaleRuntimeError)
    assert failure.reason == "every input needs an id and a digest"  # type: ignore[attr-defined]


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
    # the pending call with its own (empty) effect and with the failed call's: only the
    # status guard refuses the first
    for call, eff in ((failed, effect), (pending, pending.effect), (pending, effect)):
        fact = F.ToolCallCompleted(step_id=cur.id, call_id=call.call_id, effect=eff,
                                   output_digest="sha256:" + "2" * 64)
        err = fold_refusal(state, fact)
        assert err.reason.endswith("not executing")  # type: ignore[attr-defined]
        with pytest.raises(CorruptLogError) as info:
            fold_run((*log.facts(), fact), run_id=RUN)
        assert info.value.index == len(log.facts())  # type: ignore[attr-defined]
        assert info.value.wire_name == "tool_call_completed"  # type: ignore[attr-defined]


def _framed(namespace: str, *parts: str) -> str:
    """§3.2 written out independently of runx_actors.protocol.ids."""
    data = b"".join(b"%d:%s" % (len(p.encode("utf-8")), p.encode("utf-8"))
                    for p in (namespace, *parts))
    return hashlib.sha256(data).hexdigest()


def test_input_command_id_hashes_every_input_of_the_batch() -> None:
    """A third seeded bug: ``derive_input_command_id`` hashing only the first input."""
    derive.cache_clear()  # computed here, not remembered from another test
    batch = derive_input_command_id(RUN, "in-a", "in-b")
    assert batch == _framed("twilight/input-command", RUN, "in-a", "in-b")
    assert batch != derive_input_command_id(RUN, "in-a")
    log = fresh("in-0")
    command = C.AcceptInput((B.agent_input("in-a"), B.agent_input("in-b")))
    err = commit_error(log, log.request(derive_input_command_id(RUN, "in-a"), command))
    assert isinstance(err, CommandConflictError)
    assert err.reason == "non-derived id"  # type: ignore[attr-defined]


def test_replay_of_a_known_id_after_the_run_ended_answers_already_applied() -> None:
    """Step 1 (replay lookup) comes before step 2 (locate): a known id replays even after
    the Run ended, with the facts it wrote."""
    log = fresh("in-1")
    log.apply(B.cancel(log.state()))
    commit = log.commits[-1]
    decision = evaluate_commit(log, log.request(commit.commit_id, C.CancelRun("cancelled")))
    assert decision == Replay(commit.facts)


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


# -- survivors of the third measurement: the fold's guards for foreign facts (spec §2.7) ---
# A log written by something other than decide: each guard of §2.7 refuses its fact with
# EvolveError (and fold_run with CorruptLogError), and its reason names the rule broken.

DEPLOY = B.tool_spec("deploy", policy=ResponsePolicy.APPROVAL_REQUIRED,
                     replay=ToolReplay.NEVER, placement=ToolPlacement.WORKSPACE)


def _opening() -> tuple[MachineState, MachineState, F.ToolStepOpened]:
    """(the EXECUTING state, the Open state after ModelStepCompleted, the ToolStepOpened)
    of a model result calling an approval tool then a direct one."""
    log = executing("in-1", tools=(DEPLOY, "search"))
    running = log.state()
    _, submit = B.model_result(running, tool_calls=[("deploy", '{"x":1}'), ("search", "{}")],
                               scheduling=ToolScheduling("sequential", 1))
    completed, opened = decide(running, submit)
    assert isinstance(opened, F.ToolStepOpened)
    return running, evolve(running, completed), opened


def test_tool_step_opened_folds_every_binding_field() -> None:
    """F9: each call PENDING (direct) or WAITING with ``waiting = binding.response``; the
    step keeps its id, source and scheduling."""
    _, open_state, opened = _opening()
    after = evolve(open_state, opened)
    step = after.current
    assert isinstance(step, ToolStep)
    assert (step.id, step.source, step.scheduling) == (
        opened.step_id, opened.source, ToolScheduling("sequential", 1))
    approval, direct = opened.calls
    assert approval.response is not None and direct.response is None
    assert step.calls == (
        ToolCallState(call_id=approval.call_id, provider_call_id="provider-0",
                      tool_ref="deploy", definition_digest=DEPLOY.definition_digest,
                      arguments='{"x":1}', policy=ResponsePolicy.APPROVAL_REQUIRED,
                      replay=ToolReplay.NEVER, placement=ToolPlacement.WORKSPACE,
                      status=ToolCallStatus.WAITING, waiting=approval.response),
        ToolCallState(call_id=direct.call_id, provider_call_id="provider-1",
                      tool_ref="search", definition_digest=direct.definition_digest,
                      arguments="{}", status=ToolCallStatus.PENDING),
    )
    assert after.pending_inputs == open_state.pending_inputs
    assert after.model_steps == open_state.model_steps


def test_tool_step_opened_guards() -> None:
    running, state, opened = _opening()
    approval, direct = opened.calls
    assert approval.response is not None
    response = approval.response

    def calls(*bs: ToolCallBinding) -> F.ToolStepOpened:
        return attrs.evolve(opened, calls=bs)

    def asked(**kw: Any) -> F.ToolStepOpened:
        return calls(attrs.evolve(approval, response=attrs.evolve(response, **kw)), direct)

    mismatch = "response request does not match its call"
    cases: list[tuple[MachineState, F.ToolStepOpened, str]] = [
        (running, opened, "current is not Open"),
        (state, calls(), "a ToolStep needs at least one call"),
        (state, attrs.evolve(opened, step_id=""), "step_id and source are required"),
        (state, attrs.evolve(opened, source=""), "step_id and source are required"),
        (state, attrs.evolve(opened, scheduling=ToolScheduling("random")), "invalid scheduling"),
        (state, attrs.evolve(opened, scheduling=ToolScheduling("", -1)), "invalid scheduling"),
        (state, attrs.evolve(opened, scheduling=ToolScheduling("", True)),  # type: ignore[arg-type]
         "invalid scheduling"),
        (state, attrs.evolve(opened, source="step-other"),
         "step_id is not derive_tool_step_id(source)"),
        (state, calls(approval, attrs.evolve(direct, call_id="")),
         "call ids must be non-empty and unique"),
        (state, calls(approval, attrs.evolve(direct, call_id=approval.call_id)),
         "call ids must be non-empty and unique"),
        (state, calls(approval, attrs.evolve(direct, tool_ref="")),
         "tool_ref and arguments are required"),
        (state, calls(approval, attrs.evolve(direct, arguments="")),
         "tool_ref and arguments are required"),
        (state, calls(approval, attrs.evolve(direct, response=response)),
         "a response request on a direct call"),
        (state, calls(attrs.evolve(approval, response=None), direct),
         "a waiting-policy call needs a response request"),
        (state, asked(run_id="run-2"), mismatch),
        (state, asked(step_id="step-other"), mismatch),
        (state, asked(call_id=direct.call_id), mismatch),
        (state, asked(kind=ResponseKind.EXTERNAL_RESPONSE), mismatch),
        (state, asked(id="resp-other"), mismatch),
        (state, asked(payload="{}"), mismatch),
    ]
    for at, fact, reason in cases:
        assert fold_refusal(at, fact).reason == reason, (fact, reason)  # type: ignore[attr-defined]
    # an EXTERNAL_RESPONSE call must carry kind external_response, not approval
    external = attrs.evolve(approval, policy=ResponsePolicy.EXTERNAL_RESPONSE)
    assert fold_refusal(state, calls(external, direct)).reason == mismatch  # type: ignore[attr-defined]
    good = attrs.evolve(response, kind=ResponseKind.EXTERNAL_RESPONSE,
                        id=derive_response_id(RUN, opened.step_id, approval.call_id,
                                              ResponseKind.EXTERNAL_RESPONSE.value))
    folded = evolve(state, calls(attrs.evolve(external, response=good), direct))
    assert folded.current.calls[0].waiting == good  # type: ignore[union-attr]


def _prepared_fact(log: B.SimpleLog) -> F.ModelStepPrepared:
    (fact,) = decide(log.state(), B.prepare(log.state(), log.position(), tools=("search",))[1])
    assert isinstance(fact, F.ModelStepPrepared)
    return fact


def test_model_step_prepared_guards_and_fold() -> None:
    """F2 and its §2.7 guard: Open; step_id, model, request_digest non-empty; input_ids
    exactly the pending ids in order."""
    log = fresh("in-1", "in-2")
    state = log.state()
    fact = _prepared_fact(log)
    after = evolve(state, fact)
    assert after.current == ModelStep(id=fact.step_id, model=fact.model,
                                      request_digest=fact.request_digest, tools=fact.tools,
                                      status=ModelStepStatus.PREPARED)
    assert (after.pending_inputs, after.model_steps) == ((), state.model_steps + 1)
    required = "step_id, model and request_digest are required"
    order = "input_ids must equal the pending inputs, in order"
    for bad, reason in ((attrs.evolve(fact, step_id=""), required),
                        (attrs.evolve(fact, model=""), required),
                        (attrs.evolve(fact, request_digest=""), required),
                        (attrs.evolve(fact, input_ids=("in-2", "in-1")), order),
                        (attrs.evolve(fact, input_ids=("in-1",)), order),
                        (attrs.evolve(fact, input_ids=("in-1", "in-2", "in-3")), order)):
        assert fold_refusal(state, bad).reason == reason, bad  # type: ignore[attr-defined]
    assert fold_refusal(after, fact).reason == "current is not Open"  # type: ignore[attr-defined]


def test_model_step_facts_name_the_current_step_in_its_status() -> None:
    """Every model-step fact names the current ModelStep; Withdrawn/Started need it
    PREPARED, the settlements EXECUTING; a named effect is the running one."""
    log = fresh("in-1")
    open_state = log.state()
    log.apply(B.prepare(log.state(), log.position()))
    prepared = log.state()
    step = prepared.current
    assert isinstance(step, ModelStep)
    effect = derive_effect_id(RUN, step.id, "", 0)
    started = F.ModelStepStarted(step.id, effect)
    running = evolve(prepared, started)
    assert running.current == attrs.evolve(step, status=ModelStepStatus.EXECUTING,
                                           effect=effect)
    assert running.model_steps == prepared.model_steps
    usage = Usage(input_tokens=2, output_tokens=3)
    failure = Failure(FailureClass.MALFORMED_MODEL_RESULT, "bad")
    settlements: list[Any] = [
        F.ModelStepRecovered(step.id, effect),
        F.ModelStepRejected(step_id=step.id, effect=effect, usage=usage, failure=failure),
        F.ModelStepFailed(step_id=step.id, effect=effect,
                          failure=Failure(FailureClass.PROVIDER_FAILURE)),
        F.ModelStepCompleted(step_id=step.id, effect=effect, usage=usage,
                             finish_reason="stop", result_digest="sha256:" + "7" * 64),
    ]
    withdrawn = F.ModelStepWithdrawn(step.id)
    not_that = "current is not that model step"
    for fact in (withdrawn, started, *settlements):
        assert fold_refusal(open_state, fact).reason == not_that  # type: ignore[attr-defined]
        other = attrs.evolve(fact, step_id="step-other")
        assert fold_refusal(running, other).reason == not_that  # type: ignore[attr-defined]
        assert fold_refusal(prepared, other).reason == not_that  # type: ignore[attr-defined]
    for fact in (withdrawn, started):
        assert fold_refusal(running, fact).reason == (  # type: ignore[attr-defined]
            "model step is executing, not prepared")
    assert fold_refusal(prepared, attrs.evolve(started, effect="")).reason == "empty effect"  # type: ignore[attr-defined]
    for fact in settlements:
        assert fold_refusal(prepared, fact).reason == (  # type: ignore[attr-defined]
            "model step is prepared, not executing")
        assert fold_refusal(running, attrs.evolve(fact, effect="e" * 64)).reason == (  # type: ignore[attr-defined]
            "effect is not the running one")
    recovered, rejected, failed, completed = (evolve(running, f) for f in settlements)
    assert (recovered.current, recovered.model_steps) == (OPEN, running.model_steps - 1)
    assert rejected.current == attrs.evolve(step, status=ModelStepStatus.PREPARED,
                                            effect=effect, rejects=1)
    assert (rejected.usage, rejected.model_steps) == (usage, running.model_steps)
    assert (failed.current, failed.usage, failed.model_steps) == (
        OPEN, Usage(), running.model_steps)
    assert (completed.current, completed.usage, completed.status) == (
        OPEN, usage, RunStatus.ACTIVE)
    twice = evolve(evolve(rejected, F.ModelStepStarted(
        step.id, derive_effect_id(RUN, step.id, "", 1))), attrs.evolve(
        settlements[3], effect=derive_effect_id(RUN, step.id, "", 1)))
    assert twice.usage == usage + usage  # usage accumulates across the step's attempts
    # an empty effect on a settlement that allows it (not Failed) names no effect: accepted
    assert evolve(running, attrs.evolve(settlements[0], effect="")).current == OPEN
    assert fold_refusal(running, attrs.evolve(settlements[3], result_digest="")).reason == (  # type: ignore[attr-defined]
        "result_digest is required")


def test_tool_call_facts_name_a_call_of_the_current_tool_step() -> None:
    log = tool_step([("deploy", "{}"), ("search", "{}")], (APPROVAL, "search"))
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    waiting, pending = cur.calls
    assert waiting.waiting is not None
    effect = derive_effect_id(RUN, cur.id, pending.call_id, 0)
    started = F.ToolCallStarted(step_id=cur.id, call_id=pending.call_id, effect=effect)
    facts: list[Any] = [
        started,
        F.ToolCallApproved(step_id=cur.id, call_id=waiting.call_id,
                           response_id=waiting.waiting.id,
                           response_digest=decision_digest(ResponseKind.APPROVAL, "approved")),
        F.ToolCallCompleted(step_id=cur.id, call_id=pending.call_id, effect=effect,
                            output_digest="sha256:" + "8" * 64),
        F.ToolCallAnswered(step_id=cur.id, call_id=waiting.call_id,
                           response_id=waiting.waiting.id, response_digest="sha256:" + "9" * 64),
        F.ToolCallFailed(step_id=cur.id, call_id=pending.call_id, effect="",
                         failure=Failure(FailureClass.EXECUTION_FAILED),
                         outcome=ToolFailureOutcome.KNOWN),
    ]
    model = executing("in-1").state()
    for fact in facts:
        for at in (model, fresh("in-1").state()):
            assert fold_refusal(at, fact).reason == "current is not that tool step"  # type: ignore[attr-defined]
        assert fold_refusal(state, attrs.evolve(fact, step_id="step-other")).reason == (  # type: ignore[attr-defined]
            "current is not that tool step")
        assert fold_refusal(state, attrs.evolve(fact, call_id="call-other")).reason == (  # type: ignore[attr-defined]
            "no such call")
    # ToolCallStarted (F10): a non-empty effect, only from PENDING
    assert fold_refusal(state, attrs.evolve(started, effect="")).reason == "empty effect"  # type: ignore[attr-defined]
    on_waiting = attrs.evolve(started, call_id=waiting.call_id)
    assert fold_refusal(state, on_waiting).reason == "call is waiting, not pending"  # type: ignore[attr-defined]
    running = evolve(state, started)
    assert running.current == attrs.evolve(cur, calls=(waiting, attrs.evolve(
        pending, status=ToolCallStatus.EXECUTING, effect=effect)))
    assert fold_refusal(running, started).reason == "call is executing, not pending"  # type: ignore[attr-defined]
    # ToolCallApproved (F11): WAITING → PENDING, waiting cleared
    approved = evolve(state, facts[1])
    assert approved.current.calls[0] == attrs.evolve(  # type: ignore[union-attr]
        waiting, status=ToolCallStatus.PENDING, waiting=None)
    assert approved.current.calls[1] == pending  # type: ignore[union-attr]


def test_answer_folds_to_completed_with_the_response_digest() -> None:
    """F13: WAITING(external) → COMPLETED with output_digest = response_digest; the
    closing rule then moves the step to ``last_tool_step``."""
    log = tool_step([("ask_human", "{}")], (EXTERNAL,))
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    (call,) = cur.calls
    assert call.waiting is not None
    digest = "sha256:" + "a" * 64
    after = evolve(state, F.ToolCallAnswered(step_id=cur.id, call_id=call.call_id,
                                             response_id=call.waiting.id,
                                             response_digest=digest))
    assert after.current == OPEN
    assert after.last_tool_step == attrs.evolve(cur, calls=(attrs.evolve(
        call, status=ToolCallStatus.COMPLETED, result=ToolCallResult(digest), waiting=None),))


def test_tool_call_failed_fold() -> None:
    """F14: → FAILED with the failure and outcome; waiting cleared; the step stays current
    while another call is unfinished."""
    log = tool_step([("deploy", "{}"), ("search", "{}")], (APPROVAL, "search"))
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    waiting, pending = cur.calls
    failure = Failure(FailureClass.PERMISSION_DENIED, "no")
    after = evolve(state, F.ToolCallFailed(step_id=cur.id, call_id=waiting.call_id,
                                           effect="", failure=failure,
                                           outcome=ToolFailureOutcome.KNOWN))
    assert after.current == attrs.evolve(cur, calls=(attrs.evolve(
        waiting, status=ToolCallStatus.FAILED, waiting=None,
        failure=ToolCallFailure(failure, ToolFailureOutcome.KNOWN)), pending))
    assert after.last_tool_step is None


def test_input_accepted_guards() -> None:
    """F15: id and digest non-empty; an id already pending is corruption."""
    state = fresh("in-1").state()
    digest = B.agent_input("x").digest
    for bad, reason in ((AgentInput("", digest), "input id and digest are required"),
                        (AgentInput("in-2", ""), "input id and digest are required"),
                        (AgentInput("in-1", digest), "input already pending")):
        assert fold_refusal(state, F.InputAccepted(bad)).reason == reason  # type: ignore[attr-defined]
    assert evolve(state, F.InputAccepted(AgentInput("in-2", digest))).pending_inputs == (
        *state.pending_inputs, AgentInput("in-2", digest))


def test_fold_ordering_guards() -> None:
    """§2.7 ordering: RunCreated only on the zero state and with a run id; nothing else
    on the zero state; nothing onto an ended Run; a non-fact is refused."""
    state = fresh("in-1").state()
    created = F.RunCreated(RUN)
    assert evolve(None, created) == MachineState(run_id=RUN, status=RunStatus.ACTIVE,
                                                 current=OPEN)
    assert fold_refusal(state, created).reason == "RunCreated only on the zero state"  # type: ignore[attr-defined]
    assert fold_refusal(None, F.RunCreated("")).reason == "empty run id"  # type: ignore[attr-defined]
    accepted = F.InputAccepted(B.agent_input("in-2"))
    assert fold_refusal(None, accepted).reason == (  # type: ignore[attr-defined]
        "only RunCreated folds onto the zero state")
    ended = evolve(state, F.RunEnded(RunStoppedEnd(RunReason.CANCELLED)))
    assert fold_refusal(ended, accepted).reason == "the Run is stopped"  # type: ignore[attr-defined]
    assert fold_refusal(ended, created).reason == "RunCreated only on the zero state"  # type: ignore[attr-defined]
    assert fold_refusal(state, object()).reason == "not a fact"  # type: ignore[attr-defined]


def test_run_ended_results() -> None:
    """F16: status and result from the end, usage from the state, current None."""
    log = executing("in-1")
    usage = Usage(input_tokens=1, output_tokens=2)
    log.apply(B.model_result(log.state(), tool_calls=[("search", "{}")], usage=usage))
    state = log.state()
    stopped = evolve(state, F.RunEnded(RunStoppedEnd(RunReason.CANCELLED, ("call-x",),
                                                     "step-m")))
    assert (stopped.status, stopped.current) == (RunStatus.STOPPED, None)
    assert stopped.result == RunResult(status=RunStatus.STOPPED, reason=RunReason.CANCELLED,
                                       uncertain_calls=("call-x",), uncertain_model="step-m",
                                       usage=usage)
    failure = RunFailure(FailureClass.PROVIDER_FAILURE, "down")
    failed = evolve(state, F.RunEnded(RunFailedEnd(RunReason.PROVIDER_FAILURE, failure)))
    assert (failed.status, failed.current) == (RunStatus.FAILED, None)
    assert failed.result == RunResult(status=RunStatus.FAILED,
                                      reason=RunReason.PROVIDER_FAILURE, failure=failure,
                                      usage=usage)
    completed = evolve(state, F.RunEnded(RunCompletedEnd()))
    assert completed.result == RunResult(status=RunStatus.COMPLETED, usage=usage)
    assert (completed.status, completed.current) == (RunStatus.COMPLETED, None)


# -- survivors of the third measurement: decide's refusals (spec RUN-MCH-2) ----------------


def test_prepare_refusal_reasons() -> None:
    """C2: step_id and model non-empty; request.model == model; input_ids = every pending
    id in queue order; request_digest = digest of the request."""
    log = fresh("in-1", "in-2")
    state = log.state()
    _, good = B.prepare(state, log.position())
    assert isinstance(good, C.PrepareModelRequest)
    required = "step_id and model are required"
    order = "input_ids must equal every pending input, in order"
    cases = [
        (attrs.evolve(good, step_id=""), required),
        (attrs.evolve(good, model=""), required),
        (attrs.evolve(good, model="other-model"), "request.model differs from model"),
        (attrs.evolve(good, input_ids=("in-2", "in-1")), order),
        (attrs.evolve(good, input_ids=("in-1",)), order),
        (attrs.evolve(good, input_ids=("in-1", "in-2", "in-3")), order),
        (attrs.evolve(good, request_digest="sha256:" + "b" * 64),
         "request_digest does not match the request"),
    ]
    for bad, reason in cases:
        assert refusal(state, bad).reason == reason, bad  # type: ignore[attr-defined]
    assert refusal(state, good.__class__(
        step_id=good.step_id, model="", request=attrs.evolve(good.request, model=""),
        request_digest=good.request_digest)).reason == required  # type: ignore[attr-defined]


def test_model_effect_refusal_reasons() -> None:
    """C4: the start effect is derive_effect_id(run, step, "", rejects) — the attempt
    after a reject needs the next one; C5–C8 name the running effect."""
    log = fresh("in-1")
    log.apply(B.prepare(log.state(), log.position()))
    prepared = log.state()
    step = prepared.current
    assert isinstance(step, ModelStep)
    _, start = B.start_model(prepared)
    start_reason = "effect is not derive_effect_id(run, step, '', rejects)"
    for effect in ("", "e" * 64, derive_effect_id(RUN, step.id, "", 1),
                   derive_effect_id(RUN, step.id, "call", 0)):
        assert refusal(prepared, attrs.evolve(start, effect=effect)).reason == start_reason  # type: ignore[attr-defined]
    log.apply((B.start_model(prepared)[0], start))
    running = log.state()
    commands: list[Any] = [B.recover_model(running)[1], B.model_result(running, text="x")[1],
                           B.model_failure(running)[1], B.reject_model_result(running)[1]]
    for command in commands:
        for effect in ("", "e" * 64):
            assert refusal(running, attrs.evolve(command, effect=effect)).reason == (  # type: ignore[attr-defined]
                "effect is not the running one")
    _, reject = B.reject_model_result(running)
    log.apply((B.reject_model_result(running)[0], reject))
    again = log.state()
    assert refusal(again, start).reason == start_reason  # type: ignore[attr-defined]
    retry = C.StartModelExecution(step.id, derive_effect_id(RUN, step.id, "", 1))
    assert decide(again, retry) == (F.ModelStepStarted(step.id, retry.effect),)


def test_model_failure_reason_follows_its_class() -> None:
    """C7: reason effect_unknown if the class is effect_unknown, else provider_failure."""
    running = executing("in-1").state()
    _, command = B.model_failure(running, failure_class=FailureClass.EFFECT_UNKNOWN,
                                 message="lost")
    failed, ended = decide(running, command)
    assert failed == F.ModelStepFailed(step_id=command.step_id, effect=command.effect,  # type: ignore[attr-defined]
                                       failure=Failure(FailureClass.EFFECT_UNKNOWN, "lost"))
    assert ended == F.RunEnded(RunFailedEnd(RunReason.EFFECT_UNKNOWN, RunFailure(
        FailureClass.EFFECT_UNKNOWN, "lost")))


def test_model_result_without_tool_calls() -> None:
    """C6 without tool calls: ModelStepCompleted (usage, finish_reason, result digest),
    plus RunEnded(completed) only when no input is pending; bindings are refused."""
    log = executing("in-1")
    running = log.state()
    step = running.current
    assert isinstance(step, ModelStep)
    usage = Usage(input_tokens=4, output_tokens=1)
    _, submit = B.model_result(running, text="done", usage=usage, finish_reason="length")
    assert isinstance(submit, C.SubmitModelResult)
    completed = F.ModelStepCompleted(step_id=step.id, effect=step.effect, usage=usage,
                                     finish_reason="length",
                                     result_digest=digest_model_result(submit.result))
    assert decide(running, submit) == (completed, F.RunEnded(RunCompletedEnd()))
    log.apply(B.accept_input(running, "in-2"))
    assert decide(log.state(), submit) == (completed,)
    _, with_calls = B.model_result(running, tool_calls=[("search", "{}")])
    stray = attrs.evolve(submit, calls=with_calls.calls)  # type: ignore[attr-defined]
    assert refusal(running, stray).reason == "bindings for a result without tool calls"  # type: ignore[attr-defined]


def test_model_result_bindings_refusal_reasons() -> None:
    """C6 bindings: one per call, in order; derived call ids; the provider id and the
    arguments of the model's call; an offered tool's ref, digest and policy; an unknown
    tool direct by name; a response request only the derived one."""
    log = executing("in-1", tools=(DEPLOY, "search"))
    running = log.state()
    step = running.current
    assert isinstance(step, ModelStep)
    _, submit = B.model_result(running, tool_calls=[
        ("deploy", '{"x":1}'), ("search", "{}"), ("unknown", "{}")])
    assert isinstance(submit, C.SubmitModelResult)
    deploy, search, unknown = submit.calls

    def bound(*bs: ToolCallBinding) -> C.SubmitModelResult:
        return attrs.evolve(submit, calls=bs)

    def at(i: int, **kw: Any) -> C.SubmitModelResult:
        calls = list(submit.calls)
        calls[i] = attrs.evolve(calls[i], **kw)
        return bound(*calls)

    (_, opened) = decide(running, submit)
    assert isinstance(opened, F.ToolStepOpened)
    derived = opened.calls[0].response
    assert derived is not None
    offered = "binding {}: does not carry the offered spec"
    direct = "binding 2: unknown tool must be direct, by name"
    cases: list[tuple[C.SubmitModelResult, str]] = [
        (bound(), "exactly one binding per model tool call"),
        (bound(deploy, search), "exactly one binding per model tool call"),
        (bound(deploy, search, unknown, unknown), "exactly one binding per model tool call"),
        (bound(search, deploy, unknown), "binding 0: call id is not derived from its index"),
        (at(1, call_id=derive_call_id(step.id, 2)),
         "binding 1: call id is not derived from its index"),
        (at(1, provider_call_id="other"), "binding 1: provider call id differs"),
        (at(1, arguments='{"y":2}'), "binding 1: arguments differ from the model's"),
        (at(0, tool_ref="other"), offered.format(0)),
        (at(0, definition_digest=search.definition_digest), offered.format(0)),
        (at(0, policy=ResponsePolicy.DIRECT_EXECUTION), offered.format(0)),
        (at(1, policy=ResponsePolicy.APPROVAL_REQUIRED), offered.format(1)),
        (at(2, tool_ref="search"), direct),
        (at(2, definition_digest=search.definition_digest), direct),
        (at(2, policy=ResponsePolicy.APPROVAL_REQUIRED), direct),
        (at(0, response=attrs.evolve(derived, payload="{}")),
         "binding 0: response request is not the derived one"),
        (at(1, response=derived), "binding 1: response request is not the derived one"),
        (attrs.evolve(submit, scheduling=ToolScheduling("random")),
         "invalid scheduling ToolScheduling(mode='random', max_parallel=0)"),
    ]
    for command, reason in cases:
        assert refusal(running, command).reason == reason, (command, reason)  # type: ignore[attr-defined]
    # the derived request given explicitly is accepted and the group is the same
    assert decide(running, at(0, response=derived)) == decide(running, submit)


def test_model_result_with_tool_calls_opens_the_tool_step() -> None:
    """C6 with tool calls: ModelStepCompleted + ToolStepOpened(derive_tool_step_id(step),
    source=step, bindings with derived responses, scheduling); pending inputs do not
    prevent it."""
    log = executing("in-1", tools=(DEPLOY,))
    log.apply(B.accept_input(log.state(), "in-2"))
    running = log.state()
    step = running.current
    assert isinstance(step, ModelStep)
    scheduling = ToolScheduling("parallel", 2)
    _, submit = B.model_result(running, tool_calls=[("deploy", '{"x":1}'), ("x", "{}")],
                               scheduling=scheduling)
    assert isinstance(submit, C.SubmitModelResult)
    completed, opened = decide(running, submit)
    assert isinstance(completed, F.ModelStepCompleted)
    tool_step_id = derive_tool_step_id(step.id)
    first, second = submit.calls
    response = ResponseRequest(
        run_id=RUN, step_id=tool_step_id, call_id=first.call_id,
        id=derive_response_id(RUN, tool_step_id, first.call_id, "approval"),
        kind=ResponseKind.APPROVAL, payload='{"x":1}')
    assert opened == F.ToolStepOpened(step_id=tool_step_id, source=step.id,
                                      calls=(attrs.evolve(first, response=response), second),
                                      scheduling=scheduling)
    assert first.replay is ToolReplay.NEVER and first.placement is ToolPlacement.WORKSPACE


def test_start_tool_call_effect_is_derived() -> None:
    """C9: effect == derive_effect_id(run_id, step_id, call_id, 0)."""
    log = tool_step([("search", "{}"), ("search", "{}")], ("search",))
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    _, start = B.start_tool(state, 0)
    reason = "effect is not derive_effect_id(run, step, call, 0)"
    for effect in ("", derive_effect_id(RUN, cur.id, cur.calls[1].call_id, 0),
                   derive_effect_id(RUN, cur.id, cur.calls[0].call_id, 1)):
        assert refusal(state, attrs.evolve(start, effect=effect)).reason == reason  # type: ignore[attr-defined]
    assert decide(state, start) == (F.ToolCallStarted(
        step_id=cur.id, call_id=cur.calls[0].call_id,
        effect=derive_effect_id(RUN, cur.id, cur.calls[0].call_id, 0)),)


# -- survivors of the third measurement: evaluate_commit and the fold (spec §4.3, §2.11) ---


class _ForeignView:
    """A CommitView whose projection answers with another Run's snapshot (a store bug)."""

    def __init__(self, log: B.SimpleLog) -> None:
        self.log = log

    def replay_facts(self, command_id: str, run_id: str) -> tuple[F.Fact, ...] | None:
        return None

    def active(self, run_id: str) -> Snapshot | None:
        return self.log.snapshot()

    def stream_exists(self, run_id: str) -> bool:
        return True


def test_locate_and_envelope_errors_name_the_run() -> None:
    """Steps 2–3: an ended Run → RunTerminalError, an unknown one → RunNotFoundError, both
    naming it; an envelope naming another Run than the projection's → conflict."""
    log = fresh("in-1")
    cid, command = B.accept_input(log.state(), "in-2")
    with pytest.raises(RunNotFoundError) as missing:
        log.evaluate(log.request(cid, command, run_id="run-9"))
    assert missing.value.run_id == "run-9"  # type: ignore[attr-defined]
    foreign = CommitRequest(log.position(), CommandEnvelope(
        "accept_input", "run-2", derive_input_command_id("run-2", "in-2"), command))
    with pytest.raises(CommandConflictError) as other:
        evaluate_commit(_ForeignView(log), foreign)
    assert other.value.reason == "envelope"  # type: ignore[attr-defined]
    log.apply(B.cancel(log.state()))
    with pytest.raises(RunTerminalError) as ended:
        log.evaluate(log.request(cid, command))
    assert (ended.value.run_id, ended.value.command) == (RUN, command)  # type: ignore[attr-defined]


def test_effect_commands_without_an_effect_are_conflicts() -> None:
    """Step 4, before the derived-id check: every start, settlement and recovery command."""
    log = executing("in-1")
    running = log.state()
    model_commands: list[Any] = [B.recover_model(running)[1], B.model_result(running)[1],
                                 B.model_failure(running)[1], B.reject_model_result(running)[1]]
    prepared = fresh("in-1")
    prepared.apply(B.prepare(prepared.state(), prepared.position()))
    tools = tool_step([("search", "{}")], ("search",))
    start_tool = B.start_tool(tools.state(), 0)
    tools.apply(start_tool)
    tool_commands: list[Any] = [B.tool_result(tools.state(), 0, "{}")[1],
                                B.tool_failure(tools.state(), 0)[1]]
    for at, commands in ((log, model_commands), (prepared, [B.start_model(prepared.state())[1]]),
                         (tool_step([("search", "{}")], ("search",)), [start_tool[1]]),
                         (tools, tool_commands)):
        for command in commands:
            blank = attrs.evolve(command, effect="")
            err = commit_error(at, at.request(derive_start_command_id(""), blank))
            assert isinstance(err, CommandConflictError), command
            assert err.reason == "effect missing"  # type: ignore[attr-defined]


def test_non_derived_id_names_the_expected_ids() -> None:
    """Step 5: the error carries the ids the family derives; an UNKNOWN tool failure is
    accepted under the settlement id or the recovery id, a KNOWN one only the first."""
    log, state = _running_tool()
    cur = state.current
    assert isinstance(cur, ToolStep)
    effect = cur.calls[0].effect
    _, known = B.tool_failure(state, 0)
    unknown = attrs.evolve(known, outcome=ToolFailureOutcome.UNKNOWN,
                           failure=Failure(FailureClass.EFFECT_UNKNOWN))
    err = commit_error(log, log.request(derive_recovery_command_id(effect), known))
    assert isinstance(err, CommandConflictError)
    assert err.reason == "non-derived id"  # type: ignore[attr-defined]
    assert err.expected == (derive_settlement_command_id(effect),)  # type: ignore[attr-defined]
    assert expected_command_ids(RUN, 0, unknown) == (derive_settlement_command_id(effect),
                                                     derive_recovery_command_id(effect))
    assert expected_command_ids(RUN, -1, B.prepare(state, 0)[1]) == ()
    assert expected_command_ids(RUN, 3, C.CancelRun()) is None
    result = log.submit(log.request(derive_recovery_command_id(effect), unknown))
    assert result.status is CommitStatus.ACCEPTED
    with pytest.raises(ValidationError):
        expected_command_ids(RUN, 0, object())  # type: ignore[arg-type]


def test_decide_refusal_becomes_stale_with_its_reason() -> None:
    """Step 8: a PreconditionError becomes StaleRuntimeError, chained, keeping ``reason``."""
    log = fresh("in-1")
    log.apply(B.prepare(log.state(), log.position()))
    _, withdraw = B.withdraw(log.state())
    err = commit_error(log, log.request(B.withdraw(log.state())[0], withdraw))
    assert isinstance(err, StaleRuntimeError)
    assert err.reason == "withdraw needs pending inputs"  # type: ignore[attr-defined]
    assert err.command is withdraw  # type: ignore[attr-defined]
    assert isinstance(err.__cause__, PreconditionError)


def test_prompt_token_guard_sees_scope_run_and_token_for_prepare_only() -> None:
    """Step 7 [D-9]: the guard runs for Prepare with (scope, run_id, prompt_token); its
    refusal writes nothing; other commands never call it."""
    log = fresh("in-1")
    seen: list[tuple[str, str, str]] = []

    def guard(scope: str, run_id: str, token: str) -> None:
        seen.append((scope, run_id, token))
        if token == "old":
            raise StaleRuntimeError("old prompt token")

    stale = B.prepare(log.state(), log.position(), prompt_token="old")
    with pytest.raises(StaleRuntimeError):
        log.apply(stale, prompt_token_guard=guard)
    assert seen == [(log.scope, RUN, "old")] and len(log.facts()) == 2
    log.apply(B.accept_input(log.state(), "in-2"), prompt_token_guard=guard)
    assert len(seen) == 1
    log.apply(B.prepare(log.state(), log.position(), prompt_token="new"),
              prompt_token_guard=guard)
    assert seen[-1] == (log.scope, RUN, "new")


def test_append_snapshot_is_the_folded_state_at_the_new_position() -> None:
    """Steps 10–11: Append(facts, Snapshot(state after every fact, position + len))."""
    log = executing("in-1")
    before = log.snapshot()
    cid, cancel = B.cancel(log.state())
    decision = log.evaluate(log.request(cid, cancel))
    assert isinstance(decision, Append)
    assert decision.facts == decide(before.state, cancel)
    state = before.state
    for fact in decision.facts:
        state = evolve(state, fact)
    assert decision.snapshot == Snapshot(state, before.position + len(decision.facts))
    assert decision.snapshot.state.status is RunStatus.STOPPED


def test_identity_and_envelope_validation() -> None:
    """RUN-SCP: a required identity is a non-empty str that encodes to UTF-8."""
    for bad in ("", "\ud800", 7, None):
        with pytest.raises(ValidationError):
            validate_identity(bad, "run id")  # type: ignore[arg-type]
    validate_identity("é", "run id")
    command = C.CancelRun()
    for run_id, command_id in (("", "c"), ("r", ""), ("\ud800", "c"), ("r", "\udfff")):
        with pytest.raises(ValidationError):
            envelope(run_id, command_id, command)
    with pytest.raises(ValidationError):
        envelope(RUN, "c", object())  # type: ignore[arg-type]
    assert envelope(RUN, "c", command) == CommandEnvelope("cancel_run", RUN, "c", command)


def test_create_group_and_initialize_run() -> None:
    """§2.11: (RunCreated(run_id, causation_id), InputAccepted…); refusals are
    ValidationError; initialize_run is the fold of RunCreated."""
    digest = B.agent_input("x").digest
    inputs = (AgentInput("in-1", digest), AgentInput("in-2", digest))
    assert create_group(NewRun(RUN, "cause"), inputs) == (
        F.RunCreated(RUN, "cause"), F.InputAccepted(inputs[0]), F.InputAccepted(inputs[1]))
    for bad in ((AgentInput("", digest),), (AgentInput("in-1", ""),),
                (AgentInput("\ud800", digest),), (inputs[0], inputs[0])):
        with pytest.raises(ValidationError):
            create_group(NewRun(RUN), bad)
    for run_id in ("", "\ud800"):
        with pytest.raises(ValidationError):
            create_group(NewRun(run_id), inputs)
    assert initialize_run(NewRun(RUN, "cause")) == MachineState(
        run_id=RUN, status=RunStatus.ACTIVE, current=OPEN)


def test_fold_run_names_the_bad_fact() -> None:
    """§2.11: the first fact is RunCreated; an empty log and a guard failure raise
    CorruptLogError with index, wire name, run id and the guard's reason."""
    digest = B.agent_input("x").digest
    accepted = F.InputAccepted(AgentInput("in-1", digest))
    with pytest.raises(CorruptLogError) as first:
        fold_run((accepted,), run_id=RUN)
    assert (first.value.index, first.value.wire_name, first.value.reason,  # type: ignore[attr-defined]
            first.value.run_id, first.value.fact) == (0, "input_accepted", "first fact",  # type: ignore[attr-defined]
                                                      RUN, accepted)
    with pytest.raises(CorruptLogError) as empty:
        fold_run((), run_id=RUN)
    assert (empty.value.index, empty.value.reason, empty.value.run_id) == (0, "empty", RUN)  # type: ignore[attr-defined]
    with pytest.raises(CorruptLogError) as dup:
        fold_run((F.RunCreated(RUN), accepted, accepted), run_id=RUN)
    assert (dup.value.index, dup.value.wire_name, dup.value.reason, dup.value.fact) == (  # type: ignore[attr-defined]
        2, "input_accepted", "input already pending", accepted)
    assert isinstance(dup.value.__cause__, EvolveError)
    assert fold_run((F.RunCreated(RUN), accepted)).pending_inputs == (accepted.input,)


@pytest.mark.parametrize("where", ["source", "call_id"])
def test_fold_refuses_a_lone_surrogate_identity_as_a_bad_fact(where: str) -> None:
    """RUN-SCP: an identity that does not encode to UTF-8 is invalid; a fact carrying one
    (a ToolStepOpened whose source, or whose waiting call's id, holds a lone surrogate) is
    refused with EvolveError — fold_run with CorruptLogError — never a raw
    UnicodeEncodeError from the id derivation."""
    _, state, opened = _opening()
    approval, direct = opened.calls
    if where == "source":
        bad = attrs.evolve(opened, source="\ud800")
    else:
        assert approval.response is not None
        bad = attrs.evolve(opened, calls=(attrs.evolve(
            approval, call_id="\ud800",
            response=attrs.evolve(approval.response, call_id="\ud800")), direct))
    err = fold_refusal(state, bad)
    assert isinstance(err.__cause__, UnicodeEncodeError)
    assert err.reason == str(err.__cause__)  # type: ignore[attr-defined]
    log = executing("in-1", tools=(DEPLOY, "search"))
    completed = decide(log.state(), B.model_result(log.state(), tool_calls=[
        ("deploy", '{"x":1}'), ("search", "{}")], scheduling=ToolScheduling("sequential", 1))[1])[0]
    with pytest.raises(CorruptLogError) as info:
        fold_run((*log.facts(), completed, bad), run_id=RUN)
    assert info.value.index == len(log.facts()) + 1  # type: ignore[attr-defined]


# -- ids.py: the namespaced hash's parts (spec §3.2) ---------------------------------------


def test_namespaced_hash_parts() -> None:
    """Lengths count UTF-8 bytes; an int is its unsigned decimal; an empty part is ``0:``;
    a bool, a negative int and a lone surrogate are refused, never hashed. The cache is
    cleared first so that every hash below is computed here, not remembered."""
    derive.cache_clear()
    assert derive("ns/é", "ü", 12, "") == _framed("ns/é", "ü", "12", "")
    assert derive("ns", 0) == _framed("ns", "0")
    with pytest.raises(TypeError):
        derive("ns", True)
    with pytest.raises(ValueError):
        derive("ns", -1)
    with pytest.raises(UnicodeEncodeError):
        derive("ns", "\ud800")


def test_decide_on_an_ended_run_and_outside_the_table() -> None:
    """RUN-MCH-3: a terminal state gives RunTerminalError first (status, run id, command);
    a (command, phase) pair missing from the table is refused naming the phase."""
    log = fresh("in-1")
    open_state = log.state()
    log.apply(B.cancel(open_state))
    ended = log.state()
    command = C.AcceptInput((B.agent_input("in-2"),))
    with pytest.raises(RunTerminalError) as info:
        decide(ended, command)
    assert (info.value.status, info.value.run_id, info.value.command) == (  # type: ignore[attr-defined]
        RunStatus.STOPPED, RUN, command)
    start = C.StartModelExecution("step-x", "e" * 64)
    err = refusal(open_state, start)
    assert (err.reason, err.phase) == ("not allowed in phase open", Phase.OPEN)  # type: ignore[attr-defined]
    running = executing("in-1").state()
    err = refusal(running, attrs.evolve(start, step_id=running.current.id))  # type: ignore[union-attr]
    assert (err.reason, err.phase) == (  # type: ignore[attr-defined]
        "not allowed in phase model_executing", Phase.MODEL_EXECUTING)


def test_commit_refusals_carry_the_command() -> None:
    """Errors carry the data to act on them: the refused command (errors.py)."""
    log = fresh("in-1")
    cid, command = B.accept_input(log.state(), "in-2")
    for request in (CommitRequest(log.position(), CommandEnvelope("cancel_run", RUN, cid,
                                                                  command)),
                    CommitRequest(log.position(), CommandEnvelope("accept_input", RUN, "",
                                                                  command))):
        err = commit_error(log, request)
        assert isinstance(err, CommandConflictError)
        assert err.command is command  # type: ignore[attr-defined]
    not_a_command = object()
    for call in (lambda: envelope(RUN, "c", not_a_command),  # type: ignore[arg-type]
                 lambda: expected_command_ids(RUN, 0, not_a_command)):  # type: ignore[arg-type]
        with pytest.raises(ValidationError) as info:
            call()
        assert info.value.command is not_a_command  # type: ignore[attr-defined]


def test_prompt_token_guard_default_scope_is_empty() -> None:
    """``evaluate_commit``'s ``scope`` defaults to the default scope ``""``."""
    log = fresh("in-1")
    seen: list[str] = []
    cid, prepare = B.prepare(log.state(), log.position())
    evaluate_commit(log, log.request(cid, prepare),
                    prompt_token_guard=lambda scope, run_id, token: seen.append(scope))
    assert seen == [""]


class _EndedView(_ForeignView):
    """A projection that still lists an ended Run as active (a store bug): step 6."""

    def active(self, run_id: str) -> Snapshot | None:
        return Snapshot(self.log.state(), self.log.position())


def test_commit_and_fold_errors_carry_their_data() -> None:
    """errors.py: errors carry what is needed to act on them as attributes — the
    command, the stale base and position, the Run's status, the refused value or input,
    the fact's index / wire name / run id."""
    log = fresh("in-1")
    cid, prepare = B.prepare(log.state(), log.position())
    ahead = log.position() + 1
    stale_cid, stale = B.prepare(log.state(), ahead)
    err = commit_error(log, log.request(stale_cid, stale, base=ahead))
    assert isinstance(err, StaleRuntimeError)
    assert (err.command, err.base, err.position) == (stale, ahead, log.position())  # type: ignore[attr-defined]
    bad_step = attrs.evolve(prepare, step_id="step-x")
    err = commit_error(log, log.request(cid, bad_step))
    assert isinstance(err, StaleRuntimeError) and err.command is bad_step  # type: ignore[attr-defined]
    err = commit_error(log, log.request("not-derived", prepare))
    assert isinstance(err, CommandConflictError) and err.command is prepare  # type: ignore[attr-defined]
    running = executing("in-1")
    blank = attrs.evolve(B.recover_model(running.state())[1], effect="")
    err = commit_error(running, running.request("x", blank))
    assert isinstance(err, CommandConflictError) and err.command is blank  # type: ignore[attr-defined]
    log.apply(B.cancel(log.state()))
    with pytest.raises(RunTerminalError) as ended:
        evaluate_commit(_EndedView(log), log.request(*B.accept_input(fresh().state(), "in-9")))
    assert (ended.value.status, ended.value.run_id) == (RunStatus.STOPPED, RUN)  # type: ignore[attr-defined]
    for value in ("", "\ud800"):
        with pytest.raises(ValidationError) as bad:
            validate_identity(value, "run id")
        assert bad.value.value == value  # type: ignore[attr-defined]
    digest = B.agent_input("x").digest
    for inputs in ((AgentInput("", digest),), (AgentInput("in-1", digest),) * 2):
        with pytest.raises(ValidationError) as refused:
            create_group(NewRun(RUN), inputs)
        assert refused.value.input == inputs[-1]  # type: ignore[attr-defined]
    not_a_fact = object()
    with pytest.raises(CorruptLogError) as first:
        fold_run((not_a_fact,))  # type: ignore[arg-type]
    assert (first.value.wire_name, first.value.run_id, first.value.fact) == (  # type: ignore[attr-defined]
        "?", "", not_a_fact)
    with pytest.raises(CorruptLogError) as empty:
        fold_run(())
    assert (empty.value.wire_name, empty.value.fact, empty.value.run_id) == ("", None, "")  # type: ignore[attr-defined]
    with pytest.raises(CorruptLogError) as guard:
        fold_run((F.RunCreated(RUN), F.RunCreated(RUN)), run_id=RUN)
    assert (guard.value.run_id, guard.value.index, guard.value.wire_name) == (  # type: ignore[attr-defined]
        RUN, 1, "run_created")


# -- evaluate_batch (RUN-CMT-9): survivors of the run after the rebase onto main -----------


def test_batch_locates_the_run_like_commit() -> None:
    """Each request is evaluated as commit would (RUN-CMT-9): an unknown Run is
    RunNotFoundError, a Run ended before the batch or by an earlier request of it is
    RunTerminalError naming the Run and the refused command — returned, not raised."""
    log = fresh("in-1")
    cid, accept = B.accept_input(log.state(), "in-2")
    _, error = evaluate_batch(log, [log.request(cid, accept, run_id="run-9")])
    assert isinstance(error, RunNotFoundError) and error.run_id == "run-9"  # type: ignore[attr-defined]
    cancel = log.request(*B.cancel(log.state()))
    after = log.request(cid, accept)
    decisions, error = evaluate_batch(log, [cancel, after])
    assert len(decisions) == 1 and isinstance(error, RunTerminalError)
    assert (error.run_id, error.command) == (RUN, accept)  # type: ignore[attr-defined]
    log.submit(cancel)
    _, error = evaluate_batch(log, [after])
    assert isinstance(error, RunTerminalError)
    assert (error.run_id, error.command) == (RUN, accept)  # type: ignore[attr-defined]


def test_batch_passes_its_scope_to_the_prompt_token_guard() -> None:
    log = fresh("in-1")
    request = log.request(*B.prepare(log.state(), log.position()))
    seen: list[str] = []

    def guard(scope: str, run_id: str, token: str) -> None:
        seen.append(scope)

    evaluate_batch(log, [request], scope="scope-9", prompt_token_guard=guard)
    evaluate_batch(log, [request], prompt_token_guard=guard)
    assert seen == ["scope-9", ""]


def test_batch_validation_errors_carry_the_request_and_the_runs() -> None:
    log = fresh("in-1")
    log.create("run-2", ["x"])
    one = log.request(*B.accept_input(log.state(), "a"))
    two = log.request(*B.accept_input(log.state("run-2"), "a"), run_id="run-2")
    with pytest.raises(ValidationError) as mixed:
        check_batch([one, two, one])
    assert mixed.value.run_ids == (RUN, "run-2")  # type: ignore[attr-defined]
    with pytest.raises(ValidationError) as bad:
        check_batch([one, "nope"])  # type: ignore[list-item]
    assert bad.value.request == "nope"  # type: ignore[attr-defined]


# -- RUN-CMT-10: a predicted request is decided once (predict_commit, _Ahead, _predicted;
# sixth session). tests/protocol/test_predicted_commit.py holds the shortcut to the full
# evaluation with hypothesis; these are the direct, fast checks mutmut's selection runs.


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


def _carrying_a_wrong_decision(request: CommitRequest) -> CommitRequest:
    """*request* with its sealed prediction's decision replaced by an empty Append: an
    answer with no facts shows the shortcut answered, not the full evaluation."""
    assert request.predicted is not None
    bogus = Append((), request.predicted.on)
    return attrs.evolve(request, predicted=attrs.evolve(request.predicted, decision=bogus))


def _predicted_prepare() -> tuple[B.SimpleLog, CommitRequest, CommitRequest, Append]:
    log = fresh("in-1")
    plain = log.request(*B.prepare(log.state(), log.position()))
    predicted, decision = predict_commit(log.snapshot(), plain)
    return log, plain, predicted, decision


def test_predict_commit_returns_the_request_with_its_sealed_decision(
        decides: list[Any]) -> None:
    """RUN-CMT-10: the returned request equals the plain one and carries a Prediction of
    this snapshot, envelope, base and decision; the store answers it with that very
    decision without calling decide, and the decision is the full evaluation's."""
    log, plain, predicted, decision = _predicted_prepare()
    snap = log.snapshot()
    assert isinstance(decision, Append) and decision.facts
    assert decision == evaluate_commit(log, plain)
    assert predicted == plain and predicted.base == plain.base == log.position()
    assert predicted.envelope is plain.envelope
    p = predicted.predicted
    assert p is not None
    assert (p.on, p.envelope, p.base, p.decision) == (snap, plain.envelope, plain.base,
                                                      decision)
    assert p.on is snap and p.envelope is plain.envelope and p.decision is decision
    decides.clear()
    assert evaluate_commit(log, predicted) is decision
    assert decides == []
    decides.clear()
    assert evaluate_commit(log, _carrying_a_wrong_decision(predicted)) == Append((), snap)
    assert decides == []


def test_a_predicted_request_off_its_conditions_is_decided_in_full(
        decides: list[Any]) -> None:
    """RUN-CMT-10: each condition alone sends the request to the full evaluation (the
    wrong carried decision is not returned): another snapshot object equal to the
    predicted one, another envelope object, another base, an unsealed Prediction."""
    log, plain, predicted, decision = _predicted_prepare()
    wrong = _carrying_a_wrong_decision(predicted)
    assert wrong.predicted is not None
    twin = copy.deepcopy(log.snapshot())
    assert twin == log.snapshot() and twin is not log.snapshot()
    saved, log._active[RUN] = log._active[RUN], twin
    assert evaluate_commit(log, wrong) == decision
    log._active[RUN] = saved
    other_env = attrs.evolve(wrong, envelope=envelope(RUN, plain.envelope.id,
                                                      plain.envelope.command))
    assert other_env.envelope == plain.envelope
    assert other_env.envelope is not plain.envelope
    assert evaluate_commit(log, other_env) == decision
    with pytest.raises(CommandConflictError):  # the full check: the id derives from base
        evaluate_commit(log, attrs.evolve(wrong, base=plain.base + 1))
    forged = attrs.evolve(wrong, predicted=attrs.evolve(wrong.predicted, seal=object()))
    decides.clear()
    assert evaluate_commit(log, forged) == decision
    assert len(decides) == 1


def test_a_prompt_token_guard_forbids_the_shortcut_only_on_a_prepare(
        decides: list[Any]) -> None:
    """[D-9] with RUN-CMT-10: a store with a guard decides a predicted Prepare in full,
    calling the guard; a predicted StartModelExecution is still answered from its
    prediction (no guard to call on it)."""
    log, _, predicted, _ = _predicted_prepare()
    seen: list[tuple[str, str, str]] = []

    def guard(scope: str, run_id: str, token: str) -> None:
        seen.append((scope, run_id, token))
        raise StaleRuntimeError("prompt token is stale")

    with pytest.raises(StaleRuntimeError) as err:
        evaluate_commit(log, _carrying_a_wrong_decision(predicted), scope="scope-9",
                        prompt_token_guard=guard)
    assert str(err.value) == "prompt token is stale"
    assert seen == [("scope-9", RUN, "")]
    log.submit(predicted)
    start = log.request(*B.start_model(log.state()))
    start_predicted, start_decision = predict_commit(log.snapshot(), start)
    decides.clear()
    answer = evaluate_commit(log, start_predicted, scope="scope-9", prompt_token_guard=guard)
    assert answer is start_decision and decides == [] and len(seen) == 1


def test_predict_commit_on_an_ended_or_other_run_is_terminal() -> None:
    """The prediction's view holds one Run at one snapshot and knows every stream: an
    ended snapshot, or a request for another Run, is RunTerminalError naming the
    request's Run and command (not RunNotFoundError, not an envelope conflict)."""
    log = fresh("in-1")
    other = log.request(*B.accept_input(log.state(), "in-2"), run_id="run-2")
    with pytest.raises(RunTerminalError) as err:
        predict_commit(log.snapshot(), other)
    assert str(err.value) == "run 'run-2' has ended"
    assert (err.value.run_id, err.value.command) == ("run-2", other.envelope.command)  # type: ignore[attr-defined]
    cid, accept = B.accept_input(log.state(), "in-2")
    log.apply(B.cancel(log.state()))
    ended = log.snapshot()
    assert ended.state.status is not RunStatus.ACTIVE
    with pytest.raises(RunTerminalError) as err:
        predict_commit(ended, log.request(cid, accept))
    assert str(err.value) == "run 'run-1' has ended"
    assert getattr(err.value, "command", None) == accept
    assert getattr(err.value, "status", None) is None


def test_a_name_over_its_byte_limit_or_with_an_unsafe_character_is_refused() -> None:
    """RUN-WIR-1 (``validate_name`` through ``create_group`` and ``envelope``): a run id
    of exactly 512 UTF-8 bytes and a command id of exactly 1,024 are names; one byte more,
    or a control / bidirectional character, is a ValidationError with the exact text, the
    first 64 characters as ``value`` and the ``size`` or ``index``."""
    _, accept = B.accept_input(fresh("in-1").state(), "in-2")
    assert create_group(NewRun("é" * 256, ""))[0].run_id == "é" * 256
    assert envelope(RUN, "c" * 1024, accept).id == "c" * 1024
    with pytest.raises(ValidationError) as err:
        create_group(NewRun("é" * 257, ""))
    assert str(err.value) == "run id is 514 UTF-8 bytes, more than 512"
    assert (err.value.value, err.value.size) == ("é" * 64, 514)  # type: ignore[attr-defined]
    with pytest.raises(ValidationError) as err:
        envelope(RUN, "c" * 1025, accept)
    assert str(err.value) == "command id is 1025 UTF-8 bytes, more than 1024"
    assert (err.value.value, err.value.size) == ("c" * 64, 1025)  # type: ignore[attr-defined]
    with pytest.raises(ValidationError) as err:
        create_group(NewRun("x" * 70 + "\u202e", ""))
    assert str(err.value) == ("run id contains U+202E at index 70 (a control, line "
                              "separator or bidirectional formatting character)")
    assert (err.value.value, err.value.index) == ("x" * 64, 70)  # type: ignore[attr-defined]
