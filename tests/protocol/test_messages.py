"""The exact text of every error the commit path of the protocol raises (issue 13 item 8).

A message is what a user reads in a traceback, a log line or a CLI report, so it is part
of what the protocol does, not decoration: each row below triggers one raise site of
``protocol/commit.py``, ``_decide.py``, ``_evolve.py`` or ``ids.py`` and compares the
error's type and ``str()`` with a text written out here by hand. The oracle is that text,
never a call to the code that formats it.

The wording follows the spec's names: the command or fact type first, then the reason
(``"<CommandType>: <reason>"`` for ``decide``'s refusals, §2.8; ``"<FactType>: <reason>"``
for ``evolve``'s, §2.7); a commit refusal that wraps a ``decide`` refusal says what to do
(``"reload and derive again: …"``, §4.3 step 8); a fold failure names the fact's position
and wire name (§2.11). The reasons of every individual refusal are checked, as
attributes, by ``test_mutation_killers.py``; its helpers also pin the framing above for
every refusal they trigger.
"""

from __future__ import annotations

from collections.abc import Callable

import attrs
import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol._decide import decide
from runx_actors.protocol._evolve import evolve
from runx_actors.protocol.commit import (
    CommandEnvelope,
    CommitRequest,
    Snapshot,
    check_batch,
    create_group,
    envelope,
    evaluate_batch,
    evaluate_commit,
    expected_command_ids,
    fold_run,
    validate_identity,
)
from runx_actors.protocol.digests import decision_digest
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
from runx_actors.protocol.ids import derive, derive_input_command_id
from runx_actors.protocol.state import MachineState, ToolCallState, ToolStep
from runx_actors.protocol.values import (
    AgentInput,
    NewRun,
    ResponseKind,
    ResponsePolicy,
    RunStatus,
    ToolCallStatus,
)
from runx_actors.testing import builders as B

RUN = "run-1"
DIGEST = "sha256:" + "1" * 64


def _fresh(*inputs: str) -> B.SimpleLog:
    return B.SimpleLog.with_run(RUN, inputs)


def _prepared() -> B.SimpleLog:
    log = _fresh("in-1")
    log.apply(B.prepare(log.state(), log.position()))
    return log


def _executing() -> B.SimpleLog:
    log = _prepared()
    log.apply(B.start_model(log.state()))
    return log


def _ended() -> B.SimpleLog:
    log = _fresh("in-1")
    log.apply(B.cancel(log.state()))
    return log


class _StaleProjection:
    """A CommitView whose projection answers *snapshot* for every Run (a store bug)."""

    def __init__(self, snapshot: Snapshot) -> None:
        self.snapshot = snapshot

    def replay_facts(self, command_id: str, run_id: str) -> tuple[F.Fact, ...] | None:
        return None

    def active(self, run_id: str) -> Snapshot | None:
        return self.snapshot

    def stream_exists(self, run_id: str) -> bool:
        return True


# -- commit.py -----------------------------------------------------------------------------


def _run_ended_at_locate() -> object:
    log = _ended()
    return log.evaluate(log.request(*B.accept_input(_fresh().state(), "in-2")))


def _run_not_found() -> object:
    log = _fresh("in-1")
    return log.evaluate(log.request(*B.accept_input(log.state(), "in-2"), run_id="run-9"))


def _envelope_empty_id() -> object:
    log = _fresh("in-1")
    return log.evaluate(CommitRequest(log.position(), CommandEnvelope(
        "cancel_run", RUN, "", C.CancelRun())))


def _envelope_other_run() -> object:
    log = _fresh("in-1")
    command = C.AcceptInput((B.agent_input("in-2"),))
    return evaluate_commit(_StaleProjection(log.snapshot()), CommitRequest(
        log.position(), CommandEnvelope("accept_input", "run-2",
                                        derive_input_command_id("run-2", "in-2"), command)))


