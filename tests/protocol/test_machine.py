"""Acceptance scenarios of the Run state machine (spec §8.1, items 1–29 except 28).

Plain synchronous tests of the pure core: ``decide``/``evolve``/``plan_next`` directly,
and ``evaluate_commit`` through ``SimpleLog`` where the spec names the commit-level
error. Errors are checked by type and attributes, never by message text (§0.4).
"""

from __future__ import annotations

import attrs
import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol._decide import Phase, decide
from runx_actors.protocol._evolve import evolve
from runx_actors.protocol.commit import CommitStatus, create_group, fold_run, initialize_run
from runx_actors.protocol.digests import (
    decision_digest,
    digest_model_result,
    digest_tool_response_payload,
)
from runx_actors.protocol.errors import (
    CommandConflictError,
    CorruptLogError,
    EvolveError,
    PreconditionError,
    RunNotFoundError,
    StaleRuntimeError,
    ValidationError,
)
from runx_actors.protocol.ids import (
    derive_call_id,
    derive_effect_id,
    derive_recovery_command_id,
    derive_response_id,
    derive_settlement_command_id,
    derive_tool_step_id,
)
from runx_actors.protocol.plan import (
    Idle,
    NeedModelRequest,
    PromptInput,
    StartToolCalls,
    WithdrawPrepared,
    plan_next,
)
from runx_actors.protocol.state import (
    OPEN,
    MachineState,
    ModelStep,
    Open,
    ToolCallState,
    ToolStep,
    validate_machine_state,
    validate_tool_call_state,
)
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
    RunStatus,
    RunStoppedEnd,
    ToolCallFailure,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolScheduling,
    ToolSpec,
    Usage,
)
from runx_actors.testing import builders as B

RUN = "run-1"
DIGEST = "sha256:" + "0" * 64
APPROVAL = B.tool_spec("deploy", policy=ResponsePolicy.APPROVAL_REQUIRED)
EXTERNAL = B.tool_spec("ask_human", policy=ResponsePolicy.EXTERNAL_RESPONSE)


# -- helpers ---------------------------------------------------------------------------


def fresh(*inputs: str) -> B.SimpleLog:
    return B.SimpleLog.with_run(RUN, inputs)


def prepared(*inputs: str, tools: tuple[B.OfferedTool, ...] = ()) -> B.SimpleLog:
    log = fresh(*inputs)
    log.apply(B.prepare(log.state(), log.position(), tools=tools))
    return log


def executing(*inputs: str, tools: tuple[B.OfferedTool, ...] = ()) -> B.SimpleLog:
    log = prepared(*inputs, tools=tools)
    log.apply(B.start_model(log.state()))
    return log


def tool_step(
    calls: list[tuple[str, str]], *, tools: tuple[B.OfferedTool, ...] = ("search",),
    scheduling: ToolScheduling = B.PARALLEL,
) -> B.SimpleLog:
    log = executing("in-1", tools=tools)
    log.apply(B.model_result(log.state(), tool_calls=calls, scheduling=scheduling))
    assert isinstance(log.state().current, ToolStep)
    return log


def call(log: B.SimpleLog, index: int) -> ToolCallState:
    cur = log.state().current
    assert isinstance(cur, ToolStep)
    return cur.calls[index]


def call_list(log: B.SimpleLog) -> tuple[ToolCallState, ...]:
    cur = log.state().current
    assert isinstance(cur, ToolStep)
    return cur.calls


def refused_at_commit(log: B.SimpleLog, built: B.Built, error: type[Exception]) -> Exception:
    """Commit *built*, expect *error*, and check that nothing was appended."""
    before = (len(log.commits), log.facts(), log.snapshot())
    with pytest.raises(error) as ei:
        log.apply(built)
    assert (len(log.commits), log.facts(), log.snapshot()) == before
    return ei.value


def stale_at_commit(log: B.SimpleLog, built: B.Built) -> StaleRuntimeError:
    err = refused_at_commit(log, built, StaleRuntimeError)
    assert isinstance(err, StaleRuntimeError)
    assert isinstance(err.__cause__, PreconditionError)  # translated at one boundary
    return err


def precondition(state: MachineState, command: C.Command | B.Built) -> PreconditionError:
    """``decide`` refuses *command* with PreconditionError naming it."""
    if isinstance(command, tuple):
        command = command[1]
    with pytest.raises(PreconditionError) as ei:
        decide(state, command)
    assert ei.value.command == command
    return ei.value


# -- 1–5 -------------------------------------------------------------------------------


def test_initialize_run_is_minimal() -> None:
    state = initialize_run(NewRun("run-1"))
    assert state.run_id == "run-1"
    assert state.status is RunStatus.ACTIVE
    assert state.current == OPEN
    assert state.pending_inputs == ()
    assert state.model_steps == 0
    assert state.usage == Usage()
    assert state.last_tool_step is None
    assert state.result is None
    validate_machine_state(state)


def test_run_created_folds_onto_zero_state() -> None:
    seed = B.agent_input("in-1")
    group = create_group(NewRun(RUN), [seed])
    assert [type(f) for f in group] == [F.RunCreated, F.InputAccepted]
    assert group == (F.RunCreated(RUN), F.InputAccepted(seed))
    state = fold_run(group)
    assert state.status is RunStatus.ACTIVE
    assert state.pending_inputs == (seed,)
    # A second RunCreated.
    with pytest.raises(EvolveError) as ei:
        evolve(state, F.RunCreated(RUN))
    assert ei.value.fact == F.RunCreated(RUN)
    with pytest.raises(CorruptLogError) as ci:
        fold_run((*group, F.RunCreated(RUN)))
    assert (ci.value.index, ci.value.wire_name) == (2, "run_created")
    # An InputAccepted before RunCreated.
    with pytest.raises(EvolveError):
        evolve(None, F.InputAccepted(seed))
    with pytest.raises(CorruptLogError) as ci:
        fold_run((F.InputAccepted(seed), F.RunCreated(RUN)))
    assert (ci.value.index, ci.value.wire_name) == (0, "input_accepted")


