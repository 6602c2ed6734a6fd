"""The decide table is exhaustive (style §1.1) and the planner follows §2.9/§2.10.

Every ``(command type, Phase)`` pair is either a row of ``DECIDE_TABLE``, a deliberate
refusal listed here, or a pair ``phase_of`` can never produce (listed too). Dropping or
adding a row without updating this file fails the test.
"""

from __future__ import annotations

from collections.abc import Callable
from itertools import product
from typing import Any

import attrs
import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol._decide import DECIDE_TABLE, Phase, decide, phase_of
from runx_actors.protocol.commit import CommitStatus, fold_run
from runx_actors.protocol.errors import PreconditionError, RunTerminalError, ValidationError
from runx_actors.protocol.ids import derive_recovery_command_id
from runx_actors.protocol.plan import (
    RECOVERY_MESSAGE,
    Idle,
    NeedModelRequest,
    PromptInput,
    RecoveryTarget,
    StartModelCall,
    StartToolCalls,
    WithdrawPrepared,
    executing_calls,
    is_quiescent,
    needs_recovery,
    plan_next,
    recovery_command,
    recovery_targets,
    waiting_calls,
)
from runx_actors.protocol.state import MachineState, ModelStep, ToolStep
from runx_actors.protocol.values import (
    Failure,
    FailureClass,
    ModelRejectDisposition,
    ModelRequest,
    ModelResult,
    ResponsePolicy,
    ToolCallStatus,
    ToolFailureOutcome,
    ToolResult,
)
from runx_actors.testing import builders as B

RUN = "run-1"
DIGEST = "sha256:" + "0" * 64
APPROVAL = B.tool_spec("deploy", policy=ResponsePolicy.APPROVAL_REQUIRED)
EXTERNAL = B.tool_spec("ask_human", policy=ResponsePolicy.EXTERNAL_RESPONSE)

_MODEL_ONLY = (Phase.MODEL_PREPARED, Phase.MODEL_EXECUTING)
_CALL_ONLY = (Phase.NO_CALL, Phase.CALL_PENDING, Phase.CALL_EXECUTING, Phase.CALL_WAITING,
              Phase.CALL_FINISHED)
_NOT_ANY = (Phase.OPEN, Phase.OTHER_STEP, *_MODEL_ONLY, *_CALL_ONLY)

#: Pairs ``phase_of`` never yields: commands without a step only see ANY; model
#: commands never see a call phase; call commands never see a model phase.
UNREACHABLE: dict[type[Any], tuple[Phase, ...]] = {
    C.AcceptInput: _NOT_ANY,
    C.CancelRun: _NOT_ANY,
    C.PrepareModelRequest: (Phase.ANY, *_MODEL_ONLY, *_CALL_ONLY),
    C.WithdrawPreparedStep: (Phase.ANY, *_CALL_ONLY),
    C.StartModelExecution: (Phase.ANY, *_CALL_ONLY),
    C.RecoverModelExecution: (Phase.ANY, *_CALL_ONLY),
    C.SubmitModelResult: (Phase.ANY, *_CALL_ONLY),
    C.SubmitModelFailure: (Phase.ANY, *_CALL_ONLY),
    C.RejectModelResult: (Phase.ANY, *_CALL_ONLY),
    C.StartToolCall: (Phase.ANY, *_MODEL_ONLY),
    C.SubmitToolResult: (Phase.ANY, *_MODEL_ONLY),
    C.SubmitToolFailure: (Phase.ANY, *_MODEL_ONLY),
    C.DeclineToolCall: (Phase.ANY, *_MODEL_ONLY),
    C.ApproveToolCall: (Phase.ANY, *_MODEL_ONLY),
    C.RejectToolCall: (Phase.ANY, *_MODEL_ONLY),
    C.SubmitToolResponse: (Phase.ANY, *_MODEL_ONLY),
}

