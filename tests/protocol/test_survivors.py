"""Direct tests of the guards mutation testing and seeded bugs found unguarded (issue 13).

Each test pins one guard of the pure core: the Prepare CAS both ways (a base *ahead* of
the Run as well as behind), ``evolve`` of ``ToolCallCompleted`` only from EXECUTING,
``derive_input_command_id`` over the whole batch, the ToolSpec name / digest check of a
Prepare, the envelope's type and command id, an input without a digest refused by
``decide`` (never an ``EvolveError``), and a replay of a known id after the Run ended.
The model checker catches the same defects as the core model's mutant variants
(``runx_actors.check.models._core_impl``); these fail first and point at the line.
"""

from __future__ import annotations

import hashlib

import attrs
import pytest

from runx_actors.protocol import commands as C
from runx_actors.protocol import facts as F
from runx_actors.protocol._decide import decide
from runx_actors.protocol._evolve import evolve
from runx_actors.protocol.commit import (
    CommandEnvelope,
    CommitRequest,
    Replay,
    evaluate_commit,
    fold_run,
)
from runx_actors.protocol.digests import digest_tool_output
from runx_actors.protocol.errors import (
    CommandConflictError,
    CorruptLogError,
    EvolveError,
    PreconditionError,
    StaleRuntimeError,
)
from runx_actors.protocol.ids import derive_input_command_id, derive_prepare_command_id
from runx_actors.protocol.state import ToolStep
from runx_actors.protocol.values import AgentInput, ToolCallStatus, ToolSpec
from runx_actors.testing import builders as B

RUN = "run-1"


def _executing_calls() -> B.SimpleLog:
    """A ToolStep of two direct calls, call 0 EXECUTING, call 1 PENDING."""
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    log.apply(B.prepare(log.state(), log.position(), tools=("search",)))
    log.apply(B.start_model(log.state()))
    log.apply(B.model_result(log.state(), tool_calls=[("search", "{}"), ("search", "{}")]))
    log.apply(B.start_tool(log.state(), 0))
    return log


def _completed(log: B.SimpleLog, index: int) -> F.ToolCallCompleted:
    cur = log.state().current
    assert isinstance(cur, ToolStep)
    call = cur.calls[index]
    return F.ToolCallCompleted(step_id=cur.id, call_id=call.call_id, effect=call.effect,
                               output_digest=digest_tool_output('{"ok":true}'))


def test_prepare_from_a_base_ahead_of_the_run_is_refused() -> None:
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    ahead = log.position() + 1
    built = B.prepare(log.state(), ahead)
    assert built[0] == derive_prepare_command_id(RUN, ahead)  # the id matches its base
    before = log.facts()
    with pytest.raises(StaleRuntimeError):
        log.apply(built, base=ahead)
    assert log.facts() == before
    behind = B.SimpleLog.with_run(RUN, ("in-1",))
    behind.apply(B.accept_input(behind.state(), "in-2"))
    with pytest.raises(StaleRuntimeError):
        behind.apply(B.prepare(behind.state(), behind.position() - 1),
                     base=behind.position() - 1)


def test_evolve_refuses_tool_call_completed_on_a_pending_call() -> None:
    log = _executing_calls()
    state = log.state()
    pending = _completed(log, 1)
    assert isinstance(state.current, ToolStep)
    assert state.current.calls[1].status is ToolCallStatus.PENDING
    with pytest.raises(EvolveError):
        evolve(state, pending)
    with pytest.raises(CorruptLogError) as ei:
        fold_run((*log.facts(), pending), run_id=RUN)
    assert ei.value.index == len(log.facts())


def test_fold_refuses_tool_call_completed_on_a_failed_call() -> None:
    """A call failed KNOWN (its effect set) does not flip to completed."""
    log = _executing_calls()
    completed = _completed(log, 0)
    log.apply(B.tool_failure(log.state(), 0))
    cur = log.state().current
    assert isinstance(cur, ToolStep) and cur.calls[0].status is ToolCallStatus.FAILED
    with pytest.raises(CorruptLogError):
        fold_run((*log.facts(), completed), run_id=RUN)


def test_input_command_id_hashes_every_input_of_the_batch() -> None:
    def framed(*parts: str) -> str:  # spec §3.2, independently of runx_actors.protocol.ids
        return hashlib.sha256(b"".join(b"%d:%s" % (len(p.encode()), p.encode())
                                       for p in parts)).hexdigest()

    batch = derive_input_command_id(RUN, "in-a", "in-b")
    assert batch == framed("twilight/input-command", RUN, "in-a", "in-b")
    assert batch != derive_input_command_id(RUN, "in-a")
    log = B.SimpleLog.with_run(RUN, ("in-0",))
    command = C.AcceptInput((B.agent_input("in-a"), B.agent_input("in-b")))
    with pytest.raises(CommandConflictError):
        log.commit(derive_input_command_id(RUN, "in-a"), command)


@pytest.mark.parametrize("broken", ["name", "digest"])
def test_prepare_refuses_tool_specs_that_do_not_match_the_request(broken: str) -> None:
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    cid, good = B.prepare(log.state(), log.position(), tools=("search", "fetch"))
    assert isinstance(good, C.PrepareModelRequest)
    first, second = good.tools
    spec = (attrs.evolve(first, name=second.name) if broken == "name"
            else attrs.evolve(first, definition_digest=second.definition_digest))
    assert isinstance(spec, ToolSpec)
    bad = attrs.evolve(good, tools=(spec, second))
    with pytest.raises(PreconditionError):
        decide(log.state(), bad)
    with pytest.raises(StaleRuntimeError):
        log.commit(cid, bad)


def test_envelope_type_must_name_its_command() -> None:
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    cid, command = B.accept_input(log.state(), "in-2")
    env = CommandEnvelope(C.CancelRun.WIRE_NAME, RUN, cid, command)
    with pytest.raises(CommandConflictError):
        log.submit(CommitRequest(log.position(), env))
    assert len(log.state().pending_inputs) == 1


def test_hand_built_envelope_with_an_empty_command_id_is_refused() -> None:
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    env = CommandEnvelope(C.CancelRun.WIRE_NAME, RUN, "", C.CancelRun("cancelled"))
    with pytest.raises(CommandConflictError):
        log.submit(CommitRequest(log.position(), env))
    assert log.state().result is None


def test_accept_input_without_a_digest_is_refused_by_decide() -> None:
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    command = C.AcceptInput((AgentInput("in-2", ""),))
    with pytest.raises(PreconditionError):
        decide(log.state(), command)
    with pytest.raises(StaleRuntimeError):  # the refusal, not EvolveError
        log.commit(derive_input_command_id(RUN, "in-2"), command)


def test_replay_of_a_known_id_after_the_run_ended_answers_already_applied() -> None:
    log = B.SimpleLog.with_run(RUN, ("in-1",))
    log.apply(B.cancel(log.state()))
    cid = log.commits[-1].commit_id
    request = log.request(cid, C.CancelRun("cancelled"))
    assert isinstance(evaluate_commit(log, request), Replay)