def test_next_on_fresh_run_needs_model_request() -> None:
    log = fresh("in-1")
    seed = log.state().pending_inputs[0]
    action = plan_next(log.state())
    assert action == NeedModelRequest(PromptInput(scope="", run_id=RUN, inputs=(seed,)))
    assert isinstance(action, NeedModelRequest)
    assert action.hint.source_step == ""
    assert action.hint.inputs == (seed,)


def test_prepare_consumes_inputs_and_counts() -> None:
    log = fresh("in-1", "in-2")
    state = log.state()
    cid, command = B.prepare(state, log.position(), tools=("search",))
    new, facts = B.decide_and_fold(state, command)
    assert facts == (
        F.ModelStepPrepared(
            step_id=command.step_id, model=command.model,
            request_digest=command.request_digest, input_ids=("in-1", "in-2"),
            tools=command.tools,
        ),
    )
    assert new.pending_inputs == ()
    assert new.model_steps == 1
    assert isinstance(new.current, ModelStep)
    assert new.current.status is ModelStepStatus.PREPARED
    assert new.current.id == command.step_id
    assert (new.current.rejects, new.current.effect) == (0, "")
    # The same through the commit path: appended after the creation group.
    result = log.apply((cid, command))
    assert result.facts == facts
    assert result.snapshot.state == new
    assert result.snapshot.position == 3


def test_prepare_rejects_incomplete_input_ids() -> None:
    log = fresh("in-1", "in-2")
    state = log.state()
    for ids in (("in-1",), ("in-2",), ("in-2", "in-1"), ()):
        built = B.prepare(state, log.position(), input_ids=ids)
        precondition(state, built)
        stale_at_commit(log, built)
    # The complete list in queue order is accepted.
    log.apply(B.prepare(state, log.position(), input_ids=("in-1", "in-2")))
    assert log.state().pending_inputs == ()


# -- 6–10 ------------------------------------------------------------------------------


def test_model_complete_with_tools_opens_tool_step() -> None:
    log = executing("in-1", tools=("search",))
    state = log.state()
    step = state.current
    assert isinstance(step, ModelStep)
    cid, command = B.model_result(state, tool_calls=[("search", '{"q": "x"}')],
                                  usage=Usage(2, 3))
    assert cid == derive_settlement_command_id(step.effect)
    new, facts = B.decide_and_fold(state, command)
    assert [type(f) for f in facts] == [F.ModelStepCompleted, F.ToolStepOpened]
    completed, opened = facts
    assert completed == F.ModelStepCompleted(
        step_id=step.id, effect=step.effect, usage=Usage(2, 3),
        finish_reason=command.result.finish_reason,
        result_digest=digest_model_result(command.result),
    )
    assert opened.step_id == derive_tool_step_id(step.id)
    assert opened.source == step.id
    assert isinstance(new.current, ToolStep)
    (only,) = new.current.calls
    assert only.status is ToolCallStatus.PENDING
    assert only.call_id == derive_call_id(step.id, 0)
    assert (only.tool_ref, only.arguments) == ("search", '{"q":"x"}')
    assert only.definition_digest == step.tools[0].definition_digest
    assert (only.effect, only.waiting) == ("", None)
    assert new.usage == Usage(2, 3)
    assert new.status is RunStatus.ACTIVE


@pytest.mark.parametrize("variant", ["answer", "reject"])
def test_external_response_requires_payload_digest(variant: str) -> None:
    log = tool_step([("ask_human", '{"question": "ok?"}')], tools=(EXTERNAL,))
    state = log.state()
    waiting = call(log, 0)
    assert waiting.status is ToolCallStatus.WAITING
    assert waiting.waiting is not None
    assert waiting.waiting.kind is ResponseKind.EXTERNAL_RESPONSE
    assert waiting.waiting.payload == waiting.arguments
    if variant == "answer":
        cid, good = B.answer(state, 0, '{"answer": "yes"}')
        assert isinstance(good, C.SubmitToolResponse)
        wrong = attrs.evolve(good, response_digest=digest_tool_response_payload('"no"'))
        precondition(state, wrong)
        stale_at_commit(log, (cid, wrong))
        result = log.apply((cid, good))
        assert result.facts == (
            F.ToolCallAnswered(
                step_id=good.step_id, call_id=good.call_id, response_id=waiting.waiting.id,
                response_digest=digest_tool_response_payload('{"answer":"yes"}'),
            ),
        )
        final = log.state()
        assert final.last_tool_step is not None
        done = final.last_tool_step.calls[0]
        assert done.status is ToolCallStatus.COMPLETED
        assert done.result is not None
        assert done.result.output_digest == good.response_digest
    else:
        cid, rejection = B.reject(state, 0, "not now")
        assert isinstance(rejection, C.RejectToolCall)
        wrong = attrs.evolve(
            rejection, response_digest=decision_digest(ResponseKind.APPROVAL, "rejected",
                                                       "not now"))
        precondition(state, wrong)
        stale_at_commit(log, (cid, wrong))
        result = log.apply((cid, rejection))
        (failed,) = result.facts
        assert isinstance(failed, F.ToolCallFailed)
        assert failed.effect == ""
        assert failed.outcome is ToolFailureOutcome.KNOWN
        assert failed.failure == Failure(FailureClass.RESPONSE_REJECTED, "not now")
        final = log.state()
        assert final.last_tool_step is not None
        assert final.last_tool_step.calls[0].status is ToolCallStatus.FAILED
    final = log.state()
    assert final.status is RunStatus.ACTIVE
    assert isinstance(final.current, Open)
    validate_machine_state(final)