#: Reachable pairs decide refuses on purpose (PreconditionError), with the rule.
DELIBERATE_REFUSALS: dict[type[Any], tuple[Phase, ...]] = {
    # AcceptInput and CancelRun are legal in every non-terminal state (C1, C16).
    C.AcceptInput: (),
    C.CancelRun: (),
    # C2: only at Open.
    C.PrepareModelRequest: (Phase.OTHER_STEP,),
    # C3/C4: only a PREPARED step is withdrawn or started.
    C.WithdrawPreparedStep: (Phase.OPEN, Phase.OTHER_STEP, Phase.MODEL_EXECUTING),
    C.StartModelExecution: (Phase.OPEN, Phase.OTHER_STEP, Phase.MODEL_EXECUTING),
    # C5–C8: only an EXECUTING step is settled or recovered.
    C.RecoverModelExecution: (Phase.OPEN, Phase.OTHER_STEP, Phase.MODEL_PREPARED),
    C.SubmitModelResult: (Phase.OPEN, Phase.OTHER_STEP, Phase.MODEL_PREPARED),
    C.SubmitModelFailure: (Phase.OPEN, Phase.OTHER_STEP, Phase.MODEL_PREPARED),
    C.RejectModelResult: (Phase.OPEN, Phase.OTHER_STEP, Phase.MODEL_PREPARED),
    # C9/C12: only a PENDING call is started or declined (INV-6, INV-22).
    C.StartToolCall: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_EXECUTING,
                      Phase.CALL_WAITING, Phase.CALL_FINISHED),
    C.DeclineToolCall: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_EXECUTING,
                        Phase.CALL_WAITING, Phase.CALL_FINISHED),
    # C10/C11: only an EXECUTING call is settled (INV-5).
    C.SubmitToolResult: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_PENDING,
                         Phase.CALL_WAITING, Phase.CALL_FINISHED),
    C.SubmitToolFailure: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_PENDING,
                          Phase.CALL_WAITING, Phase.CALL_FINISHED),
    # C13–C15: only a WAITING call takes a response.
    C.ApproveToolCall: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_PENDING,
                        Phase.CALL_EXECUTING, Phase.CALL_FINISHED),
    C.RejectToolCall: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_PENDING,
                       Phase.CALL_EXECUTING, Phase.CALL_FINISHED),
    C.SubmitToolResponse: (Phase.OPEN, Phase.OTHER_STEP, Phase.NO_CALL, Phase.CALL_PENDING,
                           Phase.CALL_EXECUTING, Phase.CALL_FINISHED),
}


def _pairs(table: dict[type[Any], tuple[Phase, ...]]) -> set[tuple[type[Any], Phase]]:
    return {(t, p) for t, phases in table.items() for p in phases}


# -- sample commands and states --------------------------------------------------------


def _sample(kind: type[Any], step_id: str, call_id: str) -> Any:
    """A structurally valid command of *kind* naming *step_id* / *call_id*."""
    step = {"step_id": step_id}
    tool = {"step_id": step_id, "call_id": call_id}
    factories: dict[type[Any], Callable[[], Any]] = {
        C.AcceptInput: lambda: C.AcceptInput((B.agent_input("in-z"),)),
        C.CancelRun: lambda: C.CancelRun(),
        C.PrepareModelRequest: lambda: C.PrepareModelRequest(
            model="m", request=ModelRequest("m"), request_digest=DIGEST, **step),
        C.WithdrawPreparedStep: lambda: C.WithdrawPreparedStep(step_id),
        C.StartModelExecution: lambda: C.StartModelExecution(step_id, "e"),
        C.RecoverModelExecution: lambda: C.RecoverModelExecution(step_id, "e"),
        C.SubmitModelResult: lambda: C.SubmitModelResult(
            effect="e", result=ModelResult(), **step),
        C.SubmitModelFailure: lambda: C.SubmitModelFailure(
            effect="e", failure=Failure("x"), **step),
        C.RejectModelResult: lambda: C.RejectModelResult(
            effect="e", failure=Failure("x"), disposition=ModelRejectDisposition.RETRY, **step),
        C.StartToolCall: lambda: C.StartToolCall(effect="e", **tool),
        C.SubmitToolResult: lambda: C.SubmitToolResult(
            effect="e", result=ToolResult('"x"'), **tool),
        C.SubmitToolFailure: lambda: C.SubmitToolFailure(
            effect="e", failure=Failure("x"), **tool),
        C.DeclineToolCall: lambda: C.DeclineToolCall(failure=Failure("x"), **tool),
        C.ApproveToolCall: lambda: C.ApproveToolCall(
            response_id="r", response_digest=DIGEST, **tool),
        C.RejectToolCall: lambda: C.RejectToolCall(
            response_id="r", response_digest=DIGEST, **tool),
        C.SubmitToolResponse: lambda: C.SubmitToolResponse(
            response_id="r", response_digest=DIGEST, payload="{}", **tool),
    }
    return factories[kind]()