def _envelope_wrong_type() -> object:
    log = _fresh("in-1")
    cid, command = B.accept_input(log.state(), "in-2")
    return log.evaluate(CommitRequest(log.position(), CommandEnvelope(
        "cancel_run", RUN, cid, command)))


def _effect_missing() -> object:
    log = _executing()
    blank = attrs.evolve(B.recover_model(log.state())[1], effect="")
    return log.evaluate(log.request("any-id", blank))


def _non_derived_id() -> object:
    log = _fresh("in-1")
    return log.evaluate(log.request("not-derived", B.accept_input(log.state(), "in-2")[1]))


def _ended_but_listed_active() -> object:
    log = _ended()
    view = _StaleProjection(Snapshot(log.state(), log.position()))
    return evaluate_commit(view, log.request(*B.accept_input(_fresh().state(), "in-2")))


def _prepare_base_ahead() -> object:
    log = _fresh("in-1")
    ahead = log.position() + 1
    return log.evaluate(log.request(*B.prepare(log.state(), ahead), base=ahead))


def _decide_refusal_at_commit() -> object:
    log = _prepared()
    return log.evaluate(log.request(*B.withdraw(log.state())))


def _prepare_step_not_derived() -> object:
    log = _fresh("in-1")
    cid, prepare = B.prepare(log.state(), log.position())
    return log.evaluate(log.request(cid, attrs.evolve(prepare, step_id="step-x")))


def _batch_of_two_runs() -> object:
    log = _fresh("in-1")
    log.create("run-2", ["x"])
    one = log.request(*B.accept_input(log.state(), "a"))
    two = log.request(*B.accept_input(log.state("run-2"), "a"), run_id="run-2")
    return check_batch([one, two])


def _fold_guard() -> object:
    accepted = F.InputAccepted(AgentInput("in-1", DIGEST))
    return fold_run((F.RunCreated(RUN), accepted, accepted), run_id=RUN)


# -- _decide.py ----------------------------------------------------------------------------


def _decide_on_ended_run() -> object:
    return decide(_ended().state(), C.AcceptInput((B.agent_input("in-2"),)))


def _decide_outside_the_table() -> object:
    return decide(_fresh("in-1").state(), C.StartModelExecution("step-x", "e" * 64))


def _decide_handler_refusal() -> object:
    log = _prepared()
    return decide(log.state(), B.withdraw(log.state())[1])


def _decide_conflict() -> object:
    return decide(_fresh("in-1").state(), C.AcceptInput((B.agent_input("in-1"),)))


# -- _evolve.py ----------------------------------------------------------------------------


def _evolve_guard() -> object:
    return evolve(_fresh("in-1").state(), F.InputAccepted(AgentInput("in-1", DIGEST)))


def _evolve_onto_zero_state() -> object:
    return evolve(None, F.InputAccepted(AgentInput("in-1", DIGEST)))


def _evolve_onto_ended_run() -> object:
    return evolve(_ended().state(), F.InputAccepted(AgentInput("in-2", DIGEST)))


def _evolve_lone_surrogate() -> object:
    log = _executing()
    completed, opened = decide(log.state(), B.model_result(
        log.state(), tool_calls=[("search", "{}")])[1])
    return evolve(evolve(log.state(), completed), attrs.evolve(opened, source="\ud800"))


Case = tuple[str, Callable[[], object], type[Exception], str]