def test_tool_scheduling_frozen_on_tool_step_opened() -> None:
    frozen = ToolScheduling("sequential", 1)
    log = tool_step([("search", "{}"), ("search", '{"n": 2}')], scheduling=frozen)
    opened = log.facts()[-1]
    assert isinstance(opened, F.ToolStepOpened)
    assert opened.scheduling == frozen
    cur = log.state().current
    assert isinstance(cur, ToolStep)
    assert cur.scheduling == frozen
    # Later commands carry no scheduling; the step keeps what was frozen.
    for i in range(2):
        log.apply(B.start_tool(log.state(), i))
        log.apply(B.tool_result(log.state(), i, '"ok"'))
        state = log.state()
        step = state.current if i == 0 else state.last_tool_step
        assert isinstance(step, ToolStep)
        assert step.scheduling == frozen
    assert fold_run(log.facts()) == log.state()


def test_tool_scheduling_rejects_unknown_mode() -> None:
    log = executing("in-1", tools=("search",))
    state = log.state()
    cid, command = B.model_result(state, tool_calls=[("search", "{}")],
                                  scheduling=ToolScheduling("burst"))
    err = precondition(state, command)
    assert err.phase is Phase.MODEL_EXECUTING
    stale_at_commit(log, (cid, command))
    for bad in (ToolScheduling("burst"), ToolScheduling("parallel", -1)):
        cid, command = B.model_result(state, tool_calls=[("search", "{}")], scheduling=bad)
        precondition(state, command)
    # evolve refuses a ToolStepOpened carrying it.
    good = B.model_result(state, tool_calls=[("search", "{}")])[1]
    completed, opened = decide(state, good)
    at_open = evolve(state, completed)
    bad_fact = attrs.evolve(opened, scheduling=ToolScheduling("burst"))
    with pytest.raises(EvolveError) as ei:
        evolve(at_open, bad_fact)
    assert ei.value.fact == bad_fact
    assert isinstance(evolve(at_open, opened).current, ToolStep)


def test_parallel_waiting_does_not_block_pending() -> None:
    log = tool_step([("deploy", '{"env": "prod"}'), ("search", "{}")],
                    tools=(APPROVAL, "search"))
    a, b = call(log, 0), call(log, 1)
    assert (a.status, b.status) == (ToolCallStatus.WAITING, ToolCallStatus.PENDING)
    step_id = log.state().current.id  # type: ignore[union-attr]
    assert plan_next(log.state()) == StartToolCalls(step_id, (b.call_id,))
    log.apply(B.start_tool(log.state(), b.call_id))
    log.apply(B.tool_result(log.state(), b.call_id, '{"hits": 1}'))
    assert isinstance(log.state().current, ToolStep)
    assert plan_next(log.state()) == Idle()
    log.apply(B.approve(log.state(), a.call_id))
    assert call(log, 0).status is ToolCallStatus.PENDING
    assert call(log, 0).waiting is None
    assert plan_next(log.state()) == StartToolCalls(step_id, (a.call_id,))
    log.apply(B.start_tool(log.state(), a.call_id))
    log.apply(B.tool_result(log.state(), a.call_id, '"deployed"'))
    final = log.state()
    assert isinstance(final.current, Open)
    assert final.last_tool_step is not None
    assert final.last_tool_step.id == step_id
    assert [c.status for c in final.last_tool_step.calls] == [ToolCallStatus.COMPLETED] * 2


# -- 11–15 -----------------------------------------------------------------------------


def test_unknown_tool_failure_settles_only_that_call() -> None:
    log = tool_step([("search", '{"n": 1}'), ("search", '{"n": 2}')])
    for i in range(2):
        log.apply(B.start_tool(log.state(), i))
    first, second = call(log, 0), call(log, 1)
    log.apply(B.tool_failure(log.state(), 0, failure_class=FailureClass.EFFECT_UNKNOWN,
                             outcome=ToolFailureOutcome.UNKNOWN))
    state = log.state()
    assert state.status is RunStatus.ACTIVE
    assert isinstance(state.current, ToolStep)
    assert call(log, 0).status is ToolCallStatus.FAILED
    assert call(log, 1).status is ToolCallStatus.EXECUTING
    log.apply(B.tool_result(log.state(), 1, '"done"'))
    final = log.state()
    assert final.status is RunStatus.ACTIVE
    assert isinstance(final.current, Open)
    assert final.last_tool_step is not None
    failed, completed = final.last_tool_step.calls
    assert (failed.call_id, completed.call_id) == (first.call_id, second.call_id)
    assert failed.status is ToolCallStatus.FAILED
    assert failed.failure is not None
    assert failed.failure.outcome is ToolFailureOutcome.UNKNOWN
    assert failed.failure.failure.class_ == FailureClass.EFFECT_UNKNOWN
    assert completed.status is ToolCallStatus.COMPLETED