def _log(*inputs: str) -> B.SimpleLog:
    return B.SimpleLog.with_run(RUN, inputs)


def _prepared(*inputs: str) -> B.SimpleLog:
    log = _log("in-1")
    log.apply(B.prepare(log.state(), log.position(), tools=("search", APPROVAL, EXTERNAL)))
    if inputs:
        log.apply(B.accept_input(log.state(), *inputs))
    return log


def _executing(*inputs: str) -> B.SimpleLog:
    log = _log("in-1")
    log.apply(B.prepare(log.state(), log.position(), tools=("search", APPROVAL, EXTERNAL)))
    log.apply(B.start_model(log.state()))
    if inputs:
        log.apply(B.accept_input(log.state(), *inputs))
    return log


def _tool_log(statuses: str) -> B.SimpleLog:
    """A ToolStep whose calls are, in order: p(ending) e(xecuting) a(pproval waiting)
    x (external waiting) c(ompleted) f(ailed)."""
    names = {"p": "search", "e": "search", "c": "search", "f": "search", "a": "deploy",
             "x": "ask_human"}
    log = _executing()
    log.apply(B.model_result(log.state(), tool_calls=[
        (names[s], f'{{"i": {i}}}') for i, s in enumerate(statuses)]))
    for i, s in enumerate(statuses):
        if s in "ecf":
            log.apply(B.start_tool(log.state(), i))
        if s == "c":
            log.apply(B.tool_result(log.state(), i, '"ok"'))
        if s == "f":
            log.apply(B.tool_failure(log.state(), i))
    return log


def _states() -> list[MachineState]:
    return [
        _log("in-1").state(),
        _prepared().state(),
        _prepared("in-2").state(),
        _executing().state(),
        _tool_log("pexacf").state(),
    ]


def _targets(state: MachineState) -> list[tuple[str, str]]:
    cur = state.current
    out = [("other-step", "other-call")]
    if isinstance(cur, ModelStep):
        out.append((cur.id, ""))
    if isinstance(cur, ToolStep):
        out += [(cur.id, c.call_id) for c in cur.calls] + [(cur.id, "no-such-call")]
    return out


# -- the exhaustiveness test -----------------------------------------------------------


def test_decide_table_is_exhaustive() -> None:
    table = set(DECIDE_TABLE)
    refused = _pairs(DELIBERATE_REFUSALS)
    unreachable = _pairs(UNREACHABLE)
    every = set(product(C.COMMAND_TYPES, Phase))
    assert len(C.COMMAND_TYPES) == 16
    assert not table & refused
    assert not table & unreachable
    assert not refused & unreachable
    assert table | refused | unreachable == every, sorted(
        (t.__name__, p.name) for t, p in every - table - refused - unreachable)
    # One legal row at least per command type.
    assert {t for t, _ in table} == set(C.COMMAND_TYPES)


def test_decide_table_phases_are_reachable() -> None:
    """Every legal and refused pair occurs on some state; no unreachable one does."""
    observed: set[tuple[type[Any], Phase]] = set()
    for state in _states():
        for kind, (step_id, call_id) in product(C.COMMAND_TYPES, _targets(state)):
            command = _sample(kind, step_id, call_id)
            phase = phase_of(state, command)
            observed.add((kind, phase))
            if (kind, phase) in _pairs(DELIBERATE_REFUSALS):
                with pytest.raises(PreconditionError) as ei:
                    decide(state, command)
                assert ei.value.phase is phase
                assert ei.value.command == command
    assert observed == set(DECIDE_TABLE) | _pairs(DELIBERATE_REFUSALS)


def test_decide_refuses_every_command_on_a_terminal_run() -> None:
    log = _executing()
    log.apply(B.model_result(log.state(), text="done"))
    state = log.state()
    assert state.current is None
    for kind in C.COMMAND_TYPES:
        command = _sample(kind, "s", "c")
        with pytest.raises(RunTerminalError) as ei:
            decide(state, command)
        assert ei.value.status is state.status