CASES: list[Case] = [
    # validate_identity, through envelope and create_group (RUN-SCP)
    ("empty run id", lambda: envelope("", "c", C.CancelRun()), ValidationError,
     "run id must be a non-empty string"),
    ("run id not a str", lambda: validate_identity(7, "run id"),  # type: ignore[arg-type]
     ValidationError, "run id must be a non-empty string"),
    ("empty command id", lambda: envelope(RUN, "", C.CancelRun()), ValidationError,
     "command id must be a non-empty string"),
    ("run id not UTF-8", lambda: envelope("\ud800", "c", C.CancelRun()), ValidationError,
     "run id is not valid UTF-8"),
    ("command id not UTF-8", lambda: envelope(RUN, "\udfff", C.CancelRun()), ValidationError,
     "command id is not valid UTF-8"),
    ("envelope of a non-command",
     lambda: envelope(RUN, "c", "cancel"),  # type: ignore[arg-type]
     ValidationError, "not a command: 'cancel'"),
    ("derived ids of a non-command",
     lambda: expected_command_ids(RUN, 0, 7),  # type: ignore[arg-type]
     ValidationError, "not a command: 7"),
    # evaluate_commit, in the order of §4.3
    ("ended Run at locate", _run_ended_at_locate, RunTerminalError, "run 'run-1' has ended"),
    ("unknown Run", _run_not_found, RunNotFoundError, "run 'run-9' not found"),
    ("envelope with an empty id", _envelope_empty_id, CommandConflictError,
     "envelope ids are empty or name another Run"),
    ("envelope naming another Run", _envelope_other_run, CommandConflictError,
     "envelope ids are empty or name another Run"),
    ("envelope type of another command", _envelope_wrong_type, CommandConflictError,
     "envelope type does not name its command"),
    ("effect command without effect", _effect_missing, CommandConflictError,
     "start/settlement/recovery without an effect"),
    ("non-derived command id", _non_derived_id, CommandConflictError,
     "command id is not the derived one"),
    ("ended Run listed active", _ended_but_listed_active, RunTerminalError,
     "run 'run-1' has ended"),
    ("prepare base ahead", _prepare_base_ahead, StaleRuntimeError,
     "prepare base is not the current position"),
    ("decide refusal at commit", _decide_refusal_at_commit, StaleRuntimeError,
     "reload and derive again: WithdrawPreparedStep: withdraw needs pending inputs"),
    ("prepare step id not derived", _prepare_step_not_derived, StaleRuntimeError,
     "prepare step id is not derived from its command id"),
    # check_batch (RUN-CMT-9)
    ("empty batch", lambda: check_batch([]), ValidationError,
     "a batch needs at least one commit request"),
    ("batch item not a request", lambda: check_batch(["nope"]),  # type: ignore[list-item]
     ValidationError, "not a commit request: 'nope'"),
    ("batch of two Runs", _batch_of_two_runs, ValidationError,
     "the requests of a batch name different Runs"),
    # create_group (RUN-NEW-1)
    ("create with an empty run id", lambda: create_group(NewRun("")), ValidationError,
     "run id must be a non-empty string"),
    ("create with an input without digest",
     lambda: create_group(NewRun(RUN), (AgentInput("in-1", ""),)), ValidationError,
     "input needs an id and a digest"),
    ("create with an input without id",
     lambda: create_group(NewRun(RUN), (AgentInput("", DIGEST),)), ValidationError,
     "input needs an id and a digest"),
    ("create with a non-UTF-8 input id",
     lambda: create_group(NewRun(RUN), (AgentInput("\ud800", DIGEST),)), ValidationError,
     "input id is not valid UTF-8"),
    ("create with a duplicate input id",
     lambda: create_group(NewRun(RUN), (AgentInput("in-1", DIGEST),) * 2), ValidationError,
     "duplicate input id 'in-1'"),
    # fold_run (§2.11)
    ("log not starting with RunCreated",
     lambda: fold_run((F.InputAccepted(AgentInput("in-1", DIGEST)),)), CorruptLogError,
     "the first fact is not run_created"),
    ("empty log", lambda: fold_run(()), CorruptLogError, "empty log"),
    ("fact failing its guard", _fold_guard, CorruptLogError,
     "fact 2 (input_accepted) does not fold: InputAccepted: input already pending"),
    # decide (§2.8)
    ("decide on an ended Run", _decide_on_ended_run, RunTerminalError, "run run-1 is stopped"),
    ("decide outside the table", _decide_outside_the_table, PreconditionError,
     "StartModelExecution: not allowed in phase open"),
    ("decide handler refusal", _decide_handler_refusal, PreconditionError,
     "WithdrawPreparedStep: withdraw needs pending inputs"),
    ("decide identity conflict", _decide_conflict, CommandConflictError,
     "AcceptInput: input id 'in-1' already queued"),
    # evolve (§2.7)
    ("evolve guard", _evolve_guard, EvolveError, "InputAccepted: input already pending"),
    ("evolve onto the zero state", _evolve_onto_zero_state, EvolveError,
     "InputAccepted: only RunCreated folds onto the zero state"),
    ("evolve onto an ended Run", _evolve_onto_ended_run, EvolveError,
     "InputAccepted: the Run is stopped"),
    ("evolve of a non-fact", lambda: evolve(_fresh().state(), "fact"),  # type: ignore[arg-type]
     EvolveError, "str: not a fact"),
    ("evolve of a non-UTF-8 identity", _evolve_lone_surrogate, EvolveError,
     "ToolStepOpened: 'utf-8' codec can't encode character '\\ud800' in position 0: "
     "surrogates not allowed"),
    # ids (§3.2)
    ("bool identity part", lambda: derive("ns/bool", True), TypeError,
     "identity parts are str or int, not bool"),
    ("negative identity part", lambda: derive("ns/negative", -3), ValueError,
     "identity integer parts are unsigned, got -3"),
]