def test_reject_model_result_retries_then_fails() -> None:
    malformed_retries = 2
    log = prepared("in-1")
    effects = []
    for round_ in range(3):
        log.apply(B.start_model(log.state()))
        step = log.state().current
        assert isinstance(step, ModelStep)
        assert step.effect == derive_effect_id(RUN, step.id, "", round_)  # INV-7
        effects.append(step.effect)
        disposition = (
            ModelRejectDisposition.RETRY
            if step.rejects < malformed_retries
            else ModelRejectDisposition.FAIL_RUN
        )
        result = log.apply(B.reject_model_result(log.state(), disposition=disposition,
                                                 usage=Usage(1, 2)))
        state = result.snapshot.state
        if round_ < 2:
            assert disposition is ModelRejectDisposition.RETRY
            assert isinstance(state.current, ModelStep)
            assert state.current.status is ModelStepStatus.PREPARED
            assert state.current.rejects == round_ + 1
            assert [type(f) for f in result.facts] == [F.ModelStepRejected]
        else:
            assert disposition is ModelRejectDisposition.FAIL_RUN
            assert [type(f) for f in result.facts] == [F.ModelStepRejected, F.RunEnded]
    assert len(set(effects)) == 3
    final = log.state()
    assert final.status is RunStatus.FAILED
    assert final.result is not None
    assert final.result.reason is RunReason.MALFORMED_MODEL_RESULT
    assert final.result.failure is not None
    assert final.result.failure.class_ == FailureClass.MALFORMED_MODEL_RESULT
    assert final.usage == Usage(3, 6)
    assert final.usage.total == 9
    assert final.result.usage.total == 9


def test_accept_input_duplicate_is_guarded() -> None:
    state = fresh("in-1").state()
    duplicate = F.InputAccepted(B.agent_input("in-1", "other body"))
    with pytest.raises(EvolveError) as ei:
        evolve(state, duplicate)
    assert ei.value.fact == duplicate
    with pytest.raises(CorruptLogError) as ci:
        fold_run((*create_group(NewRun(RUN), [B.agent_input("in-1")]), duplicate))
    assert ci.value.index == 2


def test_accept_input_queues_in_any_active_state() -> None:
    # PREPARED + input → the planner withdraws.
    log = prepared("in-1")
    step_id = log.state().current.id  # type: ignore[union-attr]
    log.apply(B.accept_input(log.state(), "in-2"))
    state = log.state()
    assert [i.id for i in state.pending_inputs] == ["in-2"]
    assert plan_next(state) == WithdrawPrepared(step_id)
    log.apply(B.withdraw(state))
    assert isinstance(log.state().current, Open)
    assert log.state().model_steps == 0
    # Withdraw without pending inputs → refused.
    log = prepared("in-1")
    built = B.withdraw(log.state())
    err = precondition(log.state(), built)
    assert err.phase is Phase.MODEL_PREPARED
    stale_at_commit(log, built)
    # EXECUTING + input → Idle; a text result then returns to Open without ending.
    log = executing("in-1")
    log.apply(B.accept_input(log.state(), "in-2"))
    assert plan_next(log.state()) == Idle()
    result = log.apply(B.model_result(log.state(), text="hello"))
    assert [type(f) for f in result.facts] == [F.ModelStepCompleted]
    state = log.state()
    assert state.status is RunStatus.ACTIVE
    assert isinstance(state.current, Open)
    assert [i.id for i in state.pending_inputs] == ["in-2"]
    # A ToolStep accepts inputs too, and they do not block it.
    log = tool_step([("search", "{}")])
    log.apply(B.accept_input(log.state(), "in-9"))
    assert isinstance(plan_next(log.state()), StartToolCalls)


def test_accept_input_rejects_seed_duplicate_id() -> None:
    log = fresh("in-1")
    state = log.state()
    for built in (
        B.accept_input(state, "in-1"),
        B.accept_input(state, "in-2", "in-2"),
        B.accept_input(state, "in-3", "in-1"),
    ):
        with pytest.raises(CommandConflictError) as ei:
            decide(state, built[1])
        assert ei.value.command == built[1]
        refused_at_commit(log, built, CommandConflictError)
    assert log.state().pending_inputs == state.pending_inputs
    # A fresh batch is still admissible, whole.
    log.apply(B.accept_input(state, "in-2", "in-3"))
    assert [i.id for i in log.state().pending_inputs] == ["in-1", "in-2", "in-3"]


# -- 16–20 -----------------------------------------------------------------------------


def _prepared_fact(*input_ids: str) -> F.ModelStepPrepared:
    return F.ModelStepPrepared(step_id="step-x", model="model-1", request_digest=DIGEST,
                               input_ids=input_ids)


def test_evolve_prepared_requires_complete_ordered_pending_inputs() -> None:
    state = fresh("in-1", "in-2").state()
    for ids in (("in-3",), ("in-1",), ("in-2", "in-1"), (), ("in-1", "in-2", "in-3")):
        fact = _prepared_fact(*ids)
        with pytest.raises(EvolveError) as ei:
            evolve(state, fact)
        assert ei.value.fact == fact
    new = evolve(state, _prepared_fact("in-1", "in-2"))
    assert new.pending_inputs == ()
    assert new.model_steps == 1


def test_evolve_rejects_model_prepare_over_current_step() -> None:
    prepared_log = prepared()
    executing_log = executing("in-1")
    tool_log = tool_step([("search", "{}")])
    for log in (prepared_log, executing_log, tool_log):
        state = log.state()
        with pytest.raises(EvolveError):
            evolve(state, _prepared_fact())
        built = B.prepare(state, log.position())
        err = precondition(state, built)
        assert err.phase is Phase.OTHER_STEP
        stale_at_commit(log, built)


def test_derived_call_id_tolerates_provider_id_reuse() -> None:
    log = executing("in-1", tools=("search",))
    state = log.state()
    step = state.current
    assert isinstance(step, ModelStep)
    calls = [("search", '{"n": 1}', "dup"), ("search", '{"n": 2}', "dup"),
             ("search", '{"n": 3}', ""), ("search", '{"n": 4}', "")]
    cid, command = B.model_result(state, tool_calls=calls)
    assert isinstance(command, C.SubmitModelResult)
    # A non-derived call id, or two ids swapped, is refused.
    bad = attrs.evolve(command.calls[0], call_id="call-1")
    precondition(state, attrs.evolve(command, calls=(bad, *command.calls[1:])))
    swapped = (command.calls[1], command.calls[0], *command.calls[2:])
    precondition(state, attrs.evolve(command, calls=swapped))
    stale_at_commit(log, (cid, attrs.evolve(command, calls=swapped)))
    result = log.apply((cid, command))
    opened = result.facts[1]
    assert isinstance(opened, F.ToolStepOpened)
    assert [b.call_id for b in opened.calls] == [derive_call_id(step.id, i) for i in range(4)]
    assert [b.provider_call_id for b in opened.calls] == ["dup", "dup", "", ""]
    assert len({c.call_id for c in call_list(log)}) == 4