# -- planning (§2.9) -------------------------------------------------------------------


def _terminal(kind: str) -> MachineState:
    log = _executing()
    if kind == "completed":
        log.apply(B.model_result(log.state(), text="done"))
    elif kind == "failed":
        log.apply(B.model_failure(log.state()))
    else:
        log.apply(B.cancel(log.state()))
    return log.state()


def _after_tool_step() -> tuple[MachineState, Any]:
    log = _tool_log("p")
    step_id = log.state().current.id  # type: ignore[union-attr]
    log.apply(B.accept_input(log.state(), "in-7"))
    log.apply(B.start_tool(log.state(), 0))
    log.apply(B.tool_result(log.state(), 0, '"ok"'))
    state = log.state()
    return state, NeedModelRequest(PromptInput(
        scope="", run_id=RUN, source_step=step_id, inputs=state.pending_inputs))


def _fresh_open() -> tuple[MachineState, Any]:
    state = _log("in-1", "in-2").state()
    return state, NeedModelRequest(PromptInput(run_id=RUN, inputs=state.pending_inputs))


def _prepared_row(inputs: bool) -> tuple[MachineState, Any]:
    state = _prepared(*(("in-2",) if inputs else ())).state()
    step_id = state.current.id  # type: ignore[union-attr]
    return state, WithdrawPrepared(step_id) if inputs else StartModelCall(step_id)


def _tool_row(statuses: str) -> tuple[MachineState, Any]:
    state = _tool_log(statuses).state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    pending = tuple(c.call_id for c in cur.calls if c.status is ToolCallStatus.PENDING)
    return state, StartToolCalls(cur.id, pending) if pending else Idle()


def _dead_tool_step() -> tuple[MachineState, Any]:
    state = _tool_log("pc").state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    dead = attrs.evolve(cur, calls=(cur.calls[1], cur.calls[1]))
    return attrs.evolve(state, current=dead), ValidationError


PLAN_ROWS: dict[str, Callable[[], tuple[MachineState, Any]]] = {
    "terminal-completed": lambda: (_terminal("completed"), RunTerminalError),
    "terminal-failed": lambda: (_terminal("failed"), RunTerminalError),
    "terminal-stopped": lambda: (_terminal("stopped"), RunTerminalError),
    "open-fresh": _fresh_open,
    "open-after-tool-step": _after_tool_step,
    "prepared-inputs-pending": lambda: _prepared_row(True),
    "prepared-no-inputs": lambda: _prepared_row(False),
    "model-executing": lambda: (_executing().state(), Idle()),
    "model-executing-inputs-pending": lambda: (_executing("in-2").state(), Idle()),
    "tool-step-pending-first": lambda: _tool_row("pexacf"),
    "tool-step-pending-among-others": lambda: _tool_row("epcap"),
    "tool-step-waiting-only": lambda: _tool_row("axc"),
    "tool-step-executing-only": lambda: _tool_row("ef"),
    "tool-step-no-live-call": _dead_tool_step,
}


@pytest.mark.parametrize("row", list(PLAN_ROWS))
def test_plan_next_table(row: str) -> None:
    state, expected = PLAN_ROWS[row]()
    if isinstance(expected, type) and issubclass(expected, Exception):
        with pytest.raises(expected):
            plan_next(state)
        return
    assert plan_next(state) == expected
    if isinstance(expected, StartToolCalls):
        assert expected.call_ids  # at least one PENDING call, in call order
    if row == "tool-step-pending-among-others":
        # Inputs never block a ToolStep; waiting calls block only themselves.
        log = _tool_log("epcap")
        log.apply(B.accept_input(log.state(), "in-9"))
        assert plan_next(log.state()) == expected


# -- queries (§2.10) -------------------------------------------------------------------


def test_waiting_calls_and_executing_calls() -> None:
    state = _tool_log("axepx").state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    a, x1, e, _p, x2 = cur.calls
    assert waiting_calls(state) == (a.waiting, x1.waiting, x2.waiting)
    assert executing_calls(state) == (e.call_id,)
    for other in (_log("in-1").state(), _prepared().state(), _executing().state(),
                  _terminal("completed")):
        assert waiting_calls(other) == ()
        assert executing_calls(other) == ()