@pytest.mark.parametrize(("raise_it", "error", "text"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_the_exact_message(raise_it: Callable[[], object], error: type[Exception],
                           text: str) -> None:
    derive.cache_clear()  # the ids rows: computed here, not remembered from another test
    with pytest.raises(error) as info:
        raise_it()
    assert type(info.value) is error
    assert str(info.value) == text
    if hasattr(info.value, "message"):  # RunxError: the message attribute is the text too
        assert info.value.message == text


def test_every_row_is_a_distinct_site() -> None:
    """No two rows are the same scenario under two names (a copy would hide a missing
    site)."""
    assert len({c[0] for c in CASES}) == len(CASES)
    assert len({c[1] for c in CASES}) == len(CASES)


# -- guards that only a hand-built state reaches ------------------------------------------
# ``decide`` and ``evolve`` are public and take any MachineState; a state that no fold
# produces (validate_machine_state refuses it) must still be refused with the protocol's
# own error, not crash or be folded.


def _waiting_state() -> tuple[MachineState, ToolStep, ToolCallState]:
    log = B.SimpleLog.with_run(RUN, ["in-1"])
    log.apply(B.prepare(log.state(), log.position(),
                        tools=(B.tool_spec("deploy", policy=ResponsePolicy.APPROVAL_REQUIRED),)))
    log.apply(B.start_model(log.state()))
    log.apply(B.model_result(log.state(), tool_calls=[("deploy", "{}")]))
    state = log.state()
    step = state.current
    assert isinstance(step, ToolStep)
    return state, step, step.calls[0]


@pytest.mark.parametrize("broken", ["waiting without a request", "a request while pending"])
def test_a_response_to_a_call_that_is_not_waiting_is_refused(broken: str) -> None:
    """§2.7 F11/F13: a response folds only onto a call that is WAITING *and* holds the
    request it answers; either half missing is ``"call is not waiting"``."""
    state, step, call = _waiting_state()
    assert call.waiting is not None and call.status is ToolCallStatus.WAITING
    fact = F.ToolCallApproved(step_id=step.id, call_id=call.call_id,
                              response_id=call.waiting.id,
                              response_digest=decision_digest(ResponseKind.APPROVAL, "approved"))
    odd = (attrs.evolve(call, waiting=None) if broken == "waiting without a request"
           else attrs.evolve(call, status=ToolCallStatus.PENDING))
    hand_built = attrs.evolve(state, current=attrs.evolve(step, calls=(odd,)))
    with pytest.raises(EvolveError) as info:
        evolve(hand_built, fact)
    assert type(info.value) is EvolveError
    assert (info.value.reason, str(info.value)) == (  # type: ignore[attr-defined]
        "call is not waiting", "ToolCallApproved: call is not waiting")


def test_a_refusal_on_a_state_without_a_current_step_names_no_phase() -> None:
    """``PreconditionError.phase`` is the decide-table column, or None for a state with no
    current step: an ACTIVE state never lacks one when folded, but a hand-built one may."""
    hand_built = MachineState(run_id=RUN, status=RunStatus.ACTIVE, current=None)
    command = C.AcceptInput(())
    with pytest.raises(PreconditionError) as info:
        decide(hand_built, command)
    assert (info.value.reason, info.value.phase, str(info.value)) == (  # type: ignore[attr-defined]
        "empty input batch", None, "AcceptInput: empty input batch")


# -- errors raised by a value the caller passed -------------------------------------------
# A str subclass is a legal identity, and its comparison may raise anything: a
# PreconditionError / EvolveError raised that way carries no ``reason``; the commit path
# and the fold still answer with their own error, whose ``reason`` is then empty.


def _raising_id(error: type[Exception]) -> type[str]:
    class RaisingId(str):
        # every RaisingId hashes like "in-1", so the fold's set of pending ids compares
        # it with "in-1" (the per-fact scan compared every id; RUN-INP-2 made it a set)
        def __hash__(self) -> int:
            return hash("in-1")

        def __eq__(self, other: object) -> bool:
            raise error("boom")

        def __ne__(self, other: object) -> bool:
            raise error("boom")

    return RaisingId


def test_a_reasonless_refusal_while_deciding_becomes_stale_with_an_empty_reason() -> None:
    log = _prepared()
    cid, withdraw = B.withdraw(log.state())
    assert isinstance(withdraw, C.WithdrawPreparedStep)
    odd = attrs.evolve(withdraw, step_id=_raising_id(PreconditionError)(withdraw.step_id))
    derive.cache_clear()  # the derivation of ``odd``'s id must not compare it with a cached key
    try:
        with pytest.raises(StaleRuntimeError) as info:
            log.evaluate(log.request(cid, odd))
    finally:  # nor may a later test's equal plain id be compared with ``odd`` in the cache
        derive.cache_clear()
    assert type(info.value.__cause__) is PreconditionError
    assert (info.value.reason, str(info.value)) == (  # type: ignore[attr-defined]
        "", "reload and derive again: boom")


def test_a_reasonless_fold_error_becomes_corrupt_log_with_an_empty_reason() -> None:
    odd = AgentInput(_raising_id(EvolveError)("in-2"), DIGEST)
    with pytest.raises(CorruptLogError) as info:
        fold_run((F.RunCreated(RUN), F.InputAccepted(AgentInput("in-1", DIGEST)),
                  F.InputAccepted(odd)), run_id=RUN)
    assert (info.value.reason, info.value.index, str(info.value)) == (  # type: ignore[attr-defined]
        "", 2, "fact 2 (input_accepted) does not fold: boom")


class _NoStreams:
    """A view that lists the Run as active but answers no stream for any id: the batch
    overlay must answer for the Run it holds itself, not ask the base."""

    def __init__(self, log: B.SimpleLog) -> None:
        self.log = log

    def replay_facts(self, command_id: str, run_id: str) -> tuple[F.Fact, ...] | None:
        return self.log.replay_facts(command_id, run_id)

    def active(self, run_id: str) -> Snapshot | None:
        return self.log.active(run_id)

    def stream_exists(self, run_id: str) -> bool:
        return False


def test_a_batch_after_its_own_cancel_is_terminal_not_unknown() -> None:
    log = _fresh("in-1")
    cancel = log.request(*B.cancel(log.state()))
    accept = log.request(*B.accept_input(log.state(), "in-2"))
    decisions, error = evaluate_batch(_NoStreams(log), [cancel, accept])
    assert len(decisions) == 1
    assert type(error) is RunTerminalError
    assert str(error) == "run 'run-1' has ended"