def _settlements(kind: str) -> tuple[B.SimpleLog, B.Built]:
    """(log, built) for one settlement or recovery command of the running effect."""
    if kind.startswith("model"):
        log = executing("in-1")
        state = log.state()
        built = {
            "model_result": lambda: B.model_result(state, text="hi"),
            "model_failure": lambda: B.model_failure(state),
            "model_reject": lambda: B.reject_model_result(state),
            "model_recover": lambda: B.recover_model(state),
        }[kind]()
        return log, built
    log = tool_step([("search", "{}"), ("search", '{"n": 2}')])
    log.apply(B.start_tool(log.state(), 0))
    log.apply(B.start_tool(log.state(), 1))
    state = log.state()
    built = {
        "tool_result": lambda: B.tool_result(state, 0, '"ok"'),
        "tool_failure_known": lambda: B.tool_failure(state, 0),
        "tool_failure_unknown": lambda: B.tool_failure(
            state, 0, failure_class="", outcome=ToolFailureOutcome.UNKNOWN),
        "tool_failure_recovery": lambda: B.tool_failure(
            state, 0, failure_class=FailureClass.EFFECT_UNKNOWN,
            outcome=ToolFailureOutcome.UNKNOWN, recovery=True),
    }[kind]()
    return log, built


def _known_failure_of_pending_call_is_refused() -> None:
    """Scenario 19, last clause: a KNOWN failure of a PENDING call is not executing."""
    log = tool_step([("search", "{}")])
    state = log.state()
    step = state.current
    assert isinstance(step, ToolStep)
    pending = step.calls[0]
    assert pending.status is ToolCallStatus.PENDING
    effect = derive_effect_id(RUN, step.id, pending.call_id, 0)  # what a start would name
    command = C.SubmitToolFailure(
        step_id=step.id, call_id=pending.call_id, effect=effect,
        failure=Failure(FailureClass.EXECUTION_FAILED, "boom"),
    )
    err = precondition(state, command)
    assert err.phase is Phase.CALL_PENDING
    stale_at_commit(log, (derive_settlement_command_id(effect), command))
    # As built from the state (the call has no effect yet): a conflict at commit.
    refused_at_commit(log, B.tool_failure(state, 0), CommandConflictError)


SETTLEMENTS = [
    "model_result", "model_failure", "model_reject", "model_recover",
    "tool_result", "tool_failure_known", "tool_failure_unknown", "tool_failure_recovery",
]


@pytest.mark.parametrize("kind", SETTLEMENTS)
def test_settlement_names_executing_effect(kind: str) -> None:
    log, (cid, command) = _settlements(kind)
    state = log.state()
    # No effect: a conflict at commit (step 4), whatever the id.
    no_effect = attrs.evolve(command, effect="")
    precondition(state, no_effect)
    err = refused_at_commit(log, (cid, no_effect), CommandConflictError)
    assert err.command == no_effect  # type: ignore[attr-defined]
    # A foreign effect under its own derived id: stale at commit (decide refused).
    foreign_effects = [derive_effect_id("run-other", "step", "", 0)]
    if kind.startswith("tool"):
        foreign_effects.append(call(log, 1).effect)  # the sibling's running effect
    else:
        foreign_effects.append(derive_effect_id(RUN, command.step_id, "", 1))  # next retry
    derive = (
        derive_recovery_command_id
        if kind in ("model_recover", "tool_failure_recovery")
        else derive_settlement_command_id
    )
    assert cid == derive(command.effect)
    for foreign in foreign_effects:
        other = attrs.evolve(command, effect=foreign)
        precondition(state, other)
        stale_at_commit(log, (derive(foreign), other))
    # The running effect under its derived id is accepted.
    assert log.apply((cid, command)).status is CommitStatus.ACCEPTED
    if kind == "tool_failure_known":
        _known_failure_of_pending_call_is_refused()


def test_settlement_of_pending_call_is_refused() -> None:
    """Scenario 19, last clause, on its own (INV-5; cited by spec/SPEC.md)."""
    _known_failure_of_pending_call_is_refused()


def test_decline_tool_call_fails_pending_call_without_start() -> None:
    log = tool_step([("search", "{}"), ("search", '{"n": 2}'), ("search", '{"n": 3}')])
    log.apply(B.start_tool(log.state(), 2))
    state = log.state()
    step_id = state.current.id  # type: ignore[union-attr]
    # Declining an EXECUTING call.
    err = precondition(state, B.decline(state, 2))
    assert err.phase is Phase.CALL_EXECUTING
    stale_at_commit(log, B.decline(state, 2))
    # An unknown call.
    unknown = C.DeclineToolCall(step_id=step_id, call_id="no-such-call",
                                failure=Failure(FailureClass.TOOL_LOOKUP_FAILED))
    assert precondition(state, unknown).phase is Phase.NO_CALL
    # An empty class, or effect_unknown.
    for cls in ("", FailureClass.EFFECT_UNKNOWN):
        built = B.decline(state, 0, failure_class=cls)
        precondition(state, built)
        stale_at_commit(log, built)
    # Accepted: no effect, no start fact.
    target = call(log, 0)
    result = log.apply(B.decline(state, 0, message="no such tool"))
    assert result.facts == (
        F.ToolCallFailed(step_id=step_id, call_id=target.call_id, effect="",
                         failure=Failure(FailureClass.TOOL_LOOKUP_FAILED, "no such tool"),
                         outcome=ToolFailureOutcome.KNOWN),
    )
    declined = call(log, 0)
    assert declined.status is ToolCallStatus.FAILED
    assert declined.effect == ""
    assert not any(isinstance(f, F.ToolCallStarted) and f.call_id == target.call_id
                   for f in log.facts())
    # A second decline is refused by decide; at commit its derived id replays.
    second = B.decline(log.state(), 0)
    assert precondition(log.state(), second).phase is Phase.CALL_FINISHED
    before = len(log.commits)
    assert log.apply(second).facts == result.facts
    assert len(log.commits) == before
    # Starting a declined call is refused too.
    assert precondition(log.state(), B.start_tool(log.state(), 0)).phase is Phase.CALL_FINISHED