NEEDS_RECOVERY = {
    "open": (lambda: _log("in-1").state(), False),
    "prepared": (lambda: _prepared().state(), False),
    "model-executing": (lambda: _executing().state(), True),
    "executing-and-pending": (lambda: _tool_log("ep").state(), False),
    "executing-and-waiting": (lambda: _tool_log("eac").state(), True),
    "executing-only": (lambda: _tool_log("ee").state(), True),
    "waiting-only": (lambda: _tool_log("ax").state(), False),
    "pending-only": (lambda: _tool_log("p").state(), False),
    "terminal": (lambda: _terminal("stopped"), False),
}


@pytest.mark.parametrize("case", list(NEEDS_RECOVERY))
def test_needs_recovery(case: str) -> None:
    make, expected = NEEDS_RECOVERY[case]
    assert needs_recovery(make()) is expected


def test_recovery_targets_and_commands() -> None:
    # Model target.
    log = _executing()
    step = log.state().current
    assert isinstance(step, ModelStep)
    (target,) = recovery_targets(log.state())
    assert target == RecoveryTarget(run_id=RUN, step_id=step.id, call_id="", effect=step.effect)
    cid, command = recovery_command(target)
    assert cid == derive_recovery_command_id(step.effect)
    assert command == C.RecoverModelExecution(step.id, step.effect)
    result = log.commit(cid, command)
    assert result.status is CommitStatus.ACCEPTED
    assert log.state().model_steps == 0
    assert log.commit(cid, command).status is CommitStatus.ALREADY_APPLIED  # INV-29
    # Tool targets: every EXECUTING call, in call order; PENDING and WAITING untouched.
    log = _tool_log("epaex")
    state = log.state()
    cur = state.current
    assert isinstance(cur, ToolStep)
    targets = recovery_targets(state)
    assert targets == tuple(
        RecoveryTarget(run_id=RUN, step_id=cur.id, call_id=c.call_id, effect=c.effect)
        for c in cur.calls if c.status is ToolCallStatus.EXECUTING)
    assert len(targets) == 2
    for t in targets:
        cid, command = recovery_command(t)
        assert cid == derive_recovery_command_id(t.effect)
        assert command == C.SubmitToolFailure(
            step_id=t.step_id, call_id=t.call_id, effect=t.effect,
            failure=Failure("effect_unknown", "owner process lost before settlement"),
            outcome=ToolFailureOutcome.UNKNOWN)
        assert command.failure.message == RECOVERY_MESSAGE
        assert log.commit(cid, command).status is CommitStatus.ACCEPTED
        assert log.commit(cid, command).status is CommitStatus.ALREADY_APPLIED
    after = log.state()
    assert isinstance(after.current, ToolStep)
    assert [c.status for c in after.current.calls] == [
        ToolCallStatus.FAILED, ToolCallStatus.PENDING, ToolCallStatus.WAITING,
        ToolCallStatus.FAILED, ToolCallStatus.WAITING]
    assert all(c.failure.outcome is ToolFailureOutcome.UNKNOWN  # type: ignore[union-attr]
               for c in after.current.calls if c.status is ToolCallStatus.FAILED)
    assert after.current.calls[0].failure.failure.class_ == FailureClass.EFFECT_UNKNOWN  # type: ignore[union-attr]
    assert recovery_targets(after) == ()
    assert fold_run(log.facts()) == after
    # No targets elsewhere.
    for other in (_log("in-1").state(), _prepared().state(), _tool_log("pax").state(),
                  _terminal("failed")):
        assert recovery_targets(other) == ()


QUIESCENT = {
    "open": (lambda: _log("in-1").state(), True),
    "prepared": (lambda: _prepared().state(), False),
    "model-executing": (lambda: _executing().state(), False),
    "tool-step-pending-waiting": (lambda: _tool_log("paxc").state(), True),
    "tool-step-executing": (lambda: _tool_log("pe").state(), False),
    "terminal": (lambda: _terminal("completed"), False),
}


@pytest.mark.parametrize("case", list(QUIESCENT))
def test_is_quiescent(case: str) -> None:
    make, expected = QUIESCENT[case]
    assert is_quiescent(make()) is expected