# -- 21–25 -----------------------------------------------------------------------------


def test_every_effect_ends_under_its_own_settlement() -> None:
    # SubmitModelFailure → ModelStepFailed + RunEnded(failed).
    for cls, reason in ((FailureClass.PROVIDER_FAILURE, RunReason.PROVIDER_FAILURE),
                        ("rate_limited", RunReason.PROVIDER_FAILURE),
                        (FailureClass.EFFECT_UNKNOWN, RunReason.EFFECT_UNKNOWN)):
        log = executing("in-1")
        step = log.state().current
        assert isinstance(step, ModelStep)
        result = log.apply(B.model_failure(log.state(), cls, "down"))
        assert result.facts == (
            F.ModelStepFailed(step_id=step.id, effect=step.effect, failure=Failure(cls, "down")),
            F.RunEnded(RunFailedEnd(reason, RunFailure(cls, "down"))),
        )
        assert log.state().status is RunStatus.FAILED
    # CancelRun while the model executes.
    log = executing("in-1")
    step = log.state().current
    assert isinstance(step, ModelStep)
    result = log.apply(B.cancel(log.state()))
    failed, ended = result.facts
    assert isinstance(failed, F.ModelStepFailed)
    assert (failed.step_id, failed.effect) == (step.id, step.effect)
    assert failed.failure.class_ == FailureClass.EFFECT_UNKNOWN
    assert ended == F.RunEnded(RunStoppedEnd(RunReason.CANCELLED, (), step.id))
    assert log.state().result is not None
    assert log.state().result.uncertain_model == step.id
    # evolve refuses RunEnded over an EXECUTING model step or call.
    model_state = executing("in-1").state()
    tool_log = tool_step([("search", "{}"), ("search", '{"n": 2}')])
    tool_log.apply(B.start_tool(tool_log.state(), 1))
    for state in (model_state, tool_log.state()):
        for end in (RunCompletedEnd(), RunStoppedEnd(RunReason.CANCELLED)):
            with pytest.raises(EvolveError):
                evolve(state, F.RunEnded(end))
    # ... and settlements naming another effect.
    step = model_state.current
    assert isinstance(step, ModelStep)
    other = derive_effect_id(RUN, step.id, "", 5)
    for fact in (
        F.ModelStepCompleted(step_id=step.id, effect=other, result_digest=DIGEST),
        F.ModelStepFailed(step_id=step.id, effect=other, failure=Failure("x")),
        F.ModelStepRejected(step_id=step.id, effect=other, failure=Failure("x")),
        F.ModelStepRecovered(step.id, other),
    ):
        with pytest.raises(EvolveError) as ei:
            evolve(model_state, fact)
        assert ei.value.fact == fact
    state = tool_log.state()
    running = call(tool_log, 1)
    sibling_effect = derive_effect_id(RUN, state.current.id, call(tool_log, 0).call_id, 0)  # type: ignore[union-attr]
    for fact in (
        F.ToolCallCompleted(step_id=state.current.id, call_id=running.call_id,  # type: ignore[union-attr]
                            effect=sibling_effect, output_digest=DIGEST),
        F.ToolCallFailed(step_id=state.current.id, call_id=running.call_id,  # type: ignore[union-attr]
                         effect=sibling_effect, failure=Failure("effect_unknown"),
                         outcome=ToolFailureOutcome.UNKNOWN),
        F.ToolCallFailed(step_id=state.current.id, call_id=running.call_id,  # type: ignore[union-attr]
                         effect="", failure=Failure("execution_failed")),
    ):
        with pytest.raises(EvolveError):
            evolve(state, fact)


def test_zero_bindings_with_tool_calls_rejected() -> None:
    log = executing("in-1", tools=("search",))
    state = log.state()
    cid, command = B.model_result(state, tool_calls=[("search", "{}"), ("other", "{}")])
    assert isinstance(command, C.SubmitModelResult)
    for calls in ((), command.calls[:1]):
        truncated = attrs.evolve(command, calls=calls)
        precondition(state, truncated)
        stale_at_commit(log, (cid, truncated))
    # And bindings for a result without tool calls are refused too.
    _, text = B.model_result(state, text="done")
    assert isinstance(text, C.SubmitModelResult)
    precondition(state, attrs.evolve(text, calls=command.calls[:1]))
    log.apply((cid, command))


def test_binding_must_match_model_result() -> None:
    offered = ("search", APPROVAL)
    log = executing("in-1", tools=offered)
    state = log.state()
    cid, command = B.model_result(
        state, tool_calls=[("search", '{"q": "a"}'), ("deploy", "{}"), ("unlisted", "[1]")])
    assert isinstance(command, C.SubmitModelResult)
    known, waiting, unknown = command.calls
    assert (unknown.tool_ref, unknown.definition_digest) == ("unlisted", "")
    assert unknown.policy is ResponsePolicy.DIRECT_EXECUTION
    tampered = [
        (0, attrs.evolve(known, tool_ref="other")),
        (0, attrs.evolve(known, definition_digest=DIGEST)),
        (0, attrs.evolve(known, tool_ref="search", definition_digest="")),  # bound as unknown
        (0, attrs.evolve(known, arguments='{"q":"b"}')),
        (0, attrs.evolve(known, provider_call_id="elsewhere")),
        (0, attrs.evolve(known, policy=ResponsePolicy.APPROVAL_REQUIRED)),
        (1, attrs.evolve(waiting, policy=ResponsePolicy.DIRECT_EXECUTION)),
        (1, attrs.evolve(waiting, response=ResponseRequest(
            run_id=RUN, step_id="elsewhere", call_id=waiting.call_id, id="r",
            kind=ResponseKind.APPROVAL, payload=waiting.arguments))),
        (2, attrs.evolve(unknown, tool_ref="search")),
        (2, attrs.evolve(unknown, definition_digest=DIGEST)),
        (2, attrs.evolve(unknown, policy=ResponsePolicy.EXTERNAL_RESPONSE)),
        (2, attrs.evolve(unknown, arguments="[2]")),
    ]
    for index, binding in tampered:
        calls = list(command.calls)
        calls[index] = binding
        bad = attrs.evolve(command, calls=tuple(calls))
        precondition(state, bad)
        stale_at_commit(log, (cid, bad))
    # A response given explicitly must be the derived one, and is then accepted.
    tool_step_id = derive_tool_step_id(command.step_id)
    derived = ResponseRequest(
        run_id=RUN, step_id=tool_step_id, call_id=waiting.call_id,
        id=derive_response_id(RUN, tool_step_id, waiting.call_id, "approval"),
        kind=ResponseKind.APPROVAL, payload=waiting.arguments,
    )
    explicit = attrs.evolve(command, calls=(known, attrs.evolve(waiting, response=derived),
                                            unknown))
    assert decide(state, explicit) == decide(state, command)
    log.apply((cid, command))
    assert call(log, 1).waiting == derived


def test_tool_step_id_reproducible() -> None:
    log = executing("in-1", tools=("search",))
    state = log.state()
    source = state.current.id  # type: ignore[union-attr]
    completed, opened = decide(state, B.model_result(state, tool_calls=[("search", "{}")])[1])
    assert isinstance(opened, F.ToolStepOpened)
    assert opened.step_id == derive_tool_step_id(source)
    at_open = evolve(state, completed)
    for bad_id in ("tool-step-1", derive_tool_step_id("another-step")):
        bad = attrs.evolve(opened, step_id=bad_id)
        with pytest.raises(EvolveError):
            evolve(at_open, bad)
    with pytest.raises(EvolveError):  # a source that does not derive the id
        evolve(at_open, attrs.evolve(opened, source="another-step"))
    log.apply(B.model_result(state, tool_calls=[("search", "{}")]))
    for folded in (log.state(), fold_run(log.facts())):
        assert isinstance(folded.current, ToolStep)
        assert folded.current.id == derive_tool_step_id(folded.current.source)
        assert folded.current.source == source
    log.apply(B.start_tool(log.state(), 0))
    log.apply(B.tool_result(log.state(), 0, '"x"'))
    for folded in (log.state(), fold_run(log.facts())):
        assert folded.last_tool_step is not None
        assert folded.last_tool_step.id == derive_tool_step_id(source)


def test_evolve_rejects_illegal_call_state() -> None:
    log = tool_step([("search", "{}"), ("search", '{"n": 2}')])
    log.apply(B.start_tool(log.state(), 0))
    state = log.state()
    step_id = state.current.id  # type: ignore[union-attr]
    running, pending = call(log, 0), call(log, 1)
    bad_facts = [
        # UNKNOWN with a class other than effect_unknown.
        F.ToolCallFailed(step_id=step_id, call_id=running.call_id, effect=running.effect,
                         failure=Failure(FailureClass.EXECUTION_FAILED),
                         outcome=ToolFailureOutcome.UNKNOWN),
        # KNOWN with effect_unknown.
        F.ToolCallFailed(step_id=step_id, call_id=running.call_id, effect=running.effect,
                         failure=Failure(FailureClass.EFFECT_UNKNOWN),
                         outcome=ToolFailureOutcome.KNOWN),
        F.ToolCallFailed(step_id=step_id, call_id=pending.call_id, effect="",
                         failure=Failure(FailureClass.EFFECT_UNKNOWN),
                         outcome=ToolFailureOutcome.KNOWN),
        # UNKNOWN from a call that never started.
        F.ToolCallFailed(step_id=step_id, call_id=pending.call_id, effect="",
                         failure=Failure(FailureClass.EFFECT_UNKNOWN),
                         outcome=ToolFailureOutcome.UNKNOWN),
        # No class at all.
        F.ToolCallFailed(step_id=step_id, call_id=pending.call_id, effect="",
                         failure=Failure("")),
    ]
    for fact in bad_facts:
        with pytest.raises(EvolveError) as ei:
            evolve(state, fact)
        assert ei.value.fact == fact
    # The same disagreement is refused as a state by validate_tool_call_state.
    for failure in (
        ToolCallFailure(Failure(FailureClass.EXECUTION_FAILED), ToolFailureOutcome.UNKNOWN),
        ToolCallFailure(Failure(FailureClass.EFFECT_UNKNOWN), ToolFailureOutcome.KNOWN),
    ):
        with pytest.raises(ValidationError):
            validate_tool_call_state(
                attrs.evolve(running, status=ToolCallStatus.FAILED, failure=failure))
    # The legal pairs fold.
    evolve(state, attrs.evolve(bad_facts[0], failure=Failure(FailureClass.EFFECT_UNKNOWN)))
    evolve(state, attrs.evolve(bad_facts[2], failure=Failure(FailureClass.EXECUTION_FAILED)))


# -- 26–29 -----------------------------------------------------------------------------


@pytest.mark.parametrize("reason", ["", "cancelled"])
def test_cancel_reason_fixed(reason: str) -> None:
    log = fresh("in-1")
    for bad in ("user", "Cancelled", " cancelled"):
        built = B.cancel(log.state(), bad, command_id=f"cancel:{bad}")
        err = precondition(log.state(), built)
        assert err.phase is Phase.ANY
        stale_at_commit(log, built)
    result = log.apply(B.cancel(log.state(), reason))
    assert result.facts == (F.RunEnded(RunStoppedEnd(RunReason.CANCELLED)),)
    state = log.state()
    assert state.status is RunStatus.STOPPED
    assert state.result is not None
    assert state.result.reason is RunReason.CANCELLED
    assert state.current is None
    validate_machine_state(state)


@pytest.mark.parametrize("waiting_tool", [APPROVAL, EXTERNAL], ids=["approval", "external"])
def test_cancel_settles_every_unfinished_tool_call(waiting_tool: ToolSpec) -> None:
    log = tool_step(
        [("search", '{"n": 1}'), ("search", '{"n": 2}'), (waiting_tool.name, "{}")],
        tools=("search", waiting_tool),
    )
    log.apply(B.start_tool(log.state(), 0))
    state = log.state()
    step_id = state.current.id  # type: ignore[union-attr]
    executing_call, pending_call, waiting_call = call_list(log)
    assert [c.status for c in call_list(log)] == [
        ToolCallStatus.EXECUTING, ToolCallStatus.PENDING, ToolCallStatus.WAITING]
    result = log.apply(B.cancel(log.state(), "cancelled"))
    assert [type(f) for f in result.facts] == [F.ToolCallFailed] * 3 + [F.RunEnded]
    f_exec, f_pend, f_wait, ended = result.facts
    assert f_exec == F.ToolCallFailed(
        step_id=step_id, call_id=executing_call.call_id, effect=executing_call.effect,
        failure=f_exec.failure, outcome=ToolFailureOutcome.UNKNOWN)  # type: ignore[union-attr]
    assert f_exec.failure.class_ == FailureClass.EFFECT_UNKNOWN  # type: ignore[union-attr]
    for fact, target in ((f_pend, pending_call), (f_wait, waiting_call)):
        assert isinstance(fact, F.ToolCallFailed)
        assert (fact.call_id, fact.effect, fact.outcome) == (
            target.call_id, "", ToolFailureOutcome.KNOWN)
        assert fact.failure.class_ == FailureClass.CANCELLED
    assert ended == F.RunEnded(RunStoppedEnd(RunReason.CANCELLED, (executing_call.call_id,)))
    final = log.state()
    assert final.status is RunStatus.STOPPED
    assert final.result is not None
    assert final.result.uncertain_calls == (executing_call.call_id,)
    assert final.result.uncertain_model == ""
    assert final.last_tool_step is not None
    assert [c.status for c in final.last_tool_step.calls] == [ToolCallStatus.FAILED] * 3
    assert fold_run(log.facts()) == final


def test_cancel_keeps_results_of_finished_calls() -> None:
    """INV-23: calls finished before the cancel are left alone."""
    log = tool_step([("search", "{}"), ("search", '{"n": 2}')])
    log.apply(B.start_tool(log.state(), 0))
    log.apply(B.tool_result(log.state(), 0, '"kept"'))
    kept = call(log, 0)
    result = log.apply(B.cancel(log.state()))
    assert [type(f) for f in result.facts] == [F.ToolCallFailed, F.RunEnded]
    final = log.state()
    assert final.last_tool_step is not None
    assert final.last_tool_step.calls[0] == kept
    assert final.result is not None
    assert final.result.uncertain_calls == ()


def test_new_run_validation() -> None:
    good = B.agent_input("in-1")
    cases = [
        (NewRun(""), []),
        (NewRun("run-\ud800"), []),
        (NewRun(RUN), [AgentInput("", good.digest)]),
        (NewRun(RUN), [AgentInput("in-1", "")]),
        (NewRun(RUN), [good, B.agent_input("in-1", "other")]),
        (NewRun(RUN), [good, B.agent_input("in-2"), good]),
    ]
    for new_run, inputs in cases:
        with pytest.raises(ValidationError):
            create_group(new_run, inputs)
        log = B.SimpleLog()
        with pytest.raises(ValidationError):
            log.create(new_run.run_id, inputs)
        assert log.commits == []
    assert len(create_group(NewRun(RUN), [])) == 1  # zero inputs are allowed


def test_commit_envelope_and_identity_checks() -> None:
    """§4.3 steps 2, 3, 5 and 7 around the scenarios above (not an §8.1 item)."""
    log = fresh("in-1")
    cid, command = B.prepare(log.state(), log.position())
    for request, error in (
        (log.request("", command), CommandConflictError),  # empty command id
        (log.request(cid, command, run_id="run-unknown"), RunNotFoundError),
        (log.request(cid, command, base=-1), CommandConflictError),  # nothing derives
        (log.request(cid, command, base=log.position() + 1), CommandConflictError),
    ):
        with pytest.raises(error):
            log.submit(request)
        assert len(log.commits) == 1
    # A stale base under the id derived from that base: the hard CAS (step 7).
    old_cid, old = B.prepare(log.state(), 0)
    with pytest.raises(StaleRuntimeError):
        log.apply((old_cid, old), base=0)
    # A step id not derived from the command id (step 9).
    with pytest.raises(StaleRuntimeError):
        log.apply((cid, attrs.evolve(command, step_id="step-x")))
    assert log.apply((cid, command)).status is CommitStatus.ACCEPTED
